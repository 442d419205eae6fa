"""The lab: real Debian 12 (or 13) hosts as podman containers that boot systemd, reached over SSH.

Each host is a container of a debootstrap image, started as root with runc and cgroupfs (crun
fails on this machine's cgroups), podman's default ulimits switched off through a containers.conf
of the project's own, systemd as PID 1 and the host's network. Each host's sshd listens on its
own port on 127.0.0.1 only. Debian packages come through a caching apt proxy on loopback
(apt-cacher-ng, forwarding to Debian's archive and nothing else), so a package is downloaded once
for every host and every run.

A lab is named by a prefix: containers carry the label ``gpuinfra.lab=<prefix>`` and ``down``
removes exactly those, so a test suite's lab, a developer's lab and another developer's lab
(each with its own prefix and port base) live side by side.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuinfra import processes
from gpuinfra.errors import ToolError, UsageError
from gpuinfra.loading import display_path
from gpuinfra.paths import repo_root

LABEL = "gpuinfra.lab"
DEFAULT_PREFIX = "gpuinfra-lab"
DEFAULT_PORT_BASE = 2200
DEFAULT_PROXY_PORT = 3143
CACHE_DIR = Path(os.environ.get("GPUINFRA_LAB_CACHE", "/var/cache/gpuinfra"))
SUITE = "bookworm"
# The Debian releases a lab host can run (bookworm's debootstrap builds both), by codename.
SUITES = {"bookworm": "12", "trixie": "13"}
INCLUDE = ("systemd-sysv", "openssh-server", "python3", "sudo", "gnupg", "ca-certificates")
ARCHIVE = "http://deb.debian.org/debian"
SECURITY_ARCHIVE = "http://deb.debian.org/debian-security"
# How many dropped mirror connections the lab's proxy reopens for one client (_ACNG_CONF).
PROXY_RECONNECTS = 10
_SOURCES = """\
deb {archive} {suite} main non-free non-free-firmware
deb {archive} {suite}-updates main non-free non-free-firmware
deb http://deb.debian.org/debian-security {suite}-security main non-free non-free-firmware
"""
# Debian 13 installs its sources as one deb822 file and no /etc/apt/sources.list: the lab's
# trixie hosts are built the same way, so the roles meet the layout a real Debian 13 host has.
_DEB822_SOURCES = """\
Types: deb
URIs: {archive}
Suites: {suite} {suite}-updates
Components: main non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: {suite}-security
Components: main non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def apt_sources(suite: str) -> tuple[str, str]:
    """Where a lab host of ``suite`` keeps its apt sources, and what they say."""
    if suite == "bookworm":
        return "etc/apt/sources.list", _SOURCES.format(archive=ARCHIVE, suite=suite)
    return "etc/apt/sources.list.d/debian.sources", _DEB822_SOURCES.format(
        archive=ARCHIVE, suite=suite
    )


# Only remapped repositories are forwarded (ForceManaged): Debian's archive and its security
# archive. Any other URL asked of the proxy is refused.
_ACNG_CONF = """\
CacheDir: {base}/cache
LogDir: {base}/log
SupportDir: /usr/lib/apt-cacher-ng
Port: {port}
BindAddress: 127.0.0.1
ForceManaged: 1
Remap-debrep: deb.debian.org/debian /debian ; {archive}/
Remap-secdeb: deb.debian.org/debian-security security.debian.org/debian-security \
/debian-security ; {security}/
PidFile: {base}/run/pid
SocketPath: {base}/run/socket
ExThreshold: 4
# An upstream that stays silent is given up after 15 s, so apt gets an error before its own
# 20 s timeout (roles/node_packages) instead of silence (docs/decisions/0008-bounded-fetches.md).
NetworkTimeout: 15
# A connection the mirror closes while requests wait on it is opened again. The count is per
# client and for its whole session (apt keeps one connection to the proxy for a package run);
# once it is spent, the proxy answers that client 503 for every later file from the mirror,
# retries included. 1 made one dropped connection fail 131 files of one host's run
# (docs/decisions/0080-the-proxy-reconnects-to-the-mirror.md).
DlMaxRetries: {reconnects}
"""
_NAME_OK = set("abcdefghijklmnopqrstuvwxyz0123456789-")
# A prefix names containers and images (``<prefix>-<N>``): short enough for a host name label.
MAX_PREFIX = 40
# Unprivileged ports, leaving room above the base for the hosts (BASE+N, N <= 32).
PORT_RANGE = (1024, 65000)
# apt-cacher-ng 3.7 neither listens on nor connects to a port above 32767 (seen: "Error resolving
# address for binding" at 32768, and "503 Connection refused" from an upstream on 44315).
PROXY_PORT_MAX = 32767
# debootstrap fetches with wget, whose defaults wait 900 s on a silent server and try 20 times.
_WGETRC = "connect_timeout = 15\nread_timeout = 30\ntries = 3\nwaitretry = 5\n"
DEBOOTSTRAP_TIMEOUT = 1200
# How long a lab converge waits for the apt proxy and the stand-in repository to answer.
SOURCES_TIMEOUT = 10
_INVENTORY_HEADER = "# Written by `gpuinfra lab up`"
# The lab's throwaway hosts get new host keys each time they are built, on ports that earlier
# labs used: their connections skip the known_hosts check. No other inventory gets these options.
LAB_SSH_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"


@dataclass(frozen=True)
class Settings:
    """Which lab: its name prefix, SSH port base, apt proxy port and where its files go."""

    prefix: str = DEFAULT_PREFIX
    port_base: int = DEFAULT_PORT_BASE
    proxy_port: int = DEFAULT_PROXY_PORT
    root: Path = field(default_factory=repo_root)
    # The Debian release the lab's hosts run (a key of SUITES).
    suite: str = SUITE

    @classmethod
    def from_env(
        cls,
        prefix: str | None = None,
        port_base: int | None = None,
        suite: str | None = None,
        *,
        builds: bool = True,
    ) -> Settings:
        """Options first, then GPUINFRA_LAB_PREFIX / _PORT_BASE / _SUITE / GPUINFRA_APT_PROXY_PORT.

        An option given empty or out of range is an error naming it, never the default: a
        ``lab down --prefix ''`` must not act on the default lab. The suite is read only by
        what ``builds`` hosts: a GPUINFRA_LAB_SUITE left over in the shell does not stop
        ``lab status`` or ``lab down``.
        """
        if prefix is not None:
            where = "--prefix"
        elif "GPUINFRA_LAB_PREFIX" in os.environ:
            where, prefix = "GPUINFRA_LAB_PREFIX", os.environ["GPUINFRA_LAB_PREFIX"]
        else:
            where, prefix = "--prefix", DEFAULT_PREFIX
        if not prefix or len(prefix) > MAX_PREFIX:
            raise UsageError(
                f"{where} {prefix!r}: allowed 1-{MAX_PREFIX} lowercase letters, digits and '-', "
                "starting with a letter"
                if len(prefix) <= MAX_PREFIX
                else f"{where}: {len(prefix)} characters (allowed: 1-{MAX_PREFIX} lowercase "
                "letters, digits and '-', starting with a letter)"
            )
        if not prefix[0].isalpha() or not set(prefix) <= _NAME_OK:
            raise UsageError(
                f"{where} {prefix!r}: allowed 1-{MAX_PREFIX} lowercase letters, digits and '-', "
                "starting with a letter"
            )
        if port_base is not None:
            base_where, base = "--port-base", port_base
        else:
            base_where = "GPUINFRA_LAB_PORT_BASE"
            base = _env_int("GPUINFRA_LAB_PORT_BASE", DEFAULT_PORT_BASE)
        suite_where = "--suite" if suite is not None else "GPUINFRA_LAB_SUITE"
        if suite is None:
            suite = os.environ.get("GPUINFRA_LAB_SUITE", SUITE) if builds else SUITE
        if suite not in SUITES:
            raise UsageError(
                f"{suite_where} {suite[:40]!r}: allowed "
                + ", ".join(f"{name} (Debian {number})" for name, number in SUITES.items())
            )
        if not PORT_RANGE[0] <= base <= PORT_RANGE[1]:
            raise UsageError(
                f"{base_where} {base}: allowed {PORT_RANGE[0]}-{PORT_RANGE[1]} (unprivileged "
                "ports; host N listens on the base + N)"
            )
        proxy = _env_int("GPUINFRA_APT_PROXY_PORT", DEFAULT_PROXY_PORT)
        if not PORT_RANGE[0] <= proxy <= PROXY_PORT_MAX:
            raise UsageError(
                f"GPUINFRA_APT_PROXY_PORT {proxy}: allowed {PORT_RANGE[0]}-{PROXY_PORT_MAX} "
                "(apt-cacher-ng 3.7 listens on no port above)"
            )
        return cls(prefix=prefix, port_base=base, proxy_port=proxy, suite=suite)

    @property
    def state_dir(self) -> Path:
        return self.root / ".lab" / self.prefix

    @property
    def key_file(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def inventory_dir(self) -> Path:
        # The default lab is the one users converge by name; others keep theirs in .lab/.
        if self.prefix == DEFAULT_PREFIX:
            return self.root / "inventory" / "lab"
        return self.state_dir / "inventory"

    @property
    def hosts_file(self) -> Path:
        return self.inventory_dir / "hosts.yml"

    def host_name(self, index: int) -> str:
        return f"{self.prefix}-{index}"

    def host_port(self, index: int) -> int:
        return self.port_base + index


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    # Digits only: int() would also read "2_200" or " 2200 ".
    if re.fullmatch(r"[0-9]+", raw):
        return int(raw)
    raise UsageError(f"{name}={raw!r}: expected a port number")


@dataclass(frozen=True)
class Host:
    name: str
    port: int
    state: str


# --- podman ---------------------------------------------------------------------------------


def _containers_conf() -> Path:
    # podman's default ulimits are refused on this machine; /etc stays untouched.
    path = CACHE_DIR / "lab" / "containers.conf"
    text = "[containers]\ndefault_ulimits = []\n"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


# Bounds of the lab's own steps, each far above what it takes on a 2-CPU machine: a whole image
# (about 300 MB) imported; a question to podman's storage; one ssh login that runs `true`.
IMPORT_TIMEOUT_S = 600.0
PODMAN_QUERY_S = 60
SSH_PROBE_S = 15.0


def podman(*args: str, check: bool = True, timeout: float = 600) -> str:
    """Run podman as the lab needs it (runc, cgroupfs, the project's containers.conf)."""
    proc = _podman_run(args, timeout, args[0])
    if check and proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise ToolError(f"podman {args[0]} failed: {lines[-1] if lines else proc.returncode}")
    return proc.stdout


def _podman_run(
    args: tuple[str, ...], timeout: float, what: str
) -> subprocess.CompletedProcess[str]:
    """podman ``args``, its exit status left to the caller; a ToolError where podman is missing
    or runs past ``timeout`` (``what`` names the step)."""
    env = dict(os.environ, CONTAINERS_CONF=str(_containers_conf()))
    cmd = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", *args]
    try:
        return subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise ToolError("podman is not installed; run scripts/setup.sh") from None
    except subprocess.TimeoutExpired:
        # Another podman holding its storage lock, most often: run's timeout killed this one.
        raise ToolError(f"podman {what} did not finish within {timeout:.0f} s") from None


def image_name(suite: str = SUITE) -> str:
    """The image tag changes with the recipe, so a changed recipe builds a new image."""
    where, sources = apt_sources(suite)
    recipe = f"{suite} minbase {','.join(INCLUDE)} {sources}"
    if where != apt_sources(SUITE)[0]:
        recipe += f" {where}"
    return f"localhost/gpuinfra-lab:{suite}-{hashlib.sha256(recipe.encode()).hexdigest()[:10]}"


def ensure_image(
    proxy_port: int, log: Callable[[str], None] = lambda _: None, suite: str = SUITE
) -> str:
    """The lab image of ``suite``, built once with debootstrap through the apt proxy and kept
    by podman."""
    name = image_name(suite)
    if _image_exists(name):
        return name
    log(f"building {name} with debootstrap (once)")
    work = CACHE_DIR / "lab"
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=work) as tmp:
        rootfs = Path(tmp) / "rootfs"
        mirror = f"http://127.0.0.1:{proxy_port}/debian"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}"]
        cmd += [suite, str(rootfs), mirror]
        wgetrc = Path(tmp) / "wgetrc"
        wgetrc.write_text(_WGETRC)
        returncode, output = _run_bounded(cmd, DEBOOTSTRAP_TIMEOUT, {"WGETRC": str(wgetrc)})
        if returncode is None:
            raise ToolError(
                f"debootstrap did not finish within {DEBOOTSTRAP_TIMEOUT} s fetching from {mirror}; "
                "check the apt proxy (`gpuinfra lab status`) and the network, then run lab up again"
            )
        if returncode != 0:
            tail = output.strip().splitlines()[-1:]
            raise ToolError(f"debootstrap failed: {' '.join(tail)}")
        where, sources = apt_sources(suite)
        (rootfs / where).write_text(sources)
        if where != "etc/apt/sources.list":
            # debootstrap writes its mirror here; a Debian 13 host has no such file.
            (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        # systemd makes a machine id from the container's on first boot.
        (rootfs / "etc/machine-id").write_text("")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        env = dict(os.environ, CONTAINERS_CONF=str(_containers_conf()))
        try:
            imported = subprocess.run(
                ["podman", "import", "--change", "CMD=/sbin/init", "-", name],
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                env=env,
                timeout=IMPORT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            tar.kill()
            tar.wait()
            raise ToolError(
                f"podman import did not finish within {IMPORT_TIMEOUT_S:.0f} s"
            ) from None
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise ToolError(f"podman import failed: {imported.stderr.strip()}")
    return name


def _run_bounded(cmd: list[str], seconds: float, env: dict[str, str]) -> tuple[int | None, str]:
    """Run ``cmd`` in a session of its own; past ``seconds`` kill all of it (debootstrap's wget
    and chroot dpkg too) and return None for the exit status."""
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env},
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ToolError(f"{cmd[0]} is not installed; run scripts/setup.sh") from None
    try:
        output, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        processes.end(proc)
        return None, ""
    return proc.returncode, output


def _image_exists(name: str) -> bool:
    return _podman_run(("image", "exists", name), PODMAN_QUERY_S, "image exists").returncode == 0


# --- apt proxy ------------------------------------------------------------------------------


def proxy_listening(port: int) -> bool:
    """Whether something answers on 127.0.0.1:port."""
    return _listening(port)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def proxy_dir() -> Path:
    return CACHE_DIR / "apt-cacher-ng"


def proxy_config(
    base: Path, port: int, archive: str = ARCHIVE, security: str = SECURITY_ARCHIVE
) -> str:
    """apt-cacher-ng's configuration for a proxy kept in ``base`` and listening on 127.0.0.1:port,
    forwarding Debian's archive and its security archive to ``archive`` and ``security``."""
    return _ACNG_CONF.format(
        base=base, port=port, archive=archive, security=security, reconnects=PROXY_RECONNECTS
    )


# How long apt-cacher-ng gets, once started, to listen on its port and write its pid file (it
# takes well under a second). One that has not is ended, with what it started.
PROXY_START_S = 20


def start_proxy(base: Path, port: int, config: str) -> None:
    """Start apt-cacher-ng with ``config`` (``proxy_config``) in ``base`` and wait until it listens.

    It runs in the foreground of a session of its own, which outlives this process: one that
    does not answer within PROXY_START_S is ended with that session, and a ToolError says so.
    """
    for sub in ("cache", "log", "run", "conf"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "conf" / "acng.conf").write_text(config)
    binary = shutil.which("apt-cacher-ng") or "/usr/sbin/apt-cacher-ng"
    if not Path(binary).exists():
        raise ToolError("apt-cacher-ng is not installed; run scripts/setup.sh")
    # A pid file that a proxy now gone left behind would pass for the new proxy's.
    pid_file = base / "run" / "pid"
    pid_file.unlink(missing_ok=True)
    # What it prints goes to a file, never to a pipe of this process or of its caller.
    output = base / "log" / "foreground.log"
    with output.open("wb") as sink:
        proc = subprocess.Popen(
            [binary, "-c", str(base / "conf"), "ForeGround=1"],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + PROXY_START_S
    # It listens before it writes its pid file; the file is how `lab down` finds it to stop it.
    while not (_listening(port) and _read_pid(pid_file) is not None):
        if proc.poll() is not None:
            said = output.read_text(errors="replace").strip().splitlines()
            raise ToolError(
                f"apt-cacher-ng did not start on 127.0.0.1:{port} (exit {proc.returncode}"
                f"{': ' + said[-1].strip() if said else ''}); its logs are in {base / 'log'}"
            )
        if time.monotonic() > deadline:
            processes.end(proc)
            pid_file.unlink(missing_ok=True)
            raise ToolError(
                f"apt-cacher-ng did not answer on 127.0.0.1:{port} within {PROXY_START_S:.0f} s "
                f"and was ended; its logs are in {base / 'log'}"
            )
        time.sleep(0.2)


def ensure_proxy(port: int) -> bool:
    """Start the lab's apt-cacher-ng on 127.0.0.1:port unless one answers there; True when started."""
    if _listening(port):
        return False
    start_proxy(proxy_dir(), port, proxy_config(proxy_dir(), port))
    return True


def proxy_outdated(port: int) -> bool:
    """Whether the lab's running apt-cacher-ng was started with another configuration than this
    checkout writes (an older gpuinfra's): it reads its configuration only when it starts, and
    it serves every lab, so it is not restarted under another lab's run."""
    written = proxy_dir() / "conf" / "acng.conf"
    if not _listening(port) or _proxy_pid() is None:
        return False
    try:
        return written.read_text() != proxy_config(proxy_dir(), port)
    except OSError:
        return False


# Seconds apt-cacher-ng gets to stop on SIGTERM. It has sat one out and gone on serving (seen
# after it had answered apt with 503s for an upstream that dropped it); it is the lab's own
# process and only a cache, so it is then killed.
PROXY_STOP_GRACE = 10


def stop_proxy(port: int) -> bool:
    """Stop the apt-cacher-ng the lab started (its pid file), if it still runs."""
    pid = _proxy_pid()
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    try:
        _wait_for(lambda: not _listening(port), PROXY_STOP_GRACE, "apt-cacher-ng to stop")
    except ToolError:
        if "apt-cacher-ng" in _cmdline(pid):
            os.kill(pid, signal.SIGKILL)
        _wait_for(lambda: not _listening(port), 10, "apt-cacher-ng to stop after SIGKILL")
    return True


def _proxy_pid() -> int | None:
    """The pid of the apt-cacher-ng the lab started (its pid file), while it runs."""
    pid = _read_pid(proxy_dir() / "run" / "pid")
    return pid if pid is not None and "apt-cacher-ng" in _cmdline(pid) else None


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_for(ready: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise ToolError(f"timed out after {seconds:.0f}s waiting for {what}")
        time.sleep(0.2)


# --- stand-in toolkit repository (for the lab's own use) ------------------------------------


def _start_repo_server(settings: Settings) -> tuple[str, str]:
    """Build the stand-in toolkit repository and serve it from a detached process: its URL and
    the fingerprint of the key that signs it."""
    from gpuinfra.lab import aptrepo

    state = _load_state(settings)
    pid = state.get("repo_pid")
    if (
        isinstance(pid, int)
        and str(settings.state_dir / "aptrepo") in _cmdline(pid)
        and state.get("repo_fingerprint")
    ):
        return str(state["repo_url"]), str(state["repo_fingerprint"])
    _stop_repo_server(settings)
    state = _load_state(settings)
    # The key lives beside the repository and is reused while it is valid (aptrepo.KEY_LIFETIME).
    repo = aptrepo.build(
        settings.state_dir / "aptrepo", key_home=settings.state_dir / "aptrepo-key"
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (settings.state_dir / "aptrepo.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            "--directory",
            str(repo.path),
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _wait_for(lambda: _listening(port), 20, f"the toolkit repository on 127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/"
    _save_state(
        settings,
        {**state, "repo_pid": proc.pid, "repo_url": url, "repo_fingerprint": repo.fingerprint},
    )
    return url, repo.fingerprint


def _stop_repo_server(settings: Settings) -> bool:
    state = _load_state(settings)
    pid = state.get("repo_pid")
    if not isinstance(pid, int) or str(settings.state_dir / "aptrepo") not in _cmdline(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    return True


def _load_state(settings: Settings) -> dict[str, Any]:
    try:
        data = json.loads((settings.state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_state(settings: Settings, state: dict[str, Any]) -> None:
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    (settings.state_dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")


# --- hosts ----------------------------------------------------------------------------------


def _ensure_key(settings: Settings) -> str:
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    if not settings.key_file.exists():
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", settings.prefix]
        try:
            made = subprocess.run(
                [*keygen, "-f", str(settings.key_file)],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except FileNotFoundError:
            raise ToolError("ssh-keygen is not installed (openssh-client)") from None
        except subprocess.TimeoutExpired:
            raise ToolError("ssh-keygen did not finish within 30 s") from None
        if made.returncode != 0:
            lines = made.stderr.strip().splitlines()
            raise ToolError(f"ssh-keygen failed: {lines[-1] if lines else made.returncode}")
    return settings.key_file.with_suffix(".pub").read_text()


def _host_files(settings: Settings, name: str, port: int) -> dict[str, Path]:
    """Files bind-mounted into a host: its authorized key, sshd drop-in and apt proxy."""
    folder = settings.state_dir / "hosts" / name
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "/root/.ssh/authorized_keys": (folder / "authorized_keys", _ensure_key(settings)),
        "/etc/ssh/sshd_config.d/10-gpuinfra-lab.conf": (
            folder / "sshd.conf",
            f"Port {port}\nListenAddress 127.0.0.1\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n",
        ),
        "/etc/apt/apt.conf.d/01gpuinfra-proxy": (
            folder / "apt-proxy.conf",
            f'Acquire::http::Proxy "http://127.0.0.1:{settings.proxy_port}/";\n'
            # The stand-in toolkit repository is on loopback too; apt fetches it directly.
            'Acquire::http::Proxy::127.0.0.1 "DIRECT";\n',
        ),
    }
    for path, content in files.values():
        path.write_text(content)
        path.chmod(0o644)
    return {target: path for target, (path, _) in files.items()}


def hosts(settings: Settings) -> list[Host]:
    """The lab's containers, whatever their state."""
    out = podman("ps", "-a", "--filter", f"label={LABEL}={settings.prefix}", "--format", "json")
    result = []
    for entry in json.loads(out or "[]"):
        labels = entry.get("Labels") or {}
        names = entry.get("Names") or ["?"]
        result.append(
            Host(name=names[0], port=int(labels.get(f"{LABEL}.port", 0)), state=entry["State"])
        )
    return sorted(result, key=lambda h: h.port)


def start_host(settings: Settings, index: int, image: str) -> Host:
    name, port = settings.host_name(index), settings.host_port(index)
    if _listening(port) and name not in {h.name for h in hosts(settings)}:
        raise UsageError(
            f"port {port} on 127.0.0.1 is taken by something else; choose another --port-base"
        )
    mounts = []
    for target, source in _host_files(settings, name, port).items():
        mounts += ["--volume", f"{source}:{target}:ro"]
    podman(
        "run", "--detach", "--name", name, "--hostname", name,
        "--label", f"{LABEL}={settings.prefix}", "--label", f"{LABEL}.port={port}",
        "--systemd=always", "--stop-signal", "SIGRTMIN+3", "--network", "host",
        *mounts, image, "/sbin/init",
    )  # fmt: skip
    return Host(name, port, "running")


def ssh_command(settings: Settings, port: int, *command: str) -> list[str]:
    return [
        "ssh", "-i", str(settings.key_file), "-p", str(port),
        "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
        "-o", "ConnectTimeout=5", "root@127.0.0.1", *command,
    ]  # fmt: skip


def wait_ssh(settings: Settings, host: Host, seconds: float = 90) -> None:
    def answers() -> bool:
        if not _listening(host.port):
            return False
        cmd = ssh_command(settings, host.port, "true")
        try:
            probe = subprocess.run(cmd, capture_output=True, timeout=SSH_PROBE_S, check=False)
        except subprocess.TimeoutExpired:
            # Let in and then silent (a host still starting its services): asked again.
            return False
        return probe.returncode == 0

    _wait_for(answers, seconds, f"sshd of {host.name} on 127.0.0.1:{host.port}")


def write_inventory(
    settings: Settings, lab_hosts: list[Host], repo_url: str, repo_fingerprint: str
) -> Path:
    """hosts.yml for the lab; group_vars come from inventory/lab/ (committed, shared).

    The stand-in repository is signed by the lab's own key: the site pins that key's
    fingerprint, as a site with a mirror that signs with its own key would.
    """
    inventory = settings.inventory_dir
    inventory.mkdir(parents=True, exist_ok=True)
    shared_vars = settings.root / "inventory" / "lab" / "group_vars"
    link = inventory / "group_vars"
    if inventory != shared_vars.parent and shared_vars.is_dir() and not link.exists():
        link.symlink_to(shared_vars)
    document = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {
                        h.name: {"ansible_host": "127.0.0.1", "ansible_port": h.port}
                        for h in lab_hosts
                    },
                    "vars": {
                        "ansible_user": "root",
                        "ansible_ssh_private_key_file": str(settings.key_file),
                        # Lab hosts are rebuilt with new host keys on the same loopback ports:
                        # only this inventory skips the known_hosts check (ansible.cfg keeps it).
                        "ansible_ssh_common_args": LAB_SSH_ARGS,
                        "nvidia_container_toolkit_repo_url": repo_url,
                        "nvidia_container_toolkit_repo_key_url": repo_url + "gpgkey",
                        "nvidia_container_toolkit_repo_key_fingerprint": repo_fingerprint,
                    },
                }
            }
        }
    }
    header = f"{_INVENTORY_HEADER} for lab '{settings.prefix}'; regenerated each time.\n"
    settings.hosts_file.write_text(header + yaml.safe_dump(document, sort_keys=False))
    return settings.hosts_file


def unstarted_lab(path: Path) -> Settings | None:
    """The lab whose inventory directory ``path`` is, while its hosts are not written (before
    ``lab up``, or after ``lab down``); None for any other directory."""
    try:
        root = repo_root()
        where = path.resolve()
        if where == (root / "inventory" / "lab").resolve():
            prefix = DEFAULT_PREFIX
        elif where.name == "inventory" and where.parent.parent == (root / ".lab").resolve():
            prefix = where.parent.name
        else:
            return None
        if not where.is_dir() or any(
            (where / name).exists() for name in ("hosts.yml", "hosts.yaml")
        ):
            return None
    except (UsageError, OSError):
        # A name the system refuses (too long, a loop of links) is told by the site's reader.
        return None
    return Settings(prefix=prefix, root=root)


def not_up(settings: Settings) -> str:
    """What to do about a lab that has no hosts yet, in one line. The command names the
    lab's prefix unless a bare ``lab up`` would start that very lab."""
    bare = os.environ.get("GPUINFRA_LAB_PREFIX", DEFAULT_PREFIX)
    command = "gpuinfra lab up" + (
        "" if settings.prefix == bare else f" --prefix {settings.prefix}"
    )
    return (
        f"lab {settings.prefix} has no hosts ({display_path(settings.hosts_file)} is not "
        f"written); start them with `{command}`"
    )


def check_lab_sources(
    site_dir: Path, seconds: float = SOURCES_TIMEOUT, proxy_port: int | None = None
) -> None:
    """Before a lab converge: the apt proxy answers and forwards to Debian's archive, and the
    stand-in toolkit repository serves its Release file, each within ``seconds``.

    A ToolError says in one line which one did not and what to do. An inventory that `lab up`
    did not write is not a lab's, and is left alone.
    """
    try:
        text = (site_dir / "hosts.yml").read_text()
    except OSError:
        return
    if not text.startswith(_INVENTORY_HEADER):
        return
    port = proxy_port or Settings.from_env().proxy_port
    probe = f"{ARCHIVE}/dists/{SUITE}/Release.gpg"
    problem = _fetch_problem(probe, f"http://127.0.0.1:{port}/", seconds)
    if problem == "refused":
        raise ToolError(
            f"the lab's apt proxy on 127.0.0.1:{port} is not running; start it with `gpuinfra lab up`"
        )
    if problem:
        raise ToolError(
            f"the lab's apt proxy on 127.0.0.1:{port} did not serve {probe} within "
            f"{seconds:.0f} s ({problem}); check the proxy and the network, then converge again"
        )
    document = yaml.safe_load(text) or {}
    group = ((document.get("all") or {}).get("children") or {}).get("gpu_nodes") or {}
    url = str((group.get("vars") or {}).get("nvidia_container_toolkit_repo_url") or "")
    if not url:
        return
    release = url.rstrip("/") + "/Release"
    problem = _fetch_problem(release, None, seconds)
    if problem:
        why = "not running" if problem == "refused" else problem
        raise ToolError(
            f"the lab's stand-in toolkit repository did not serve {release} within "
            f"{seconds:.0f} s ({why}); run `gpuinfra lab up` again to serve it"
        )


def _fetch_problem(url: str, proxy: str | None, seconds: float) -> str:
    """What kept ``url`` from answering (through ``proxy``) within ``seconds``, or ''."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy} if proxy else {})
    )
    try:
        with opener.open(url, timeout=seconds) as response:
            response.read(1 << 16)
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}"
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return "refused"
        if isinstance(exc.reason, TimeoutError):
            return "no answer"
        return str(exc.reason)
    except TimeoutError:
        return "no answer"
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


def up(
    settings: Settings,
    count: int,
    repo_url: str | None = None,
    log: Callable[[str], None] = lambda _: None,
    repo_fingerprint: str | None = None,
) -> list[Host]:
    """Start ``count`` hosts (keeping running ones), wait for SSH, write the inventory.

    ``repo_url`` with ``repo_fingerprint`` names a stand-in repository served elsewhere (the
    tests'); without them the lab builds and serves its own.
    """
    if (repo_url is None) != (repo_fingerprint is None):
        raise UsageError("a stand-in repository URL needs the fingerprint of its key, and back")
    if not 1 <= count <= 32:
        raise UsageError(f"--hosts {count}: allowed 1-32")
    # Before the apt proxy starts: a lab without them would leave it running for nothing.
    for tool in ("podman", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise ToolError(f"{tool} is not installed; run scripts/setup.sh")
    if os.geteuid() != 0:
        raise UsageError("the lab runs podman as root: run it as root")
    if ensure_proxy(settings.proxy_port):
        log(f"apt proxy started on 127.0.0.1:{settings.proxy_port}")
    elif proxy_outdated(settings.proxy_port):
        log(
            f"apt proxy on 127.0.0.1:{settings.proxy_port} runs an older configuration; it takes "
            "this one when it restarts, after `gpuinfra lab down` of every lab"
        )
    image = ensure_image(settings.proxy_port, log, settings.suite)
    existing = {h.name: h for h in hosts(settings)}
    wanted: list[Host] = []
    for index in range(1, count + 1):
        name = settings.host_name(index)
        host = existing.get(name)
        if host is None:
            log(f"starting {name} on 127.0.0.1:{settings.host_port(index)}")
            host = start_host(settings, index, image)
        elif host.state != "running":
            podman("start", name)
            host = Host(host.name, host.port, "running")
        wanted.append(host)
    for host in wanted:
        wait_ssh(settings, host)
    if repo_url is None or repo_fingerprint is None:
        repo_url, repo_fingerprint = _start_repo_server(settings)
    write_inventory(settings, wanted, repo_url, repo_fingerprint)
    return wanted


def down(settings: Settings) -> list[str]:
    """Remove the lab's containers, its repository server and its generated files."""
    removed = [h.name for h in hosts(settings)]
    if removed:
        podman("rm", "--force", "--time", "5", *removed)
    _stop_repo_server(settings)
    settings.hosts_file.unlink(missing_ok=True)
    if settings.state_dir.exists():
        shutil.rmtree(settings.state_dir)
    # The apt proxy serves every lab; it goes when the last lab does.
    if not podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}").strip():
        stop_proxy(settings.proxy_port)
    return removed


def restart_host(settings: Settings, host: Host) -> None:
    """Start a stopped host again and wait until it answers on SSH."""
    podman("start", host.name)
    wait_ssh(settings, Host(host.name, host.port, "running"))
