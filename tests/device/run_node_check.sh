#!/usr/bin/env bash
# Run gpu_node_check for real on a GPU host without internet or Ansible: ansible-core comes from
# wheels carried in tests/device/wheels/, the driver is adopted (preinstalled) and must be the
# build the host runs. Results go to $OUT: node-check.json (the report), check-playbook.log, and
# the raw nvidia-smi outputs the check parsed. Run from the repository root.
#
#   OUT=/tmp/out bash tests/device/run_node_check.sh
#
# Environment: OUT (required), GPU_COUNT (default 1), MIG_MODE (enabled|disabled|any, default
# disabled), PYTHON (default python3).
set -euo pipefail

: "${OUT:?set OUT to the folder that receives the results}"
GPU_COUNT="${GPU_COUNT:-1}"
MIG_MODE="${MIG_MODE:-disabled}"
PYTHON="${PYTHON:-python3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WHEELS="$ROOT/tests/device/wheels"
WORK="$(mktemp -d)"
REPORT="$WORK/node-check.json"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
cd "$ROOT"

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$OUT/run.log"; }

[ -f "$WHEELS"/ansible_core-*.whl ] || { log "no ansible-core wheel in $WHEELS"; exit 2; }
export PATH="/usr/local/nvidia/bin:$PATH"
SMI="$(command -v nvidia-smi || true)"
[ -n "$SMI" ] || { log "nvidia-smi not found in PATH or /usr/local/nvidia/bin"; exit 2; }

log "collecting raw outputs with $SMI"
timeout 60 "$SMI" > "$OUT/nvidia-smi.txt" 2>&1 || true
timeout 60 "$SMI" -q -x > "$OUT/nvidia-smi-q.xml" 2>&1 || true
timeout 60 "$SMI" topo -m > "$OUT/topo.txt" 2>&1 || true
cat /proc/driver/nvidia/version > "$OUT/proc-version.txt" 2>&1 || true
DRIVER="$(timeout 60 "$SMI" --query-gpu=driver_version --format=csv,noheader | head -n1 | tr -d ' ')"
log "host runs driver $DRIVER"

# Ubuntu's python3 lacks ensurepip unless python3-venv is installed: fall back to the pip wheel.
VENV="$WORK/venv"
if "$PYTHON" -m venv "$VENV" 2>/dev/null; then
  PIP=("$VENV/bin/python" -m pip)
else
  "$PYTHON" -m venv --without-pip "$VENV"
  PIP=("$VENV/bin/python" "$(ls "$WHEELS"/pip-*.whl | head -n1)/pip")
fi
log "installing ansible-core from wheels"
"${PIP[@]}" install --quiet --no-index --find-links "$WHEELS" ansible-core 2>&1 | tee -a "$OUT/run.log"

export LC_ALL=C.UTF-8 ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1
export ANSIBLE_LOCAL_TEMP="$WORK/ansible-local"
BECOME=true
[ "$(id -u)" -eq 0 ] && BECOME=false

log "running playbooks/check.yml"
set +e
timeout 240 "$VENV/bin/ansible-playbook" -i localhost, -c local playbooks/check.yml \
  -e gpuinfra_check_hosts=all \
  -e ansible_python_interpreter="$VENV/bin/python" \
  -e ansible_become="$BECOME" \
  -e nvidia_driver_source=preinstalled \
  -e gpu_node_check_expected_driver="$DRIVER" \
  -e "{\"gpu_node_check_expected_gpu_count\": $GPU_COUNT}" \
  -e gpu_node_check_mig_mode="$MIG_MODE" \
  -e '{"gpu_node_check_container_runtimes": []}' \
  -e gpu_node_check_report_path="$REPORT" \
  > "$OUT/check-playbook.log" 2>&1
rc=$?
set -e
tail -n 30 "$OUT/check-playbook.log"
if [ -f "$REPORT" ]; then
  cp "$REPORT" "$OUT/node-check.json"
  log "report copied to $OUT/node-check.json"
else
  log "no report was written"
fi
log "ansible-playbook exited $rc"
exit "$rc"
