#!/usr/bin/env python3
"""The TensorBoard event file the trainer writes reads back with TensorBoard's
own reader, with the same values as the telemetry CSV.
   tests/test_tfevents.py path/to/catchat     (exit 77 = skipped: no tensorboard)"""
import atexit, csv, glob, os, shutil, random, subprocess, sys, tempfile

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard is not installed: skipped")
    sys.exit(77)

BIN = os.path.realpath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
tmp = tempfile.mkdtemp()
atexit.register(shutil.rmtree, tmp, True)
random.seed(2)
words = "the cat sat on a mat and the dog ran far".split()
for name, n in (("train.txt", 20000), ("val.txt", 3000)):
    open(f"{tmp}/{name}", "w").write("".join(random.choice(words) + " " for _ in range(n // 4)))
subprocess.run([BIN, "train", "--config", f"{ROOT}/configs/tiny.ini", "--quiet", "--sample-tokens", "40",
                "--set", "max_steps=12", "--set", "eval_interval=5", "--set", f"train={tmp}/train.txt",
                "--set", f"val={tmp}/val.txt", "--set", f"out_dir={tmp}/run"], check=True)
files = glob.glob(f"{tmp}/run/events.out.tfevents.*")
assert len(files) == 1, files
acc = EventAccumulator(files[0])
acc.Reload()
tags = set(acc.Tags()["scalars"])
for t in ("train/loss", "train/lr", "train/loss_scale", "train/grad_norm", "perf/tokens_per_s", "eval/loss",
          "eval/top1", "eval/top5", "train/epoch", "perf/elapsed_s", "eval/overfitting_evals"):
    assert t in tags, (t, tags)
rows = list(csv.DictReader(open(f"{tmp}/run/telemetry.csv")))
loss = {e.step: e.value for e in acc.Scalars("train/loss")}
assert sorted(loss) == list(range(1, 13)), sorted(loss)
for r in rows:
    assert abs(loss[int(r["step"])] - float(r["loss"])) <= 1e-5 * abs(float(r["loss"])), r["step"]
ev = {e.step: e.value for e in acc.Scalars("eval/top5")}
assert sorted(ev) == [5, 10, 12], sorted(ev)
for r in rows:
    if r["eval_top5"]:
        assert abs(ev[int(r["step"])] - float(r["eval_top5"])) < 1e-5
# the epoch grows with the data consumed; the sample is a text summary at the last step, equal to sample.txt
epoch = [e.value for e in acc.Scalars("train/epoch")]
assert all(b > a for a, b in zip(epoch, epoch[1:])), epoch
assert "sample" in acc.Tags()["tensors"], acc.Tags()
(sample,) = acc.Tensors("sample")
assert sample.step == 12, sample.step
text = sample.tensor_proto.string_val[0]
text.decode("utf-8")  # TensorBoard's text tab needs UTF-8: bytes that are not became U+FFFD
raw = open(f"{tmp}/run/sample.txt", "rb").read()
try:
    assert text == raw.decode("utf-8").encode(), (text[:60], raw[:60])
except UnicodeDecodeError:
    assert len(text) >= len(raw), (text[:60], raw[:60])
print(f"tfevents: {len(tags)} scalar tags, 12 steps, values equal the CSV; the sample as text")
print("1 passed, 0 failed")
