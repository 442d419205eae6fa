"""What a node label a user sets may look like: on a stack's node pool and on a site's host.

Kubernetes' label syntax, with two bounds that come from where the labels go:
- EKS's node group API takes at most 63 characters for a whole key and 1-63 for a value
  (botocore's eks ``labelKey``, ``labelValue``), so no empty value and no long prefix on a pool.
- Keys in the ``kubernetes.io`` and ``k8s.io`` namespaces (and their subdomains) are Kubernetes'
  own. EKS refuses a node group label under them or ``eks.amazonaws.com/`` ("Label cannot contain
  reserved prefixes"). A kubelet may register its node with only a few of them
  (``node.kubernetes.io/``, ``kubelet.kubernetes.io/`` and the well-known ones it sets itself);
  the registration role's preflight refuses the whole namespaces, and so does this check.

One rule set, read by the stack config (gpuinfra/config.py) and by a site's check
(gpuinfra/inputs.py, for ``gpu_node_registration_labels``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuinfra.errors import excerpt

MAX_EKS_LABEL = 63
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
# Kubernetes' namespaces, then the one EKS adds for a node group's labels.
KUBERNETES_DOMAINS = ("kubernetes.io", "k8s.io")
EKS_DOMAINS = (*KUBERNETES_DOMAINS, "eks.amazonaws.com")


def key_problem(key: Any, *, eks: bool = True) -> str:
    """Why ``key`` is not a node label key a user may set ('' when it is); ``eks`` adds EKS's
    bounds (the whole key at most 63 characters, its reserved prefix)."""
    if not isinstance(key, str):
        return f"{excerpt(repr(key))} is not a node label key; quote it"
    if eks and len(key) > MAX_EKS_LABEL:
        return (
            f"a node label key takes at most {MAX_EKS_LABEL} characters, prefix included "
            f"(EKS), not {len(key)}"
        )
    prefix, slash, name = key.rpartition("/")
    if not _NAME.match(name) or (slash and not (_PREFIX.match(prefix) and len(prefix) <= 253)):
        return (
            "not a node label key (allowed: an optional lowercase DNS prefix and '/', then "
            "1-63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
        )
    reserved = EKS_DOMAINS if eks else KUBERNETES_DOMAINS
    domain = next((d for d in reserved if prefix == d or prefix.endswith(f".{d}")), None)
    if slash and domain:
        return (
            f"the '{domain}' namespace is Kubernetes' own and not for a node's extra labels "
            f"(not allowed: {', '.join(f'{d}/' for d in reserved)} and their subdomains); use a "
            "prefix of your own domain (example.com/role)"
        )
    return ""


def value_problem(value: Any, *, empty: bool = False) -> str:
    """Why ``value`` is not a node label value ('' when it is); ``empty`` allows ''."""
    if isinstance(value, str) and (_NAME.match(value) or (empty and value == "")):
        return ""
    if not isinstance(value, str):
        return f"{excerpt(repr(value))} is not a string; quote it"
    low = 0 if empty else 1
    return (
        f"{excerpt(repr(value))} is not a node label value (allowed: {low}-{MAX_EKS_LABEL} "
        "letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
    )


def host_labels_problem(labels: Any) -> str:
    """Why ``labels`` cannot be a site host's extra registration labels ('' when they can).

    The kubelet takes them on its command line, so an empty value is allowed, as Kubernetes
    allows it; EKS's prefix is not reserved off EKS.
    """
    if not isinstance(labels, Mapping):
        return "expected a mapping of label keys to values"
    for key, value in labels.items():
        why = key_problem(key, eks=False)
        if why:
            return f"{excerpt(repr(key), 70)}: {why}"
        why = value_problem(value, empty=True)
        if why:
            return f"{key}: {why}"
    return ""
