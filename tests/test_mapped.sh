#!/usr/bin/env bash
# Shards are mapped, not loaded: a run on a 600 MB shard keeps a small
# resident set; an id past vocab_size in the middle of a shard stops the run
# where a batch reads it, with a checkpoint and a line naming the file and
# offset; `catchat data check` finds it at once.
#   tests/test_mapped.sh path/to/catchat
set -u
source "$(dirname "$0")/lib.sh" "$1"
py=python3
[ -x "$root/.venv/bin/python" ] && py=$root/.venv/bin/python
# shard FILE N [BAD_AT]: N tokens (a repeating sentence's bytes), id 300 at BAD_AT if given
shard() {
  "$py" - "$@" <<'PY'
import struct, sys
path, n = sys.argv[1], int(sys.argv[2])
text = b"the quick brown fox jumps over the lazy dog, and then it sleeps.\n"
body = bytearray()
for b in text: body += struct.pack("<H", b)
reps = n // len(text) + 1
data = bytearray((bytes(body) * reps)[: 2 * n])
if len(sys.argv) > 3:
    at = int(sys.argv[3])
    data[2 * at:2 * at + 2] = struct.pack("<H", 300)
with open(path, "wb") as f:
    f.write(struct.pack("<3i", 20240520, 1, n) + bytes(4 * 253))
    f.write(data)
PY
}
# peak resident set of a command, in MB (its children's, by getrusage)
peak_mb() {
  "$py" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, r.returncode)' "$@"
}

# 1. a 600 MB shard (300 M tokens): trained on with the resident set of a run on a small one (the program and
#    its libraries are most of both), where a copy would add 600 MB
shard "$tmp/big.bin" 300000000
shard "$tmp/val.bin" 20000
shard "$tmp/small.bin" 20000
run3() { peak_mb "$bin" train --config "$root/configs/tiny.ini" --set max_steps=3 --quiet --sample-tokens 0 \
  --set train="$1" --set val="$tmp/val.bin" --set out_dir="$tmp/run_$2" 2>"$tmp/err"; }
read -r base rc_base < <(run3 "$tmp/small.bin" small)
read -r mb rc < <(run3 "$tmp/big.bin" big)
if [ "$rc" != 0 ] || [ "$rc_base" != 0 ]; then bad "train on the shards: exit $rc_base / $rc: $(head -3 "$tmp/err")"
elif [ $((mb - base)) -gt 150 ]; then
  bad "train on a 600 MB shard peaked at $mb MB resident, $base MB on a small one (want under 150 more: mapped)"
else ok; fi
rm -f "$tmp/big.bin"

# 2. id 300 (vocab 256) in the middle of a shard: the run stops where a batch reads it, with a checkpoint
shard "$tmp/bad.bin" 40000 20001
"$bin" train --config "$root/configs/tiny.ini" --set max_steps=2000 --set checkpoint_interval=0 --quiet \
  --sample-tokens 0 --set eval_interval=0 --set train="$tmp/bad.bin" --set val="$tmp/val.bin" \
  --set out_dir="$tmp/bad_run" >/dev/null 2>"$tmp/err"
rc=$?
first=$(head -1 "$tmp/err")
if [ $rc -eq 0 ]; then bad "a run over id 300 ended with exit 0"
elif ! grep -q "bad.bin: token 20001 (byte 41026) has id 300 >= vocab_size 256" <<<"$first"; then
  bad "the stop does not name the file and offset: $(cat "$tmp/err")"
elif ! sed -n 2p "$tmp/err" | grep -q "^  the run stopped after step [0-9]*; checkpoint .*checkpoint.safetensors written"; then
  bad "no word of the checkpoint: $(cat "$tmp/err")"
elif [ "$(wc -l <"$tmp/err")" -ne 2 ]; then bad "more than the error: $(cat "$tmp/err")"
else
  step=$(sed -n 's/.*stopped after step \([0-9]*\);.*/\1/p' "$tmp/err")
  got=$("$py" -c 'import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"]["step"])' "$tmp/bad_run/checkpoint.safetensors" 2>&1)
  [ "$got" = "$step" ] && [ "$step" -lt 2000 ] && ok || bad "the checkpoint is at step '$got', the message says $step"
fi
# and resuming from it on the same data stops at the same window again, not later
"$bin" train --resume "$tmp/bad_run/checkpoint.safetensors" --quiet --sample-tokens 0 >/dev/null 2>"$tmp/err2"
[ $? -ne 0 ] && grep -q "token 20001 (byte 41026)" "$tmp/err2" && ok || bad "resume over the bad id: $(cat "$tmp/err2")"

# 3. catchat data check: the bad id at once (exit 1), a sound dataset (exit 0)
expect_error "data check on the damaged shard" "bad.bin: token 20001 (byte 41026) has id 300 >= vocab_size 256" \
  "$bin" data check "$tmp/bad.bin"
"$bin" data check "$tmp/val.bin" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q "val.bin: 1 file, 20000 tokens, an unknown tokenizer: every id below vocab_size 256" "$tmp/out" &&
  ok || bad "data check on a sound shard: $(cat "$tmp/out" "$tmp/err")"
finish
