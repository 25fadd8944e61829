#!/usr/bin/env bash
# Crash safety: SIGKILL the trainer at several points while it writes a large
# checkpoint every step. After each kill the checkpoint must load, every
# telemetry row must be whole (the CSV parses, steps consecutive), --resume
# must carry on, and no run's output may hold a sanitizer report.
#   tests/crash.sh path/to/catchat
set -u
bin=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c "
import random; random.seed(1)
w='the cat sat on a mat and the dog ran far it was good we see'.split()
open('$tmp/train.txt','w').write(''.join(random.choice(w)+' ' for _ in range(20000)))
open('$tmp/val.txt','w').write(''.join(random.choice(w)+' ' for _ in range(2000)))"
# ~1.9 M parameters: each checkpoint (weights + two moments) is ~23 MB, so most
# of a step is spent writing it and the kills land mid-write.
args=(--config "$root/configs/tiny.ini" --set d_model=256 --set n_layers=4 --set n_heads=4 --set seq_len=16
      --set batch_size=2 --set max_steps=100000 --set checkpoint_interval=1 --set eval_interval=0
      --set train="$tmp/train.txt" --set val="$tmp/val.txt" --set out_dir="$tmp/run" --quiet --sample-tokens 0)
pass=0 fail=0 midwrite=0 evals=0
# Every run's output is kept: under a sanitizer build a report (and the abort after
# it) in a killed run would otherwise go unseen, as the next run resumes regardless.
logs="$tmp/logs"
mkdir "$logs"
# each tensor write pauses 15 ms: a checkpoint takes ~0.7 s, long enough to kill inside
export CATCHAT_TEST_WRITE_DELAY_US=15000
check_state() { # $1: label
  local ck="$tmp/run/checkpoint.safetensors"
  evals=$((evals + 1))
  local err="$logs/eval.$evals"
  if ! "$bin" eval --ckpt "$ck" --data "$tmp/val.txt" --batches 1 --json >/dev/null 2>"$err"; then
    echo "FAIL $1: checkpoint does not load: $(cat "$err")"; fail=$((fail + 1)); return
  fi
  if ! python3 - "$tmp/run/telemetry.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
assert rows[0][0] == "step" and len(rows[0]) == 15, rows[0]
steps = [int(r[0]) for r in rows[1:]]
assert all(len(r) == 15 for r in rows[1:]), "a row is not whole"
assert steps == list(range(1, len(steps) + 1)), "steps are not consecutive"
for r in rows[1:]:
    float(r[2]); float(r[6])
PY
  then echo "FAIL $1: telemetry"; fail=$((fail + 1)); return; fi
  pass=$((pass + 1))
}
"$bin" train "${args[@]}" --set max_steps=2 >"$logs/first" 2>&1 \
  || { echo "FAIL: first run: $(tail -5 "$logs/first")"; exit 1; }
# Each kill waits for this run's own checkpoint write to start (its temporary file,
# named by pid, appears), then lands a little later inside it: a fixed delay from
# the start would miss the write on a loaded machine.
for delay in 0.05 0.15 0.25 0.35 0.45; do
  "$bin" train "${args[@]}" --resume "$tmp/run/checkpoint.safetensors" >"$logs/kill.$delay" 2>&1 &
  pid=$!
  part="$tmp/run/checkpoint.safetensors.tmp.$pid"
  for _ in $(seq 1500); do [ -e "$part" ] && break; sleep 0.02; done
  sleep "$delay"
  if [ -e "$part" ]; then midwrite=$((midwrite + 1)); fi
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  check_state "kill after ${delay}s"
done
leftover=$(ls "$tmp/run" | grep -c '\.tmp\.' || true)
echo "$midwrite of 5 kills landed while a checkpoint was being written"
if [ "$midwrite" -ge 3 ]; then pass=$((pass + 1)); else echo "FAIL: too few kills hit a write"; fail=$((fail + 1)); fi
# a run started after the kills clears the temporary files they left, and resumes
before=$(tail -1 "$tmp/run/telemetry.csv" | cut -d, -f1)
if "$bin" train "${args[@]}" --resume "$tmp/run/checkpoint.safetensors" --steps 3 >"$logs/resume" 2>&1; then
  after=$(tail -1 "$tmp/run/telemetry.csv" | cut -d, -f1)
  remain=$(ls "$tmp/run" | grep -c '\.tmp\.' || true)
  if [ "$remain" -eq 0 ]; then pass=$((pass + 1)); else echo "FAIL: $remain temporary files left"; fail=$((fail + 1)); fi
  echo "resumed from step $before to $after ($leftover temporary file(s) from the kills cleared)"
  check_state "resume after the kills"
else
  echo "FAIL: resume: $(tail -5 "$logs/resume")"; fail=$((fail + 1))
fi
san='ERROR: [A-Za-z]*Sanitizer|WARNING: [A-Za-z]*Sanitizer|LeakSanitizer|runtime error:'
if grep -Eq "$san" "$logs"/*; then
  echo "FAIL: a sanitizer report:"; grep -EH -A8 "$san" "$logs"/* | head -60; fail=$((fail + 1))
else pass=$((pass + 1)); fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
