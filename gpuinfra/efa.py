"""AWS's EFA device plugin on the cloud path: what offers a pool's EFA interfaces to pods.

An EFA pool's nodes have the interfaces, but a pod asks for them as the extended resource
``vpc.amazonaws.com/efa``, and only a device plugin announces that resource to the kubelet.
Without one, a training Job that asks for EFA stays Pending on a node that has all of them.
The stack runs the plugin as a DaemonSet on the nodes of EFA pools only (they carry
``LABEL``), tolerating the GPU taint those nodes carry; the integrity check counts the
interfaces as allocatable on the same nodes.
"""

from __future__ import annotations

from typing import Any

from gpuinfra.addons.base import GPU_TOLERATION, MANAGED_BY
from gpuinfra.versions import Versions

# Every node of an EFA pool carries this label (the node pool component sets it); the plugin
# selects its nodes by it. Under gpuinfra.dev/, which a pool's own labels may not use.
LABEL = "gpuinfra.dev/efa"
NAMESPACE = "kube-system"
NAME = "aws-efa-k8s-device-plugin"
# Where the kubelet serves device plugins their registration socket, and where the EFA devices
# are on the host.
DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
INFINIBAND = "/dev/infiniband"


def node_labels(efa: bool) -> dict[str, str]:
    """The label the plugin selects: on an EFA pool's nodes, none elsewhere."""
    return {LABEL: "true"} if efa else {}


def objects(versions: Versions) -> list[dict[str, Any]]:
    """The plugin's DaemonSet in kube-system.

    It runs as root without privilege or capabilities: it reads the devices and writes its
    socket into the kubelet's directory. It talks to no API server, so it gets no token, and it
    runs in the host's network namespace, where the EFA devices are."""
    pin = versions.efa_device_plugin
    labels = {**MANAGED_BY, "app.kubernetes.io/name": NAME}
    mounts = {"device-plugins": DEVICE_PLUGINS, "infiniband": INFINIBAND}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": node_labels(True),
                        "tolerations": [
                            dict(GPU_TOLERATION),
                            {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        ],
                        "priorityClassName": "system-node-critical",
                        "automountServiceAccountToken": False,
                        "hostNetwork": True,
                        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [
                            {
                                "name": NAME,
                                "image": pin.image_ref(),
                                "imagePullPolicy": "IfNotPresent",
                                # As AWS's chart runs it, root file system writable: nothing
                                # shows that it writes only its socket.
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "privileged": False,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                                "resources": {
                                    "requests": {"cpu": "10m", "memory": "20Mi"},
                                    "limits": {"cpu": "100m", "memory": "64Mi"},
                                },
                                "volumeMounts": [
                                    {"name": name, "mountPath": path}
                                    for name, path in mounts.items()
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": name, "hostPath": {"path": path, "type": "Directory"}}
                            for name, path in mounts.items()
                        ],
                    },
                },
            },
        }
    ]
