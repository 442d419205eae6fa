"""Support windows: each pin against the dated end of support of its release line.

The table is ``gpuinfra/data/support_windows.yaml``, with the source of every date. A pin past its
end is a warning; for a production environment it is an error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from gpuinfra.versions import Versions, minor_of, parse, pin_problem


@dataclass(frozen=True)
class Window:
    key: str
    line: str
    end: dt.date
    source: str
    note: str = ""
    tentative: bool = False


@dataclass(frozen=True)
class Finding:
    key: str
    message: str
    # past: the end is behind the date checked; soon: within 90 days; ok; undated.
    state: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


def table() -> dict[str, Any]:
    text = resources.files("gpuinfra.data").joinpath("support_windows.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def _line(table_lines: dict[str, Any], family: str, line: str, key: str) -> Window | None:
    entry = table_lines.get(family) or {}
    found = (entry.get("ends") or {}).get(line)
    if not found:
        return None
    return Window(
        key=key,
        line=f"{family} {line}",
        end=dt.date.fromisoformat(str(found["end"])),
        source=str(entry["source"]),
        note=str(found.get("note") or ""),
        tentative=bool(found.get("tentative")),
    )


def _maintained(entry: dict[str, Any], family: str, line: str, key: str, as_of: str) -> Finding:
    """A line supported while it is among the ``count`` newest minors on the table's date."""
    newest, count = parse(str(entry["newest"])), int(entry["count"])
    pinned = parse(line)
    behind = newest[1] - pinned[1] if pinned[:1] == newest[:1] else count
    kept = f"the {count} newest minors are maintained ({entry['note']}); {entry['newest']} is the newest on {as_of}"
    if behind >= count:
        return Finding(
            key,
            f"{family.capitalize()} {line} is no longer maintained: {kept} (source: {entry['source']})",
            "past",
        )
    return Finding(key, f"{family.capitalize()} {line} maintained: {kept}", "ok")


def pinned_lines(v: Versions) -> list[tuple[str, str, str]]:
    """(key in versions.yaml, family in the table, release line) for every dated pin. A pin the
    pinning rules refuse (``latest``, a malformed version) has no release line to judge."""
    pins: list[tuple[str, str, str, str]] = []  # (key, family, version, its pin format)
    for source in ("distro", "cuda_repo", "preinstalled"):
        build = v.driver(source)
        pins.append((f"nvidia_driver.{source}", "nvidia_driver", build.version, "nvidia_driver"))
        for suite, pin in build.releases.items():
            key = f"nvidia_driver.{source}.releases.{suite}"
            pins.append((key, "nvidia_driver", pin.version, "nvidia_driver"))
    operator_driver = v.gpu_operator.operands.get("driver", "")
    pins.append(("gpu_operator.operands.driver", "nvidia_driver", operator_driver, "nvidia_driver"))
    for name in ("containerd", "containerd_docker"):
        entry = getattr(v, name)
        pins.append((name, "containerd", entry.version, name))
        for suite, pin in entry.releases.items():
            pins.append((f"{name}.releases.{suite}", "containerd", pin.version, name))
    pins.append(("kubernetes", "kubernetes", v.kubernetes.version, "kubernetes"))
    pins.append(("gpu_operator", "gpu_operator", v.gpu_operator.version, "gpu_operator"))
    pins.append(("kueue", "kueue", v.kueue.version, "kueue"))
    if v.kubernetes.source.type == "eks":
        pins.append(("kubernetes", "eks", v.kubernetes.version, "kubernetes"))
    lines = []
    for key, family, version, pin_format in pins:
        if pin_problem(version, pin_format):
            continue
        lines.append((key, family, _release_line(family, version)))
    return lines


def _release_line(family: str, version: str) -> str:
    """The release line a version belongs to in the table: a driver's branch, a minor."""
    if family == "nvidia_driver":
        return version.split(".")[0]
    if family in ("gpu_operator", "kueue"):
        return minor_of(version)
    return ".".join(str(n) for n in parse(version)[:2])


def stack_pin(key: str, family: str) -> bool:
    """The pins an EKS stack runs: the control plane's minor under EKS's calendar, and the
    drivers on its GPU nodes (the AMI's, adopted, and the one the GPU Operator would install).
    Debian's driver and containerd serve bare-metal hosts only."""
    return (
        family == "eks"
        or key == "gpu_operator.operands.driver"
        or key.startswith("nvidia_driver.preinstalled")
    )


# The versions.yaml entry of each containerd source a site may choose
# (nvidia_container_toolkit_containerd_source).
CONTAINERD_ENTRIES = {"distro": "containerd", "docker": "containerd_docker"}


def site_pin(
    sources: set[str], containerd_sources: set[str] | None = None
) -> Callable[[str, str], bool]:
    """The pins a bare-metal site runs: the drivers of the install sources its hosts use (each
    release's build too), the containerd of the sources its hosts use (the distribution's when
    not given), and the upstream Kubernetes minor."""
    entries = {
        CONTAINERD_ENTRIES[s] for s in containerd_sources or {"distro"} if s in CONTAINERD_ENTRIES
    }

    def runs(key: str, family: str) -> bool:
        driver = key.startswith("nvidia_driver.") and key.split(".")[1] in sources
        containerd = family == "containerd" and key.split(".")[0] in entries
        return driver or containerd or (key, family) == ("kubernetes", "kubernetes")

    return runs


def check(
    v: Versions,
    today: dt.date,
    soon_days: int = 90,
    runs: Callable[[str, str], bool] | None = None,
) -> list[Finding]:
    """One finding per dated pin (past, soon, ok) and per pin the table cannot date; ``runs``
    keeps only the pins one environment runs (see ``stack_pin``, ``site_pin``)."""
    data = table()
    findings = []
    for key, family, line in pinned_lines(v):
        if runs is not None and not runs(key, family):
            continue
        if family in (data.get("maintained") or {}):
            findings.append(
                _maintained(data["maintained"][family], family, line, key, data["as_of"])
            )
            continue
        window = _line(data["lines"], family, line, key)
        label = {
            "nvidia_driver": f"driver branch R{line}",
            "eks": f"EKS {line} standard support",
            "gpu_operator": f"GPU Operator {line}",
        }.get(family, f"{family} {line}")
        if window is None:
            findings.append(Finding(key, f"{label}: no end of support in the table", "undated"))
            continue
        when = window.end.isoformat() + (" (tentative)" if window.tentative else "")
        note = f"; {window.note}" if window.note else ""
        if window.end < today:
            findings.append(
                Finding(key, f"{label} ended {when}{note} (source: {window.source})", "past")
            )
        elif (window.end - today).days <= soon_days:
            findings.append(
                Finding(
                    key, f"{label} ends {when}, in {(window.end - today).days} day(s){note}", "soon"
                )
            )
        else:
            findings.append(Finding(key, f"{label} supported until {when}", "ok"))
    for name, reason in (data.get("undated") or {}).items():
        findings.append(Finding(name, f"not dated: {reason}", "undated"))
    return findings


def prod_problems(
    v: Versions, today: dt.date, runs: Callable[[str, str], bool] | None = None
) -> list[str]:
    """What stops a production change: each pin it runs that is past its end of support."""
    return [
        f"versions.yaml: {finding} (environment prod)"
        for finding in check(v, today, runs=runs)
        if finding.state == "past"
    ]


EKS_AMI_VERIFY = (
    "aws ssm get-parameter --name "
    "/aws/service/eks/optimized-ami/{minor}/amazon-linux-2023/x86_64/nvidia/recommended/release_version"
    " --query Parameter.Value --output text"
)


def eks_ami_hint(v: Versions) -> str:
    """How to check the AMI release pin against what AWS publishes (no cloud access here)."""
    minor = ".".join(str(n) for n in parse(v.kubernetes.version)[:2])
    return (
        f"eks_gpu_ami {v.eks_gpu_ami.version}: the format (K8S-PATCH-DATE) is checked offline, the "
        f"release itself is not; verify it exists with `{EKS_AMI_VERIFY.format(minor=minor)}` (the "
        "latest) or in the amazon-eks-ami release notes (github.com/awslabs/amazon-eks-ami/releases)"
    )
