"""The Cluster Autoscaler of the cloud path: its Kubernetes objects and the tags it reads.

Nodes follow the pods to zero: when KEDA scales an idle Deployment to zero, the autoscaler
removes the GPU nodes nobody uses, down to the pool's ``minSize``. To grow a pool that has no
node it must know what a node would look like without one: it reads the node group's
``node-template`` tags on the Auto Scaling group (labels, taints, GPUs). Those tags are written
here, from the same labels and taint the node pool gives its nodes, and the integrity check reads
them back (``template``) to confirm every pod that fits a pool also fits its template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuinfra.addons.base import CONTAINER_SECURITY, MANAGED_BY
from gpuinfra.versions import Versions

TAG = "k8s.io/cluster-autoscaler"
TEMPLATE = f"{TAG}/node-template"
NAMESPACE = "kube-system"
NAME = "cluster-autoscaler"


def discovery_tags(cluster_name: str) -> dict[str, str]:
    """The tags ``--node-group-auto-discovery`` selects an Auto Scaling group by."""
    return {f"{TAG}/enabled": "true", f"{TAG}/{cluster_name}": "owned"}


def template_tags(
    labels: Mapping[str, str], taints: list[tuple[str, str, str]], resources: Mapping[str, int]
) -> dict[str, str]:
    """What a node of the pool would carry, as the autoscaler reads it from tags: its labels,
    taints and the extended resources its device plugins offer (GPUs, EFA interfaces)."""
    tags = {f"{TEMPLATE}/label/{k}": v for k, v in sorted(labels.items())}
    tags.update({f"{TEMPLATE}/taint/{key}": f"{value}:{effect}" for key, value, effect in taints})
    tags.update({f"{TEMPLATE}/resources/{k}": str(n) for k, n in sorted(resources.items()) if n})
    return tags


def template(
    tags: Mapping[str, str],
) -> tuple[dict[str, str], list[tuple[str, str, str]], dict[str, float]]:
    """Labels, taints (key, value, effect) and resources the autoscaler reads from ``tags``."""
    labels: dict[str, str] = {}
    taints: list[tuple[str, str, str]] = []
    resources: dict[str, float] = {}
    for key, value in tags.items():
        if key.startswith(f"{TEMPLATE}/label/"):
            labels[key.removeprefix(f"{TEMPLATE}/label/")] = value
        elif key.startswith(f"{TEMPLATE}/taint/"):
            taint_value, _, effect = value.rpartition(":")
            taints.append((key.removeprefix(f"{TEMPLATE}/taint/"), taint_value, effect))
        elif key.startswith(f"{TEMPLATE}/resources/"):
            resources[key.removeprefix(f"{TEMPLATE}/resources/")] = float(value)
    return labels, taints, resources


def iam_policy(cluster_name: str, region: str) -> dict[str, Any]:
    """What the autoscaler may do in AWS: read the groups and instance types (actions AWS
    grants on no narrower resource), and resize only this cluster's managed node groups."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadGroupsAndTypes",
                "Effect": "Allow",
                "Action": [
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeTags",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                ],
                "Resource": "*",
            },
            {
                "Sid": "ResizeThisClustersGroups",
                "Effect": "Allow",
                "Action": [
                    "autoscaling:SetDesiredCapacity",
                    "autoscaling:TerminateInstanceInAutoScalingGroup",
                ],
                # EKS names a managed node group's Auto Scaling group eks-<node group>-<id>.
                "Resource": (
                    f"arn:aws:autoscaling:{region}:*:autoScalingGroup:*:"
                    f"autoScalingGroupName/eks-{cluster_name}-*"
                ),
                "Condition": {"StringEquals": {f"aws:ResourceTag/{TAG}/{cluster_name}": "owned"}},
            },
            {
                "Sid": "ReadThisClustersNodeGroups",
                "Effect": "Allow",
                "Action": ["eks:DescribeNodegroup"],
                "Resource": f"arn:aws:eks:{region}:*:nodegroup/{cluster_name}/*",
            },
        ],
    }


def _meta(name: str, namespaced: bool = True) -> dict[str, Any]:
    labels = {**MANAGED_BY, "app.kubernetes.io/name": NAME}
    return {"name": name, "labels": labels, **({"namespace": NAMESPACE} if namespaced else {})}


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


_READ = ["get", "list", "watch"]
# The autoscaler serves /health-check (and /metrics) here.
HEALTH_PORT = 8085


def _probe() -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health-check", "port": HEALTH_PORT},
        "periodSeconds": 30,
        "timeoutSeconds": 5,
    }


def objects(cluster_name: str, region: str, versions: Versions) -> list[dict[str, Any]]:
    """ServiceAccount, RBAC and Deployment of the autoscaler, in kube-system (the AWS role comes
    from Pod Identity on the ServiceAccount)."""
    image = f"{versions.cluster_autoscaler.source.image}:{versions.cluster_autoscaler.version}"
    cluster_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(NAME, namespaced=False),
        "rules": [
            _rule([""], ["events", "endpoints"], ["create", "patch"]),
            _rule([""], ["pods/eviction"], ["create"]),
            _rule([""], ["pods/status"], ["update"]),
            _rule([""], ["endpoints"], ["get", "update"]),
            _rule([""], ["nodes"], [*_READ, "update"]),
            _rule(
                [""],
                [
                    "namespaces",
                    "pods",
                    "services",
                    "replicationcontrollers",
                    "persistentvolumeclaims",
                    "persistentvolumes",
                ],
                _READ,
            ),
            _rule(["extensions"], ["replicasets", "daemonsets"], _READ),
            _rule(["policy"], ["poddisruptionbudgets"], _READ),
            _rule(["apps"], ["statefulsets", "replicasets", "daemonsets"], _READ),
            _rule(
                ["storage.k8s.io"],
                ["storageclasses", "csinodes", "csidrivers", "csistoragecapacities"],
                _READ,
            ),
            _rule(["batch", "extensions"], ["jobs"], ["get", "list", "watch", "patch"]),
            _rule(["coordination.k8s.io"], ["leases"], ["create"]),
            _rule(["coordination.k8s.io"], ["leases"], ["get", "update"]),
            _rule(
                ["resource.k8s.io"], ["resourceclaims", "resourceslices", "deviceclasses"], _READ
            ),
        ],
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(NAME),
        "rules": [
            _rule([""], ["configmaps"], ["create", "list", "watch"]),
            _rule([""], ["configmaps"], ["delete", "get", "update"]),
        ],
    }
    subject = [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    args = [
        "./cluster-autoscaler",
        "--cloud-provider=aws",
        f"--node-group-auto-discovery=asg:tag={TAG}/enabled,{TAG}/{cluster_name}",
        # Pools of one instance type each: any expander is exact; least-waste picks the
        # smallest pool that fits.
        "--expander=least-waste",
        "--balance-similar-node-groups",
        "--skip-nodes-with-system-pods=false",
        # GPU nodes are expensive: gone after 10 idle minutes (the default, stated).
        "--scale-down-unneeded-time=10m",
        "--stderrthreshold=info",
    ]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(NAME),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {
                "metadata": {"labels": {**MANAGED_BY, "app.kubernetes.io/name": NAME}},
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65534,
                        "fsGroup": 65534,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": NAME,
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": args,
                            "env": [{"name": "AWS_REGION", "value": region}],
                            "ports": [{"name": "http", "containerPort": HEALTH_PORT}],
                            "livenessProbe": _probe(),
                            "readinessProbe": _probe(),
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "600Mi"},
                                "limits": {"cpu": "1", "memory": "600Mi"},
                            },
                            "securityContext": dict(CONTAINER_SECURITY),
                        }
                    ],
                },
            },
        },
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME)},
        cluster_role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(NAME, namespaced=False),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": NAME,
            },
            "subjects": subject,
        },
        role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(NAME),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": subject,
        },
        deployment,
    ]
