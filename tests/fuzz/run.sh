#!/usr/bin/env bash
# Build the libFuzzer harnesses (clang, ASan + UBSan) and run each for a
# bounded time on a working copy of its seed corpus. Exit non-zero on a finding.
#   tests/fuzz/run.sh SECONDS [harness ...]     (harnesses: ini safetensors shard text cli bpe)
set -euo pipefail
secs=${1:-30}; shift || true
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${FUZZ_BUILD:-$root/build-fuzz}
mkdir -p "$out"
harnesses=${*:-ini safetensors shard text cli bpe}
cc=${CC_FUZZ:-clang}
command -v "$cc" >/dev/null || { echo "fuzz: no clang (apt-get install clang)" >&2; exit 1; }
flags=(-O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root/include" -I"$root/src"
       -I/usr/local/cuda/include)
srcs=("$root"/src/util.c "$root"/src/config_keys.c "$root"/src/config_values.c "$root"/src/config_paths.c
      "$root"/src/config_ini.c "$root"/src/config_validate.c "$root"/src/config_print.c "$root"/src/config_json.c
      "$root"/src/safetensors.c "$root"/src/data.c "$root"/src/loader.c "$root"/src/rng.c
      "$root"/src/layout.c "$root"/src/checkpoint.c "$root"/src/version.c "$root"/src/cli/cli_common.c "$root"/src/cli/cli_env.c
      "$root"/src/vocab.c "$root"/src/tokenizer.c "$root"/src/bpe.c "$root"/src/text_escape.c)
for h in $harnesses; do
  "$cc" "${flags[@]}" "$root/tests/fuzz/fuzz_$h.c" "${srcs[@]}" -linih -ljansson -lxxhash -lpcre2-8 -lm -o "$out/fuzz_$h"
done
status=0
for h in $harnesses; do
  work="$out/corpus_$h"
  mkdir -p "$work"
  echo "fuzz_$h: ${secs}s"
  if ! "$out/fuzz_$h" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$out/crash_${h}_" "$work" "$root/tests/fuzz/corpus/$h" >"$out/fuzz_$h.log" 2>&1; then
    echo "fuzz_$h: FINDING (see $out/fuzz_$h.log and $out/crash_${h}_*)"; tail -30 "$out/fuzz_$h.log"; status=1
  else
    grep -E "^Done|#[0-9]+.*DONE" "$out/fuzz_$h.log" | tail -1
  fi
done
exit $status
