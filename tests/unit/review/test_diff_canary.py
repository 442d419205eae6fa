"""A canary's weight, shifted with ``gpuinfra triton canary``, shows in ``gpuinfra diff``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import run_cli
from tests.unit.review.conftest import git, staging_serves_behind_a_gateway

Clone = Callable[[str, Callable[[Path], None]], Path]
TRITON_VARS = "inventory/example/group_vars/all/triton.yml"


def _serving_groups(repo: Path) -> None:
    path = repo / TRITON_VARS
    path.write_text(
        path.read_text()
        + "triton_gateway: {name: inference, namespace: gateways}\n"
        + "triton_serving_groups:\n"
        + "  - name: vision\n"
        + "    models: [resnet50]\n"
        + "    canary: {weight: 10}\n"
    )


def test_a_weight_shift_shows_in_the_diff(clone: Clone) -> None:
    repo = clone("Serve resnet50 in its own group, 10% to a canary", _serving_groups)
    shifted = run_cli(
        "triton", "canary", "vision", "30", "--site", "inventory/example", root=repo, cwd=repo
    )
    assert shifted.code == 0, shifted.stderr
    assert "-    canary: {weight: 10}" in shifted.stdout
    assert "+    canary: {weight: 30}" in shifted.stdout
    git(repo, "commit", "--quiet", "--all", "--message", "Canary to 30%")
    result = run_cli(
        "diff",
        "--base",
        "HEAD~1",
        "--site",
        "inventory/example",
        "--format",
        "markdown",
        root=repo,
        cwd=repo,
    )
    assert result.code == 0, result.stderr
    comment = result.stdout
    assert "site example: changed" in comment
    route = comment.split("HTTPRoute triton/triton-vision</code>", 1)[1].split("</details>")[0]
    assert "| `spec.rules[0].backendRefs[0].weight` | `90` | `70` |" in route
    assert "| `spec.rules[0].backendRefs[1].weight` | `10` | `30` |" in route
    # Only the route changes: no pod restarts for a weight.
    assert comment.count("<summary>") == 1, comment


def test_a_rollback_removes_the_canarys_pods(clone: Clone) -> None:
    repo = clone("Serve resnet50 in its own group, 10% to a canary", _serving_groups)
    removed = run_cli(
        "triton", "canary", "vision", "--remove", "--site", "inventory/example", root=repo, cwd=repo
    )
    assert removed.code == 0, removed.stderr
    git(repo, "commit", "--quiet", "--all", "--message", "Roll the canary back")
    result = run_cli(
        "diff",
        "--base",
        "HEAD~1",
        "--site",
        "inventory/example",
        "--format",
        "json",
        root=repo,
        cwd=repo,
    )
    assert result.code == 0, result.stderr
    (site,) = json.loads(result.stdout)["targets"]
    assert site["sections"]["objects"]["removed"] == [
        "apps/v1 Deployment triton/triton-vision-canary",
        "v1 Service triton/triton-vision-canary",
    ]
    (route,) = site["sections"]["objects"]["changed"]
    weights = {c["path"]: (c["old"], c["new"]) for c in route["changes"]}
    assert weights["spec.rules[0].backendRefs[0].weight"] == (90, 100)


def test_a_weight_shift_on_a_stack_shows_in_the_diff(clone: Clone) -> None:
    repo = clone("Serve resnet50 on staging, 10% to a canary", staging_serves_behind_a_gateway)
    shifted = run_cli("triton", "canary", "vision", "25", "--stack", "staging", root=repo, cwd=repo)
    assert shifted.code == 0, shifted.stderr
    git(repo, "commit", "--quiet", "--all", "--message", "Canary to 25%")
    result = run_cli(
        "diff", "--base", "HEAD~1", "--stack", "staging", "--format", "json", root=repo, cwd=repo
    )
    assert result.code == 0, result.stderr
    (stack,) = json.loads(result.stdout)["targets"]
    objects = stack["sections"]["objects"]
    # Only the route changes: no pod restarts for a weight.
    assert objects["added"] == objects["removed"] == []
    (route,) = objects["changed"]
    assert route["key"] == "gateway.networking.k8s.io/v1 HTTPRoute triton/triton-vision"
    weights = {c["path"]: (c["old"], c["new"]) for c in route["changes"]}
    assert weights == {
        "spec.rules[0].backendRefs[0].weight": (90, 75),
        "spec.rules[0].backendRefs[1].weight": (10, 25),
    }
