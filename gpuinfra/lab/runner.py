"""Run playbooks through ansible-runner and turn its event stream into results a user reads.

``converge`` runs one playbook against one inventory; each event goes to ``Progress`` (per-host
state for a live view) and to an optional callback. The result holds the per-host recap, the
failures with their messages, and the node check reports (``gpu_node_check`` returns a
``report`` for each host). A task that retries reports each try; the package transaction's
wait (roles/node_packages) carries apt's progress, which becomes the host's ``progress`` line.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shlex
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner

from gpuinfra.errors import Interrupted, UsageError, excerpt
from gpuinfra.lab import aptprogress
from gpuinfra.paths import repo_root
from gpuinfra.suggest import allowed, did_you_mean

Event = dict[str, Any]
CHECK_MODULE = "gpu_node_check"
_RECAP = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")


@dataclass
class HostState:
    """What one host is doing and has done so far in a run."""

    task: str = ""
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: bool = False
    last_error: str = ""
    # What a long task is doing on this host now (apt's progress), while it retries.
    progress: str = ""

    @property
    def status(self) -> str:
        if self.unreachable:
            return "unreachable"
        return "failed" if self.failed else "running"


@dataclass(frozen=True)
class Failure:
    host: str
    task: str
    message: str
    unreachable: bool = False

    def __str__(self) -> str:
        kind = "unreachable" if self.unreachable else "failed"
        return f"{self.host}: {kind} at '{self.task}': {self.message}"


@dataclass(frozen=True)
class Change:
    """A task that changed a host, or in check mode would have: what it says changed."""

    host: str
    task: str
    diff: str = ""


@dataclass
class Progress:
    """The run as the event stream shows it: current play and task, each host's state."""

    play: str = ""
    task: str = ""
    tasks_started: int = 0
    hosts: dict[str, HostState] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    recap: dict[str, dict[str, int]] = field(default_factory=dict)

    def host(self, name: str) -> HostState:
        return self.hosts.setdefault(name, HostState())

    def feed(self, event: Event) -> None:
        kind = str(event.get("event", ""))
        data: dict[str, Any] = event.get("event_data") or {}
        name = data.get("host")
        if kind == "playbook_on_play_start":
            self.play = str(data.get("play", ""))
        elif kind == "playbook_on_task_start":
            self.task = str(data.get("task", ""))
            self.tasks_started += 1
        elif kind == "runner_on_start" and name:
            state = self.host(name)
            state.task = str(data.get("task", ""))
            state.progress = ""
        elif kind == "runner_retry" and name:
            self.host(name).progress = retry_progress(data.get("res") or {})
        elif kind == "runner_on_ok" and name:
            state = self.host(name)
            state.progress = ""
            state.ok += 1
            res = data.get("res") or {}
            if res.get("changed"):
                state.changed += 1
                self.changes.append(Change(name, str(data.get("task", "")), diff_text(res)))
            report = res.get("report")
            if _is_check(data) and isinstance(report, dict):
                self.reports[name] = report
        elif kind == "runner_on_skipped" and name:
            self.host(name).skipped += 1
            self.host(name).progress = ""
        elif kind == "runner_on_failed" and name:
            res = data.get("res") or {}
            report = res.get("report")
            if _is_check(data) and isinstance(report, dict):
                self.reports[name] = report
            if data.get("ignore_errors"):
                return
            state = self.host(name)
            state.progress = ""
            state.failed += 1
            state.last_error = _message(res)
            self.failures.append(Failure(name, str(data.get("task", "")), state.last_error))
        elif kind == "runner_on_unreachable" and name:
            state = self.host(name)
            state.unreachable = True
            state.last_error = _unreachable_message(data.get("res") or {})
            self.failures.append(
                Failure(name, str(data.get("task", "")), state.last_error, unreachable=True)
            )
        elif kind == "playbook_on_stats":
            self.recap = recap_from_stats(data)


DIFF_LINES = 40


def diff_text(res: dict[str, Any]) -> str:
    """What a changed task says it changed (``--diff``): a unified diff of each file it wrote,
    else its message; at most DIFF_LINES lines."""
    diffs = res.get("diff") or []
    # A template's own header names its source on the controller; the file is its dest.
    args = (res.get("invocation") or {}).get("module_args") or {}
    name = res.get("dest") or args.get("dest") or res.get("path")
    lines: list[str] = []
    for diff in diffs if isinstance(diffs, list) else [diffs]:
        if not isinstance(diff, dict):
            continue
        if isinstance(diff.get("prepared"), str):
            lines += diff["prepared"].splitlines()
            continue
        before, after = diff.get("before"), diff.get("after")
        if isinstance(before, str) and isinstance(after, str):
            lines += difflib.unified_diff(
                before.splitlines(),
                after.splitlines(),
                f"{name} (now)" if name else str(diff.get("before_header") or "before"),
                f"{name} (after a run)" if name else str(diff.get("after_header") or "after"),
                lineterm="",
            )
        elif isinstance(before, dict) and isinstance(after, dict):
            lines += [
                f"{key}: {before.get(key)} -> {after.get(key)}"
                for key in sorted(before.keys() | after.keys())
                if before.get(key) != after.get(key)
            ]
    if not lines and isinstance(res.get("msg"), str):
        lines = res["msg"].splitlines()
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"... {len(lines) - DIFF_LINES} more lines"]
    return "\n".join(lines)


def retry_progress(res: dict[str, Any]) -> str:
    """A retrying task's line: apt's progress when it is the package wait, else the try count."""
    described = aptprogress.describe(str(res.get("stdout") or ""))
    if described is not None:
        return described
    attempts, retries = res.get("attempts"), res.get("retries")
    return f"try {attempts} of {retries}" if attempts and retries else "retrying"


def _is_check(data: dict[str, Any]) -> bool:
    actions = (str(data.get("task_action", "")), str(data.get("resolved_action", "")))
    return any(a.split(".")[-1] == CHECK_MODULE for a in actions)


def _message(res: dict[str, Any]) -> str:
    msg = " ".join(str(res.get("msg") or "").split())
    # A failed command says only "non-zero return code"; its stderr says why.
    for key in ("stderr", "module_stderr", "stdout"):
        lines = [line.strip() for line in str(res.get(key) or "").splitlines() if line.strip()]
        if lines and (not msg or msg == "non-zero return code"):
            return f"{msg}: {lines[0]}" if msg else lines[0]
    # A failed fetch (get_url, uri) says why, and its result says from where.
    url = str(res.get("url") or "")
    if msg and url and url not in msg:
        return f"{msg} ({url})"
    return msg or "no message"


def _unreachable_message(res: dict[str, Any]) -> str:
    msg = _message(res)
    if "Host key verification failed" in msg:
        return (
            f"{msg} The host's key is not in known_hosts, or differs from the one recorded "
            "there: compare its fingerprint with the host's own (ssh-keygen -lf on the host), "
            "then record it (ssh-keyscan -p PORT ADDRESS >> ~/.ssh/known_hosts)"
        )
    return msg


def recap_from_stats(stats: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per-host PLAY RECAP counts from a ``playbook_on_stats`` event or ``runner.stats``."""
    hosts: set[str] = set()
    for key in (*_RECAP, "processed"):
        hosts.update((stats.get(key) or {}).keys())
    return {
        host: {key: int((stats.get(key) or {}).get(host, 0)) for key in _RECAP}
        for host in sorted(hosts)
    }


@dataclass
class RunResult:
    """How a playbook run ended: ansible-runner's status, return code, recap and findings."""

    status: str
    rc: int
    recap: dict[str, dict[str, int]]
    failures: list[Failure]
    reports: dict[str, dict[str, Any]]
    artifact_dir: Path
    changes: list[Change] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    def changed(self) -> dict[str, int]:
        return {host: counts["changed"] for host, counts in self.recap.items()}

    def failed_hosts(self) -> set[str]:
        return {h for h, c in self.recap.items() if c["failures"] or c["dark"]}

    def stopped_why(self) -> str:
        """Why ansible-playbook stopped before any host failed (a playbook or inventory it
        refused, a vault it could not open), as its first error says; '' where it says none."""
        try:
            lines = (self.artifact_dir / "stdout").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        for index, line in enumerate(lines):
            for prefix in ("[ERROR]: ", "ERROR! "):
                if line.startswith(prefix):
                    why = " ".join(line.removeprefix(prefix).split())
                    after = lines[index + 1] if index + 1 < len(lines) else ""
                    if after.startswith("Origin: "):
                        why = f"{after.removeprefix('Origin: ').strip()}: {why}"
                    return why
        return ""


def find_playbook(name: str | Path, root: Path | None = None) -> Path:
    """A playbook by path, or by name under playbooks/; a UsageError lists the known ones."""
    root = root or repo_root()
    path = Path(name)
    candidates = [path, root / path, root / "playbooks" / path, root / "playbooks" / f"{path}.yml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    known = sorted(p.name for p in (root / "playbooks").glob("*.yml"))
    raise UsageError(
        f"--playbook {excerpt(repr(str(name)), 80)}: no such playbook"
        f"{did_you_mean(path.name, known) if str(name).strip() else ''} (allowed: a playbook "
        f"file, or a name under playbooks/: {', '.join(known) or 'none'})"
    )


def limited_hosts(inventory: Path, limit: str) -> list[str]:
    """The hosts of ``inventory`` that ``--limit`` keeps, as ansible-playbook reads the pattern;
    a UsageError where it keeps none (ansible-playbook would end with no host to run on, or, for
    an empty pattern, report success having run nothing)."""
    from ansible.errors import AnsibleError  # type: ignore[import-untyped]
    from ansible.inventory.manager import InventoryManager  # type: ignore[import-untyped]
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]

    from gpuinfra.loading import display_path

    if not limit.strip():
        raise UsageError(
            f"--limit {limit!r}: empty (allowed: a host, a group or an Ansible host pattern)"
        )
    # Ansible warns on stderr about each part of the pattern that matches nothing; the one
    # line below says it instead.
    with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
        try:
            manager = InventoryManager(loader=DataLoader(), sources=[str(inventory)])
            manager.subset(limit)
            matched = [host.name for host in manager.get_hosts("all")]
        except AnsibleError as exc:
            message = " ".join(str(exc.message).split())
            raise UsageError(f"--limit {excerpt(repr(limit), 60)}: {message}") from None
    if not matched:
        hosts = sorted(manager.hosts)
        groups = sorted(g for g in manager.groups if g not in ("all", "ungrouped"))
        raise UsageError(
            f"--limit {excerpt(repr(limit), 60)} matches no host of {display_path(inventory)}"
            f"{did_you_mean(limit, [*hosts, *groups])} (allowed: a host, a group or an Ansible "
            f"host pattern; hosts: {allowed(hosts, 8)}; "
            f"groups: {allowed(groups, 8) if groups else 'none'})"
        )
    return matched


@contextlib.contextmanager
def _stoppable() -> Iterator[Callable[[], bool]]:
    """Ctrl-C or SIGTERM during a run ends ansible-playbook and every process it started.

    The returned callable is ansible-runner's cancel callback, polled at least every 5 s.
    ansible-runner would only kill ansible-playbook's process group, but Ansible's workers run
    in sessions of their own: orphaned, a worker goes on with its task (an async package run
    polls for half an hour). So the whole tree below this process goes, while it is still a tree.
    """
    asked: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def ask(signum: int, frame: object) -> None:
        asked.append(signum)

    def cancel() -> bool:
        if asked:
            for pid in descendants(os.getpid()):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        return bool(asked)

    previous = {sig: signal.signal(sig, ask) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield cancel
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from /proc (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # The command name may hold spaces and parentheses: the fields follow the last ')'.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def converge(
    playbook: Path,
    inventory: Path,
    *,
    limit: str | None = None,
    extravars: dict[str, Any] | None = None,
    tags: str | None = None,
    on_event: Callable[[Event, Progress], None] | None = None,
    root: Path | None = None,
    vault_password_file: Path | None = None,
    check: bool = False,
) -> RunResult:
    """Run ``playbook`` on ``inventory``; events feed a Progress and then ``on_event``.

    ``vault_password_file`` decrypts the inventory's Ansible Vault values (so does
    ``ANSIBLE_VAULT_PASSWORD_FILE`` in the environment, as for ansible-playbook). ``check`` runs
    it in Ansible's check and diff modes: the hosts are read, nothing on them is changed, and
    the result's changes are what a run would change.
    """
    root = root or repo_root()
    if not inventory.exists():
        raise UsageError(f"no inventory at {inventory}; for the lab, run `gpuinfra lab up`")
    progress = Progress()

    def handle(event: Event) -> bool:
        progress.feed(event)
        if on_event is not None:
            on_event(event, progress)
        return True

    # ansible-playbook lives beside this interpreter, in the project's virtual environment,
    # which need not be activated.
    path = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    config = root / "ansible.cfg"
    envvars = {
        # ansible.cfg holds pipelining, ControlPersist and how facts are gathered.
        "ANSIBLE_CONFIG": str(config),
        # ansible-runner turns host key checking off unless this is set, which would let anyone
        # in the network path answer for a site's hosts: pass what ansible-playbook would use.
        "ANSIBLE_HOST_KEY_CHECKING": str(host_key_checking(config)),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": path,
    }
    # ansible-runner writes envvars into the private data dir and reads them back on the next
    # run, so each run gets a fresh one; the artifacts (events, stdout) are kept in .lab/.
    with tempfile.TemporaryDirectory(prefix="gpuinfra-runner-") as private, _stoppable() as stop:
        runner = _run(
            private,
            root,
            playbook,
            inventory,
            limit,
            tags,
            extravars,
            envvars,
            handle,
            stop,
            vault_password_file,
            check,
        )
    if stop():
        raise Interrupted(
            f"interrupted: {playbook.name} stopped with every process it started; a host may be "
            "half-way through a task, and the next converge finishes it"
        )
    recap = recap_from_stats(runner.stats or {}) if runner.stats else progress.recap
    return RunResult(
        status=str(runner.status),
        rc=int(runner.rc if runner.rc is not None else -1),
        recap=recap,
        failures=progress.failures,
        reports=progress.reports,
        artifact_dir=Path(runner.config.artifact_dir),
        changes=progress.changes,
    )


def host_key_checking(config: Path) -> bool:
    """Whether ansible-playbook checks host keys with ``config``: ansible.cfg's
    ``host_key_checking``, or ``ANSIBLE_HOST_KEY_CHECKING`` from the environment when set."""
    from ansible.config.manager import ConfigManager  # type: ignore[import-untyped]

    return bool(ConfigManager(str(config.resolve())).get_config_value("HOST_KEY_CHECKING"))


def _run(
    private: str,
    root: Path,
    playbook: Path,
    inventory: Path,
    limit: str | None,
    tags: str | None,
    extravars: dict[str, Any] | None,
    envvars: dict[str, str],
    handle: Callable[[Event], bool],
    stop: Callable[[], bool],
    vault_password_file: Path | None = None,
    check: bool = False,
) -> Any:
    if vault_password_file is not None and not vault_password_file.is_file():
        raise UsageError(f"--vault-password-file {vault_password_file}: no such file")
    options = ["--check", "--diff"] if check else []
    if vault_password_file is not None:
        options += ["--vault-password-file", str(vault_password_file.resolve())]
    return ansible_runner.run(
        cmdline=shlex.join(options) or None,
        private_data_dir=private,
        artifact_dir=str(root / ".lab" / "runner"),
        project_dir=str(root),
        playbook=str(playbook),
        # Facts last one run (ansible.cfg); ansible-runner would otherwise write them to files.
        fact_cache_type="memory",
        inventory=str(inventory.resolve()),
        limit=limit,
        tags=tags,
        extravars=extravars or {},
        envvars=envvars,
        event_handler=handle,
        cancel_callback=stop,
        quiet=True,
        rotate_artifacts=50,
        settings={"suppress_ansible_output": True},
    )
