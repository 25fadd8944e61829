#!/usr/bin/env bash
# A BPE from the user's own text, offline, end to end on the CPU:
#   1. scripts/prepare.py --train-tokenizer: a bad N (not an integer, < 257,
#      > 65535, with --tokenizer) is one line naming the option, a non-zero
#      exit and nothing written; without the `tokenizers` package one line says
#      `pip install tokenizers`; --tokenizer gpt2 without its encoding files
#      (no tiktoken, or no network) says so in a first line, then indented
#      ones pointing at --train-tokenizer.
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
# gpt2 offline: no tiktoken, or tiktoken with an empty cache and no way out (a first line, what to do indented)
mkdir -p "$tmp/tiktoken_cache"
rm -rf "$tmp/r"
TIKTOKEN_CACHE_DIR=$tmp/tiktoken_cache HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 \
  prep "$tmp/docs.txt" "$tmp/r/p" --tokenizer gpt2 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -ne 0 ] && head -1 "$tmp/err" | grep -q "^prepare: --tokenizer gpt2" && ! tail -n +2 "$tmp/err" | grep -q -v '^  ' &&
   grep -q -- "--train-tokenizer" "$tmp/err" && [ ! -e "$tmp/r" ]; then ok
else bad "--tokenizer gpt2 offline: exit $rc: $(cat "$tmp/err")"; fi

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

# ------------------------------- 3: train; sample with the checkpoint alone
# relative data paths from the data's folder: the checkpoint names them so
(cd "$tmp/a" && "$bin" train --config "$root/configs/tiny.ini" --set vocab_size="$V" --set max_steps=8 --quiet \
  --sample-tokens 30 --set train=docs_train_000.bin --set val=docs_val_000.bin --set out_dir=run >"$tmp/train.out" 2>&1) ||
  { bad "catchat train on the BPE shards: $(tail -2 "$tmp/train.out" | tr '\n' '|')"; finish; exit 1; }
ck=$tmp/a/run/checkpoint.safetensors
# the run's own sample.txt goes through the tokenizer too
if ! head -c 3 "$tmp/a/run/sample.txt" | grep -q '^The' || grep -qE '<[0-9]+>' "$tmp/a/run/sample.txt"; then
  bad "train's sample.txt is not text through the tokenizer: $(head -c 120 "$tmp/a/run/sample.txt")"
else ok; fi
# The prefix's files go away (the tokenizer, the .vocab, the shards): the checkpoint carries what sample needs.
mkdir -p "$tmp/away" && mv "$tmp/a"/docs.* "$tmp/a"/docs_* "$tmp/away/"
# sample_check WHAT ARGS...: from /, no word on stderr, and the text is tokenizer A's decode of the ids
sample_check() {
  local what=$1; shift
  (cd / && "$bin" sample --ckpt "$ck" --tokens 40 --seed 3 "$@" >"$tmp/text" 2>"$tmp/err" &&
    "$bin" sample --ckpt "$ck" --tokens 40 --seed 3 "$@" --json >"$tmp/json" 2>/dev/null)
  if [ $? -ne 0 ]; then bad "$what: sample failed: $(cat "$tmp/err")"; return; fi
  if [ -s "$tmp/err" ]; then bad "$what: stderr: $(cat "$tmp/err")"; return; fi
  local r; r=$("$py" - "$tmp/away/docs.tokenizer.json" "$tmp/text" "$tmp/json" <<'PY'
import json, re, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
# a model this short-trained can emit a lone byte of a UTF-8 character (all 256
# are tokens): both sides then show it as U+FFFD
# (lossy decoders differ in how many U+FFFD a broken sequence gets, and --json's strings hold no NUL: runs
# of U+FFFD count as one, a NUL as U+FFFD)
one = lambda s: re.sub("\ufffd+", "\ufffd", s.replace("\0", "\ufffd"))
out = one(open(sys.argv[2], "rb").read().decode("utf-8", "replace"))
j = json.load(open(sys.argv[3]))
want = one(tok.decode(j["prompt_tokens"] + j["tokens"]))
if re.search(r"<\d+>", out): print(f"ids printed raw: {out[:80]!r}")
elif out != want + "\n": print(f"text {out[:60]!r} is not the tokenizer's decode {want[:60]!r}")
elif one(j["prompt"] + j["text"]) != want: print(f"--json prompt + text is not the decode: {j['prompt']!r} + {j['text'][:40]!r}")
elif len(j["tokens"]) != 40: print(f"{len(j['tokens'])} tokens")
else: print("ok")
PY
)
  [ "$r" = ok ] && ok || bad "$what: $r"
}
sample_check "sample, the checkpoint alone" --prompt "The model "
sample_check "sample, default prompt" 
# --vocab of another tokenizer (the bytes'), or larger than the model: one line, exit 1
"$py" -c 'import sys; open(sys.argv[1], "w").write("".join(bytes([i]).hex() + "\n" for i in range(256)))' "$tmp/bytes.vocab"
"$py" -c 'import sys; open(sys.argv[1], "w").write("".join(bytes([i % 256, i // 256]).hex() + "\n" for i in range(int(sys.argv[2]))))' \
  "$tmp/big.vocab" $((V + 100))
expect_error "--vocab of another tokenizer" "bytes.vocab: the byte tokenizer (raw text), not the model's tokenizer [0-9a-f]\{16\}" \
  "$bin" sample --ckpt "$ck" --vocab "$tmp/bytes.vocab" --tokens 5
expect_error "--vocab larger than the model" "big.vocab: tokenizer [0-9a-f]\{16\}, not the model's" \
  "$bin" sample --ckpt "$ck" --vocab "$tmp/big.vocab" --tokens 5
# the tokenizer's own .vocab is taken as the same tokenizer, without a word
"$bin" sample --ckpt "$ck" --vocab "$tmp/away/docs.vocab" --tokens 5 >/dev/null 2>"$tmp/err" && [ ! -s "$tmp/err" ] && ok ||
  bad "--vocab of the model's own tokenizer: $(cat "$tmp/err")"

# ----------------------------- 4: the prompt is encoded with the BPE's merges
# prompt_tokens of --tokens 0 (nothing generated, nothing healed) are the tokenizer's encode
prompts=("The unbelievable " "naïve café — 3.14159, don't they'll" $'two  spaces\n\n\tand tabs  ' "x" "1234567 ÄÖÜ 日本語 🙂")
for p in "${prompts[@]}"; do
  "$bin" sample --ckpt "$ck" --prompt "$p" --tokens 0 --json >"$tmp/json" 2>"$tmp/err" ||
    { bad "sample --prompt '$p': $(cat "$tmp/err")"; continue; }
  r=$("$py" - "$tmp/away/docs.tokenizer.json" "$tmp/json" "$p" <<'PY'
import json, sys
from tokenizers import Tokenizer
want = Tokenizer.from_file(sys.argv[1]).encode(sys.argv[3]).ids
got = json.load(open(sys.argv[2]))["prompt_tokens"]
print("ok" if got == want else f"ids {got} != the tokenizer's {want}")
PY
)
  [ "$r" = ok ] && ok || bad "--prompt '$p': $r"
done
# healing: a prompt that ends inside a token ("The " is The + a lone space) has its last token taken back,
# and the first generated token begins with that text; echoed, the output starts with the prompt as given
for seed in 1 2 3; do
  "$bin" sample --ckpt "$ck" --prompt "The " --tokens 8 --seed $seed --json >"$tmp/json" 2>"$tmp/err" ||
    { bad "sample --prompt 'The ': $(cat "$tmp/err")"; continue; }
  "$bin" sample --ckpt "$ck" --prompt "The " --tokens 8 --seed $seed >"$tmp/text" 2>/dev/null
  "$bin" sample --ckpt "$ck" --prompt "The " --tokens 8 --seed $seed --no-echo >"$tmp/cont" 2>/dev/null
  r=$("$py" - "$tmp/away/docs.tokenizer.json" "$tmp/json" "$tmp/text" "$tmp/cont" <<'PY'
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
j = json.load(open(sys.argv[2]))
text, cont = (open(f, "rb").read().decode("utf-8", "replace") for f in sys.argv[3:5])
full = tok.encode("The ").ids
first = tok.decode([j["tokens"][0]])
if j["prompt_tokens"] != full[:-1]: print(f"prompt_tokens {j['prompt_tokens']}: not 'The ' ({full}) less its last token")
elif not first.startswith(" "): print(f"the first generated token {first!r} does not begin with the healed ' '")
elif j["prompt"] != "The ": print(f"--json prompt {j['prompt']!r}")
elif not text.startswith("The ") or text != "The " + j["text"] + "\n": print(f"echoed {text[:30]!r}, --json text {j['text'][:30]!r}")
elif cont != j["text"] + "\n": print(f"--no-echo {cont[:30]!r} is not the text after the prompt {j['text'][:30]!r}")
else: print("ok")
PY
)
  [ "$r" = ok ] && ok || bad "healing, seed $seed: $r"
done

# ------------------------------ 5: a token's meaning travels with the data
mv "$tmp/away"/docs* "$tmp/a/"
# a newer, different BPE of the same size at the same prefix: sample still decodes with the run's own
rev=$tmp/rev.txt
"$py" -c 'import sys; t=open(sys.argv[1]).read().split("\n"); open(sys.argv[2],"w").write("\n".join(reversed(t)).swapcase())' \
  "$tmp/docs.txt" "$rev"
prep "$rev" "$tmp/a/docs" --train-tokenizer 400 --replace >/dev/null 2>&1 || bad "prepare.py --replace failed"
cmp -s "$tmp/a/docs.vocab" "$tmp/away/docs.vocab" 2>/dev/null && bad "the second BPE is the first"
cp "$tmp/a/docs.tokenizer.json" "$tmp/b_tokenizer.json"
mkdir -p "$tmp/away" && cp "$tmp/b/docs.tokenizer.json" "$tmp/away/docs.tokenizer.json"  # run A's, for the checks
sample_check "sample after a newer BPE at the prefix" --prompt "The model "
# eval: the model's ids against data of other tokenizers (raw text, a byte-level shard, another BPE's): one line, exit 1
prep "$tmp/docs.txt" "$tmp/bytes" >/dev/null 2>&1 || bad "prepare.py --tokenizer bytes failed"
expect_error "eval on raw text" "docs.txt: ids of the byte tokenizer (raw text), but the model of --ckpt" \
  "$bin" eval --ckpt "$ck" --data "$tmp/docs.txt"
expect_error "eval on a byte-level shard" "bytes_val_000.bin: ids of the byte tokenizer (raw text), but the model" \
  "$bin" eval --ckpt "$ck" --data "$tmp/bytes_val_000.bin"
expect_error "eval on another BPE's shard" "docs_val_000.bin: ids of tokenizer [0-9a-f]\{16\}, but the model of --ckpt" \
  "$bin" eval --ckpt "$ck" --data "$tmp/a/docs_val_000.bin"
# the validation text re-tokenised with the run's own tokenizer (another split): scored, with a note that it differs
prep "$tmp/docs.txt" "$tmp/a/docs" --tokenizer "$tmp/b/docs.tokenizer.json" --val-fraction 0.04 --replace >/dev/null 2>&1 ||
  bad "prepare.py --tokenizer tokenizer.json failed"
cmp -s "$tmp/a/docs.tokenizer.json" "$tmp/b/docs.tokenizer.json" && ok || bad "--tokenizer FILE: no copy beside the shards"
"$bin" eval --ckpt "$ck" >"$tmp/out" 2>"$tmp/err"
if [ $? -ne 0 ]; then bad "eval on the re-made val shard: $(cat "$tmp/err")"
elif ! grep -q "holds other tokens than the run validated on" "$tmp/err"; then bad "eval on a re-made val shard: no note: $(cat "$tmp/err")"
else ok; fi
# train: shards of two tokenizers in one dataset; text beside BPE shards; a .vocab that is not its shards'
base=(--config "$root/configs/tiny.ini" --set vocab_size="$V" --set max_steps=2 --quiet)
expect_error "train on shards of two tokenizers" "holds ids of the byte tokenizer (raw text), .* of tokenizer [0-9a-f]\{16\}: a dataset's files must share one" \
  "$bin" train "${base[@]}" --set "train=$tmp/a/docs_train_000.bin,$tmp/bytes_train_000.bin" --set val="$tmp/a/docs_val_000.bin" \
  --set out_dir="$tmp/r1"
expect_error "train on text, val on BPE shards" "\[data\] train (.*docs.txt) holds ids of the byte tokenizer (raw text), \[data\] val" \
  "$bin" train "${base[@]}" --set train="$tmp/docs.txt" --set val="$tmp/a/docs_val_000.bin" --set out_dir="$tmp/r2"
cp "$tmp/bytes.vocab" "$tmp/a/docs.vocab"
expect_error "train on shards beside another tokenizer's .vocab" "docs.vocab is not the tokenizer of the shards beside it" \
  "$bin" train "${base[@]}" --set train="$tmp/a/docs_train_000.bin" --set val="$tmp/a/docs_val_000.bin" --set out_dir="$tmp/r3"
# a vocab_size below the shards' tokenizer: named with the value to set; a --sample-prompt the BPE cannot
# encode: refused before the first step, not after the run
expect_error "vocab_size below the tokenizer's" "set \[model\] vocab_size = $V" \
  "$bin" train --config "$root/configs/tiny.ini" --set vocab_size=$((V - 1)) --set max_steps=2 --quiet \
  --set train="$tmp/b/docs_train_000.bin" --set val="$tmp/b/docs_val_000.bin" --set out_dir="$tmp/r5"
expect_error "--sample-prompt not UTF-8" "--sample-prompt: the run's tokenizer cannot encode it" \
  "$bin" train "${base[@]}" --set train="$tmp/b/docs_train_000.bin" --set val="$tmp/b/docs_val_000.bin" \
  --set out_dir="$tmp/r6" --sample-prompt $'The \xff'
[ ! -e "$tmp/r6/checkpoint.safetensors" ] && ok || bad "--sample-prompt refused only after training"
# --init and --resume from a model of other ids
expect_error "--init from a model of another tokenizer" "ids of the byte tokenizer (raw text), but the model of --init" \
  "$bin" train "${base[@]}" --set train="$tmp/bytes_train_000.bin" --set val="$tmp/bytes_val_000.bin" --set out_dir="$tmp/r4" \
  --init "$ck"
finish
