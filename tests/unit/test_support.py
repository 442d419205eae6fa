"""Support windows: each pin against its release line's dated end of support."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

from gpuinfra import support, versions
from tests.conftest import ROOT, run_cli

PINS = versions.pinned()


def states(today: dt.date) -> dict[tuple[str, str], str]:
    return {(f.key, f.message.split(" ")[0]): f.state for f in support.check(PINS, today)}


def test_every_dated_line_names_its_source_and_a_real_date() -> None:
    data = support.table()
    dt.date.fromisoformat(data["as_of"])
    for family, entry in data["lines"].items():
        assert entry["source"].startswith("https://"), family
        for line, window in entry["ends"].items():
            assert dt.date.fromisoformat(window["end"]) > dt.date(2020, 1, 1), (family, line)


def test_a_pin_past_its_end_and_one_close_to_it() -> None:
    findings = {
        f.key + " " + f.message.split(":")[0]: f for f in support.check(PINS, dt.date(2026, 12, 1))
    }
    r535 = next(f for f in findings.values() if f.key == "nvidia_driver.distro")
    assert r535.state == "past"
    assert r535.message.startswith("driver branch R535 ended 2026-06-30")
    assert "docs.nvidia.com" in r535.message
    containerd = next(f for f in findings.values() if f.key == "containerd")
    assert (containerd.state, containerd.message.split(";")[0]) == (
        "past",
        "containerd 1.6 ended 2025-07-23",
    )
    eks = next(f for f in support.check(PINS, dt.date(2027, 2, 1)) if "EKS" in f.message)
    assert eks.state == "soon"
    assert eks.message.startswith("EKS 1.35 standard support ends 2027-03-27, in 54 day(s)")


def test_the_same_pins_a_year_earlier_are_supported() -> None:
    found = {
        f.key: f.state
        for f in support.check(PINS, dt.date(2025, 6, 1))
        if f.key == "nvidia_driver.distro"
    }
    assert found == {"nvidia_driver.distro": "ok"}


def test_lines_without_a_date_say_so_instead_of_passing() -> None:
    undated = {f.key for f in support.check(PINS, dt.date(2026, 12, 1)) if f.state == "undated"}
    assert "volcano" in undated
    assert not {"gpu_operator", "kueue"} & undated


def test_the_gpu_operator_is_dated_by_its_six_month_rule() -> None:
    found = {f.key: f for f in support.check(PINS, dt.date(2026, 12, 1))}
    operator = found["gpu_operator"]
    assert operator.state == "soon"
    assert operator.message.startswith(
        "GPU Operator 26.7 ends 2027-01-31 (tentative), in 61 day(s)"
    )
    late = {f.key: f for f in support.check(PINS, dt.date(2027, 2, 1))}["gpu_operator"]
    assert late.state == "past"
    assert "Life Cycle" in late.message


def test_kueue_is_maintained_while_among_the_three_newest_minors(monkeypatch) -> None:
    kueue = {f.key: f for f in support.check(PINS, dt.date(2026, 12, 1))}["kueue"]
    assert kueue.state == "ok"
    assert kueue.message.startswith("Kueue 0.19 maintained: the 3 newest minors are maintained")
    data = support.table()
    for newest, state in (("0.21", "ok"), ("0.22", "past"), ("1.0", "past")):
        data["maintained"]["kueue"]["newest"] = newest
        monkeypatch.setattr(support, "table", lambda data=data: data)
        [found] = [f for f in support.check(PINS, dt.date(2026, 12, 1)) if f.key == "kueue"]
        assert found.state == state, newest
    assert found.message.startswith("Kueue 0.19 is no longer maintained")
    assert "kueue/blob/main/RELEASE.md" in found.message


def test_versions_check_warns_and_prod_makes_it_an_error() -> None:
    result = run_cli("versions", "check", "--as-of", "2026-12-01")
    assert result.code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "warning: versions.yaml: containerd: containerd 1.6 ended 2025-07-23" in text
    assert (
        "aws ssm get-parameter --name /aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/recommended/release_version"
        in text
    )
    # Pins no date covers are named, not passed in silence.
    undated = [line for line in result.stdout.splitlines() if line.startswith("undated: ")]
    assert [line.split(":")[1].strip() for line in undated] == [
        "nvidia_driver.distro.releases.trixie",
        "volcano",
    ]
    assert "publishes no maintenance window" in undated[1]
    prod = run_cli("versions", "check", "--environment", "prod", "--as-of", "2026-12-01")
    assert prod.code == 1
    errors = [line for line in prod.stderr.splitlines() if line.startswith("error:")]
    # R535, containerd 1.6 (Debian 12) and 1.7 (Debian 13); Kubernetes 1.35 is only close.
    assert len(errors) == 3
    assert all(line.endswith("(environment prod)") for line in errors)
    early = run_cli("versions", "check", "--environment", "prod", "--as-of", "2025-06-01")
    assert early.code == 0, early.stderr


def test_a_bad_date_is_a_usage_error() -> None:
    result = run_cli("versions", "check", "--as-of", "2026-13-01")
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        "error: gpuinfra versions check: invalid value for '--as-of': '2026-13-01' is not a date "
        "(allowed: YYYY-MM-DD) (see gpuinfra versions check --help)"
    )


def test_each_release_build_is_judged_on_its_own_line() -> None:
    found = {f.key: f for f in support.check(PINS, dt.date(2026, 12, 1))}
    trixie = found["containerd.releases.trixie"]
    assert trixie.message.startswith("containerd 1.7 ")
    driver = found["nvidia_driver.distro.releases.trixie"]
    assert driver.message.startswith("driver branch R550")


def test_a_prod_stack_is_judged_on_the_pins_it_runs() -> None:
    # EKS runs the AMI's driver and EKS's calendar: Debian's R535 and containerd do not stop it.
    ok = run_cli("config", "check", "--stack", "prod", "--as-of", "2026-12-01")
    assert ok.code == 0, ok.stderr
    late = run_cli("config", "check", "--stack", "prod", "--as-of", "2027-04-01")
    assert late.code == 1
    # The GPU Operator's default driver, R595, ended four days later.
    driver, eks = late.stderr.strip().splitlines()
    assert driver.startswith(
        "error: versions.yaml: gpu_operator.operands.driver: driver branch R595 ended 2027-03-31"
    )
    assert eks.startswith(
        "error: versions.yaml: kubernetes: EKS 1.35 standard support ended 2027-03-27"
    )
    assert driver.endswith("(environment prod)") and eks.endswith("(environment prod)")
    # Another environment only warns through `versions check`.
    dev = run_cli("config", "check", "--stack", "dev", "--as-of", "2027-04-01")
    assert dev.code == 0, dev.stderr
    plan = run_cli("plan", "--stack", "prod", "--as-of", "2027-04-01", "--format", "json")
    assert plan.code == 1
    assert '"kind": "stack"' in plan.stdout
    assert "EKS 1.35 standard support ended 2027-03-27" in plan.stderr


def test_a_prod_site_is_judged_on_the_driver_sources_its_hosts_use(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    (site / "group_vars" / "all" / "environment.yml").write_text("gpuinfra_environment: prod\n")
    result = run_cli("config", "check", "--site", str(site), "--as-of", "2026-12-01")
    assert result.code == 1, result.stdout
    errors = result.stderr.strip().splitlines()
    keys = sorted(line.split(": ")[2] for line in errors)
    # The example's hosts take the distro driver: R535 ended; so did containerd 1.6 and 1.7.
    assert keys == ["containerd", "containerd.releases.trixie", "nvidia_driver.distro"], errors
    plan = run_cli("plan", "--site", str(site), "--as-of", "2026-12-01", "--format", "json")
    assert plan.code == 1
    assert "driver branch R535 ended 2026-06-30" in plan.stderr


def test_a_site_environment_must_be_one_of_the_three(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    (site / "group_vars" / "all" / "environment.yml").write_text("gpuinfra_environment: prd\n")
    result = run_cli("config", "check", "--site", str(site))
    assert result.code == 2
    assert result.stderr.strip().endswith(
        "environment.yml: gpuinfra_environment: 'prd' is not an environment "
        "(allowed: dev, staging, prod)"
    )


def test_docker_containerd_is_an_lts_line_until_2028() -> None:
    findings = {f.key: f for f in support.check(PINS, dt.date(2026, 12, 1))}
    docker = findings["containerd_docker"]
    assert (docker.state, docker.message) == (
        "ok",
        "containerd 2.3 supported until 2028-04-27 (tentative)",
    )
    assert findings["containerd_docker.releases.trixie"].state == "ok"
    later = {f.key: f.state for f in support.check(PINS, dt.date(2028, 5, 1))}
    assert later["containerd_docker"] == "past"


def test_a_site_runs_the_containerd_of_the_source_its_hosts_use() -> None:
    distro = support.site_pin({"distro"})
    assert distro("containerd", "containerd") and distro("containerd.releases.trixie", "containerd")
    assert not distro("containerd_docker", "containerd")
    docker = support.site_pin({"distro"}, {"docker"})
    assert docker("containerd_docker", "containerd")
    assert docker("containerd_docker.releases.trixie", "containerd")
    assert not docker("containerd", "containerd")
    assert not docker("containerd.releases.trixie", "containerd")
    mixed = support.site_pin({"distro"}, {"distro", "docker"})
    assert mixed("containerd", "containerd") and mixed("containerd_docker", "containerd")


def test_a_prod_debian_site_on_dockers_containerd_fails_on_its_driver_only(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    (site / "group_vars" / "all" / "environment.yml").write_text("gpuinfra_environment: prod\n")
    (site / "group_vars" / "gpu_nodes" / "containerd.yml").write_text(
        "nvidia_container_toolkit_containerd_source: docker\n"
    )
    result = run_cli("config", "check", "--site", str(site), "--as-of", "2026-12-01")
    assert result.code == 1, result.stdout
    errors = result.stderr.strip().splitlines()
    # containerd 2.3 from Docker is supported; Debian 12's R535 is still past its end.
    assert [line.split(": ")[2] for line in errors] == ["nvidia_driver.distro"], errors
    plan = run_cli("plan", "--site", str(site), "--as-of", "2026-12-01", "--format", "json")
    assert plan.code == 1
    assert "containerd 1.6" not in plan.stderr
    assert "driver branch R535 ended 2026-06-30" in plan.stderr
