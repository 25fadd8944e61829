#!/usr/bin/env bash
# Config values end to end: relative paths in a config file are taken from
# the file's folder (and a data file that cannot be opened says where its path
# came from), a path that is not UTF-8 survives the checkpoint's stored config,
# a list of shards longer than inih's line buffer, integers written with an
# exponent, exit 2 for a bad --set (1 for a bad file), and the notes for
# threads and warmup_steps.
#   tests/config_paths.sh path/to/catchat
set -u
source "$(dirname "$0")/lib.sh" "$1"
mkdir -p "$tmp/data" "$tmp/cfgs" "$tmp/else/where"
make_corpus "$tmp/data"
quiet=(--quiet --sample-tokens 0)

# last_step DIR: the step of the last telemetry row in DIR
last_step() { tail -1 "$1/telemetry.csv" 2>/dev/null | cut -d, -f1; }

# tiny_with FILE LINES...: the tests' tiny model on the CPU (configs/tiny.ini's
# shape, written out here so that only the keys under test differ between
# catchat versions), then a [data] section of the lines given.
tiny_with() {
  local out=$1; shift
  printf '%s\n' '[model]' 'd_model = 64' 'n_layers = 2' 'n_heads = 4' 'ctx_window = 16' 'seq_len = 32' \
    '[train]' 'batch_size = 4' 'max_steps = 20' 'warmup_steps = 5' 'eval_interval = 10' 'eval_batches = 2' \
    'checkpoint_interval = 10' '[run]' 'device = cpu' '[data]' "$@" >"$out"
}

# the same with absolute data paths, for the checks that are not about paths
tiny_with "$tmp/cfgs/abs.ini" "train = $tmp/data/train.txt" "val = $tmp/data/val.txt"

# ---- 1. a config names its data relative to its own folder: it trains from any folder ----
tiny_with "$tmp/cfgs/rel.ini" 'train = ../data/train.txt' 'val = ../data/val.txt' '[run]' 'out_dir = ../runs/rel'
(cd "$tmp/else/where" && "$bin" train --config "$tmp/cfgs/rel.ini" --set max_steps=6 "${quiet[@]}" \
  >/dev/null 2>"$tmp/err") || bad "a config's relative paths, run from another folder: $(cat "$tmp/err")"
[ "$(last_step "$tmp/runs/rel")" = 6 ] && ok || bad "out_dir = ../runs/rel was not taken from the config's folder"
[ -e "$tmp/else/runs" ] && bad "out_dir taken from the current folder: $(ls "$tmp/else")" || ok
# --config given relative: the paths print as short as they are ("cfgs/../data" is "data")
(cd "$tmp" && "$bin" train --config cfgs/rel.ini --set max_steps=6 --set out_dir=runs/rel2 --sample-tokens 0 \
  >"$tmp/out" 2>"$tmp/err") || bad "--config cfgs/rel.ini: $(cat "$tmp/err")"
grep -q '^train = data/train\.txt$' "$tmp/out" && ok || bad "the printed train path: $(grep '^train' "$tmp/out")"
# --set and the defaults stay relative to the current folder
(cd "$tmp/data" && "$bin" train --config "$tmp/cfgs/rel.ini" --set train=train.txt --set max_steps=6 \
  --set out_dir="$tmp/runs/set" "${quiet[@]}" >/dev/null 2>"$tmp/err") || bad "--set train=train.txt: $(cat "$tmp/err")"

# ---- 2. a data file that cannot be opened: where its path came from, what it was resolved against ----
tiny_with "$tmp/cfgs/bad.ini" 'train = x/y.txt' "val = $tmp/data/val.txt"
line=$(grep -n '^train = x/y.txt' "$tmp/cfgs/bad.ini" | cut -d: -f1)
expect_error "a config's missing data file" \
  "cannot open data file '$tmp/cfgs/x/y.txt' (\[data\] train = x/y.txt in $tmp/cfgs/bad.ini:$line, resolved against $tmp/cfgs (the config's folder)): No such file" \
  "$bin" train --config "$tmp/cfgs/bad.ini" --set out_dir="$tmp/runs/bad" --set max_steps=6
(cd "$tmp" && expect_error "the same, --config relative" \
  "cannot open data file 'cfgs/x/y.txt' (\[data\] train = x/y.txt in cfgs/bad.ini:$line, resolved against cfgs (the config's folder))" \
  "$bin" train --config cfgs/bad.ini --set out_dir="$tmp/runs/bad" --set max_steps=6)
(cd "$tmp/else/where" && expect_error "a --set data file" \
  "cannot open data file 'nope.txt' (--set train=nope.txt, resolved against $tmp/else/where (the current folder))" \
  "$bin" train --config "$tmp/cfgs/bad.ini" --set train=nope.txt --set out_dir="$tmp/runs/bad" --set max_steps=6)
tiny_with "$tmp/cfgs/glob.ini" 'train = shards/t_*.bin' "val = $tmp/data/val.txt"
expect_error "a config's glob that matches nothing" \
  "$tmp/cfgs/shards/t_\*.bin: the pattern matches no file (\[data\] train = shards/t_\*.bin in $tmp/cfgs/glob.ini" \
  "$bin" train --config "$tmp/cfgs/glob.ini" --set out_dir="$tmp/runs/bad" --set max_steps=6

# ---- 3. a data path that is not UTF-8: stored byte for byte, the run resumes on it ----
raw=$(printf 'tr\xffin.txt')
cp "$tmp/data/train.txt" "$tmp/data/$raw"
(cd "$tmp" && "$bin" train --config "$tmp/cfgs/abs.ini" --set train="data/$raw" --set val=data/val.txt \
  --set out_dir=runs/raw --set max_steps=8 --steps 6 "${quiet[@]}" >/dev/null 2>"$tmp/err") ||
  bad "train on a non-UTF-8 path: $(cat "$tmp/err")"
(cd "$tmp" && "$bin" train --resume runs/raw/checkpoint.safetensors --steps 1 "${quiet[@]}" >/dev/null 2>"$tmp/err") ||
  bad "resume of a run on a non-UTF-8 path: $(cat "$tmp/err")"
[ "$(last_step "$tmp/runs/raw")" = 7 ] && ok || bad "the resume did not train step 7: $(cat "$tmp/err")"
# from another folder too (the stored path is relative to the run's start folder)
(cd / && "$bin" train --resume "$tmp/runs/raw/checkpoint.safetensors" --steps 1 "${quiet[@]}" >/dev/null 2>"$tmp/err") &&
  [ "$(last_step "$tmp/runs/raw")" = 8 ] && ok || bad "resume from / on a non-UTF-8 path: $(cat "$tmp/err")"

# a run started in a folder whose name is not UTF-8: its start folder is stored too, so relative data paths resume
# from anywhere
wd="$tmp/$(printf 'st\xffdir')"
mkdir -p "$wd" && cp "$tmp/data/train.txt" "$tmp/data/val.txt" "$wd/"
(cd "$wd" && "$bin" train --config "$tmp/cfgs/abs.ini" --set train=train.txt --set val=val.txt --set out_dir=r \
  --set max_steps=8 --steps 6 "${quiet[@]}" >/dev/null 2>"$tmp/err") || bad "train in a non-UTF-8 folder: $(cat "$tmp/err")"
(cd / && "$bin" train --resume "$wd/r/checkpoint.safetensors" --steps 1 "${quiet[@]}" >/dev/null 2>"$tmp/err") &&
  [ "$(last_step "$wd/r")" = 7 ] && ok || bad "resume from / of a run started in a non-UTF-8 folder: $(cat "$tmp/err")"

# ---- 4. a list of 12 shards on one line, longer than inih's 198 bytes ----
mkdir -p "$tmp/cfgs/parts"
split -n l/12 -d "$tmp/data/train.txt" "$tmp/cfgs/parts/train_part_"
list=$(cd "$tmp/cfgs" && ls parts/train_part_* | paste -sd, -)
[ ${#list} -gt 200 ] || bad "the shard list is only ${#list} bytes"
tiny_with "$tmp/cfgs/list.ini" "train = $list   # twelve parts" "val = ../data/val.txt"
(cd "$tmp/else/where" && "$bin" train --config "$tmp/cfgs/list.ini" --set out_dir="$tmp/runs/list" --set max_steps=6 \
  "${quiet[@]}" >/dev/null 2>"$tmp/err") && [ "$(last_step "$tmp/runs/list")" = 6 ] && ok ||
  bad "a ${#list}-byte shard list on one line: $(cat "$tmp/err")"

# ---- 5. integers written with an exponent; 1.5 and 1e30 refused ----
(cd "$tmp" && "$bin" train --config "$tmp/cfgs/abs.ini" --set max_steps=1e12 --steps 1 --set out_dir="$tmp/runs/e12" \
  "${quiet[@]}" >/dev/null 2>"$tmp/err") && [ "$(last_step "$tmp/runs/e12")" = 1 ] && ok ||
  bad "--set max_steps=1e12: $(cat "$tmp/err")"
tiny_with "$tmp/cfgs/exp.ini" "train = $tmp/data/train.txt" "val = $tmp/data/val.txt"
sed -i 's/^max_steps = .*/max_steps = 1.2e1/' "$tmp/cfgs/exp.ini"
"$bin" train --config "$tmp/cfgs/exp.ini" --set out_dir="$tmp/runs/exp" "${quiet[@]}" >/dev/null 2>"$tmp/err" &&
  [ "$(last_step "$tmp/runs/exp")" = 12 ] && ok || bad "max_steps = 1.2e1 in a file: $(cat "$tmp/err")"

# ---- 6. exit codes: a bad --set is a bad command line (2), a bad file value is the file's (1) ----
# expect_exit CODE "what" PATTERN CMD...: that exit code and one stderr line holding PATTERN
expect_exit() {
  local code=$1 what=$2; shift 2
  expect_error "$what" "$@"
  timeout -k 5 120 "${@:2}" >/dev/null 2>&1
  local rc=$?
  [ $rc -eq "$code" ] && ok || bad "$what: exit $rc, expected $code"
}
expect_exit 2 "--set max_steps=1.5" "--set: \[train\] max_steps: '1.5' is not an integer" \
  "$bin" train --config "$tmp/cfgs/abs.ini" --set max_steps=1.5
expect_exit 2 "--set max_steps=1e30" "--set: \[train\] max_steps: 1e30 is out of range \[1, 1000000000000\]" \
  "$bin" train --config "$tmp/cfgs/abs.ini" --set max_steps=1e30
expect_exit 2 "--set of an unknown key" "--set: unknown key 'bogus'" "$bin" eval --ckpt x --set bogus=1
expect_exit 2 "--set out of range" "batch_size: 0 is out of range" "$bin" bench --set batch_size=0
printf '[train]\nmax_steps = 1.5\n' >"$tmp/cfgs/half.ini"
expect_exit 1 "max_steps = 1.5 in a file" "half.ini:2: \[train\] max_steps: '1.5' is not an integer" \
  "$bin" train --config "$tmp/cfgs/half.ini"

# ---- 7. allowed but likely a slip: one note each, the run goes on ----
cores=$(getconf _NPROCESSORS_ONLN)
"$bin" train --config "$tmp/cfgs/abs.ini" --set threads=4096 --set warmup_steps=9 --set max_steps=3 \
  --set out_dir="$tmp/runs/notes" "${quiet[@]}" >/dev/null 2>"$tmp/err" || bad "the notes' run failed: $(cat "$tmp/err")"
[ "$(last_step "$tmp/runs/notes")" = 3 ] && ok || bad "the notes' run did not train"
[ "$(grep -c '^catchat: note: \[run\] threads = 4096 is more than the '"$cores"' cores of this machine' "$tmp/err")" = 1 ] &&
  ok || bad "no threads note: $(cat "$tmp/err")"
[ "$(grep -c '^catchat: note: \[train\] warmup_steps = 9 is not below max_steps = 3: the whole run is warmup' "$tmp/err")" = 1 ] &&
  ok || bad "no warmup note: $(cat "$tmp/err")"

finish
