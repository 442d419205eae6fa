"""The stand-in toolkit repository: what apt and the toolkit role see of it."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from gpuinfra import versions
from gpuinfra.lab import aptrepo
from tests.unit.roles.conftest import ROOT, load_module

TOOLKIT = versions.pinned().nvidia_container_toolkit


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> aptrepo.Repository:
    return aptrepo.build(tmp_path_factory.mktemp("repo") / "repo")


@pytest.fixture(scope="module")
def bin_dir(repo: aptrepo.Repository, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("unpacked")
    for deb in repo.path.glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root / "usr" / "bin"


def _stanzas(text: str) -> dict[str, dict[str, str]]:
    packages = {}
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        packages[fields["Package"]] = fields
    return packages


def test_packages_are_named_and_versioned_like_nvidias(repo: aptrepo.Repository) -> None:
    packages = _stanzas((repo.path / "Packages").read_text())
    assert set(packages) == set(TOOLKIT.source.packages)
    assert {p["Version"] for p in packages.values()} == {TOOLKIT.source.package_version}
    pinned = f"(= {TOOLKIT.source.package_version})"
    assert packages["nvidia-container-toolkit"]["Depends"] == (
        f"nvidia-container-toolkit-base {pinned}, libnvidia-container-tools {pinned}"
    )
    assert packages["libnvidia-container-tools"]["Depends"] == f"libnvidia-container1 {pinned}"


def test_inrelease_verifies_with_the_published_key(
    repo: aptrepo.Repository, tmp_path: Path
) -> None:
    keyring = tmp_path / "keyring.gpg"
    subprocess.run(
        ["gpg", "--batch", "--yes", "--dearmor", "-o", str(keyring), str(repo.key_file)],
        check=True,
    )
    ok = subprocess.run(
        ["gpgv", "--keyring", str(keyring), str(repo.path / "InRelease")], capture_output=True
    )
    assert ok.returncode == 0, ok.stderr
    tampered = tmp_path / "InRelease"
    tampered.write_text((repo.path / "InRelease").read_text().replace("amd64", "arm64", 1))
    bad = subprocess.run(["gpgv", "--keyring", str(keyring), str(tampered)], capture_output=True)
    assert bad.returncode != 0


def test_release_hashes_match_the_index(repo: aptrepo.Repository) -> None:
    release = (repo.path / "Release").read_text()
    digest = hashlib.sha256((repo.path / "Packages").read_bytes()).hexdigest()
    assert f" {digest} " in release


def test_server_serves_the_repository_on_loopback(repo: aptrepo.Repository) -> None:
    with aptrepo.serving(repo.path) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.key_url, timeout=5) as response:
            assert response.read() == repo.key_file.read_bytes()
    with pytest.raises(OSError):
        urllib.request.urlopen(server.key_url, timeout=2)


def _ctk(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "nvidia-ctk"), *args], capture_output=True, text=True, check=False
    )


def test_nvidia_ctk_reports_the_pinned_version(bin_dir: Path) -> None:
    out = _ctk(bin_dir, "--version")
    assert out.returncode == 0
    assert out.stdout.splitlines()[0] == f"NVIDIA Container Toolkit CLI version {TOOLKIT.version}"


def test_nvidia_ctk_writes_a_containerd_dropin_once(bin_dir: Path, tmp_path: Path) -> None:
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    args = ("runtime", "configure", "--runtime=containerd", f"--config={dropin}")
    first = _ctk(bin_dir, *args, "--set-as-default")
    assert first.returncode == 0, first.stderr
    config = tomllib.loads(dropin.read_text())
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["default_runtime_name"] == "nvidia"
    nvidia = cri["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    again = _ctk(bin_dir, *args, "--set-as-default")
    assert again.returncode == 0
    assert again.stdout == ""
    not_default = _ctk(bin_dir, *args)
    assert "Wrote updated config" in not_default.stdout
    assert "default_runtime_name" not in dropin.read_text()


def test_nvidia_ctk_merges_docker_daemon_json(bin_dir: Path, tmp_path: Path) -> None:
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"log-driver": "journald"}))
    out = _ctk(bin_dir, "runtime", "configure", "--runtime=docker", f"--config={daemon}")
    assert out.returncode == 0, out.stderr
    merged = json.loads(daemon.read_text())
    assert merged["log-driver"] == "journald"
    assert merged["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"


def test_nvidia_ctk_refuses_what_it_does_not_implement(bin_dir: Path, tmp_path: Path) -> None:
    out = _ctk(bin_dir, "runtime", "configure", "--runtime=crio")
    assert out.returncode == 2
    assert "unsupported runtime 'crio'" in out.stderr
    spec = tmp_path / "nvidia.yaml"
    assert _ctk(bin_dir, "cdi", "generate", f"--output={spec}").returncode == 0
    assert "kind: nvidia.com/gpu" in spec.read_text()


def _expiry_days(key_file: Path) -> float:
    with tempfile.TemporaryDirectory() as home:
        shown = subprocess.run(
            ["gpg", "--batch", "--homedir", home, "--with-colons", "--show-keys", str(key_file)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    expires = next(line.split(":")[6] for line in shown.splitlines() if line.startswith("pub"))
    return (float(expires) - time.time()) / 86400


def test_the_stand_in_key_outlives_a_lab_and_is_kept_across_builds(
    repo: aptrepo.Repository, tmp_path: Path
) -> None:
    # A lab runs for weeks: a key that expires in a day makes apt refuse the repository.
    assert _expiry_days(repo.key_file) > 365
    again = aptrepo.build(repo.path)
    assert again.fingerprint == repo.fingerprint
    assert again.key_file.read_bytes() == repo.key_file.read_bytes()
    elsewhere = aptrepo.build(tmp_path / "repo")
    assert elsewhere.fingerprint != repo.fingerprint


def test_a_key_about_to_expire_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = aptrepo.build(tmp_path / "repo")
    # Seen from two years minus a week later, the key has less than KEY_RENEW_DAYS left.
    later = time.time() + (730 - 7) * 86400
    monkeypatch.setattr(aptrepo.time, "time", lambda: later)
    renewed = aptrepo.build(tmp_path / "repo")
    assert renewed.fingerprint != first.fingerprint


def test_the_fingerprint_is_the_one_the_roles_key_module_computes(
    repo: aptrepo.Repository,
) -> None:
    module = load_module(
        "gpuinfra_signing_key",
        ROOT / "roles" / "nvidia_container_toolkit" / "library" / "gpuinfra_signing_key.py",
    )
    assert module.fingerprints(repo.key_file.read_bytes()) == [repo.fingerprint]
    with aptrepo.serving(repo.path) as server:
        assert server.fingerprint == repo.fingerprint


# --- the stand-in of Docker's repository ----------------------------------------------------

DOCKER = versions.pinned().containerd_docker


@pytest.fixture(scope="module")
def docker_repo(tmp_path_factory: pytest.TempPathFactory) -> aptrepo.Repository:
    """Built from a small deb standing for Debian's containerd (the lab fetches the real one)."""
    work = tmp_path_factory.mktemp("docker")
    root = work / "containerd"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "containerd").write_text("#!/bin/sh\necho containerd\n")
    (root / "DEBIAN" / "control").write_text(
        "Package: containerd\nVersion: 1.6.20~ds1-1+deb12u3\nArchitecture: amd64\n"
        "Maintainer: t <t@example.invalid>\nDescription: t\n"
    )
    deb = work / "containerd.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True)
    return aptrepo.build_docker(work / "repo", [deb], key_home=work / "key")


def test_docker_stand_in_is_laid_out_as_dockers_repository(
    docker_repo: aptrepo.Repository, tmp_path: Path
) -> None:
    dist = docker_repo.path / "dists" / "bookworm"
    index = (dist / "stable" / "binary-amd64" / "Packages").read_text()
    [stanza] = _stanzas(index).values()
    assert stanza["Package"] == "containerd.io"
    assert stanza["Version"] == DOCKER.source.package_version
    assert (stanza["Conflicts"], stanza["Replaces"], stanza["Provides"]) == (
        "containerd, runc",
        "containerd, runc",
        "containerd, runc",
    )
    assert (docker_repo.path / stanza["Filename"]).is_file()
    release = (dist / "Release").read_text()
    assert "Suite: bookworm" in release and "Components: stable" in release
    digest = hashlib.sha256(
        (dist / "stable" / "binary-amd64" / "Packages").read_bytes()
    ).hexdigest()
    assert f" {digest} " in release and "stable/binary-amd64/Packages" in release
    keyring = tmp_path / "keyring.gpg"
    subprocess.run(
        ["gpg", "--batch", "--yes", "--dearmor", "-o", str(keyring), str(docker_repo.path / "gpg")],
        check=True,
    )
    ok = subprocess.run(["gpgv", "--keyring", str(keyring), str(dist / "InRelease")])
    assert ok.returncode == 0


def test_docker_stand_in_ships_a_config_that_disables_cri_and_the_binaries(
    docker_repo: aptrepo.Repository, tmp_path: Path
) -> None:
    [deb] = docker_repo.path.glob("dists/bookworm/pool/stable/amd64/*.deb")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    config = tomllib.loads((tmp_path / "etc" / "containerd" / "config.toml").read_text())
    assert config["disabled_plugins"] == ["cri"]
    assert (tmp_path / "usr" / "bin" / "containerd").is_file()
    conffiles = subprocess.run(
        ["dpkg-deb", "-I", str(deb), "conffiles"], capture_output=True, text=True, check=True
    ).stdout
    assert conffiles.strip() == "/etc/containerd/config.toml"


def test_a_release_without_a_docker_build_is_refused(tmp_path: Path) -> None:
    with pytest.raises(aptrepo.ToolError, match="no containerd_docker build for forky"):
        aptrepo.build_docker(tmp_path / "repo", [], suite="forky")
