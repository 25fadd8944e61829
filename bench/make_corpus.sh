#!/usr/bin/env bash
# A text corpus of a given size for timing scripts/prepare.py (docs/results/prepare_stream_*.txt):
# the repository's docs and a copy of Python's standard library (*.py), repeated until SIZE bytes,
# each repetition varied so that the text is not one block over and over (the files in another
# order, each file's lines rotated, its numbers shifted), as UTF-8 text. Generated, never committed.
#   bench/make_corpus.sh OUT.txt [SIZE]      SIZE in bytes, K/M/G (powers of 1000) allowed; default 1G
#   PYTHON=...  the interpreter (default .venv/bin/python, else python3); STDLIB=... the *.py folder
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: bench/make_corpus.sh OUT.txt [SIZE]}
size=${2:-1G}
py=${PYTHON:-$root/.venv/bin/python}
[ -x "$py" ] || py=python3
stdlib=${STDLIB:-$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')}
exec "$py" - "$out" "$size" "$root" "$stdlib" <<'PY'
import glob, os, random, re, sys
out, size, root, stdlib = sys.argv[1:5]
m = re.fullmatch(r"(\d+)([KMG]?)", size.upper())
if not m:
    sys.exit(f"make_corpus: SIZE {size!r}: a number of bytes with an optional K, M or G")
want = int(m.group(1)) * 1000 ** " KMG".index(m.group(2) or " ")
names = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
names += sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True))
docs = []
for n in names:
    try:
        docs.append(open(n, encoding="utf-8").read())
    except (OSError, UnicodeDecodeError):
        pass  # a file of another encoding: left out
rng, number, n, rep = random.Random(0), re.compile(r"\d+"), 0, 0
with open(out, "w", encoding="utf-8") as f:
    while n < want:
        order = list(range(len(docs)))
        rng.shuffle(order)
        for i in order:
            lines = docs[i].split("\n")
            k = rng.randrange(len(lines))
            text = "\n".join(lines[k:] + lines[:k])
            if rep:
                text = number.sub(lambda m: str(int(m.group()) + rep), text)
            text = text[:want - n] + "\n" if n + len(text.encode()) + 1 > want else text + "\n"
            f.write(text)
            n += len(text.encode())
            if n >= want:
                break
        rep += 1
print(f"{out}: {n} bytes from {len(docs)} files, {rep} repetitions")
PY
