#!/usr/bin/env bash
# The main job on the embedded default, the local lab: check the pinned versions, bring up two
# lab hosts, converge playbooks/nodes.yml on them with live progress (ending with the node check
# report), print the offline plan of the lab site, then what to do next.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/gpuinfra versions check
.venv/bin/gpuinfra lab up --hosts 2
.venv/bin/gpuinfra converge --playbook nodes.yml
.venv/bin/gpuinfra plan --site inventory/lab
.venv/bin/gpuinfra lab status
cat <<'NEXT'

Next steps, from this directory:
  ssh -i .lab/gpuinfra-lab/id_ed25519 -p 2201 root@127.0.0.1       log in to the first lab host
  .venv/bin/gpuinfra converge --playbook check.yml                   the node check alone, again
  .venv/bin/gpuinfra converge --check                                what a converge would change (nothing)
  .venv/bin/gpuinfra converge                                        converge again: changed=0
  .venv/bin/gpuinfra lab down                                        remove the lab hosts
  bash scripts/test.sh                                               every linter and test CI runs
NEXT
