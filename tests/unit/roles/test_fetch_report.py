"""roles/node_packages/files/fetch_report.py: the line a host fails with when its package
transaction passes its deadline or apt gives up, read from acquire logs a lab host wrote.

The logs are the role's own (apt's stderr with Debug::pkgAcquire::Worker, without the
configuration messages): apt-get update on a lab host with one source on a loopback listener that
accepts and never answers, directly and as the http proxy.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from .conftest import ROLES, ROOT, load_module

SCRIPT = ROLES / "node_packages" / "files" / "fetch_report.py"
LOGS = ROOT / "tests" / "fixtures" / "node_packages"
LAB_PROXY = {"http": "http://127.0.0.1:3143/", "http::127.0.0.1": "DIRECT"}
ADVICE = "check the mirror or proxy, then converge again"


@pytest.fixture(scope="module")
def report() -> ModuleType:
    return load_module("fetch_report", SCRIPT)


def lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def test_a_silent_direct_source_is_named(report: ModuleType) -> None:
    line = report.timeout_line(
        lines("stalled-direct-acquire.log"), lines("stalled-direct-status"), LAB_PROXY, 15
    )
    assert (
        line == f"apt did not finish within 15 s; http://127.0.0.1:3997/ did not answer; {ADVICE}"
    )


def test_repositories_behind_a_silent_proxy_are_named_with_it(report: ModuleType) -> None:
    settings = report.proxies(
        'Acquire::http::Proxy "http://127.0.0.1:3997/";\n'
        'Acquire::http::Proxy::127.0.0.1 "DIRECT";\n'
    )
    line = report.timeout_line(
        lines("stalled-proxy-acquire.log"), lines("stalled-proxy-status"), settings, 15
    )
    assert line == (
        "apt did not finish within 15 s; http://deb.debian.org/debian/ and "
        "http://deb.debian.org/debian-security/ did not answer through the proxy "
        f"http://127.0.0.1:3997/; {ADVICE}"
    )


def test_a_fetch_apt_gave_up_on_is_named_with_apt_reason(report: ModuleType) -> None:
    line = report.failure_line(lines("failed-acquire.log"), LAB_PROXY)
    assert line == (
        "apt could not fetch http://127.0.0.1:3997/./InRelease: "
        f"Connection failed [IP: 127.0.0.1 3997]; {ADVICE}"
    )


def test_a_transaction_past_its_downloads_says_where_it_was(report: ModuleType) -> None:
    done = [
        line
        for line in lines("stalled-direct-acquire.log")
        if "3997" not in line  # the silent source's messages gone: every fetch finished
    ]
    status = ["pmstatus:nvidia-kernel-dkms:60.0000:Configuring nvidia-kernel-dkms (amd64)"]
    line = report.timeout_line(done, status, LAB_PROXY, 1800)
    assert line == (
        "apt did not finish within 1800 s; every download had finished and the last step was "
        "'Configuring nvidia-kernel-dkms (amd64)'; see /var/log/gpuinfra/node_packages/output.log "
        "on the host, raise node_packages_deadline if the install needs longer, then converge again"
    )


def test_an_error_without_a_failed_fetch_is_apt_own(report: ModuleType) -> None:
    log = ["E: Unable to locate package nvidia-driver"]
    assert (
        report.failure_line(log, LAB_PROXY) == "apt failed: Unable to locate package nvidia-driver"
    )


def test_a_fetch_that_started_and_stopped_is_told_apart(report: ModuleType) -> None:
    acquire = [
        " -> http:600%20URI%20Acquire%0aURI:%20http://deb.debian.org/debian/pool/x.deb"
        "%0aTarget-Repo-URI:%20http://deb.debian.org/debian/%0a%0a",
        " <- http:200%20URI%20Start%0aSize:%2010%0aURI:%20http://deb.debian.org/debian/pool/x.deb",
    ]
    line = report.timeout_line(acquire, [], LAB_PROXY, 60)
    assert (
        "http://deb.debian.org/debian/ stopped sending through the proxy http://127.0.0.1:3143/"
        in line
    )


def test_proxy_settings_follow_apt_and_hide_credentials(report: ModuleType) -> None:
    settings = report.proxies(
        'Acquire::http::Proxy "http://user:secret@proxy.example:3128/";\n'
        'Acquire::http::Proxy::mirror.example "DIRECT";\n'
        'Acquire::https::Proxy::secure.example "http://other.example:8080/";\n'
    )
    assert (
        report.proxy_for("http://deb.debian.org/debian/", settings) == "http://proxy.example:3128/"
    )
    assert report.proxy_for("http://mirror.example/debian/", settings) == ""
    assert report.proxy_for("https://secure.example/x", settings) == "http://other.example:8080/"
    # apt's https method falls back to the http proxy.
    assert report.proxy_for("https://elsewhere.example/x", settings) == "http://proxy.example:3128/"
