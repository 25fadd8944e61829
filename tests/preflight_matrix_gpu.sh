#!/usr/bin/env bash
# What users run, with the preflight on (as every user starts it): train and
# bench at the default config and at each [gpu], model and batch setting a
# user turns (recompute off, on, and auto under a memory_limit that forces
# it; lanes 1, 2, 4; the wavefront off; CUDA graphs on and off; schedule =
# serial; each profile; D = 1024 and 2048; V = 50257; B = 256; grad_accum =
# 2; L = 12, more layers than the wavefront's pairs of streams, with and
# without recompute). Each must pass its preflight, start and train: finite
# losses on every step. No config here may be refused: one the preflight
# refuses would be one whose kernels really give wrong numbers on this GPU,
# and it would be listed below with why. Then schedule = serial against the
# default schedule: the same parameters, bit for bit, after a few steps, at
# the default L = 3 and at L = 12 (layers sharing the wavefront's streams).
# Without a GPU: skipped (exit 77).
#   tests/preflight_matrix_gpu.sh path/to/catchat [LOG]
# LOG (optional): where a line a config goes (what it planned, its loss).
set -u
source "$(dirname "$0")/lib.sh" "$1"
skip_without_gpu
log=${2:-/dev/null}
export XDG_CACHE_HOME="$tmp/xdg" # not the user's own memory of passes: each path is checked here
make_corpus "$tmp" 400000 60000 # a batch of the default config is 32k tokens
base=(--config "$root/configs/default.ini" --set train="$tmp/train.txt" --set val="$tmp/val.txt" --set device=gpu)
train=(train "${base[@]}" --set max_steps=3 --set eval_interval=0 --set eval_batches=1 --set warmup_steps=1
       --sample-tokens 0)
bench=(bench "${base[@]}" --steps 2 --warmup 1 --cpu-steps 0 --json)

# name, then its --set values
configs=(
  "default|"
  "recompute on|recompute=on"
  "recompute auto, memory_limit 2G|recompute=auto memory_limit=2G"
  "lanes 1|lanes=1"
  "lanes 2|lanes=2"
  "lanes 4|lanes=4"
  "recompute on, lanes 2|recompute=on lanes=2"
  "wavefront off|wavefront=off"
  "wavefront off, recompute on|wavefront=off recompute=on"
  "CUDA graphs on|cuda_graph=on"
  "CUDA graphs off|cuda_graph=off"
  "CUDA graphs off, recompute on|cuda_graph=off recompute=on"
  "schedule serial|schedule=serial"
  "profile sm80|profile=sm80"
  "profile sm86|profile=sm86"
  "profile sm89|profile=sm89"
  "profile sm120|profile=sm120"
  "profile sm86, recompute on|profile=sm86 recompute=on"
  "profile sm120, recompute on|profile=sm120 recompute=on"
  "D=1024|d_model=1024"
  "D=1024, recompute on|d_model=1024 recompute=on"
  "D=2048|d_model=2048"
  "D=2048, recompute on|d_model=2048 recompute=on"
  "V=50257|vocab_size=50257"
  "V=50257, recompute auto, memory_limit 4G|vocab_size=50257 recompute=auto memory_limit=4G"
  "B=256|batch_size=256"
  "B=256, recompute on|batch_size=256 recompute=on"
  "grad_accum 2|grad_accum=2"
  "grad_accum 2, recompute on|grad_accum=2 recompute=on"
  "L=12 wavefront|n_layers=12"
  "L=12 wavefront, recompute on|n_layers=12 recompute=on"
)
# Configs the preflight may refuse, as "name|why": only where their kernels really give wrong numbers on this
# GPU (none today). Such a config passes here only with the preflight's "gives wrong results" line.
refused_ok=()
may_refuse() { local e; for e in "${refused_ok[@]}"; do [ "${e%%|*}" = "$1" ] && return 0; done; return 1; }

# bench's JSON field
field() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2]))' "$1" "$2"; }

i=0
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  sets=()
  for kv in ${entry#*|}; do sets+=(--set "$kv"); done
  i=$((i + 1))
  out="$tmp/run$i"
  if ! "$bin" "${train[@]}" "${sets[@]}" --set out_dir="$out" >"$tmp/train$i.log" 2>&1; then
    if may_refuse "$name" && grep -q "preflight: .* gives wrong results" "$tmp/train$i.log"; then
      ok; echo "$name: refused by the preflight, as listed" | tee -a "$log"
    else
      bad "train, $name: $(grep -m1 -E 'catchat:|error' "$tmp/train$i.log" || tail -1 "$tmp/train$i.log")"
    fi
    continue
  fi
  grep -q "preflight: the 6 kernel checks of this config passed\|preflight passed before" "$tmp/train$i.log" \
    && ok || bad "train, $name: no preflight line"
  python3 - "$out/telemetry.csv" >"$tmp/rows$i.txt" 2>&1 <<'PY' && ok || bad "train, $name: $(cat "$tmp/rows$i.txt")"
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [int(r["step"]) for r in rows] == [1, 2, 3], f"steps {[r['step'] for r in rows]}"
for r in rows:
    assert math.isfinite(float(r["loss"])) and int(r["skipped"]) == 0, f"step {r['step']}: {r}"
print(rows[-1]["loss"])
PY
  if ! "$bin" "${bench[@]}" "${sets[@]}" >"$tmp/bench$i.json" 2>"$tmp/bench$i.err"; then
    bad "bench, $name: $(grep -m1 'catchat:' "$tmp/bench$i.err" || tail -1 "$tmp/bench$i.err")"
    continue
  fi
  ok
  rc=$(field "$tmp/bench$i.json" recompute)
  case "$entry" in
    *recompute=on*|*memory_limit=*) [ "$rc" = True ] && ok || bad "bench, $name: recompute $rc" ;;
    *) [ "$rc" = False ] && ok || bad "bench, $name: recompute $rc" ;;
  esac
  case "$entry" in # more layers than the wavefront's pairs of streams: the wavefront, layers sharing them
    *n_layers=12*)
      wave=$(field "$tmp/bench$i.json" wavefront)
      [ "$(field "$tmp/bench$i.json" wavefront_chunk)" != 0 ] && [[ "$wave" == *"pairs of streams"* ]] && ok \
        || bad "bench, $name: wavefront $wave" ;;
  esac
  echo "$name: train loss $(tail -1 "$tmp/rows$i.txt"), bench $(field "$tmp/bench$i.json" gpu_ms) ms a step," \
    "recompute $rc, lanes $(field "$tmp/bench$i.json" lanes), wavefront $(field "$tmp/bench$i.json" wavefront_chunk)" \
    | tee -a "$log"
done

# schedule = serial gives the same numbers as the default schedule: the parameters after 4 steps, bit for bit,
# at the default L = 3 and at L = 12 (layers sharing the wavefront's pairs of streams)
for L in 3 12; do
for s in auto serial; do
  "$bin" train "${base[@]}" --set max_steps=4 --set eval_interval=0 --set eval_batches=1 --set warmup_steps=1 \
    --set checkpoint_interval=4 --set schedule=$s --set n_layers=$L --set out_dir="$tmp/sched_${s}_$L" \
    --sample-tokens 0 >"$tmp/sched_${s}_$L.log" 2>&1 || bad "schedule $s, L=$L: $(tail -1 "$tmp/sched_${s}_$L.log")"
done
python3 - "$tmp/sched_auto_$L/checkpoint.safetensors" "$tmp/sched_serial_$L/checkpoint.safetensors" \
  >"$tmp/sched.txt" 2>&1 <<'PY' && ok || bad "schedule serial against the default, L=$L: $(cat "$tmp/sched.txt")"
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return {k: raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in head.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys(), "other tensors"
diff = [k for k in a if a[k] != b[k]]
assert not diff, f"{len(diff)} of {len(a)} tensors differ: {diff[:4]}"
print(f"{len(a)} tensors the same")
PY
echo "schedule serial against the default schedule, L=$L: $(cat "$tmp/sched.txt")" | tee -a "$log"
done
finish
