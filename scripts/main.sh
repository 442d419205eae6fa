#!/usr/bin/env bash
# The main job on the embedded default: check the pinned versions and show them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/gpuinfra versions check
.venv/bin/gpuinfra versions show
