"""Triton's pods meet the "restricted" Pod Security Standard, on every scenario's settings.

The namespace Triton runs in carries `pod-security.kubernetes.io/enforce: restricted`: a pod
that misses one of these fields is refused by the API server and the rollout never starts.
"""

from __future__ import annotations

import pytest

from .conftest import SCENARIOS, scenario_renders

# Volume types the restricted profile admits (Kubernetes Pod Security Standards).
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _pods(scenario: str) -> list[dict[str, object]]:
    return [
        obj["spec"]["template"]["spec"]
        for render in scenario_renders(scenario)
        if render.name == "triton"
        for obj in render.objects
        if obj["kind"] == "Deployment"
    ]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_triton_runs_unprivileged_on_a_read_only_root(scenario: str) -> None:
    for pod in _pods(scenario):
        assert pod["automountServiceAccountToken"] is False
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True
        assert security["runAsUser"] != 0
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        for volume in pod["volumes"]:
            assert RESTRICTED_VOLUMES & set(volume), volume
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            # The server writes to /tmp (a downloaded S3 repository, the Python backend's files)
            # and /dev/shm: both are emptyDirs, everything else is read-only.
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
            assert mounts["/tmp"] in empty
            assert mounts["/dev/shm"] in empty
