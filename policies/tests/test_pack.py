"""The pack's wiring: pulumi-policy's arguments reach the rules with the stack's own limits."""

from __future__ import annotations

from collections.abc import Callable

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


def report_into(reports: list[tuple[str, str | None]]) -> Callable[[str, str | None], None]:
    def report(message: str, urn: str | None = None) -> None:
        reports.append((message, urn))

    return report


def test_resource_policy_reports_against_the_environments_limits() -> None:
    reports: list[tuple[str, str | None]] = []
    check = pack.resource_check(policy.eks_endpoint)
    args = ResourceValidationArgs(
        resource_type=policy.EKS_CLUSTER,
        props={"vpcConfig": {"endpointPublicAccess": True, "publicAccessCidrs": ["10.0.0.0/8"]}},
        urn="urn:pulumi:prod-eu::gpuinfra::aws:eks/cluster:Cluster::eks",
        name="eks",
        opts=OPTS,
        provider=None,
    )
    check(args, report_into(reports))
    (message, urn), *more = reports
    assert not more and urn == args.urn
    assert message.endswith(
        "prod keeps the API endpoint private (vpcConfig.endpointPublicAccess: false)"
    )


def resource(
    type_: str, name: str, props: dict[str, object], **deps: list[PolicyResource]
) -> PolicyResource:
    return PolicyResource(
        resource_type=type_,
        props=props,
        urn=f"urn:pulumi:dev::gpuinfra::{type_}::{name}",
        name=name,
        opts=OPTS,
        provider=None,
        parent=None,
        dependencies=[d for ds in deps.values() for d in ds],
        property_dependencies=deps,
    )


def test_stack_policy_adds_up_the_node_groups() -> None:
    resources = [
        resource(policy.NODE_GROUP, f"gpu{i}", node_group("g6.xlarge", 3)) for i in range(2)
    ]
    reports: list[tuple[str, str | None]] = []
    pack.stack_check(policy.node_cap)(
        StackValidationArgs(resources=resources), report_into(reports)
    )
    assert reports == [("GPU node groups may grow to 6 nodes; dev allows 4", None)]


def test_stack_policy_follows_the_engines_property_dependencies() -> None:
    """A node group's type set only on its launch template, read through the dependency the
    engine reports (the template's id is unknown during a preview)."""
    template = resource(policy.LAUNCH_TEMPLATE, "lt", {"instanceType": "p5.48xlarge"})
    group = resource(
        policy.NODE_GROUP,
        "gpu",
        {"launchTemplate": {"id": "<computed>"}, "scalingConfig": {"maxSize": 64}},
        launchTemplate=[template],
    )
    reports: list[tuple[str, str | None]] = []
    args = StackValidationArgs(resources=[template, group])
    pack.stack_check(policy.node_cap)(args, report_into(reports))
    pack.stack_check(policy.allowed_instance_types)(args, report_into(reports))
    assert [m for m, _ in reports] == [
        "GPU node groups may grow to 64 nodes; dev allows 4",
        "NodeGroup 'gpu': p5.48xlarge not allowed in dev (allowed: g6.xlarge, g6.2xlarge)",
        "LaunchTemplate 'lt': p5.48xlarge not allowed in dev (allowed: g6.xlarge, g6.2xlarge)",
    ]
