#!/usr/bin/env bash
# What catchat reads before it trains or scores, end to end on the CPU:
#   A. a checkpoint's checksums cover its metadata (step, config) as well as
#      its tensor data; a file without the header checksum (older catchat)
#      still loads;
#   B. a damaged checkpoint is reported as damaged before anything else it
#      would make fail (a stored data path that does not resolve, a vocab);
#   C. --resume with other [model] keys suggests --init only where --init
#      works (the same tensor shapes);
#   D. text data that looks binary is refused unless [data] format = text,
#      which reads it with one warning.
#   tests/checkpoint_input.sh path/to/catchat
set -u
source "$(dirname "$0")/lib.sh" "$1"
make_corpus "$tmp"
cpu=(--quiet --sample-tokens 0 --set device=cpu)

# damage IN OUT PATTERN: OUT is IN with the first digit after the bytes
# PATTERN in its header changed (same length, so the file still parses), or,
# for PATTERN "data", with the last byte of the tensor data flipped.
damage() {
  python3 - "$@" <<'PY'
import struct, sys
src, dst, pat = sys.argv[1:4]
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
if pat == "data":
    b[-1] ^= 0x40
else:
    i = b.index(pat.encode(), 8, 8 + n) + len(pat)
    while not chr(b[i]).isdigit():
        i += 1
    b[i] = ord(str((int(chr(b[i])) + 1) % 10))
open(dst, "wb").write(bytes(b))
PY
}
# drop_key IN OUT KEY: OUT is IN without the __metadata__ entry KEY.
drop_key() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, key = sys.argv[1:4]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"].pop(key, None)
hj = json.dumps(h).encode()
hj += b" " * (-len(hj) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hj)) + hj + b[8 + n:])
PY
}

# A run whose data is gone after it checkpointed: its stored data paths resolve nowhere.
mkdir -p "$tmp/work" "$tmp/elsewhere"
cp "$tmp/train.txt" "$tmp/val.txt" "$tmp/work/"
(cd "$tmp/work" && "$bin" train --config "$root/configs/tiny.ini" --set train=train.txt --set val=val.txt \
  --set out_dir="$tmp/run" --set max_steps=4 "${cpu[@]}" >/dev/null 2>"$tmp/train.err") \
  || bad "tiny train: $(tail -2 "$tmp/train.err")"
ck=$tmp/run/checkpoint.safetensors
rm -r "$tmp/work"
cd "$tmp/elsewhere"

# ---- A. the checksums cover the metadata ----
python3 -c "import json, struct, sys; b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
m = json.loads(b[8:8 + n])['__metadata__']; assert len(m.get('header_xxh64', '')) == 16, sorted(m)" "$ck" \
  2>"$tmp/err" && ok || bad "A0 no header_xxh64 in the checkpoint's metadata: $(tail -1 "$tmp/err")"
damage "$ck" "$tmp/step.safetensors" '"step":"'
expect_error "A1 resume: a damaged digit of the step" "checksum mismatch" \
  "$bin" train --resume "$tmp/step.safetensors" --set train="$tmp/train.txt" --set val="$tmp/val.txt" "${cpu[@]}"
damage "$ck" "$tmp/lr.safetensors" 'lr\":'
expect_error "A2 eval: a damaged digit of the stored config's lr" "checksum mismatch" \
  "$bin" eval --ckpt "$tmp/lr.safetensors" --data "$tmp/val.txt"
damage "$ck" "$tmp/pos.safetensors" '"data_pos":"'
expect_error "A3 resume: a damaged digit of the data position" "checksum mismatch" \
  "$bin" train --resume "$tmp/pos.safetensors" --set train="$tmp/train.txt" --set val="$tmp/val.txt" "${cpu[@]}"
# older catchat wrote the data checksum alone: such a file loads, and its data is still checked
drop_key "$ck" "$tmp/old.safetensors" header_xxh64
if "$bin" eval --ckpt "$tmp/old.safetensors" --data "$tmp/val.txt" >/dev/null 2>"$tmp/err"; then ok
else bad "A4 a file with only the data checksum: $(cat "$tmp/err")"; fi
damage "$tmp/old.safetensors" "$tmp/old_data.safetensors" data
expect_error "A5 a file with only the data checksum, damaged data" "checksum mismatch" \
  "$bin" eval --ckpt "$tmp/old_data.safetensors" --data "$tmp/val.txt"

# ---- B. damaged is said first ----
damage "$ck" "$tmp/flipped.safetensors" data
expect_error "B0 eval of the sound file from elsewhere: the stored val path" "val.txt" \
  "$bin" eval --ckpt "$ck"
expect_error "B1 eval: damaged, stored val path unresolved" "checksum mismatch" \
  "$bin" eval --ckpt "$tmp/flipped.safetensors"
expect_error "B2 sample: damaged, --vocab missing" "checksum mismatch" \
  "$bin" sample --ckpt "$tmp/flipped.safetensors" --vocab "$tmp/missing.vocab" --tokens 4
expect_error "B3 train --resume: damaged, stored data paths unresolved" "checksum mismatch" \
  "$bin" train --resume "$tmp/flipped.safetensors" "${cpu[@]}"
expect_error "B4 train --init: damaged, stored data paths unresolved" "checksum mismatch" \
  "$bin" train --init "$tmp/flipped.safetensors" --config "$root/configs/tiny.ini" \
  --set out_dir="$tmp/init" "${cpu[@]}"
expect_error "B5 eval: a damaged config digit, stored val path unresolved" "checksum mismatch" \
  "$bin" eval --ckpt "$tmp/lr.safetensors"

# ---- C. --resume suggests --init only where it works ----
data=(--set train="$tmp/train.txt" --set val="$tmp/val.txt")
for kv in d_model=32 n_layers=3 vocab_size=300; do
  expect_error "C1 --resume with $kv" "other \[model\] keys" \
    "$bin" train --resume "$ck" "${data[@]}" --set "$kv" "${cpu[@]}"
  if grep -q -- "--init" "$tmp/err"; then bad "C1 --resume with $kv suggests --init, which fails: $(cat "$tmp/err")"; fi
  "$bin" train --init "$ck" "${data[@]}" --set "$kv" --set out_dir="$tmp/c1" --set max_steps=1 --force \
    "${cpu[@]}" >/dev/null 2>&1 && bad "C1 --init with $kv worked: the hint should offer it"
done
for kv in n_heads=8 seq_len=16 ctx_window=8 n_layers=1; do
  expect_error "C2 --resume with $kv" "or use --init" "$bin" train --resume "$ck" "${data[@]}" --set "$kv" "${cpu[@]}"
  "$bin" train --init "$ck" "${data[@]}" --set "$kv" --set out_dir="$tmp/c2" --set max_steps=1 --force \
    "${cpu[@]}" >/dev/null 2>"$tmp/err" && ok || bad "C2 --init with $kv, as suggested: $(tail -1 "$tmp/err")"
done

# ---- D. binary files as text data ----
elf=$tmp/program.txt
head -c 100000 "$bin" >"$elf" # the start of an executable (ELF)
expect_error "D1 train on an executable as [data] train" "$elf: looks like a binary file.*format = text" \
  "$bin" train --config "$root/configs/tiny.ini" --set train="$elf" --set val="$tmp/val.txt" \
  --set out_dir="$tmp/d1" "${cpu[@]}"
expect_error "D2 eval on an executable" "$elf: looks like a binary file" "$bin" eval --ckpt "$ck" --data "$elf"
head -c 20000 /dev/urandom | tr -d '\000' >"$tmp/noise.txt" # no NUL: most bytes are still not text
expect_error "D3 eval on random bytes without a NUL" "noise.txt: looks like a binary file" \
  "$bin" eval --ckpt "$ck" --data "$tmp/noise.txt"
# format = text is the way out: it trains, saying so once
"$bin" train --config "$root/configs/tiny.ini" --set train="$elf" --set val="$tmp/val.txt" --set format=text \
  --set out_dir="$tmp/d4" --set max_steps=2 "${cpu[@]}" >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -ne 0 ]; then bad "D4 format = text on an executable: exit $rc: $(cat "$tmp/err")"
elif [ "$(grep -c "warning: $elf looks like a binary file" "$tmp/err")" -ne 1 ]; then
  bad "D4 format = text on an executable: no one warning: $(cat "$tmp/err")"
else ok; fi
# text in a legacy 8-bit encoding stays text
for i in $(seq 60); do printf 'caf\xe9 cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade\n'; done >"$tmp/latin1.txt"
if "$bin" eval --ckpt "$ck" --data "$tmp/latin1.txt" >/dev/null 2>"$tmp/err" && [ ! -s "$tmp/err" ]; then ok
else bad "D5 Latin-1 text: $(cat "$tmp/err")"; fi

finish
