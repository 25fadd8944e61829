# Shared by the shell tests: the program, a scratch folder, counters,
# expect_error and a small generated corpus.
#   source "$(dirname "$0")/lib.sh" path/to/catchat
# sets bin (the program's absolute path), root (the repository) and tmp (a
# folder removed at exit).
bin=$(realpath "$1")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_error "what" PATTERN CMD...: non-zero exit, exactly one line on stderr holding PATTERN.
# (A command that should fail at once but trains instead is stopped after 120 s.)
expect_error() {
  local what=$1 pattern=$2; shift 2
  timeout -k 5 120 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines; lines=$(wc -l <"$tmp/err")
  if [ $rc -eq 0 ]; then bad "$what: exit 0"; return; fi
  if [ "$lines" -ne 1 ]; then bad "$what: $lines stderr lines: $(cat "$tmp/err")"; return; fi
  if ! grep -q -- "$pattern" "$tmp/err"; then bad "$what: '$(cat "$tmp/err")' lacks '$pattern'"; return; fi
  ok
}

# expect_error_lines "what" PATTERN CMD...: as expect_error, but the error's first line (holding PATTERN)
# may go on in lines indented by two spaces (the details, the advice).
expect_error_lines() {
  local what=$1 pattern=$2; shift 2
  timeout -k 5 120 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq 0 ]; then bad "$what: exit 0"; return; fi
  if tail -n +2 "$tmp/err" | grep -q -v '^  '; then bad "$what: more than one error: $(cat "$tmp/err")"; return; fi
  if ! head -1 "$tmp/err" | grep -q -- "$pattern"; then bad "$what: '$(cat "$tmp/err")' lacks '$pattern'"; return; fi
  ok
}

# make_corpus DIR [TRAIN_BYTES VAL_BYTES]: train.txt (30 kB) and val.txt (4 kB) of generated sentences.
make_corpus() {
  python3 - "$1" "${2:-30000}" "${3:-4000}" <<'PY'
import random, sys
random.seed(3)
words = "the cat sat on a mat and the dog ran far it was good we see".split()
for name, n in (("train.txt", int(sys.argv[2])), ("val.txt", int(sys.argv[3]))):
    out = []
    while sum(map(len, out)) < n:
        out.append(random.choice(words) + random.choice([" ", " ", " ", ".\n"]))
    open(f"{sys.argv[1]}/{name}", "w").write("".join(out))
PY
}

# skip_without_gpu: exit 77 (CTest: skipped) where the program sees no CUDA device.
skip_without_gpu() {
  "$bin" ladder --stage matmul >/dev/null 2>&1
  if [ $? -eq 77 ]; then echo "no CUDA device: skipped"; exit 77; fi
}

finish() {
  echo "$pass passed, $fails failed"
  [ $fails -eq 0 ]
}
