#!/usr/bin/env python3
"""PyTorch interop round trip: a catchat checkpoint loaded into the nn.GRU
model of scripts/catchat_torch.py gives catchat eval's loss on the same batch
(FP32, 1e-4 relative), and a PyTorch-initialised model saved as safetensors
evaluates identically in catchat and trains there. A checkpoint with a flipped
byte of tensor data or a changed metadata digit is refused as catchat refuses it
(one line, exit 1), files without the checksums load unchecked, and without
xxhash the refusal names what to install and --no-verify.
   tests/test_torch_interop.py path/to/catchat     (exit 77 = skipped: no torch)"""
import atexit, json, os, random, shutil, struct, subprocess, sys, tempfile

try:
    import torch
except ImportError:  # Debian's python3-torch lives beside the system interpreter
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        probe = subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True)
        if probe.returncode == 0:
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("torch is not installed: skipped")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from catchat_torch import CatchatModel, batch_loss, first_batch, load_catchat, save_catchat  # noqa: E402

BIN = os.path.realpath(sys.argv[1])
tmp = tempfile.mkdtemp()
atexit.register(shutil.rmtree, tmp, True)
random.seed(4)
words = "the cat sat on a mat and the dog ran far it was good we see".split()
for name, n in (("train.txt", 30000), ("val.txt", 4000)):
    open(f"{tmp}/{name}", "w").write("".join(random.choice(words) + random.choice("  .\n") for _ in range(n // 4)))
sets = ["--set", f"train={tmp}/train.txt", "--set", f"val={tmp}/val.txt"]
tiny = ["--config", f"{ROOT}/configs/tiny.ini"]


def catchat_eval(ckpt, extra=()):
    out = subprocess.run([BIN, "eval", "--ckpt", ckpt, "--data", f"{tmp}/val.txt", "--batches", "1", "--json"]
                         + list(extra), check=True, capture_output=True, text=True).stdout
    return json.loads(out)["loss"]


# 1. catchat -> PyTorch
subprocess.run([BIN, "train"] + tiny + sets + ["--set", "max_steps=8", "--set", f"out_dir={tmp}/run", "--quiet",
                "--sample-tokens", "0"], check=True)
ckpt = f"{tmp}/run/checkpoint.safetensors"
model, cfg = load_catchat(ckpt)
x, y = first_batch(f"{tmp}/val.txt", cfg["train"]["batch_size"], cfg["model"]["seq_len"])
with torch.no_grad():
    torch_loss = batch_loss(model, x, y).item()
c_loss = catchat_eval(ckpt)
rel = abs(torch_loss - c_loss) / c_loss
print(f"catchat eval {c_loss:.7f}, PyTorch nn.GRU model {torch_loss:.7f}, rel diff {rel:.2e}")
assert rel < 1e-4, rel

# 2. PyTorch -> catchat: a model initialised by PyTorch, saved as safetensors
torch.manual_seed(11)
fresh = CatchatModel(cfg["model"])
with torch.no_grad():
    ref = batch_loss(fresh, x, y).item()
save_catchat(fresh, f"{tmp}/torch_init.safetensors", cfg)
c_fresh = catchat_eval(f"{tmp}/torch_init.safetensors")
rel2 = abs(ref - c_fresh) / ref
print(f"PyTorch-initialised model: PyTorch {ref:.7f}, catchat eval {c_fresh:.7f}, rel diff {rel2:.2e}")
assert rel2 < 1e-4, rel2
subprocess.run([BIN, "train"] + tiny + sets + ["--set", "max_steps=20", "--set", "lr=1e-2", "--set",
                f"out_dir={tmp}/from_torch", "--init", f"{tmp}/torch_init.safetensors", "--quiet",
                "--sample-tokens", "0"], check=True)
rows = open(f"{tmp}/from_torch/telemetry.csv").read().splitlines()[1:]
losses = [float(r.split(",")[2]) for r in rows]
print(f"catchat trained it: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
assert losses[-1] < losses[0] - 0.3, losses


# 3. Damage is refused: the CLI says it in one line and exits 1, load_catchat
# raises, catchat itself refuses the same file the same way.
def cli(path, *extra, pre=""):
    """catchat_torch.py's CLI on path; pre: Python run first in the same process."""
    run = ["-c", "import sys; sys.argv = sys.argv[1:]; " + pre +
           "import runpy; runpy.run_path(sys.argv[0], run_name='__main__')"] if pre else []
    return subprocess.run([sys.executable, *run, f"{ROOT}/scripts/catchat_torch.py", path, f"{tmp}/val.txt", *extra],
                          capture_output=True, text=True)


def refused(path, part, pre=""):
    r = cli(path, pre=pre)
    assert r.returncode == 1 and not r.stdout, (path, r.returncode, r.stdout)
    assert r.stderr.startswith("catchat_torch: ") and r.stderr.count("\n") == 1 and part in r.stderr, r.stderr
    return r.stderr.strip()


def with_meta(src, dst, drop=(), sub=None):
    """src with __metadata__ keys dropped (rewritten header) or one header string replaced in place."""
    blob = open(src, "rb").read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    head, data = blob[8:8 + hlen], blob[8 + hlen:]
    if sub:
        assert head.count(sub[0]) == 1 and len(sub[0]) == len(sub[1]), sub
        head = head.replace(*sub)
    if drop:
        h = json.loads(head)
        for k in drop:
            del h["__metadata__"][k]
        head = json.dumps(h).encode()
        head += b" " * (-len(head) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(head)) + head + data)
    return dst


def flip_data(src, dst, at=1000):
    blob = bytearray(open(src, "rb").read())
    blob[8 + struct.unpack("<Q", blob[:8])[0] + at] ^= 0x01
    open(dst, "wb").write(blob)
    return dst


intact = cli(ckpt)
assert intact.returncode == 0 and f"loss {torch_loss:.6f}" in intact.stdout, (intact.stdout, intact.stderr)
damaged = {"the tensor data is damaged": flip_data(ckpt, f"{tmp}/data_flip.safetensors"),
           "the header (metadata": with_meta(ckpt, f"{tmp}/meta_flip.safetensors", sub=(b'"step":"8"', b'"step":"9"'))}
for part, path in damaged.items():
    line = refused(path, f"{path}: checksum mismatch: {part}")
    c = subprocess.run([BIN, "eval", "--ckpt", path, "--data", f"{tmp}/val.txt", "--batches", "1"],
                       capture_output=True, text=True)
    assert c.returncode != 0 and f"checksum mismatch: {part}" in c.stderr, c.stderr
    try:
        load_catchat(path)
        raise AssertionError(f"load_catchat loaded the damaged {path}")
    except ValueError as e:
        assert f"checksum mismatch: {part}" in str(e), e
    assert cli(path, "--no-verify").returncode == 0, path  # the opt-out loads it as it is
    print(f"refused: {line[:110]}...")
# as catchat: a file without header_xxh64 (catchat 0.7) has its data checked
# alone, one without either (another tool's, save_catchat's) loads unchecked
old = with_meta(ckpt, f"{tmp}/old.safetensors", drop=["header_xxh64"])
old_meta = with_meta(old, f"{tmp}/old_meta.safetensors", sub=(b'"step": "8"', b'"step": "9"'))
assert cli(old_meta).returncode == 0 and load_catchat(old_meta)[1] == cfg
refused(flip_data(old, f"{tmp}/old_flip.safetensors"), "checksum mismatch: the tensor data is damaged")
bare = flip_data(ckpt, f"{tmp}/bare.safetensors")
with_meta(bare, bare, drop=["data_xxh64", "header_xxh64"])
assert cli(bare).returncode == 0 and cli(f"{tmp}/torch_init.safetensors").returncode == 0
for path in (old_meta, bare):
    catchat_eval(path)  # catchat takes both too
load_catchat(f"{tmp}/torch_init.safetensors")

# 4. Without the xxhash module and libxxhash, a checkpoint with checksums is
# one line naming what to install and --no-verify; --no-verify loads it, and a
# file without checksums needs neither.
hide = ("import ctypes, ctypes.util; sys.modules['xxhash'] = None; ctypes.util.find_library = lambda n: None; "
        "real = ctypes.CDLL; ctypes.CDLL = lambda name, *a, **k: "
        "(_ for _ in ()).throw(OSError(name)) if 'xxhash' in str(name) else real(name, *a, **k); ")
line = refused(ckpt, "pip install xxhash", pre=hide)
assert "libxxhash0" in line and "--no-verify" in line, line
assert cli(ckpt, "--no-verify", pre=hide).returncode == 0
assert cli(f"{tmp}/torch_init.safetensors", pre=hide).returncode == 0
print("4 passed, 0 failed")
