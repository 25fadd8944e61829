#!/usr/bin/env bash
# The Python and shell scripts around the trainer:
#   A. scripts/prepare.py: --tokenizer bytes tokenizes the file's bytes as they
#      are (invalid UTF-8 included) and cuts the val split on bytes; other
#      tokenizers refuse a file that is not UTF-8; bad --shard-tokens and
#      --val-fraction values, and an input too short for both splits, give one
#      line naming the option and a non-zero exit, and write nothing; an
#      OUT_PREFIX in a folder not made yet makes it, and one that cannot be
#      made is one line and exit 1; nothing is lost: a prefix with shards is
#      refused unless --replace (then all of its files are replaced), a failed
#      or interrupted run leaves the prefix as it was, an executable is refused
#      as catchat refuses it; --tokenizer gpt2 without tiktoken or its encoding
#      files says so in lines that fit an 80-column terminal; it streams: a
#      glob of files is read as a folder is, --tokenizer-sample takes a size
#      (one line and exit 2 otherwise), a binary file late in the input is
#      refused with the prefix as it was, and a corpus larger than the memory
#      a `ulimit -v` leaves (too small to hold it as the earlier whole-file
#      reader did) is prepared, every byte a token, and catchat trains on it.
#   B. scripts/install_deps.sh puts the Python side into one interpreter (a venv
#      on /usr/bin/python3 with its site packages, where Debian's python3-torch
#      lives) whatever `python3` is first on PATH, keeps it when it is right,
#      survives an offline pip; docs/quickstart.md runs the scripts with it; the
#      options in scripts/catchat_torch.py's docstring are the ones it parses
#      (and, where torch is there, are honoured).
#   C. scripts/prepare_data.sh writes its corpus files readable by others (0666
#      less the umask), not mktemp's 0600.
#   D. scripts/plot.py draws a telemetry CSV, the learning rate included; it and
#      scripts/telemetry_summary.py say in one line what is wrong with a file.
#   E. bench/pytorch_model.py without a CUDA device prints a skip line per
#      variant (loss, V) and exits 0; bench/vocab_table.sh tags every line.
#   tests/test_scripts.sh [REPO_ROOT [CATCHAT]]   (exit 77 = skipped: no Python at all)
# CATCHAT (default REPO_ROOT/build/catchat where it is built) trains on the large corpus's shards.
# The Python it runs the scripts with is the project's one: REPO/.venv/bin/python
# (what install_deps.sh makes) where it exists, else python3.
set -u
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
if [ -x "$root/.venv/bin/python" ]; then py=$root/.venv/bin/python
elif command -v python3 >/dev/null 2>&1; then py=$(command -v python3)
else echo "no Python interpreter: skipped"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fails=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
skip() { echo "skip: $*"; }

# ---------------------------------------------------------------- A: prepare.py
prep() { "$py" "$root/scripts/prepare.py" "$@"; }
# shard_tokens FILE...: the tokens of .bin shards, concatenated, as a Python list
shard_tokens() {
  "$py" - "$@" <<'PY'
import struct, sys
out = []
for p in sys.argv[1:]:
    b = open(p, "rb").read()
    magic, ver, n = struct.unpack("<3i", b[:12])
    assert (magic, ver) == (20240520, 1) and len(b) == 1024 + 2 * n, (p, magic, ver, n, len(b))
    out += struct.unpack(f"<{n}H", b[1024:])
print(out)
PY
}

# A1: bytes mode keeps invalid UTF-8 as the bytes it is: ab\xff\xfecd is 6 tokens.
printf 'ab\xff\xfecd' >"$tmp/bad.txt"
if prep "$tmp/bad.txt" "$tmp/a1" --tokenizer bytes --val-fraction 0.5 >"$tmp/out" 2>"$tmp/err"; then
  train=$(shard_tokens "$tmp"/a1_train_*.bin) val=$(shard_tokens "$tmp"/a1_val_*.bin)
  if [ "$train" = "[97, 98, 255]" ] && [ "$val" = "[254, 99, 100]" ]; then ok
  else bad "A1 bytes of ab\\xff\\xfecd at --val-fraction 0.5: train $train val $val (want [97, 98, 255] [254, 99, 100])"; fi
else bad "A1 prepare.py on invalid UTF-8 with --tokenizer bytes failed: $(tail -1 "$tmp/err")"; fi

# A2: the val cut is on bytes, and the shards hold every byte once (multi-byte UTF-8 too).
"$py" -c "
import random; random.seed(5)
open('$tmp/u8.txt','wb').write(''.join(random.choice(['é','ü','日本','a',' ','\n']) for _ in range(400)).encode())"
n=$(stat -c %s "$tmp/u8.txt")
if prep "$tmp/u8.txt" "$tmp/a2" --val-fraction 0.1 --shard-tokens 97 >/dev/null 2>"$tmp/err"; then
  got=$("$py" -c "
import sys; t = $(shard_tokens "$tmp"/a2_train_*.bin); v = $(shard_tokens "$tmp"/a2_val_*.bin)
raw = open('$tmp/u8.txt','rb').read(); cut = int(len(raw) * 0.9)
print('ok' if bytes(t) == raw[:cut] and bytes(v) == raw[cut:] else f'train {len(t)} val {len(v)} of {len(raw)} bytes')")
  shards=$(ls "$tmp"/a2_train_*.bin | wc -l) want=$(( (n * 9 / 10 + 96) / 97 ))
  if [ "$got" = ok ] && [ "$shards" -eq "$want" ]; then ok
  else bad "A2 byte split of a $n-byte UTF-8 file: $got, $shards train shards (want $want)"; fi
else bad "A2 prepare.py on UTF-8 text failed: $(tail -1 "$tmp/err")"; fi

# expect_refusal WHAT PATTERN ARGS...: non-zero exit, one line on stderr matching
# PATTERN, no traceback, no shard written.
expect_refusal() {
  local what=$1 pattern=$2; shift 2
  rm -f "$tmp"/r_*
  prep "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines; lines=$(wc -l <"$tmp/err")
  if [ $rc -eq 0 ]; then bad "$what: exit 0 (want an error)"
  elif [ "$lines" -ne 1 ]; then bad "$what: $lines lines on stderr (want 1): $(head -3 "$tmp/err" | tr '\n' '|')"
  elif ! grep -q -- "$pattern" "$tmp/err"; then bad "$what: stderr does not name $pattern: $(cat "$tmp/err")"
  elif ls "$tmp"/r_* >/dev/null 2>&1; then bad "$what: wrote $(ls "$tmp"/r_* | tr '\n' ' ')"
  else ok; fi
}
printf 'hello world, some text to split\n' >"$tmp/small.txt"
expect_refusal "A3 --shard-tokens 0" --shard-tokens "$tmp/small.txt" "$tmp/r" --shard-tokens 0
expect_refusal "A4 --shard-tokens -5" --shard-tokens "$tmp/small.txt" "$tmp/r" --shard-tokens -5
for f in 0 1 1.5 -0.1 nan; do
  expect_refusal "A5 --val-fraction $f" --val-fraction "$tmp/small.txt" "$tmp/r" --val-fraction "$f"
done
printf 'x' >"$tmp/one.txt"
expect_refusal "A6 a 1-byte input (train would be empty)" --val-fraction "$tmp/one.txt" "$tmp/r"
printf 'abcdefghij' >"$tmp/ten.txt"
expect_refusal "A7 --val-fraction 1e-17 (val would be empty)" --val-fraction "$tmp/ten.txt" "$tmp/r" --val-fraction 1e-17
expect_refusal "A7 --shard-tokens x" --shard-tokens "$tmp/ten.txt" "$tmp/r" --shard-tokens x
expect_refusal "A8 invalid UTF-8 for a text tokenizer" UTF-8 "$tmp/bad.txt" "$tmp/r" --tokenizer "$tmp/none/tokenizer.json"
expect_refusal "A9 a missing input" "$tmp/missing.txt" "$tmp/missing.txt" "$tmp/r"
# A10: into folders that do not exist yet: they are made
if prep "$tmp/small.txt" "$tmp/new/deeper/p" >"$tmp/out" 2>"$tmp/err" && [ ! -s "$tmp/err" ] &&
   [ -s "$tmp/new/deeper/p_train_000.bin" ] && [ -s "$tmp/new/deeper/p_val_000.bin" ] && [ -s "$tmp/new/deeper/p.vocab" ]; then ok
else bad "A10 prepare.py into a new folder: $(head -3 "$tmp/err" | tr '\n' '|')"; fi
# A12: a folder as OUT_PREFIX (a trailing slash): refused, naming a prefix inside it, nothing written
mkdir -p "$tmp/outdir"
expect_refusal "A12 a folder as OUT_PREFIX" "names a folder: give a file-name prefix inside it" "$tmp/small.txt" "$tmp/outdir/"
[ -z "$(ls -A "$tmp/outdir")" ] || bad "A12 wrote into the folder: $(ls -A "$tmp/outdir" | tr '\n' ' ')"
# A11: a file where the folder should be: one line naming it, exit 1, no traceback
: >"$tmp/afile"
prep "$tmp/small.txt" "$tmp/afile/p" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "afile" "$tmp/err"; then ok
else bad "A11 prepare.py under a file: exit $rc: $(head -3 "$tmp/err" | tr '\n' '|')"; fi

# ------------------------------------------------------ B: one Python interpreter
# B1: install_deps.sh with every Debian package present (dpkg stubbed), a broken
# `python3` first on PATH (the pyenv case) and pip offline: it still exits 0,
# checks python3-venv and python3-torch, and leaves a venv on /usr/bin/python3
# with the system site packages (so Debian's torch imports from it).
if [ -x /usr/bin/python3 ]; then
  mkdir -p "$tmp/stub"
  printf '#!/bin/sh\necho "$@" >>"%s/dpkg.log"\nexit 0\n' "$tmp" >"$tmp/stub/dpkg"
  printf '#!/bin/sh\necho "apt-get $*" >>"%s/apt.log"\nexit 1\n' "$tmp" >"$tmp/stub/apt-get"
  printf '#!/bin/sh\necho "not this python3" >&2\nexit 3\n' >"$tmp/stub/python3"
  chmod +x "$tmp/stub/"*
  venv=$tmp/venv
  deps() { PATH="$tmp/stub:$PATH" CATCHAT_VENV=$venv PIP_NO_INDEX=1 "$root/scripts/install_deps.sh" >"$tmp/deps.out" 2>&1; }
  if ! deps; then bad "B1 install_deps.sh failed offline: $(tail -2 "$tmp/deps.out" | tr '\n' '|')"
  elif ! grep -qw python3-venv "$tmp/dpkg.log" || ! grep -qw python3-torch "$tmp/dpkg.log"; then
    bad "B1 install_deps.sh does not check python3-venv and python3-torch"
  elif [ ! -x "$venv/bin/python" ]; then bad "B1 install_deps.sh made no venv at \$CATCHAT_VENV"
  elif ! grep -qx 'include-system-site-packages = true' "$venv/pyvenv.cfg"; then
    bad "B1 the venv does not see the system site packages (Debian's python3-torch)"
  elif [ "$("$venv/bin/python" -c 'import sys; print(sys._base_executable)')" != /usr/bin/python3 ] &&
       [ "$(realpath "$("$venv/bin/python" -c 'import sys; print(sys._base_executable)')")" != "$(realpath /usr/bin/python3)" ]; then
    bad "B1 the venv is not based on /usr/bin/python3"
  elif /usr/bin/python3 -c 'import torch' 2>/dev/null && ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    bad "B1 torch imports in /usr/bin/python3 but not in the venv"
  else ok; fi
  # B2: a second run keeps a right venv (idempotent); a venv without the system
  # site packages is made again.
  if [ -x "$venv/bin/python" ]; then
    touch "$venv/marker"
    if deps && [ -e "$venv/marker" ]; then ok; else bad "B2 a second install_deps.sh run did not keep the venv"; fi
    rm -rf "$venv" && /usr/bin/python3 -m venv --without-pip "$venv" 2>/dev/null && touch "$venv/marker"
    if deps && [ ! -e "$venv/marker" ] && grep -qx 'include-system-site-packages = true' "$venv/pyvenv.cfg"; then ok
    else bad "B2 install_deps.sh kept a venv that does not see the system site packages"; fi
  else bad "B2 no venv from B1"; fi
else skip "B1-B2 need /usr/bin/python3 (Debian's interpreter)"; fi

# B3: the quick start runs the Python scripts with the venv's interpreter, never
# a bare python3 or pip (`.venv/bin/python -m pip` is fine).
q=$root/docs/quickstart.md
if sed 's/-m pip / /g' "$q" | grep -nE '(^|[[:space:]`])(python3?|pip3?)[[:space:]]|^[[:space:]]*scripts/(catchat_torch|plot)\.py' >"$tmp/q"; then
  bad "B3 docs/quickstart.md runs Python outside .venv: $(tr '\n' '|' <"$tmp/q")"
elif ! grep -q '\.venv/bin/python scripts/catchat_torch\.py' "$q"; then
  bad "B3 docs/quickstart.md does not run catchat_torch.py with .venv/bin/python"
else ok; fi

# B4: every --option on catchat_torch.py's command lines in its docstring is one its
# argparse parses, and back.
got=$("$py" - "$root/scripts/catchat_torch.py" <<'PY'
import ast, re, sys
tree = ast.parse(open(sys.argv[1]).read())
usage = [l for l in ast.get_docstring(tree).splitlines() if "catchat_torch.py " in l]  # its command lines
doc = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", "\n".join(usage)))
parsed = {a.value for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "add_argument"
          for a in n.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
print("ok" if doc == parsed and doc else f"docstring {sorted(doc)} argparse {sorted(parsed)}")
PY
)
if [ "$got" = ok ]; then ok; else bad "B4 catchat_torch.py: $got"; fi

# B5: with torch, --batch-size and --seq-len pick the batch the loss is on.
if "$py" -c 'import torch' 2>/dev/null; then
  got=$(cd "$tmp" && "$py" - "$root/scripts" <<'PY'
import subprocess, sys, torch
sys.path.insert(0, sys.argv[1])
from catchat_torch import CatchatModel, batch_loss, first_batch, save_catchat
torch.manual_seed(0)
m = dict(vocab_size=256, d_model=8, n_layers=1, n_heads=2, ctx_window=4, seq_len=16,
         rms_eps=1e-5, rms_floor=1e-12, inv_rms_max=1e4)
cfg = {"model": m, "train": {"batch_size": 4}}
model = CatchatModel(m)
save_catchat(model, "w.safetensors", cfg)
open("d.txt", "wb").write(bytes(range(32, 127)) * 3)
out = subprocess.run([sys.executable, f"{sys.argv[1]}/catchat_torch.py", "w.safetensors", "d.txt",
                      "--batch-size", "3", "--seq-len", "5"], capture_output=True, text=True)
with torch.no_grad():
    want = batch_loss(model, *first_batch("d.txt", 3, 5)).item()
ok = out.returncode == 0 and f"loss {want:.6f}" in out.stdout and "B=3, T=5" in out.stdout
print("ok" if ok else f"rc {out.returncode} want loss {want:.6f}: {out.stdout.strip()} {out.stderr.strip()[-300:]}")
PY
)
  if [ "$got" = ok ]; then ok; else bad "B5 catchat_torch.py --batch-size 3 --seq-len 5: $got"; fi
else skip "B5 needs torch in $py"; fi

# ------------------------------------------------------- C: prepare_data.sh modes
mkdir -p "$tmp/fortunes"
for i in $(seq 1 45); do printf 'fortune number %d\nsecond line\n%%\n' "$i"; done >"$tmp/fortunes/fortunes"
for mask in 022 002; do
  want=$(printf '%o' $(( 0666 & ~0$mask )))
  if (umask $mask && FORTUNES_DIR=$tmp/fortunes "$root/scripts/prepare_data.sh" "$tmp/corpus$mask" >/dev/null 2>"$tmp/err"); then
    modes=$(stat -c %a "$tmp/corpus$mask/train.txt" "$tmp/corpus$mask/val.txt" | tr '\n' ' ')
    nval=$(grep -c '^fortune number' "$tmp/corpus$mask/val.txt")
    if [ "$modes" = "$want $want " ] && [ "$nval" -eq 2 ]; then ok
    else bad "C prepare_data.sh under umask $mask: modes $modes(want $want), $nval val entries (want 2)"; fi
  else bad "C prepare_data.sh failed: $(tail -1 "$tmp/err")"; fi
done

# A folder of .txt files is one text in name order; catchat reads the shards it
# writes through a glob, all of them.
mkdir -p "$tmp/folder"
printf 'alpha\n' >"$tmp/folder/b.txt"; printf 'first' >"$tmp/folder/a.txt"; printf 'skip me' >"$tmp/folder/c.md"
if prep "$tmp/folder" "$tmp/f" --val-fraction 0.25 --shard-tokens 4 >/dev/null 2>"$tmp/err"; then
  got=$(shard_tokens "$tmp"/f_train_*.bin "$tmp"/f_val_*.bin)
  want=$("$py" -c 'print(list(b"first\nalpha\n"))')
  n=$(ls "$tmp"/f_train_*.bin | wc -l)
  if [ "$got" = "$want" ] && [ "$n" -gt 1 ]; then ok; else bad "A3 folder: $got ($n train shards; want $want, several)"; fi
else bad "A3 prepare.py on a folder failed: $(tail -1 "$tmp/err")"; fi

# ----------------------------------------------------------------- D: plot.py
# The plot draws the learning rate ([train] lr_schedule) beside loss, norms and
# scale: a telemetry CSV with a wsd-shaped lr column gives a PNG, and one
# without the lr column is an error (the plot does not silently drop it).
if "$py" -c "import matplotlib" 2>/dev/null; then
  {
    echo "step,tokens,loss,running_loss,lr,loss_scale,grad_norm,grad_norm_clipped,skipped,step_ms,tok_per_s,seq_per_s,eval_loss,eval_top1,eval_top5"
    for i in $(seq 1 20); do
      lr=$(awk -v i=$i 'BEGIN { print (i <= 15 ? 0.001 : 0.001 - (i - 15) * 0.00018) }')
      ev=""; [ $((i % 10)) -eq 0 ] && ev="2.5,0.4,0.7" || ev=",,"
      echo "$i,512,3.$i,3.$i,$lr,1,0.5,0.5,0,10,51200,100,$ev"
    done
  } >"$tmp/tel.csv"
  if "$py" "$root/scripts/plot.py" "$tmp/tel.csv" -o "$tmp/tel.png" >/dev/null 2>"$tmp/err" && [ -s "$tmp/tel.png" ]; then ok
  else bad "D plot.py on a telemetry CSV: $(tail -1 "$tmp/err")"; fi
  cut -d, -f1-4,6- "$tmp/tel.csv" >"$tmp/nolr.csv"
  if "$py" "$root/scripts/plot.py" "$tmp/nolr.csv" -o "$tmp/nolr.png" >/dev/null 2>&1; then bad "D plot.py without an lr column: exit 0"
  else ok; fi
else skip "D plot.py: no matplotlib"; fi
# D2: plot.py and telemetry_summary.py on a missing file, another CSV or an empty one: one line, exit 1
printf 'a,b\n1,2\n' >"$tmp/other.csv"
echo "step,tokens,loss,running_loss,lr,loss_scale,grad_norm,grad_norm_clipped,skipped,step_ms,tok_per_s,seq_per_s,eval_loss,eval_top1,eval_top5" >"$tmp/empty.csv"
for s in plot telemetry_summary; do
  for f in "$tmp/missing.csv:No such file or directory" "$tmp/other.csv:not a catchat telemetry CSV" "$tmp/empty.csv:no rows"; do
    "$py" "$root/scripts/$s.py" "${f%%:*}" >/dev/null 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^$s: ${f%%:*}: ${f#*:}" "$tmp/err"; then ok
    else bad "D2 $s.py on $(basename "${f%%:*}"): exit $rc: $(head -3 "$tmp/err" | tr '\n' '|')"; fi
  done
done

# ------------------------------------- E: the PyTorch comparison without a GPU
# bench/pytorch_model.py with no CUDA device (hidden here, so that a GPU machine
# runs no benchmark) prints one skip line per variant, each naming its loss and
# V, and exits 0, with or without torch and the loss packages; an unknown loss is
# a usage error. bench/vocab_table.sh with a stand-in catchat: every line it
# appends names impl, loss and V, catchat's tagged, PyTorch's skipped.
pm=$root/bench/pytorch_model.py
if PYTHONPYCACHEPREFIX=$tmp/pyc "$py" -m py_compile "$pm" 2>"$tmp/err" && "$py" "$pm" --help >"$tmp/out" 2>&1 &&
  grep -q -- '--losses' "$tmp/out" && grep -q -- '--vocab' "$tmp/out"; then ok
else bad "E1 pytorch_model.py does not compile or --help lacks --losses/--vocab: $(tail -1 "$tmp/err")"; fi
if CUDA_VISIBLE_DEVICES= "$py" "$pm" --vocab 8192 --modes eager --losses plain,liger,cce --steps 1 --warmup 0 \
  >"$tmp/out" 2>"$tmp/err"; then
  got=$("$py" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("ok" if [(r["loss"], r["V"], r["mode"], bool(r.get("skipped"))) for r in rows] ==
      [(n, 8192, "eager", True) for n in ("plain", "liger", "cce")] else rows)' "$tmp/out" 2>&1)
  if [ "$got" = ok ]; then ok; else bad "E2 pytorch_model.py without CUDA: $got"; fi
else bad "E2 pytorch_model.py without CUDA: exit $?: $(tail -1 "$tmp/err")"; fi
"$py" "$pm" --losses plain,nope >/dev/null 2>&1
rc=$?; if [ "$rc" -eq 2 ]; then ok; else bad "E3 pytorch_model.py --losses nope: exit $rc (want 2)"; fi
cat >"$tmp/catchat" <<'SH'
#!/bin/sh
v=0; while [ $# -gt 0 ]; do case $1 in vocab_size=*) v=${1#vocab_size=} ;; esac; shift; done
echo "{\"V\":$v,\"gpu_ms\":1.5,\"gpu_measured\":true}"
SH
chmod +x "$tmp/catchat"
if CUDA_VISIBLE_DEVICES= VOCABS="256 8192" LOSSES=plain,cce PYTHON=$py SITE=$tmp/site \
  bash "$root/bench/vocab_table.sh" "$tmp/vt.jsonl" "$tmp/catchat" >/dev/null 2>"$tmp/err"; then
  got=$("$py" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["impl"], r["loss"], r["V"], r.get("run"), bool(r.get("skipped"))) for r in rows]
want = [x for V in (256, 8192) for x in [("catchat", "chunked", V, 1, False), ("pytorch", "plain", V, None, True),
        ("pytorch", "cce", V, None, True), ("catchat", "chunked", V, 2, False)]]
print("ok" if got == want else got)' "$tmp/vt.jsonl" 2>&1)
  if [ "$got" = ok ]; then ok; else bad "E4 vocab_table.sh with a stand-in catchat: $got"; fi
else bad "E4 vocab_table.sh: exit $?: $(tail -1 "$tmp/err")"; fi

# ------------------------------------------------ A: prepare.py loses nothing
# prefix_state PREFIX: every file of the prefix with its checksum, for "as it was"
prefix_state() { (cd "$(dirname "$1")" && ls -A | grep "^$(basename "$1")" | xargs -r cksum); }
"$py" -c "
import random; random.seed(2); w='the cat sat on a mat and the dog ran far it was good'.split()
open('$tmp/corpus.txt', 'w').write(' '.join(random.choice(w) for _ in range(20000)))"
mkdir -p "$tmp/pl"
prep "$tmp/corpus.txt" "$tmp/pl/x" --shard-tokens 20000 >/dev/null 2>"$tmp/err" || bad "A13 setup: $(cat "$tmp/err")"
before=$(prefix_state "$tmp/pl/x")
# A13: a prefix with shards is refused (one line, nothing changed); --replace replaces all, fewer shards too
prep "$tmp/corpus.txt" "$tmp/pl/x" --shard-tokens 50000 >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "already has 5 shard(s) .*pass --replace" "$tmp/err" &&
  [ "$(prefix_state "$tmp/pl/x")" = "$before" ] && ok || bad "A13 a prefix with shards: exit $rc: $(cat "$tmp/err")"
prep "$tmp/corpus.txt" "$tmp/pl/x" --shard-tokens 50000 --replace >/dev/null 2>"$tmp/err" || bad "A13 --replace: $(cat "$tmp/err")"
[ "$(ls "$tmp/pl" | tr '\n' ' ')" = "x.vocab x_train_000.bin x_train_001.bin x_val_000.bin " ] && ok ||
  bad "A13 --replace left: $(ls "$tmp/pl" | tr '\n' ' ')"
before=$(prefix_state "$tmp/pl/x")
# A14: past a file-size limit (a full disk): one line naming the file, the prefix as it was, no temporary file
(ulimit -f 20; prep "$tmp/corpus.txt" "$tmp/pl/x" --shard-tokens 50000 --replace) >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "cannot write $tmp/pl/x_train_000.bin: File too large" "$tmp/err" &&
  [ "$(prefix_state "$tmp/pl/x")" = "$before" ] && ok || bad "A14 a file-size limit: exit $rc: $(cat "$tmp/err"; ls "$tmp/pl")"
# A15: Ctrl-C: one line, exit 130, the prefix as it was (job control on: a background job keeps SIGINT)
"$py" -c "open('$tmp/big.txt', 'w').write('abc def ghi\n' * 3000000)"
# (the signal goes to the job's process group, as Ctrl-C does, while the shards are being written)
(set -m; prep "$tmp/big.txt" "$tmp/pl/x" --replace --shard-tokens 20000 >/dev/null 2>"$tmp/err" & p=$!
 for _ in $(seq 3000); do ls "$tmp/pl" | grep -q '\.tmp\.' && break; sleep 0.01; done; kill -INT -- -$p; wait $p
 echo $? >"$tmp/rc")
[ "$(cat "$tmp/rc")" -eq 130 ] && [ "$(cat "$tmp/err")" = "prepare: interrupted: OUT_PREFIX is as it was" ] &&
  [ "$(prefix_state "$tmp/pl/x")" = "$before" ] && ! ls "$tmp/pl" | grep -q '\.tmp\.' && ok || bad "A15 Ctrl-C: exit $(cat "$tmp/rc"): $(head -3 "$tmp/err")"
# A15b: SIGTERM (a job's end) the same: one line, exit 143, no temporary file left, the prefix as it was
("$py" "$root/scripts/prepare.py" "$tmp/big.txt" "$tmp/pl/x" --replace --shard-tokens 20000 >/dev/null 2>"$tmp/err" &
 p=$!  # the interpreter itself, not a shell around it
 for _ in $(seq 3000); do ls "$tmp/pl" | grep -q '\.tmp\.' && break; sleep 0.01; done; kill -TERM $p; wait $p
 echo $? >"$tmp/rc")
[ "$(cat "$tmp/rc")" -eq 143 ] && [ "$(cat "$tmp/err")" = "prepare: interrupted by SIGTERM: OUT_PREFIX is as it was" ] &&
  [ "$(prefix_state "$tmp/pl/x")" = "$before" ] && ! ls "$tmp/pl" | grep -q '\.tmp\.' && ok ||
  bad "A15b SIGTERM: exit $(cat "$tmp/rc"): $(head -3 "$tmp/err"; ls "$tmp/pl")"
# A16: an executable is refused as catchat refuses it (one rule); --allow-binary reads its bytes
expect_refusal "A16 an executable" "looks like a binary file, not text (it holds NUL bytes" "$(command -v ls)" "$tmp/r"
prep "$(command -v ls)" "$tmp/r_bin" --allow-binary >/dev/null 2>"$tmp/err" && ok || bad "A16 --allow-binary: $(cat "$tmp/err")"
rm -f "$tmp"/r_bin*
# A17: the value given is the value said
expect_refusal "A17 --val-fraction 0.9999999" "too short for --val-fraction 0.9999999:" "$tmp/small.txt" "$tmp/r" \
  --val-fraction 0.9999999
# A18: --tokenizer gpt2 without tiktoken, or without its encoding files (a stand-in tiktoken either way): a
# first line naming the option, what to do on indented lines, every line within 80 columns, nothing written
mkdir -p "$tmp/no_tt/tiktoken" "$tmp/offline_tt/tiktoken"
echo 'raise ImportError("no tiktoken here")' >"$tmp/no_tt/tiktoken/__init__.py"
printf 'def get_encoding(name):\n    raise ConnectionError("%s")\n' "$(printf 'no network %.0s' $(seq 20))" \
  >"$tmp/offline_tt/tiktoken/__init__.py"
for case in "no_tt:prepare: --tokenizer gpt2 needs tiktoken" "offline_tt:prepare: --tokenizer gpt2: its encoding files cannot be had"; do
  rm -f "$tmp"/r_*
  PYTHONPATH="$tmp/${case%%:*}" prep "$tmp/small.txt" "$tmp/r_gpt2" --tokenizer gpt2 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 0 ] && head -1 "$tmp/err" | grep -q "^${case#*:}" && ! tail -n +2 "$tmp/err" | grep -q -v '^  ' &&
     grep -q -- "--train-tokenizer N" "$tmp/err" && ! ls "$tmp"/r_* >/dev/null 2>&1 &&
     "$py" -c "import sys; sys.exit(max(len(l) for l in open(sys.argv[1], encoding='utf-8').read().split('\n')) > 80)" "$tmp/err"
  then ok; else bad "A18 --tokenizer gpt2 (${case%%:*}): exit $rc: $(cat "$tmp/err")"; fi
done

# A19: a glob (quoted: prepare.py expands it) is read as a folder is: the files it matches in name order,
# each ending in a newline; one that matches nothing is one line naming it
printf 'gamma' >"$tmp/folder/d.txt"
if prep "$tmp/folder/[abd].txt" "$tmp/g" --val-fraction 0.25 >/dev/null 2>"$tmp/err"; then
  got=$(shard_tokens "$tmp"/g_train_*.bin "$tmp"/g_val_*.bin)
  want=$("$py" -c 'print(list(b"first\nalpha\ngamma\n"))')
  [ "$got" = "$want" ] && ok || bad "A19 glob: $got (want $want)"
else bad "A19 prepare.py on a glob failed: $(tail -1 "$tmp/err")"; fi
expect_refusal "A19 a glob matching nothing" "nothing\*.txt: no file matches the pattern" "$tmp/nothing*.txt" "$tmp/r"
# A20: --tokenizer-sample takes a size (K, M, G, T) and only with --train-tokenizer: else one line, exit 2
for v in x 0 -5 1.5G 10Q ""; do
  prep "$tmp/small.txt" "$tmp/r" --train-tokenizer 300 --tokenizer-sample "$v" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "--tokenizer-sample must be a size" "$tmp/err" &&
    ! ls "$tmp"/r_* >/dev/null 2>&1 && ok || bad "A20 --tokenizer-sample '$v': exit $rc: $(cat "$tmp/err")"
done
prep "$tmp/small.txt" "$tmp/r" --tokenizer-sample 500M >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "--tokenizer-sample goes with --train-tokenizer" "$tmp/err" &&
  ok || bad "A20 --tokenizer-sample without --train-tokenizer: exit $rc: $(cat "$tmp/err")"
# A21: the binary rule is each file's, applied as it is read: a NUL 20 MB into the second file of a folder,
# after shards were written, is refused naming that file and the byte in it; the prefix stays as it was
mkdir -p "$tmp/late"
"$py" -c "
open('$tmp/late/a.txt', 'w').write('some text\n' * 100000)
open('$tmp/late/b.txt', 'wb').write(b'more text\n' * 2000000 + b'\0tail\n')"
before=$(prefix_state "$tmp/pl/x")
prep "$tmp/late" "$tmp/pl/x" --replace --shard-tokens 1000000 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ "$(cat "$tmp/err")" = "prepare: $tmp/late/b.txt: looks like a binary file, not text (it holds NUL bytes, the first at byte 20000000): pass --allow-binary to tokenize its bytes anyway" ] &&
  [ "$(prefix_state "$tmp/pl/x")" = "$before" ] && ! ls "$tmp/pl" | grep -q '\.tmp\.' && ok ||
  bad "A21 a NUL late in the input: exit $rc: $(head -3 "$tmp/err")"
rm -rf "$tmp/late"
# A22: larger than memory. ~300 MB of text under a 1 GB address-space limit (ulimit -v), which cannot hold it
# as a list of tokens, as the whole-file reader did (checked here: reading it into one fails under the same
# limit); prepare.py streams it, every byte a token, and catchat trains 2 steps on the shards.
"$py" - "$tmp/large.txt" <<'PY'
import random, sys
rng = random.Random(7)
words = "the cat sat on a mat and a dog ran far it was good when we went to see what they said".split()
block = "".join(" ".join(rng.choice(words) for _ in range(rng.randrange(3, 14))) + f" {i}\n" for i in range(20000)).encode()
with open(sys.argv[1], "wb") as f:
    n = k = 0
    while n < 300_000_000:  # the block again and again, each time from another line on
        b = f"part {k}\n".encode() + block[(k * 7919) % len(block):]
        f.write(b)
        n, k = n + len(b), k + 1
PY
large=$(stat -c %s "$tmp/large.txt")
limit=1000000  # KB
if (ulimit -v $limit; OPENBLAS_NUM_THREADS=1 "$py" -c 'import sys; list(open(sys.argv[1], "rb").read())' "$tmp/large.txt") 2>/dev/null; then
  bad "A22 the whole corpus fits in memory under ulimit -v $limit: the check proves nothing"
fi
if (ulimit -v $limit; prep "$tmp/large.txt" "$tmp/lg/x" --shard-tokens 100000000) >"$tmp/out" 2>"$tmp/err"; then
  got=$("$py" - "$tmp"/lg/x_train_*.bin "$tmp"/lg/x_val_*.bin <<'PY'
import os, struct, sys
n = 0
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        magic, ver, count = struct.unpack("<3i", f.read(12))
    assert (magic, ver) == (20240520, 1) and 1024 + 2 * count == os.path.getsize(p), p
    n += count
print(n, len(sys.argv) - 1)
PY
)
  [ "$got" = "$large 4" ] && ok || bad "A22 $large bytes under ulimit -v $limit: '$got' (want '$large 4': tokens, shards)"
  catchat=${2:-$root/build/catchat}
  if [ -x "$catchat" ]; then
    "$catchat" train --config "$root/configs/tiny.ini" --set max_steps=2 --quiet --set "train=$tmp/lg/x_train_*.bin" \
      --set "val=$tmp/lg/x_val_*.bin" --set out_dir="$tmp/lg/run" --set device=cpu >"$tmp/out" 2>&1 &&
      [ -s "$tmp/lg/run/checkpoint.safetensors" ] && ok || bad "A22 catchat train on the large shards: $(tail -2 "$tmp/out" | tr '\n' '|')"
  else skip "A22 training on the large shards: no catchat at $catchat"; fi
else bad "A22 prepare.py under ulimit -v $limit: $(tail -2 "$tmp/err" | tr '\n' '|')"; fi
rm -rf "$tmp/large.txt" "$tmp/lg"

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
