#!/usr/bin/env bash
# What a new user types: inline comments after every kind of value, section
# headers with text after them or blanks inside, an empty --prompt, and a
# seq_len whose buffers cannot fit in host memory.
#   tests/new_user_input.sh path/to/catchat
set -u
source "$(dirname "$0")/lib.sh" "$1"

mkdir -p "$tmp/d#1"
make_corpus "$tmp/d#1"

# '#' and ';' after a blank are comments for a path, a number and a choice;
# a '#' after any other character stays in the path; "[ train ]" is [train].
cat >"$tmp/commented.ini" <<EOF
# a run on generated text
[model]
d_model = 32   # narrow
n_layers = 1 ; one layer
n_heads = 2
ctx_window = 8
seq_len = 16
[ train ]
batch_size = 2	# a tab before this one
max_steps = 2 # short
eval_interval = 0
eval_batches = 1
[data]
train = $tmp/d#1/train.txt # my data
val = $tmp/d#1/val.txt ; held out
[run]   # where it runs
device = cpu # here
out_dir = $tmp/run#2 # where
EOF
"$bin" train --config "$tmp/commented.ini" >"$tmp/train.log" 2>&1 \
  || bad "inline comments: $(tail -1 "$tmp/train.log")"
[ -f "$tmp/run#2/checkpoint.safetensors" ] && ok || bad "no checkpoint in '$tmp/run#2'"
ls -d "$tmp"/*where* >/dev/null 2>&1 && bad "a folder named after the comment: $(ls -d "$tmp"/*where*)" || ok
grep -q '^step 2/2 ' "$tmp/train.log" && ok || bad "max_steps = 2 # short was not 2 steps"

# each kind of path alone, as a user reports it: the folder is not named
# after the comment, the data file is found
tiny=(--set train="$tmp/d#1/train.txt" --set val="$tmp/d#1/val.txt" --set device=cpu --set max_steps=1)
small='[model]\nd_model = 32\nn_heads = 2\nseq_len = 16\n[train]\nbatch_size = 2\n'
printf "$small[run]\nout_dir = %s # where\n" "$tmp/p1" >"$tmp/p1.ini"
"$bin" train --config "$tmp/p1.ini" "${tiny[@]}" >"$tmp/p1.log" 2>&1 || bad "out_dir # where: $(tail -1 "$tmp/p1.log")"
[ -d "$tmp/p1" ] && [ ! -e "$tmp/p1 # where" ] && ok || bad "out_dir = $tmp/p1 # where made: $(ls -d "$tmp"/p1*)"
printf "$small[data]\ntrain = %s # my data\nval = %s # held out\n" "$tmp/d#1/train.txt" "$tmp/d#1/val.txt" >"$tmp/p2.ini"
"$bin" train --config "$tmp/p2.ini" --set device=cpu --set max_steps=1 --set out_dir="$tmp/p2" >"$tmp/p2.log" 2>&1 \
  && ok || bad "train = ... # my data: $(tail -1 "$tmp/p2.log")"

# a header is '[name]' and nothing more than a comment after it (each file
# is a whole short run, so a reader that takes the header trains and exits 0)
printf '[model]\nd_model = 32\nn_heads = 2\nseq_len = 16\n[train]]\nbatch_size = 2\n' >"$tmp/h1.ini"
expect_error "[train]]" "h1.ini:5: malformed section header '\[train\]\]'" \
  "$bin" train --config "$tmp/h1.ini" "${tiny[@]}" --set out_dir="$tmp/h1"
printf '[model]\nd_model = 32\nn_heads = 2\nseq_len = 16\n[train] extra\nbatch_size = 2\n' >"$tmp/h2.ini"
expect_error "[train] extra" "h2.ini:5: malformed section header '\[train\] extra'" \
  "$bin" train --config "$tmp/h2.ini" "${tiny[@]}" --set out_dir="$tmp/h2"

# an empty prompt is a usage error: exit 2 and one line, as other bad arguments
printf '[model]\nd_model = 32\nn_heads = 2\nseq_len = 16\n[train]\nbatch_size = 2\n' >"$tmp/s.ini"
"$bin" train --config "$tmp/s.ini" "${tiny[@]}" --set out_dir="$tmp/s" >"$tmp/s.log" 2>&1 \
  || bad "tiny train for sample: $(tail -1 "$tmp/s.log")"
ckpt="$tmp/s/checkpoint.safetensors"
for args in "--prompt=" "--prompt-ids=,"; do
  "$bin" sample --ckpt "$ckpt" "$args" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q "usage\|see 'catchat sample --help'" "$tmp/err"; then
    bad "sample $args: exit $rc, stderr '$(cat "$tmp/err")' (expected exit 2, one usage line)"
  else ok; fi
done

# buffers past what the host can hold: refused before anything is allocated,
# naming the bytes and the keys that size them (a batch no host holds; the
# text is long enough for one window, which is checked first)
for i in 1 2 3 4; do cat "$tmp/d#1/train.txt"; done >"$tmp/long_train.txt"
cp "$tmp/long_train.txt" "$tmp/long_val.txt"
expect_error "seq_len = 100000" \
  "needs about [0-9.]* PiB of host memory for batch_size 1048576 x seq_len 100000 (.* a sequence at d_model 512, n_layers 3, vocab_size 256, n_heads 8 x ctx_window 128).*lower batch_size or seq_len" \
  "$bin" train --set seq_len=100000 --set batch_size=1048576 --set device=cpu \
  --set train="$tmp/long_train.txt" --set val="$tmp/long_val.txt" --set out_dir="$tmp/big"
[ -e "$tmp/big" ] && bad "the refused run created its out_dir" || ok

finish
