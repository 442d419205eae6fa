#!/usr/bin/env bash
# Install what gpuinfra needs on a Debian 12 machine, as root: system packages, then the
# project's virtual environment at .venv/ from the lock file. Safe to run again: it only
# installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# podman, runc and debootstrap run the lab hosts; apt-cacher-ng caches their Debian packages;
# dpkg-dev and gnupg build and sign the stand-in toolkit repository; prometheus brings promtool
# for the alert rules; git drives `gpuinfra diff`; python3-venv creates the virtual environment.
APT_PACKAGES=(git podman runc debootstrap apt-cacher-ng dpkg-dev gnupg prometheus python3-venv
  ca-certificates openssh-client)
UV_VERSION=0.13.9

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The lab runs its own apt-cacher-ng on loopback, forwarding to Debian only; the packaged
  # service would listen on every interface and forward anywhere.
  if [[ " ${missing[*]} " == *" apt-cacher-ng "* ]] && [ -d /run/systemd/system ]; then
    systemctl disable --now apt-cacher-ng >/dev/null 2>&1 || true
  fi
fi

if [ ! -x .venv/bin/uv ]; then
  echo "setup: creating .venv with uv ${UV_VERSION}"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "uv==${UV_VERSION}"
fi
# The lock file pins every package; --frozen refuses to resolve anew. Bytecode is compiled at
# install (uv does not by default): CI runners and containers often run with
# PYTHONDONTWRITEBYTECODE=1, and then every command would compile pulumi_aws and the rest again
# (about 4 s of each plan). Compiling checks every installed file, about 1 s even with nothing
# to do, so a re-run that finds the environment in sync with the lock skips uv; the stamp
# marks an environment whose bytecode was compiled.
export UV_PYTHON_DOWNLOADS=never
if [ ! -e .venv/.bytecode-compiled ] || ! .venv/bin/uv sync --frozen --check --quiet 2>/dev/null; then
  .venv/bin/uv sync --frozen --quiet --compile-bytecode
  touch .venv/.bytecode-compiled
fi
# checkov, the scanner the tests run over the Kubernetes objects of every stack and site, lives in
# an environment of its own (its pins conflict with the project's), installed from its hashed
# lock; the stamp holds the lock's checksum, so a changed lock reinstalls it.
CHECKOV_LOCK=scripts/checkov/requirements.txt
CHECKOV_ENV=.tools/checkov
checkov_sum=$(sha256sum "$CHECKOV_LOCK" | cut -d' ' -f1)
if [ "$(cat "$CHECKOV_ENV/.lock-sha256" 2>/dev/null)" != "$checkov_sum" ]; then
  echo "setup: installing checkov into $CHECKOV_ENV"
  rm -rf "$CHECKOV_ENV"
  .venv/bin/uv venv --quiet --python "$(command -v python3)" "$CHECKOV_ENV"
  VIRTUAL_ENV="$CHECKOV_ENV" .venv/bin/uv pip install --quiet --require-hashes --compile-bytecode \
    -r "$CHECKOV_LOCK"
  echo "$checkov_sum" > "$CHECKOV_ENV/.lock-sha256"
fi
# The project's own modules are installed editable, so uv compiles none of them. A .pyc whose
# source has changed since is ignored by Python (it compares mtime and size), so this is safe
# while they are being edited; it only compiles what changed since the last run.
.venv/bin/python -m compileall -q gpuinfra components stacks policies
