#!/usr/bin/env bash
# What shares the GPU with a full-grid persistent recurrence: the weight
# gradient GEMMs of the layer above (side stream) and the NCCL all-reduce
# (allreduce_overlap). A cooperative grid is admitted only when all of its
# CTAs can be resident, so a grid of every SM waits for whatever holds one.
# For each config: the step's median time with the recurrence's grid on every
# SM the plan may use and on 8 and 16 fewer ([gpu] sm_count), the phase
# breakdown, and (where nsys is installed) a kernel trace of one step: when
# each BPTT kernel started against the end of the kernels before it.
#   bench/overlap.sh BIN OUT
# BIN: a built catchat; OUT: a folder for the logs. Needs a GPU.
set -u
bin=$1 out=$2
mkdir -p "$out"
export XDG_CACHE_HOME=$out/xdg
# name|SMs the plan may use (the H200's, or the profile's: gpu_caps.c)|settings
cfgs=("native D=1024|132|--set d_model=1024 --set n_heads=8"
      "sm86 D=512|82|--set gpu.profile=sm86"
      "sm86 D=1024|82|--set gpu.profile=sm86 --set d_model=1024 --set n_heads=8")
median_ms() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu_ms"])' "$1"; }
for c in "${cfgs[@]}"; do
  IFS='|' read -r name sms sets <<<"$c"
  for less in 0 8 16; do
    n=$((sms - less))
    tag="${name// /_}_sm$n"
    "$bin" bench --config configs/default.ini $sets --set gpu.sm_count=$n --steps 20 --warmup 5 --cpu-steps 0 \
      --json >"$out/$tag.json" 2>"$out/$tag.err"
    echo "$name, recurrence on $n SMs: $(median_ms "$out/$tag.json") ms/step"
  done
  "$bin" bench --config configs/default.ini $sets --steps 5 --warmup 2 --cpu-steps 0 2>&1 | \
    grep -E "GPU step|recurrence|BPTT|weight GEMMs|why:" | sed "s/^/  $name: /"
  if command -v nsys >/dev/null; then
    tag="${name// /_}"
    nsys profile -o "$out/$tag" --force-overwrite true -t cuda "$bin" bench --config configs/default.ini $sets \
      --steps 3 --warmup 2 --cpu-steps 0 >/dev/null 2>&1
    nsys stats -q --report cuda_gpu_trace --format csv -o "$out/$tag" "$out/$tag.nsys-rep" >/dev/null 2>&1
    python3 - "$out/${tag}_cuda_gpu_trace.csv" "$name" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("Name")]
ks = [(int(r["Start (ns)"]), int(r["Start (ns)"]) + int(r["Duration (ns)"]), r["Name"], r.get("Strm", "")) for r in rows]
ks.sort()
bptt = [k for k in ks if "backward_grid" in k[2] or "backward_persistent" in k[2]]
# the last step's BPTT kernels: how long after the previous kernel on another stream ended each one began
for b in bptt[-3:]:
    before = [k for k in ks if k[0] < b[0] and k[3] != b[3]]
    last_end = max((k[1] for k in before), default=b[0])
    running = [k[2][:40] for k in before if k[1] > b[0]]
    print(f"  {sys.argv[2]}: BPTT on stream {b[3]} ran {b[0]/1e6:.3f}-{b[1]/1e6:.3f} ms; "
          f"other streams' kernels ended {(b[0]-last_end)/1e3:+.1f} us before it began; still running: {running or 'none'}")
PY
  fi
done
