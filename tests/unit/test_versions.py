"""versions.yaml: the repository's own file passes; each rule fires on a broken copy."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import versions
from gpuinfra.errors import excerpt
from tests.conftest import ROOT, run_cli

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

    v = broken(mutate)
    assert messages(v) == [
        "nvidia_driver.distro.releases.trixie.version: driver 535.261.03 is older than 550.54.14, "
        f"the minimum for CUDA 12.4 ({versions.CUDA_TABLE_SOURCE})",
    ]
    assert [str(p) for p in versions.agreement(v)] == [
        "containerd.releases.trixie.package_version: '1.7.29~ds1-1' is not a build of "
        "containerd.releases.trixie.version 1.7.24 (allowed: 1.7.24 with a package revision, "
        "e.g. 1.7.24-1)"
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


def agreement(mutate: Any) -> list[str]:
    return [str(p) for p in versions.agreement(broken(mutate))]


def test_the_repository_pins_agree() -> None:
    assert versions.agreement(versions.load()) == []


def _set(path: str, value: Any) -> Any:
    def mutate(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for part in parents:
            d = d[part]
        d[last] = value

    return mutate


def _rename_release(entry: str, old: str, new: str) -> Any:
    def mutate(d: dict[str, Any]) -> None:
        releases = (d["nvidia_driver"][entry] if entry in ("distro",) else d[entry])["releases"]
        releases[new] = releases.pop(old)

    return mutate


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            _set("nvidia_driver.distro.source.package_version", "535.261.04-1"),
            "nvidia_driver.distro.source.package_version: '535.261.04-1' is not a build of "
            "nvidia_driver.distro.version 535.261.03 (allowed: 535.261.03 with a package "
            "revision, e.g. 535.261.03-1)",
        ),
        (
            _set("nvidia_container_toolkit.source.package_version", "1.19.0-1"),
            "nvidia_container_toolkit.source.package_version: '1.19.0-1' is not a build of "
            "nvidia_container_toolkit.version 1.20.0 (allowed: 1.20.0 with a package revision, "
            "e.g. 1.20.0-1)",
        ),
        (
            # 1.20.01 is no build of 1.20.0: the version ends where the revision starts.
            _set("nvidia_container_toolkit.source.package_version", "1.20.01-1"),
            "nvidia_container_toolkit.source.package_version: '1.20.01-1' is not a build of "
            "nvidia_container_toolkit.version 1.20.0",
        ),
        (
            _rename_release("distro", "trixie", "trixi"),
            "nvidia_driver.distro.releases.trixi: 'trixi' is not a release the node roles serve; "
            "did you mean 'trixie'? (allowed: bookworm (Debian 12), trixie (Debian 13), jammy "
            "(Ubuntu 22.04), noble (Ubuntu 24.04))",
        ),
        (
            _rename_release("containerd", "trixie", "noble"),
            "containerd.releases.noble: 'noble' is Ubuntu 24.04, and the entry's suite bookworm "
            "is Debian 12's archive (allowed: a release of Debian)",
        ),
        (
            _set("containerd_docker.releases.trixie.package_version", "2.3.3-1~debian.12~bookworm"),
            "containerd_docker.releases.trixie.package_version: '2.3.3-1~debian.12~bookworm' is "
            "a build for bookworm, not for trixie (allowed: the build of trixie's archive)",
        ),
        (
            _set("containerd.source.package_version", "1.6.20~ds1-1+deb13u3"),
            "containerd.source.package_version: '1.6.20~ds1-1+deb13u3' is a build for trixie, "
            "not for bookworm",
        ),
        (
            _set("nvidia_driver.cuda_repo.source.packages", ["cuda-drivers-570"]),
            "nvidia_driver.cuda_repo.source.packages: 'cuda-drivers-570' installs driver branch "
            "570, not the branch of nvidia_driver.cuda_repo.version 580.159.04 (allowed: "
            "cuda-drivers-580)",
        ),
    ],
)
def test_pins_that_must_agree_are_refused(mutate: Any, expected: str) -> None:
    (line,) = agreement(mutate)
    assert line.startswith(expected), line


def test_a_package_version_with_an_epoch_or_a_repack_suffix_is_a_build() -> None:
    assert agreement(_set("nvidia_container_toolkit.source.package_version", "1:1.20.0-1")) == []
    assert agreement(_set("containerd.source.package_version", "1.6.20+dfsg-2")) == []


@pytest.mark.parametrize(
    ("tag", "version", "expected"),
    [
        ("25.01-py3", "2.71.0", "'25.01-py3' ships Triton 2.54, not triton.version 2.71.0"),
        ("26.07-py3", "2.70.0", "'26.07-py3' ships Triton 2.71, not triton.version 2.70.0"),
        ("24.02-py3", "2.54.0", "'24.02-py3' ships Triton 2.43, not triton.version 2.54.0"),
        ("27.01-py3", "2.71.0", "'27.01-py3' ships Triton 2.72 to 2.77, not triton.version"),
        ("23.01-py3", "2.43.0", "'23.01-py3' ships Triton 2.30 to 2.42, not triton.version"),
        ("25.07-py3", "2.60.0", "'25.07-py3' is no Triton release: NVIDIA published no 25.07"),
    ],
)
def test_the_triton_tag_and_version_name_the_same_release(
    tag: str, version: str, expected: str
) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["triton"].update(tag=tag, version=version, variants={})

    (line,) = agreement(mutate)
    assert line.startswith(f"triton.tag: {expected}"), line


@pytest.mark.parametrize(
    ("tag", "version"),
    [("25.06-py3", "2.59.0"), ("25.08-py3", "2.60.0"), ("26.05-py3", "2.69.0"),
     ("24.02-py3", "2.43.0"), ("26.08-py3", "2.72.0"), ("23.01-py3", "2.30.0")],
)  # fmt: skip
def test_triton_releases_the_notes_name_agree(tag: str, version: str) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["triton"].update(tag=tag, version=version, variants={})

    assert agreement(mutate) == []


def test_the_releases_are_those_the_node_roles_serve() -> None:
    served: set[tuple[str, str]] = set()
    driver = yaml.safe_load((ROOT / "roles/nvidia_driver/vars/main.yml").read_text())
    toolkit = yaml.safe_load((ROOT / "roles/nvidia_container_toolkit/vars/main.yml").read_text())
    # A preinstalled driver installs nothing, so it has no build to pin per release.
    installed = [v for k, v in driver["_nvidia_driver_supported"].items() if k != "preinstalled"]
    for families in [*installed, toolkit["_nvidia_container_toolkit_supported"]]:
        for family, majors in (families or {}).items():
            served.update((family, str(m)) for m in majors if family in ("Debian", "Ubuntu"))
    assert {(f, n.split(".")[0]) for f, n in versions.RELEASES.values()} == served


def test_a_malformed_driver_says_what_a_driver_version_looks_like() -> None:
    out = messages(broken(_set("nvidia_driver.cuda_repo.version", "470.1.1")))
    assert out[0] == (
        "nvidia_driver.cuda_repo.version: '470.1.1' is malformed; expected a 3-digit branch, a 2- "
        "or 3-digit minor and an optional 2-digit patch, e.g. 580.159.04 or 570.26"
    )


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('package_version: "535.261.03-1"', 'package_version: "535.261.04-1"',
         "nvidia_driver.distro.source.package_version"),
        ('package_version: "1.20.0-1"', 'package_version: "1.19.0-1"',
         "nvidia_container_toolkit.source.package_version"),
        ('tag: "26.07-py3"', 'tag: "25.01-py3"', "triton.tag"),
        ("      trixie: {version", "      trixi: {version", "nvidia_driver.distro.releases.trixi"),
    ],
)  # fmt: skip
def test_versions_check_refuses_pins_that_disagree_in_one_line(
    tmp_path: Path, old: str, new: str, key: str
) -> None:
    text = (ROOT / "versions.yaml").read_text()
    assert old in text
    (tmp_path / "versions.yaml").write_text(text.replace(old, new, 1))
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    before = _tree(tmp_path)
    result = run_cli("versions", "check", root=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert (result.code, len(lines)) == (2, 1), result.stderr
    assert lines[0].startswith(f"error: versions.yaml: {key}: "), lines[0]
    assert _tree(tmp_path) == before


def test_an_invalid_kueue_version_is_not_judged_for_support(tmp_path: Path) -> None:
    text = (ROOT / "versions.yaml").read_text()
    (tmp_path / "versions.yaml").write_text(text.replace('version: "0.19.2"', "version: latest"))
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    result = run_cli("versions", "check", root=tmp_path)
    assert result.code == 1
    assert "error: versions.yaml: kueue.version: 'latest' floats" in result.stderr
    assert "Kueue" not in result.stdout + result.stderr


def test_versions_show_refuses_pins_that_break_a_rule_as_check_does(tmp_path: Path) -> None:
    text = (ROOT / "versions.yaml").read_text()
    (tmp_path / "versions.yaml").write_text(text.replace('version: "0.19.2"', "version: latest"))
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    checked = run_cli("versions", "check", root=tmp_path)
    result = run_cli("versions", "show", root=tmp_path)
    assert result.code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: versions.yaml: kueue.version: 'latest' floats; pin an exact version"
    ]
    assert result.stderr.splitlines()[0] in checked.stderr.splitlines()


@pytest.mark.parametrize(
    ("old", "new", "key", "shown"),
    [
        ('version: "535.261.03"', 'version: "535.261.03 "', "nvidia_driver.distro.version",
         "'535.261.03 '"),
        ('package_version: "580.159.04-1"', 'package_version: "580.159.04-1\\n"',
         "nvidia_driver.cuda_repo.source.package_version", "'580.159.04-1\\n'"),
        ("nvidia-kernel-dkms, nvidia-smi,", 'nvidia-kernel-dkms, " nvidia-smi",',
         "nvidia_driver.distro.source.packages", "' nvidia-smi'"),
        ('toolkit: "v1.20.0"', 'toolkit: " v1.20.0"', "gpu_operator.operands", "' v1.20.0'"),
    ],
)  # fmt: skip
def test_a_value_with_whitespace_around_it_is_refused(
    tmp_path: Path, old: str, new: str, key: str, shown: str
) -> None:
    text = (ROOT / "versions.yaml").read_text()
    assert old in text
    (tmp_path / "versions.yaml").write_text(text.replace(old, new, 1))
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    for command in ("check", "show"):
        result = run_cli("versions", command, root=tmp_path)
        assert result.code == 2
        assert result.stderr.splitlines() == [
            f"error: versions.yaml: {key}: {shown} has leading or trailing whitespace (allowed: "
            "the value alone, without spaces or newlines around it)"
        ]


def test_versions_check_help_names_both_exit_codes_it_uses() -> None:
    result = run_cli("versions", "check", "--help")
    assert result.code == 0
    text = " ".join(result.stdout.replace("│", " ").split())
    assert (
        "Exit 1 with one line per broken rule; exit 2 where the file itself is malformed (an "
        "unknown key, a wrong type)."
    ) in text


def test_a_cuda_version_several_driver_sources_read_is_told_once() -> None:
    out = messages(broken(lambda d: d["cuda"].__setitem__("version", "14.9")))
    assert [m for m in out if m.startswith("cuda.version:")] == [
        "cuda.version: CUDA 14.9 is not in the minimum-driver table "
        f"({versions.CUDA_TABLE_SOURCE}); known: {', '.join(versions.CUDA_MIN_DRIVER)}"
    ]


def test_a_pin_longer_than_a_label_value_is_refused_without_echoing_it_whole() -> None:
    out = messages(broken(lambda d: d["kueue"].__setitem__("version", "0.19." + "2" * 300)))
    assert out == [
        f"kueue.version: '{excerpt('0.19.' + '2' * 300, 60)}' is 305 characters "
        "(allowed: at most 63)"
    ]
