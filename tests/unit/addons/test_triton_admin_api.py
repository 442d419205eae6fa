"""Triton's administrative APIs: every rendered server closes them to a request without the admin
key, whose value comes from a Secret and is in no rendered object (docs/decisions/0078).

What the real server refuses and accepts with these flags: tests/unit/lab/test_triton_admin_api.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuinfra import addons, integrity
from gpuinfra.errors import ConfigError
from tests.unit.test_integrity import only, stack

from .conftest import SCENARIOS, scenario_renders

TRITON_SCENARIOS = [s for s in SCENARIOS if SCENARIOS[s].get("triton", {}).get("enabled")]


def _deployments(render: addons.AddonRender) -> list[dict[str, Any]]:
    return [o for o in render.objects if o["kind"] == "Deployment"]


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("scenario", TRITON_SCENARIOS)
def test_every_server_restricts_the_admin_apis_to_the_secrets_key(scenario: str) -> None:
    (render,) = [r for r in scenario_renders(scenario) if r.name == "triton"]
    restricted = "model-repository,shared-memory,trace,logging:triton-admin-key=$(TRITON_ADMIN_KEY)"
    for deployment in _deployments(render):
        container = _container(deployment)
        name = deployment["metadata"]["name"]
        assert f"--http-restricted-api={restricted}" in container["args"], name
        assert f"--grpc-restricted-protocol={restricted}" in container["args"], name
        # The kubelet expands $(VAR) only for a variable the container defines; undefined, the
        # key would be the literal text "$(TRITON_ADMIN_KEY)".
        (variable,) = [v for v in container["env"] if v["name"] == "TRITON_ADMIN_KEY"]
        assert variable == {
            "name": "TRITON_ADMIN_KEY",
            "valueFrom": {"secretKeyRef": {"name": "triton-admin", "key": "admin-key"}},
        }, name


def test_the_stack_generates_the_secret_and_a_site_provides_it() -> None:
    render = addons.render("triton", {"enabled": True, "modelRepository": {"pvc": "models"}})
    (secret,) = render.secrets
    assert (secret.name, secret.namespace) == ("triton-admin", "triton")
    assert secret.generated == {"admin-key": 32}
    assert (secret.fixed, secret.from_config) == ({}, {})
    (needed,) = [p for p in render.site_prerequisites() if p.kind == "Secret"]
    assert needed.message.startswith(
        "Secret triton/triton-admin must exist with the keys admin-key: the triton release reads "
        "it and gpuinfra does not create it."
    )
    assert "kubectl -n triton create secret generic triton-admin --from-literal=admin-key=..." in (
        needed.message
    )


def test_the_secret_and_its_key_are_settings() -> None:
    render = addons.render(
        "triton",
        {
            "enabled": True,
            "namespace": "serving",
            "modelRepository": {"pvc": "models"},
            "adminSecret": "inference-admin",
            "adminSecretKey": "triton.key",
        },
    )
    (variable,) = _container(_deployments(render)[0])["env"]
    assert variable["valueFrom"]["secretKeyRef"] == {"name": "inference-admin", "key": "triton.key"}
    (secret,) = render.secrets
    assert (secret.name, secret.namespace, secret.generated) == (
        "inference-admin",
        "serving",
        {"triton.key": 32},
    )


@pytest.mark.parametrize(
    ("settings", "path"),
    [({"adminSecretKey": "a/b"}, "adminSecretKey"), ({"adminSecret": "Admin"}, "adminSecret")],
)
def test_a_secret_name_or_key_kubernetes_refuses_is_refused(
    settings: dict[str, str], path: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        addons.render("triton", {"modelRepository": {"pvc": "models"}, **settings})
    (problem,) = caught.value.problems
    assert problem.path == path


def test_no_rendered_object_holds_a_key_value() -> None:
    """The value reaches the pod only through the Secret: the objects name it, never hold it."""
    render = addons.render("triton", SCENARIOS["serving-groups"]["triton"])
    text = json.dumps(render.objects)
    assert text.count("$(TRITON_ADMIN_KEY)") == 2 * len(_deployments(render))
    assert "triton-admin-key=" in text
    assert '"kind": "Secret"' not in text


def test_on_a_stack_the_secret_is_created_by_the_same_apply() -> None:
    cfg = stack("prod", triton={"enabled": True, "modelRepository": {"s3": "s3://models/m"}})
    state = integrity.stack_state(cfg, addons.render_all(cfg.addons))
    assert only(integrity.check(state), "references") == []
