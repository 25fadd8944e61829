#!/usr/bin/env bash
# Start-up time and peak resident memory of `catchat train` against the size
# of its training shards: one step of configs/tiny.ini (evaluation and the
# end's sample off), on shards of each size given, made here as sparse files
# (a valid header, then zeros: start-up reads the header and the digest's 64
# pieces of each file, so what the tokens hold does not matter to it).
#   bench/data_scale.sh BIN DIR [GB ...]     (default sizes 0.5 5 20; DIR needs no free space: sparse)
# Prints one line a size: GB, tokens, wall seconds of the whole run, peak RSS in MB.
set -eu
bin=$(realpath "$1")
dir=$2
shift 2
sizes=${*:-0.5 5 20}
root=$(cd "$(dirname "$0")/.." && pwd)
py=python3
[ -x "$root/.venv/bin/python" ] && py=$root/.venv/bin/python
mkdir -p "$dir"
# a small validation shard of real ids
"$py" - "$dir/val.bin" <<'PY'
import struct, sys
n = 100000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<3i", 20240520, 1, n) + bytes(4 * 253) + struct.pack(f"<{n}H", *(i % 256 for i in range(n))))
PY
for gb in $sizes; do
  # n tokens of 2 bytes after the 1024-byte header; at most 2^31 - 1 a shard (its count is an int32), so
  # larger sizes are several shards
  "$py" - "$dir" "$gb" <<'PY'
import os, struct, sys
d, gb = sys.argv[1], float(sys.argv[2])
total = int(gb * 1e9) // 2
per = min(total, 2**31 - 1)  # the header count is an int32 to other readers
k = 0
while total > 0:
    n = min(per, total)
    path = os.path.join(d, f"train_{sys.argv[2]}G_{k:03d}.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, n) + bytes(4 * 253))
        f.truncate(1024 + 2 * n)  # sparse: zeros, no disk
    total -= n
    k += 1
PY
  "$py" - "$bin" "$dir" "$gb" "$root/configs/tiny.ini" <<'PY'
import glob, os, resource, subprocess, sys, time
bin, d, gb, cfg = sys.argv[1:5]
files = sorted(glob.glob(os.path.join(d, f"train_{gb}G_*.bin")))
tokens = sum((os.path.getsize(f) - 1024) // 2 for f in files)
t0 = time.monotonic()
r = subprocess.run([bin, "train", "--config", cfg, "--set", "max_steps=1", "--set", "eval_interval=0",
                    "--quiet", "--sample-tokens", "0", "--force", "--set", "train=" + ",".join(files),
                    "--set", "val=" + os.path.join(d, "val.bin"), "--set", "out_dir=" + os.path.join(d, "run")],
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.monotonic() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
status = "ok" if r.returncode == 0 else f"exit {r.returncode}: {r.stderr.strip()[:200]}"
print(f"{gb:>5} GB  {tokens:>12,} tokens  {wall:7.2f} s  {rss:7.0f} MB peak RSS  {status}")
PY
  rm -f "$dir"/train_"${gb}"G_*.bin
done
