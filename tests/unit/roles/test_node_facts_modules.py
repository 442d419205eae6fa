"""The node roles' facts modules, run by Ansible on this machine as a play would run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "roles"
NODE_ROLES = ("nvidia_driver", "nvidia_container_toolkit")


def run_module(
    tmp_path: Path, role: str, args: dict[str, Any], *, check: bool = False
) -> dict[str, Any]:
    """The result of the role's facts module on localhost."""
    env = {
        **os.environ,
        "ANSIBLE_LIBRARY": str(ROLES / role / "library"),
        "ANSIBLE_MODULE_UTILS": str(ROLES / role / "module_utils"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible"),
    }
    command = [
        str(Path(sys.executable).parent / "ansible"),
        "localhost",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-m",
        f"{role}_facts",
        "-a",
        json.dumps(args),
    ] + (["--check"] if check else [])
    proc = subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["changed"] is False
    return result


def run_facts(tmp_path: Path, role: str, args: dict[str, Any]) -> dict[str, Any]:
    """The fact the role's facts module returns on localhost."""
    facts: dict[str, Any] = run_module(tmp_path, role, args)["ansible_facts"][f"{role}_host"]
    return facts


def write_stamp(tmp_path: Path, role: str, args: dict[str, Any], *, check: bool = False) -> None:
    result = run_module(tmp_path, role, {**args, "write_stamp": True}, check=check)
    # The facts read before the file tasks stay as they were.
    assert "ansible_facts" not in result


def toolkit_args(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "containerd_config": str(tmp_path / "config.toml"),
        "containerd_imports": "/etc/containerd/conf.d/*.toml",
        "keyring": str(tmp_path / "key.asc"),
        "cdi_spec": str(tmp_path / "cdi.yaml"),
    }
    args.update(changes)
    return args


# In substance what Docker's containerd.io package puts at /etc/containerd/config.toml: no
# version line, CRI disabled, the rest commented out.
DOCKER_CONFIG = """#   Licensed under the Apache License, Version 2.0
disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#state = "/run/containerd"

#[grpc]
#  address = "/run/containerd/containerd.sock"
"""


def test_the_module_utils_copies_are_identical() -> None:
    copies = {
        (ROLES / role / "module_utils" / "gpuinfra_node_state.py").read_text()
        for role in NODE_ROLES
    }
    assert len(copies) == 1


def test_the_driver_facts_read_this_machine(tmp_path: Path) -> None:
    facts = run_facts(
        tmp_path,
        "nvidia_driver",
        {
            "packages": ["dpkg", "no-such-package-gpuinfra"],
            "headers_package": True,
            "version_package": "dpkg",
            "services": ["no-such-unit-gpuinfra.service"],
        },
    )
    assert facts["kernel"] == os.uname().release
    assert facts["kernel_headers"] == Path(f"/lib/modules/{os.uname().release}/build").exists()
    dpkg_version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "dpkg"], capture_output=True, text=True, check=True
    ).stdout
    assert facts["packages"]["dpkg"] == {"version": dpkg_version, "status": "install ok installed"}
    assert "no-such-package-gpuinfra" not in facts["packages"]
    assert facts["installed"] == dpkg_version
    assert facts["services"]["no-such-unit-gpuinfra.service"]["active"] != "active"
    assert facts["device_node"] == Path("/dev/nvidiactl").exists()
    assert facts["components_elsewhere"] is None


def test_the_driver_facts_list_the_components_other_apt_sources_enable(tmp_path: Path) -> None:
    wanted = subprocess.run(
        "grep -rhsE '^[^#]*\\s(contrib|non-free|non-free-firmware)(\\s|$)' "
        "/etc/apt/sources.list /etc/apt/sources.list.d",
        shell=True,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    facts = run_facts(tmp_path, "nvidia_driver", {"components_exclude": "/nonexistent"})
    expected = [c for c in ("contrib", "non-free", "non-free-firmware") if c in wanted]
    assert facts["components_elsewhere"] == expected


def test_a_stamp_matches_until_a_file_its_mode_or_an_input_changes(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "thing.conf"
    config.parent.mkdir()
    config.write_text("a = 1\n")
    config.chmod(0o644)
    stamp = tmp_path / "state" / "stamp.json"
    paths = [str(config.parent), str(config), str(tmp_path / "removed.conf")]
    base = {"paths": paths, "fingerprint": "inputs-1", "stamp": str(stamp)}

    assert run_facts(tmp_path, "nvidia_driver", base)["files_drift"].startswith("no readable stamp")
    write_stamp(tmp_path, "nvidia_driver", base, check=True)
    assert not stamp.exists(), "check mode wrote the stamp"

    write_stamp(tmp_path, "nvidia_driver", base)
    assert run_facts(tmp_path, "nvidia_driver", base)["files_converged"] is True

    other = run_facts(tmp_path, "nvidia_driver", {**base, "fingerprint": "inputs-2"})
    assert other["files_drift"] == "the role's inputs changed since the stamp"
    fewer = run_facts(tmp_path, "nvidia_driver", {**base, "paths": paths[:2]})
    assert fewer["files_drift"] == "the role writes other paths than the stamp records"

    config.chmod(0o600)
    assert run_facts(tmp_path, "nvidia_driver", base)["files_drift"] == (
        f"{config} changed since the stamp"
    )
    config.chmod(0o644)
    config.write_text("a = 2\n")
    assert run_facts(tmp_path, "nvidia_driver", base)["files_drift"] == (
        f"{config} changed since the stamp"
    )
    config.write_text("a = 1\n")
    (tmp_path / "removed.conf").write_text("back\n")
    assert run_facts(tmp_path, "nvidia_driver", base)["files_drift"] == (
        f"{tmp_path / 'removed.conf'} changed since the stamp"
    )


def test_the_components_other_sources_enable_are_part_of_the_fingerprint(tmp_path: Path) -> None:
    stamp = tmp_path / "stamp.json"
    args = {"paths": [], "fingerprint": "x", "stamp": str(stamp)}
    write_stamp(tmp_path, "nvidia_driver", args)
    assert run_facts(tmp_path, "nvidia_driver", args)["files_converged"] is True
    # The same inputs, now also asking which components other sources enable: another digest.
    with_components = {**args, "components_exclude": "/nonexistent"}
    assert run_facts(tmp_path, "nvidia_driver", with_components)["files_converged"] is False


@pytest.mark.parametrize(
    ("content", "state"),
    [
        (None, "absent"),
        ('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n', "imports"),
        ('version = 2\nimports = ["/etc/other/*.toml"]\n', "other_imports"),
        ("version = 2\n", "no_imports"),
        # Docker's containerd.io ships this file: a version 1 file with CRI disabled.
        (DOCKER_CONFIG, "cri_disabled"),
        # Disabling CRI wins over imports: a drop-in cannot enable it again.
        (
            'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
            'disabled_plugins = [\n  "io.containerd.internal.v1.tracing",\n'
            '  "io.containerd.grpc.v1.cri",\n]\n',
            "cri_disabled",
        ),
        ('version = 3\ndisabled_plugins = ["io.containerd.cri.v1.runtime"]\n', "cri_disabled"),
        # Another plugin disabled, a commented line, a key of a table: CRI stays on.
        (
            'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
            'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs"]\n',
            "imports",
        ),
        ('#disabled_plugins = ["cri"]\nversion = 2\n', "no_imports"),
        ('version = 2\n[plugins.x]\n  disabled_plugins = ["cri"]\n', "no_imports"),
    ],
)
def test_the_toolkit_facts_tell_how_containerd_imports_the_drop_ins(
    tmp_path: Path, content: str | None, state: str
) -> None:
    if content is not None:
        (tmp_path / "config.toml").write_text(content)
    facts = run_facts(tmp_path, "nvidia_container_toolkit", toolkit_args(tmp_path))
    assert facts["containerd_config"] == state


def test_the_toolkit_facts_see_the_key_and_the_cdi_specification(tmp_path: Path) -> None:
    facts = run_facts(tmp_path, "nvidia_container_toolkit", toolkit_args(tmp_path))
    assert (facts["keyring"], facts["cdi_spec"]) == (False, False)
    (tmp_path / "key.asc").write_text("key\n")
    (tmp_path / "cdi.yaml").write_text("cdiVersion: 0.5.0\n")
    facts = run_facts(tmp_path, "nvidia_container_toolkit", toolkit_args(tmp_path))
    assert (facts["keyring"], facts["cdi_spec"]) == (True, True)
    assert facts["containerd"] == Path("/usr/bin/containerd").exists()


class _FailingModule:
    def fail_json(self, **result: Any) -> None:
        raise AssertionError(result["msg"])


def driver_facts_module() -> Any:
    """roles/nvidia_driver/library/nvidia_driver_facts.py as a plain module, with its module_utils."""
    import importlib.util

    from tests.unit.roles.conftest import load_module

    load_module(
        "ansible.module_utils.gpuinfra_node_state",
        ROLES / "nvidia_driver" / "module_utils" / "gpuinfra_node_state.py",
    )
    spec = importlib.util.spec_from_file_location(
        "nvidia_driver_facts", ROLES / "nvidia_driver" / "library" / "nvidia_driver_facts.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DEBIAN_13_SOURCES = """Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie trixie-updates
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.debian.org/debian-security
Suites: trixie-security
Components: main non-free-firmware contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def test_deb822_only_sources_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian 13's default: no /etc/apt/sources.list, one deb822 file."""
    facts = driver_facts_module()
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "debian.sources").write_text(DEBIAN_13_SOURCES)
    own = parts / "gpuinfra-debian-nonfree.sources"
    own.write_text("Types: deb\nComponents: contrib non-free non-free-firmware\n")
    monkeypatch.setattr(facts, "APT_ETC", str(tmp_path))
    assert not (tmp_path / "sources.list").exists()
    found = facts.components_elsewhere(_FailingModule(), str(own))
    # The role's own file is left out: only what the host's sources enable counts.
    assert found == ["contrib", "non-free-firmware"]


def test_one_line_and_deb822_sources_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = driver_facts_module()
    (tmp_path / "sources.list").write_text(
        "# deb http://deb.debian.org/debian bookworm non-free\n"
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "http://deb.debian.org/debian bookworm main non-free\n"
    )
    (tmp_path / "sources.list.d").mkdir()
    monkeypatch.setattr(facts, "APT_ETC", str(tmp_path))
    assert facts.components_elsewhere(_FailingModule(), "/nonexistent") == ["non-free"]
