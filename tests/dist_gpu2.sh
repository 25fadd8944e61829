#!/usr/bin/env bash
# Data parallelism's failure cases on two GPUs of one host (docs/distributed.md),
# env bootstrap, the tiny config: a rank whose config differs is refused at
# start-up with the key named; a SIGKILLed rank ends the other within 60 s
# with one line naming it, and the last checkpoint resumes at world size 2
# and 1; SIGINT to one rank stops both after the same step with the
# checkpoint written. Fewer than two GPUs: skipped (exit 77).
#   tests/dist_gpu2.sh path/to/catchat
set -u
set -m # background jobs keep SIGINT (a script's async jobs otherwise start with it ignored)
source "$(dirname "$0")/lib.sh" "$1"
# the GPUs this process sees: CUDA_VISIBLE_DEVICES narrows what nvidia-smi lists
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then gpus=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
else gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); fi
if [ "${gpus:-0}" -lt 2 ]; then echo "fewer than two GPUs: skipped"; exit 77; fi
command -v pgrep >/dev/null || { echo "FAIL: pgrep (procps) is needed to signal one rank"; exit 1; }
export XDG_CACHE_HOME="$tmp/xdg"
make_corpus "$tmp"
sets=(--config "$root/configs/tiny.ini" --set train="$tmp/train.txt" --set val="$tmp/val.txt" --set device=gpu
      --set eval_interval=0 --sample-tokens 0 --quiet --dist env --dist-id "$tmp/id")

# rank <r> <log> <args...>: rank r on its GPU in the background, under a time limit (timeout, so a
# hang fails the test instead of the test hanging); pid[r] is the timeout's, cat[r] catchat's own
pid=() cat=()
rank() {
  local r=$1 log=$2; shift 2
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r timeout -s KILL 300 "$bin" train "${sets[@]}" "$@" </dev/null >"$log" 2>&1 &
  pid[$r]=$!
  for _ in $(seq 50); do cat[$r]=$(pgrep -P "${pid[$r]}" | head -1); [ -n "${cat[$r]}" ] && break; sleep 0.1; done
  [ -n "${cat[$r]}" ] || bad "rank $r: no catchat process under timeout"
}
# beats <dir> <r> <n>: wait (up to 60 s) until rank r's heartbeat in dir has counted to n
beats() {
  for _ in $(seq 600); do [ "$(cat "$1"/.rank"$2".* 2>/dev/null | head -1)" -ge "$3" ] 2>/dev/null && return; sleep 0.1; done
}
# end <r>: waits for rank r; its exit status in st (137 when the time limit killed it)
end() { wait "${pid[$1]}"; st=$?; }
step_of() { tail -1 "$1/telemetry.csv" 2>/dev/null | cut -d, -f1; }

# 1. another seq_len on rank 1: both refuse before anything is written
rm -f "$tmp/id"
rank 0 "$tmp/c0.log" --set out_dir="$tmp/cfg"
rank 1 "$tmp/c1.log" --set out_dir="$tmp/cfg" --set seq_len=16
end 0; rc0=$st; end 1; rc1=$st
{ [ "$rc0" = 1 ] && [ "$rc1" = 1 ]; } && ok || bad "config differs: exit $rc0 and $rc1"
grep -q "rank 1: its config differs from rank 0's in 1 line: \[model\] seq_len = 16 here, seq_len = 32 on rank 0" \
  "$tmp/c1.log" && ok || bad "rank 1 did not name seq_len: $(cat "$tmp/c1.log")"
grep -q "rank 1 failed the config check" "$tmp/c0.log" && ok || bad "rank 0 did not name rank 1: $(cat "$tmp/c0.log")"
[ -e "$tmp/cfg/telemetry.csv" ] && bad "a refused run wrote telemetry" || ok

# 2. SIGKILL rank 1 mid-run: rank 0 names it and exits within 60 s; the checkpoint resumes at world 2 and 1
rm -f "$tmp/id"
long=(--set out_dir="$tmp/kill" --set max_steps=1000000 --set checkpoint_interval=50)
rank 0 "$tmp/k0.log" "${long[@]}"
rank 1 "$tmp/k1.log" "${long[@]}"
for _ in $(seq 600); do [ -e "$tmp/kill/checkpoint.safetensors" ] && break; sleep 0.1; done
[ -e "$tmp/kill/checkpoint.safetensors" ] && ok || bad "no checkpoint within 60 s"
beats "$tmp/kill" 1 3 # rank 0 has seen rank 1's heartbeat
kill -9 "${cat[1]}"; end 1
start=$(date +%s)
end 0; rc0=$st
took=$(( $(date +%s) - start ))
[ "$rc0" = 1 ] && [ $took -le 60 ] && ok || bad "after rank 1's SIGKILL rank 0 exited $rc0 after $took s"
grep -q "rank 0: rank 1 is lost" "$tmp/k0.log" && ok || bad "rank 0 did not name rank 1: $(tail -2 "$tmp/k0.log")"
rm -f "$tmp/id"
rank 0 "$tmp/r0.log" "${long[@]}" --resume auto --steps 5
rank 1 "$tmp/r1.log" "${long[@]}" --resume auto --steps 5
end 0; rc0=$st; end 1; rc1=$st
{ [ "$rc0" = 0 ] && [ "$rc1" = 0 ]; } && ok || bad "resume at world 2: exit $rc0 and $rc1: $(tail -2 "$tmp/r0.log")"
"$bin" train --config "$root/configs/tiny.ini" --set train="$tmp/train.txt" --set val="$tmp/val.txt" \
  --set device=gpu --set eval_interval=0 --sample-tokens 0 --quiet --dist none "${long[@]}" --resume auto --steps 5 \
  >"$tmp/w1.log" 2>&1 && ok || bad "resume at world 1: $(tail -2 "$tmp/w1.log")"

# 3. SIGINT to rank 1 only: both stop after the same step, rank 0 writes the checkpoint
rm -f "$tmp/id"
long=(--set out_dir="$tmp/int" --set max_steps=1000000 --set checkpoint_interval=0)
rank 0 "$tmp/i0.log" "${long[@]}"
rank 1 "$tmp/i1.log" "${long[@]}"
for _ in $(seq 600); do [ "$(step_of "$tmp/int")" -ge 20 ] 2>/dev/null && break; sleep 0.1; done
kill -INT "${cat[1]}"
end 1; rc1=$st; end 0; rc0=$st
{ [ "$rc1" = 130 ] && [ "$rc0" = 143 ]; } && ok || bad "SIGINT to rank 1: exit $rc1 (rank 1) and $rc0 (rank 0)"
[ -e "$tmp/int/checkpoint.safetensors" ] && ok || bad "no checkpoint after the stop"
finish
