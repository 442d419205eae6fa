#!/usr/bin/env bash
# Every check CI runs: linters, type checks, then the whole test suite (lab tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The real Triton server and perf_analyzer the serving tests run (.triton-venv/); here their
# absence fails those tests instead of skipping them.
bash scripts/setup-triton.sh
export GPUINFRA_REQUIRE_TRITON=1
export PATH="$PWD/.venv/bin:$PATH"

echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy
echo "== yamllint"; yamllint --strict .
if [ -d roles ]; then
  echo "== ansible-lint"; ansible-lint --profile production --offline
fi
echo "== gpuinfra versions check"; gpuinfra versions check

echo "== pytest"
set +e
pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$status"
