"""What each add-on's namespace admits: its Pod Security level and its NetworkPolicies.

Every namespace an add-on creates carries the Pod Security Standard labels, and every add-on
namespace starts from a default-deny NetworkPolicy (ingress and egress), then allows only what
its components need: DNS, the API server (controllers and operators), webhooks called by the API
server, scrapes from Prometheus, traffic between the add-on's own pods, and what a component
reaches outside (the model repository, alert receivers). One table, applied to the render of
both paths by ``gpuinfra.addons.render``; see docs/decisions/0027-namespace-isolation.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gpuinfra.addons.base import MANAGED_BY, AddonRender, metadata
from gpuinfra.versions import Versions

PSA = "pod-security.kubernetes.io"
# Pods Prometheus runs, whatever namespace the Prometheus stack lives in (the operator labels them).
_PROMETHEUS_PODS = {"app.kubernetes.io/name": "prometheus"}
_NAME_LABEL = "kubernetes.io/metadata.name"
# The EKS Pod Identity agent, where pods get their AWS credentials (a link-local address).
POD_IDENTITY_AGENT = "169.254.170.23/32"
# Label a team namespace carries to be admitted by a Kueue ClusterQueue (its value: the queue).
QUEUE_LABEL = "gpuinfra.dev/kueue-cluster-queue"
# Label of a namespace whose pods may query Prometheus (KEDA's triggers).
READER_LABEL = "gpuinfra.dev/prometheus-reader"
PROMETHEUS_PORT = 9090


@dataclass(frozen=True)
class Isolation:
    """How one add-on's namespace is fenced."""

    # Pod Security Standard enforced: restricted, baseline or privileged.
    level: str
    # Ports the API server calls (admission webhooks, API services): open to any source, since
    # the control plane's addresses are not known to the cluster's objects.
    webhook_ports: tuple[int, ...] = ()
    # Ports any pod in the cluster may call (a serving endpoint).
    client_ports: tuple[int, ...] = ()
    # Controllers watch the API server.
    api_server: bool = True
    # Egress to anywhere on these TCP ports (package mirrors, S3, alert receivers).
    egress_ports: tuple[int, ...] = ()
    # Pods (by labels) that may reach anything: Prometheus scrapes every namespace and node.
    egress_any_pods: tuple[dict[str, str], ...] = ()
    # Why a namespace needs more than restricted.
    reason: str = ""
    # Its pods query Prometheus: the namespace carries READER_LABEL.
    reads_prometheus: bool = False
    # Prometheus itself: admits queries from namespaces carrying READER_LABEL.
    serves_queries: bool = False


TABLE: dict[str, Isolation] = {
    "gpu_operator": Isolation(
        level="privileged",
        # The driver container fetches kernel headers from the distribution's mirrors.
        egress_ports=(80, 443),
        reason="the driver, toolkit and device plugin pods run privileged with host paths",
    ),
    "volcano": Isolation(level="baseline", webhook_ports=(8443,)),
    "kueue": Isolation(level="baseline", webhook_ports=(9443,)),
    "prometheus_stack": Isolation(
        level="privileged",
        # The operator's admission webhook.
        webhook_ports=(10250,),
        # Alertmanager posts to its receivers.
        egress_ports=(443,),
        egress_any_pods=(_PROMETHEUS_PODS,),
        serves_queries=True,
        reason="node-exporter reads the host's /proc and /sys on the host network",
    ),
    "triton": Isolation(level="restricted", client_ports=(8000, 8001), api_server=False),
    # The API server calls KEDA's external metrics API (6443) and its admission webhook (9443);
    # the operator asks Prometheus (its stack admits namespaces labelled as its readers).
    "keda": Isolation(
        level="restricted",
        webhook_ports=(6443, 9443),
        egress_ports=(PROMETHEUS_PORT,),
        reads_prometheus=True,
    ),
    # Any pod may push to or query Loki's HTTP port: Alloy on every GPU node, Grafana.
    "loki": Isolation(level="restricted", client_ports=(3100,), api_server=False),
    # Alloy watches the API server for its node's pods and pushes to Loki.
    "alloy": Isolation(
        level="privileged",
        egress_ports=(3100,),
        reason="Alloy reads the node's /var/log (pod logs, journal) through hostPath volumes, "
        "which only the privileged level admits, as root to read the root-owned files",
    ),
}


def namespace_labels(level: str, versions: Versions) -> dict[str, str]:
    """The Pod Security labels: enforced at ``level``; a privileged namespace still warns and
    audits what baseline would refuse, so that a new privileged pod shows up in review."""
    version = f"v{versions.kubernetes.version}"
    shown = "baseline" if level == "privileged" else level
    return {
        f"{PSA}/enforce": level,
        f"{PSA}/enforce-version": version,
        f"{PSA}/warn": shown,
        f"{PSA}/warn-version": version,
        f"{PSA}/audit": shown,
        f"{PSA}/audit-version": version,
    }


def _policy(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, namespace),
        "spec": spec,
    }


def _tcp(ports: tuple[int, ...]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def network_policies(namespace: str, fence: Isolation, s3: bool = False) -> list[dict[str, Any]]:
    """Default deny, then each allow the add-on's components need."""
    every_pod: dict[str, Any] = {}
    policies = [
        _policy(
            namespace,
            "default-deny",
            {"podSelector": every_pod, "policyTypes": ["Ingress", "Egress"]},
        ),
        _policy(
            namespace,
            "allow-dns",
            {
                "podSelector": every_pod,
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {"matchLabels": {_NAME_LABEL: "kube-system"}},
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        ],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    }
                ],
            },
        ),
        _policy(
            namespace,
            "allow-same-namespace",
            {
                "podSelector": every_pod,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": every_pod}]}],
                "egress": [{"to": [{"podSelector": every_pod}]}],
            },
        ),
        _policy(
            namespace,
            "allow-prometheus-scrapes",
            {
                "podSelector": every_pod,
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": every_pod,
                                "podSelector": {"matchLabels": dict(_PROMETHEUS_PODS)},
                            }
                        ]
                    }
                ],
            },
        ),
    ]
    if fence.api_server:
        # The API server's endpoint addresses are the cloud's (or the site's): by port only.
        policies.append(
            _policy(
                namespace,
                "allow-api-server",
                {
                    "podSelector": every_pod,
                    "policyTypes": ["Egress"],
                    "egress": [{"ports": _tcp((443, 6443))}],
                },
            )
        )
    if fence.webhook_ports:
        policies.append(
            _policy(
                namespace,
                "allow-webhooks",
                {
                    "podSelector": every_pod,
                    "policyTypes": ["Ingress"],
                    "ingress": [{"ports": _tcp(fence.webhook_ports)}],
                },
            )
        )
    if fence.client_ports:
        policies.append(
            _policy(
                namespace,
                "allow-clients",
                {
                    "podSelector": every_pod,
                    "policyTypes": ["Ingress"],
                    "ingress": [{"ports": _tcp(fence.client_ports)}],
                },
            )
        )
    egress_ports = fence.egress_ports + ((443,) if s3 else ())
    if egress_ports:
        policies.append(
            _policy(
                namespace,
                "allow-egress-out",
                {
                    "podSelector": every_pod,
                    "policyTypes": ["Egress"],
                    "egress": [{"ports": _tcp(tuple(sorted(set(egress_ports))))}],
                },
            )
        )
    if s3:
        # Credentials for the model bucket come from the Pod Identity agent on the node.
        policies.append(
            _policy(
                namespace,
                "allow-pod-identity",
                {
                    "podSelector": every_pod,
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}],
                            "ports": _tcp((80,)),
                        }
                    ],
                },
            )
        )
    if fence.serves_queries:
        policies.append(
            _policy(
                namespace,
                "allow-prometheus-readers",
                {
                    "podSelector": {"matchLabels": dict(_PROMETHEUS_PODS)},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [
                                {"namespaceSelector": {"matchLabels": {READER_LABEL: "true"}}}
                            ],
                            "ports": _tcp((PROMETHEUS_PORT,)),
                        }
                    ],
                },
            )
        )
    for labels in fence.egress_any_pods:
        policies.append(
            _policy(
                namespace,
                "allow-" + "-".join(labels.values()) + "-egress",
                {
                    "podSelector": {"matchLabels": dict(labels)},
                    "policyTypes": ["Egress"],
                    "egress": [{}],
                },
            )
        )
    return policies


def isolate(render: AddonRender, versions: Versions, s3: bool = False) -> AddonRender:
    """The render with its namespaces labelled and its own namespace fenced."""
    fence = TABLE[render.name]
    labels = {render.namespace: {**MANAGED_BY, **namespace_labels(fence.level, versions)}}
    if fence.reads_prometheus:
        labels[render.namespace][READER_LABEL] = "true"
    for obj in render.objects:
        ns = obj["metadata"].get("namespace")
        if ns and ns not in labels:
            # A team namespace (Kueue's LocalQueues): its workloads' own, at baseline.
            labels[ns] = {**MANAGED_BY, **namespace_labels("baseline", versions)}
            queue = obj["spec"].get("clusterQueue") if obj["kind"] == "LocalQueue" else None
            if queue:
                labels[ns][QUEUE_LABEL] = str(queue)
    return dataclasses.replace(
        render,
        objects=[*render.objects, *network_policies(render.namespace, fence, s3)],
        namespace_labels=labels,
    )
