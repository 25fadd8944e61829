#!/usr/bin/env bash
# Run safety, end to end on the CPU (docs/reliability.md, "Run safety"): a run
# survives SIGINT/SIGTERM, never overwrites another, never writes over its own
# input, and no bad file or value passes as good.
#   tests/run_safety.sh path/to/catchat
set -u
set -m # background jobs keep SIGINT (a script's async jobs otherwise start with it ignored)
source "$(dirname "$0")/lib.sh" "$1"
make_corpus "$tmp"
tiny=(--config "$root/configs/tiny.ini" --set train="$tmp/train.txt" --set val="$tmp/val.txt" --quiet
      --sample-tokens 0)

# edit_st IN OUT TENSOR FACTOR|nan: rewrite a safetensors file with one F32
# tensor scaled (or set to NaN), keeping its checksum valid by dropping it
# (files from elsewhere have none), as a broken file from another tool would be.
edit_st() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, name, how = sys.argv[1:5]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h.get("__metadata__", {}).pop("data_xxh64", None)
data = bytearray(b[8 + n:])
s, e = h[name]["data_offsets"]
vals = struct.unpack(f"<{(e - s) // 4}f", data[s:e])
vals = [float("nan")] * len(vals) if how == "nan" else [v * float(how) for v in vals]
data[s:e] = struct.pack(f"<{len(vals)}f", *vals)
hj = json.dumps(h).encode()
hj += b" " * (-len(hj) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hj)) + hj + bytes(data))
PY
}

# event_steps DIR: the steps of every scalar event in DIR's TensorBoard files, one per line.
event_steps() {
  python3 - "$1" <<'PY'
import glob, struct, sys
def varint(b, i):
    v = s = 0
    while True:
        v |= (b[i] & 0x7f) << s; s += 7; i += 1
        if not b[i - 1] & 0x80: return v, i
for f in sorted(glob.glob(sys.argv[1] + "/events.out.tfevents.*")):
    b = open(f, "rb").read(); i = 0
    while i + 12 <= len(b):
        n = struct.unpack("<Q", b[i:i + 8])[0]; ev = b[i + 12:i + 12 + n]; i += 16 + n
        j, step, summary = 0, 0, False
        while j < len(ev):
            key, j = varint(ev, j)
            if key & 7 == 0: v, j = varint(ev, j); step = v if key >> 3 == 2 else step
            elif key & 7 == 1: j += 8
            elif key & 7 == 5: j += 4
            else: ln, j = varint(ev, j); j += ln; summary |= key >> 3 == 5
        if summary: print(step)
PY
}

# watchdog PID: SIGKILL the process after 60 s, so a run that ignores a signal fails instead of hanging
watchdog() { ( sleep 60; kill -9 "$1" 2>/dev/null ) >/dev/null 2>&1 & }
# in_write DIR PID: wait (up to 20 s) until process PID is writing DIR's checkpoint (its temporary file
# exists; CATCHAT_TEST_WRITE_DELAY_US stretches the write), so a signal sent next lands inside the write
# however loaded the machine is
in_write() { for _ in $(seq 400); do [ -e "$1/checkpoint.safetensors.tmp.$2" ] && return; sleep 0.05; done; }
# steps_past DIR N: wait (up to 30 s) until DIR's telemetry has a step after N
steps_past() { for _ in $(seq 300); do [ "$(tail -1 "$1/telemetry.csv" 2>/dev/null | cut -d, -f1)" -gt "$2" ] 2>/dev/null && return; sleep 0.1; done; }

# ---- 1. SIGINT / SIGTERM / SIGHUP / SIGUSR1: the step in flight finishes, a checkpoint is written, 128 + N ----
for sig in INT TERM HUP USR1; do
  out="$tmp/sig_$sig"
  "$bin" train "${tiny[@]}" --set max_steps=100000 --set checkpoint_interval=0 --set eval_interval=0 \
    --set out_dir="$out" >"$tmp/sig.out" 2>"$tmp/sig.err" &
  pid=$!
  for _ in $(seq 100); do [ -s "$out/telemetry.csv" ] && [ "$(wc -l <"$out/telemetry.csv")" -gt 3 ] && break; sleep 0.1; done
  kill -$sig $pid
  watchdog $pid
  wait $pid
  rc=$?
  want=$((128 + $(kill -l $sig)))
  if [ $rc -ne "$want" ]; then bad "SIG$sig: exit $rc, want $want: $(cat "$tmp/sig.err")"
  elif [ ! -f "$out/checkpoint.safetensors" ]; then bad "SIG$sig: no checkpoint"
  elif ! grep -qF "$bin train --resume $out/checkpoint.safetensors" "$tmp/sig.err"; then # the program as run
    bad "SIG$sig: no resume command: $(cat "$tmp/sig.err")"
  else
    last=$(tail -1 "$out/telemetry.csv" | cut -d, -f1)
    # resume without --config: the checkpoint's stored config; continues at the step written
    if ! "$bin" train --resume "$out/checkpoint.safetensors" --steps 2 --quiet --sample-tokens 0 \
        >"$tmp/res.out" 2>&1; then bad "SIG$sig: resume: $(tail -2 "$tmp/res.out")"
    elif [ "$(tail -1 "$out/telemetry.csv" | cut -d, -f1)" -ne $((last + 2)) ]; then
      bad "SIG$sig: resumed run did not continue at step $last"
    else ok; fi
  fi
done

# A second SIGINT while the checkpoint is being written exits at once; the
# last good checkpoint stays (the write goes to a temporary file and a rename).
out="$tmp/sig2"
"$bin" train "${tiny[@]}" --set max_steps=4 --set out_dir="$out" >/dev/null 2>&1 || bad "sig2 setup"
cp "$out/checkpoint.safetensors" "$tmp/good.safetensors"
CATCHAT_TEST_WRITE_DELAY_US=200000 "$bin" train --resume "$out/checkpoint.safetensors" --set max_steps=100000 \
  --set checkpoint_interval=0 --quiet --sample-tokens 0 >/dev/null 2>"$tmp/sig2.err" &
pid=$!
steps_past "$out" 4 # training, past the step it resumed
kill -INT $pid
in_write "$out" $pid
sleep 1.2 # a second request: a signal within a second of the first is the same one
kill -INT $pid
t0=$(date +%s)
watchdog $pid
wait $pid
rc=$?
if [ $rc -ne 130 ]; then bad "second SIGINT: exit $rc"
elif [ $(($(date +%s) - t0)) -gt 2 ]; then bad "second SIGINT did not exit at once"
elif ! grep -q "second SIGINT: stopped at once; nothing was saved by this run: the checkpoint it resumed (step 4) is unchanged" \
    "$tmp/sig2.err"; then bad "second SIGINT (resumed run) did not say what is saved: $(cat "$tmp/sig2.err")"
elif ! "$bin" eval --ckpt "$out/checkpoint.safetensors" --data "$tmp/val.txt" --batches 1 >/dev/null 2>"$tmp/err"; then
  bad "second SIGINT: the checkpoint does not load: $(cat "$tmp/err")"
else ok; fi

# ---- 2. a new run never overwrites another ----
out="$tmp/run"
"$bin" train "${tiny[@]}" --set max_steps=6 --set out_dir="$out" >/dev/null 2>&1 || bad "run setup"
before=$(md5sum <"$out/checkpoint.safetensors")
expect_error "train into a run" "$out holds a run at step 6: --resume it, or pass --force to start over" \
  "$bin" train "${tiny[@]}" --set max_steps=6 --set out_dir="$out"
[ "$before" = "$(md5sum <"$out/checkpoint.safetensors")" ] || bad "refused run changed the checkpoint"
touch "$out/notes.txt"
n_events=$(ls "$out"/events.out.tfevents.* | wc -l)
if ! "$bin" train "${tiny[@]}" --set max_steps=3 --set out_dir="$out" --force >/dev/null 2>"$tmp/err"; then
  bad "--force: $(cat "$tmp/err")"
elif [ "$(ls "$out"/events.out.tfevents.* | wc -l)" -ne 1 ] || [ "$n_events" -ne 1 ]; then
  bad "--force left old event files"
elif [ "$(wc -l <"$out/telemetry.csv")" -ne 4 ] || { [ -f "$out/grad_norms.csv" ] &&
     [ "$(tail -1 "$out/grad_norms.csv" | cut -d, -f1)" -gt 3 ]; }; then
  bad "--force kept the old run's logs"
elif [ ! -f "$out/notes.txt" ]; then bad "--force removed a file the run did not write"
else ok; fi
# a folder with logs but no checkpoint (a run killed before its first one)
mkdir -p "$tmp/logs_only" && echo "step" >"$tmp/logs_only/telemetry.csv"
expect_error "logs only" "holds the logs of an earlier run (telemetry.csv)" \
  "$bin" train "${tiny[@]}" --set max_steps=2 --set out_dir="$tmp/logs_only"
# --resume auto: resumes the checkpoint there, or starts afresh
if ! "$bin" train "${tiny[@]}" --set max_steps=5 --set out_dir="$out" --resume auto >/dev/null 2>"$tmp/err"; then
  bad "--resume auto (checkpoint): $(cat "$tmp/err")"
elif [ "$(tail -1 "$out/telemetry.csv" | cut -d, -f1)" -ne 5 ] || [ "$(wc -l <"$out/telemetry.csv")" -ne 6 ]; then
  bad "--resume auto did not continue the run"
else ok; fi
if ! "$bin" train "${tiny[@]}" --set max_steps=2 --set out_dir="$tmp/fresh" --resume auto >/dev/null 2>"$tmp/err"; then
  bad "--resume auto (empty): $(cat "$tmp/err")"
elif [ ! -f "$tmp/fresh/checkpoint.safetensors" ]; then bad "--resume auto did not start a fresh run"
else ok; fi
# --init from the checkpoint --force would delete
expect_error "--init own checkpoint --force" "is the checkpoint this run would replace" \
  "$bin" train "${tiny[@]}" --set out_dir="$out" --init "$out/checkpoint.safetensors" --force

# ---- 3. no command writes over its own input ----
ck="$out/checkpoint.safetensors"
before=$(md5sum <"$ck")
expect_error "dump-state --out = --ckpt" "is the same file as --ckpt" \
  "$bin" dump-state "${tiny[@]:0:6}" --ckpt "$ck" --out "$out/../run/./checkpoint.safetensors"
[ "$before" = "$(md5sum <"$ck")" ] || bad "dump-state overwrote its input"
mkdir -p "$tmp/cuckoo" && cp "$tmp/train.txt" "$tmp/cuckoo/telemetry.csv"
expect_error "train over its data" "is the same file as \[data\] train" \
  "$bin" train --config "$root/configs/tiny.ini" --set train="$tmp/cuckoo/telemetry.csv" \
  --set val="$tmp/val.txt" --set out_dir="$tmp/cuckoo"

# ---- 4, 5. non-finite weights and losses never pass as results ----
edit_st "$ck" "$tmp/big.safetensors" final_norm.weight 1e30 # finite weights whose logits overflow
edit_st "$tmp/big.safetensors" "$tmp/huge.safetensors" lm_head.weight 1e10
expect_error "eval of non-finite logits" "is not finite" "$bin" eval --ckpt "$tmp/huge.safetensors" --data "$tmp/val.txt"
expect_error "eval --json of non-finite logits" "is not finite" \
  "$bin" eval --ckpt "$tmp/huge.safetensors" --data "$tmp/val.txt" --json
[ ! -s "$tmp/out" ] || bad "eval --json printed a result for non-finite logits: $(cat "$tmp/out")"
edit_st "$ck" "$tmp/nan.safetensors" gru.1.weight_hh nan
for cmd in "eval --ckpt $tmp/nan.safetensors --data $tmp/val.txt" "sample --ckpt $tmp/nan.safetensors"; do
  expect_error "${cmd%% *} of a NaN checkpoint" "tensor 'gru.1.weight_hh' holds NaN" "$bin" $cmd
done
expect_error "train --init of a NaN checkpoint" "tensor 'gru.1.weight_hh' holds NaN" \
  "$bin" train "${tiny[@]}" --set out_dir="$tmp/nan_run" --init "$tmp/nan.safetensors"
expect_error "resume of a NaN checkpoint" "tensor 'gru.1.weight_hh' holds NaN" \
  "$bin" train --resume "$tmp/nan.safetensors" --set out_dir="$tmp/nan_run2"
# every step skipped: stop after max_skipped_steps in a row
"$bin" train "${tiny[@]}" --set out_dir="$tmp/skips" --set max_steps=40 --set max_skipped_steps=5 \
  --plant-nan embed.weight >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ]; then bad "all-skipped run exit 0"
elif ! grep -q "5 steps in a row were skipped" "$tmp/err"; then bad "all-skipped message: $(cat "$tmp/err")"
elif [ "$(wc -l <"$tmp/skips/telemetry.csv")" -ne 6 ]; then bad "all-skipped run did not stop at step 5"
else ok; fi

# ---- 6. a directory is not a config ----
expect_error "config is a directory" "config '$tmp' is a directory" "$bin" train --config "$tmp"

# ---- 7. a .bin that is not a shard ----
python3 -c "
import struct, sys
open('$tmp/nanogpt.bin','wb').write(struct.pack('<20000H', *[(i * 7919) % 50257 for i in range(20000)]))
b = bytearray(open('$tmp/nanogpt.bin','rb').read()[:4000])
hdr = struct.pack('<3i', 20240521, 1, 1000) + bytes(4 * 253)
open('$tmp/badmagic.bin','wb').write(hdr + bytes(b[:2000]))"
expect_error "headerless .bin" "without the shard magic number" "$bin" train "${tiny[@]}" \
  --set train="$tmp/nanogpt.bin" --set vocab_size=50304 --set out_dir="$tmp/nb"
expect_error "broken magic" "starts like a token shard header" "$bin" train "${tiny[@]}" \
  --set train="$tmp/badmagic.bin" --set out_dir="$tmp/nb"
expect_error "format key" "is not one of auto, text, shard" "$bin" train "${tiny[@]}" --set format=bytes

# ---- 8. [model] keys stored in the checkpoint ----
a=$("$bin" eval --ckpt "$ck" --data "$tmp/val.txt" --json 2>/dev/null)
b=$("$bin" eval --ckpt "$ck" --data "$tmp/val.txt" --json --set n_heads=8 2>"$tmp/err")
if [ "$a" != "$b" ]; then bad "eval --set n_heads=8 evaluated another model: $a vs $b"
elif ! grep -q "n_heads 8 (stored 4)" "$tmp/err"; then bad "eval did not say the stored n_heads wins: $(cat "$tmp/err")"
else ok; fi
for key in seq_len=64 ctx_window=8; do
  expect_error "resume with $key" "other \[model\] keys" "$bin" train "${tiny[@]}" --set out_dir="$out" \
    --set max_steps=50 --set $key --resume "$ck"
done
"$bin" train "${tiny[@]}" --set out_dir="$tmp/init_run" --set max_steps=1 --set ctx_window=8 --init "$ck" \
  >/dev/null 2>"$tmp/err" || bad "--init with another ctx_window: $(cat "$tmp/err")"
grep -q "warning: .*ctx_window 8 (stored 16)" "$tmp/err" || bad "--init did not warn: $(cat "$tmp/err")"

# ---- 9. resume cuts every log back to the checkpoint's step ----
out="$tmp/logs"
"$bin" train "${tiny[@]}" --set out_dir="$out" --set max_steps=12 --set checkpoint_interval=4 --set eval_interval=2 \
  --steps 9 >/dev/null 2>&1 || bad "logs setup" # checkpoints at 4 and 8, logs to 9
"$bin" train "${tiny[@]}" --set out_dir="$out" --set max_steps=12 --set checkpoint_interval=4 --set eval_interval=2 \
  --resume "$out/checkpoint.safetensors" >/dev/null 2>"$tmp/err" || bad "logs resume: $(cat "$tmp/err")"
[ "$(cut -d, -f1 "$out/grad_norms.csv" | tail -n +2 | tr '\n' ' ')" = "2 4 6 8 10 12 " ] ||
  bad "grad_norms.csv after resume: $(cut -d, -f1 "$out/grad_norms.csv" | tr '\n' ' ')"
[ "$(event_steps "$out" | sort -n | uniq -d | wc -l)" -eq 0 ] || bad "TensorBoard steps twice: $(event_steps "$out" | sort -n | uniq -d | tr '\n' ' ')"
[ "$(event_steps "$out" | sort -n | uniq | wc -l)" -eq 12 ] || bad "TensorBoard steps missing"
ok

# ---- 10. eval scores each window at most once ----
"$bin" eval --ckpt "$ck" --data "$tmp/val.txt" --batches 100000 --json >"$tmp/ev.json" 2>"$tmp/err" || bad "eval: $(cat "$tmp/err")"
python3 -c "
import json, os; d = json.load(open('$tmp/ev.json')); n = os.path.getsize('$tmp/val.txt')
assert d['tokens'] == (n - 1) // 32 * 32, (d['tokens'], n)" || bad "eval --batches 100000 scored text twice"

# ---- 11. enumerated options; bench without a GPU measures nothing on it ----
expect_error "audit --device-b tpu" "expected one of cpu|gpu" "$bin" audit --device-b tpu
expect_error "train --dist" "expected one of auto|mpi|env|none" "$bin" train --dist slurm
if [ -z "${CUDA_VISIBLE_DEVICES+x}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  "$bin" bench "${tiny[@]:0:6}" --steps 1 --warmup 0 --json >"$tmp/bench.json" 2>&1 || bad "bench --json: $(cat "$tmp/bench.json")"
  python3 -c "import json; d = json.load(open('$tmp/bench.json')); assert d['gpu_ms'] is None and d['cpu_ms'] > 0, d" ||
    bad "bench --json without a GPU: $(cat "$tmp/bench.json")"
  "$bin" bench "${tiny[@]:0:6}" --cpu-steps 0 --json >/dev/null 2>&1
  [ $? -eq 77 ] || bad "bench measuring nothing did not exit 77"
fi

# ---- 13. checkpoints carry a checksum ----
python3 -c "
b = bytearray(open('$ck','rb').read())
for i in range(50): b[len(b) - 4000 + i * 13] ^= 0x5a
open('$tmp/flipped.safetensors','wb').write(b)"
expect_error "flipped bytes" "checksum mismatch" "$bin" eval --ckpt "$tmp/flipped.safetensors" --data "$tmp/val.txt"
edit_st "$ck" "$tmp/nosum.safetensors" lm_head.weight 1 # from elsewhere: no checksum, still loads
"$bin" eval --ckpt "$tmp/nosum.safetensors" --data "$tmp/val.txt" >/dev/null 2>"$tmp/err" || bad "no-checksum file: $(cat "$tmp/err")"

# ---- 15. resuming a finished run says so and writes nothing ----
"$bin" train "${tiny[@]}" --set out_dir="$tmp/done" --set max_steps=3 >/dev/null 2>&1 || bad "done setup"
ls "$tmp/done" >"$tmp/before.ls"
"$bin" train --resume "$tmp/done/checkpoint.safetensors" >"$tmp/out" 2>&1 || bad "finished resume exit"
grep -q "already at max_steps 3: nothing to do" "$tmp/out" || bad "finished resume message: $(cat "$tmp/out")"
ls "$tmp/done" | cmp -s - "$tmp/before.ls" || bad "finished resume wrote files"
expect_error "max_steps below the checkpoint" "past max_steps 2" \
  "$bin" train --resume "$tmp/done/checkpoint.safetensors" --set max_steps=2

# ---- 16. error lines a user can act on ----
printf '[train\nlr = 1e-3\n' >"$tmp/hdr.ini"
expect_error "malformed header" "hdr.ini:1: malformed section header '\[train'" "$bin" train --config "$tmp/hdr.ini"
printf '[train]\nlr = 1e-3\n; note\nlr = 2e-3\n' >"$tmp/dup.ini"
expect_error "duplicate key" "dup.ini:4: \[train\] lr is set twice (first at line 2)" "$bin" train --config "$tmp/dup.ini"
"$bin" train "${tiny[@]}" --set "lr = 1e-3" --set " max_steps= 1" --set out_dir="$tmp/trim" >/dev/null 2>"$tmp/err" ||
  bad "--set with blanks: $(cat "$tmp/err")"
expect_error "lr=0" "lr = 0 is below lr_min = 0.0002" "$bin" train "${tiny[@]}" --set lr=0
# keys that span each other: broken by a --set, the command line's error (2); by the file, the file's (1)
"$bin" train "${tiny[@]}" --set n_heads=3 --set out_dir="$tmp/nh" >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] && ok || bad "--set n_heads=3 (does not divide d_model): exit $rc, want 2"
printf '[model]\nd_model = 64\nn_heads = 3\n' >"$tmp/nh.ini"
"$bin" train --config "$tmp/nh.ini" --set train="$tmp/train.txt" --set out_dir="$tmp/nh" >/dev/null 2>&1
rc=$?
[ $rc -eq 1 ] && ok || bad "a config whose n_heads does not divide d_model: exit $rc, want 1"
expect_error "eval --bogus" "unknown option '--bogus'" "$bin" eval --bogus
expect_error "option without value" "option '--ckpt' needs a value" "$bin" eval --ckpt
printf 'just some text, not a checkpoint at all\n' >"$tmp/some.txt"
expect_error "not safetensors" "not a safetensors file" "$bin" eval --ckpt "$tmp/some.txt"

expect_error "--sample-prompt ''" "train: --sample-prompt is empty: give the sample's first text, or --sample-tokens 0" \
  "$bin" train "${tiny[@]}" --set out_dir="$tmp/nosample" --sample-prompt ''
[ -e "$tmp/nosample" ] && bad "--sample-prompt '': out_dir written" || ok
# eval --json on a checkpoint path that is not UTF-8: the JSON result, the path's bad byte as U+FFFD
cp "$tmp/trim/checkpoint.safetensors" "$tmp/$(printf 'ck\xff').safetensors"
"$bin" eval --ckpt "$tmp/$(printf 'ck\xff').safetensors" --data "$tmp/val.txt" --batches 1 --json >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['ckpt'].endswith('ck\ufffd.safetensors') and r['loss'] > 0" "$tmp/out" &&
  ok || bad "eval --json, a path that is not UTF-8: exit $rc: $(cat "$tmp/out" "$tmp/err")"

# an option is named as the user wrote it, not as the config key it sets (no GPU seen: CUDA_VISIBLE_DEVICES empty)
CUDA_VISIBLE_DEVICES= expect_error "dump-state --device gpu without a GPU" \
  "dump-state: --device gpu, but no CUDA device is visible .*: use --device cpu" \
  "$bin" dump-state --ckpt "$tmp/trim/checkpoint.safetensors" --device gpu --out "$tmp/ds.safetensors"

# a long CPU reference step is said before it runs; bisect's first line comes before its first length's steps
# (the default config: a CPU step of about a minute, stopped once it is said)
CUDA_VISIBLE_DEVICES= "$bin" bench --config "$root/configs/default.ini" --set train="$tmp/train.txt" --set val="$tmp/val.txt" \
  --cpu-steps 1 >/dev/null 2>"$tmp/bench.err" &
benchpid=$!
for _ in $(seq 300); do grep -q "timing the CPU" "$tmp/bench.err" && break; sleep 0.1; done
kill -9 $benchpid; wait $benchpid 2>/dev/null
grep -q "^catchat bench: timing the CPU reference: 1 step of about [0-9][0-9a-z .]* (--cpu-steps 0 skips it)$" "$tmp/bench.err" && ok ||
  bad "bench --cpu-steps 1 said nothing before its CPU step: $(cat "$tmp/bench.err")"
"$bin" bisect --config "$root/configs/tiny.ini" --set train="$tmp/train.txt" --lengths 16 --steps 1 >"$tmp/out" 2>&1 ||
  bad "bisect: $(cat "$tmp/out")"
grep -q "1 step per length" "$tmp/out" && grep -q "finite through 1 step (" "$tmp/out" && ok || bad "bisect, one step: $(cat "$tmp/out")"

# --force deletes only catchat's files: a telemetry.csv of the user's own stays, and the run is refused
mkdir -p "$tmp/usercsv" && printf 'epoch,my_metric\n1,0.5\n' >"$tmp/usercsv/telemetry.csv"
expect_error "--force over a telemetry.csv catchat did not write" \
  "usercsv/telemetry.csv is not catchat's (its first line is not catchat's header): --force deletes only what catchat wrote" \
  "$bin" train "${tiny[@]}" --set out_dir="$tmp/usercsv" --set max_steps=1 --force
[ "$(head -1 "$tmp/usercsv/telemetry.csv")" = "epoch,my_metric" ] && ok || bad "--force replaced the user's telemetry.csv"

# a run whose last checkpoint was not written (a full disk) but whose best one was: offered for --resume
"$bin" train "${tiny[@]}" --set out_dir="$tmp/bestonly" --set max_steps=4 --set eval_interval=2 >/dev/null 2>&1 ||
  bad "best-only setup"
rm -f "$tmp/bestonly/checkpoint.safetensors"
expect_error "a folder with only the best checkpoint" \
  "bestonly holds an earlier run's checkpoint_best.safetensors but no checkpoint.safetensors: --resume $tmp/bestonly/checkpoint_best.safetensors goes on from it" \
  "$bin" train "${tiny[@]}" --set out_dir="$tmp/bestonly" --set max_steps=6
"$bin" train --resume "$tmp/bestonly/checkpoint_best.safetensors" --set max_steps=6 --quiet --sample-tokens 0 >/dev/null 2>"$tmp/err" &&
  [ -f "$tmp/bestonly/checkpoint.safetensors" ] && ok || bad "--resume of the best checkpoint: $(cat "$tmp/err")"

# ---- 17. help and version ----
"$bin" help train | head -1 | grep -q "^usage: catchat train" || bad "help train"
expect_error "help foo" "no command or topic 'foo'" "$bin" help foo
"$bin" --version >"$tmp/v" || bad "--version exit"
for w in "catchat [0-9]" "git " "GPU architectures compiled" "CUDA runtime" "cuBLASLt" "NCCL"; do
  grep -q "$w" "$tmp/v" || bad "--version lacks '$w'"
done
for c in train eval sample dump-state ladder bench bisect audit; do # every option in the usage lines
  "$bin" $c --help | python3 -c "
import re, sys
t = sys.stdin.read(); usage = t.split('\n\n')[0]
miss = set(re.findall(r'^\s+(--[a-z-]+)', t, re.M)) - set(re.findall(r'--[a-z-]+', usage))
sys.exit(f'$c usage lacks {sorted(miss)}' if miss else 0)" || bad "usage line of $c"
  # -h is --help in every command, as 'catchat -h' is
  "$bin" $c -h >"$tmp/h" 2>"$tmp/err" && cmp -s "$tmp/h" <("$bin" $c --help) || bad "$c -h: $(cat "$tmp/err")"
done
ok

# ---- 18. a second SIGINT before the first checkpoint says nothing was saved ----
CATCHAT_TEST_WRITE_DELAY_US=200000 "$bin" train "${tiny[@]}" --set out_dir="$tmp/sig3" --set max_steps=100000 \
  --set checkpoint_interval=0 --set eval_interval=0 >/dev/null 2>"$tmp/sig3.err" &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/sig3/telemetry.csv" ] && break; sleep 0.1; done
kill -INT $pid
in_write "$tmp/sig3" $pid # the first checkpoint's
sleep 1.2
kill -INT $pid
watchdog $pid
wait $pid
rc=$?
if [ $rc -ne 130 ]; then bad "second SIGINT before a checkpoint: exit $rc"
elif [ "$(grep -c . "$tmp/sig3.err")" -ne 2 ] ||
     ! grep -q "^catchat: SIGINT: stopping after the step in flight, with a checkpoint (another Ctrl-C, a second or more later, stops at once)$" "$tmp/sig3.err" ||
     ! grep -q "second SIGINT: stopped at once; nothing was saved (no checkpoint had been written yet)" "$tmp/sig3.err"; then
  bad "second SIGINT before a checkpoint: $(cat "$tmp/sig3.err")"
else ok; fi
# after a checkpoint: the second SIGINT names it and its step
CATCHAT_TEST_WRITE_DELAY_US=200000 "$bin" train "${tiny[@]}" --set out_dir="$tmp/sig4" --set max_steps=100000 \
  --set checkpoint_interval=2 --set eval_interval=0 >/dev/null 2>"$tmp/sig4.err" &
pid=$!
for _ in $(seq 200); do [ -f "$tmp/sig4/checkpoint.safetensors" ] && break; sleep 0.1; done
steps_past "$tmp/sig4" 2 # past the first checkpoint's write, into the steps after it
kill -INT $pid
in_write "$tmp/sig4" $pid # the stop's checkpoint (or a periodic one: the message names what is saved)
sleep 1.2
kill -INT $pid
watchdog $pid
wait $pid
rc=$?
if [ $rc -ne 130 ]; then bad "second SIGINT after a checkpoint: exit $rc"
elif ! grep -q "second SIGINT: stopped at once; the checkpoint of step [0-9]* is saved in $tmp/sig4/checkpoint.safetensors" "$tmp/sig4.err"; then
  bad "second SIGINT after a checkpoint: $(cat "$tmp/sig4.err")"
else
  said=$(grep -o "checkpoint of step [0-9]*" "$tmp/sig4.err" | grep -o "[0-9]*$")
  python3 - "$tmp/sig4/checkpoint.safetensors" "$said" <<'PY' || bad "second SIGINT names step $said, the checkpoint holds another"
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
assert json.loads(b[8:8 + n])["__metadata__"]["step"] == sys.argv[2]
PY
fi

# ---- 19. a SIGINT ignored from the start is said (Ctrl-C would do nothing) ----
(trap '' INT; exec "$bin" train "${tiny[@]}" --set out_dir="$tmp/noint" --set max_steps=1) >/dev/null 2>"$tmp/err" ||
  bad "train with SIGINT ignored: $(cat "$tmp/err")"
grep -q "note: SIGINT is ignored in this process .*Ctrl-C will not stop it; 'kill [0-9]*' (SIGTERM)" "$tmp/err" ||
  bad "SIGINT ignored, not said: $(cat "$tmp/err")"
"$bin" train "${tiny[@]}" --set out_dir="$tmp/int" --set max_steps=1 >/dev/null 2>"$tmp/err" || bad "train: $(cat "$tmp/err")"
! grep -q "SIGINT is ignored" "$tmp/err" || bad "SIGINT not ignored, but said so"

# ---- 20. --resume auto never removes logs without --force ----
mkdir -p "$tmp/auto_logs" && printf 'step,tokens,loss,running_loss\n1\n' >"$tmp/auto_logs/telemetry.csv"
expect_error "--resume auto over logs" \
  "holds the logs of an earlier run (telemetry.csv) but no checkpoint for --resume auto to resume: pass --force" \
  "$bin" train "${tiny[@]}" --set max_steps=2 --set out_dir="$tmp/auto_logs" --resume auto
[ "$(cat "$tmp/auto_logs/telemetry.csv")" = "$(printf 'step,tokens,loss,running_loss\n1')" ] || bad "--resume auto replaced the logs"
{ "$bin" train "${tiny[@]}" --set max_steps=2 --set out_dir="$tmp/auto_logs" --resume auto --force >/dev/null 2>"$tmp/err" &&
  [ -f "$tmp/auto_logs/checkpoint.safetensors" ]; } || bad "--resume auto --force: $(cat "$tmp/err")"

# ---- 21. --resume CKPT goes on in the checkpoint's folder, on the checkpoint's data ----
"$bin" train "${tiny[@]}" --set out_dir="$tmp/run_a" --set max_steps=4 --set eval_interval=2 >/dev/null 2>&1 || bad "run_a"
"$bin" train "${tiny[@]}" --set out_dir="$tmp/run_b" --set max_steps=4 >/dev/null 2>&1 || bad "run_b"
before_b=$(md5sum <"$tmp/run_b/checkpoint.safetensors")
# a config whose out_dir holds another run: --resume of run_a's checkpoint continues run_a
sed -e "s|^out_dir = .*|out_dir = $tmp/run_b|" -e "s|^train = .*|train = $tmp/train.txt|" \
  -e "s|^val = .*|val = $tmp/val.txt|" "$root/configs/tiny.ini" >"$tmp/b.ini"
if ! "$bin" train --config "$tmp/b.ini" --set max_steps=6 --quiet --sample-tokens 0 \
    --resume "$tmp/run_a/checkpoint.safetensors" >/dev/null 2>"$tmp/err"; then
  bad "--resume with a config naming another out_dir: $(cat "$tmp/err")"
elif ! grep -q "note: --resume goes on in $tmp/run_a, the checkpoint's folder, not the config's out_dir" "$tmp/err"; then
  bad "--resume into the checkpoint's folder, not said: $(cat "$tmp/err")"
elif [ "$(tail -1 "$tmp/run_a/telemetry.csv" | cut -d, -f1)" -ne 6 ]; then bad "--resume did not go on in the checkpoint's folder"
elif [ "$before_b" != "$(md5sum <"$tmp/run_b/checkpoint.safetensors")" ]; then bad "--resume wrote into the config's out_dir"
else ok; fi
# other validation or training data: refused in one line; --new-data starts a new best-eval record
head -c 3000 "$tmp/train.txt" >"$tmp/val2.txt"
expect_error "resume on other val data" \
  "was trained on other validation data (\[data\] val) than $tmp/val2.txt: resume with the same data, or pass --new-data" \
  "$bin" train --resume "$tmp/run_a/checkpoint.safetensors" --set val="$tmp/val2.txt" --set max_steps=8
expect_error "resume on other train data" "was trained on other training data (\[data\] train)" \
  "$bin" train --resume "$tmp/run_a/checkpoint.safetensors" --set train="$tmp/val2.txt" --set max_steps=8
cp "$tmp/run_a/checkpoint_best.safetensors" "$tmp/best_before.safetensors"
if ! "$bin" train --resume "$tmp/run_a/checkpoint.safetensors" --set val="$tmp/val2.txt" --set max_steps=8 \
    --set eval_interval=2 --new-data --sample-tokens 0 >"$tmp/out" 2>"$tmp/err"; then bad "--new-data: $(cat "$tmp/err")"
elif ! grep -q "resumed from .* at step 6; --new-data: other validation data (\[data\] val), a new best-eval record" "$tmp/out"; then
  bad "--new-data resume line: $(grep resumed "$tmp/out")"
elif ! grep -q "best eval loss [0-9.]* at step 8$" "$tmp/out"; then
  bad "--new-data: the best-eval record is not the new validation set's (step 8): $(grep -A1 'done after' "$tmp/out")"
elif cmp -s "$tmp/best_before.safetensors" "$tmp/run_a/checkpoint_best.safetensors"; then
  bad "--new-data: checkpoint_best was not written on the new validation set"
else ok; fi
expect_error "--new-data without --resume" "--new-data goes with --resume" "$bin" train "${tiny[@]}" --new-data

# ---- 22. relative data paths in a checkpoint read from anywhere ----
(cd "$tmp" && "$bin" train --config "$root/configs/tiny.ini" --set train=train.txt --set val=val.txt --set out_dir=rel \
  --set max_steps=2 --quiet --sample-tokens 0 >/dev/null 2>&1) || bad "relative run"
(cd / && "$bin" eval --ckpt "$tmp/rel/checkpoint.safetensors" --batches 1 >/dev/null 2>"$tmp/err") ||
  bad "eval from another folder of a run with relative data paths: $(cat "$tmp/err")"
(cd / && "$bin" train --resume "$tmp/rel/checkpoint.safetensors" --set max_steps=3 --quiet --sample-tokens 0 \
  >/dev/null 2>"$tmp/err") || bad "resume from another folder: $(cat "$tmp/err")"
[ "$(tail -1 "$tmp/rel/telemetry.csv" | cut -d, -f1)" = 3 ] || bad "resume from another folder: no step 3"
# the data moved: one line naming the checkpoint and the way out; the same tokens elsewhere resume
mv "$tmp/val.txt" "$tmp/val.moved"
expect_error "eval, stored val moved" "rel/checkpoint.safetensors: the \[data\] val stored in its config, '$tmp/val.txt', cannot be read .*pass --data FILE" \
  "$bin" eval --ckpt "$tmp/rel/checkpoint.safetensors"
expect_error "resume, stored val moved" "the \[data\] val stored in its config, '$tmp/val.txt', cannot be read .*pass --set train=PATH --set val=PATH" \
  "$bin" train --resume "$tmp/rel/checkpoint.safetensors" --set max_steps=4
"$bin" train --resume "$tmp/rel/checkpoint.safetensors" --set max_steps=4 --set val="$tmp/val.moved" --quiet \
  --sample-tokens 0 >/dev/null 2>"$tmp/err" || bad "resume with the moved data named: $(cat "$tmp/err")"
mv "$tmp/val.moved" "$tmp/val.txt"

# ---- 23. raising max_steps on a finished run: the lr stays at lr_min, said in the resume line ----
"$bin" train "${tiny[@]}" --set out_dir="$tmp/lr" --set max_steps=6 --set warmup_steps=2 --set lr_min=2e-4 \
  >/dev/null 2>&1 || bad "lr setup"
"$bin" train --resume "$tmp/lr/checkpoint.safetensors" --set max_steps=9 --sample-tokens 0 >"$tmp/out" 2>&1 ||
  bad "raised max_steps: $(tail -2 "$tmp/out")"
grep -q "resumed from .* at step 6; max_steps 6 -> 9: the lr goes on from 0.0002 toward lr_min 0.0002 at max_steps 9 (cosine)" \
  "$tmp/out" || bad "raised max_steps, resume line: $(grep resumed "$tmp/out")"
python3 -c "
import csv; rows = list(csv.DictReader(open('$tmp/lr/telemetry.csv')))
lrs = [float(r['lr']) for r in rows[6:]]
assert len(lrs) == 3 and all(abs(l - 2e-4) < 1e-9 for l in lrs), lrs" || bad "raised max_steps: the lr left lr_min"

# ---- 24. a resume with nothing to do says so before any check of the GPU ----
"$bin" train --resume "$tmp/lr/checkpoint.safetensors" --set device=gpu --preflight always \
  --plant-wrong-result gru_forward >"$tmp/out" 2>"$tmp/err" || bad "nothing to do, after a check: $(cat "$tmp/err")"
grep -q "already at max_steps 9: nothing to do" "$tmp/out" || bad "nothing to do: $(cat "$tmp/out" "$tmp/err")"

# ---- 25. the progress line at 80 columns keeps step, loss, step time, tokens/s and ETA ----
if command -v script >/dev/null 2>&1; then
  script -qec "stty cols 80 rows 24; '$bin' train --config '$root/configs/tiny.ini' --set train='$tmp/train.txt' \
    --set val='$tmp/val.txt' --set out_dir='$tmp/cols' --set max_steps=6 --set eval_interval=0 --sample-tokens 0" \
    /dev/null >"$tmp/cols.log" 2>&1 || bad "train at 80 columns"
  python3 - "$tmp/cols.log" <<'PY' || bad "progress at 80 columns: $(tr '\r' '\n' <"$tmp/cols.log" | grep '^step' | head -2)"
import re, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
parts = [re.sub(r"\x1b\[K", "", p) for p in re.split(r"[\r\n]", text)]
steps = [p for p in parts if p.startswith("step ") and "eval loss" not in p]  # eval lines stay, and may wrap
assert len(steps) >= 5, steps
for p in steps:
    assert len(p) <= 79, (len(p), p)
    for want in ("loss ", " ms", "tok/s", "ETA"):
        assert want in p, (want, p)
assert len({p.count("|") for p in steps}) == 1, ("the fields shown change from step to step", steps)
PY
else
  echo "skip: no script(1) for the 80-column progress check"
fi

# ---- 26. help train: no paragraph inside the option list (every line after the first option is indented) ----
"$bin" help train | awk '/^  --/ { opts = 1 } opts && NF && !/^  / { print; inside = 1 } END { exit inside }' >"$tmp/out" ||
  bad "help train: text inside the option list: $(cat "$tmp/out")"
# an earlier checkpoint of a run is not resumed over that run's latest
expect_error "resume checkpoint_best in its own folder" "checkpoint_best.safetensors is not $tmp/run_a's latest checkpoint (checkpoint.safetensors, step 8): to go on from it, --set out_dir=DIR" \
  "$bin" train --resume "$tmp/run_a/checkpoint_best.safetensors" --set max_steps=10

# ---- 27. one run at a time in an out_dir: the second says who holds it; the lock goes with the process ----
"$bin" train "${tiny[@]}" --set out_dir="$tmp/lock" --set max_steps=100000 --set checkpoint_interval=2 \
  --set eval_interval=0 >/dev/null 2>"$tmp/lock.err" &
holder=$!
watchdog $holder
for _ in $(seq 300); do [ -f "$tmp/lock/checkpoint.safetensors" ] && break; sleep 0.1; done
[ -f "$tmp/lock/checkpoint.safetensors" ] || bad "the lock holder wrote no checkpoint in 30 s: $(cat "$tmp/lock.err")"
expect_error_lines "a second run, --resume auto, same out_dir" "^catchat: $tmp/lock is in use by another catchat run$" \
  "$bin" train "${tiny[@]}" --set out_dir="$tmp/lock" --resume auto --set max_steps=100000
grep -q "^  pid $holder on $(uname -n), started 20" "$tmp/err" && grep -q "^  lock file $tmp/lock/catchat.lock$" "$tmp/err" &&
  ok || bad "the refusal does not name the holder and the lock file: $(cat "$tmp/err")"
rows_before=$(wc -l <"$tmp/lock/telemetry.csv")
expect_error_lines "a second run, --force, same out_dir" "^catchat: $tmp/lock is in use by another catchat run$" \
  "$bin" train "${tiny[@]}" --set out_dir="$tmp/lock" --force
grep -q "^  pid $holder on" "$tmp/err" && ok || bad "--force refusal without the holder: $(cat "$tmp/err")"
# --force would have deleted the running run's telemetry: it only grows
[ "$(wc -l <"$tmp/lock/telemetry.csv" 2>/dev/null || echo 0)" -ge "$rows_before" ] ||
  bad "a refused --force deleted the running run's telemetry"
kill -9 $holder; wait $holder 2>/dev/null
"$bin" train "${tiny[@]}" --set out_dir="$tmp/lock" --resume auto --steps 1 --set max_steps=100000 >/dev/null \
  2>"$tmp/err" || bad "--resume auto after the holder was killed: $(cat "$tmp/err")"
# a run refused before it writes leaves no folder behind (the lock's folder goes again)
expect_error "bad data, new out_dir" "cannot open data file" "$bin" train "${tiny[@]}" --set out_dir="$tmp/never" \
  --set train="$tmp/none.txt"
[ ! -e "$tmp/never" ] || bad "a refused run left its out_dir: $(ls -A "$tmp/never")"

# ---- 28. dump-state --out over a checkpoint: refused unless --force; an earlier dump is replaced ----
dump=(dump-state --config "$root/configs/tiny.ini" --set train="$tmp/train.txt" --set val="$tmp/val.txt"
      --ckpt "$tmp/run_a/checkpoint.safetensors")
cp "$tmp/run_a/checkpoint_best.safetensors" "$tmp/best_copy.safetensors"
expect_error "dump-state over a checkpoint" "'$tmp/best_copy.safetensors' holds a catchat checkpoint: it would be overwritten; write elsewhere, or pass --force" \
  "$bin" "${dump[@]}" --out "$tmp/best_copy.safetensors"
cmp -s "$tmp/run_a/checkpoint_best.safetensors" "$tmp/best_copy.safetensors" || bad "a refused dump-state changed the checkpoint"
printf 'notes\n' >"$tmp/notes.txt"
expect_error "dump-state over another file" "holds a file that is not a dump-state output" \
  "$bin" "${dump[@]}" --out "$tmp/notes.txt"
for i in 1 2; do # the second replaces the first: a dump is not a checkpoint
  "$bin" "${dump[@]}" --out "$tmp/dump.safetensors" \
    >/dev/null 2>"$tmp/err" || bad "dump-state $i over an earlier dump: $(cat "$tmp/err")"
done
"$bin" "${dump[@]}" --out "$tmp/best_copy.safetensors" --force \
  >/dev/null 2>"$tmp/err" || bad "dump-state --force: $(cat "$tmp/err")"

# ---- 29. a telemetry.csv cut short (a full disk, a partial copy) is said at resume ----
"$bin" train "${tiny[@]}" --set out_dir="$tmp/cut" --set max_steps=6 --set eval_interval=0 >/dev/null 2>&1 || bad "cut setup"
head -4 "$tmp/cut/telemetry.csv" >"$tmp/cut.csv" && printf '4,1' >>"$tmp/cut.csv" && mv "$tmp/cut.csv" "$tmp/cut/telemetry.csv"
"$bin" train --resume "$tmp/cut/checkpoint.safetensors" --set max_steps=8 --quiet --sample-tokens 0 >/dev/null \
  2>"$tmp/err" || bad "resume of a cut telemetry: $(cat "$tmp/err")"
grep -q "note: $tmp/cut/telemetry.csv ends at step 3 and a torn row, the run resumes at step 6: steps 4 to 6 have no rows" \
  "$tmp/err" || bad "a cut telemetry.csv resumed without a note: $(cat "$tmp/err")"
[ "$(cut -d, -f1 "$tmp/cut/telemetry.csv" | tr '\n' ' ')" = "step 1 2 3 7 8 " ] || bad "cut telemetry rows: $(cut -d, -f1 "$tmp/cut/telemetry.csv" | tr '\n' ' ')"

# ---- 30. no room for the checkpoint: the error says what is on disk (RLIMIT_FSIZE stands in for a full disk) ----
(ulimit -f 200; exec "$bin" train "${tiny[@]}" --set out_dir="$tmp/full" --set max_steps=2 \
  --set eval_interval=0) >/dev/null 2>"$tmp/err" && bad "a checkpoint past the size limit: exit 0"
# the message names the file, not catchat's temporary name for it
grep -q "cannot write '$tmp/full/checkpoint\(_best\)\?.safetensors': File too large (there was no earlier one to keep)" \
  "$tmp/err" || bad "no room, first checkpoint: $(cat "$tmp/err")"
(ulimit -f 200; exec "$bin" train --resume "$tmp/cut/checkpoint.safetensors" --set max_steps=9 --quiet \
  --sample-tokens 0) >/dev/null 2>"$tmp/err" && bad "a resumed checkpoint past the size limit: exit 0"
grep -q "cannot write '$tmp/cut/checkpoint\(_best\)\?.safetensors': File too large (the earlier one is kept, unchanged)" "$tmp/err" ||
  bad "no room, a later checkpoint: $(cat "$tmp/err")"
ls "$tmp/full" "$tmp/cut" | grep -q '\.tmp\.' && bad "a file past the size limit left its temporary file" || ok

# ---- 31. the GPU-sized default planned on the CPU says how long it would take, before the first step ----
"$bin" train --set device=cpu --set train="$tmp/train.txt" --set val="$tmp/val.txt" --set out_dir="$tmp/big" --quiet \
  >/dev/null 2>"$tmp/big.err" &
big=$!
for _ in $(seq 300); do grep -q note "$tmp/big.err" && break; sleep 0.1; done
kill -9 $big; wait $big 2>/dev/null
grep -q "^catchat: note: on the CPU reference a step of this config takes about .*, 1000 steps about .*: configs/cpu.ini is a model sized for a CPU" \
  "$tmp/big.err" || bad "the default config on the CPU, no duration note: $(cat "$tmp/big.err")"
"$bin" train "${tiny[@]}" --set device=cpu --set out_dir="$tmp/small" --set max_steps=2 >/dev/null 2>"$tmp/err"
grep -q "note: on the CPU" "$tmp/err" && bad "a short CPU run got the duration note"

# ---- 32. --quiet keeps the resume line; --steps short of max_steps is not "done" ----
"$bin" train "${tiny[@]}" --set out_dir="$tmp/pause" --set max_steps=6 --steps 2 >"$tmp/out" 2>&1 || bad "pause run"
grep -q "^catchat train: paused (--steps) after step 2 " "$tmp/out" && grep -q "max_steps 6 not reached; go on with:$" "$tmp/out" &&
  grep -q "^  .* train --resume $tmp/pause/checkpoint.safetensors$" "$tmp/out" ||
  bad "--steps 2 of 6: $(cat "$tmp/out")"
"$bin" train --resume "$tmp/pause/checkpoint.safetensors" --quiet --sample-tokens 0 >"$tmp/out" 2>&1 || bad "resume, quiet"
grep -q "^resumed from $tmp/pause/checkpoint.safetensors at step 2" "$tmp/out" || bad "--quiet hid the resume line: $(cat "$tmp/out")"
grep -q "^catchat train: done after step 6 " "$tmp/out" || bad "the resumed run's end: $(cat "$tmp/out")"

# ---- 33. signals that come together are one request; output that goes away; SIGHUP under nohup ----
# timeout(1) signals its child, then its process group: two SIGTERMs at once, one stop with a checkpoint
timeout --preserve-status -s TERM 4 "$bin" train "${tiny[@]}" --set out_dir="$tmp/tmo" --set max_steps=100000 \
  --set checkpoint_interval=0 --set eval_interval=0 >/dev/null 2>"$tmp/tmo.err"
rc=$?
[ $rc -eq 143 ] && [ -f "$tmp/tmo/checkpoint.safetensors" ] && ! grep -q "stopped at once" "$tmp/tmo.err" && ok ||
  bad "timeout -s TERM: exit $rc: $(cat "$tmp/tmo.err")"
"$bin" train "${tiny[@]}" --set out_dir="$tmp/twice" --set max_steps=100000 --set checkpoint_interval=0 \
  --set eval_interval=0 >/dev/null 2>"$tmp/twice.err" &
pid=$!
steps_past "$tmp/twice" 2
kill -TERM $pid; kill -TERM $pid; kill -TERM $pid
watchdog $pid
wait $pid
rc=$?
[ $rc -eq 143 ] && [ -f "$tmp/twice/checkpoint.safetensors" ] && [ "$(grep -c "SIGTERM: stopping" "$tmp/twice.err")" -eq 1 ] &&
  ! grep -q "stopped at once" "$tmp/twice.err" && ok || bad "three SIGTERMs at once: exit $rc: $(cat "$tmp/twice.err")"
# train piped into head: the run goes on to its end and saves (no SIGPIPE death at the first step;
# not --quiet: a line a step, so the writes after head has gone fail)
"$bin" train --config "$root/configs/tiny.ini" --set train="$tmp/train.txt" --set val="$tmp/val.txt" \
  --sample-tokens 0 --set out_dir="$tmp/pipe" --set max_steps=12 --set eval_interval=0 2>&1 | head -c 10 >/dev/null
rc=${PIPESTATUS[0]}
[ $rc -eq 0 ] && [ "$(tail -1 "$tmp/pipe/telemetry.csv" | cut -d, -f1)" = 12 ] && [ -f "$tmp/pipe/checkpoint.safetensors" ] &&
  ok || bad "train | head: exit $rc"
# SIGHUP ignored at start (nohup) stays ignored: the run goes on; SIGTERM still stops it
(trap '' HUP; exec "$bin" train "${tiny[@]}" --set out_dir="$tmp/nohup" --set max_steps=100000 \
  --set checkpoint_interval=0 --set eval_interval=0) >/dev/null 2>"$tmp/nohup.err" &
pid=$!
steps_past "$tmp/nohup" 2
kill -HUP $pid
sleep 1
last=$(tail -1 "$tmp/nohup/telemetry.csv" | cut -d, -f1)
steps_past "$tmp/nohup" "$last"
kill -0 $pid 2>/dev/null && ok || bad "SIGHUP ignored at start: the run did not go on"
kill -TERM $pid
watchdog $pid
wait $pid
rc=$?
[ $rc -eq 143 ] && ! grep -q SIGHUP "$tmp/nohup.err" && ok || bad "nohup run, then SIGTERM: exit $rc: $(cat "$tmp/nohup.err")"

finish
