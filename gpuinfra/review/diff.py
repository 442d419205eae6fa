"""What a change does to each environment: plans of a base revision and of the working tree.

The base revision is checked out in a temporary ``git worktree`` and planned by its own library
(``python -m gpuinfra.review`` with ``GPUINFRA_ROOT`` and ``PYTHONPATH`` inside the worktree), so
a change to the code itself shows up as a change in the plan. A revision older than that entry
point is planned through its command line instead (``python -m gpuinfra plan --format json``). The comparison works on plan
documents (see ``gpuinfra.review.plan``) and knows nothing of how they were made.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuinfra import processes, secrets
from gpuinfra import site as site_mod
from gpuinfra import versions as versions_mod
from gpuinfra.config import known_stacks
from gpuinfra.errors import (
    EXIT_CHECK_FAILED,
    EXIT_USAGE,
    ConfigError,
    ToolError,
    UsageError,
    excerpt,
)
from gpuinfra.paths import repo_root
from gpuinfra.review.documents import flatten
from gpuinfra.suggest import did_you_mean

MISSING = "<absent>"
# Bounds of what diff runs, each far above what it takes: one git command (a worktree of this
# repository is added in seconds), and one target's plan on one side (a minute at most here).
# Past its bound a command is ended with what it started, and diff stops with one line.
GIT_TIMEOUT_S = 300
PLAN_TIMEOUT_S = 600


@dataclass(frozen=True)
class Change:
    path: str
    old: Any
    new: Any

    def document(self) -> dict[str, Any]:
        return {"path": self.path, "old": self.old, "new": self.new}


@dataclass(frozen=True)
class Changed:
    """One keyed thing (a resource, a release, an object, an alert) present on both sides."""

    key: str
    changes: tuple[Change, ...]

    def document(self) -> dict[str, Any]:
        return {"key": self.key, "changes": [c.document() for c in self.changes]}


@dataclass(frozen=True)
class SectionDiff:
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[Changed, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def document(self) -> dict[str, Any]:
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "changed": [c.document() for c in self.changed],
        }


@dataclass(frozen=True)
class CostDelta:
    base_desired: float
    head_desired: float
    base_max: float
    head_max: float
    lacking_added: tuple[str, ...] = ()
    lacking_removed: tuple[str, ...] = ()
    # False for a stack or site only one side has: its delta is its whole (priced) cost.
    both_sides: bool = True

    @property
    def delta_known(self) -> bool:
        """Whether both totals price the same lines. A line that lost its price (a region the
        tables lack, a pool moved to spot) drops out of the head's total and would read as a
        saving; one that gained a price would read as a rise."""
        return not (self.both_sides and (self.lacking_added or self.lacking_removed))

    @property
    def unknown_because(self) -> str:
        """Why the delta is unknown: how many lines lost or gained a price."""
        reasons = []
        if self.lacking_added:
            reasons.append(f"{_lines(len(self.lacking_added))} now without a price")
        if self.lacking_removed:
            reasons.append(f"{_lines(len(self.lacking_removed))} newly priced")
        return ", ".join(reasons)

    @property
    def delta_desired(self) -> float:
        return round(self.head_desired - self.base_desired, 2)

    @property
    def delta_max(self) -> float:
        return round(self.head_max - self.base_max, 2)

    def __bool__(self) -> bool:
        return bool(
            self.delta_desired or self.delta_max or self.lacking_added or self.lacking_removed
        )

    def document(self) -> dict[str, Any]:
        return {
            "monthly_desired_usd": {
                "base": self.base_desired,
                "head": self.head_desired,
                "delta": self.delta_desired,
            },
            "monthly_max_usd": {
                "base": self.base_max,
                "head": self.head_max,
                "delta": self.delta_max,
            },
            "lacking_prices_added": list(self.lacking_added),
            "lacking_prices_removed": list(self.lacking_removed),
            "delta_known": self.delta_known,
        }


def _lines(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"


@dataclass(frozen=True)
class TargetDiff:
    """The difference of one stack or site between the base and the working tree."""

    target: str
    status: str  # added, removed, changed, unchanged, error
    errors: tuple[str, ...] = ()
    sections: dict[str, SectionDiff] = field(default_factory=dict)
    cost: CostDelta | None = None
    # The working tree's own files are wrong (its plan exited 2): the user's input to fix.
    input_error: bool = False

    def document(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "status": self.status,
            "errors": list(self.errors),
            "sections": {name: s.document() for name, s in self.sections.items()},
            "cost": self.cost.document() if self.cost is not None else None,
        }


@dataclass(frozen=True)
class VersionsDiff:
    bumped: tuple[Change, ...] = ()
    warnings: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        return {
            "bumped": [{"component": c.path, "old": c.old, "new": c.new} for c in self.bumped],
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class Report:
    base: str
    base_commit: str
    versions: VersionsDiff
    targets: tuple[TargetDiff, ...]
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return any(t.status == "error" for t in self.targets)

    @property
    def input_error(self) -> bool:
        """Whether a working-tree file is wrong (exit 2), as opposed to a plan that failed."""
        return any(t.input_error for t in self.targets)

    @property
    def added_violations(self) -> tuple[str, ...]:
        """The policy violations the working tree's plans have and the base's do not, as
        ``plan`` tells them: the change brings them in."""
        return tuple(
            f"{t.target}: policy {violation}"
            for t in self.targets
            if (section := t.sections.get("policy_violations"))
            for violation in section.added
        )

    def document(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "base_commit": self.base_commit,
            "versions": self.versions.document(),
            "targets": [t.document() for t in self.targets],
            "notes": list(self.notes),
        }


# --- comparing plan documents ----------------------------------------------------------------


def changes(old: Any, new: Any) -> tuple[Change, ...]:
    """Every leaf that differs between two documents, by path, in path order."""
    before, after = flatten(old), flatten(new)
    found = []
    for path in sorted(before.keys() | after.keys()):
        was, now = before.get(path, MISSING), after.get(path, MISSING)
        if was != now or type(was) is not type(now):
            found.append(Change(path, was, now))
    return tuple(found)


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> SectionDiff:
    """Keyed records on both sides: which keys were added, removed or changed."""
    changed = []
    for key in sorted(old.keys() & new.keys()):
        found = changes(old[key], new[key])
        if found:
            changed.append(Changed(key, found))
    return SectionDiff(
        added=tuple(sorted(new.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - new.keys())),
        changed=tuple(changed),
    )


def _resources(plan: Mapping[str, Any]) -> dict[str, Any]:
    # Pulumi allows one name twice under different parents; the parent then tells them apart.
    resources = plan.get("resources", [])
    seen = Counter(f"{r['type']} {r['name']}" for r in resources)
    keyed = {}
    for r in resources:
        key = f"{r['type']} {r['name']}"
        if seen[key] > 1:
            key += f" (parent {r.get('parent')})"
        keyed[key] = r.get("properties", {})
    return keyed


def _releases(plan: Mapping[str, Any]) -> dict[str, Any]:
    return {
        f"{r['namespace']}/{r['release']}": {"chart": r.get("chart"), "values": r.get("values")}
        for r in plan.get("helm_releases", [])
    }


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('apiVersion')} {obj.get('kind')} {where}{meta.get('name')}"


def _objects(plan: Mapping[str, Any]) -> dict[str, Any]:
    return {object_key(o): o for o in plan.get("objects", [])}


def alerts(plan: Mapping[str, Any]) -> dict[str, Any]:
    """Alert rules of every PrometheusRule object, by alert name (and group when repeated)."""
    found: dict[str, Any] = {}
    for obj in plan.get("objects", []):
        if obj.get("kind") != "PrometheusRule":
            continue
        for group in (obj.get("spec") or {}).get("groups", []):
            for rule in group.get("rules", []):
                if "alert" in rule:
                    name = str(rule["alert"])
                    key = name if name not in found else f"{group.get('name')}/{name}"
                    found[key] = rule
    return found


def _files(plan: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{f['addon']}/{f['path']}": f["content"] for f in plan.get("files", [])}


def _hosts(plan: Mapping[str, Any]) -> dict[str, Any]:
    return {h["name"]: h for h in plan.get("hosts", [])}


def _versions(plan: Mapping[str, Any]) -> dict[str, Any]:
    return dict(plan.get("versions", {}))


def _outputs(plan: Mapping[str, Any]) -> dict[str, Any]:
    return dict(plan.get("outputs", {}))


def _policy(plan: Mapping[str, Any]) -> dict[str, Any]:
    policy = plan.get("policy") or {}
    return {f"{v['policy']}: {v['message']}": v for v in policy.get("violations", [])}


def _integrity(plan: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{f['object']} {f['path']}: {f['message']}": f for f in plan.get("integrity", [])}


SECTIONS = {
    "resources": _resources,
    "helm_releases": _releases,
    "objects": _objects,
    "alerts": alerts,
    "files": _files,
    "hosts": _hosts,
    "outputs": _outputs,
    "versions": _versions,
    "policy_violations": _policy,
    "integrity": _integrity,
}


def diff_plans(
    target: str, base: Mapping[str, Any] | None, head: Mapping[str, Any] | None
) -> TargetDiff:
    """Compare two plan documents of one target (None: the target does not exist there)."""
    if base is None and head is None:
        raise ValueError(f"{target}: neither side has a plan")
    sections = {
        name: compare(pick(base or {}), pick(head or {})) for name, pick in SECTIONS.items()
    }
    sections = {name: s for name, s in sections.items() if s}
    cost = _cost(base, head)
    if base is None:
        status = "added"
    elif head is None:
        status = "removed"
    else:
        status = "changed" if sections or cost else "unchanged"
    return TargetDiff(target=target, status=status, sections=sections, cost=cost)


def _cost(base: Mapping[str, Any] | None, head: Mapping[str, Any] | None) -> CostDelta | None:
    before = (base or {}).get("cost")
    after = (head or {}).get("cost")
    if before is None and after is None:
        return None
    zero: dict[str, Any] = {"monthly_desired_usd": 0.0, "monthly_max_usd": 0.0}
    before, after = before or zero, after or zero
    lacking_before = set(before.get("lacking_prices", []))
    lacking_after = set(after.get("lacking_prices", []))
    return CostDelta(
        base_desired=float(before["monthly_desired_usd"]),
        head_desired=float(after["monthly_desired_usd"]),
        base_max=float(before["monthly_max_usd"]),
        head_max=float(after["monthly_max_usd"]),
        lacking_added=tuple(sorted(lacking_after - lacking_before)),
        lacking_removed=tuple(sorted(lacking_before - lacking_after)),
        both_sides=base is not None and head is not None,
    )


def diff_versions(base: Path, head: Path) -> VersionsDiff:
    """Version bumps between two versions.yaml files, warning on compatibility rules they break."""
    old, new = _pins(base), _pins(head)
    if old is None or new is None:
        # A file that does not load has no pins to compare: the plans of its side fail on it
        # and say why (the working tree's as the user's input, exit 2).
        return VersionsDiff()
    bumped = tuple(
        Change(name, old.get(name, MISSING), new.get(name, MISSING))
        for name in sorted(old.keys() | new.keys())
        if old.get(name) != new.get(name)
    )
    before, after = _rule_problems(base), _rule_problems(head)
    warnings = tuple(p for p in after if p not in before)
    return VersionsDiff(bumped=bumped, warnings=warnings)


def _pins(path: Path) -> dict[str, str] | None:
    """The pins of a versions.yaml: none where it is missing (a base from before it), None
    where it does not load."""
    if not path.exists():
        return {}
    try:
        loaded = versions_mod.load(path)
    except ConfigError:
        return None
    pins: dict[str, str] = {}
    for name, comp in loaded.entries():
        pins[name] = comp.version if not comp.tag else f"{comp.version} ({comp.tag})"
    for operand, value in sorted(loaded.gpu_operator.operands.items()):
        pins[f"gpu_operator.operands.{operand}"] = value
    return pins


def _rule_problems(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [f"versions.yaml: {p}" for p in versions_mod.check(versions_mod.load(path))]


# --- planning two revisions ------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    kind: str  # stack or site
    name: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"

    def exists(self, root: Path) -> bool:
        if self.kind == "stack":
            return (root / "stacks" / f"Pulumi.{self.name}.yaml").exists()
        return (root / "inventory" / self.name).is_dir()

    @property
    def argument(self) -> str:
        """The stack's name, or the site's directory relative to the checkout."""
        return self.name if self.kind == "stack" else f"inventory/{self.name}"

    def command(self, root: Path) -> list[str]:
        """What plans this target in the checkout at ``root``, with that checkout's own code."""
        if (root / "gpuinfra" / "review" / "__main__.py").exists():
            return [sys.executable, "-m", "gpuinfra.review", self.kind, self.argument]
        option = "--stack" if self.kind == "stack" else "--site"
        return [sys.executable, "-m", "gpuinfra", "plan", option, self.argument, "--format", "json"]


def targets(root: Path, *more_roots: Path) -> list[Target]:
    """Every stack and every site in any of the given checkouts."""
    found: set[Target] = set()
    for base in (root, *more_roots):
        found.update(Target("stack", env) for env in known_stacks(base))
        inventory = base / "inventory"
        if inventory.is_dir():
            found.update(
                Target("site", p.name)
                for p in inventory.iterdir()
                if any(_reviewed(base, p / name) for name in site_mod.HOSTS_FILES)
            )
    return sorted(found, key=lambda t: (t.kind != "stack", t.name))


def _reviewed(root: Path, path: Path) -> bool:
    """A file that exists and is not ignored by git (the lab's generated inventory is)."""
    if not path.exists():
        return False
    return _git_run(root, "check-ignore", "--quiet", str(path.relative_to(root))).returncode != 0


@dataclass(frozen=True)
class PlanResult:
    document: dict[str, Any] | None
    errors: tuple[str, ...] = ()
    exit_code: int = 0


class Children:
    """The planning processes running now, so that an interrupt ends them: the worker threads
    that wait on them see no KeyboardInterrupt, and the worktree they read is about to go."""

    # Seconds a planning process gets to end on SIGTERM before it is killed.
    GRACE = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()
        self._stopped = False

    def run(
        self,
        command: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        timeout: float | None = None,
    ) -> tuple[int, str, str]:
        """Run ``command`` to its end, in a process group of its own: its exit code, stdout and
        stderr. Past ``timeout`` seconds the group is killed and TimeoutExpired raised."""
        with self._lock:
            if self._stopped:
                return -signal.SIGTERM, "", "stopped"
            proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            processes.end(proc)
            raise
        finally:
            with self._lock:
                self._running.discard(proc)
        return proc.returncode, out, err

    def stop(self) -> None:
        """End every planning process with its group (SIGTERM, then SIGKILL after GRACE) and
        start no more."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.GRACE
        for proc in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
            # What the plan started and left behind goes with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def plan_in(
    root: Path, target: Target, children: Children | None = None, timeout: float | None = None
) -> PlanResult:
    """Plan one target with the code and files of the checkout at ``root``; TimeoutExpired
    where the plan runs past ``timeout`` seconds (it is ended, with what it started)."""
    if not target.exists(root):
        return PlanResult(None)
    env = dict(os.environ)
    env.update(
        GPUINFRA_ROOT=str(root),
        PYTHONPATH=os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    command = target.command(root)
    returncode, stdout, stderr = (children or Children()).run(
        command, cwd=root, env=env, timeout=timeout
    )
    proc = subprocess.CompletedProcess(command, returncode, stdout, stderr)
    if proc.returncode == EXIT_CHECK_FAILED and (whole := _whole_plan(proc.stdout)) is not None:
        # Through the command line, a plan is printed whole before a failed check ends it
        # (a policy violation, a prod pin past its end of support): the plan stands, and the
        # comparison judges the working tree's checks, not the base's.
        return PlanResult(secrets.redact(whole))
    if proc.returncode != 0:
        lines = [
            line.removeprefix("error: ")
            for line in proc.stderr.splitlines()
            if line.strip() and not line.startswith("Traceback")
        ]
        lines = [secrets.redact_text(line) for line in lines[-20:]]
        return PlanResult(
            None, tuple(lines) or (f"plan exited {proc.returncode}",), proc.returncode
        )
    # The base revision's code may predate redaction: its plan is redacted here again.
    document: dict[str, Any] = secrets.redact(json.loads(proc.stdout))
    return PlanResult(document)


def _whole_plan(stdout: str) -> dict[str, Any] | None:
    """The plan document a command line printed, or None when what it printed is not one whole
    JSON object (a revision whose exit 1 also meant an internal error prints a traceback)."""
    try:
        document = json.loads(stdout)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


class GitFailed(ToolError):
    """git ran and refused (as opposed to git missing)."""


def _git(root: Path, *args: str) -> str:
    proc = _git_run(root, *args)
    if proc.returncode != 0:
        raise GitFailed(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _git_run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git ``args`` in ``root``, its exit status left to the caller, in a process group of its
    own: past GIT_TIMEOUT_S (or on an interrupt) it is ended with what it started (a hook, a
    filter), and a ToolError names the command."""
    try:
        proc = subprocess.Popen(
            ["git", *args],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ToolError("git is not installed; gpuinfra diff needs it") from None
    try:
        out, err = proc.communicate(timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        processes.end(proc)
        what = " ".join(args[:2] if args[0] == "worktree" else args[:1])
        raise ToolError(
            f"git {what} in {root} did not finish within {GIT_TIMEOUT_S:.0f} s"
        ) from None
    except BaseException:
        processes.end(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def resolve(ref: str, root: Path) -> str:
    shown = f"--base {excerpt(repr(ref), 60)}"
    if not ref.strip():
        # An unset shell variable (--base "$BASE"): say so rather than "not a commit".
        raise UsageError(f"{shown}: empty (allowed: a commit, branch or tag, e.g. origin/main)")
    try:
        _git(root, "rev-parse", "--git-dir")
    except GitFailed:
        raise UsageError(
            f"{root}: not a git repository; gpuinfra diff compares a commit with the working tree"
        ) from None
    try:
        return _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GitFailed:
        raise UsageError(
            f"{shown}: not a commit in {root.name} (fetch it first, e.g. git fetch origin)"
        ) from None


class Worktree:
    """A detached checkout of one commit in a temporary directory, removed on exit: also on
    an interrupt, even one that comes while git adds it, and even a second one meanwhile."""

    def __init__(self, root: Path, commit: str) -> None:
        self.root = root
        self.commit = commit
        self._tmp = tempfile.TemporaryDirectory(prefix="gpuinfra-diff-")
        self.path = Path(self._tmp.name) / "base"

    def __enter__(self) -> Path:
        try:
            _git(self.root, "worktree", "add", "--detach", "--quiet", str(self.path), self.commit)
        except BaseException:
            self._remove()
            raise
        return self.path

    def __exit__(self, *exc: object) -> None:
        self._remove()

    def _remove(self) -> None:
        with _signals_held():
            removed = True
            try:
                _git(self.root, "worktree", "remove", "--force", str(self.path))
            except ToolError:
                removed = False
            finally:
                self._tmp.cleanup()
            if not removed:
                # Half added, or removed by hand: git still lists it until its entry is pruned.
                with contextlib.suppress(ToolError):
                    _git(self.root, "worktree", "prune")


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while a cleanup runs, so that it runs whole; one that came
    meanwhile is raised after it (as KeyboardInterrupt), unless an exception is on its way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if held and sys.exc_info()[0] is None:
        raise KeyboardInterrupt


def diff(
    base: str,
    *,
    only: Target | None = None,
    root: Path | None = None,
    jobs: int = 2,
    on_plan: Callable[[int, int, str], None] | None = None,
) -> Report:
    """Plan ``base`` and the working tree; compare every stack and site, or only one.

    ``on_plan(done, total, what)`` is called as each plan ends (from the thread that ran it)."""
    root = root or repo_root()
    commit = resolve(base, root)
    # The repository may be a directory of a larger git repository: its base is the same
    # directory of the base's checkout.
    prefix = _git(root, "rev-parse", "--show-prefix")
    with Worktree(root, commit) as checkout:
        base_root = checkout / prefix
        if only is not None:
            if not (only.exists(root) or only.exists(base_root)):
                known = [t.name for t in targets(root, base_root) if t.kind == only.kind]
                raise UsageError(
                    f"no {only.kind} '{only.name}' in the working tree or at {base}"
                    f"{did_you_mean(only.name, known)}; {only.kind}s: {', '.join(known) or 'none'}"
                )
            chosen = [only]
        else:
            chosen = targets(root, base_root)
        # A base from before the review path cannot plan: everything shows as added. Until the
        # review wing had a package of its own, the plan lived in gpuinfra/plan.py.
        plannable = any(
            (base_root / "gpuinfra" / where).exists() for where in ("review/plan.py", "plan.py")
        )
        notes = () if plannable else (f"{base} predates `gpuinfra plan`: every target is new.",)

        children = Children()
        jobs_list = [(side, t) for t in chosen for side in (base_root, root)]
        done = itertools.count(1)

        def plan_job(job: tuple[Path, Target]) -> PlanResult:
            side, target = job
            where = f"at {base}" if side == base_root else "in the working tree"
            if not plannable and side == base_root:
                result = PlanResult(None)
            else:
                try:
                    result = plan_in(side, target, children, timeout=PLAN_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    raise ToolError(
                        f"the plan of {target.label} {where} did not finish within "
                        f"{PLAN_TIMEOUT_S:.0f} s"
                    ) from None
            if on_plan is not None:
                on_plan(next(done), len(jobs_list), f"{target.label} {where}")
            return result

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            try:
                results = list(pool.map(plan_job, jobs_list))
            except BaseException:
                # Interrupted: the plans end now, before the worktree they read is removed.
                with _signals_held():
                    children.stop()
                    pool.shutdown(wait=True, cancel_futures=True)
                raise
        versions = diff_versions(base_root / "versions.yaml", root / "versions.yaml")
    reports = []
    for target, (before, after) in zip(chosen, _pairs(results), strict=True):
        errors = tuple(f"{base}: {e}" for e in before.errors) + after.errors
        if errors:
            reports.append(
                TargetDiff(
                    target=target.label,
                    status="error",
                    errors=errors,
                    input_error=after.exit_code == EXIT_USAGE,
                )
            )
            continue
        reports.append(diff_plans(target.label, before.document, after.document))
    return Report(
        base=base, base_commit=commit, versions=versions, targets=tuple(reports), notes=notes
    )


def _pairs(results: list[PlanResult]) -> Iterator[tuple[PlanResult, PlanResult]]:
    it = iter(results)
    return zip(it, it, strict=True)


# --- rendering -------------------------------------------------------------------------------


def usd(value: float) -> str:
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value):,.2f}"


def signed_usd(value: float) -> str:
    return ("+" if value > 0 else "") + usd(value) if value else "$0.00"


def _markdown_delta(cost: CostDelta, delta: float) -> str:
    if cost.delta_known:
        return f"**{signed_usd(delta)}**"
    return f"**unknown** ({cost.unknown_because}; priced lines {signed_usd(delta)})"


def _cell(value: Any) -> str:
    if value == MISSING:
        return "—"
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    text = text.replace("|", "\\|").replace("\n", " ")
    if len(text) > 120:
        text = text[:117] + "..."
    return f"`{text}`"


# GitHub refuses comments over 65,536 characters; keep room for the closing note.
COMMENT_LIMIT = 60_000


def render_markdown(report: Report, limit: int = COMMENT_LIMIT) -> str:
    """The report as GitHub markdown, ready to post as a pull request comment.

    Targets that do not fit in ``limit`` characters are named at the end instead of shown.
    """
    out = [f"## gpuinfra diff against `{report.base}` ({report.base_commit[:12]})", ""]
    changed = [t for t in report.targets if t.status != "unchanged"]
    summary = ", ".join(f"{t.target}: {t.status}" for t in report.targets) or "nothing to plan"
    out += [summary, ""]
    out += [f"> {note}" for note in report.notes]
    if report.notes:
        out.append("")
    out += _markdown_versions(report.versions)
    size = sum(len(line) + 1 for line in out)
    left_out = []
    for target in changed:
        block = _markdown_target(target)
        block_size = sum(len(line) + 1 for line in block)
        if size + block_size > limit:
            left_out.append(target.target)
            continue
        out += block
        size += block_size
    if left_out:
        out += [
            f"Too long for one comment; not shown: {', '.join(left_out)}. Run "
            f"`gpuinfra diff --base {report.base} --stack <env>` for the full report.",
            "",
        ]
    if not changed and not report.versions.bumped:
        out += ["No change to any stack or site.", ""]
    return "\n".join(out).rstrip() + "\n"


def _markdown_versions(versions: VersionsDiff) -> list[str]:
    if not versions.bumped and not versions.warnings:
        return []
    out = ["### Versions", ""]
    if versions.bumped:
        out += ["| component | old | new |", "|---|---|---|"]
        out += [f"| {c.path} | {_cell(c.old)} | {_cell(c.new)} |" for c in versions.bumped]
        out.append("")
    out += [f"> **Warning:** {w}" for w in versions.warnings]
    if versions.warnings:
        out.append("")
    return out


_TITLES = {
    "resources": "Resources",
    "helm_releases": "Helm releases and values",
    "objects": "Kubernetes objects",
    "alerts": "Alerts",
    "files": "Add-on files",
    "hosts": "Hosts",
    "outputs": "Stack outputs",
    "versions": "Pinned versions in force",
    "policy_violations": "Policy violations",
    "integrity": "Integrity findings",
}


def _markdown_target(target: TargetDiff) -> list[str]:
    out = [f"### {target.target}: {target.status}", ""]
    if target.errors:
        out += ["The plan failed:", "", "```", *target.errors, "```", ""]
        return out
    if target.cost is not None and target.cost:
        c = target.cost
        out += [
            "| monthly cost | base | head | delta |",
            "|---|---|---|---|",
            f"| at desired size | {usd(c.base_desired)} | {usd(c.head_desired)} | "
            f"{_markdown_delta(c, c.delta_desired)} |",
            f"| at max size | {usd(c.base_max)} | {usd(c.head_max)} | "
            f"{_markdown_delta(c, c.delta_max)} |",
            "",
        ]
        out += [f"- now lacking a price: {item}" for item in c.lacking_added]
        out += [f"- no longer lacking a price: {item}" for item in c.lacking_removed]
        if c.lacking_added or c.lacking_removed:
            out.append("")
    if target.status in ("added", "removed"):
        counts = [
            f"{len(s.added or s.removed)} {_TITLES[name].lower()}"
            for name, s in target.sections.items()
            if name not in ("versions", "alerts")
        ]
        return [*out, f"{target.status.capitalize()}: {', '.join(counts)}.", ""]
    for name, section in target.sections.items():
        if name == "versions":
            out += ["Pinned versions in force changed (see **Versions**).", ""]
            continue
        out += [f"**{_TITLES[name]}**", ""]
        out += [f"- added `{key}`" for key in section.added]
        out += [f"- removed `{key}`" for key in section.removed]
        for item in section.changed:
            out += [
                f"<details><summary>changed <code>{item.key}</code> "
                f"({len(item.changes)} {'property' if len(item.changes) == 1 else 'properties'})"
                "</summary>",
                "",
                "| property | old | new |",
                "|---|---|---|",
            ]
            out += [f"| `{c.path}` | {_cell(c.old)} | {_cell(c.new)} |" for c in item.changes]
            out += ["", "</details>"]
        out.append("")
    return out
