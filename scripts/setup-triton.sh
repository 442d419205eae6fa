#!/usr/bin/env bash
# The local Triton the tests and `gpuinfra triton tune` run: .triton-venv/ with the pinned server
# (nvidia-pytriton's tritonserver 2.51.0) and perf_analyzer (tritonclient 2.51.0), built from
# Debian's python3.11 so the python backend's stub finds libpython3.11.so.1.0. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.triton-venv
REQUIREMENTS=scripts/triton/requirements.txt
PYTHON=/usr/bin/python3.11
[ -x .venv/bin/uv ] || bash scripts/setup.sh
if [ ! -x "$PYTHON" ]; then
  echo "setup-triton: $PYTHON is missing (Debian's python3.11)" >&2
  exit 1
fi
export UV_PYTHON_DOWNLOADS=never
if [ ! -x "$VENV/bin/python" ]; then
  .venv/bin/uv venv --quiet --python "$PYTHON" "$VENV"
fi
stamp="$VENV/.requirements"
if ! cmp -s "$REQUIREMENTS" "$stamp"; then
  echo "setup-triton: installing the pinned Triton server and perf_analyzer into $VENV"
  VIRTUAL_ENV="$PWD/$VENV" .venv/bin/uv pip sync --quiet "$REQUIREMENTS"
  cp "$REQUIREMENTS" "$stamp"
fi
# perf_analyzer links libb64.so.0d and libcudart.so.12; the pytriton wheel bundles both under
# hashed names. Links with the sonames, in a directory of their own.
libs="$VENV/lib/python3.11/site-packages/nvidia_pytriton.libs"
mkdir -p "$VENV/perf-libs"
for pair in "libb64.so.0d:libb64-*.so.0d" "libcudart.so.12:libcudart-*.so.12*"; do
  soname=${pair%%:*}
  # shellcheck disable=SC2086  # the glob is meant to expand
  target=$(ls $libs/${pair#*:} | head -n 1)
  ln -sfn "$PWD/$target" "$VENV/perf-libs/$soname"
done
