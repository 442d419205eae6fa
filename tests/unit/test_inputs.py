"""URLs, keys and paths that would reach an apt source, a keyring or a command line as more than
a value: `gpuinfra config check` refuses them with one line, and so does the roles' preflight."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from gpuinfra import inputs
from tests.conftest import ROOT, run_cli

INJECTIONS = [
    # A newline adds an option to the apt source line (or a whole second line).
    (
        "nvidia_container_toolkit_repo_url",
        "https://mirror.example.internal/deb /\ndeb [trusted=yes] http://evil.example/ /",
    ),
    ("nvidia_container_toolkit_repo_url", "[trusted=yes] https://mirror.example.internal/deb"),
    ("nvidia_driver_cuda_repo_url", "https://mirror.example.internal/cuda --allow-unauthenticated"),
    ("nvidia_driver_distro_repo_url", "ftp://mirror.example.internal/debian"),
    ("nvidia_container_toolkit_repo_url", "https://deploy:S3cr3t@mirror.example.internal/deb"),
    ("nvidia_container_toolkit_repo_key_url", "http://mirror.example.internal/gpgkey"),
    ("nvidia_driver_cuda_repo_key_url", "http://mirror.example.internal/3bf863cc.pub"),
    ("nvidia_container_toolkit_repo_key_fingerprint", "F796ECB0"),
    ("nvidia_driver_preinstalled_paths", ["/usr/local/nvidia/bin$(touch /tmp/pwned)"]),
    ("nvidia_driver_preinstalled_paths", ["/opt/nvidia/bin:/tmp/evil"]),
    ("nvidia_driver_distro_suite", "bookworm main\ndeb http://evil.example/ x"),
    ("nvidia_container_toolkit_cdi_spec", "relative/cdi.yaml"),
]


def site_with(tmp_path: Path, key: str, value: object) -> Path:
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    (site / "group_vars" / "gpu_nodes" / "zz_bad.yml").write_text(yaml.safe_dump({key: value}))
    return site


@pytest.mark.parametrize(("key", "value"), INJECTIONS)
def test_config_check_refuses_an_injection_with_one_line(
    tmp_path: Path, key: str, value: object
) -> None:
    result = run_cli("config", "check", "--site", str(site_with(tmp_path, key, value)))
    assert result.code == 2, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if key in line]
    assert len(lines) == 1, result.stdout + result.stderr
    assert "zz_bad.yml" in lines[0]
    assert "Traceback" not in result.stderr


def test_the_example_site_and_the_mirror_it_documents_pass(tmp_path: Path) -> None:
    mirror = {
        "nvidia_container_toolkit_repo_url": "http://mirror.example.internal/libnvidia-container/stable/deb/amd64",
        "nvidia_container_toolkit_repo_key_url": "https://mirror.example.internal/libnvidia-container/gpgkey",
        "nvidia_container_toolkit_repo_key_fingerprint": "c95b 321b 61e8 8c18 09c4  f759 ddca e044 f796 ecb0",
        "nvidia_driver_preinstalled_paths": ["/usr/local/nvidia/bin", "/opt/nvidia-5.8+x/bin"],
    }
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    (site / "group_vars" / "gpu_nodes" / "zz_mirror.yml").write_text(yaml.safe_dump(mirror))
    result = run_cli("config", "check", "--site", str(site))
    assert result.code == 0, result.stdout + result.stderr


def test_a_key_over_http_is_allowed_on_loopback_only() -> None:
    assert inputs.key_url_problem("http://127.0.0.1:8000/gpgkey") == ""
    assert inputs.key_url_problem("http://localhost:8000/gpgkey") == ""
    assert "over http" in inputs.key_url_problem("http://127.0.0.1.example.internal/gpgkey")
