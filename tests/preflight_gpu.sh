#!/usr/bin/env bash
# The preflight on a GPU (docs/gpus.md, "The preflight"): a planted wrong
# kernel result refuses every command's run before its first step, with one
# line and nothing written; a pass is remembered and the next run skips it;
# --preflight always runs it again and never says the run is unchecked.
# Without a GPU: skipped (exit 77). The cache logic itself: test_preflight.
#   tests/preflight_gpu.sh path/to/catchat
set -u
source "$(dirname "$0")/lib.sh" "$1"
skip_without_gpu
export XDG_CACHE_HOME="$tmp/xdg" # not the user's own memory of passes
make_corpus "$tmp"
sets=(--config "$root/configs/tiny.ini" --set train="$tmp/train.txt" --set val="$tmp/val.txt" --set device=gpu
      --set max_steps=2 --set eval_interval=0 --sample-tokens 0)

# a wrong result in any check: refused before the first step, nothing written
# (a recurrence's or the full step's: the tiny model's other recurrence is named, its checks having passed;
# attention's or the full step's: its head size of 16 runs on the tiled tensor-core kernel, and the FP32
# kernels are named)
for c in gru_forward gru_backward attention model grad_reduce adamw; do
  remedy=""
  case $c in
    gru_*) remedy="--set recurrence=[a-z-]* passes these checks here; " ;;
    attention) remedy="--set attention=fp32 passes these checks here; " ;;
    model) remedy="--set recurrence=[a-z-]*, or --set attention=fp32 passes these checks here; " ;;
  esac
  expect_error "planted $c" \
    "preflight: $c (.*) on .* gives wrong results: .* over the tolerance .*stops here: ${remedy}run on the CPU with --set device=cpu" \
    "$bin" train "${sets[@]}" --set out_dir="$tmp/p_$c" --plant-wrong-result "$c"
  [ -e "$tmp/p_$c" ] && bad "planted $c: out_dir was written" || ok
  grep -q '^step' "$tmp/out" && bad "planted $c: a step ran" || ok
done
[ -e "$XDG_CACHE_HOME/catchat/preflight.txt" ] && bad "a planted run was remembered" || ok

# the first run checks and remembers, the second skips, always checks again
run() { "$bin" train "${sets[@]}" --set out_dir="$tmp/$1" "${@:2}" >"$tmp/$1.log" 2>&1 || bad "$1: $(tail -2 "$tmp/$1.log")"; }
run first
grep -q "preflight: the 6 kernel checks of this config passed on .* (remembered in $XDG_CACHE_HOME/catchat/preflight.txt)" \
  "$tmp/first.log" && ok || bad "first run: $(grep preflight "$tmp/first.log")"
run second
grep -q "preflight passed before on this GPU, driver, build and kernel path" "$tmp/second.log" && ok \
  || bad "second run: $(grep preflight "$tmp/second.log")"
grep -q "kernel checks of this config passed" "$tmp/second.log" && bad "the second run checked again" || ok
run always --preflight always
grep -q "kernel checks of this config passed" "$tmp/always.log" && ok || bad "--preflight always did not check"
[ "$(grep -vc '^#' "$XDG_CACHE_HOME/catchat/preflight.txt")" -eq 1 ] && ok || bad "not one record a pass"
# another path (the per-step recurrence) is another record: checked again
run per-step --set recurrence=per-step
grep -q "kernel checks of this config passed" "$tmp/per-step.log" && ok || bad "another path was not checked"
# recompute on is another path too, said in the run's first lines
run recompute --set recompute=on
grep -q "kernel checks of this config passed" "$tmp/recompute.log" && ok || bad "recompute on was not checked"
grep -q "^GPU memory: .* planned; recompute on (\[gpu\] recompute)" "$tmp/recompute.log" && ok \
  || bad "recompute on not said: $(grep -i 'GPU ' "$tmp/recompute.log")"
run never --preflight never
grep -q "WARNING: --preflight never: the GPU kernels of this train are NOT checked" "$tmp/never.log" && ok \
  || bad "--preflight never said nothing"

# eval, bench and dump-state take it too (remembered: skipped; planted: train only)
"$bin" eval --ckpt "$tmp/first/checkpoint.safetensors" --data "$tmp/val.txt" >"$tmp/eval.log" 2>&1 \
  && grep -q "preflight passed before" "$tmp/eval.log" && ok || bad "eval: $(cat "$tmp/eval.log")"
"$bin" bench "${sets[@]:0:8}" --steps 2 --warmup 1 --cpu-steps 0 --preflight always >"$tmp/bench.log" 2>&1 \
  && grep -q "kernel checks of this config passed" "$tmp/bench.log" && ok || bad "bench: $(head -3 "$tmp/bench.log")"
# a config that cannot fit: refused with a batch that fits, before any allocation
expect_error "too big" "needs about .* GiB of device memory, and .* free .*; batch_size = [0-9]* fits" \
  "$bin" bench "${sets[@]:0:8}" --set d_model=4096 --set n_heads=32 --set batch_size=4096 --set seq_len=2048 --cpu-steps 0
# over [gpu] memory_limit: refused with the batch that fits, and recompute on where it fits the whole batch
expect_error "over memory_limit" "needs about .* GiB of device memory, and \[gpu\] memory_limit allows 4.0 GiB; batch_size = [0-9]* fits .*; or --set recompute=on" \
  "$bin" bench "${sets[@]:0:8}" --set d_model=1024 --set n_heads=16 --set batch_size=64 --set seq_len=512 \
  --set memory_limit=4G --set recompute=off --cpu-steps 0
# a real vocabulary: the model check runs the run's V (GPT-2's, padded on the GPU) in uneven classifier chunks
"$bin" bench --config "$root/configs/tiny.ini" --set device=gpu --set vocab_size=50257 --steps 1 --warmup 1 --cpu-steps 0 \
  --preflight always >"$tmp/v.log" 2>&1 && grep -q "preflight: the 6 kernel checks of this config passed" "$tmp/v.log" \
  && ok || bad "V=50257: $(grep -m1 -e preflight -e catchat: "$tmp/v.log")"
finish
