"""What every add-on spec shares: the render dataclasses, the settings base and cluster facts.

The facts here are the contracts between add-ons that must agree for the cluster to work: the
label the Prometheus stack selects monitors and rules by, the taint GPU nodes carry and the node
label the node pools set per GPU type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gpuinfra.versions import Component

# The Prometheus stack's release name. kube-prometheus-stack labels its own monitors with
# ``release: <release>``; selecting on that same label keeps the chart's monitors and ours in one
# selector (an explicit selector on another label would silently drop the chart's own).
PROMETHEUS_RELEASE = "kube-prometheus-stack"
MONITOR_LABELS: dict[str, str] = {"release": PROMETHEUS_RELEASE}

# GPU nodes carry this taint so that only pods asking for GPUs (or tolerating it) land there.
GPU_TAINT: dict[str, str] = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION: dict[str, str] = {
    "key": GPU_TAINT["key"],
    "operator": "Exists",
    "effect": GPU_TAINT["effect"],
}
# Node pools (Pulumi) and site inventories label each GPU node with its GPU model (h100, l4).
GPU_TYPE_LABEL = "gpuinfra.dev/gpu-type"
GPU_RESOURCE = "nvidia.com/gpu"
# The EFA interfaces an AWS node offers its pods (the EFA device plugin's resource).
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Every pod that requests GPUs carries these; GPU-hours are reported by them (accounting.py).
TEAM_LABEL = "team"
PROJECT_LABEL = "project"

# A DNS-1123 label, 63 characters at most: namespaces, most object names, LocalQueues.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# A Kubernetes resource quantity, unsigned: 8, 500m, 64Gi, 1.5, .5, or a decimal exponent
# (1e3, 5E-1; "1E" alone is exa), as the API server's parser takes them.
QUANTITY_PATTERN = (
    r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
)
_QUANTITY = re.compile(QUANTITY_PATTERN)
# What each suffix of a quantity multiplies by: decimal SI, binary SI, milli, micro and nano.
QUANTITY_UNITS: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("0.001"),
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate("kMGTPE")},
    **{f"{s}i": Decimal(1024) ** (i + 1) for i, s in enumerate("KMGTPE")},
}


def quantity_amount(text: str) -> Decimal | None:
    """What a quantity QUANTITY_PATTERN takes stands for (bytes, cores), exactly; None for a
    text that is not one."""
    found = _QUANTITY.fullmatch(text)
    if found is None:
        return None
    suffix = found.group(3) or ""
    if suffix not in QUANTITY_UNITS:  # an exponent, which Decimal reads as written
        return Decimal(text)
    return Decimal(text.removesuffix(suffix)) * QUANTITY_UNITS[suffix]


def _dns_label(value: str) -> str:
    if not DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Kubernetes name (allowed: at most 63 lowercase letters, digits "
            "and '-', starting and ending with a letter or digit)"
        )
    return value


def _quantity(value: str) -> str:
    if not _QUANTITY.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (allowed: e.g. 8, 500m, 64Gi)")
    return value


# A label value Kubernetes takes, not empty: 1-63 letters, digits, '-', '_' and '.', starting
# and ending with a letter or digit.
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
LABEL_VALUE_ALLOWED = (
    "allowed: 1-63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
)


def _label_value(value: str) -> str:
    if not LABEL_VALUE.fullmatch(value):
        raise ValueError(f"{value!r} is not a label value ({LABEL_VALUE_ALLOWED})")
    return value


_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)


def url_port(url: str) -> int | None:
    """The port an http(s) URL names, None when it names none; ValueError when what follows
    the host's ':' is not 1-65535 in plain decimal digits (int() would read '+80', ' 80' and
    '8_0' as 80, a URL reader in another language refuses them)."""
    host = url.split("://", 1)[-1].split("/", 1)[0].rpartition("@")[2]
    text = host.rpartition("]")[2] if host.startswith("[") else host
    if ":" not in text:
        return None
    port = text.rpartition(":")[2]
    if not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise ValueError(
            f"{url!r}: port {port!r} is not a port (allowed: 1-65535 in decimal digits, e.g. "
            "http://loki.logs.svc:3100)"
        )
    return int(port)


def _url_port(value: str) -> str:
    url_port(value)
    return value


# A DNS-1123 label: namespaces, queue and flavor names.
Name = Annotated[str, AfterValidator(_dns_label)]
# An http(s) URL of a Service whose port, when it names one, is a TCP port in plain digits.
ServiceUrl = Annotated[str, AfterValidator(_url_port)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
Quantity = Annotated[str, AfterValidator(_quantity)]

MANAGED_BY: dict[str, str] = {"app.kubernetes.io/managed-by": "gpuinfra"}
# Every container gpuinfra writes itself runs with these (the Pod Security "restricted" level's
# container fields); its pod sets the user and the seccomp profile.
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
}


@dataclass(frozen=True)
class Chart:
    """Coordinates of a pinned Helm chart, read from versions.yaml."""

    repository: str
    name: str
    version: str

    @classmethod
    def of(cls, component: Component) -> Chart:
        source = component.source
        if source.type != "helm" or not source.repository or not source.chart:
            raise ValueError(f"{component} is not a Helm chart")
        return cls(repository=source.repository, name=source.chart, version=component.version)


@dataclass(frozen=True)
class GeneratedSecret:
    """A Secret an add-on reads that the Pulumi path creates: generated passwords, or values
    the stack holds as Pulumi secret configuration (``pulumi config set --secret``).

    Only the Pulumi path creates it (before the release that reads it); on the Ansible path
    the Secret is the site's to provide, and the role checks it exists before installing.
    """

    name: str
    namespace: str
    # Keys with a fixed value (a user name).
    fixed: dict[str, str] = field(default_factory=dict)
    # Keys whose value is a generated password, by length (letters and digits only).
    generated: dict[str, int] = field(default_factory=dict)
    # Keys whose value is a Pulumi secret config value of the stack, by config key (without
    # the ``gpuinfra:`` namespace): credentials no generator can make (a pager's routing key).
    from_config: dict[str, str] = field(default_factory=dict)

    def prerequisite(self, reader: str) -> Prerequisite:
        """The same Secret as the Ansible path sees it: the site's to create."""
        keys = (*self.fixed, *self.generated, *self.from_config)
        return Prerequisite("Secret", self.namespace, self.name, keys, reader)


def secret_config_key(secret: str, key: str) -> str:
    """The stack's config key (in the ``gpuinfra:`` namespace) holding ``key`` of ``secret``."""
    return f"{secret}-{key}"


def secret_config_keys(renders: Iterable[AddonRender]) -> list[str]:
    """Every ``gpuinfra:`` config key the Secrets of ``renders`` read, in order, once each."""
    keys = [k for r in renders for s in r.secrets for k in s.from_config.values()]
    return list(dict.fromkeys(keys))


@dataclass(frozen=True)
class Prerequisite:
    """An object an add-on reads that no apply of gpuinfra creates: the site's to provide.

    The integrity check accepts a reference to it only where it can exist before the apply (a
    site's cluster), and the add-on role checks it exists, with its keys, before changing
    anything; both say ``message``.
    """

    kind: str
    namespace: str
    name: str
    # Keys it must hold (a Secret's or ConfigMap's data).
    keys: tuple[str, ...]
    # What reads it, for the message.
    reader: str

    @property
    def api_version(self) -> str:
        return {"StorageClass": "storage.k8s.io/v1", "PriorityClass": "scheduling.k8s.io/v1"}.get(
            self.kind, "v1"
        )

    def document(self) -> dict[str, Any]:
        """As the Ansible roles read it (the gpuinfra_addon lookup)."""
        return {
            "api_version": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "keys": list(self.keys),
            "message": self.message,
        }

    @property
    def message(self) -> str:
        keys = f" with the keys {', '.join(self.keys)}" if self.keys else ""
        where = f"{self.namespace}/" if self.namespace else ""
        flag = f"-n {self.namespace} " if self.namespace else ""
        if self.kind == "Secret":
            literals = " ".join(f"--from-literal={key}=..." for key in self.keys)
            create = f"kubectl {flag}create secret generic {self.name} {literals}"
        else:
            create = f"kubectl {flag}apply -f <your {self.kind} manifest>"
        if self.namespace:
            create = f"kubectl create namespace {self.namespace}; {create}"
        return (
            f"{self.kind} {where}{self.name} must exist{keys}: {self.reader} reads it and gpuinfra "
            f"does not create it. Create it first (from Ansible Vault or your secret store), "
            f"e.g. {create.strip()}"
        )


@dataclass(frozen=True)
class AddonRender:
    """Everything one add-on applies to a cluster, fully resolved."""

    name: str
    release: str
    namespace: str
    chart: Chart | None
    values: dict[str, Any] = field(default_factory=dict)
    objects: list[dict[str, Any]] = field(default_factory=list)
    # Files the add-on ships besides objects, by relative path (Triton's config.pbtxt files).
    files: Mapping[str, str] = field(default_factory=dict)
    # Secrets the Pulumi path generates before the release; never part of objects (which the
    # Ansible roles apply) nor of the rendered files.
    secrets: list[GeneratedSecret] = field(default_factory=list)
    # Labels of each namespace the add-on creates (Pod Security, Kueue's queue), by name
    # (gpuinfra/addons/isolation.py).
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Objects it reads that no apply creates (a site provides them).
    prerequisites: list[Prerequisite] = field(default_factory=list)

    def site_prerequisites(self) -> list[Prerequisite]:
        """What the Ansible path needs to exist before it applies this add-on: the declared
        prerequisites and the Secrets only the Pulumi path generates."""
        reader = f"the {self.release or self.name} release"
        return [*self.prerequisites, *(s.prerequisite(reader) for s in self.secrets)]


class Settings(BaseModel):
    """Base of every settings model: camelCase in stack files, snake_case in Python and Ansible."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


def enabled_field(action: str, *, default: bool, left: str = "an installed release") -> Any:
    """The ``enabled`` switch every add-on has, described the same way for each."""
    return Field(
        default=default,
        description=f"{action}. When false nothing is applied (the Ansible role leaves {left} "
        "alone).",
    )


class AddonSettings(Settings):
    enabled: bool
    namespace: Name


def metadata(
    name: str, namespace: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """Object metadata with the project's managed-by label (and any others given)."""
    meta: dict[str, Any] = {"name": name, "labels": {**MANAGED_BY, **(labels or {})}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta
