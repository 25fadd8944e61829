#!/usr/bin/env bash
# Tokenized data end to end: scripts/prepare.py writes .bin shards and a
# vocabulary; catchat trains on the shards; `sample --vocab` decodes ids
# through a vocabulary of multi-byte tokens.      tests/test_shards.sh path/to/catchat
set -eu
bin=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c "
import random; random.seed(9)
w='the cat sat on a mat and the dog ran far it was good we see'.split()
open('$tmp/corpus.txt','w').write(''.join(random.choice(w)+' ' for _ in range(12000)))"
python3 "$root/scripts/prepare.py" "$tmp/corpus.txt" "$tmp/c" --tokenizer bytes >/dev/null
common=(--config "$root/configs/tiny.ini" --set max_steps=6 --quiet --sample-tokens 0)
"$bin" train "${common[@]}" --set train="$tmp/c_train_000.bin" --set val="$tmp/c_val_000.bin" --set out_dir="$tmp/bin"
# a word-level vocabulary (multi-byte tokens) and a shard of its ids
python3 - "$tmp" <<'PY'
import random, struct, sys
tmp = sys.argv[1]
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran\n"]
with open(f"{tmp}/words.vocab", "w") as f:
    for w in words: f.write(w.encode().hex() + "\n")
random.seed(3)
ids = [random.randrange(len(words)) for _ in range(5000)]
for name, part in (("train", ids[:4500]), ("val", ids[4500:])):
    with open(f"{tmp}/w_{name}.bin", "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, len(part)) + bytes(4 * 253) + struct.pack(f"<{len(part)}H", *part))
PY
"$bin" train "${common[@]}" --set vocab_size=8 --set train="$tmp/w_train.bin" --set val="$tmp/w_val.bin" --set out_dir="$tmp/w"
out=$("$bin" sample --ckpt "$tmp/w/checkpoint.safetensors" --vocab "$tmp/words.vocab" --prompt "the cat " --tokens 12 --temperature 0)
python3 - "$out" <<'PY'
import sys
out = sys.argv[1]
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran\n"]
assert out.startswith("the cat "), out
rest = out[len("the cat "):].rstrip("\n") + ("\n" if out.endswith("\n\n") else "")
# every generated piece is a vocabulary word
i = 0
while i < len(rest):
    m = [w for w in words if rest.startswith(w, i)]
    assert m, (rest, i)
    i += len(max(m, key=len))
print("sample through a word vocabulary:", repr(out[:60]))
PY
ids=$("$bin" sample --ckpt "$tmp/w/checkpoint.safetensors" --vocab "$tmp/words.vocab" --prompt-ids 0,1 --tokens 3 --temperature 0)
case "$ids" in "the cat "*) ;; *) echo "FAIL: --prompt-ids"; exit 1 ;; esac
echo "1 passed, 0 failed"
