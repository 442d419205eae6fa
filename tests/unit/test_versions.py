"""versions.yaml: the repository's own file passes; each rule fires on a broken copy."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import versions
from tests.conftest import ROOT

REAL = yaml.safe_load((ROOT / "versions.yaml").read_text())


def broken(mutate: Any) -> versions.Versions:
    data = copy.deepcopy(REAL)
    mutate(data)
    return versions.Versions.model_validate(data)


def messages(v: versions.Versions) -> list[str]:
    return [str(p) for p in versions.check(v)]


def test_repository_versions_pass_every_rule() -> None:
    assert messages(versions.load()) == []


def test_every_required_component_is_pinned_with_its_source() -> None:
    v = versions.load()
    names = dict(v.entries())
    for required in (
        "nvidia_driver.distro",
        "nvidia_driver.cuda_repo",
        "cuda",
        "nvidia_container_toolkit",
        "containerd",
        "gpu_operator",
        "k8s_device_plugin",
        "dcgm_exporter",
        "volcano",
        "kueue",
        "triton",
        "kube_prometheus_stack",
        "kubernetes",
        "eks_gpu_ami",
    ):
        assert required in names
    assert names["nvidia_driver.distro"].version == "535.261.03"
    assert names["gpu_operator"].source.chart == "gpu-operator"
    assert names["triton"].tag == "26.07-py3"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("latest", "floats"),
        ("*", "floats"),
        ("1.x", "floats"),
        (">=1.19", "floats"),
        ("^1.19.0", "floats"),
        ("1", "bare major"),
        ("v1", "bare major"),
        ("1.19", "malformed"),
        ("one.two", "malformed"),
        ("", "empty"),
    ],
)
def test_floating_or_malformed_versions_are_refused(value: str, fragment: str) -> None:
    out = messages(broken(lambda d: d["kueue"].__setitem__("version", value)))
    assert any(m.startswith("kueue.version:") and fragment in m for m in out), out


def test_bare_driver_branch_floats() -> None:
    out = messages(broken(lambda d: d["nvidia_driver"]["cuda_repo"].__setitem__("version", "580")))
    assert any("nvidia_driver.cuda_repo.version" in m and "bare major" in m for m in out), out


def test_driver_older_than_cuda_minimum_is_refused() -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["nvidia_driver"]["cuda_repo"]["version"] = "570.195.03"  # 13.0 needs 580.65.06

    out = messages(broken(mutate))
    assert out == [
        "nvidia_driver.cuda_repo.version: driver 570.195.03 is older than 580.65.06, the minimum "
        f"for CUDA 13.0 ({versions.CUDA_TABLE_SOURCE})"
    ]


def test_distro_driver_is_checked_against_its_own_cuda() -> None:
    out = messages(broken(lambda d: d["nvidia_driver"]["distro"].__setitem__("cuda", "12.4")))
    assert len(out) == 1 and "535.261.03 is older than 550.54.14" in out[0]


def test_unknown_cuda_version_says_which_are_known() -> None:
    out = messages(broken(lambda d: d["cuda"].__setitem__("version", "14.9")))
    assert any("CUDA 14.9 is not in the minimum-driver table" in m for m in out)


def test_operator_driver_branch_must_be_supported() -> None:
    out = messages(
        broken(lambda d: d["gpu_operator"]["operands"].__setitem__("driver", "550.163.01"))
    )
    assert out == [
        "gpu_operator.operands.driver: driver branch 550 is not supported by GPU Operator 26.7 "
        "(supported: 580, 590, 595)"
    ]


def test_operator_operand_must_match_the_pinned_component() -> None:
    out = messages(
        broken(lambda d: d["gpu_operator"]["operands"].__setitem__("toolkit", "v1.19.1"))
    )
    assert out == [
        "gpu_operator.operands.toolkit: v1.19.1 differs from the pinned 1.20.0; "
        "one version per component"
    ]


@pytest.mark.parametrize(
    ("k8s", "ami", "expected"),
    [
        (
            "1.28",
            "1.28.15-20261110",
            ["kueue.version: kueue 0.19.2 supports Kubernetes 1.29 to 1.36"],
        ),
        (
            "1.36",
            "1.36.0-20261110",
            ["volcano.version: volcano 1.15.1 supports Kubernetes 1.17 to 1.35"],
        ),
    ],
)
def test_schedulers_against_kubernetes(k8s: str, ami: str, expected: list[str]) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["kubernetes"]["version"] = k8s
        d["eks_gpu_ami"]["version"] = ami
        d["cluster_autoscaler"]["version"] = f"v{k8s}.0"

    out = messages(broken(mutate))
    assert [m.split(", not")[0] for m in out] == expected


def test_ami_must_match_kubernetes_minor() -> None:
    out = messages(broken(lambda d: d["eks_gpu_ami"].__setitem__("version", "1.33.5-20261110")))
    assert out == [
        "eks_gpu_ami.version: AMI release 1.33.5-20261110 is built for Kubernetes 1.33, "
        "not the pinned 1.35"
    ]


def test_each_problem_is_its_own_line() -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["volcano"]["version"] = "latest"
        d["kueue"]["version"] = "*"

    assert len(messages(broken(mutate))) == 2


def test_load_checked_refuses_a_floating_pin(tmp_path: Path) -> None:
    data = copy.deepcopy(REAL)
    data["triton"]["tag"] = "latest"
    path = tmp_path / "versions.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(Exception, match=r"triton\.tag: 'latest' is malformed"):
        versions.load_checked(path)


def test_an_image_pinned_by_digest_runs_by_digest() -> None:
    from gpuinfra import addons

    pins = versions.pinned()
    digest = "sha256:" + "ab" * 32
    pinned = pins.model_copy(update={"triton": pins.triton.model_copy(update={"digest": digest})})
    assert versions.check(pinned) == []
    settings = {"enabled": True, "modelRepository": {"pvc": "models"}}
    deployment = addons.render("triton", settings, versions=pinned).objects[0]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{pins.triton.source.image}:{pins.triton.tag}@{digest}"
    bad = pins.model_copy(
        update={"triton": pins.triton.model_copy(update={"digest": "sha256:abc"})}
    )
    assert [p.key for p in versions.check(bad)] == ["triton.digest"]


def test_a_release_build_is_checked_like_the_entry() -> None:
    def mutate(d: dict[str, Any]) -> None:
        trixie = d["nvidia_driver"]["distro"]["releases"]["trixie"]
        trixie["version"] = "535.261.03"  # trixie's CUDA 12.4 needs 550.54.14
        trixie["package_version"] = "535.261.03-1"
        d["containerd"]["releases"]["trixie"]["package_version"] = "1.7.29~ds1-1"

    out = messages(broken(mutate))
    assert out == [
        "containerd.releases.trixie.package_version: '1.7.29~ds1-1' is not a build of 1.7.24",
        "nvidia_driver.distro.releases.trixie.version: driver 535.261.03 is older than 550.54.14, "
        f"the minimum for CUDA 12.4 ({versions.CUDA_TABLE_SOURCE})",
    ]


def test_builds_per_release_only_on_a_suite_of_their_own() -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["nvidia_driver"]["distro"]["releases"]["bookworm"] = {
            "version": "535.309.01",
            "package_version": "535.309.01-0+deb12u1",
        }
        d["nvidia_container_toolkit"]["releases"] = {
            "trixie": {"version": "1.20.0", "package_version": "1.20.0-1"}
        }

    out = messages(broken(mutate))
    assert out == [
        "nvidia_driver.distro.releases.bookworm: 'bookworm' is the entry's own suite; its build "
        "is the entry's version",
        "nvidia_container_toolkit.releases.trixie: only an apt entry with a suite takes builds "
        "per release",
    ]


def test_a_floating_release_build_is_refused() -> None:
    out = messages(
        broken(lambda d: d["containerd"]["releases"]["trixie"].__setitem__("version", "latest"))
    )
    assert "containerd.releases.trixie.version: 'latest' floats; pin an exact version" in out
