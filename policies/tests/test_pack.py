"""The pack's wiring: pulumi-policy's arguments reach the rules with the stack's own limits."""

from __future__ import annotations

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)

from gpuinfra.review import policy
from policies import pack

URN = "urn:pulumi:dev::gpuinfra::aws:eks/nodeGroup:NodeGroup::gpu"
OPTS = PolicyResourceOptions(
    protect=False,
    ignore_changes=[],
    delete_before_replace=None,
    aliases=[],
    custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
    additional_secret_outputs=[],
)


def node_group(instance_type: str, max_size: int) -> dict[str, object]:
    return {
        "instanceTypes": [instance_type],
        "scalingConfig": {"minSize": 0, "maxSize": max_size, "desiredSize": 0},
    }


def test_every_rule_is_a_mandatory_policy() -> None:
    names = [p.name for p in pack.policies()]
    assert names == [*policy.RESOURCE_RULES, *policy.STACK_RULES]
    levels = {p.enforcement_level for p in pack.policies()}
    assert {level.value for level in levels if level is not None} == {"mandatory"}
    assert None not in levels


def test_resource_policy_reports_against_the_stack_files_limits() -> None:
    reports: list[tuple[str, str | None]] = []
    check = pack.resource_check(policy.allowed_instance_types)
    args = ResourceValidationArgs(
        resource_type=policy.NODE_GROUP,
        props=node_group("p5.48xlarge", 1),
        urn=URN,
        name="gpu",
        opts=OPTS,
        provider=None,
    )

    def report(message: str, urn: str | None = None) -> None:
        reports.append((message, urn))

    check(args, report)
    (message, urn), *more = reports
    assert not more and urn == URN
    assert "p5.48xlarge not allowed in dev (allowed: g6.xlarge, g6.2xlarge)" in message


def test_stack_policy_adds_up_the_node_groups() -> None:
    resources = [
        PolicyResource(
            resource_type=policy.NODE_GROUP,
            props=node_group("g6.xlarge", 3),
            urn=f"{URN}{i}",
            name=f"gpu{i}",
            opts=OPTS,
            provider=None,
            parent=None,
            dependencies=[],
            property_dependencies={},
        )
        for i in range(2)
    ]
    reports: list[str] = []

    def report(message: str, urn: str | None = None) -> None:
        reports.append(message)

    pack.stack_check(policy.node_cap)(StackValidationArgs(resources=resources), report)
    assert reports == ["GPU node groups may grow to 6 nodes; dev allows 4"]
