#!/usr/bin/env bash
# Everything the GPU issue asks to see on the H200, in one device call:
# the ladder, compute-sanitizer over it, a training run on the default config,
# and dump-state GPU vs CPU on the same checkpoint and batch.
#   scripts/gpu_check.sh BIN OUT [STEPS]
# BIN: a built catchat; OUT: where logs go. Expects data/fortunes/ to exist.
set -uo pipefail
bin=$1 out=$2 steps=${3:-1000}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
date -u +%Y-%m-%dT%H:%MZ >>"$out/gpu.txt"
echo "== ladder"
"$bin" ladder | tee "$out/ladder.txt"
"$bin" ladder --markdown >"$out/ladder.md" 2>&1
# One stage per run: memcheck stops a process at the first kernel it faults, and it
# reports the cluster GRU kernels' bulk copies (stages 5-6; docs/ladder.md).
echo "== compute-sanitizer memcheck (ladder, stage by stage)" | tee "$out/sanitizers.txt"
for k in 1 2 3 4 5 6 7 8 9 10 11; do
  compute-sanitizer --tool memcheck --print-limit 20 "$bin" ladder --stage $k >/tmp/memcheck.txt 2>&1
  echo "memcheck stage $k rc=$?: $(grep -c 'Invalid' /tmp/memcheck.txt) invalid accesses;" \
    "$(grep -m 1 -o 'at [a-z_]*' /tmp/memcheck.txt) $(tail -1 /tmp/memcheck.txt)" | tee -a "$out/sanitizers.txt"
done
echo "== compute-sanitizer racecheck (stages whose kernels use shared memory)" | tee -a "$out/sanitizers.txt"
for k in 3 5 6 7 8 10 11; do
  compute-sanitizer --tool racecheck "$bin" ladder --stage $k >/tmp/racecheck.txt 2>&1
  echo "racecheck stage $k rc=$?: $(tail -1 /tmp/racecheck.txt)" | tee -a "$out/sanitizers.txt"
done
echo "== train configs/default.ini, $steps steps"
"$bin" train --config configs/default.ini --set device=gpu --set max_steps=$steps --set out_dir="$out/run" \
  --sample-tokens 200 >"$out/train.log" 2>&1; echo "train rc=$?"
grep -E "eval" "$out/train.log" | tail -4
tail -4 "$out/train.log"
echo "== dump-state gpu vs cpu"
ck="$out/run/checkpoint.safetensors"
for d in gpu cpu; do
  "$bin" dump-state --config configs/default.ini --set batch_size=8 --ckpt "$ck" --device $d \
    --out "$out/state_$d.safetensors" 2>&1 | tail -1
done
python3 scripts/compare_state.py "$out/state_gpu.safetensors" "$out/state_cpu.safetensors" | tee "$out/dump_compare.txt"
rm -f "$out"/state_*.safetensors "$out/run/checkpoint.safetensors"
