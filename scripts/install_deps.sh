#!/usr/bin/env bash
# Install what catchat needs on a fresh Debian/Ubuntu machine (root or sudo):
# build libraries, the default corpus, and what the tests read our files with.
# The CUDA toolkit is expected at /usr/local/cuda (it builds without a GPU).
#
# The Python side lives in ONE interpreter: a venv at .venv in the repository
# root, made from Debian's /usr/bin/python3 with --system-site-packages (so
# Debian's python3-torch imports from it), with numpy, safetensors, tensorboard,
# matplotlib and tokenizers (scripts/prepare.py's BPE) pip-installed into it.
# The docs and the tests run the Python scripts with .venv/bin/python, whatever
# `python3` comes first on PATH.
# CATCHAT_VENV=DIR puts the venv elsewhere (the tests use it). Run again, it
# keeps what is there and installs only what is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${CATCHAT_VENV:-$root/.venv}
base=/usr/bin/python3  # the interpreter Debian's python3-* packages install for
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
pkgs=(libcriterion-dev libinih-dev libjansson-dev libxxhash-dev libpcre2-dev pkg-config fortunes clang python3-torch python3-venv)
need=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The venv: kept when it is one on $base that sees the system site packages,
# made (again) otherwise. python3-venv gives it pip (ensurepip), offline.
venv_ok() {
  [ -x "$venv/bin/python" ] && grep -qx 'include-system-site-packages = true' "$venv/pyvenv.cfg" 2>/dev/null &&
    [ "$(realpath "$("$venv/bin/python" -c 'import sys; print(sys._base_executable)' 2>/dev/null)")" = \
      "$(realpath "$base")" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1
}
if ! venv_ok; then
  echo "install_deps: making the Python venv $venv (on $base, with its site packages)"
  "$base" -m venv --clear --system-site-packages "$venv"
fi
[ -e "$venv/.gitignore" ] || echo '*' >"$venv/.gitignore"  # not part of the repository

# Python readers of our files used by the tests, and Hugging Face's tokenizers for
# prepare.py's BPE (optional: those tests skip without them, and prepare.py says
# what to install).
# numpy < 2: Debian's torch is built against numpy 1.
mods="import numpy, safetensors, tensorboard, matplotlib, tokenizers"
if ! "$venv/bin/python" -c "$mods" >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --retries 2 --timeout 20 \
    "numpy<2" safetensors tensorboard matplotlib tokenizers >/dev/null 2>&1 \
    || echo "install_deps: pip install into $venv failed (offline?); the tfevents/interop/BPE tests will skip or use plain readers"
fi
echo "install_deps: ok (Python: $venv/bin/python)"
