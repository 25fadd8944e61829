#!/usr/bin/env python3
"""PyTorch interop round trip: a catchat checkpoint loaded into the nn.GRU
model of scripts/catchat_torch.py gives catchat eval's loss on the same batch
(FP32, 1e-4 relative), and a PyTorch-initialised model saved as safetensors
evaluates identically in catchat and trains there.
   tests/test_torch_interop.py path/to/catchat     (exit 77 = skipped: no torch)"""
import atexit, json, os, random, shutil, subprocess, sys, tempfile

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
print("2 passed, 0 failed")
