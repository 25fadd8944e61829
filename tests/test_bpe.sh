#!/usr/bin/env bash
# A BPE from the user's own text, offline, end to end on the CPU:
#   1. scripts/prepare.py --train-tokenizer: a bad N (not an integer, < 257,
#      > 65535, with --tokenizer) is one line naming the option, a non-zero
#      exit and nothing written; without the `tokenizers` package one line says
#      `pip install tokenizers`; --tokenizer gpt2 without its encoding files
#      (no tiktoken, or no network) says so in one line pointing at
#      --train-tokenizer.
#   2. It trains a byte-level BPE on the text, writes PREFIX.tokenizer.json
#      beside the shards and .vocab, and does so identically twice; the shards
#      hold the tokenizer's own ids, and the .vocab's bytes give the text back.
#   3. catchat trains a few steps on the shards (its sample.txt is text);
#      `catchat sample` finds PREFIX.vocab from the checkpoint alone (from
#      another folder too), says so, and prints text the tokenizer decodes the
#      ids to (no <id>); --vocab still chooses the file; without one it says
#      ids print raw.
#   tests/test_bpe.sh path/to/catchat      (exit 77 = skipped: no `tokenizers`)
# The Python is the project's one: REPO/.venv/bin/python where it exists, else python3.
set -u
source "$(dirname "$0")/lib.sh" "$1"
if [ -x "$root/.venv/bin/python" ]; then py=$root/.venv/bin/python
elif command -v python3 >/dev/null 2>&1; then py=$(command -v python3)
else echo "no Python interpreter: skipped"; exit 77; fi
prep() { "$py" "$root/scripts/prepare.py" "$@"; }

# The text: the repository's own docs, ASCII only so that every token is whole
# characters and the tokenizer's decode compares with catchat's bytes as they are.
cat "$root/README.md" "$root"/docs/*.md | "$py" -c \
  'import sys; sys.stdout.write(sys.stdin.buffer.read().decode("utf-8", "replace").encode("ascii", "ignore").decode())' \
  >"$tmp/docs.txt"

# ---------------------------------------------------------------- 1: refusals
# refused WHAT PATTERN ARGS...: non-zero exit, one line on stderr holding PATTERN, nothing written
refused() {
  local what=$1 pattern=$2; shift 2
  rm -rf "$tmp/r"
  prep "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines; lines=$(wc -l <"$tmp/err")
  if [ $rc -eq 0 ]; then bad "$what: exit 0 (want an error)"
  elif [ "$lines" -ne 1 ]; then bad "$what: $lines lines on stderr (want 1): $(head -3 "$tmp/err" | tr '\n' '|')"
  elif ! grep -q -- "$pattern" "$tmp/err"; then bad "$what: stderr does not hold '$pattern': $(cat "$tmp/err")"
  elif [ -e "$tmp/r" ]; then bad "$what: wrote $(ls "$tmp/r" | tr '\n' ' ')"
  else ok; fi
}
for n in 0 256 -300 65536 1000000 x 3.5 1e3 ""; do
  refused "--train-tokenizer '$n'" "--train-tokenizer" "$tmp/docs.txt" "$tmp/r/p" --train-tokenizer "$n"
done
refused "--train-tokenizer with --tokenizer" "exclude each other" \
  "$tmp/docs.txt" "$tmp/r/p" --train-tokenizer 300 --tokenizer bytes
# without the package (hidden behind one that fails to import): what to install
mkdir -p "$tmp/no_tokenizers/tokenizers"
echo 'raise ImportError("No module named tokenizers")' >"$tmp/no_tokenizers/tokenizers/__init__.py"
PYTHONPATH=$tmp/no_tokenizers refused "no tokenizers package" "pip install tokenizers" \
  "$tmp/docs.txt" "$tmp/r/p" --train-tokenizer 300
# gpt2 offline: no tiktoken, or tiktoken with an empty cache and no way out
mkdir -p "$tmp/tiktoken_cache"
TIKTOKEN_CACHE_DIR=$tmp/tiktoken_cache HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 \
  refused "--tokenizer gpt2 offline" "--train-tokenizer" "$tmp/docs.txt" "$tmp/r/p" --tokenizer gpt2

if ! "$py" -c 'import tokenizers' 2>/dev/null; then
  echo "no \`tokenizers\` in $py (pip install tokenizers): the BPE run skipped"
  [ "$fails" -eq 0 ] || finish
  exit 77
fi

# ---------------------------------------------------- 2: the BPE and its shards
prep "$tmp/docs.txt" "$tmp/a/docs" --train-tokenizer 400 >"$tmp/prep.out" 2>"$tmp/err" ||
  { bad "prepare.py --train-tokenizer 400: $(tail -2 "$tmp/err" | tr '\n' '|')"; finish; exit 1; }
prep "$tmp/docs.txt" "$tmp/b/docs" --train-tokenizer 400 >/dev/null 2>&1 || bad "the second prepare.py run failed"
for f in docs.tokenizer.json docs.vocab docs_train_000.bin docs_val_000.bin; do
  if [ ! -s "$tmp/a/$f" ]; then bad "no $f"
  elif ! cmp -s "$tmp/a/$f" "$tmp/b/$f"; then bad "$f differs between two runs on the same input"
  else ok; fi
done
V=$(sed -n 's/.*set \[model\] vocab_size = \([0-9]*\).*/\1/p' "$tmp/prep.out")
[ "$V" = 400 ] && ok || bad "prepare.py printed vocab_size '$V' (want 400): $(cat "$tmp/prep.out")"
got=$("$py" - "$tmp/a/docs" "$tmp/docs.txt" <<'PY'
import struct, sys
from tokenizers import Tokenizer
prefix, text = sys.argv[1], open(sys.argv[2]).read()
tok = Tokenizer.from_file(prefix + ".tokenizer.json")
vocab = [bytes.fromhex(l.strip()) for l in open(prefix + ".vocab")]
ids = []
for split in ("train", "val"):
    b = open(f"{prefix}_{split}_000.bin", "rb").read()
    ids.append(list(struct.unpack(f"<{struct.unpack('<3i', b[:12])[2]}H", b[1024:])))
cut = int(len(text) * 0.95)
if ids[0] != tok.encode(text[:cut]).ids or ids[1] != tok.encode(text[cut:]).ids:
    print("the shards are not the tokenizer's ids of the two splits")
elif b"".join(vocab[i] for i in ids[0] + ids[1]) != text.encode():
    print("the .vocab's bytes do not give the text back")
elif len(ids[0]) > 0.8 * cut:
    print(f"{len(ids[0])} tokens for {cut} characters: the BPE merged nothing much")
else:
    print("ok")
PY
)
[ "$got" = ok ] && ok || bad "BPE shards: $got"

# ---------------------------------------- 3: train, then sample through the vocab
# relative data paths from the data's folder: the checkpoint names them so
(cd "$tmp/a" && "$bin" train --config "$root/configs/tiny.ini" --set vocab_size="$V" --set max_steps=8 --quiet \
  --sample-tokens 30 --set train=docs_train_000.bin --set val=docs_val_000.bin --set out_dir=run >"$tmp/train.out" 2>&1) ||
  { bad "catchat train on the BPE shards: $(tail -2 "$tmp/train.out" | tr '\n' '|')"; finish; exit 1; }
ck=$tmp/a/run/checkpoint.safetensors
# the run's own sample.txt goes through the vocabulary too
if ! head -c 4 "$tmp/a/run/sample.txt" | grep -q '^The ' || grep -qE '<[0-9]+>' "$tmp/a/run/sample.txt"; then
  bad "train's sample.txt is not text through the vocabulary: $(head -c 120 "$tmp/a/run/sample.txt")"
else ok; fi
# sample_check WHAT DIR: from DIR, the vocabulary is found and named, and the text is the tokenizer's decode of the ids
sample_check() {
  local what=$1 dir=$2
  (cd "$dir" && "$bin" sample --ckpt "$ck" --prompt "The model " --tokens 40 --seed 3 >"$tmp/text" 2>"$tmp/err" &&
    "$bin" sample --ckpt "$ck" --prompt "The model " --tokens 40 --seed 3 --json >"$tmp/json" 2>/dev/null)
  if [ $? -ne 0 ]; then bad "$what: sample failed: $(cat "$tmp/err")"; return; fi
  if ! grep -q "decoding with .*docs.vocab" "$tmp/err" || [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
    bad "$what: stderr does not name the vocabulary in one line: $(cat "$tmp/err")"; return; fi
  local r; r=$("$py" - "$tmp/a/docs.tokenizer.json" "$tmp/text" "$tmp/json" <<'PY'
import json, re, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
# a model this short-trained can emit a lone byte of a UTF-8 character (all 256
# are tokens): both sides then show it as U+FFFD
out = open(sys.argv[2], "rb").read().decode("utf-8", "replace")
j = json.load(open(sys.argv[3]))
want = tok.decode(j["prompt_tokens"] + j["tokens"])
if re.search(r"<\d+>", out): print(f"ids printed raw: {out[:80]!r}")
elif out != want + "\n": print(f"text {out[:60]!r} is not the tokenizer's decode {want[:60]!r}")
elif not out.startswith("The model "): print(f"the prompt is not echoed: {out[:40]!r}")
elif len(j["tokens"]) != 40: print(f"{len(j['tokens'])} tokens")
else: print("ok")
PY
)
  [ "$r" = ok ] && ok || bad "$what: $r"
}
sample_check "sample from the data's folder" "$tmp/a"
sample_check "sample from another folder" /
# --vocab still chooses: the bytes' own vocabulary prints other text, and says nothing of the found one
"$py" -c 'import sys; open(sys.argv[1], "w").write("".join(bytes([i]).hex() + "\n" for i in range(256)))' "$tmp/bytes.vocab"
"$bin" sample --ckpt "$ck" --vocab "$tmp/bytes.vocab" --prompt "The" --tokens 40 --seed 3 >"$tmp/text2" 2>"$tmp/err"
if grep -q "decoding with" "$tmp/err"; then bad "--vocab given, yet the found vocabulary was named: $(cat "$tmp/err")"
elif ! grep -q "bytes.vocab has 256 tokens, the model $V" "$tmp/err"; then bad "--vocab bytes.vocab: $(cat "$tmp/err")"
else ok; fi
# without the .vocab: one line saying none was found and that ids print raw
mv "$tmp/a/docs.vocab" "$tmp/a/docs.vocab.away"
"$bin" sample --ckpt "$ck" --prompt "The" --tokens 40 --seed 3 >"$tmp/text3" 2>"$tmp/err"
if [ $? -ne 0 ]; then bad "sample without a .vocab failed: $(cat "$tmp/err")"
elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q "no vocabulary .*docs.vocab.*<id>" "$tmp/err"; then
  bad "sample without a .vocab: stderr $(cat "$tmp/err")"
else ok; fi
mv "$tmp/a/docs.vocab.away" "$tmp/a/docs.vocab"
finish
