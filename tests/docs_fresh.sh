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
checks=2
# configs/default.ini says it lists every key: every key of the reference is there, in its section
missing=$(python3 - "$root" <<'PY'
import re, sys
root = sys.argv[1]
have, cur = set(), None
for line in open(f"{root}/configs/default.ini"):
    m = re.match(r"\s*\[\s*(\w+)\s*\]", line)
    if m: cur = m.group(1); continue
    m = re.match(r"\s*(\w+)\s*=", line)
    if m and cur: have.add((cur, m.group(1)))
sec, missing = None, []
for line in open(f"{root}/docs/config.md"):
    m = re.match(r"## \[(\w+)\]", line)
    if m: sec = m.group(1); continue
    m = re.match(r"\| `(\w+)` \|", line)
    if m and sec and (sec, m.group(1)) not in have: missing.append(f"[{sec}] {m.group(1)}")
print(" ".join(missing))
PY
)
if [ -n "$missing" ]; then echo "FAIL: configs/default.ini lacks $missing"; fail=$((fail + 1)); fi
# a build command a user copies bounds its jobs (a bare -j starts every compiler at once: 64 on 2 cores)
bare=$(grep -n -E 'cmake --build [^ ]+ -j( |$|\))' "$root/README.md" "$root"/docs/*.md | grep -v -E -- '-j [0-9"$]' || true)
if [ -n "$bare" ]; then echo "FAIL: a cmake --build with a bare -j: $bare"; fail=$((fail + 1)); fi
echo "$(( $(ls "$tmp/commands" | wc -l) + 1 + checks - fail )) passed, $fail failed"
[ "$fail" -eq 0 ]
