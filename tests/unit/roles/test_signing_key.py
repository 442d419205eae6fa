"""A repository's signing key is written only with its pinned fingerprint, and rewritten when
the keyring on the host holds another key (roles/*/library/gpuinfra_signing_key.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuinfra.lab import aptrepo

from .conftest import load_module

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "roles"
COPIES = [
    ROLES / role / "library" / "gpuinfra_signing_key.py"
    for role in ("nvidia_driver", "nvidia_container_toolkit")
]


def _new_key(home: Path, uid: str, algo: str = "ed25519") -> tuple[bytes, str]:
    """An armoured public key made by gpg, and its fingerprint as gpg prints it."""
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--batch", "--quiet", "--homedir", str(home), "--pinentry-mode", "loopback"]
    subprocess.run(
        [*gpg, "--passphrase", "", "--quick-gen-key", uid, algo, "sign", "1d"], check=True
    )
    armoured = subprocess.run(
        [*gpg, "--armor", "--export", uid], capture_output=True, check=True
    ).stdout
    colons = subprocess.run(
        [*gpg, "--with-colons", "--fingerprint", uid], capture_output=True, text=True, check=True
    ).stdout
    fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr"))
    return armoured, fingerprint


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, str]]:
    base = tmp_path_factory.mktemp("keys")
    return {
        "pinned": _new_key(base / "a", "pinned <a@gpuinfra.invalid>"),
        "other": _new_key(base / "b", "other <b@gpuinfra.invalid>", "rsa3072"),
    }


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served on loopback, and its URL."""
    directory = tmp_path / "www"
    directory.mkdir()
    with aptrepo.serving(directory) as server:
        yield directory, server.url


def run_key_module(
    tmp_path: Path, args: dict[str, Any], check: bool = False
) -> tuple[int, dict[str, Any]]:
    env = {
        **os.environ,
        "ANSIBLE_LIBRARY": str(ROLES / "nvidia_container_toolkit" / "library"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible"),
    }
    command = [
        str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local",
        "-e", f"ansible_python_interpreter={sys.executable}",
        "-m", "gpuinfra_signing_key", "-a", json.dumps(args),
    ] + (["--check"] if check else [])  # fmt: skip
    proc = subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return proc.returncode, result


def test_the_copies_are_identical() -> None:
    assert len({copy.read_text() for copy in COPIES}) == 1


def test_fingerprints_are_the_ones_gpg_prints(
    keys: dict[str, tuple[bytes, str]], tmp_path: Path
) -> None:
    module = load_module("gpuinfra_signing_key", COPIES[0])
    for armoured, fingerprint in keys.values():
        assert module.fingerprints(armoured) == [fingerprint]
    # The binary (dearmoured) form too, as in a .gpg keyring.
    armoured, fingerprint = keys["other"]
    (tmp_path / "key.asc").write_bytes(armoured)
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--yes",
            "--dearmor",
            "-o",
            str(tmp_path / "key.gpg"),
            str(tmp_path / "key.asc"),
        ],
        check=True,
    )
    assert module.fingerprints((tmp_path / "key.gpg").read_bytes()) == [fingerprint]


def test_a_key_with_the_pinned_fingerprint_is_written_once(
    keys: dict[str, tuple[bytes, str]], served: tuple[Path, str], tmp_path: Path
) -> None:
    directory, url = served
    armoured, fingerprint = keys["pinned"]
    (directory / "gpgkey").write_bytes(armoured)
    dest = tmp_path / "keyring.asc"
    # Spaced as gpg shows it: the module compares without spaces.
    spaced = " ".join(fingerprint[i : i + 4] for i in range(0, 40, 4))
    args = {"url": url + "gpgkey", "fingerprint": spaced.lower(), "dest": str(dest)}
    rc, result = run_key_module(tmp_path, args)
    assert rc == 0 and result["changed"] is True, result
    assert dest.read_bytes() == armoured
    rc, result = run_key_module(tmp_path, args)
    assert rc == 0 and result["changed"] is False, result


def test_a_key_with_another_fingerprint_writes_nothing(
    keys: dict[str, tuple[bytes, str]], served: tuple[Path, str], tmp_path: Path
) -> None:
    directory, url = served
    (directory / "gpgkey").write_bytes(keys["other"][0])
    dest = tmp_path / "keyring.asc"
    rc, result = run_key_module(
        tmp_path, {"url": url + "gpgkey", "fingerprint": keys["pinned"][1], "dest": str(dest)}
    )
    assert rc != 0
    assert keys["other"][1] in result["msg"] and keys["pinned"][1] in result["msg"]
    assert "nothing was written" in result["msg"]
    assert not dest.exists()


def test_a_keyring_holding_another_key_is_written_again(
    keys: dict[str, tuple[bytes, str]], served: tuple[Path, str], tmp_path: Path
) -> None:
    directory, url = served
    (directory / "gpgkey").write_bytes(keys["pinned"][0])
    dest = tmp_path / "keyring.asc"
    dest.write_bytes(keys["other"][0])
    args = {"url": url + "gpgkey", "fingerprint": keys["pinned"][1], "dest": str(dest)}
    rc, result = run_key_module(tmp_path, args, check=True)
    assert rc == 0 and result["changed"] is True
    assert dest.read_bytes() == keys["other"][0]
    rc, result = run_key_module(tmp_path, args)
    assert rc == 0 and result["changed"] is True
    assert dest.read_bytes() == keys["pinned"][0]


def test_a_key_over_http_from_another_host_is_refused(
    tmp_path: Path, keys: dict[str, tuple[bytes, str]]
) -> None:
    dest = tmp_path / "keyring.asc"
    args = {
        "url": "http://mirror.example.internal/gpgkey",
        "fingerprint": keys["pinned"][1],
        "dest": str(dest),
    }
    rc, result = run_key_module(tmp_path, args)
    assert rc != 0
    assert "https only" in result["msg"]
    assert not dest.exists()
