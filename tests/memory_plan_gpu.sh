#!/usr/bin/env bash
# The executor's planned device bytes (gpu_step_plan: what the preflight's
# fit check, its suggested batch and [gpu] recompute = auto go by) against
# what it really holds after warm-up steps (bench's device memory: the free
# memory the executor took), within 5%, with recompute off and on, at the
# default config and at D=1024; and recompute = auto under a [gpu]
# memory_limit the full plan does not fit takes recompute on and fits; at
# V = 50257 the default model fits 10G without recompute, and a limit that
# 256 MiB of classifier chunks would overrun takes 60 MiB instead.
# Without a GPU: skipped (exit 77).
#   tests/memory_plan_gpu.sh path/to/catchat
set -u
source "$(dirname "$0")/lib.sh" "$1"
skip_without_gpu
command -v python3 >/dev/null || { echo "SKIP: python3 reads bench's JSON here"; exit 77; }
export XDG_CACHE_HOME="$tmp/xdg"
bench=("$bin" bench --config "$root/configs/default.ini" --steps 2 --warmup 2 --cpu-steps 0 --json)

# field NAME of the JSON line in FILE
field() { python3 -c 'import json,sys; v=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]]; print(v)' "$1" "$2"; }

for d in 512 1024; do
  for rc in off on; do
    name="D=$d recompute $rc"
    if ! "${bench[@]}" --set d_model=$d --set recompute=$rc >"$tmp/b.json" 2>"$tmp/b.err"; then
      bad "$name: $(tail -1 "$tmp/b.err")"
      continue
    fi
    plan=$(field "$tmp/b.json" plan_bytes)
    held=$(python3 -c "print(int($(field "$tmp/b.json" mem_mb) * 1048576))")
    ran=$(field "$tmp/b.json" recompute)
    [ "$ran" = "$([ $rc = on ] && echo True || echo False)" ] && ok || bad "$name: ran recompute=$ran"
    python3 -c "import sys; p, h = $plan, $held; sys.exit(0 if abs(p - h) <= 0.05 * h else 1)" && ok \
      || bad "$name: planned $plan bytes, held $held (over 5% apart)"
    echo "$name: planned $plan bytes, held $held"
  done
done

# GPT-2's vocabulary: the classifier holds chunks of logits, not the batch's,
# so the default model at V = 50257 keeps every layer under memory_limit = 10G,
# within 160 KB a token; where 256 MiB of chunks would not fit, the plan takes
# 60 MiB (under 2 KB a token) before it turns recompute on
vfield() { python3 -c "import json; print(json.loads(open('$1').read().strip().splitlines()[-1])['plan_bytes_by_group']['classifier'])"; }
name="V=50257 memory_limit=10G"
if "${bench[@]}" --set vocab_size=50257 --set memory_limit=10G >"$tmp/v.json" 2>"$tmp/v.err"; then
  [ "$(field "$tmp/v.json" recompute)" = False ] && ok || bad "$name: took recompute on"
  plan=$(field "$tmp/v.json" plan_bytes)
  held=$(python3 -c "print(int($(field "$tmp/v.json" mem_mb) * 1048576))")
  python3 -c "import sys; p, h = $plan, $held; sys.exit(0 if abs(p - h) <= 0.05 * h else 1)" && ok \
    || bad "$name: planned $plan bytes, held $held (over 5% apart)"
  python3 -c "import sys; sys.exit(0 if $held / (64 * 512) <= 160e3 else 1)" && ok || bad "$name: held $held bytes, over 160 KB a token"
  echo "$name: planned $plan bytes, held $held, classifier $(vfield "$tmp/v.json")"
else
  bad "$name: $(tail -1 "$tmp/v.err")"
fi
name="V=50257 memory_limit=4864M" # the plan with 256 MiB of chunks needs ~4.94 GB + the margin; with 60 MiB, ~4.73
if "${bench[@]}" --set vocab_size=50257 --set memory_limit=4864M >"$tmp/w.json" 2>"$tmp/w.err"; then
  [ "$(field "$tmp/w.json" recompute)" = False ] && ok || bad "$name: took recompute on"
  cls=$(vfield "$tmp/w.json")
  python3 -c "import sys; sys.exit(0 if $cls / (64 * 512) <= 2048 else 1)" && ok || bad "$name: the classifier plans $cls bytes, over 2 KB a token"
  echo "$name: planned $(field "$tmp/w.json" plan_bytes) bytes, classifier $cls"
else
  bad "$name: $(tail -1 "$tmp/w.err")"
fi

# auto under a limit that the full plan does not fit: on, and within the limit
"${bench[@]}" --set d_model=1024 --set memory_limit=4G >"$tmp/a.json" 2>"$tmp/a.err" || bad "auto: $(tail -1 "$tmp/a.err")"
[ "$(field "$tmp/a.json" recompute)" = True ] && ok || bad "auto under memory_limit = 4G kept every layer"
field "$tmp/a.json" recompute_why | grep -q "GiB \[gpu\] memory_limit" && ok || bad "auto did not say why"
python3 -c "import sys; sys.exit(0 if $(field "$tmp/a.json" plan_bytes) <= 4 << 30 else 1)" && ok \
  || bad "auto's plan exceeds the 4G limit"
finish
