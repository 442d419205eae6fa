"""``gpuinfra diff`` on real commits in a scratch clone: a driver bump, a pool resize, an alert."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import catalog
from gpuinfra.config import load_stack
from gpuinfra.review import cost, diff
from tests.conftest import ROOT, Result, left_running, run_at_terminal, run_cli, run_main
from tests.unit.review.conftest import git, stand_in_repo, worktrees

Clone = Callable[[str, Callable[[Path], None]], Path]


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def run_diff(repo: Path, *args: str) -> Result:
    return run_cli("diff", "--base", "origin/main", *args, root=repo, cwd=repo)


def report_of(result: Result) -> dict[str, Any]:
    assert result.code == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def target(report: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [t for t in report["targets"] if t["target"] == name]
    return found


def test_driver_bump_is_reported_old_to_new_with_no_cost(clone: Clone) -> None:
    old = "580.159.04"
    new = "580.172.01"

    def bump(repo: Path) -> None:
        versions = repo / "versions.yaml"
        text = versions.read_text().replace(f'"{old}"', f'"{new}"')
        versions.write_text(text.replace(f'"{old}-1"', f'"{new}-1"'))  # and its package build

    repo = clone("Bump the 580 driver", bump)
    report = report_of(run_diff(repo, "--stack", "prod", "--format", "json"))
    bumped = {b["component"]: (b["old"], b["new"]) for b in report["versions"]["bumped"]}
    assert bumped["nvidia_driver.cuda_repo"] == (old, new)
    assert bumped["nvidia_driver.preinstalled"] == (old, new)
    assert report["versions"]["warnings"] == []
    prod = target(report, "stack prod")
    assert prod["status"] == "changed"
    assert prod["cost"]["monthly_desired_usd"]["delta"] == 0
    assert prod["cost"]["monthly_max_usd"]["delta"] == 0


def test_node_pool_resize_changes_the_node_group_and_costs_more(clone: Clone) -> None:
    # The L40S pool, which has room under its maxSize and prod's budget (growing the H100 pool
    # past its maxSize breaks the cost ceiling, which fails the diff).
    index = 1
    pool = load_stack("prod", ROOT).node_pools[index]
    grow = 2
    assert pool.desired_size + grow <= pool.max_size

    def resize(repo: Path) -> None:
        path = repo / "stacks" / "Pulumi.prod.yaml"
        document = yaml.safe_load(path.read_text())
        entry = document["config"]["gpuinfra:nodePools"][index]
        entry["desiredSize"] = pool.desired_size + grow
        entry["maxSize"] = max(pool.max_size, pool.desired_size + grow)
        path.write_text(yaml.safe_dump(document, sort_keys=False))

    repo = clone("Grow the prod GPU pool", resize)
    result = run_diff(repo, "--stack", "prod", "--format", "json")
    prod = target(report_of(result), "stack prod")
    assert prod["status"] == "changed"
    changes = [
        (item["key"], c)
        for item in prod["sections"]["resources"]["changed"]
        for c in item["changes"]
        if c["path"].endswith("desiredSize")
    ]
    assert changes, prod["sections"]["resources"]
    assert all(
        (c["old"], c["new"]) == (pool.desired_size, pool.desired_size + grow) for _, c in changes
    )
    hourly = catalog.instance_types()[pool.instance_type].on_demand_usd_per_hour
    assert hourly is not None
    expected = grow * round(hourly * cost.HOURS_PER_MONTH, 2) + grow * pool.root_volume_gib * 0.08
    assert prod["cost"]["monthly_desired_usd"]["delta"] == round(expected, 2)


def test_a_region_without_prices_is_no_saving(clone: Clone) -> None:
    def move(repo: Path) -> None:
        path = repo / "stacks" / "Pulumi.staging.yaml"
        path.write_text(path.read_text().replace("us-east-1", "us-west-2"))

    repo = clone("Move staging to us-west-2", move)
    result = run_diff(repo, "--stack", "staging", "--format", "markdown")
    # The cost ceiling cannot be checked without prices: a policy violation the change adds.
    assert result.code == 1, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| at ")]
    assert len(rows) == 2, result.stdout
    for row in rows:
        delta = row.rstrip(" |").rsplit(" | ", 1)[1]
        assert delta.startswith("**unknown** (4 lines now without a price; priced lines -$"), row


def test_alert_added_is_reported_by_name(clone: Clone) -> None:
    def add_alert(repo: Path) -> None:
        path = repo / "gpuinfra" / "addons" / "data" / "gpu-alerts.yaml"
        rules = yaml.safe_load(path.read_text())
        rules["groups"][0]["rules"].append(
            {
                "alert": "GpuPowerCapped",
                "expr": "DCGM_FI_DEV_POWER_USAGE > 690",
                "for": "15m",
                "labels": {"severity": "info"},
                "annotations": {"summary": "GPU {{ $labels.gpu }} runs at its power cap"},
            }
        )
        path.write_text(yaml.safe_dump(rules, sort_keys=False))

    repo = clone("Alert on power-capped GPUs", add_alert)
    result = run_diff(repo, "--stack", "prod", "--format", "markdown")
    assert result.code == 0, result.stderr
    comment = result.stdout
    assert comment.startswith("## gpuinfra diff against `origin/main`")
    assert "stack prod: changed" in comment
    alerts = comment.split("**Alerts**", 1)[1].split("**", 1)[0]
    assert alerts.strip() == "- added `GpuPowerCapped`"
    assert "| monthly cost |" not in comment, "an alert costs nothing"


def test_bump_that_breaks_a_compatibility_rule_is_a_warning(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    head = tmp_path / "head.yaml"
    text = (ROOT / "versions.yaml").read_text()
    base.write_text(text)
    head.write_text(text.replace('version: "0.19.2"', 'version: "0.15.0"', 1))
    result = diff.diff_versions(base, head)
    assert [(c.path, c.old, c.new) for c in result.bumped] == [("kueue", "0.19.2", "0.15.0")]
    (warning,) = result.warnings
    assert warning.startswith("versions.yaml: kueue.version: kueue 0.15 is not in the Kubernetes")


def test_unknown_base_is_a_usage_error(base_repo: Path) -> None:
    result = run_cli("diff", "--base", "no-such-ref", root=base_repo, cwd=base_repo)
    assert result.code == 2
    assert result.stderr.startswith("error: --base 'no-such-ref': not a commit")


def test_host_moved_to_another_driver_source_changes_only_that_host(clone: Clone) -> None:
    def move(repo: Path) -> None:
        host_vars = repo / "inventory" / "example" / "host_vars"
        host_vars.mkdir(exist_ok=True)
        (host_vars / "gpu-node-02.yml").write_text("nvidia_driver_source: cuda_repo\n")

    repo = clone("Move gpu-node-02 to the CUDA repository driver", move)
    report = report_of(run_diff(repo, "--site", "example", "--format", "json"))
    site = target(report, "site example")
    assert site["status"] == "changed"
    hosts = site["sections"]["hosts"]
    assert [item["key"] for item in hosts["changed"]] == ["gpu-node-02"]
    changes = {c["path"]: (c["old"], c["new"]) for c in hosts["changed"][0]["changes"]}
    pins = yaml.safe_load((ROOT / "versions.yaml").read_text())["nvidia_driver"]
    assert changes["versions.nvidia_driver.version"] == (
        pins["distro"]["version"],
        pins["cuda_repo"]["version"],
    )
    assert changes["roles.nvidia_driver.nvidia_driver_source"] == ("distro", "cuda_repo")
    assert site["cost"] is None, "a site has no cloud cost"


def test_bump_that_breaks_a_rule_warns_and_fails_the_diff(clone: Clone) -> None:
    def bump(repo: Path) -> None:
        replace(repo / "versions.yaml", 'version: "0.19.2"', 'version: "0.15.0"')

    repo = clone("Downgrade Kueue", bump)
    result = run_diff(repo, "--stack", "dev", "--format", "markdown")
    assert result.code == 1
    assert "| kueue | `0.19.2` | `0.15.0` |" in result.stdout
    assert "> **Warning:** versions.yaml: kueue.version: kueue 0.15" in result.stdout
    assert "### stack dev: error" in result.stdout
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: stack dev: versions.yaml: kueue.version: kueue 0.15")


def test_a_versions_file_that_does_not_load_is_the_inputs_error_not_every_pin_removed(
    clone: Clone,
) -> None:
    def misspell(repo: Path) -> None:
        replace(repo / "versions.yaml", 'version: "0.19.2"', 'versions: "0.19.2"')

    repo = clone("Misspell Kueue's version", misspell)
    result = run_diff(repo, "--stack", "dev", "--format", "json")
    assert result.code == 2, result.stderr
    report = json.loads(result.stdout)
    assert report["versions"] == {"bumped": [], "warnings": []}
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        "error: stack dev: versions.yaml: kueue.versions: unknown key 'versions'; "
        "did you mean 'version'?"
    )


def without_in_base(
    base_repo: Path,
    tmp_path: Path,
    path: str,
    base: Callable[[Path], None] = lambda _: None,
    head: Callable[[Path], None] = lambda _: None,
) -> Path:
    """A clone whose HEAD~1 lacks ``path`` (older code), edited by ``base``, and whose HEAD has
    it back, edited by ``head``."""
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(base_repo), str(repo)], check=True)
    git(repo, "rm", "--quiet", path)
    base(repo)
    git(repo, "commit", "--quiet", "--all", "--message", f"Before {path}")
    git(repo, "checkout", "--quiet", "origin/main", "--", path)
    head(repo)
    git(repo, "commit", "--quiet", "--all", "--message", f"Bring back {path}")
    return repo


def diff_with_parent(repo: Path, stack: str) -> Result:
    return run_cli(
        "diff", "--base", "HEAD~1", "--stack", stack, "--format", "json", root=repo, cwd=repo
    )


def test_base_from_before_the_review_path_shows_everything_added(
    base_repo: Path, tmp_path: Path
) -> None:
    repo = without_in_base(base_repo, tmp_path, "gpuinfra/review/plan.py")
    report = report_of(diff_with_parent(repo, "dev"))
    assert report["notes"] == ["HEAD~1 predates `gpuinfra plan`: every target is new."]
    dev = target(report, "stack dev")
    assert dev["status"] == "added"
    assert dev["sections"]["resources"]["added"], "every resource is new"
    assert dev["sections"]["resources"]["removed"] == []


def test_diff_from_a_worktree_reports_that_worktrees_commit(
    base_repo: Path, tmp_path: Path
) -> None:
    """The installed command works on the repository the user stands in, not on its own."""
    worktree = tmp_path / "worktree"
    git(base_repo, "worktree", "add", "--quiet", "-b", "bump-driver", str(worktree))
    try:
        replace(worktree / "versions.yaml", '"580.159.04"', '"580.172.01"')
        replace(worktree / "versions.yaml", '"580.159.04-1"', '"580.172.01-1"')
        git(worktree, "commit", "--quiet", "--all", "--message", "Bump the 580 driver")
        # The console script, as a user runs it: `python -m` would import the worktree's own code.
        command = Path(sys.executable).parent / "gpuinfra"
        args = ["diff", "--base", "HEAD~1", "--stack", "prod", "--format", "json"]
        env = {k: v for k, v in os.environ.items() if k != "GPUINFRA_ROOT"}
        proc = subprocess.run(
            [str(command), *args], cwd=worktree, env=env, capture_output=True, text=True
        )
        report = report_of(Result(proc.returncode, proc.stdout, proc.stderr))
        bumped = {b["component"]: (b["old"], b["new"]) for b in report["versions"]["bumped"]}
        assert bumped["nvidia_driver.cuda_repo"] == ("580.159.04", "580.172.01")
    finally:
        git(base_repo, "worktree", "remove", "--force", str(worktree))
        git(base_repo, "branch", "--quiet", "-D", "bump-driver")


def test_a_repository_in_a_directory_of_a_larger_one_is_compared_with_that_directory(
    base_repo: Path, tmp_path: Path
) -> None:
    """gpuinfra in a directory of a monorepo: the base is planned from the same directory."""
    mono = tmp_path / "mono"
    infra = mono / "infra" / "gpu"
    infra.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", "HEAD"], cwd=base_repo, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(infra)], input=archive, check=True)
    git(mono, "init", "--quiet", "--initial-branch=main")
    git(mono, "add", "--all")
    git(mono, "commit", "--quiet", "--message", "base")
    replace(infra / "versions.yaml", '"580.159.04"', '"580.172.01"')
    replace(infra / "versions.yaml", '"580.159.04-1"', '"580.172.01-1"')
    result = run_cli(
        "diff", "--base", "HEAD", "--stack", "dev", "--format", "json", root=infra, cwd=infra
    )
    report = report_of(result)
    assert report["notes"] == []
    assert target(report, "stack dev")["status"] == "changed"
    bumped = {b["component"]: (b["old"], b["new"]) for b in report["versions"]["bumped"]}
    assert bumped == {"nvidia_driver.cuda_repo": ("580.159.04", "580.172.01")}


def review_entry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuinfra.review", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_review_entry_point_plans_what_the_command_line_plans() -> None:
    """What diff runs in the base worktree: the library's plan, the CLI's document."""
    entry = review_entry("stack", "dev")
    assert entry.returncode == 0, entry.stderr
    cli = run_cli("plan", "--stack", "dev", "--format", "json")
    assert cli.code == 0, cli.stderr
    assert json.loads(entry.stdout) == json.loads(cli.stdout)

    unknown = review_entry("stack", "nope")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: ") and "nope" in unknown.stderr
    assert review_entry("cluster", "dev").returncode == 2


def test_a_base_without_the_review_entry_point_is_planned_through_its_command_line(
    base_repo: Path, tmp_path: Path
) -> None:
    def bump(repo: Path) -> None:
        replace(repo / "versions.yaml", '"580.159.04"', '"580.172.01"')
        replace(repo / "versions.yaml", '"580.159.04-1"', '"580.172.01-1"')

    repo = without_in_base(base_repo, tmp_path, "gpuinfra/review/__main__.py", head=bump)
    assert diff.Target("stack", "prod").command(repo)[1:3] == ["-m", "gpuinfra.review"]
    report = report_of(diff_with_parent(repo, "prod"))
    prod = target(report, "stack prod")
    assert prod["status"] != "added", "the base was planned, through its command line"
    bumped = {b["component"]: (b["old"], b["new"]) for b in report["versions"]["bumped"]}
    assert bumped["nvidia_driver.cuda_repo"] == ("580.159.04", "580.172.01")


def test_a_base_whose_command_line_plan_fails_a_check_is_still_compared(
    base_repo: Path, tmp_path: Path
) -> None:
    # Through its command line, a base prints the whole plan and then exits 1 for a failed
    # check: here the prod budget it held was $1. The diff compares that plan, and the change
    # that raises the budget removes the violation.
    limits = Path("policies", "limits.yaml")

    def starve(repo: Path) -> None:
        replace(repo / limits, "monthlyBudgetUsd: 100000", "monthlyBudgetUsd: 1")
        base_plan = run_cli("plan", "--stack", "prod", "--format", "json", root=repo, cwd=repo)
        assert base_plan.code == 1, "the base's own plan fails its budget"

    def feed(repo: Path) -> None:
        replace(repo / limits, "monthlyBudgetUsd: 1\n", "monthlyBudgetUsd: 100000\n")

    repo = without_in_base(
        base_repo, tmp_path, "gpuinfra/review/__main__.py", base=starve, head=feed
    )
    prod = target(report_of(diff_with_parent(repo, "prod")), "stack prod")
    assert prod["status"] != "added", "the base was planned"
    (removed,) = prod["sections"]["policy_violations"]["removed"]
    assert removed.startswith("monthly-cost-ceiling: ")


def test_a_change_that_adds_a_policy_violation_fails_the_diff(clone: Clone) -> None:
    def grow(repo: Path) -> None:
        replace(repo / "stacks" / "Pulumi.dev.yaml", "maxSize: 2", "maxSize: 3")

    repo = clone("Let the dev pool grow to three nodes", grow)
    result = run_diff(repo, "--stack", "dev", "--format", "json")
    assert result.code == 1, result.stderr
    # The diff is written first, as for any failed check, then one line per added violation.
    dev = target(json.loads(result.stdout), "stack dev")
    (added,) = dev["sections"]["policy_violations"]["added"]
    assert added.startswith("monthly-cost-ceiling: ")
    (line,) = result.stderr.strip().splitlines()
    assert line == f"error: stack dev: policy {added}"


def test_an_unchanged_target_is_one_line_not_an_empty_table(clone: Clone) -> None:
    repo = clone(
        "Reword the README", lambda root: replace(root / "README.md", "# gpuinfra", "# GPUs")
    )
    result = run_diff(repo, "--stack", "dev")
    assert result.code == 0, result.stderr
    assert "stack dev: unchanged" in result.stdout.splitlines()
    assert "section" not in result.stdout


# A planner that never finishes, with a helper of its own: it writes both pids where the test
# reads them.
HANGING_PLANNER = """\
import os, subprocess, sys, time
helper = subprocess.Popen(["sleep", "300"])
with open(os.environ["GPUINFRA_TEST_PIDS"], "w") as pids:
    pids.write(f"{os.getpid()} {helper.pid}")
time.sleep(300)
"""


def assert_ended_by_its_bound(
    capsys: pytest.CaptureFixture[str], repo: Path, pids: Path, line: str
) -> None:
    """``diff --base HEAD --stack dev`` in ``repo`` ends soon with exit 3 and ``line`` alone;
    the processes whose PIDs ``pids`` holds are gone, and so is the base's worktree."""
    started = time.monotonic()
    code, out, err = run_main(capsys, "diff", "--base", "HEAD", "--stack", "dev")
    assert time.monotonic() - started < 30
    assert (code, out) == (3, "")
    assert err.splitlines() == [line]
    assert left_running(pids) == []
    assert worktrees(repo) == [str(repo)]


def test_a_base_plan_that_never_ends_is_ended_with_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = stand_in_repo(tmp_path / "repo", HANGING_PLANNER)
    # The working tree plans at once; only the base's plan hangs.
    (repo / "gpuinfra" / "review" / "__main__.py").write_text("print('{}')\n")
    pids = tmp_path / "pids"
    monkeypatch.setenv("GPUINFRA_TEST_PIDS", str(pids))
    monkeypatch.setenv("GPUINFRA_ROOT", str(repo))
    monkeypatch.chdir(repo)
    monkeypatch.setattr(diff, "PLAN_TIMEOUT_S", 2)
    assert_ended_by_its_bound(
        capsys, repo, pids, "error: the plan of stack dev at HEAD did not finish within 2 s"
    )


def test_a_git_command_that_never_ends_is_ended_with_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = stand_in_repo(tmp_path / "repo", "print('{}')\n")
    # git as it is, but adding a worktree waits without end (a hook, a filter), with a helper.
    real_git = shutil.which("git")
    pids = tmp_path / "pids"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = worktree ] && [ "$2" = add ]; then sleep 300 & echo $$ $! > {pids}; wait; fi\n'
        f'exec {real_git} "$@"\n'
    )
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GPUINFRA_ROOT", str(repo))
    monkeypatch.chdir(repo)
    monkeypatch.setattr(diff, "GIT_TIMEOUT_S", 2)
    assert_ended_by_its_bound(
        capsys, repo, pids, f"error: git worktree add in {repo} did not finish within 2 s"
    )


def test_at_a_terminal_diff_says_how_far_its_plans_are(clone: Clone) -> None:
    """Each plan takes seconds: at a terminal a line counts them as they end, and the report
    follows."""

    def grow_dev(repo: Path) -> None:
        replace(repo / "stacks" / "Pulumi.dev.yaml", "desiredSize: 0", "desiredSize: 1")

    repo = clone("Grow the dev pool", grow_dev)
    result = run_at_terminal("diff", "--base", "origin/main", "--stack", "dev", root=repo, cwd=repo)
    assert result.code == 0, result.stdout
    assert "diff: 1 of 2 plans done (stack dev " in result.stdout
    assert "diff: 2 of 2 plans done (stack dev " in result.stdout
    assert "desiredSize" in result.stdout
