#!/usr/bin/env bash
# What a user reads at the terminal: the eval step's line at 80 (and 40)
# columns while a log keeps every field; a sample's control bytes shown as
# escapes on a terminal and kept raw into a pipe or a file (catchat sample
# and train's end-of-run sample); bench's CPU median; the one-line
# errors and exit statuses (0 ok, 1 a file, 2 the command line) of a
# prompt id the model lacks, an empty prompt file, a truncated checkpoint
# and a text file given as --vocab; and, within 80 columns, every command's
# --help, train's end-of-run summary and the refusal of a run whose out_dir
# another run holds.
#   tests/terminal_output.sh path/to/catchat
set -u
source "$(dirname "$0")/lib.sh" "$1"
make_corpus "$tmp"

# A model small enough for seconds of CPU, in keys every catchat reads.
cat >"$tmp/small.ini" <<EOF
[model]
vocab_size = 256
d_model = 32
n_layers = 1
n_heads = 2
ctx_window = 8
seq_len = 16
[train]
batch_size = 2
max_steps = 6
warmup_steps = 1
eval_interval = 3
eval_batches = 1
[data]
train = $tmp/train.txt
val = $tmp/val.txt
[run]
device = cpu
EOF

# on_pty COLS OUT ERR CMD...: CMD with stdout on a pseudo-terminal of COLS
# columns (no output processing: a \n stays \n, so every \r is the
# program's), its stderr into ERR; OUT gets the terminal's bytes. Exits
# with CMD's status.
on_pty() {
  python3 - "$@" <<'PY'
import fcntl, os, pty, struct, sys, termios
cols, out, err, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    attrs = termios.tcgetattr(1)
    attrs[1] &= ~termios.OPOST
    termios.tcsetattr(1, termios.TCSANOW, attrs)
    e = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(e, 2)
    os.execv(argv[0], argv)
data = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:  # EIO: the program ended and closed the terminal
        break
    if not chunk:
        break
    data += chunk
open(out, "wb").write(data)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
PY
}

# escape.py RAW SHOWN: SHOWN is RAW as text_escape.h says a terminal gets it
# (written here independently: \n \t and valid UTF-8 kept, C0 and DEL as
# \xNN, C1 as \u00NN, bytes that are not UTF-8 as \xNN).
cat >"$tmp/escape.py" <<'PY'
import sys
def shown(b):
    out, i = [], 0
    while i < len(b):
        c = b[i]
        if c < 0x80:
            out.append("\\x%02x" % c if (c < 0x20 and c not in (9, 10)) or c == 0x7F else chr(c))
            i += 1
            continue
        n = 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 0
        try:
            ch = b[i:i + n].decode("utf-8") if n and i + n <= len(b) else None
        except UnicodeDecodeError:
            ch = None
        if ch is None:
            out.append("\\x%02x" % c)
            i += 1
        else:
            out.append("\\u%04x" % ord(ch) if ord(ch) < 0xA0 else ch)
            i += n
    return "".join(out)
raw, got = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
want = shown(raw).encode("utf-8")
if got != want:
    i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
    sys.exit("differs at byte %d: terminal %r, expected %r" % (i, got[max(0, i - 20):i + 20], want[max(0, i - 20):i + 20]))
PY

# ---- 1. train on an 80-column terminal: every row fits; eval steps keep their figures ----
if on_pty 80 "$tmp/tty80" "$tmp/tty80.err" "$bin" train --config "$tmp/small.ini" --set out_dir="$tmp/run" \
    --sample-prompt $'The \e[2J\a\x7f' --sample-tokens 200; then ok; else bad "train on a pty: $(tail -2 "$tmp/tty80.err")"; fi
python3 - "$tmp/tty80" 80 <<'PY' && ok || bad "train at 80 columns: $(tr '\r' '\n' <"$tmp/tty80" | grep -a 'eval loss' | head -3)"
import re, sys
text, cols = open(sys.argv[1], "rb").read().decode("utf-8"), int(sys.argv[2])
text = text[:text.index("sample (")]  # the progress rows; the sample is checked below
rows = [re.sub(r"\x1b\[K", "", r) for r in re.split(r"[\r\n]", text)]
rows = [r for r in rows if r.startswith(("step ", "eval loss"))]
assert len(rows) >= 6, rows
evals = [r for r in rows if "eval loss" in r]
assert len(evals) == 2, rows  # steps 3 and 6
for r in rows:
    assert len(r) <= cols - 1, (len(r), r)
for r in evals:
    assert re.search(r"eval loss [0-9.]+ top1 [0-9.]+% top5 [0-9.]+%", r), r
    assert r.startswith("step "), r  # the figures beside their step
PY

# ---- 2. the end-of-run sample on that terminal: the sample.txt bytes, escaped ----
python3 - "$tmp/tty80" "$tmp/shown" <<'PY' || bad "no sample on the terminal"
import sys
t = open(sys.argv[1], "rb").read()
start = t.index(b"):\n", t.index(b"sample (")) + 3
end = t.index(b"\ncatchat train:", start)
open(sys.argv[2], "wb").write(t[start:end])
PY
grep -aq 'The \\x1b\[2J\\x07\\x7f' "$tmp/shown" && ok || bad "the prompt's ESC, BEL and DEL not escaped: $(head -c 80 "$tmp/shown" | cat -v)"
python3 "$tmp/escape.py" "$tmp/run/sample.txt" "$tmp/shown" && ok || bad "train's sample on a terminal"
cmp -s <(printf 'The \e[2J\a\x7f') <(head -c 10 "$tmp/run/sample.txt") && ok || bad "sample.txt lost the raw bytes"

# ---- 3. a log (not a terminal) keeps every field of an eval step on its one line ----
"$bin" train --config "$tmp/small.ini" --set out_dir="$tmp/log" --sample-tokens 0 >"$tmp/log.out" 2>&1 ||
  bad "train into a file: $(tail -1 "$tmp/log.out")"
grep -q '^step 3/6 | loss .* ms | .* tok/s | .* ETA .* | lr .* | norm .* | scale .* | epoch .* | eval loss .* top1 .* top5 ' \
  "$tmp/log.out" && ok || bad "eval line in a log: $(grep 'eval loss' "$tmp/log.out")"

# ---- 4. 40 columns: the eval figures on a row of their own; every row fits ----
on_pty 40 "$tmp/tty40" "$tmp/tty40.err" "$bin" train --config "$tmp/small.ini" --set out_dir="$tmp/run40" \
  --sample-tokens 0 || bad "train on a 40-column pty: $(tail -1 "$tmp/tty40.err")"
python3 - "$tmp/tty40" 40 <<'PY' && ok || bad "train at 40 columns: $(tr '\r' '\n' <"$tmp/tty40" | grep -a -e '^step' -e '^eval loss' | head -4)"
import re, sys
text, cols = open(sys.argv[1], "rb").read().decode("utf-8"), int(sys.argv[2])
rows = [re.sub(r"\x1b\[K", "", r) for r in re.split(r"[\r\n]", text)]
progress = [r for r in rows if r.startswith(("step ", "eval loss"))]
assert sum(r.startswith("eval loss") for r in progress) == 2, progress
for r in progress:
    assert len(r) <= cols - 1, (len(r), r)
PY

# ---- 5. catchat sample: escaped on a terminal, the same bytes raw into a pipe and a file ----
ck="$tmp/run/checkpoint.safetensors"
samp=(sample --ckpt "$ck" --prompt-ids 84,27,91,50,74,0,7,13,10,9,194,155,195,169,255 --tokens 300 --temperature 2 --top-k 0 --seed 5)
on_pty 80 "$tmp/s.tty" "$tmp/s.err" "$bin" "${samp[@]}" && ok || bad "sample on a pty: $(cat "$tmp/s.err")"
"$bin" "${samp[@]}" 2>"$tmp/s.err" | cat >"$tmp/s.pipe" && ok || bad "sample into a pipe: $(cat "$tmp/s.err")"
"$bin" "${samp[@]}" >"$tmp/s.file" 2>"$tmp/s.err" && ok || bad "sample into a file: $(cat "$tmp/s.err")"
cmp -s "$tmp/s.pipe" "$tmp/s.file" && ok || bad "a pipe and a file got different bytes"
cmp -s <(printf 'T\e[2J\0\a\r\n\t\xc2\x9b\xc3\xa9\xff') <(head -c 15 "$tmp/s.pipe") && ok ||
  bad "the pipe lost the prompt's raw bytes: $(head -c 15 "$tmp/s.pipe" | od -c | head -2)"
python3 "$tmp/escape.py" "$tmp/s.pipe" "$tmp/s.tty" && ok || bad "sample on a terminal"
head -c 40 "$tmp/s.tty" | grep -aq '^T\\x1b\[2J\\x00\\x07\\x0d$' && ok || bad "sample on a terminal: $(head -c 60 "$tmp/s.tty" | cat -v)"
# --json escapes its own text: the same on a terminal as in a file
on_pty 80 "$tmp/j.tty" "$tmp/j.err" "$bin" "${samp[@]}" --json && "$bin" "${samp[@]}" --json >"$tmp/j.file" 2>/dev/null &&
  cmp -s "$tmp/j.tty" "$tmp/j.file" && ok || bad "--json differs on a terminal"

# ---- 6. exit statuses: 2 for the command line, 1 for a file ----
# expect_exit "what" STATUS PATTERN CMD...: that status and one stderr line holding PATTERN
expect_exit() {
  local what=$1 want=$2 pattern=$3; shift 3
  timeout -k 5 120 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne "$want" ]; then bad "$what: exit $rc, not $want ($(head -2 "$tmp/err"))"; return; fi
  if [ "$(wc -l <"$tmp/err")" -ne 1 ]; then bad "$what: $(wc -l <"$tmp/err") stderr lines: $(cat "$tmp/err")"; return; fi
  grep -q -- "$pattern" "$tmp/err" && ok || bad "$what: '$(cat "$tmp/err")' lacks '$pattern'"
}
expect_exit "a prompt id past vocab_size" 2 "--prompt-ids: 300 is not a token of this model (vocab_size 256" \
  "$bin" sample --ckpt "$ck" --prompt-ids 84,300 --tokens 2
: >"$tmp/empty.txt"
expect_exit "an empty prompt file" 1 "$tmp/empty.txt: the prompt file is empty" \
  "$bin" sample --ckpt "$ck" --prompt-file "$tmp/empty.txt" --tokens 2
expect_exit "a text file as --vocab" 1 "train.txt:1: not a vocabulary file: '.*' is not hex digits (a .vocab.*one token a line, its bytes as hex digits" \
  "$bin" sample --ckpt "$ck" --vocab "$tmp/train.txt" --tokens 2

# ---- 7. a truncated checkpoint says so: cut in its tensor data, and in its header ----
size=$(stat -c %s "$ck")
head -c $((size / 2)) "$ck" >"$tmp/cut.safetensors"
for cmd in "sample --ckpt" "eval --ckpt" "train --resume"; do
  expect_exit "$cmd, data cut" 1 "'$tmp/cut.safetensors' is truncated: $((size / 2)) bytes, its header needs $size;" \
    "$bin" $cmd "$tmp/cut.safetensors"
done
head -c 100 "$ck" >"$tmp/cut_header.safetensors"
expect_exit "sample --ckpt, header cut" 1 "'$tmp/cut_header.safetensors' is truncated: 100 bytes, its header alone needs" \
  "$bin" sample --ckpt "$tmp/cut_header.safetensors"

# ---- 8. bench on the CPU: the median of 3 steps by default; --cpu-steps still chooses ----
"$bin" bench --config "$tmp/small.ini" >"$tmp/bench.out" 2>&1 || bad "bench on the CPU: $(tail -1 "$tmp/bench.out")"
grep -q "^CPU reference: [0-9.]* ms per step (median of 3 steps, same batch)" "$tmp/bench.out" && ok ||
  bad "bench's CPU default: $(grep CPU "$tmp/bench.out")"
"$bin" bench --config "$tmp/small.ini" --cpu-steps 1 >"$tmp/bench.out" 2>&1 || bad "bench --cpu-steps 1"
grep -q "^CPU reference: [0-9.]* ms per step (1 step, same batch)" "$tmp/bench.out" && ok ||
  bad "bench --cpu-steps 1: $(grep CPU "$tmp/bench.out")"

# ---- 9. 80 columns: every command's --help, the end-of-run summary, a refused run's lock message ----
# fits80 WHAT FILE: FILE has text and no line over 80 columns (characters, not bytes)
fits80() {
  local wide
  wide=$(python3 -c '
import sys
for n, l in enumerate(open(sys.argv[1], encoding="utf-8", errors="replace").read().split("\n"), 1):
    if len(l) > 80: print(f"line {n} ({len(l)} columns): {l}")' "$2")
  [ -s "$2" ] && [ -z "$wide" ] && ok || bad "$1 over 80 columns: ${wide:-(no output)}"
}
"$bin" --help >"$tmp/help" && fits80 "catchat --help" "$tmp/help" || bad "catchat --help exit"
"$bin" -h >"$tmp/help" && fits80 "catchat -h" "$tmp/help" || bad "catchat -h exit"
for c in train sample eval data bench ladder dump-state bisect audit version; do
  "$bin" $c --help >"$tmp/help" && fits80 "catchat $c --help" "$tmp/help" || bad "catchat $c --help exit"
done
# the summary of section 3's run: a first line, then indented ones (the best checkpoint's among them)
awk '/^catchat train: done after step 6 / { on = 1; print; next } on && /^  / { print; next } { on = 0 }' \
  "$tmp/log.out" >"$tmp/summary"
[ "$(wc -l <"$tmp/summary")" -ge 3 ] && grep -q "^  best checkpoint  $tmp/log/checkpoint_best.safetensors$" "$tmp/summary" &&
  ok || bad "the end-of-run summary: $(tail -5 "$tmp/log.out")"
fits80 "the end-of-run summary" "$tmp/summary"
# a run refused because another holds the out_dir's lock (held here as catchat holds it: flock, its line)
mkdir -p "$tmp/held"
python3 -c '
import fcntl, os, sys, time
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX)
f.truncate(0)
f.write("pid %d on %s, started 2026-01-01 00:00:00 UTC\n" % (os.getpid(), os.uname().nodename))
f.flush()
open(sys.argv[2], "w").close()
time.sleep(120)' "$tmp/held/catchat.lock" "$tmp/held.ready" &
holder=$!
for _ in $(seq 100); do [ -f "$tmp/held.ready" ] && break; sleep 0.1; done
"$bin" train --config "$tmp/small.ini" --set out_dir="$tmp/held" >/dev/null 2>"$tmp/lock.err"
rc=$?
kill "$holder"; wait "$holder" 2>/dev/null
[ $rc -eq 1 ] && [ "$(head -1 "$tmp/lock.err")" = "catchat: $tmp/held is in use by another catchat run" ] &&
  grep -q "^  pid $holder on " "$tmp/lock.err" && ! tail -n +2 "$tmp/lock.err" | grep -q -v '^  ' && ok ||
  bad "the lock refusal: exit $rc: $(cat "$tmp/lock.err")"
fits80 "the lock refusal" "$tmp/lock.err"

finish
