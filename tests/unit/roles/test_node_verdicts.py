"""The node roles' verdicts on a host, from their facts modules' output (the roles' filter_plugins).

The facts below are what the two facts modules read on a converged lab host (Debian 12 in a
container, driver 535.261.03 from Debian, toolkit 1.20.0 from the test repository); the other
cases are that host with one thing changed.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

ROLES = Path(__file__).resolve().parents[3] / "roles"


def load(role: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        name, ROLES / role / "filter_plugins" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


driver = load("nvidia_driver", "nvidia_driver_verdict").nvidia_driver_verdict
toolkit = load(
    "nvidia_container_toolkit", "nvidia_container_toolkit_request"
).nvidia_container_toolkit_request

KERNEL = "6.18.44-fc-v857"
DRIVER_PACKAGES = ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "firmware-nvidia-gsp"]
HELD = "hold ok installed"

CONVERGED_DRIVER: dict[str, Any] = {
    "in_container": True,
    "kernel": KERNEL,
    "kernel_headers": False,
    "secure_boot": None,
    "initramfs_tool": "/usr/sbin/update-initramfs",
    "persistenced_unit": True,
    "device_node": False,
    "packages": {
        "firmware-nvidia-gsp": {"version": "535.261.03-1", "status": HELD},
        "nvidia-driver": {"version": "535.261.03-1", "status": HELD},
        "nvidia-kernel-dkms": {"version": "535.261.03-1", "status": HELD},
        "nvidia-persistenced": {
            "version": "535.171.04-1~deb12u1",
            "status": "install ok installed",
        },
        "nvidia-smi": {"version": "535.261.03-1", "status": HELD},
    },
    "installed": "535.261.03-1",
    "services": {"nvidia-persistenced.service": {"enabled": "enabled", "active": "failed"}},
    "components_elsewhere": ["non-free", "non-free-firmware"],
    "files_converged": True,
    "files_drift": "",
}


def host(**changes: Any) -> dict[str, Any]:
    facts = copy.deepcopy(CONVERGED_DRIVER)
    facts.update(changes)
    return facts


# A host before the first converge: nothing of the driver's installed.
FRESH_DRIVER = host(packages={}, installed="", persistenced_unit=False, files_converged=False)


def driver_inputs(**changes: Any) -> dict[str, Any]:
    want: dict[str, Any] = {
        "host": "lab-1",
        "source": "distro",
        "version": "535.261.03",
        "os_family": "Debian",
        "virtualization_type": "",
        "virtualization_role": "",
        "uses_apt": True,
        "dkms": True,
        "apt_packages": DRIVER_PACKAGES,
        "apt_version": "535.261.03-1",
        "extra_packages": ["nvidia-persistenced"],
        "install_kernel_headers": True,
        "persistence_mode": True,
    }
    want.update(changes)
    return want


def test_a_converged_lab_host_is_settled_and_says_why_no_module_loads() -> None:
    verdict = driver(CONVERGED_DRIVER, driver_inputs())
    assert verdict["request"]["settled"] is True
    assert verdict["request"]["blocked"] == ""
    assert verdict["in_container"] is True
    assert verdict["failure"] == ""
    assert verdict["installed"] == "535.261.03-1"
    report = " ".join(verdict["report"])
    assert "Secure Boot: unknown (mokutil not available)" in report
    assert "is a container running the host kernel 6.18.44-fc-v857" in report
    assert "enabled for the next boot, not started now" in report


def test_a_fresh_host_asks_for_the_pinned_set_and_the_extras_held_and_fails_until_installed() -> (
    None
):
    verdict = driver(FRESH_DRIVER, driver_inputs())
    assert verdict["request"] == {
        "role": "nvidia_driver",
        "packages": [f"{p}=535.261.03-1" for p in DRIVER_PACKAGES] + ["nvidia-persistenced"],
        "hold": DRIVER_PACKAGES,
        "settled": False,
        "blocked": "",
    }
    assert verdict["failure"] == "nvidia-driver on lab-1 is not installed, expected 535.261.03."


def test_a_driver_package_at_another_build_or_unheld_is_not_settled() -> None:
    newer = host()
    newer["packages"]["nvidia-smi"]["version"] = "535.274.02-1~deb12u1"
    assert driver(newer, driver_inputs())["request"]["settled"] is False
    unheld = host()
    unheld["packages"]["nvidia-driver"]["status"] = "install ok installed"
    assert driver(unheld, driver_inputs())["request"]["settled"] is False
    removed = host()
    removed["packages"]["nvidia-persistenced"]["status"] = "deinstall ok config-files"
    assert driver(removed, driver_inputs())["request"]["settled"] is False


def test_installed_build_that_is_not_the_pin_fails_the_check_with_both_versions() -> None:
    verdict = driver(host(installed="535.274.02-1~deb12u1"), driver_inputs())
    assert verdict["failure"] == (
        "nvidia-driver on lab-1 is 535.274.02-1~deb12u1, expected 535.261.03."
    )


def test_bare_metal_without_headers_installs_them_or_blocks_the_package_run() -> None:
    metal = host(in_container=False)
    verdict = driver(metal, driver_inputs())
    assert f"linux-headers-{KERNEL}" in verdict["request"]["packages"]
    assert verdict["request"]["settled"] is False
    assert verdict["request"]["blocked"] == ""
    assert "No kernel headers for the running kernel" in verdict["failure"]

    blocked = driver(metal, driver_inputs(install_kernel_headers=False))["request"]
    assert f"linux-headers-{KERNEL}" not in blocked["packages"]
    assert "nvidia_driver_install_kernel_headers is false" in blocked["blocked"]


def test_with_headers_installed_bare_metal_is_settled_and_passes() -> None:
    metal = host(in_container=False, kernel_headers=True)
    # Held with the driver, as the kernel is (decision 0045).
    metal["packages"][f"linux-headers-{KERNEL}"] = {"version": "6.18.44-1", "status": HELD}
    verdict = driver(metal, driver_inputs())
    assert verdict["request"]["settled"] is True
    assert verdict["failure"] == ""
    assert not any("is a container" in line for line in verdict["report"])


def test_the_running_kernel_is_the_one_the_module_read() -> None:
    verdict = driver(host(in_container=False, kernel="6.1.0-40-amd64"), driver_inputs())
    assert "linux-headers-6.1.0-40-amd64" in verdict["request"]["packages"]
    assert verdict["kernel"] == "6.1.0-40-amd64"


def test_podman_guest_facts_count_as_a_container_when_systemd_cannot_tell() -> None:
    facts = host(in_container=False)
    verdict = driver(
        facts, driver_inputs(virtualization_type="podman", virtualization_role="guest")
    )
    assert verdict["in_container"] is True
    assert verdict["failure"] == ""


def test_cuda_repo_builds_match_the_packaging_suffix_wildcard() -> None:
    facts = host(installed="580.159.04-1ubuntu1")
    facts["packages"] = {
        "cuda-drivers": {"version": "580.159.04-1ubuntu1", "status": HELD},
    }
    want = driver_inputs(
        source="cuda_repo",
        version="580.159.04",
        apt_packages=["cuda-drivers"],
        apt_version="580.159.04-*",
        extra_packages=[],
    )
    verdict = driver(facts, want)
    assert verdict["request"]["settled"] is True
    assert verdict["request"]["packages"] == ["cuda-drivers=580.159.04-*"]
    assert verdict["failure"] == ""


def test_a_preinstalled_driver_asks_for_no_packages() -> None:
    facts = host(in_container=False, secure_boot="SecureBoot enabled", packages={}, installed="")
    want = driver_inputs(source="preinstalled", version="580.159.04", uses_apt=False, dkms=False)
    verdict = driver(facts, want)
    assert verdict["request"] == {
        "role": "nvidia_driver",
        "packages": [],
        "hold": [],
        "settled": True,
        "blocked": "",
    }
    assert verdict["failure"] == ""
    assert verdict["report"][0].startswith("Secure Boot: SecureBoot enabled.")


TOOLKIT_PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]
CONVERGED_TOOLKIT: dict[str, Any] = {
    "dockerd": False,
    "containerd": True,
    "device_node": False,
    "packages": {p: {"version": "1.20.0-1", "status": HELD} for p in TOOLKIT_PACKAGES},
    "containerd_config": "imports",
    "keyring": True,
    "cdi_spec": False,
    "services": {"containerd.service": {"enabled": "enabled", "active": "active"}},
    "files_converged": True,
    "files_drift": "",
}


def toolkit_inputs(**changes: Any) -> dict[str, Any]:
    want: dict[str, Any] = {
        "packages": TOOLKIT_PACKAGES,
        "package_version": "1.20.0-1",
        "containerd_package_version": "1.6.20~ds1-1+deb12u2",
        "runtimes": ["containerd"],
    }
    want.update(changes)
    return want


def test_a_converged_toolkit_host_is_settled() -> None:
    request = toolkit(CONVERGED_TOOLKIT, toolkit_inputs())
    assert request["settled"] is True
    assert request["hold"] == TOOLKIT_PACKAGES


def test_a_fresh_toolkit_host_gets_the_pinned_packages_and_containerd() -> None:
    fresh = {**CONVERGED_TOOLKIT, "containerd": False, "packages": {}}
    request = toolkit(fresh, toolkit_inputs())
    assert request["settled"] is False
    assert request["packages"] == [f"{p}=1.20.0-1" for p in TOOLKIT_PACKAGES] + [
        "containerd=1.6.20~ds1-1+deb12u2"
    ]


def test_containerd_is_not_asked_for_when_only_docker_is_listed() -> None:
    fresh = {**CONVERGED_TOOLKIT, "containerd": False}
    request = toolkit(fresh, toolkit_inputs(runtimes=["docker"]))
    assert request["settled"] is True
    assert not any(p.startswith("containerd=") for p in request["packages"])


def test_a_toolkit_package_at_another_version_or_unheld_is_not_settled() -> None:
    other = copy.deepcopy(CONVERGED_TOOLKIT)
    other["packages"]["libnvidia-container1"]["version"] = "1.17.8-1"
    assert toolkit(other, toolkit_inputs())["settled"] is False
    unheld = copy.deepcopy(CONVERGED_TOOLKIT)
    unheld["packages"]["nvidia-container-toolkit"]["status"] = "install ok installed"
    assert toolkit(unheld, toolkit_inputs())["settled"] is False


DOCKER_CONTAINERD = "2.3.3-1~debian.12~bookworm"


def docker_inputs() -> dict[str, Any]:
    return toolkit_inputs(
        containerd_source="docker",
        containerd_package="containerd.io",
        containerd_package_version=DOCKER_CONTAINERD,
    )


def test_a_host_on_debians_containerd_moving_to_docker_gets_containerd_io_held() -> None:
    # Debian's containerd is there (the binary exists): the docker source still asks for
    # containerd.io at its pin, which replaces it, and holds it.
    request = toolkit(CONVERGED_TOOLKIT, docker_inputs())
    assert request["settled"] is False
    assert request["packages"][-1] == f"containerd.io={DOCKER_CONTAINERD}"
    assert request["hold"] == [*TOOLKIT_PACKAGES, "containerd.io"]


def test_containerd_io_held_at_the_pin_is_settled_and_another_build_is_not() -> None:
    converged = copy.deepcopy(CONVERGED_TOOLKIT)
    converged["packages"]["containerd.io"] = {"version": DOCKER_CONTAINERD, "status": HELD}
    assert toolkit(converged, docker_inputs())["settled"] is True
    unheld = copy.deepcopy(converged)
    unheld["packages"]["containerd.io"]["status"] = "install ok installed"
    assert toolkit(unheld, docker_inputs())["settled"] is False
    older = copy.deepcopy(converged)
    older["packages"]["containerd.io"]["version"] = "1.7.28-1~debian.12~bookworm"
    request = toolkit(older, docker_inputs())
    assert request["settled"] is False
    assert f"containerd.io={DOCKER_CONTAINERD}" in request["packages"]


def test_docker_containerd_is_not_asked_for_when_only_docker_is_listed() -> None:
    request = toolkit(CONVERGED_TOOLKIT, {**docker_inputs(), "runtimes": ["docker"]})
    assert request["settled"] is True
    assert request["hold"] == TOOLKIT_PACKAGES


def debian_metal(**changes: Any) -> dict[str, Any]:
    """A bare-metal Debian 12 host on its packaged kernel, driver converged."""
    metal = host(in_container=False, kernel="6.1.0-28-amd64", kernel_flavour="amd64")
    metal["kernel_headers"] = True
    for name in ("linux-image-6.1.0-28-amd64", "linux-image-amd64", "linux-headers-6.1.0-28-amd64"):
        metal["packages"][name] = {"version": "6.1.119-1", "status": HELD}
    metal.update(changes)
    return metal


def test_the_kernel_moves_with_its_headers_and_is_held_with_the_driver() -> None:
    request = driver(debian_metal(), driver_inputs())["request"]
    # The meta-package brings the headers of every kernel apt installs later.
    assert "linux-headers-amd64" in request["packages"]
    assert request["hold"] == [
        *DRIVER_PACKAGES,
        "linux-image-6.1.0-28-amd64",
        "linux-image-amd64",
        "linux-headers-6.1.0-28-amd64",
        "linux-headers-amd64",
    ]
    # Not settled until the meta-package is installed and every kernel package held.
    assert request["settled"] is False
    converged = debian_metal()
    converged["packages"]["linux-headers-amd64"] = {"version": "6.1.119-1", "status": HELD}
    assert driver(converged, driver_inputs())["request"]["settled"] is True
    unheld = copy.deepcopy(converged)
    unheld["packages"]["linux-image-amd64"]["status"] = "install ok installed"
    assert driver(unheld, driver_inputs())["request"]["settled"] is False


def test_the_kernel_policy_can_be_turned_off_and_skips_containers_and_unpackaged_kernels() -> None:
    request = driver(debian_metal(), driver_inputs(hold_kernel=False, kernel_headers_meta=False))[
        "request"
    ]
    assert "linux-headers-amd64" not in request["packages"]
    assert request["hold"] == DRIVER_PACKAGES
    # The lab: a container on the host machine's kernel, which no package of the host provides.
    lab = driver(host(kernel_flavour=None), driver_inputs())["request"]
    assert lab["hold"] == DRIVER_PACKAGES
    custom = driver(debian_metal(kernel_flavour=None), driver_inputs())["request"]
    assert custom["hold"] == [
        *DRIVER_PACKAGES,
        "linux-image-6.1.0-28-amd64",
        "linux-headers-6.1.0-28-amd64",
    ]
