#!/usr/bin/env bash
# Two builds of catchat, the same numbers and the same speed, as users run
# them (the preflight on): ten training steps of configs/default.ini on each
# build (as planned; recompute = on; layer after layer; 2 and 4 lanes; the
# default data: scripts/prepare_data.sh),
# compared bit for bit (every step's loss in telemetry.csv and every tensor
# of the checkpoint), then bench's default step and recompute = on, the two
# builds alternating, ROUNDS rounds (default 3).
#   bench/same_numbers.sh OLD_CATCHAT NEW_CATCHAT [OUTDIR] [ROUNDS] [--bench-only]
# ROUNDS 0: the training steps only; --bench-only: the rounds only.
# Exit status 1 where a case differs. Needs a GPU and python3 with numpy.
set -u
old=$1 new=$2 out=${3:-/tmp/same_numbers} rounds=${4:-3} only=${5:-}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
cfg=$here/configs/default.ini
status=0
if [ "$only" != --bench-only ] && [ ! -f "$here/data/fortunes/train.txt" ]; then
    echo "same_numbers: no $here/data/fortunes/train.txt (configs/default.ini's [data] train): run scripts/prepare_data.sh first" >&2
    exit 2
fi

# The tensors of two safetensors files byte for byte (scripts/compare_state.py's reader): the names of those that differ.
compare_tensors() {
    python3 - "$here/scripts" "$1" "$2" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from compare_state import load
a, b = load(sys.argv[2]), load(sys.argv[3])
diff = sorted(k for k in set(a) | set(b) if k not in a or k not in b or a[k].tobytes() != b[k].tobytes())
print(f"{len(a)} tensors, {len(diff)} differ{': ' + ' '.join(diff[:8]) if diff else ''}")
sys.exit(1 if diff or not a else 0)
PY
}

cases="default|
recompute|--set gpu.recompute=on
layers|--set gpu.wavefront=off
lanes2|--set gpu.lanes=2
lanes4|--set gpu.lanes=4"
[ "$only" = --bench-only ] && cases=""

# every case's runs on both builds at once: the numbers do not depend on the timing
while IFS='|' read -r name sets; do
    [ -n "$name" ] || continue
    for which in old new; do
        bin=$old; [ $which = new ] && bin=$new
        dir=$out/$name.$which
        rm -rf "$dir"
        # shellcheck disable=SC2086
        "$bin" train --config "$cfg" --set device=gpu --set max_steps=10 --set eval_interval=0 \
            --set checkpoint_interval=10 --set out_dir="$dir" --sample-tokens 0 --quiet $sets \
            > "$out/$name.$which.log" 2>&1 &
    done
done <<< "$cases"
wait
while IFS='|' read -r name sets; do
    [ -n "$name" ] || continue
    losses_old=$(cut -d, -f1-3 "$out/$name.old/telemetry.csv" 2>/dev/null | tail -n +2 | tr '\n' ' ')
    losses_new=$(cut -d, -f1-3 "$out/$name.new/telemetry.csv" 2>/dev/null | tail -n +2 | tr '\n' ' ')
    tensors=$(compare_tensors "$out/$name.old/checkpoint.safetensors" "$out/$name.new/checkpoint.safetensors" 2>&1)
    ok=$?
    [ "$losses_old" = "$losses_new" ] && [ -n "$losses_new" ] || ok=1
    echo "$name (${sets:-as planned}): step,tokens,loss ${losses_new:-none}"
    echo "  checkpoint: $tensors; $([ $ok = 0 ] && echo same || echo DIFFERENT)"
    [ $ok = 0 ] || { status=1; tail -2 "$out/$name.old.log" "$out/$name.new.log"; }
done <<< "$cases"

for r in $(seq 1 "$rounds"); do
    for sets in "" "--set gpu.recompute=on"; do
        # the build that goes first swaps each round
        order="old new"; [ $((r % 2)) = 0 ] && order="new old"
        for which in $order; do
            bin=$old; [ $which = new ] && bin=$new
            echo "== round $r $which ${sets:-default}"
            # shellcheck disable=SC2086
            "$bin" bench --config "$cfg" --set device=gpu --cpu-steps 0 --steps 30 --warmup 5 $sets \
                > "$out/bench.$r.$which.${sets:+recompute}" 2>&1
            grep -E "^GPU step|^device memory|^  [a-zA-Z]" "$out/bench.$r.$which.${sets:+recompute}"
        done
    done
done
exit $status
