"""The rules of ``gpuinfra.review.policy`` wired into pulumi-policy's policy types.

The limits of each environment (allowed instance types, node cap, monthly budget) come from the
stack's own file, ``stacks/Pulumi.<stack>.yaml`` (``gpuinfra:policy``), read by the core.
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

from gpuinfra.config import load_stack
from gpuinfra.review.policy import RESOURCE_RULES, STACK_RULES, Limits, ResourceRule, StackRule
from gpuinfra.review.stackrun import Resource


@cache
def limits(stack: str) -> Limits:
    return Limits.of(load_stack(stack))


def stack_of(urn: str) -> str:
    """The stack name in ``urn:pulumi:<stack>::<project>::<type>::<name>``."""
    return urn.split("::", 1)[0].rsplit(":", 1)[-1]


def resource_check(rule: ResourceRule) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        resource = Resource(args.resource_type, args.name, dict(args.props), None)
        for message in rule(resource, limits(stack_of(args.urn))):
            report(message, args.urn)

    return validate


def stack_check(rule: StackRule) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        if not args.resources:
            return
        resources = [
            Resource(r.resource_type, r.name, dict(r.props), r.parent.name if r.parent else None)
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
