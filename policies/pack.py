"""The rules of ``gpuinfra.review.policy`` wired into pulumi-policy's policy types.

The limits of each environment (allowed instance types, node cap, monthly budget) come from
``policies/limits.yaml``, for the environment the stack's name gives: not from the stack file the
pack polices. Stack policies see each resource's property dependencies, through which a companion
resource is matched to the resource it protects.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpuinfra.review.policy import RESOURCE_RULES, STACK_RULES, Limits, ResourceRule, StackRule
from gpuinfra.review.stackrun import Resource


@cache
def limits(stack: str) -> Limits:
    return Limits.for_stack(stack)


def stack_of(urn: str) -> str:
    """The stack name in ``urn:pulumi:<stack>::<project>::<type>::<name>``."""
    return urn.split("::", 1)[0].rsplit(":", 1)[-1]


def resource_check(rule: ResourceRule) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        resource = Resource(args.resource_type, args.name, dict(args.props), None, urn=args.urn)
        for message in rule(resource, limits(stack_of(args.urn))):
            report(message, args.urn)

    return validate


def stack_check(rule: StackRule) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        if not args.resources:
            return
        resources = [
            Resource(
                r.resource_type,
                r.name,
                dict(r.props),
                r.parent.name if r.parent else None,
                urn=r.urn,
                property_dependencies={
                    key: tuple(d.urn for d in deps)
                    for key, deps in (r.property_dependencies or {}).items()
                },
            )
            for r in args.resources
        ]
        for message in rule(resources, limits(stack_of(args.resources[0].urn))):
            report(message, None)

    return validate


def policies() -> list[Policy]:
    """Every rule as a mandatory policy."""
    mandatory = EnforcementLevel.MANDATORY
    found: list[Policy] = [
        ResourceValidationPolicy(
            name=name,
            description=description,
            enforcement_level=mandatory,
            validate=resource_check(rule),
        )
        for name, (description, rule) in RESOURCE_RULES.items()
    ]
    found += [
        StackValidationPolicy(
            name=name,
            description=description,
            enforcement_level=mandatory,
            validate=stack_check(stack_rule),
        )
        for name, (description, stack_rule) in STACK_RULES.items()
    ]
    return found
