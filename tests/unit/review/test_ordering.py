"""The order rule over the stack program's registrations: namespaces, CRDs and Secrets first."""

from __future__ import annotations

from typing import Any

import pytest

from gpuinfra.review import ordering, stackrun
from gpuinfra.review.stackrun import Resource

NS = "kubernetes:core/v1:Namespace"
RELEASE = "kubernetes:helm.sh/v3:Release"
LOCAL_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"


def resource(type_: str, name: str, inputs: dict[str, Any], *deps: str, **extra: Any) -> Resource:
    return Resource(
        type_=type_,
        name=name,
        inputs=inputs,
        parent=extra.get("parent"),
        custom=extra.get("custom", True),
        dependencies=tuple(deps),
    )


def namespace(name: str) -> Resource:
    return resource(NS, f"ns-{name}", {"metadata": {"name": name}})


def kueue_release(*deps: str) -> Resource:
    inputs = {
        "chart": "oci://registry.k8s.io/kueue/charts/kueue",
        "version": "0.19.2",
        "name": "kueue",
        "namespace": "kueue-system",
        "values": {},
    }
    return resource(RELEASE, "kueue", inputs, *deps)


def local_queue(*deps: str) -> Resource:
    inputs = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "gpu", "namespace": "research"},
    }
    return resource(LOCAL_QUEUE, "lq-research", inputs, *deps)


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_the_shipped_stacks_apply_everything_after_what_it_needs(env: str) -> None:
    assert ordering.check(stackrun.run_stack(env).resources) == []


def test_an_object_that_does_not_wait_for_its_namespace_is_an_error() -> None:
    found = ordering.check(
        [
            namespace("kueue-system"),
            namespace("research"),
            kueue_release("ns-kueue-system"),
            local_queue("kueue"),
        ]
    )
    (error,) = found
    assert error.object == "LocalQueue research/gpu"
    assert "without waiting for its namespace research" in error.message


def test_a_custom_resource_that_does_not_wait_for_its_crd_is_an_error() -> None:
    (error,) = ordering.check(
        [
            namespace("kueue-system"),
            namespace("research"),
            kueue_release("ns-kueue-system"),
            local_queue("ns-research"),
        ]
    )
    assert "without waiting for kueue, whose chart installs the CRD of LocalQueue" in error.message


def test_waiting_through_a_component_or_another_resource_counts() -> None:
    group = resource("gpuinfra:addons:ClusterAddons", "addons", {}, custom=False)
    release = resource(
        RELEASE,
        "kueue",
        {"chart": "kueue", "version": "0.19.2", "name": "kueue", "namespace": "kueue-system"},
        "ns-kueue-system",
        parent="addons",
    )
    research = resource(NS, "ns-research", {"metadata": {"name": "research"}}, "kueue")
    found = ordering.check(
        [namespace("kueue-system"), group, release, research, local_queue("addons", "ns-research")]
    )
    assert found == []


def test_a_kind_no_release_installs_is_an_error() -> None:
    (error,) = ordering.check([namespace("research"), local_queue("ns-research")])
    assert error.message == (
        "no release in this apply installs the CRD of kueue.x-k8s.io/v1beta2 LocalQueue"
    )


def test_a_gateway_api_object_needs_no_release() -> None:
    """The cluster's gateway brings the Gateway API's CRDs."""
    route = resource(
        "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute",
        "route",
        {"metadata": {"name": "triton-vision", "namespace": "triton"}},
        "ns-triton",
    )
    assert ordering.check([namespace("triton"), route]) == []


def test_a_release_that_reads_a_secret_before_it_exists_is_an_error() -> None:
    secret = resource(
        "kubernetes:core/v1:Secret",
        "admin",
        {"metadata": {"name": "grafana-admin", "namespace": "monitoring"}},
        "ns-monitoring",
    )
    values = {"grafana": {"admin": {"existingSecret": "grafana-admin"}}}
    inputs = {
        "chart": "kube-prometheus-stack",
        "version": "0",
        "name": "prometheus-stack",
        "namespace": "monitoring",
        "values": values,
    }
    early = resource(RELEASE, "stack", inputs, "ns-monitoring")
    (error,) = ordering.check([namespace("monitoring"), secret, early])
    assert error.object == "Helm release monitoring/prometheus-stack"
    assert "reads the Secret monitoring/grafana-admin" in error.message
    late = resource(RELEASE, "stack", inputs, "ns-monitoring", "admin")
    assert ordering.check([namespace("monitoring"), secret, late]) == []
