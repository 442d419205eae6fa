#!/usr/bin/env bash
# The main job: check the pinned versions, bring up the two-host lab and converge
# playbooks/nodes.yml on it with live progress, ending with the node check report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/gpuinfra versions check
.venv/bin/gpuinfra lab up --hosts 2
.venv/bin/gpuinfra converge --playbook nodes.yml
