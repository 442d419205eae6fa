#!/usr/bin/env bash
# The main job on the embedded default, the local lab: check the pinned versions, bring up two
# lab hosts, converge playbooks/nodes.yml on them with live progress (ending with the node check
# report), then print the offline plan of the lab site.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/gpuinfra versions check
.venv/bin/gpuinfra lab up --hosts 2
.venv/bin/gpuinfra converge --playbook nodes.yml
.venv/bin/gpuinfra plan --site inventory/lab
