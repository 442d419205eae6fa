"""``versions.yaml``: every pinned version, where each comes from, and the rules between them.

Loading validates the file's shape (a ConfigError, exit 2, names the key). ``check`` applies the
pinning and compatibility rules and returns one line per problem.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from gpuinfra import inputs
from gpuinfra.errors import ConfigError, Problem, excerpt
from gpuinfra.loading import display_path, load_yaml, validate
from gpuinfra.paths import repo_root
from gpuinfra.suggest import did_you_mean

SourceType = Literal["apt", "dnf", "helm", "image", "eks", "eks-ami", "preinstalled"]

_SOURCE_FIELDS: dict[str, tuple[str, ...]] = {
    "apt": ("repository", "packages"),
    "dnf": ("repository", "packages"),
    "helm": ("repository", "chart"),
    "image": ("image",),
    "eks": (),
    "eks-ami": ("ami_type",),
    "preinstalled": (),
}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _no_surrounding_whitespace(cls, value: Any, info: ValidationInfo) -> Any:
        """A pin reaches apt, helm and image references as written, and the roles read this
        file themselves: "1.20.0 " or a block scalar's trailing newline is no version they
        know, so it is refused rather than trimmed here alone."""
        if info.field_name == "note":
            return value
        if isinstance(value, dict):
            items = list(value.values())
        else:
            items = list(value) if isinstance(value, tuple | list) else [value]
        for item in items:
            if isinstance(item, str) and item != item.strip():
                raise ValueError(
                    f"{excerpt(repr(item), 60)} has leading or trailing whitespace (allowed: "
                    "the value alone, without spaces or newlines around it)"
                )
        return value


class SigningKey(Strict):
    """The key a package repository is signed with: where it is fetched, and what it must be."""

    url: str
    fingerprint: str


class Source(Strict):
    """Where a pinned artefact is fetched from."""

    type: SourceType
    repository: str | None = None
    suite: str | None = None
    component: str | None = None
    packages: tuple[str, ...] = ()
    package_version: str | None = None
    chart: str | None = None
    image: str | None = None
    ami_type: str | None = None
    signing_key: SigningKey | None = None

    @model_validator(mode="after")
    def _required_fields(self) -> Source:
        missing = [f for f in _SOURCE_FIELDS[self.type] if not getattr(self, f)]
        if missing:
            raise ValueError(f"a '{self.type}' source needs {', '.join(missing)}")
        return self

    def describe(self) -> str:
        if self.type == "helm":
            return f"chart {self.chart} from {self.repository}"
        if self.type in ("apt", "dnf"):
            where = " ".join(p for p in (self.repository, self.suite, self.component) if p)
            return f"{self.type} {', '.join(self.packages)} from {where}"
        if self.type == "image":
            return f"image {self.image}"
        if self.type == "eks-ami":
            return f"EKS AMI type {self.ami_type}"
        if self.type == "preinstalled":
            return "already on the host image"
        return "Amazon EKS control plane"


class ReleasePin(Strict):
    """The build of one distribution release, where a fleet mixes releases (Debian 12 and 13):
    the same packages from that release's suite, at that release's version."""

    version: str
    package_version: str
    # The CUDA version this release's driver serves (driver entries only).
    cuda: str | None = None


class Component(Strict):
    version: str
    source: Source
    # Builds of other releases of the distribution, by suite (codename): the entry's own
    # version is that of ``source.suite``.
    releases: dict[str, ReleasePin] = Field(default_factory=dict)
    # The image or package tag when it is not the plain version (Triton's 26.07-py3).
    tag: str | None = None
    # An image's content digest (sha256:<64 hex>): the image is then pulled by digest, and a
    # tag moved on the registry changes nothing.
    digest: str | None = None
    note: str | None = None

    def image_ref(self) -> str:
        """The image reference to run: by digest where one is pinned, else by tag."""
        ref = f"{self.source.image}:{self.tag or self.version}"
        return f"{ref}@{self.digest}" if self.digest else ref

    def suites(self) -> list[str]:
        """The distribution releases this entry pins a build for, its own suite first."""
        own = [self.source.suite.split("-")[0]] if self.source.suite else []
        return own + [r for r in self.releases if r not in own]

    def versions(self) -> list[str]:
        """Every version this entry pins: its own, then one per listed release."""
        return [self.version, *(r.version for r in self.releases.values())]


class DriverBuild(Component):
    # The CUDA version this driver must serve; defaults to the project-wide ``cuda`` pin.
    cuda: str | None = None


class GpuOperator(Component):
    # Versions of the operands the operator deploys itself (driver, toolkit, ...).
    operands: dict[str, str] = Field(default_factory=dict)


class Triton(Component):
    # Image variants by name, each a tag of the same release: the vLLM backend ships only in
    # the ``-vllm-python-py3`` image, not in the plain ``-py3`` one.
    variants: dict[str, str] = Field(default_factory=dict)

    def image_tag(self, variant: str = "default") -> str:
        if variant == "default":
            return self.tag or self.version
        return self.variants[variant]


class DriverSources(Strict):
    distro: DriverBuild
    cuda_repo: DriverBuild
    preinstalled: DriverBuild


class Versions(Strict):
    kubernetes: Component
    eks_gpu_ami: Component
    nvidia_driver: DriverSources
    cuda: Component
    nvidia_container_toolkit: Component
    containerd: Component
    # Docker's containerd.io, for hosts whose site chooses that source over the distribution's.
    containerd_docker: Component
    gpu_operator: GpuOperator
    k8s_device_plugin: Component
    dcgm_exporter: Component
    volcano: Component
    kueue: Component
    triton: Triton
    cuda_sample: Component
    kube_prometheus_stack: Component
    keda: Component
    loki: Component
    alloy: Component
    cluster_autoscaler: Component
    efa_device_plugin: Component

    def entries(self) -> Iterator[tuple[str, Component]]:
        """Every pinned component with its dotted name, in file order."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, DriverSources):
                for source in type(value).model_fields:
                    yield f"nvidia_driver.{source}", getattr(value, source)
            else:
                yield name, value

    def driver(self, source: str) -> DriverBuild:
        build: DriverBuild = getattr(self.nvidia_driver, source)
        return build

    def cuda_for(self, build: DriverBuild) -> str:
        return build.cuda or self.cuda.version


def versions_path(root: Path | None = None) -> Path:
    return (root or repo_root()) / "versions.yaml"


def load(path: Path | None = None) -> Versions:
    """Load and shape-check versions.yaml: ConfigError on a structural mistake, or where two pins
    of the file that must agree do not (``agreement``)."""
    path = path or versions_path()
    shown = display_path(path)
    versions = validate(Versions, load_yaml(path), shown, strict=True)
    problems = agreement(versions)
    if problems:
        raise ConfigError(Problem(shown, p.key, p.message) for p in problems)
    return versions


def load_checked(path: Path | None = None) -> Versions:
    """Load versions.yaml and refuse it when a pinning or compatibility rule fails."""
    path = path or versions_path()
    versions = load(path)
    problems = check(versions)
    if problems:
        shown = display_path(path)
        raise ConfigError(Problem(shown, p.key, p.message) for p in problems)
    return versions


# --- pinning rules -------------------------------------------------------------------------

FLOATING_WORDS = frozenset({"latest", "stable", "main", "master", "edge", "nightly", "head"})
_RANGE = re.compile(r"^\s*(\^|~|>|<|=|!)|\|\||\s|(^|\.)(x|X|\*)($|\.)")

# What each kind of version must look like to be a pin. Names are dotted component names;
# a prefix match lets ``nvidia_driver`` cover every install source.
FORMATS: dict[str, tuple[re.Pattern[str], str]] = {
    "kubernetes": (re.compile(r"^\d+\.\d+(\.\d+)?$"), "MAJOR.MINOR[.PATCH], e.g. 1.34"),
    "eks_gpu_ami": (re.compile(r"^\d+\.\d+\.\d+-\d{8}$"), "K8S-PATCH-DATE, e.g. 1.34.2-20261110"),
    "nvidia_driver": (
        re.compile(r"^\d{3}\.\d{2,3}(\.\d{2})?$"),
        "a 3-digit branch, a 2- or 3-digit minor and an optional 2-digit patch, e.g. 580.159.04 "
        "or 570.26",
    ),
    "cuda": (re.compile(r"^\d+\.\d+$"), "MAJOR.MINOR, e.g. 13.0"),
    "triton": (re.compile(r"^\d+\.\d+\.\d+$"), "the Triton release, e.g. 2.71.0"),
}
_DEFAULT_FORMAT = (
    re.compile(r"^v?\d+\.\d+\.\d+([-+~][0-9A-Za-z.+~-]+)?$"),
    "a full version MAJOR.MINOR.PATCH, e.g. 1.20.0",
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_TAG_FORMATS: dict[str, tuple[re.Pattern[str], str]] = {
    "triton": (re.compile(r"^\d{2}\.\d{2}-py3$"), "YY.MM-py3, e.g. 26.07-py3"),
}


def _format_for(name: str) -> tuple[re.Pattern[str], str]:
    for key, fmt in FORMATS.items():
        if name == key or name.startswith(key + "."):
            return fmt
    return _DEFAULT_FORMAT


# The longest pin: a chart's name and version make its release's helm.sh/chart label, a
# Kubernetes label value of at most 63 characters, and no package build comes near it.
MAX_PIN = 63


def pin_problem(value: str, name: str) -> str | None:
    """Why ``value`` is not a valid pin for component ``name``, or None when it is."""
    text = value.strip()
    shown = excerpt(value, 60)
    if not text:
        return "version is empty"
    if len(text) > MAX_PIN:
        return f"'{shown}' is {len(text)} characters (allowed: at most {MAX_PIN})"
    if text.lower() in FLOATING_WORDS or _RANGE.search(text):
        return f"'{shown}' floats; pin an exact version"
    if re.fullmatch(r"v?\d+", text):
        return f"'{shown}' is a bare major version and floats; pin an exact version"
    pattern, expected = _format_for(name)
    if not pattern.match(text):
        return f"'{shown}' is malformed; expected {expected}"
    return None


def _source_problems(name: str, source: Source) -> list[RuleProblem]:
    """A package source's URLs are plain, and a vendor repository's key is pinned."""
    found: list[RuleProblem] = []
    if source.type not in ("apt", "dnf"):
        return found
    if why := inputs.repo_url_problem(source.repository):
        found.append(RuleProblem(key=f"{name}.source.repository", message=why))
    key = source.signing_key
    if key is None:
        # A distribution's own archive (a suite) is signed by the keyring the OS ships.
        if source.suite is None:
            found.append(
                RuleProblem(
                    key=f"{name}.source.signing_key",
                    message="a vendor repository needs its signing key: url (https) and "
                    "fingerprint",
                )
            )
        return found
    if why := inputs.key_url_problem(key.url):
        found.append(RuleProblem(key=f"{name}.source.signing_key.url", message=why))
    if why := inputs.fingerprint_problem(key.fingerprint):
        found.append(RuleProblem(key=f"{name}.source.signing_key.fingerprint", message=why))
    return found


# --- compatibility tables ------------------------------------------------------------------

# Minimum Linux x86_64 driver for each CUDA toolkit release (GA of each minor version).
# Source: NVIDIA CUDA Toolkit Release Notes, "CUDA Toolkit and Corresponding Driver Versions"
# (Table 3, column "Toolkit Driver Version", Linux x86_64).
CUDA_MIN_DRIVER: dict[str, str] = {
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
    "13.1": "590.44.01",
}
CUDA_TABLE_SOURCE = "NVIDIA CUDA Toolkit Release Notes, Table 3 (Linux x86_64)"

# Driver branches each GPU Operator release installs and supports in operator-managed mode.
# Source: NVIDIA GPU Operator documentation, platform support, "GPU Operator Component Matrix";
# the default driver of each release is the chart's values.yaml (driver.version).
GPU_OPERATOR_DRIVER_BRANCHES: dict[str, tuple[int, ...]] = {
    "25.3": (535, 550, 570, 575, 580),
    "25.10": (535, 570, 575, 580),
    "26.3": (535, 570, 580, 590),
    "26.7": (580, 590, 595),
}

# Kubernetes minor versions each scheduler release is tested against.
# Sources: Kueue's installation docs ("Kubernetes 1.29 or newer" since 0.9) and Volcano's
# README "Kubernetes compatibility" matrix.
KUEUE_KUBERNETES: dict[str, tuple[str, str]] = {
    "0.17": ("1.29", "1.34"),
    "0.18": ("1.29", "1.35"),
    "0.19": ("1.29", "1.36"),
}
VOLCANO_KUBERNETES: dict[str, tuple[str, str]] = {
    "1.12": ("1.17", "1.32"),
    "1.13": ("1.17", "1.33"),
    "1.14": ("1.17", "1.34"),
    "1.15": ("1.17", "1.35"),
}


def parse(version: str) -> tuple[int, ...]:
    """Numeric parts of a version: 'v1.20.0-1' -> (1, 20, 0); '535.261.03' -> (535, 261, 3)."""
    core = re.split(r"[-+~]", version.strip().lstrip("v"), maxsplit=1)[0]
    return tuple(int(p) for p in core.split(".") if p.isdigit())


def minor_of(version: str) -> str:
    parts = parse(version)
    return f"{parts[0]}.{parts[1]}" if len(parts) >= 2 else version


class RuleProblem(BaseModel):
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


def check(v: Versions) -> list[RuleProblem]:
    """Every pinning and compatibility problem of a loaded versions file."""
    problems: list[RuleProblem] = []

    def add(key: str, message: str) -> None:
        # Several driver sources read one cuda.version: its problem is told once.
        if (problem := RuleProblem(key=key, message=message)) not in problems:
            problems.append(problem)

    floating: set[str] = set()
    for name, comp in v.entries():
        issue = pin_problem(comp.version, name)
        if issue:
            add(f"{name}.version", issue)
            floating.add(name)
        if comp.tag is not None and name in _TAG_FORMATS:
            pattern, expected = _TAG_FORMATS[name]
            if not pattern.match(comp.tag):
                add(f"{name}.tag", f"'{excerpt(comp.tag, 60)}' is malformed; expected {expected}")
        problems.extend(_source_problems(name, comp.source))
        if comp.digest is not None and not _DIGEST.fullmatch(comp.digest):
            add(f"{name}.digest", f"'{comp.digest}' is not an image digest (sha256:<64 hex>)")
        if comp.digest is not None and comp.source.type != "image":
            add(f"{name}.digest", "only an image source takes a digest")
        if comp.source.package_version is not None:
            issue = pin_problem(comp.source.package_version, "package")
            if issue and "floats" in issue:
                add(f"{name}.source.package_version", issue)
        for suite, pin in comp.releases.items():
            where = f"{name}.releases.{suite}"
            if comp.source.type != "apt" or not comp.source.suite:
                add(where, "only an apt entry with a suite takes builds per release")
            elif suite == comp.source.suite.split("-")[0]:
                add(where, f"'{suite}' is the entry's own suite; its build is the entry's version")
            elif why := inputs.word_problem(suite):
                add(where, why)
            if issue := pin_problem(pin.version, name):
                add(f"{where}.version", issue)
                floating.add(where)
            if (issue := pin_problem(pin.package_version, "package")) and "floats" in issue:
                add(f"{where}.package_version", issue)
            if pin.cuda is not None and not isinstance(comp, DriverBuild):
                add(f"{where}.cuda", "only a driver entry names the CUDA version it serves")
    release = (v.triton.tag or "").removesuffix("-py3")
    # A malformed tag has its line; its variants are not judged against it.
    tag_format = _TAG_FORMATS["triton"][0]
    variants = v.triton.variants if tag_format.match(v.triton.tag or "") else {}
    for variant, tag in variants.items():
        if not re.fullmatch(rf"{re.escape(release)}-{re.escape(variant)}(-[a-z0-9]+)*-py3", tag):
            add(
                f"triton.variants.{variant}",
                f"'{tag}' is not the {variant} variant of tag {v.triton.tag}; "
                f"expected {release}-{variant}[-...]-py3, e.g. {release}-{variant}-python-py3",
            )
    for operand, value in v.gpu_operator.operands.items():
        issue = pin_problem(value, "nvidia_driver" if operand == "driver" else operand)
        if issue:
            add(f"gpu_operator.operands.{operand}", issue)
            floating.add(f"gpu_operator.operands.{operand}")

    # Driver >= what CUDA needs, for each install source and each release's build.
    builds: list[tuple[str, str, str, str]] = []
    for source in type(v.nvidia_driver).model_fields:
        name = f"nvidia_driver.{source}"
        build = v.driver(source)
        key = f"{name}.cuda" if build.cuda else "cuda.version"
        builds.append((name, build.version, v.cuda_for(build), key))
        for suite, pin in build.releases.items():
            where = f"{name}.releases.{suite}"
            cuda_key = f"{where}.cuda" if pin.cuda else key
            builds.append((where, pin.version, pin.cuda or v.cuda_for(build), cuda_key))
    for name, version, cuda, key in builds:
        if name in floating:
            continue
        if pin_problem(cuda, "cuda"):
            add(key, f"'{cuda}' is not a CUDA MAJOR.MINOR version")
            continue
        minimum = CUDA_MIN_DRIVER.get(cuda)
        if minimum is None:
            add(
                key,
                f"CUDA {cuda} is not in the minimum-driver table ({CUDA_TABLE_SOURCE}); "
                f"known: {', '.join(CUDA_MIN_DRIVER)}",
            )
        elif parse(version) < parse(minimum):
            add(
                f"{name}.version",
                f"driver {version} is older than {minimum}, the minimum for CUDA {cuda} "
                f"({CUDA_TABLE_SOURCE})",
            )

    # GPU Operator: the driver it installs must be on a branch it supports.
    op_minor = minor_of(v.gpu_operator.version)
    branches = GPU_OPERATOR_DRIVER_BRANCHES.get(op_minor)
    op_driver = v.gpu_operator.operands.get("driver")
    if "gpu_operator" in floating:
        pass
    elif branches is None:
        add(
            "gpu_operator.version",
            f"GPU Operator {op_minor} is not in the supported-driver "
            f"table; known: {', '.join(GPU_OPERATOR_DRIVER_BRANCHES)}",
        )
    elif op_driver and "gpu_operator.operands.driver" not in floating:
        branch = parse(op_driver)[0]
        if branch not in branches:
            add(
                "gpu_operator.operands.driver",
                f"driver branch {branch} is not supported by GPU Operator {op_minor} "
                f"(supported: {', '.join(map(str, branches))})",
            )
    operand_pins = {
        "toolkit": v.nvidia_container_toolkit.version,
        "device_plugin": v.k8s_device_plugin.version,
        "dcgm_exporter": v.dcgm_exporter.tag or v.dcgm_exporter.version,
    }
    for operand, pinned in operand_pins.items():
        deployed = v.gpu_operator.operands.get(operand)
        if deployed and deployed.lstrip("v") != pinned.lstrip("v"):
            add(
                f"gpu_operator.operands.{operand}",
                f"{deployed} differs from the pinned {pinned}; one version per component",
            )

    # Schedulers against Kubernetes.
    if "kubernetes" not in floating:
        k8s = parse(v.kubernetes.version)[:2]
        for name, table in (("kueue", KUEUE_KUBERNETES), ("volcano", VOLCANO_KUBERNETES)):
            if name in floating:
                continue
            scheduler: Component = getattr(v, name)
            minor = minor_of(scheduler.version)
            window = table.get(minor)
            if window is None:
                add(
                    f"{name}.version",
                    f"{name} {minor} is not in the Kubernetes compatibility "
                    f"table; known: {', '.join(table)}",
                )
            elif not parse(window[0]) <= k8s <= parse(window[1]):
                add(
                    f"{name}.version",
                    f"{name} {scheduler.version} supports Kubernetes {window[0]} to {window[1]}, "
                    f"not the pinned {v.kubernetes.version}",
                )
        if "eks_gpu_ami" not in floating:
            ami_k8s = parse(v.eks_gpu_ami.version)[:2]
            if ami_k8s != k8s:
                add(
                    "eks_gpu_ami.version",
                    f"AMI release {v.eks_gpu_ami.version} is built for Kubernetes "
                    f"{'.'.join(map(str, ami_k8s))}, not the pinned {v.kubernetes.version}",
                )
        # The Cluster Autoscaler is released per Kubernetes minor and supports that minor only.
        if "cluster_autoscaler" not in floating:
            autoscaler = parse(v.cluster_autoscaler.version)[:2]
            if autoscaler != k8s:
                add(
                    "cluster_autoscaler.version",
                    f"Cluster Autoscaler {v.cluster_autoscaler.version} drives Kubernetes "
                    f"{'.'.join(map(str, autoscaler))}, not the pinned {v.kubernetes.version}; "
                    "pin the release of the same minor",
                )
    return problems


# --- pins that must agree ------------------------------------------------------------------

# The releases the node roles serve a build for, by codename: the OS families and majors of
# roles/nvidia_driver/vars/main.yml (_nvidia_driver_supported) and
# roles/nvidia_container_toolkit/vars/main.yml (_nvidia_container_toolkit_supported).
RELEASES: dict[str, tuple[str, str]] = {
    "bookworm": ("Debian", "12"),
    "trixie": ("Debian", "13"),
    "jammy": ("Ubuntu", "22.04"),
    "noble": ("Ubuntu", "24.04"),
}
# How a distribution's build names its release inside the package version: Debian's stable
# updates (+deb12u3), Docker's builds (~debian.12~bookworm), Ubuntu's (~24.04, ubuntu24.04).
_RELEASE_MARKS = (
    re.compile(r"\+deb(?P<debian>\d+)u\d"),
    re.compile(r"debian\.?(?P<debian>\d+)\b"),
    re.compile(r"ubuntu(?P<ubuntu>\d{2}\.\d{2})"),
)

# Triton's NGC container YY.MM ships Triton server 2.N, and N rises by one with each monthly
# container release. Source: NVIDIA's Triton Inference Server release notes: release 24.02
# ships 2.43.0, and the notes list no 25.07 release (25.06, then 25.08); versions.yaml's
# 26.07-py3 ships 2.71.0. A tag within that span names exactly one server version; a later
# one is bounded only (a month NVIDIA skips lowers it), an earlier one likewise.
TRITON_ANCHOR = ((24, 2), 43)
TRITON_SKIPPED = frozenset({(25, 7)})
TRITON_KNOWN = ((24, 2), (26, 7))
TRITON_SOURCE = "Triton Inference Server release notes: container YY.MM ships Triton 2.N"
_TRITON_TAG = re.compile(r"^(\d{2})\.(\d{2})-")


def _builds_of(version: str, package_version: str) -> bool:
    """Whether a distribution package version (``[EPOCH:]UPSTREAM[-REVISION]``) is a build of
    the upstream ``version``: the upstream part is the version, or the version with a
    repack suffix (``1.6.20~ds1``, ``2.3+dfsg``)."""
    text = re.sub(r"^\d+:", "", package_version.strip())
    return re.fullmatch(rf"{re.escape(version.strip().lstrip('v'))}([-~+].*)?", text) is not None


def _release_of(package_version: str) -> str | None:
    """The release codename a package version names itself (``+deb12u3`` is bookworm's)."""
    for codename in RELEASES:
        if re.search(rf"\b{codename}\b", package_version):
            return codename
    for pattern in _RELEASE_MARKS:
        found = pattern.search(package_version)
        if found:
            family, number = next((k, v) for k, v in found.groupdict().items() if v)
            family = family.capitalize()
            return next(
                (c for c, (f, n) in RELEASES.items() if (f, n) == (family, number)),
                f"{family} {number}",
            )
    return None


def triton_release(tag: str) -> int | None:
    """The Triton minor version (N of 2.N) NGC container ``tag`` ships, by the release rule;
    None for a tag that is no ``YY.MM-...`` release."""
    found = _TRITON_TAG.match(tag)
    if not found:
        return None
    year, month = int(found.group(1)), int(found.group(2))
    (anchor_year, anchor_month), anchor = TRITON_ANCHOR
    months = (year - anchor_year) * 12 + (month - anchor_month)
    low, high = sorted(((year, month), (anchor_year, anchor_month)))
    skipped = sum(1 for skip in TRITON_SKIPPED if low < skip <= high)
    return anchor + months - skipped if months >= 0 else anchor + months + skipped


def _triton_problem(v: Versions) -> RuleProblem | None:
    tag, version = v.triton.tag, v.triton.version
    if tag is None or pin_problem(version, "triton") or not _TAG_FORMATS["triton"][0].match(tag):
        return None  # the pinning rules report these
    release = tuple(int(n) for n in tag[:5].split("."))
    if release in TRITON_SKIPPED:
        return RuleProblem(
            key="triton.tag",
            message=f"'{tag}' is no Triton release: NVIDIA published no {tag[:5]} container "
            f"({TRITON_SOURCE})",
        )
    expected = triton_release(tag)
    assert expected is not None
    major, minor = parse(version)[:2]
    first, last = TRITON_KNOWN
    if first <= release <= last:
        agrees = (major, minor) == (2, expected)
        want = f"2.{expected}"
    elif release > last:
        newest = triton_release(f"{last[0]:02d}.{last[1]:02d}-py3") or 0
        agrees = major == 2 and newest < minor <= expected
        want = f"2.{newest + 1} to 2.{expected}"
    else:
        agrees = major == 2 and expected <= minor < TRITON_ANCHOR[1]
        want = f"2.{expected} to 2.{TRITON_ANCHOR[1] - 1}"
    if agrees:
        return None
    return RuleProblem(
        key="triton.tag",
        message=f"'{tag}' ships Triton {want}, not triton.version {version}; the tag and the "
        f"version must name the same release ({TRITON_SOURCE}, one N a month)",
    )


def agreement(v: Versions) -> list[RuleProblem]:
    """Pins of one file that must agree: a package version is a build of its entry's version and
    of its release, a release is one the roles serve, NVIDIA's driver meta-package names the
    pinned driver's branch, and Triton's tag is its version's container."""
    problems: list[RuleProblem] = []

    def add(key: str, message: str) -> None:
        problems.append(RuleProblem(key=key, message=message))

    for name, comp in v.entries():
        suite = (comp.source.suite or "").split("-")[0]
        # (key, the version's key, version, package version, release) of each build.
        builds = [
            (
                f"{name}.source.package_version",
                f"{name}.version",
                comp.version,
                comp.source.package_version,
                suite,
            )
        ]
        for codename, pin in comp.releases.items():
            where = f"{name}.releases.{codename}"
            if codename not in RELEASES:
                served = ", ".join(f"{c} ({f} {n})" for c, (f, n) in RELEASES.items())
                add(
                    where,
                    f"'{codename}' is not a release the node roles serve"
                    f"{did_you_mean(codename, RELEASES)} (allowed: {served})",
                )
                continue
            if suite in RELEASES and RELEASES[suite][0] != RELEASES[codename][0]:
                family, number = RELEASES[codename]
                add(
                    where,
                    f"'{codename}' is {family} {number}, and the entry's suite {suite} is "
                    f"{' '.join(RELEASES[suite])}'s archive (allowed: a release of "
                    f"{RELEASES[suite][0]})",
                )
                continue
            builds.append(
                (
                    f"{where}.package_version",
                    f"{where}.version",
                    pin.version,
                    pin.package_version,
                    codename,
                )
            )
        for key, version_key, version, package, release in builds:
            if package is None or pin_problem(version, name):
                continue  # nothing to compare, or the pinning rules report the version
            if "floats" in (pin_problem(package, "package") or ""):
                continue  # the pinning rules report it
            if not _builds_of(version, package):
                add(
                    key,
                    f"'{package}' is not a build of {version_key} {version} (allowed: "
                    f"{version.lstrip('v')} with a package revision, e.g. {version.lstrip('v')}-1)",
                )
                continue
            named = _release_of(package)
            if release in RELEASES and named is not None and named != release:
                add(
                    key,
                    f"'{package}' is a build for {named}, not for {release} (allowed: the build "
                    f"of {release}'s archive)",
                )
        for package in comp.source.packages:
            drivers = re.fullmatch(r"cuda-drivers-(\d+)", package)
            if (
                drivers
                and name.startswith("nvidia_driver.")
                and not pin_problem(comp.version, name)
            ):
                branch = comp.version.split(".")[0]
                if drivers.group(1) != branch:
                    add(
                        f"{name}.source.packages",
                        f"'{package}' installs driver branch {drivers.group(1)}, not the branch of "
                        f"{name}.version {comp.version} (allowed: cuda-drivers-{branch})",
                    )
    if problem := _triton_problem(v):
        problems.append(problem)
    return problems


@cache
def pinned(root: Path | None = None) -> Versions:
    """The repository's own versions, checked; cached for the process."""
    return load_checked(versions_path(root))
