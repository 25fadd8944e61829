#!/usr/bin/env bash
# On the GPU machine: the stability tools (provenance, audit, bisect, the cost
# of --check-finite) and the NCCL paths at world size 1 (plain vs env vs mpirun).
#   scripts/gpu_stability_dist.sh BIN OUT
set -uo pipefail
bin=$1 out=$2
mkdir -p "$out"
cfg=(--config configs/default.ini --set device=gpu)
med() { python3 -c "import csv,statistics,sys; r=list(csv.DictReader(open(sys.argv[1]))); print(statistics.median(float(x['step_ms']) for x in r[3:]))" "$1"; }
{
  echo "== NaN provenance on the GPU (planted NaN, --check-finite)"
  for t in gru.1.weight_hh ctx.out.weight lm_head.weight; do
    "$bin" train "${cfg[@]}" --set max_steps=2 --set out_dir=/tmp/pv --check-finite --plant-nan $t --quiet 2>&1
    echo "rc=$?"
  done
  echo "== cost of --check-finite (default config, median step of 20)"
  "$bin" train "${cfg[@]}" --set max_steps=20 --set eval_interval=0 --set out_dir=/tmp/c0 --quiet --sample-tokens 0
  "$bin" train "${cfg[@]}" --set max_steps=20 --set eval_interval=0 --set out_dir=/tmp/c1 --quiet --sample-tokens 0 --check-finite
  echo "without: $(med /tmp/c0/telemetry.csv) ms, with: $(med /tmp/c1/telemetry.csv) ms"
  echo "== audit cpu vs gpu, default config, one sequence of 512"
  "$bin" audit "${cfg[@]}" --length 512; echo "rc=$?"
  "$bin" audit "${cfg[@]}" --length 512 --plant unscale | tail -2; echo "rc=$?"
} >"$out/stability.txt" 2>&1
cat "$out/stability.txt"
"$bin" bisect "${cfg[@]}" --lengths 64,128,256,512 --steps 50 >"$out/bisect.txt" 2>&1; cat "$out/bisect.txt"
{
  echo "== world size 1: plain, env bootstrap, mpirun bootstrap (30 steps each)"
  "$bin" train "${cfg[@]}" --set max_steps=30 --set out_dir=/tmp/d0 --quiet --sample-tokens 0 --dist none; echo "plain rc=$?"
  rm -f /tmp/ncclid
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "$bin" train "${cfg[@]}" --set max_steps=30 --set out_dir=/tmp/d1 --sample-tokens 0 \
    --dist env --dist-id /tmp/ncclid >/tmp/d1.log 2>&1; echo "env rc=$?: $(head -1 /tmp/d1.log)"
  mpirun --allow-run-as-root -np 1 "$bin" train "${cfg[@]}" --set max_steps=30 --set out_dir=/tmp/d2 --sample-tokens 0 \
    --dist mpi >/tmp/d2.log 2>&1; echo "mpi rc=$?: $(head -1 /tmp/d2.log)"; grep -i error /tmp/d2.log | head -3
  for k in 1 2; do
    if cmp <(cut -d, -f1,3 /tmp/d0/telemetry.csv) <(cut -d, -f1,3 /tmp/d$k/telemetry.csv); then
      echo "run $k: losses identical to the plain path ($(tail -1 /tmp/d0/telemetry.csv | cut -d, -f3) at step 30)"
    else echo "run $k: LOSSES DIFFER"; paste -d' ' <(cut -d, -f3 /tmp/d0/telemetry.csv) <(cut -d, -f3 /tmp/d$k/telemetry.csv) | head -5; fi
  done
  echo "== ladder, world size 1 through NCCL (stage 10 runs the all-reduce)"
  RANK=0 WORLD_SIZE=1 "$bin" ladder --dist env --dist-id /tmp/ncclid2 | tail -3
} >"$out/dist.txt" 2>&1
cat "$out/dist.txt"
