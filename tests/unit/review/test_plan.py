"""``gpuinfra plan`` and ``gpuinfra cost`` through the real CLI: golden plans, determinism, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuinfra import lab
from gpuinfra.review import diff
from tests.conftest import ROOT, SUPPORT_TABLE_DAY, Result, run_cli, run_main, user_repo
from tests.unit.review.conftest import GOLDEN, staging_serves_behind_a_gateway

# Plans of prod are judged on the support table's day, not the calendar's (tests/conftest.py).
AS_OF = ("--as-of", SUPPORT_TABLE_DAY)

TARGETS = {
    "stack-dev": ("--stack", "dev"),
    "stack-staging": ("--stack", "staging"),
    "stack-prod": ("--stack", "prod"),
    "site-example": ("--site", "inventory/example"),
}


def explain(name: str, golden: str, actual: str) -> str:
    """What differs, in the words of ``gpuinfra diff``, so a failure says what changed."""
    result = diff.diff_plans(name, json.loads(golden), json.loads(actual))
    lines = [f"plan of {name} differs from tests/golden/plan-{name}.json:"]
    for section, found in result.sections.items():
        lines += [f"  {section}: added {key}" for key in found.added]
        lines += [f"  {section}: removed {key}" for key in found.removed]
        for item in found.changed:
            lines += [
                f"  {section}: {item.key}: {c.path}: {c.old!r} -> {c.new!r}"
                for c in item.changes[:5]
            ]
    if result.cost:
        lines.append(f"  cost: {result.cost.document()}")
    if len(lines) == 1:
        lines.append("  (same content, different bytes: ordering or formatting)")
    lines.append("If the change is intended: GPUINFRA_UPDATE_GOLDEN=1 pytest tests/unit/review")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def planned() -> dict[str, Result]:
    """Each target planned once through the CLI, shared by the tests that read the output."""
    return {}


def plan_of(planned: dict[str, Result], name: str) -> Result:
    if name not in planned:
        planned[name] = run_cli("plan", *TARGETS[name], "--format", "json", *AS_OF)
    return planned[name]


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_plan_matches_golden_file(
    name: str, update_golden: bool, planned: dict[str, Result]
) -> None:
    result = plan_of(planned, name)
    assert result.code == 0, result.stderr
    golden = GOLDEN / f"plan-{name}.json"
    if update_golden:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(result.stdout, encoding="utf-8")
    assert golden.exists(), f"{golden} is missing; create it with GPUINFRA_UPDATE_GOLDEN=1"
    expected = golden.read_text(encoding="utf-8")
    assert result.stdout == expected, explain(name, expected, result.stdout)


def test_every_golden_file_has_a_target() -> None:
    stale = sorted(p.name for p in GOLDEN.glob("plan-*.json") if p.name[5:-5] not in TARGETS)
    assert not stale, f"golden files without a plan target: {stale}"


def test_two_plans_of_the_same_commit_are_byte_identical(planned: dict[str, Result]) -> None:
    first = plan_of(planned, "stack-prod")
    assert first.code == 0, first.stderr
    # Another process with another hash seed: set and dict order must not leak into the plan.
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuinfra", "plan", "--stack", "prod", "--format", "json", *AS_OF],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": seed},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == first.stdout
    assert str(ROOT) not in first.stdout, "a plan must not carry absolute paths"


def test_stack_plan_shows_what_a_reviewer_needs() -> None:
    plan = json.loads((GOLDEN / "plan-stack-prod.json").read_text())
    assert plan["kind"] == "stack" and plan["stack"] == "prod"
    types = {r["type"] for r in plan["resources"]}
    assert "aws:eks/cluster:Cluster" in types
    releases = {r["release"]: r for r in plan["helm_releases"]}
    assert (
        releases["gpu-operator"]["chart"]["version"] == plan["versions"]["gpu_operator"]["version"]
    )
    assert releases["gpu-operator"]["values"], "full values, not a summary"
    assert any(o["kind"] == "PrometheusRule" for o in plan["objects"])
    assert plan["policy"]["passed"] is True, plan["policy"]["violations"]
    assert plan["cost"]["monthly_desired_usd"] > 0
    text = json.dumps(plan["resources"])
    assert "<computed>" in text, "cloud-side values are shown as unresolved"


def test_site_plan_lists_hosts_roles_and_versions() -> None:
    plan = json.loads((GOLDEN / "plan-site-example.json").read_text())
    assert plan["kind"] == "site"
    assert plan["hosts"], "the example site has hosts"
    for host in plan["hosts"]:
        driver = host["versions"]["nvidia_driver"]
        assert driver["version"] == plan["versions"][f"nvidia_driver.{driver['source']}"]["version"]
    assert any("nvidia_driver" in host["roles"] for host in plan["hosts"])
    assert plan["helm_releases"], "the site's add-ons are planned"


def invalid_root(tmp_path: Path, edit: tuple[str, str]) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "stacks", root / "stacks")
    shutil.copy(ROOT / "versions.yaml", root / "versions.yaml")
    stack = root / "stacks" / "Pulumi.dev.yaml"
    text = stack.read_text()
    assert edit[0] in text
    stack.write_text(text.replace(edit[0], edit[1], 1))
    return root


def test_plan_of_an_invalid_stack_is_one_line_and_exit_2(tmp_path: Path) -> None:
    root = invalid_root(tmp_path, ("instanceType: g6.xlarge", "instanceType: g6.xlarg"))
    result = run_cli("plan", "--stack", "dev", "--format", "json", root=root)
    assert result.code == 2, result
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1, errors
    assert errors[0].startswith(
        "error: stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].instanceType:"
    )
    assert "did you mean 'g6.xlarge'?" in errors[0]


def test_a_stack_serving_triton_behind_a_gateway_is_planned_with_its_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Gateway API's CRDs come with the cluster's gateway, not with a release: what config
    check accepts, plan plans."""
    staging_serves_behind_a_gateway(user_repo(tmp_path / "repo", monkeypatch))
    code, _, err = run_main(capsys, "config", "check", "--stack", "staging")
    assert (code, err) == (0, "")
    code, out, err = run_main(capsys, "plan", "--stack", "staging", "--format", "json")
    assert code == 0, err
    (route,) = [o for o in json.loads(out)["objects"] if o["kind"] == "HTTPRoute"]
    assert (route["metadata"]["namespace"], route["metadata"]["name"]) == (
        "triton",
        "triton-vision",
    )
    backends = route["spec"]["rules"][0]["backendRefs"]
    assert [(b["name"], b["weight"]) for b in backends] == [
        ("triton-vision", 90),
        ("triton-vision-canary", 10),
    ]


def test_plan_needs_one_target() -> None:
    result = run_cli("plan")
    assert result.code == 2
    assert result.stderr.strip() == "error: give exactly one of --stack ENV or --site DIR"


def test_plan_of_an_unknown_stack_names_the_known_ones() -> None:
    result = run_cli("plan", "--stack", "prd")
    assert result.code == 2
    assert "did you mean 'prod'?" in result.stderr


def test_cost_command_reports_lines_dates_and_lacking_prices() -> None:
    result = run_cli("cost", "--stack", "prod", "--format", "json")
    assert result.code == 0, result.stderr
    estimate = json.loads(result.stdout)
    assert estimate["prices"]["instances"]["as_of"] == "2026-07-20"
    categories = {line["category"] for line in estimate["lines"]}
    assert {"gpu-instances", "storage", "network"} <= categories
    assert "NAT gateways" in estimate["lacking_prices"]
    table = run_cli("cost", "--stack", "prod")
    assert table.code == 0
    assert "Monthly cost estimate: prod" in table.stdout


def test_markdown_and_table_show_releases_policy_and_cost() -> None:
    from gpuinfra.cli import review
    from gpuinfra.cli.console import render_text
    from gpuinfra.review import plan as plan_mod

    document = json.loads((GOLDEN / "plan-stack-prod.json").read_text())
    text = plan_mod.render_markdown(document)
    assert text.startswith("## Plan of stack `prod`\n")
    assert "<details><summary>values of gpu-operator</summary>" in text
    assert "### stack prod: policy pack (passes)" in text
    total = f"${document['cost']['monthly_desired_usd']:,.2f}"
    assert f"| **total** | priced lines | {total} |" in text
    # A placeholder in a table cell is text, not an HTML tag GitHub would drop.
    outside_code = text.split("```")[::2]
    assert not any("<objects>" in part for part in outside_code)
    assert "data=&lt;objects>" in text
    table = render_text(review.plan_tables(document))
    assert "Monthly cost estimate: prod (us-east-1)" in table
    assert "instance prices 2026-07-20" in table


def test_redactor_hides_stand_ins_whole_and_inside_documents(tmp_path: Path) -> None:
    from gpuinfra.review import plan as plan_mod

    redact = plan_mod.Redactor(tmp_path, {"vpc-main-id", "arn:aws:s3:::models-bucket"})
    policy = '{"Resource": ["arn:aws:s3:::models-bucket", "arn:aws:s3:::models-bucket/*"]}'
    assert redact(
        {
            "vpcId": "vpc-main-id",
            "policy": policy,
            "size": 2.0,
            "ratio": 0.5,
            "script": f"{tmp_path}/stacks/run.sh",
            "cidr": "10.0.0.0/16",
        }
    ) == {
        "vpcId": "<computed>",
        "policy": '{"Resource": ["<computed>", "<computed>/*"]}',
        "size": 2,
        "ratio": 0.5,
        "script": "stacks/run.sh",
        "cidr": "10.0.0.0/16",
    }


def test_a_site_without_integrity_warnings_says_none_instead_of_an_empty_table(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "lab" / "group_vars", site / "group_vars")
    settings = lab.Settings(prefix="gpuinfraunit", root=tmp_path)
    host = lab.Host("gpuinfraunit-1", 2401, "running")
    lab.write_inventory(settings, [host], "http://127.0.0.1:8000/", "0" * 40)
    settings.hosts_file.rename(site / "hosts.yml")
    result = run_cli("plan", "--site", str(site))
    assert result.code == 0, result.stderr
    assert "site site: integrity warnings (no errors): none" in result.stdout.splitlines()
    assert "what to change" not in result.stdout
    assert "site site: Kubernetes objects" in result.stdout


def test_a_hosts_plan_shows_the_containerd_its_source_installs_and_each_releases_build(
    tmp_path: Path,
) -> None:
    site = tmp_path / "mysite"
    shutil.copytree(ROOT / "inventory" / "example", site)
    (site / "host_vars").mkdir()
    (site / "host_vars" / "gpu-node-02.yml").write_text(
        "nvidia_container_toolkit_containerd_source: docker\n"
    )
    result = run_cli("plan", "--site", str(site), "--format", "json")
    assert result.code == 0, result.stderr
    hosts = {h["name"]: h["versions"] for h in json.loads(result.stdout)["hosts"]}
    pins = yaml.safe_load((ROOT / "versions.yaml").read_text())
    debian, docker = pins["containerd"], pins["containerd_docker"]
    assert hosts["gpu-node-01"]["containerd"] == {
        "source": "distro",
        "version": debian["version"],
        "by_release": {
            "bookworm": debian["version"],
            "trixie": debian["releases"]["trixie"]["version"],
        },
    }
    assert hosts["gpu-node-02"]["containerd"]["source"] == "docker"
    assert hosts["gpu-node-02"]["containerd"]["version"] == docker["version"]
    driver = pins["nvidia_driver"]["distro"]
    trixie = driver["releases"]["trixie"]
    assert hosts["gpu-node-01"]["nvidia_driver"]["by_release"] == {
        "bookworm": f"{driver['version']} (CUDA {driver['cuda']})",
        "trixie": f"{trixie['version']} (CUDA {trixie['cuda']})",
    }
