#!/usr/bin/env bash
# The rules docs/architecture.md ("Rules the code keeps") sets for the code's
# shape, checked on the sources: no CUDA event is recorded or waited for in
# src/ outside the step's scheduler (every dependency of the step is a
# declared access: src/gpu/scheduler_gpu.c orders them); every file of src/
# at most 600 lines and src/trainer.c, the training loop, under 450; no
# function outside the kernels over 120 lines (from its opening brace at
# column 0 to its closing one).
#   tests/code_rules.sh [REPO_ROOT]
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 1
fail=0
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

events=$(grep -rn --include='*.c' --include='*.h' --include='*.cu' -E 'cudaEventRecord|cudaStreamWaitEvent' src kernels |
    grep -v '^src/gpu/scheduler_gpu.c:')
[ -z "$events" ] || bad "CUDA events outside src/gpu/scheduler_gpu.c:
$events"

for f in src/*.c src/*/*.c; do
    n=$(wc -l < "$f")
    [ "$n" -le 600 ] || bad "$f has $n lines (at most 600)"
done
n=$(wc -l < src/trainer.c)
[ "$n" -lt 450 ] || bad "src/trainer.c has $n lines (the training loop: under 450)"

long=$(python3 - src/*.c src/*/*.c bench/*.c <<'PY'
import re, sys
for path in sys.argv[1:]:
    lines = open(path, errors="replace").read().split("\n")
    start = None
    for i, line in enumerate(lines):
        if line == "{":
            j = i - 1
            while j > 0 and "(" not in lines[j]:
                j -= 1
            m = re.search(r"(\w+)\s*\(", lines[j])
            start = (i, m.group(1) if m else "?")
        elif line.startswith("}") and start:
            if i - start[0] + 1 > 120:
                print(f"{path}:{start[0] + 1}: {start[1]} ({i - start[0] + 1} lines)")
            start = None
PY
)
[ -z "$long" ] || bad "functions over 120 lines:
$long"

[ "$fail" = 0 ] && echo "code rules: kept" || exit 1
