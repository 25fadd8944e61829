#!/usr/bin/env bash
# The generated reference pages match what the program prints now.
#   tests/docs_fresh.sh path/to/catchat
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$root/scripts/gen_docs.sh" "$1" "$tmp"
fail=0
for f in config.md $(cd "$tmp" && ls commands/*.md); do
  if ! cmp -s "$tmp/$f" "$root/docs/$f"; then echo "FAIL: docs/$f is out of date (run scripts/gen_docs.sh)"; fail=$((fail + 1)); fi
done
echo "$(( $(ls "$tmp/commands" | wc -l) + 1 - fail )) passed, $fail failed"
[ "$fail" -eq 0 ]
