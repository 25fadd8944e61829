#!/usr/bin/env bash
# Every shape a user turns, side by side with the same model in PyTorch, in
# one call on the GPU machine: catchat's `bench --json` (the preflight on, as
# a user runs it) and bench/pytorch_model.py at each shape, PyTorch eager (and
# torch.compile with COMPILE=1: the faster of the two counts). The shapes are
# configs/default.ini (D=512 L=3 H=8 W=128 T=512 B=64 V=256) with one knob
# turned: the width at 8 heads (512 to 2048 in steps of 256), B=256 at 512 and
# 1024, the window (64 to 512), the heads (4 and 16), the layers (6 and 12),
# and T=1024 at B=32.
#
#   bench/shapes.sh OUT.jsonl [BIN]        BIN: the catchat binary (default build/catchat)
#
# Appends one JSON line a shape to OUT.jsonl: "shape", catchat's bench object
# under "catchat" (its "attention" and "rec_impl" say which kernels ran and
# "rec_why" why), PyTorch's eager (and compile) objects under "pytorch", and
# "lead" = PyTorch's best ms / catchat's ms; a side that could not run has
# "skipped": why. A table of the same goes to stdout. Both sides time random
# tokens below V (bench points train at a file that does not exist, and says
# so on stderr: expected).
#
# Environment: SHAPES (names from the list below, run in that order; default
# all), STEPS/WARMUP
# (catchat, 20/5), PT_STEPS/PT_WARMUP (PyTorch, 10/3), COMPILE (0), PYTHON
# (python3), PT_TIMEOUT (seconds a PyTorch run may take, 240), EXTRA (more
# --set key=value for catchat, e.g. "gpu.attention=tiled").
set -u
if [ $# -lt 1 ] || [ $# -gt 2 ]; then sed -n 11p "$0" | sed "s/^# *//" >&2; exit 2; fi
out=$1 bin=${2:-build/catchat}
case $out in /*) ;; *) out=$PWD/$out ;; esac
case $bin in /*) ;; */*) bin=$PWD/$bin ;; *) bin=$(command -v "$bin" || echo "$bin") ;; esac
cd "$(dirname "$0")/.." || exit 1
py=${PYTHON:-python3}

# name D L H W T B
all_shapes="
d512 512 3 8 128 512 64
d768 768 3 8 128 512 64
d1024 1024 3 8 128 512 64
d1280 1280 3 8 128 512 64
d1536 1536 3 8 128 512 64
d1792 1792 3 8 128 512 64
d2048 2048 3 8 128 512 64
d512_b256 512 3 8 128 512 256
d1024_b256 1024 3 8 128 512 256
w64 512 3 8 64 512 64
w256 512 3 8 256 512 64
w512 512 3 8 512 512 64
h4 512 3 4 128 512 64
h16 512 3 16 128 512 64
l6 512 6 8 128 512 64
l12 512 12 8 128 512 64
t1024 512 3 8 128 1024 32
"
# the shapes to run, in the order SHAPES names them (default: all, as listed)
if [ -n "${SHAPES:-}" ]; then
    picked=$(for n in $SHAPES; do echo "$all_shapes" | awk -v n="$n" '$1 == n'; done)
else
    picked=$all_shapes
fi
printf "%-11s %10s %10s %7s  %-40s %s\n" shape catchat_ms pytorch_ms lead attention recurrence
echo "$picked" | while read -r name D L H W T B; do
    [ -n "$name" ] || continue
    sets=(--set model.d_model="$D" --set model.n_layers="$L" --set model.n_heads="$H" --set model.ctx_window="$W"
          --set model.seq_len="$T" --set train.batch_size="$B" --set data.train=/nonexistent/shapes.txt)
    for e in ${EXTRA:-}; do sets+=(--set "$e"); done
    cat_json=$("$bin" bench --config configs/default.ini "${sets[@]}" --json --cpu-steps 0 \
               --steps "${STEPS:-20}" --warmup "${WARMUP:-5}" 2>/tmp/shapes_err.$$ | tail -1)
    if ! echo "$cat_json" | "$py" -c "import json,sys; json.loads(sys.stdin.read())" 2>/dev/null; then
        why=$(grep -v "random tokens" /tmp/shapes_err.$$ | tail -1)
        cat_json=$("$py" -c "import json,sys; print(json.dumps({'skipped': sys.argv[1]}))" "catchat bench failed: $why")
    fi
    grep -v "random tokens" /tmp/shapes_err.$$ >&2
    modes=eager
    [ "${COMPILE:-0}" = 1 ] && modes=eager,compile
    pt=$(timeout "${PT_TIMEOUT:-240}" "$py" bench/pytorch_model.py --d "$D" --layers "$L" --heads "$H" --window "$W" \
         --seq "$T" --batch "$B" --modes "$modes" --steps "${PT_STEPS:-10}" --warmup "${PT_WARMUP:-3}" 2>/dev/null)
    [ -n "$pt" ] || pt='{"skipped": "pytorch_model.py printed nothing (timeout or crash)"}'
    "$py" - "$name" "$cat_json" "$pt" "$out" <<'EOF'
import json, sys
name, cat, pt, out = sys.argv[1], json.loads(sys.argv[2]), [json.loads(l) for l in sys.argv[3].splitlines() if l.strip()], sys.argv[4]
ms = [p.get("ms") or p.get("step_ms") for p in pt if not p.get("skipped")]
ms = [m for m in ms if m]
best = min(ms) if ms else None
cms = cat.get("gpu_ms")
lead = best / cms if best and cms else None
row = {"shape": name, "catchat": cat, "pytorch": pt, "pytorch_best_ms": best, "lead": lead}
open(out, "a").write(json.dumps(row) + "\n")
f = lambda v, p: ("%.*f" % (p, v)) if isinstance(v, (int, float)) else "-"
print("%-11s %10s %10s %7s  %-40s %s" % (name, f(cms, 2), f(best, 1), f(lead, 2) + ("x" if lead else ""),
      (cat.get("attention") or cat.get("skipped") or "-")[:40], cat.get("rec_impl") or "-"))
EOF
done
rm -f /tmp/shapes_err.$$
