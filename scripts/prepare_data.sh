#!/usr/bin/env bash
# Turn Debian's `fortunes` corpus into the default train/val text files.
#   scripts/prepare_data.sh [OUT_DIR]      (default: data/fortunes)
# Entries (separated by '%' lines) are split deterministically: every 20th
# entry goes to val.txt, the rest to train.txt, so the two never overlap.
set -euo pipefail
src=${FORTUNES_DIR:-/usr/share/games/fortunes}
out=${1:-data/fortunes}
if [ ! -f "$src/fortunes" ]; then
  echo "prepare_data: no fortunes corpus in $src: install it with 'apt-get install fortunes'" >&2
  exit 1
fi
mkdir -p "$out"
# Plain-text fortune files only (not the .dat indexes or .u8 links); ASCII art is not English text.
files=$(cd "$src" && ls | grep -v '\.' | grep -vx -e ascii-art -e art | sort)
tmp_train=$(mktemp "$out/.train.XXXXXX")
tmp_val=$(mktemp "$out/.val.XXXXXX")
trap 'rm -f "$tmp_train" "$tmp_val"' EXIT
# mktemp makes 0600 files; the corpus is ordinary data: 0666 less the umask (0644 usually).
chmod "$(printf '%o' $(( 0666 & ~0$(umask) )))" "$tmp_train" "$tmp_val"
(cd "$src" && cat $files) | awk -v train="$tmp_train" -v val="$tmp_val" '
  /^%$/ { if (entry != "") { n++; print entry > ((n % 20 == 0) ? val : train) } entry = ""; next }
  { entry = entry $0 "\n" }
  END { if (entry != "") { n++; print entry > ((n % 20 == 0) ? val : train) } }'
mv "$tmp_train" "$out/train.txt"
mv "$tmp_val" "$out/val.txt"
trap - EXIT
echo "prepare_data: $(wc -c < "$out/train.txt") bytes train, $(wc -c < "$out/val.txt") bytes val in $out"
