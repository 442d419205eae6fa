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
# Every fetch from Debian's archive is bounded: a silent server fails a try after 30 s, a failed
# try is retried at once (a retry put off for later can hang Debian 12's apt for good:
# docs/decisions/0076-apt-retries-at-once.md), and the index refresh and the downloads have a
# deadline. The install itself runs from the downloaded files.
APT_BOUNDS=(-o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30 -o Acquire::Retries=2
  -o Acquire::Retries::Delay=false)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! timeout 600 apt-get update -qq "${APT_BOUNDS[@]}" ||
    ! timeout 1200 apt-get install -y -qq --download-only --no-install-recommends "${APT_BOUNDS[@]}" \
      "${missing[@]}" >/dev/null; then
    echo "setup: could not fetch ${missing[*]} from Debian's archive in time; check the network or apt's proxy, then run setup again" >&2
    exit 3
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The lab runs its own apt-cacher-ng on loopback, forwarding to Debian only, and the tests start
  # their own Prometheus on loopback; the packaged services would listen on every interface.
  for service in apt-cacher-ng prometheus; do
    if [[ " ${missing[*]} " == *" $service "* ]] && [ -d /run/systemd/system ]; then
      systemctl disable --now "$service" >/dev/null 2>&1 || true
    fi
  done
fi

# Alertmanager for the alerting tests: bookworm's 0.25 refuses fields the chart's Alertmanager
# accepts (url_file, routing_key_file), so amtool and alertmanager come from Debian 13's package,
# fetched through a trixie source list kept in .tools/ (this machine's apt sources stay as they
# are) and unpacked there. It needs only libc >= 2.34. Every fetch is bounded.
ALERTMANAGER_SERIES=0.28
AM_DIR=.tools/alertmanager
if [ ! -x "$AM_DIR/usr/bin/amtool" ]; then
  echo "setup: fetching prometheus-alertmanager ${ALERTMANAGER_SERIES} from Debian 13 into $AM_DIR"
  rm -rf .tools/apt "$AM_DIR" && mkdir -p .tools/apt/lists/partial .tools/apt/debs
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    >.tools/apt/sources.list
  apt_private=(-o Dir::Etc::SourceList="$PWD/.tools/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o Dir::State::Lists="$PWD/.tools/apt/lists" "${APT_BOUNDS[@]}")
  if ! timeout 300 apt-get update -qq "${apt_private[@]}" ||
    ! (cd .tools/apt/debs && timeout 300 apt-get download -qq "${apt_private[@]}" prometheus-alertmanager 2>/dev/null); then
    echo "setup: could not fetch prometheus-alertmanager from deb.debian.org (trixie); the alerting tests need it" >&2
    exit 3
  fi
  deb=$(ls .tools/apt/debs/prometheus-alertmanager_*.deb)
  case "$(dpkg-deb -f "$deb" Version)" in
    "${ALERTMANAGER_SERIES}".*) ;;
    *) echo "setup: $deb is not Alertmanager ${ALERTMANAGER_SERIES}" >&2; exit 3 ;;
  esac
  rm -rf "$AM_DIR.partial" && dpkg-deb -x "$deb" "$AM_DIR.partial" && mv "$AM_DIR.partial" "$AM_DIR"
  rm -rf .tools/apt
fi
# Debian's build reads its notification templates from this fixed path, where its package
# would have put them.
AM_TEMPLATES=/usr/share/prometheus/alertmanager
for tmpl in default.tmpl email.tmpl; do
  if [ ! -e "$AM_TEMPLATES/$tmpl" ]; then
    mkdir -p "$AM_TEMPLATES" && cp "$AM_DIR$AM_TEMPLATES/$tmpl" "$AM_TEMPLATES/$tmpl"
  fi
done

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
