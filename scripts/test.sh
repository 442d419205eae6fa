#!/usr/bin/env bash
# Every check CI runs: linters, type checks, then the whole test suite (lab tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
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
