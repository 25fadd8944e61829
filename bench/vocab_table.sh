#!/usr/bin/env bash
# Real vocabularies side by side, in one call on the GPU machine: catchat
# (`bench --json`, its chunked classifier) and the same model in PyTorch with
# each large-vocabulary loss a PyTorch user has (plain F.cross_entropy on the
# full logits, Liger-Kernel's fused linear cross-entropy, cut cross-entropy),
# at V = 256 8192 32000 50257, D=512 L=3 H=8 W=128 T=512 B=64
# (configs/default.ini; PyTorch's defaults are the same), PyTorch eager.
#
#   bench/vocab_table.sh OUT.jsonl [BIN]        BIN: the catchat binary (default build/catchat)
#
# Appends JSON lines to OUT.jsonl; notes and the programs' stderr go to stderr.
# Every line names impl, loss and V: catchat's lines are its bench --json
# object plus "impl": "catchat", "loss": "chunked", "run" (1 before PyTorch at
# that V, 2 after: PyTorch's step varies a lot from call to call, so catchat
# brackets it) and "catchat_version"; a variant that cannot run is one line
# with "skipped": why (no GPU, a package missing, a timeout, a crash).
#
# The wheels: liger-kernel, cut-cross-entropy and packaging (which liger imports
# and torch does not bring) from .whl/ in the repository root are installed with
# pip --no-index into $SITE (default /tmp/site), put first on PYTHONPATH; torch
# and triton are the machine's. Without .whl/, liger and cce run only where the
# machine already has them, else they print skip lines.
#
# The tokens: bench's batch is the first of [data] train where that file reads,
# else random tokens below V. This script points train at a file that does not
# exist, so catchat's batch is random tokens below V like PyTorch's
# torch.randint (bench then says "cannot open data file ... using random
# tokens" on stderr: expected). TOKENS=data keeps the config's data instead
# (a text file's tokens are bytes, below 256 <= V).
#
# Environment: VOCABS ("256 8192 32000 50257"), LOSSES (plain,liger,cce),
# STEPS/WARMUP (catchat, 20/5), PT_STEPS/PT_WARMUP (PyTorch, 10/3), PT_TIMEOUT
# (seconds a PyTorch variant may take, 150), PYTHON (python3), SITE, TOKENS,
# PREFLIGHT (bench --preflight, auto: as a user runs it).
set -u
if [ $# -lt 1 ] || [ $# -gt 2 ]; then sed -n 9p "$0" | sed "s/^# *//" >&2; exit 2; fi
out=$1 bin=${2:-build/catchat}
case $out in /*) ;; *) out=$PWD/$out ;; esac
case $bin in /*) ;; */*) bin=$PWD/$bin ;; *) bin=$(command -v "$bin" || echo "$bin") ;; esac
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$(dirname "$out")" || exit 1
VOCABS=${VOCABS:-256 8192 32000 50257} LOSSES=${LOSSES:-plain,liger,cce}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-5} PT_STEPS=${PT_STEPS:-10} PT_WARMUP=${PT_WARMUP:-3}
PT_TIMEOUT=${PT_TIMEOUT:-150} PY=${PYTHON:-python3} SITE=${SITE:-/tmp/site}
TOKENS=${TOKENS:-random} PREFLIGHT=${PREFLIGHT:-auto}
note() { echo "vocab_table: $*" >&2; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
export PYTHONUNBUFFERED=1

# The wheels, failing soft: liger and cce then print skip lines.
if ls .whl/*.whl >/dev/null 2>&1; then
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl; then
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    note "installed $(cd .whl && echo *.whl) into $SITE"
  else note "pip install of .whl/*.whl failed: liger and cce only where the machine has them"; fi
else note "no .whl/ here: liger and cce only where the machine has them (else skip lines)"; fi

data_set=()
[ "$TOKENS" = data ] || data_set=(--set "train=$tmp/no-such-file.txt")
version=unknown
[ -x "$bin" ] && version=$("$bin" --version 2>/dev/null | head -1)

# tag KEY=JSON...: each JSON line of stdin with the keys added (a line that is
# not a JSON object passes as it is, to stderr).
tag() {
  "$PY" -c '
import json, sys
extra = {k: json.loads(v) for k, v in (a.split("=", 1) for a in sys.argv[1:])}
for line in sys.stdin:
    try:
        row = json.loads(line)
        assert isinstance(row, dict)
    except Exception:
        sys.stderr.write(line)
        continue
    tagged = dict(extra)  # its keys first, and its values win
    tagged.update(row)
    tagged.update(extra)
    print(json.dumps(tagged), flush=True)
' "$@"
}
jstr() { "$PY" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

catchat() { # V RUN
  local V=$1 run=$2 rc=0 why
  local keys=(impl='"catchat"' loss='"chunked"' V="$V" run="$run" catchat_version="$(jstr "$version")")
  if [ ! -x "$bin" ]; then
    echo '{}' | tag "${keys[@]}" skipped="$(jstr "no catchat binary at $bin")" >>"$out"; return
  fi
  "$bin" bench --config configs/default.ini --set vocab_size="$V" "${data_set[@]}" --cpu-steps 0 \
    --steps "$STEPS" --warmup "$WARMUP" --preflight "$PREFLIGHT" --json >"$tmp/c.json" 2>"$tmp/c.err" || rc=$?
  cat "$tmp/c.err" >&2
  if [ -s "$tmp/c.json" ] && [ "$rc" -eq 0 ]; then tag "${keys[@]}" <"$tmp/c.json" >>"$out"
  else
    why="exit $rc"; [ "$rc" -eq 77 ] && why="exit 77: no GPU measured"
    why="$why: $(grep -v 'using random tokens\|cannot open data file' "$tmp/c.err" | tail -1)"
    { [ -s "$tmp/c.json" ] && cat "$tmp/c.json" || echo '{}'; } | tag "${keys[@]}" skipped="$(jstr "$why")" >>"$out"
  fi
}

pytorch() { # V LOSS: one process a variant, so that a crash or a timeout loses that variant only
  local V=$1 loss=$2 rc=0
  timeout "$PT_TIMEOUT" "$PY" bench/pytorch_model.py --vocab "$V" --d 512 --layers 3 --heads 8 --window 128 \
    --seq 512 --batch 64 --modes eager --losses "$loss" --steps "$PT_STEPS" --warmup "$PT_WARMUP" \
    >"$tmp/p.json" 2>"$tmp/p.err" || rc=$?
  cat "$tmp/p.err" >&2
  if grep -q '"loss"' "$tmp/p.json"; then grep '"loss"' "$tmp/p.json" >>"$out"
  else
    local why="exit $rc"; [ "$rc" -eq 124 ] && why="timeout after $PT_TIMEOUT s"
    why="$why: $(tail -1 "$tmp/p.err")"
    echo '{}' | tag impl='"pytorch"' mode='"eager"' loss="$(jstr "$loss")" V="$V" skipped="$(jstr "$why")" >>"$out"
  fi
}

for V in $VOCABS; do
  note "V=$V"
  catchat "$V" 1
  for loss in ${LOSSES//,/ }; do pytorch "$V" "$loss"; done
  catchat "$V" 2
done
note "done: $(wc -l <"$out") lines in $out"
