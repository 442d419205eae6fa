"""The node roles' decisions from their host probes (the roles' filter_plugins).

The probe lines below are what the two probes printed on a converged lab host (Debian 12 in a
container, driver 535.261.03 from Debian, toolkit 1.20.0 from the test repository); the other
cases are that host with one thing changed.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROLES = Path(__file__).resolve().parents[3] / "roles"


def load(role: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        name, ROLES / role / "filter_plugins" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


driver = load("nvidia_driver", "nvidia_driver_plan").nvidia_driver_plan
toolkit = load(
    "nvidia_container_toolkit", "nvidia_container_toolkit_plan"
).nvidia_container_toolkit_plan

NOUVEAU = "/etc/modprobe.d/gpuinfra-blacklist-nouveau.conf"
NONFREE = "/etc/apt/sources.list.d/gpuinfra-debian-nonfree.sources"
PREF = "/etc/apt/preferences.d/gpuinfra-nvidia-driver.pref"
UNATTENDED = "/etc/apt/apt.conf.d/51gpuinfra-nvidia-unattended-upgrades"
# The lab image's sources enable non-free and non-free-firmware but not contrib: the role adds it.
CONTRIB_ONLY = (
    "# Managed by gpuinfra (roles/nvidia_driver); local edits are overwritten.\n"
    "Types: deb\n"
    "URIs: http://deb.debian.org/debian\n"
    "Suites: bookworm\n"
    "Components: contrib\n"
)
CONTRIB_ONLY_SHA1 = hashlib.sha1(CONTRIB_ONLY.encode()).hexdigest()
DRIVER_PACKAGES = ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "firmware-nvidia-gsp"]

CONVERGED_DRIVER = [
    "container=0",
    "kernel=6.18.44-fc-v857",
    "headers=1",
    "mokutil=127",
    "secure_boot=",
    "persistenced_unit=yes",
    "persistenced_enabled=enabled",
    "persistenced_active=failed",
    f"file {NOUVEAU} ac11a5977140eaebd433ada39a78ae10cb138313 root:root:644",
    "dpkg firmware-nvidia-gsp 535.261.03-1 hold ok installed",
    "dpkg nvidia-driver 535.261.03-1 hold ok installed",
    "dpkg nvidia-kernel-dkms 535.261.03-1 hold ok installed",
    "dpkg nvidia-persistenced 535.171.04-1~deb12u1 install ok installed",
    "dpkg nvidia-smi 535.261.03-1 hold ok installed",
    "installed=535.261.03-1",
    f"file {NONFREE} {CONTRIB_ONLY_SHA1} root:root:644",
    f"file {PREF} f662c5321bce9377d46a2d250a79430ff82363c7 root:root:644",
    f"file {UNATTENDED} 89cd2f1d42977b49b220584e5a6465b61d98428d root:root:644",
    "components_elsewhere=non-free non-free-firmware",
]

# A host before the first converge: nothing of the driver's installed, none of its files written.
FRESH_DRIVER = (
    [
        line
        for line in CONVERGED_DRIVER
        if not line.startswith(("dpkg ", "file ", "installed=", "persistenced_"))
    ]
    + ["installed="]
    + [f"file {path} absent" for path in (NOUVEAU, NONFREE, PREF, UNATTENDED)]
)


def driver_inputs(**changes: Any) -> dict[str, Any]:
    want: dict[str, Any] = {
        "host": "lab-1",
        "source": "distro",
        "version": "535.261.03",
        "os_family": "Debian",
        "distribution": "Debian",
        "kernel": "6.18.44-fc-v857",
        "virtualization_type": "",
        "virtualization_role": "",
        "uses_apt": True,
        "dkms": True,
        "apt_packages": DRIVER_PACKAGES,
        "apt_version": "535.261.03-1",
        "extra_packages": ["nvidia-persistenced"],
        "install_kernel_headers": True,
        "persistence_mode": True,
        "blacklist_nouveau": True,
        "nonfree_file": NONFREE,
        "distro_repo_url": "http://deb.debian.org/debian",
        "distro_suite": "bookworm",
        "pref_file": PREF,
        "unattended_file": UNATTENDED,
        "nouveau_file": NOUVEAU,
        "files": {
            NOUVEAU: "ac11a5977140eaebd433ada39a78ae10cb138313",
            PREF: "f662c5321bce9377d46a2d250a79430ff82363c7",
            UNATTENDED: "89cd2f1d42977b49b220584e5a6465b61d98428d",
        },
    }
    want.update(changes)
    return want


def replace(lines: list[str], prefix: str, line: str) -> list[str]:
    return [line if existing.startswith(prefix) else existing for existing in lines]


def test_a_converged_lab_host_has_nothing_to_do_and_says_why_no_module_loads() -> None:
    plan = driver(CONVERGED_DRIVER, driver_inputs())
    assert plan["request"]["settled"] is True
    assert plan["request"]["blocked"] == ""
    assert plan["source_tasks"] == ""
    assert not any(plan[key] for key in ("write_nonfree", "write_pref", "write_unattended"))
    assert plan["configure"] is False
    assert plan["failure"] == ""
    assert plan["in_container"] is True
    report = " ".join(plan["report"])
    assert "Secure Boot: unknown (mokutil not available)" in report
    assert "lab-1 is a container running the host kernel 6.18.44-fc-v857" in report
    assert "enabled for the next boot, not started now" in report


def test_a_fresh_host_gets_repositories_pins_packages_and_nouveau() -> None:
    plan = driver(FRESH_DRIVER, driver_inputs())
    assert plan["request"] == {
        "role": "nvidia_driver",
        "packages": [f"{p}=535.261.03-1" for p in DRIVER_PACKAGES] + ["nvidia-persistenced"],
        "hold": DRIVER_PACKAGES,
        "settled": False,
        "blocked": "",
    }
    assert plan["source_tasks"] == "repositories_distro.yml"
    assert plan["write_nonfree"] and plan["write_pref"] and plan["write_unattended"]
    assert plan["nonfree_content"] == CONTRIB_ONLY
    assert plan["write_nouveau"] and plan["configure"]
    assert plan["failure"] == "nvidia-driver on lab-1 is not installed, expected 535.261.03."


def test_a_driver_package_at_another_build_or_unheld_is_not_settled() -> None:
    newer = "dpkg nvidia-smi 535.309.01-0+deb12u1 hold ok installed"
    assert (
        driver(replace(CONVERGED_DRIVER, "dpkg nvidia-smi ", newer), driver_inputs())["request"][
            "settled"
        ]
        is False
    )
    unheld = "dpkg nvidia-smi 535.261.03-1 install ok installed"
    assert (
        driver(replace(CONVERGED_DRIVER, "dpkg nvidia-smi ", unheld), driver_inputs())["request"][
            "settled"
        ]
        is False
    )


def test_installed_build_that_is_not_the_pin_fails_the_check_with_both_versions() -> None:
    lines = replace(CONVERGED_DRIVER, "installed=", "installed=535.309.01-0+deb12u1")
    assert driver(lines, driver_inputs())["failure"] == (
        "nvidia-driver on lab-1 is 535.309.01-0+deb12u1, expected 535.261.03."
    )


def test_a_changed_pin_file_is_written_again_and_only_it() -> None:
    lines = replace(CONVERGED_DRIVER, f"file {PREF} ", f"file {PREF} 0000 root:root:644")
    plan = driver(lines, driver_inputs())
    assert plan["write_pref"] and not plan["write_unattended"] and not plan["write_nonfree"]
    assert plan["source_tasks"] == "repositories_distro.yml"


def test_the_components_file_names_only_what_other_sources_lack() -> None:
    # No other source enables any of the three.
    nothing = replace(FRESH_DRIVER, "components_elsewhere=", "components_elsewhere=")
    assert "components_elsewhere=" in nothing
    content = driver(nothing, driver_inputs())["nonfree_content"]
    assert content.endswith("Components: contrib non-free non-free-firmware\n")

    plan = driver(
        replace(FRESH_DRIVER, "components_elsewhere=", "components_elsewhere=contrib non-free"),
        driver_inputs(),
    )
    assert plan["nonfree_content"].endswith("Components: non-free-firmware\n")
    assert plan["write_nonfree"] is True


def test_the_components_file_goes_when_other_sources_enable_them_all() -> None:
    everything = "components_elsewhere=contrib non-free non-free-firmware"
    plan = driver(replace(CONVERGED_DRIVER, "components_elsewhere=", everything), driver_inputs())
    assert plan["remove_nonfree"] is True
    assert plan["write_nonfree"] is False
    assert plan["source_tasks"] == "repositories_distro.yml"
    fresh = driver(replace(FRESH_DRIVER, "components_elsewhere=", everything), driver_inputs())
    assert fresh["remove_nonfree"] is False and fresh["write_nonfree"] is False


BARE_METAL = replace(CONVERGED_DRIVER, "container=", "container=1")


def test_bare_metal_without_headers_installs_them_or_blocks_the_package_run() -> None:
    plan = driver(BARE_METAL, driver_inputs())
    assert plan["in_container"] is False
    assert plan["request"]["blocked"] == ""
    assert "linux-headers-6.18.44-fc-v857" in plan["request"]["packages"]
    assert plan["request"]["settled"] is False  # the headers package is not installed yet
    assert "Install linux-headers-6.18.44-fc-v857 (or kernel-devel)" in plan["failure"]

    blocked = driver(BARE_METAL, driver_inputs(install_kernel_headers=False))["request"]["blocked"]
    assert "no kernel headers for the running kernel 6.18.44-fc-v857 on lab-1" in blocked
    assert "set nvidia_driver_install_kernel_headers to true" in blocked


def test_with_headers_installed_bare_metal_is_settled_and_passes() -> None:
    lines = [
        *replace(BARE_METAL, "headers=", "headers=0"),
        "dpkg linux-headers-6.18.44-fc-v857 6.18.44-1 install ok installed",
    ]
    plan = driver(lines, driver_inputs())
    assert plan["request"]["settled"] is True
    assert plan["failure"] == ""


def test_the_running_kernel_comes_from_the_probe_not_from_cached_facts() -> None:
    # Facts cached before a reboot into a new kernel still name the old one.
    plan = driver(BARE_METAL, driver_inputs(kernel="6.1.0-27-amd64"))
    assert plan["kernel"] == "6.18.44-fc-v857"
    assert "linux-headers-6.18.44-fc-v857" in plan["request"]["packages"]
    assert "linux-headers-6.1.0-27-amd64" not in " ".join(plan["request"]["packages"])


def test_podman_guest_facts_count_as_a_container_when_systemd_cannot_tell() -> None:
    plan = driver(
        BARE_METAL, driver_inputs(virtualization_type="podman", virtualization_role="guest")
    )
    assert plan["in_container"] is True


def test_a_gpu_node_starts_the_persistence_daemon() -> None:
    plan = driver([*CONVERGED_DRIVER, "devnode=yes"], driver_inputs())
    assert plan["start_persistenced"] is True
    assert plan["configure"] is True
    assert not any("not started now" in line for line in plan["report"])
    assert (
        driver([*CONVERGED_DRIVER, "devnode=yes"], driver_inputs(persistence_mode=False))[
            "start_persistenced"
        ]
        is False
    )


def test_cuda_repo_builds_match_the_packaging_suffix_wildcard() -> None:
    lines = [line for line in CONVERGED_DRIVER if not line.startswith("dpkg ")] + [
        "dpkg cuda-drivers-580 580.159.04-1 hold ok installed",
        "dpkg nvidia-persistenced 580.159.04-1 hold ok installed",
    ]
    want = driver_inputs(
        source="cuda_repo",
        version="580.159.04",
        apt_packages=["cuda-drivers-580", "nvidia-persistenced"],
        apt_version="580.159.04-*",
        extra_packages=[],
    )
    plan = driver(lines, want)
    assert plan["request"]["settled"] is True
    assert plan["source_tasks"] == "repositories_cuda_repo_apt.yml"


def test_a_preinstalled_driver_asks_for_no_packages() -> None:
    want = driver_inputs(source="preinstalled", version="580.159.04", uses_apt=False, dkms=False)
    want["files"] = {NOUVEAU: want["files"][NOUVEAU]}
    lines = [
        "container=1",
        "headers=1",
        "mokutil=0",
        "secure_boot=SecureBoot enabled",
        f"file {NOUVEAU} absent",
    ]
    plan = driver(lines, want)
    assert plan["request"] == {
        "role": "nvidia_driver",
        "packages": [],
        "hold": [],
        "settled": True,
        "blocked": "",
    }
    assert plan["source_tasks"] == "preinstalled.yml"
    assert plan["failure"] == ""
    assert plan["write_nouveau"] is True
    assert plan["report"][0].startswith("Secure Boot: SecureBoot enabled.")


KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.asc"
SOURCES = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"
CDI = "/etc/cdi/nvidia.yaml"
TOOLKIT_PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]

CONVERGED_TOOLKIT = [
    "containerd=yes",
    "containerd_enabled=enabled",
    "containerd_active=active",
    "dpkg=libnvidia-container-tools 1.20.0-1 hold ok installed",
    "dpkg=libnvidia-container1 1.20.0-1 hold ok installed",
    "dpkg=nvidia-container-toolkit 1.20.0-1 hold ok installed",
    "dpkg=nvidia-container-toolkit-base 1.20.0-1 hold ok installed",
    "path /etc/apt/keyrings dir root:root:755",
    f"path {KEYRING} file f4cdf759cb7cf735a4e8ba8f985116a33d2d3833 root:root:644",
    f"path {SOURCES} file 013f1687debddae888cbc991c6e00df4bc0bec30 root:root:644",
    "path /etc/containerd/conf.d dir root:root:755",
    f"path {DROPIN} file d97039065a7e15e93fa34c4ceb47146ef76cac08 root:root:644",
    f"path {CDI} absent",
    "main_config=imports",
]

FRESH_TOOLKIT = [
    "containerd_enabled=",
    "containerd_active=inactive",
    "path /etc/apt/keyrings dir root:root:755",
    f"path {KEYRING} absent",
    f"path {SOURCES} absent",
    "path /etc/containerd/conf.d absent",
    f"path {DROPIN} absent",
    f"path {CDI} absent",
    "main_config=absent",
]


def toolkit_inputs(**changes: Any) -> dict[str, Any]:
    want: dict[str, Any] = {
        "packages": TOOLKIT_PACKAGES,
        "package_version": "1.20.0-1",
        "containerd_package_version": "1.6.20~ds1-1+deb12u2",
        "runtimes": ["containerd"],
        "keyring": KEYRING,
        "sources_file": SOURCES,
        "sources_sha1": "013f1687debddae888cbc991c6e00df4bc0bec30",
        "dropin_dir": "/etc/containerd/conf.d",
        "dropin": DROPIN,
        "dropin_sha1": "d97039065a7e15e93fa34c4ceb47146ef76cac08",
        "cdi": True,
        "cdi_spec": CDI,
    }
    want.update(changes)
    return want


def test_a_converged_toolkit_host_has_nothing_to_do() -> None:
    plan = toolkit(CONVERGED_TOOLKIT, toolkit_inputs())
    assert plan["request"]["settled"] is True
    assert plan["request"]["packages"] == [f"{p}=1.20.0-1" for p in TOOLKIT_PACKAGES]
    assert plan["repo_drift"] is False
    assert plan["configure"] is False
    assert plan["host"]["main_config"] == "imports"


def test_a_fresh_toolkit_host_gets_containerd_the_repository_and_the_drop_in() -> None:
    plan = toolkit(FRESH_TOOLKIT, toolkit_inputs())
    assert plan["request"]["settled"] is False
    assert plan["request"]["packages"][-1] == "containerd=1.6.20~ds1-1+deb12u2"
    assert plan["request"]["hold"] == TOOLKIT_PACKAGES
    assert not plan["write_keyrings"]
    assert plan["write_key"] and plan["write_sources"] and plan["repo_drift"]
    assert plan["write_dropin_dir"] and plan["write_dropin"] and plan["configure_containerd"]


@pytest.mark.parametrize(
    ("prefix", "line"),
    [
        ("main_config=", "main_config=no_imports"),
        ("containerd_active=", "containerd_active=failed"),
        (f"path {DROPIN} ", f"path {DROPIN} file 0000 root:root:644"),
    ],
)
def test_containerd_is_configured_again_when_its_state_drifts(prefix: str, line: str) -> None:
    plan = toolkit(replace(CONVERGED_TOOLKIT, prefix, line), toolkit_inputs())
    assert plan["configure_containerd"] is True
    assert plan["request"]["settled"] is True


def test_a_key_with_the_wrong_mode_is_fixed_without_the_package_run() -> None:
    lines = replace(
        CONVERGED_TOOLKIT, f"path {KEYRING} ", f"path {KEYRING} file f4cd root:root:600"
    )
    plan = toolkit(lines, toolkit_inputs())
    assert plan["write_key"] and plan["repo_drift"] and plan["request"]["settled"]


def test_docker_is_merged_on_every_run_and_cdi_written_only_with_a_gpu() -> None:
    assert (
        toolkit(CONVERGED_TOOLKIT, toolkit_inputs(runtimes=["containerd", "docker"]))["configure"]
        is True
    )
    with_gpu = [*CONVERGED_TOOLKIT, "devnode=yes"]
    assert toolkit(with_gpu, toolkit_inputs())["write_cdi"] is True
    assert toolkit(with_gpu, toolkit_inputs(cdi=False))["write_cdi"] is False
    written = replace(with_gpu, f"path {CDI} ", f"path {CDI} file abcd root:root:644")
    assert toolkit(written, toolkit_inputs())["write_cdi"] is False
