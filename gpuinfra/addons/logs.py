"""Logs of the GPU nodes and Triton: Loki stores them, Alloy collects them.

Two add-ons, both off by default:

- ``loki``: Loki as one process (the chart's SingleBinary mode) with its chunks and index on a
  PersistentVolume, sized for a lab team; a retention period removes old logs.
- ``alloy``: Alloy as a DaemonSet on the GPU nodes. It tails the logs of every pod on its node
  (the GPU workloads, the GPU Operator's pods, Triton's) from the node's ``/var/log/pods``, and
  the kernel's lines of the node journal that the NVIDIA driver writes (``NVRM``, the Xid
  errors), and pushes them to Loki's push endpoint.

The push address is a setting of ``alloy`` whose default is the endpoint the ``loki`` add-on
creates in its default namespace; the integrity rule ``logs`` compares it with the one Loki's
render gives (decision 0057).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from gpuinfra.addons.base import (
    GPU_TOLERATION,
    GPU_TYPE_LABEL,
    AddonRender,
    AddonSettings,
    Chart,
    Name,
    Quantity,
    ServiceUrl,
    enabled_field,
)
from gpuinfra.versions import Versions

LOKI_RELEASE = "loki"
ALLOY_RELEASE = "alloy"
# The chart's SingleBinary Service is named after the release and serves HTTP on this port.
LOKI_HTTP_PORT = 3100
PUSH_PATH = "/loki/api/v1/push"
# The journal's kernel lines the NVIDIA driver writes: its NVRM messages and Xid errors.
NVIDIA_KERNEL_LINES = "(?i)(NVRM|nvidia|Xid)"
# A stage.match selector: the journal lines that are not the driver's, dropped.
KERNEL_DROP_SELECTOR = '{job="node-journal"} !~ ' + json.dumps(NVIDIA_KERNEL_LINES)
# Loki's schema for new data: TSDB index, v13 (the chart's documented choice for new installs);
# the date is the first day the config applies to, in the past for a new cluster.
SCHEMA_FROM = "2024-04-01"


def loki_push_address(namespace: str) -> str:
    """The in-cluster URL where the Loki add-on in ``namespace`` accepts pushed logs."""
    return f"http://{LOKI_RELEASE}.{namespace}.svc:{LOKI_HTTP_PORT}{PUSH_PATH}"


def loki_query_address(namespace: str) -> str:
    """The in-cluster URL Grafana queries the Loki add-on at."""
    return f"http://{LOKI_RELEASE}.{namespace}.svc:{LOKI_HTTP_PORT}"


class LokiSettings(AddonSettings):
    enabled: bool = enabled_field(
        "Install Loki to store the GPU nodes' and Triton's logs", default=False
    )
    namespace: Name = Field(default="loki", description="Namespace of the Loki release.")
    retention_days: int = Field(
        default=31, ge=1, le=365, description="Days Loki keeps a log line before deleting it."
    )
    storage_size: Quantity = Field(
        default="50Gi", description="Size of the PersistentVolume holding Loki's chunks and index."
    )
    storage_class: Name | None = Field(
        default=None,
        description="StorageClass of that volume; unset, the cluster's default StorageClass.",
    )


class AlloySettings(AddonSettings):
    enabled: bool = enabled_field(
        "Install Alloy on the GPU nodes to collect their pod logs and NVIDIA kernel lines",
        default=False,
    )
    namespace: Name = Field(default="alloy", description="Namespace of the Alloy release.")
    loki_push_address: ServiceUrl = Field(
        default=loki_push_address("loki"),
        pattern=r"^https?://[^\s/]+(:\d+)?/\S*$",
        description="URL Alloy pushes logs to: the Loki add-on's Service loki, port 3100, path "
        "/loki/api/v1/push, in that add-on's namespace.",
    )
    triton_namespace: Name = Field(
        default="triton",
        description="Namespace of the Triton add-on: its pods' logs carry service=triton.",
    )
    kernel_journal: bool = Field(
        default=True,
        description="Also collect the node journal's kernel lines written by the NVIDIA driver "
        "(NVRM messages, Xid errors).",
    )


def loki_values(settings: LokiSettings, versions: Versions) -> dict[str, Any]:
    del versions
    persistence: dict[str, Any] = {"enabled": True, "size": settings.storage_size}
    if settings.storage_class:
        persistence["storageClass"] = settings.storage_class
    return {
        "deploymentMode": "SingleBinary",
        "loki": {
            # The Pod Security "restricted" level wants a seccomp profile (the chart sets the rest).
            "podSecurityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            # One team, one tenant: no X-Scope-OrgID header needed by Alloy or Grafana.
            "auth_enabled": False,
            "commonConfig": {"replication_factor": 1},
            "storage": {"type": "filesystem"},
            "schemaConfig": {
                "configs": [
                    {
                        "from": SCHEMA_FROM,
                        "store": "tsdb",
                        "object_store": "filesystem",
                        "schema": "v13",
                        "index": {"prefix": "loki_index_", "period": "24h"},
                    }
                ]
            },
            "limits_config": {"retention_period": f"{settings.retention_days * 24}h"},
            # Retention is applied by the compactor, which also needs a store for deletes.
            "compactor": {"retention_enabled": True, "delete_request_store": "filesystem"},
        },
        "singleBinary": {"replicas": 1, "persistence": persistence},
        # The chart's scalable targets off: SingleBinary runs them all in one process.
        "read": {"replicas": 0},
        "write": {"replicas": 0},
        "backend": {"replicas": 0},
        # Memcached caches, the nginx gateway, the canary and the Helm test pod: not for one
        # process serving a lab team (Alloy and Grafana talk to the Service directly).
        "chunksCache": {"enabled": False},
        "resultsCache": {"enabled": False},
        "gateway": {"enabled": False},
        "lokiCanary": {"enabled": False},
        "test": {"enabled": False},
        # No ruler: alerts come from Prometheus, so no sidecar loading rule ConfigMaps.
        "sidecar": {"rules": {"enabled": False}},
    }


def _river(value: str) -> str:
    """A string literal of Alloy's configuration syntax (its escapes are JSON's)."""
    return json.dumps(value)


def alloy_config(settings: AlloySettings) -> str:
    """The Alloy pipeline: this node's pod logs and the driver's kernel lines, to Loki."""
    triton = _river(settings.triton_namespace)
    lines = [
        "// Written by gpuinfra (gpuinfra/addons/logs.py). Every pod on this node: the GPU",
        "// workloads, the GPU Operator's pods and Triton's (namespace label kept).",
        'discovery.kubernetes "pods" {',
        '  role = "pod"',
        "  selectors {",
        '    role  = "pod"',
        '    field = "spec.nodeName=" + coalesce(sys.env("HOSTNAME"), constants.hostname)',
        "  }",
        "}",
        "",
        'discovery.relabel "pods" {',
        "  targets = discovery.kubernetes.pods.targets",
        "  rule {",
        '    source_labels = ["__meta_kubernetes_namespace"]',
        '    target_label  = "namespace"',
        "  }",
        "  rule {",
        '    source_labels = ["__meta_kubernetes_pod_name"]',
        '    target_label  = "pod"',
        "  }",
        "  rule {",
        '    source_labels = ["__meta_kubernetes_pod_container_name"]',
        '    target_label  = "container"',
        "  }",
        "  rule {",
        '    source_labels = ["__meta_kubernetes_pod_node_name"]',
        '    target_label  = "node"',
        "  }",
        "  rule {",
        '    source_labels = ["__meta_kubernetes_namespace"]',
        f"    regex         = {triton}",
        '    target_label  = "service"',
        '    replacement   = "triton"',
        "  }",
        "  // The kubelet writes /var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log.",
        "  rule {",
        '    source_labels = ["__meta_kubernetes_pod_uid", "__meta_kubernetes_pod_container_name"]',
        '    separator     = "/"',
        '    target_label  = "__path__"',
        '    replacement   = "/var/log/pods/*$1/*.log"',
        "  }",
        "}",
        "",
        'local.file_match "pods" {',
        "  path_targets = discovery.relabel.pods.output",
        "}",
        "",
        'loki.source.file "pods" {',
        "  targets    = local.file_match.pods.targets",
        "  forward_to = [loki.process.pods.receiver]",
        "}",
        "",
        'loki.process "pods" {',
        "  // containerd writes the CRI log format: time, stream, tag, line.",
        "  stage.cri {}",
        "  forward_to = [loki.write.loki.receiver]",
        "}",
    ]
    if settings.kernel_journal:
        lines += [
            "",
            "// The node journal's kernel lines; only the NVIDIA driver's are kept.",
            'loki.relabel "journal" {',
            "  forward_to = []",
            "  rule {",
            '    source_labels = ["__journal__hostname"]',
            '    target_label  = "node"',
            "  }",
            "}",
            "",
            'loki.source.journal "kernel" {',
            '  path          = "/var/log/journal"',
            '  matches       = "_TRANSPORT=kernel"',
            '  labels        = {job = "node-journal"}',
            "  relabel_rules = loki.relabel.journal.rules",
            "  forward_to    = [loki.process.kernel.receiver]",
            "}",
            "",
            'loki.process "kernel" {',
            "  stage.match {",
            f"    selector = {_river(KERNEL_DROP_SELECTOR)}",
            '    action   = "drop"',
            "  }",
            "  forward_to = [loki.write.loki.receiver]",
            "}",
        ]
    lines += [
        "",
        'loki.write "loki" {',
        "  endpoint {",
        f"    url = {_river(settings.loki_push_address)}",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def alloy_values(settings: AlloySettings, versions: Versions) -> dict[str, Any]:
    del versions
    host_mounts: list[dict[str, Any]] = []
    host_volumes: list[dict[str, Any]] = []
    if settings.kernel_journal:
        # The journal's reader finds the machine's journal directory by its machine ID.
        host_mounts.append({"name": "machine-id", "mountPath": "/etc/machine-id", "readOnly": True})
        host_volumes.append(
            {"name": "machine-id", "hostPath": {"path": "/etc/machine-id", "type": "File"}}
        )
    return {
        "alloy": {
            "configMap": {"create": True, "content": alloy_config(settings)},
            # /var/log of the host, read-only: /var/log/pods and /var/log/journal.
            "mounts": {"varlog": True, "dockercontainers": False, "extra": host_mounts},
            # Root, to read the root-owned log files; nothing else: no capability, no
            # escalation, not privileged.
            "securityContext": {
                "runAsUser": 0,
                "runAsNonRoot": False,
                "allowPrivilegeEscalation": False,
                "privileged": False,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "enableReporting": False,
        },
        "controller": {
            "type": "daemonset",
            # The GPU nodes: they carry the GPU-type label and the GPU taint.
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": GPU_TYPE_LABEL, "operator": "Exists"}]}
                        ]
                    }
                }
            },
            "tolerations": [dict(GPU_TOLERATION)],
            "volumes": {"extra": host_volumes},
        },
        # The PodLogs CRD serves Alloy's operator-style discovery, not used here.
        "crds": {"create": False},
    }


def render_loki(settings: LokiSettings, versions: Versions) -> AddonRender:
    return AddonRender(
        name="loki",
        release=LOKI_RELEASE,
        namespace=settings.namespace,
        chart=Chart.of(versions.loki),
        values=loki_values(settings, versions),
    )


def render_alloy(settings: AlloySettings, versions: Versions) -> AddonRender:
    return AddonRender(
        name="alloy",
        release=ALLOY_RELEASE,
        namespace=settings.namespace,
        chart=Chart.of(versions.alloy),
        values=alloy_values(settings, versions),
    )
