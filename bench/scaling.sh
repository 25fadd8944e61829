#!/usr/bin/env bash
# Scaling table: catchat (bench --json) and the same model in PyTorch, side by
# side in one call, around the default config (D=512, L=3, H=8, W=128, T=512,
# B=64): one dimension varied at a time. JSON lines to stdout.
#   bench/scaling.sh BIN [pytorch modes, default eager]
set -u
bin=$1 modes=${2:-eager}
run() { # D B T
  "$bin" bench --config configs/default.ini --set device=gpu --set d_model=$1 --set batch_size=$2 \
    --set seq_len=$3 --steps 10 --warmup 3 --cpu-steps 0 --json
  python3 bench/pytorch_model.py --d $1 --batch $2 --seq $3 --steps 10 --warmup 3 --modes "$modes"
}
for D in 256 512 1024 2048; do run $D 64 512; done
for B in 16 256; do run 512 $B 512; done
for T in 128 2048; do run 512 64 $T; done
