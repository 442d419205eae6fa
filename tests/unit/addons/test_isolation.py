"""Every add-on namespace says its Pod Security level and starts from default deny; Kueue's
ClusterQueue admits only the team namespaces it labels."""

from __future__ import annotations

from typing import Any

import pytest

from gpuinfra.addons import isolation

from .conftest import SCENARIOS, scenario_renders

PSA = "pod-security.kubernetes.io/enforce"


def _policies(render: Any) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o["spec"]
        for o in render.objects
        if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == render.namespace
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_namespace_carries_its_pod_security_level(scenario: str) -> None:
    for render in scenario_renders(scenario):
        named = {render.namespace} | {
            o["metadata"]["namespace"] for o in render.objects if "namespace" in o["metadata"]
        }
        assert named == set(render.namespace_labels), render.name
        for ns, labels in render.namespace_labels.items():
            level = labels[PSA]
            if level == "privileged":
                # Only where host access is the point; baseline still warns and audits there.
                assert render.name in ("gpu_operator", "prometheus_stack", "alloy"), (
                    render.name,
                    ns,
                )
                assert labels["pod-security.kubernetes.io/warn"] == "baseline"
            else:
                assert level in ("baseline", "restricted")
        if render.name == "triton":
            assert render.namespace_labels[render.namespace][PSA] == "restricted"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_addon_namespace_denies_by_default(scenario: str) -> None:
    for render in scenario_renders(scenario):
        policies = _policies(render)
        assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        # DNS, and scrapes by Prometheus, wherever the stack runs.
        assert policies["allow-dns"]["egress"][0]["ports"][0] == {"protocol": "UDP", "port": 53}
        scrape = policies["allow-prometheus-scrapes"]["ingress"][0]["from"][0]
        assert scrape["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
        # No policy opens all ingress to all sources on all ports.
        for name, spec in policies.items():
            for rule in spec.get("ingress", []):
                assert rule.get("from") or rule.get("ports"), (render.name, name)


def test_webhooks_are_reachable_by_the_api_server() -> None:
    renders = {r.name: r for r in scenario_renders("everything")}
    for addon, port in (("kueue", 9443), ("volcano", 8443)):
        (rule,) = _policies(renders[addon])["allow-webhooks"]["ingress"]
        assert rule == {"ports": [{"protocol": "TCP", "port": port}]}
        assert "allow-api-server" in _policies(renders[addon])


def test_triton_reaches_its_s3_repository_and_nothing_else_outside() -> None:
    (s3,) = [r for r in scenario_renders("everything") if r.name == "triton"]
    policies = _policies(s3)
    assert policies["allow-egress-out"]["egress"] == [{"ports": [{"protocol": "TCP", "port": 443}]}]
    assert policies["allow-pod-identity"]["egress"][0]["to"] == [
        {"ipBlock": {"cidr": isolation.POD_IDENTITY_AGENT}}
    ]
    # Triton never calls the API server.
    assert "allow-api-server" not in policies
    (pvc,) = [r for r in scenario_renders("time-slicing-single-mig") if r.name == "triton"]
    assert "allow-egress-out" not in _policies(pvc)
    assert "allow-pod-identity" not in _policies(pvc)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, "only matchLabels is used"
    return selector["matchLabels"].items() <= labels.items()


def test_the_cluster_queue_admits_only_its_team_namespaces() -> None:
    (kueue,) = [r for r in scenario_renders("everything") if r.name == "kueue"]
    (queue,) = [o for o in kueue.objects if o["kind"] == "ClusterQueue"]
    selector = queue["spec"]["namespaceSelector"]
    teams = {o["metadata"]["namespace"] for o in kueue.objects if o["kind"] == "LocalQueue"}
    assert teams
    for team in teams:
        assert _selects(selector, dict(kueue.namespace_labels[team])), team
    # A namespace the add-on did not label (default, kube-system, another team's) is not admitted.
    assert not _selects(selector, {"kubernetes.io/metadata.name": "default"})
    assert not _selects(selector, dict(kueue.namespace_labels[kueue.namespace]))
