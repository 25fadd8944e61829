#!/usr/bin/env bash
# Install what catchat needs on a fresh Debian/Ubuntu machine (root or sudo):
# build libraries, the default corpus, and what the tests read our files with.
# The CUDA toolkit is expected at /usr/local/cuda (it builds without a GPU).
set -euo pipefail
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
pkgs=(libcriterion-dev libinih-dev libjansson-dev pkg-config fortunes clang python3-torch)
need=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Python readers of our files used by the tests (optional: those tests skip without them).
python3 -m pip install -q numpy safetensors tensorboard matplotlib >/dev/null 2>&1 \
  || echo "install_deps: pip install failed; the tfevents/interop tests will skip or use plain readers"
echo "install_deps: ok"
