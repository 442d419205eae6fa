"""playbooks/upgrade_driver.yml on a converged lab host: the driver role run on its own.

The roll releases the driver's holds, runs nvidia_driver alone (its own package run through
node_packages), checks the node and holds the driver again. No Kubernetes node here, and a
container cannot reboot into a new module, so those steps are reported, not run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuinfra import lab, versions
from gpuinfra.lab import runner

from .conftest import CONVERGED, host_connection

pytestmark = pytest.mark.lab
DRIVER = versions.pinned().driver("distro")


def test_upgrade_roll_reinstates_the_pin_and_the_holds(
    second_converge: runner.RunResult, lab_settings: lab.Settings, inventory: Path, repo_root: Path
) -> None:
    assert second_converge.ok
    target = CONVERGED[0]
    host = host_connection(lab_settings, target)
    result = runner.converge(
        repo_root / "playbooks" / "upgrade_driver.yml", inventory, limit=target
    )
    assert result.ok, result.failures
    assert result.reports[target]["summary"] == "no GPU present"
    # The holds were released and set again: that is the roll's only change on a pinned host.
    assert result.changed()[target] >= 1
    held = set(host.check_output("apt-mark showhold").split())
    assert {"nvidia-driver", "nvidia-kernel-dkms"} <= held
    assert host.package("nvidia-driver").version == DRIVER.source.package_version
    # The toolkit's holds are not the roll's to touch.
    assert "nvidia-container-toolkit" in held
