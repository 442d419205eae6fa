"""A stand-in for NVIDIA's container toolkit apt repository, served on loopback.

NVIDIA's repositories are out of reach from the lab, and an air-gapped site points the
``nvidia_container_toolkit`` role at a mirror anyway. This module builds that mirror: packages
named and versioned exactly as versions.yaml pins NVIDIA's, a flat repository (``Packages``,
``Release``, ``InRelease`` signed with a stand-in key, the key exported as ``gpgkey``) and an
HTTP server bound to 127.0.0.1.

The packages carry small stand-ins for the binaries the role calls: ``nvidia-ctk`` writes a real
containerd drop-in (or merges Docker's daemon.json) and a CDI spec, and
``nvidia-container-runtime`` hands over to runc, so containerd accepts the configuration as it
would NVIDIA's.

``build_docker`` builds the same kind of stand-in for Docker's Debian repository (a suite and its
``stable`` component): ``containerd.io`` with Docker's name, pinned version, relations and
CRI-disabling ``config.toml``, carrying Debian's containerd and runc binaries.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import formatdate
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpuinfra import versions as versions_mod
from gpuinfra.errors import ToolError

KEY_FILE = "gpgkey"
_KEY_UID = "gpuinfra stand-in repository <lab@gpuinfra.invalid>"

_NVIDIA_CTK = r"""#!/bin/sh
# Stand-in for NVIDIA's nvidia-ctk: the subcommands the nvidia_container_toolkit role calls.
set -eu
VERSION="@VERSION@"

usage() { echo "usage: nvidia-ctk [--version] runtime configure|cdi generate ..." >&2; exit 2; }

write_if_changed() {  # path, content on stdin; leaves an identical file untouched
  tmp="$(mktemp)"
  cat >"$tmp"
  if [ -f "$1" ] && cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 0; fi
  mkdir -p "$(dirname "$1")"
  mv "$tmp" "$1"
  chmod 0644 "$1"
  echo "Wrote updated config to $1"
}

containerd_dropin() {  # default-runtime flag
  echo 'version = 2'
  echo
  echo '[plugins]'
  echo '  [plugins."io.containerd.grpc.v1.cri"]'
  echo '    [plugins."io.containerd.grpc.v1.cri".containerd]'
  [ "$1" = true ] && echo '      default_runtime_name = "nvidia"'
  echo '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]'
  echo '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]'
  echo '          privileged_without_host_devices = false'
  echo '          runtime_type = "io.containerd.runc.v2"'
  echo '          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]'
  echo '            BinaryName = "/usr/bin/nvidia-container-runtime"'
}

docker_merge() {  # path, default-runtime flag: merge into an existing daemon.json
  python3 - "$1" "$2" <<'PY'
import json, os, sys
path, default = sys.argv[1], sys.argv[2] == "true"
config = {}
if os.path.exists(path) and os.path.getsize(path):
    with open(path) as f:
        config = json.load(f)
config.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
if default:
    config["default-runtime"] = "nvidia"
print(json.dumps(config, indent=4, sort_keys=True))
PY
}

runtime_configure() {
  runtime="" config="" default=false
  for arg in "$@"; do
    case "$arg" in
      --runtime=*) runtime="${arg#*=}" ;;
      --config=*) config="${arg#*=}" ;;
      --set-as-default|--set-as-default=true) default=true ;;
      --set-as-default=false) default=false ;;
      *) echo "nvidia-ctk runtime configure: unsupported flag $arg" >&2; exit 2 ;;
    esac
  done
  case "$runtime" in
    containerd)
      containerd_dropin "$default" | write_if_changed "${config:-/etc/containerd/conf.d/99-nvidia.toml}" ;;
    docker)
      config="${config:-/etc/docker/daemon.json}"
      docker_merge "$config" "$default" | write_if_changed "$config" ;;
    *) echo "nvidia-ctk runtime configure: unsupported runtime '$runtime'" >&2; exit 2 ;;
  esac
}

cdi_generate() {
  output=""
  for arg in "$@"; do
    case "$arg" in
      --output=*) output="${arg#*=}" ;;
      *) ;;
    esac
  done
  [ -n "$output" ] || { echo "nvidia-ctk cdi generate: --output is required" >&2; exit 2; }
  # No GPU is visible here, so the spec names the kind and no devices.
  printf '%s\n' '---' 'cdiVersion: 0.5.0' 'kind: nvidia.com/gpu' 'devices: []' \
    'containerEdits: {}' | write_if_changed "$output"
}

case "${1:-}" in
  --version|-v) printf 'NVIDIA Container Toolkit CLI version %s\ncommit: stand-in\n' "$VERSION" ;;
  runtime) [ "${2:-}" = configure ] || usage; shift 2; runtime_configure "$@" ;;
  cdi) [ "${2:-}" = generate ] || usage; shift 2; cdi_generate "$@" ;;
  *) usage ;;
esac
"""

_RUNTIME = """#!/bin/sh
# Stand-in for nvidia-container-runtime: no GPU to inject, so containers run under plain runc.
exec runc "$@"
"""

_CONTAINER_CLI = """#!/bin/sh
# Stand-in for nvidia-container-cli: reports its version, finds no GPU.
case "${1:-}" in
  --version|-V) printf 'cli-version: %s\\nlib-version: %s\\n' "@VERSION@" "@VERSION@" ;;
  *) echo "nvidia-container-cli: initialization error: nvml error: driver not loaded" >&2; exit 1 ;;
esac
"""


@dataclass(frozen=True)
class StandIn:
    """One package: its name, what it depends on, and the files it ships."""

    name: str
    description: str
    depends: tuple[str, ...]
    files: dict[str, str]


def stand_ins(version: str, package_version: str) -> list[StandIn]:
    """NVIDIA's four toolkit packages with their real names and inter-package dependencies."""

    def pinned(name: str) -> str:
        return f"{name} (= {package_version})"

    return [
        StandIn(
            "libnvidia-container1",
            "NVIDIA container runtime library (stand-in)",
            (),
            {"usr/share/doc/libnvidia-container1/VERSION": f"{version}\n"},
        ),
        StandIn(
            "libnvidia-container-tools",
            "NVIDIA container runtime library, command-line tools (stand-in)",
            (pinned("libnvidia-container1"),),
            {"usr/bin/nvidia-container-cli": _CONTAINER_CLI.replace("@VERSION@", version)},
        ),
        StandIn(
            "nvidia-container-toolkit-base",
            "NVIDIA Container Toolkit base: nvidia-ctk (stand-in)",
            (),
            {"usr/bin/nvidia-ctk": _NVIDIA_CTK.replace("@VERSION@", version)},
        ),
        StandIn(
            "nvidia-container-toolkit",
            "NVIDIA Container Toolkit: runtime wrapper (stand-in)",
            (pinned("nvidia-container-toolkit-base"), pinned("libnvidia-container-tools")),
            {"usr/bin/nvidia-container-runtime": _RUNTIME},
        ),
    ]


@dataclass(frozen=True)
class Repository:
    """A built flat repository: its directory and the packages it holds."""

    path: Path
    packages: tuple[str, ...]
    package_version: str
    # Of the key that signs it: what the lab's site pins.
    fingerprint: str

    @property
    def key_file(self) -> Path:
        return self.path / KEY_FILE


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(cmd, check=True, capture_output=True, **kwargs)
    except FileNotFoundError:
        raise ToolError(f"{cmd[0]} is not installed; run scripts/setup.sh") from None
    except subprocess.CalledProcessError as exc:
        detail = exc.stderr.decode(errors="replace").strip().splitlines()
        raise ToolError(
            f"{' '.join(cmd[:2])} failed: {detail[-1] if detail else exc.returncode}"
        ) from None


def _build_deb(pkg: StandIn, package_version: str, out: Path, work: Path) -> Path:
    root = work / pkg.name
    (root / "DEBIAN").mkdir(parents=True)
    for rel, content in pkg.files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(0o755 if rel.startswith("usr/bin/") else 0o644)
    control = [
        f"Package: {pkg.name}",
        f"Version: {package_version}",
        "Architecture: amd64",
        "Maintainer: gpuinfra <lab@gpuinfra.invalid>",
        "Section: utils",
        "Priority: optional",
    ]
    if pkg.depends:
        control.append(f"Depends: {', '.join(pkg.depends)}")
    control.append(f"Description: {pkg.description}")
    (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    deb = out / f"{pkg.name}_{package_version}_amd64.deb"
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)])
    return deb


def _write_index(root: Path, pool: str, index: Path) -> None:
    """Packages and Packages.gz in ``index`` for the .debs under ``pool`` (relative to ``root``,
    as the index's Filename fields name them)."""
    scanned = _run(["dpkg-scanpackages", "--multiversion", pool], cwd=root).stdout
    index.mkdir(parents=True, exist_ok=True)
    (index / "Packages").write_bytes(scanned)
    (index / "Packages.gz").write_bytes(gzip.compress(scanned, mtime=0))


def _write_release(dist: Path, index: Path, header: list[str]) -> None:
    """``dist``/Release: the header, then the sizes and digests of ``index``'s Packages files by
    their path under ``dist``."""
    lines = [*header, f"Date: {formatdate(usegmt=True)}", "Architectures: amd64"]
    files = [index / "Packages", index / "Packages.gz"]
    for field, algo in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{field}:")
        for file in files:
            data = file.read_bytes()
            name = file.relative_to(dist).as_posix()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data)} {name}")
    (dist / "Release").write_text("\n".join(lines) + "\n")


# The stand-in key outlives any lab: a lab's site pins its fingerprint, and a key that expired
# under a running lab would make apt refuse the repository while the pin still matched. It is
# made once per key directory and kept; within KEY_RENEW_DAYS of its expiry a new one is made,
# and the lab's site then pins the new fingerprint (the role writes the keyring again).
KEY_LIFETIME = "2y"
KEY_RENEW_DAYS = 30


def _gpg(home: Path) -> list[str]:
    return [
        *("gpg", "--batch", "--quiet", "--homedir", str(home), "--no-autostart"),
        *("--pinentry-mode", "loopback"),
    ]


def _key_expiry(home: Path) -> float | None:
    """When the stand-in key in ``home`` expires (epoch seconds), or None when there is none."""
    if not (home / "pubring.kbx").exists():
        return None
    # Which secret keys there are is the agent's to say.
    _start_agent(home)
    listed = subprocess.run(
        [*_gpg(home), "--with-colons", "--list-secret-keys", _KEY_UID],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in listed.stdout.splitlines():
        fields = line.split(":")
        if fields[0] == "sec" and fields[1] not in ("e", "r", "d"):
            return float(fields[6]) if fields[6] else float("inf")
    return None


def signing_key(home: Path) -> Path:
    """A gpg home holding a valid stand-in signing key, made when missing or about to expire."""
    expiry = _key_expiry(home)
    if expiry is None or expiry - time.time() < KEY_RENEW_DAYS * 86400:
        if home.exists():
            # The old home's agent keeps its socket, whose path depends only on the home's:
            # a key made in a new home at that path would otherwise reach a dying agent.
            _stop_agent(home)
            shutil.rmtree(home)
        home.mkdir(parents=True, mode=0o700)
        _start_agent(home)
        gen = [*_gpg(home), "--passphrase", "", "--quick-gen-key", _KEY_UID, "ed25519", "sign"]
        _run([*gen, KEY_LIFETIME])
    return home


def _start_agent(home: Path) -> None:
    """Start the home's gpg-agent, unless one runs, before the first gpg call that needs it.

    gpg would start one on demand, but waits five seconds for it and then gives up ("no agent
    running"), as on a loaded machine; so does ``gpgconf --launch``, through the same wait.
    ``gpg-agent --daemon`` returns once its socket listens, however long that takes, and gpg
    is told never to start one itself (``--no-autostart``).
    """
    listed = _run(["gpgconf", "--homedir", str(home), "--list-dirs", "agent-socket"])
    with socket.socket(socket.AF_UNIX) as agent, contextlib.suppress(OSError):
        # One answers here already (an earlier build's): gpg reaches it the same way.
        agent.connect(listed.stdout.decode().strip())
        return
    # The agent keeps what it inherits for its life: no pipe, which would hold the call open.
    with tempfile.TemporaryFile() as log:
        try:
            started = subprocess.run(
                ["gpg-agent", "--homedir", str(home), "--daemon"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                check=False,
            )
        except FileNotFoundError:
            raise ToolError("gpg-agent is not installed; run scripts/setup.sh") from None
        log.seek(0)
        said = log.read().decode(errors="replace").strip().splitlines()
    if started.returncode != 0:
        raise ToolError(f"gpg-agent --daemon failed: {said[-1] if said else started.returncode}")


def _stop_agent(home: Path) -> None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(
            ["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"],
            capture_output=True,
            check=False,
            timeout=10,
        )


def fingerprint(key_file: Path) -> str:
    """The fingerprint of the one primary key in an exported key file."""
    with tempfile.TemporaryDirectory(prefix="gpuinfra-gpg-") as home:
        shown = _run([*_gpg(Path(home)), "--with-colons", "--show-keys", str(key_file)])
    fingerprints = [
        line.split(":")[9] for line in shown.stdout.decode().splitlines() if line.startswith("fpr:")
    ]
    # The first fpr line follows the primary key (pub); later ones belong to subkeys.
    return fingerprints[0]


def _sign(repo: Path, home: Path) -> None:
    gpg = _gpg(home)
    _run([*gpg, "--armor", "--output", str(repo / KEY_FILE), "--export", _KEY_UID])
    _run(
        [
            *gpg,
            "--local-user",
            _KEY_UID,
            "--clearsign",
            "--output",
            str(repo / "InRelease"),
            str(repo / "Release"),
        ]
    )
    _run(
        [
            *gpg,
            "--local-user",
            _KEY_UID,
            "--armor",
            "--detach-sign",
            "--output",
            str(repo / "Release.gpg"),
            str(repo / "Release"),
        ]
    )


def build(
    dest: Path, versions: versions_mod.Versions | None = None, key_home: Path | None = None
) -> Repository:
    """Build the signed flat repository of the pinned toolkit packages into ``dest``.

    The signing key is kept in ``key_home`` (default: ``<dest>.key`` beside it) and reused by
    the next build there, so a rebuilt repository keeps the fingerprint its site pins.
    """
    pins = versions or versions_mod.pinned()
    toolkit = pins.nvidia_container_toolkit
    package_version = toolkit.source.package_version or f"{toolkit.version}-1"
    packages = stand_ins(toolkit.version, package_version)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="gpuinfra-debs-") as work:
        for pkg in packages:
            _build_deb(pkg, package_version, dest, Path(work))
    _write_index(dest, ".", dest)
    _write_release(
        dest, dest, ["Origin: gpuinfra", "Label: gpuinfra stand-in for NVIDIA container toolkit"]
    )
    _sign(dest, signing_key(key_home or dest.with_name(dest.name + ".key")))
    return Repository(
        dest, tuple(p.name for p in packages), package_version, fingerprint(dest / KEY_FILE)
    )


# --- a stand-in for Docker's Debian repository, serving containerd.io -----------------------

# Where Docker's repository keeps its key (https://download.docker.com/linux/debian/gpg).
DOCKER_KEY_FILE = "gpg"
DOCKER_COMPONENT = "stable"
# What Docker's containerd.io puts at /etc/containerd/config.toml, in substance: a file for
# Docker, which needs no CRI. A Kubernetes node does; the role must enable it.
CONTAINERD_IO_CONFIG = """#   Stand-in for the containerd.io package's configuration: the CRI plugin is disabled.
disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#state = "/run/containerd"
"""
# Docker's package starts containerd on install, with the file above.
_CONTAINERD_IO_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
  systemctl enable containerd.service >/dev/null 2>&1 || true
  systemctl restart containerd.service >/dev/null 2>&1 || true
fi
"""


def debian_debs(dest: Path, packages: list[str]) -> list[Path]:
    """Debian's own builds of ``packages`` (``name`` or ``name=version``), fetched into ``dest``
    with this machine's apt: the binaries the containerd.io stand-in carries."""
    dest.mkdir(parents=True, exist_ok=True)
    _run(["apt-get", "download", "-q", *packages], cwd=dest)
    return sorted(dest.glob("*.deb"))


def _containerd_io_deb(debs: list[Path], package_version: str, out: Path, work: Path) -> Path:
    """containerd.io as Docker names and relates it: Debian's containerd and runc binaries in
    one package that conflicts with, replaces and provides both, with Docker's config.toml."""
    root = work / "containerd.io"
    for deb in debs:
        _run(["dpkg-deb", "-x", str(deb), str(root)])
    config = root / "etc" / "containerd" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(CONTAINERD_IO_CONFIG)
    meta = root / "DEBIAN"
    meta.mkdir()
    (meta / "control").write_text(
        "\n".join(
            [
                "Package: containerd.io",
                f"Version: {package_version}",
                "Architecture: amd64",
                "Maintainer: gpuinfra <lab@gpuinfra.invalid>",
                "Section: admin",
                "Priority: optional",
                "Depends: libseccomp2",
                "Conflicts: containerd, runc",
                "Replaces: containerd, runc",
                "Provides: containerd, runc",
                "Description: An open and reliable container runtime (stand-in)",
            ]
        )
        + "\n"
    )
    (meta / "conffiles").write_text("/etc/containerd/config.toml\n")
    (meta / "postinst").write_text(_CONTAINERD_IO_POSTINST)
    (meta / "postinst").chmod(0o755)
    deb = out / f"containerd.io_{package_version}_amd64.deb"
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)])
    return deb


def build_docker(
    dest: Path,
    debs: list[Path],
    versions: versions_mod.Versions | None = None,
    key_home: Path | None = None,
    suite: str = "bookworm",
) -> Repository:
    """Build a signed stand-in of Docker's Debian repository into ``dest``: suite ``suite``,
    component stable, and containerd.io at the build versions.yaml pins for that suite
    (``containerd_docker``), made of ``debs`` (see ``debian_debs``). The key is at ``gpg``."""
    entry = (versions or versions_mod.pinned()).containerd_docker
    if suite == entry.source.suite:
        package_version = entry.source.package_version or entry.version
    elif suite in entry.releases:
        package_version = entry.releases[suite].package_version
    else:
        raise ToolError(f"versions.yaml pins no containerd_docker build for {suite}")
    if dest.exists():
        shutil.rmtree(dest)
    pool = dest / "dists" / suite / "pool" / DOCKER_COMPONENT / "amd64"
    pool.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="gpuinfra-debs-") as work:
        _containerd_io_deb(debs, package_version, pool, Path(work))
    dist = dest / "dists" / suite
    index = dist / DOCKER_COMPONENT / "binary-amd64"
    _write_index(dest, pool.relative_to(dest).as_posix(), index)
    _write_release(
        dist,
        index,
        [
            "Origin: gpuinfra",
            "Label: gpuinfra stand-in for Docker's Debian repository",
            f"Suite: {suite}",
            f"Codename: {suite}",
            f"Components: {DOCKER_COMPONENT}",
        ],
    )
    _sign(dist, signing_key(key_home or dest.with_name(dest.name + ".key")))
    # The key where Docker serves it, at the repository's root.
    shutil.move(str(dist / KEY_FILE), str(dest / DOCKER_KEY_FILE))
    return Repository(
        dest, ("containerd.io",), package_version, fingerprint(dest / DOCKER_KEY_FILE)
    )


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        del format, args


class Server:
    """The repository over HTTP on 127.0.0.1; port 0 picks a free one."""

    def __init__(self, directory: Path, port: int = 0) -> None:
        self.directory = directory
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def key_url(self) -> str:
        return self.url + KEY_FILE

    @property
    def fingerprint(self) -> str:
        """Of the key the served repository is signed with."""
        return fingerprint(self.directory / KEY_FILE)

    def start(self) -> Server:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@contextmanager
def serving(directory: Path, port: int = 0) -> Iterator[Server]:
    """Serve ``directory`` in a background thread for the duration of the block."""
    server = Server(directory, port).start()
    try:
        yield server
    finally:
        server.stop()
