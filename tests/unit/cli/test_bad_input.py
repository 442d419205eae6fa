"""Bad input, the way a careless or hostile user gives it: one line, the right exit code, no change.

Every row is one mistake in a file a user edits (a stack file, versions.yaml, a site's
inventory and vars files, add-on settings) or in an argument. Each runs the real CLI in this
process against a copy of the repository and asserts what a user would notice: the exit code,
a single ``error:`` line of at most 300 characters that names the file (or the argument), the
key and what is allowed, and a tree that is byte for byte what it was before. A new case is one
row in ``CASES``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuinfra import cli, site, versions
from gpuinfra.errors import MAX_LINE
from tests.conftest import ROOT, SUPPORT_TABLE_DAY

Edit = Callable[[Path], None]

DEV = "stacks/Pulumi.dev.yaml"
PROD = "stacks/Pulumi.prod.yaml"
SITE = "inventory/example"
HOSTS = f"{SITE}/hosts.yml"
NODE_VARS = f"{SITE}/group_vars/gpu_nodes"
ALL_VARS = f"{SITE}/group_vars/all"
# A DCGM exporter counter list, as `gpuinfra schemas counters` reads it.
COUNTERS = "default-counters.csv"


# --- edits: each returns a function that changes the copied repository -------------------------


def sub(rel: str, old: str, new: str) -> Edit:
    """Replace the first ``old`` in a file (which must hold it) by ``new``."""

    def edit(root: Path) -> None:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{rel} has no {old!r}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")

    return edit


def put(rel: str, content: str | bytes) -> Edit:
    def edit(root: Path) -> None:
        path = root / rel
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")

    return edit


def link(rel: str, target: str) -> Edit:
    def edit(root: Path) -> None:
        path = root / rel
        if path.exists() or path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)

    return edit


def mkdir(rel: str) -> Edit:
    def edit(root: Path) -> None:
        path = root / rel
        if path.is_file():
            path.unlink()
        path.mkdir(parents=True, exist_ok=True)

    return edit


def remove(rel: str) -> Edit:
    def edit(root: Path) -> None:
        (root / rel).unlink()

    return edit


def both(*edits: Edit) -> Edit:
    def edit(root: Path) -> None:
        for one in edits:
            one(root)

    return edit


def git_repo(then: Edit) -> Edit:
    """Commit the copy as a git repository, then make the working tree bad."""

    def edit(root: Path) -> None:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
        }
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
            subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
        then(root)

    return edit


def nothing(root: Path) -> None:
    del root


def alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def stack_with(extra: str) -> str:
    """The dev stack's text with ``extra`` lines appended under ``config:``."""
    text = (ROOT / DEV).read_text(encoding="utf-8")
    return text.rstrip("\n") + "\n" + extra


DEV_TEXT = (ROOT / DEV).read_text(encoding="utf-8")
# Stack names Pulumi takes and EKS refuses in the cluster's name gpuinfra-<stack>.
DOTTED = "stacks/Pulumi.dev-a.b.yaml"
LONG_STACK = "dev-" + "x" * 26
UNDERSCORED = "stacks/Pulumi.dev-a_b.yaml"
# The policy pack's limits per environment: a file users edit too.
LIMITS = "policies/limits.yaml"
P4DE_IN_CANADA = both(
    sub(DEV, "aws:region: us-east-1", "aws:region: ca-central-1"),
    sub(DEV, "[us-east-1a, us-east-1b]", "[ca-central-1a, ca-central-1b]"),
    sub(DEV, "instanceType: g6.xlarge", "instanceType: p4de.24xlarge"),
    sub(
        LIMITS,
        "allowedInstanceTypes: [g6.xlarge, g6.2xlarge]",
        "allowedInstanceTypes: [p4de.24xlarge]",
    ),
    sub(DEV, "gpuType: l4, gpus: 2", "gpuType: a100, gpus: 2"),
)


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    edit: Edit
    code: int
    # Each must appear in the one error line: the file (or argument), the key, what is allowed.
    file: str
    key: str
    allowed: str
    skip: str | None = field(default=None)
    # The whole line, where the case knows it.
    line: str | None = field(default=None)


def stack(
    case_id: str,
    edit: Edit,
    key: str,
    allowed: str,
    *,
    code: int = 2,
    file: str = DEV,
    argv: tuple[str, ...] = ("config", "check", "--stack", "dev"),
) -> Case:
    return Case(case_id, argv, edit, code, file, key, allowed)


def vers(
    case_id: str,
    edit: Edit,
    key: str,
    allowed: str,
    *,
    code: int = 2,
    argv: tuple[str, ...] = ("versions", "check"),
) -> Case:
    return Case(case_id, argv, edit, code, "versions.yaml", key, allowed)


def site_case(
    case_id: str,
    edit: Edit,
    file: str,
    key: str,
    allowed: str,
    *,
    argv: tuple[str, ...] = ("config", "check", "--site", SITE),
    code: int = 2,
    skip: str | None = None,
) -> Case:
    return Case(case_id, argv, edit, code, file, key, allowed, skip)


def site_line(
    case_id: str,
    edit: Edit,
    file: str,
    key: str,
    message: str,
    *,
    argv: tuple[str, ...] = ("config", "check", "--site", SITE),
) -> Case:
    """A site case whose line is known whole: ``error: <file>: <key>: <message>``."""
    line = f"error: {file}: {key}: {message}"
    return Case(case_id, argv, edit, 2, file, key, message, line=line)


def arg(
    case_id: str,
    argv: tuple[str, ...],
    name: str,
    allowed: str,
    *,
    key: str = "",
    edit: Edit = nothing,
) -> Case:
    return Case(case_id, argv, edit, 2, name, key or name, allowed)


AS_ROOT = "root reads every file whatever its mode" if os.geteuid() == 0 else None
PLAN_SITE = ("plan", "--site", SITE, "--format", "json")

# What two or more rows expect: the key and what is allowed.
MAX_SIZE_INT = ("nodePools[0].maxSize", "valid integer")
NOT_DEV = ("config.gpuinfra:environment", "allowed: 'dev'")

CASES: list[Case] = [
    # --- stack files: the YAML itself ---------------------------------------------------------
    stack(
        "stack-duplicate-top-key",
        sub(DEV, "  gpuinfra:storage:", "  gpuinfra:environment: dev\n  gpuinfra:storage:"),
        "duplicate key 'gpuinfra:environment'",
        "each key once",
    ),
    stack(
        "stack-duplicate-nested-key",
        sub(DEV, "maxSize: 2", "maxSize: 2\n      maxSize: 3"),
        "duplicate key 'maxSize'",
        "each key once",
    ),
    # A value hundreds of characters long is cut in its middle: what is allowed stays on the line.
    stack(
        "stack-long-team-name",
        sub(DEV, "teams: [research]", f"teams: [{'r' * 400}]"),
        "config.gpuinfra:addons.kueue.teams[0]",
        "starting and ending with a letter or digit)",
    ),
    stack(
        "stack-long-zone",
        sub(DEV, "us-east-1b]", f"{'r' * 400}]"),
        "config.gpuinfra:network.availabilityZones[1]",
        "(allowed: 'us-east-1a', 'us-east-1b'",
    ),
    vers(
        "versions-long-triton-tag",
        sub("versions.yaml", 'tag: "26.07-py3"', f'tag: "26.07-py{"3" * 300}"'),
        "triton.tag",
        "expected YY.MM-py3, e.g. 26.07-py3",
        code=1,
    ),
    stack("stack-not-utf8", put(DEV, DEV_TEXT.encode() + b"# caf\xe9\n"), "line ", "UTF-8"),
    stack("stack-utf16", put(DEV, DEV_TEXT.encode("utf-16")), "line 1", "UTF-8"),
    stack(
        "stack-nested-3000",
        put(DEV, "config:\n  x: " + "[" * 3000 + "]" * 3000 + "\n"),
        "nested deeper than 64",
        "at most 64",
    ),
    stack("stack-alias-bomb", put(DEV, alias_bomb(9)), "aliases", "at most 100000"),
    stack("stack-alias-self", put(DEV, "config: &c\n  x: *c\n"), "line", "alias refers"),
    stack(
        "stack-too-large", put(DEV, DEV_TEXT + "#" * (1024 * 1024) + "\n"), "bytes", "1048576 bytes"
    ),
    stack("stack-is-a-directory", mkdir(DEV), "", "is a directory, not a file"),
    stack("stack-symlink-loop", link(DEV, "Pulumi.dev.yaml"), "", "symlink loop"),
    stack(
        "stack-dangling-symlink",
        link(DEV, "nowhere.yaml"),
        "'nowhere.yaml'",
        "which does not exist",
    ),
    stack("stack-not-yaml", put(DEV, "config:\n  gpuinfra:tags: [a\n"), "line 3", "not valid YAML"),
    stack(
        "stack-tab-indent",
        put(DEV, "config:\n\tgpuinfra:environment: dev\n"),
        "line 2",
        "not valid YAML",
    ),
    *(
        stack(case_id, put(DEV, text), "config", "needs a 'config' mapping")
        for case_id, text in (("stack-empty", ""), ("stack-config-list", "config: [1, 2]\n"))
    ),
    stack(
        "stack-bool-key",
        sub(DEV, "      rootVolumeGib: 150", "      rootVolumeGib: 150\n      labels: {on: x}"),
        "nodePools[0].labels",
        "string keys",
    ),
    stack(
        "stack-date-value",
        sub(DEV, "team: ml-platform", "team: 2026-01-01"),
        "tags.team",
        "quote it",
    ),
    # --- stack files: types are kept --------------------------------------------------------
    *(
        stack(f"stack-{kind}-as-int", sub(DEV, "maxSize: 2", f"maxSize: {value}"), *MAX_SIZE_INT)
        for kind, value in (("bool", "on"), ("string", '"2"'), ("float", "2.5"))
    ),
    stack(
        "stack-string-as-bool",
        sub(DEV, "endpointPublicAccess: true", 'endpointPublicAccess: "true"'),
        "cluster.endpointPublicAccess",
        "valid boolean",
    ),
    stack(
        "stack-int-as-bool",
        sub(DEV, "singleNatGateway: true", "singleNatGateway: 1"),
        "network.singleNatGateway",
        "valid boolean",
    ),
    stack(
        "stack-number-as-string",
        sub(DEV, "costCenter: cc-1042", "costCenter: 1042"),
        "tags.costCenter",
        "valid string",
    ),
    stack(
        "stack-list-as-mapping",
        sub(
            DEV,
            "  gpuinfra:tags:\n    team: ml-platform\n    project: gpuinfra\n    costCenter: cc-1042\n",
            "  gpuinfra:tags: [a]\n",
        ),
        "gpuinfra:tags",
        "mapping",
    ),
    # --- stack files: keys and namespaces ---------------------------------------------------
    stack(
        "stack-aws-regoin",
        sub(DEV, "aws:region:", "aws:regoin:"),
        "config.aws:regoin",
        "did you mean 'region'",
    ),
    stack(
        "stack-aws-profle",
        sub(DEV, "  aws:region: us-east-1", "  aws:region: us-east-1\n  aws:profle: x"),
        "config.aws:profle",
        "did you mean 'profile'",
    ),
    stack(
        "stack-kubernetes-key",
        sub(DEV, "  aws:region: us-east-1", "  aws:region: us-east-1\n  kubernetes:kubeconfg: x"),
        "config.kubernetes:kubeconfg",
        "did you mean 'kubeconfig'",
    ),
    stack(
        "stack-pulumi-key",
        sub(DEV, "  aws:region: us-east-1", "  aws:region: us-east-1\n  pulumi:tagz: {}"),
        "config.pulumi:tagz",
        "did you mean 'tags'",
    ),
    stack(
        "stack-gpuinfra-key",
        sub(DEV, "gpuinfra:nodePools:", "gpuinfra:nodePool:"),
        "config.gpuinfra:nodePool",
        "did you mean 'nodePools'",
    ),
    stack(
        "stack-namespace-typo",
        sub(DEV, "aws:region:", "awz:region:"),
        "config.awz:region",
        "did you mean 'aws'",
    ),
    stack(
        "stack-pool-key-typo",
        sub(DEV, "minSize: 0", "minSzie: 0"),
        "nodePools[0].minSzie",
        "did you mean 'minSize'",
    ),
    stack(
        "stack-missing-tags",
        sub(DEV, "    costCenter: cc-1042\n", ""),
        "tags.costCenter",
        "required key is missing",
    ),
    # --- stack files: values, bounds from the catalog and the policy ------------------------
    *(
        stack(case_id, sub(DEV, "environment: dev", f"environment: {other}"), *NOT_DEV)
        for case_id, other in (
            ("stack-environment-mismatch", "prod"),
            ("stack-environment-staging", "staging"),
        )
    ),
    stack(
        "stack-environment-unknown",
        sub(DEV, "environment: dev", "environment: qa"),
        "config.gpuinfra:environment",
        "'dev', 'prod' or 'staging'",
    ),
    # A Pulumi stack name that AWS would refuse in a name that follows gpuinfra-<stack>: a '.'
    # (the cluster), a '_' (the model bucket), or over 29 characters (the IAM roles). Its file is
    # a copy of dev's, valid but for its name.
    *(
        Case(case_id, argv, edit, 2, file, "stack name '", "allowed: 1-29 letters, digits or '-'")
        for case_id, argv, edit, file in (
            (
                "stack-name-dot",
                ("config", "check", "--stack", "dev-a.b"),
                put(DOTTED, DEV_TEXT),
                DOTTED,
            ),
            (
                "stack-name-dot-plan",
                ("plan", "--stack", "dev-a.b", "--out", "plan.txt"),
                put(DOTTED, DEV_TEXT),
                DOTTED,
            ),
            (
                "stack-name-dot-diff",
                ("diff", "--base", "HEAD", "--stack", "dev-a.b"),
                git_repo(put(DOTTED, DEV_TEXT)),
                DOTTED,
            ),
            (
                "stack-name-underscore",
                ("config", "check", "--stack", "dev-a_b"),
                put(UNDERSCORED, DEV_TEXT),
                UNDERSCORED,
            ),
            (
                "stack-name-30-characters",
                ("config", "check", "--stack", LONG_STACK),
                put(f"stacks/Pulumi.{LONG_STACK}.yaml", DEV_TEXT),
                f"stacks/Pulumi.{LONG_STACK}.yaml",
            ),
        )
    ),
    # dev's node groups are named gpuinfra-dev-<pool>-ng-<7 random>: EKS takes 63 characters.
    stack(
        "stack-pool-name-over-node-group-name",
        sub(DEV, "- name: l4", "- name: l" + "4" * 39),
        "nodePools[0].name",
        "allowed: a pool name of at most 39 characters in stack 'dev'",
    ),
    stack(
        "stack-pool-100000",
        sub(DEV, "maxSize: 2", "maxSize: 100000"),
        "nodePools[0].maxSize",
        "less than or equal to 450",
    ),
    stack(
        "stack-pool-over-policy",
        sub(DEV, "maxSize: 2", "maxSize: 5"),
        "nodePools[0].maxSize",
        "allowed: 0 to 4",
    ),
    stack(
        "stack-pool-negative",
        sub(DEV, "minSize: 0", "minSize: -1"),
        "nodePools[0].minSize",
        "greater than or equal to 0",
    ),
    stack(
        "stack-desired-over-max",
        sub(DEV, "desiredSize: 0", "desiredSize: 3"),
        "nodePools[0].desiredSize",
        "must lie between minSize 0 and maxSize 2",
    ),
    stack(
        "stack-min-over-max",
        sub(DEV, "minSize: 0", "minSize: 3"),
        "nodePools[0].minSize",
        "greater than maxSize 2",
    ),
    stack(
        "limits-max-nodes-huge",
        sub(LIMITS, "maxNodes: 4", "maxNodes: 1000000"),
        "environments.dev.maxNodes",
        "less than or equal to 13500",
        file=LIMITS,
    ),
    stack(
        "limits-budget-zero",
        sub(LIMITS, "monthlyBudgetUsd: 1500", "monthlyBudgetUsd: 0"),
        "environments.dev.monthlyBudgetUsd",
        "greater than 0",
        file=LIMITS,
    ),
    stack(
        "stack-carries-policy",
        put(DEV, stack_with("  gpuinfra:policy:\n    maxNodes: 4\n")),
        "config.gpuinfra:policy",
        "policies/limits.yaml",
    ),
    stack(
        "stack-root-volume-small",
        sub(DEV, "rootVolumeGib: 150", "rootVolumeGib: 10"),
        "nodePools[0].rootVolumeGib",
        "greater than or equal to 50",
    ),
    stack(
        "stack-instance-typo",
        sub(DEV, "instanceType: g6.xlarge", "instanceType: g6.xlarg"),
        "nodePools[0].instanceType",
        "did you mean 'g6.xlarge'",
    ),
    stack(
        "limits-type-typo",
        sub(LIMITS, "[g6.xlarge, g6.2xlarge]", "[g6.xlarge, g6.2xlarg]"),
        "environments.dev.allowedInstanceTypes[1]",
        "did you mean 'g6.2xlarge'",
        file=LIMITS,
    ),
    stack(
        "stack-type-not-in-region",
        P4DE_IN_CANADA,
        "nodePools[0].instanceType",
        "allowed regions: 'us-east-1' or 'us-west-2'",
    ),
    stack(
        "stack-unknown-region",
        sub(DEV, "aws:region: us-east-1", "aws:region: mars-north-1"),
        "config.aws:region",
        "known: ",
    ),
    stack(
        "stack-zone-of-other-region",
        sub(DEV, "[us-east-1a, us-east-1b]", "[us-east-1a, eu-west-1b]"),
        "network.availabilityZones[1]",
        "allowed: 'us-east-1a'",
    ),
    stack(
        "stack-capacity-typo",
        sub(DEV, "capacityType: spot", "capacityType: spto"),
        "nodePools[0].capacityType",
        "did you mean 'spot'",
    ),
    stack(
        "stack-cidr-invalid",
        sub(DEV, "cidr: 10.40.0.0/16", "cidr: 10.40.0.0/33"),
        "network.cidr",
        "not a CIDR block",
    ),
    stack(
        "stack-cidr-too-small",
        sub(DEV, "cidr: 10.40.0.0/16", "cidr: 10.40.0.0/24"),
        "network.cidr",
        "/16 to /20",
    ),
    stack(
        "stack-key-like-an-emoji-code",
        sub(DEV, "  gpuinfra:environment: dev", "  gpuinfra:environment: dev\n  gpuinfra:x: 1"),
        "config.gpuinfra:x: unknown key 'x'",
        "allowed: 'addons', 'cluster'",
    ),
    stack(
        "stack-tag-key-like-markup",
        sub(DEV, "    team: ml-platform", '    team: ml-platform\n    "[bold]x": y'),
        "config.gpuinfra:tags.[bold]x",
        "unknown key '[bold]x'",
    ),
    stack(
        "stack-tag-value-aws-refuses",
        sub(DEV, "    team: ml-platform", '    team: "[red]oops"'),
        "config.gpuinfra:tags.team",
        "'[red]oops' is not a tag value AWS takes (allowed: letters, digits, spaces",
    ),
    stack(
        "stack-control-character",
        sub(DEV, "    team: ml-platform", '    team: "ml\x07platform"'),
        "line 7, column 14",
        "control character 0x0007 (allowed: printable characters",
    ),
    stack(
        "stack-cidr-too-small-to-carve",
        sub(DEV, "cidr: 10.40.0.0/16", "cidr: 10.40.0.0/30"),
        "network.cidr",
        "'10.40.0.0/30': a GPU VPC takes an IPv4 /16 to /20 block",
    ),
    stack(
        "stack-cidr-multicast",
        sub(DEV, "cidr: 10.40.0.0/16", "cidr: 224.0.0.0/16"),
        "network.cidr",
        "'224.0.0.0/16' is no range hosts are addressed from",
    ),
    stack(
        "stack-cidr-this-network",
        sub(DEV, "cidr: 10.40.0.0/16", "cidr: 0.0.0.0/16"),
        "network.cidr",
        "'0.0.0.0/16' is no range hosts are addressed from",
    ),
    stack(
        "stack-no-zones",
        sub(DEV, "[us-east-1a, us-east-1b]", "[]"),
        "network.availabilityZones",
        "at least 1 item",
    ),
    stack(
        "stack-api-open",
        sub(DEV, "[203.0.113.0/24]", "[0.0.0.0/0]"),
        "cluster.publicAccessCidrs",
        "list your CIDRs",
    ),
    stack(
        "stack-system-nodes",
        sub(DEV, "    publicAccessCidrs", "    systemNodeCount: 11\n    publicAccessCidrs"),
        "cluster.systemNodeCount",
        "less than or equal to 10",
    ),
    stack(
        "stack-reserved-label",
        sub(
            DEV,
            "      rootVolumeGib: 150",
            "      rootVolumeGib: 150\n      labels: {gpuinfra.dev/x: y}",
        ),
        "nodePools[0].labels.gpuinfra.dev/x",
        "set by gpuinfra",
    ),
    # A pool's zone must be one of its network's: the program would look up a subnet there.
    stack(
        "stack-pool-zone-outside-network",
        sub(
            DEV,
            "      capacityType: spot\n",
            "      capacityType: spot\n      availabilityZone: us-east-1c\n",
        ),
        "nodePools[0].availabilityZone",
        "allowed: 'us-east-1a' or 'us-east-1b'",
    ),
    stack(
        "gpu-operator-driver-containers-on-eks",
        sub(DEV, "driverMode: host", "driverMode: operator"),
        "config.gpuinfra:addons.gpuOperator.driverMode",
        "allowed on a stack: 'host'",
        argv=("plan", "--stack", "dev", "--out", "plan.txt"),
    ),
    stack(
        "prod-alert-receiver-type-misspelt",
        sub(PROD, "type: slack, apiUrlKey", "type: slak, apiUrlKey"),
        "alerting.receivers[1]",
        "type 'slak' is not allowed; did you mean 'slack'? (allowed: 'email', 'opsgenie'",
        file=PROD,
        argv=("config", "check", "--stack", "prod"),
    ),
    stack(
        "plan-prod-pool-zone-outside-network-out",
        sub(PROD, "availabilityZone: us-east-1a", "availabilityZone: us-east-1f"),
        "nodePools[0].availabilityZone",
        "allowed: 'us-east-1a', 'us-east-1b' or 'us-east-1c'",
        file=PROD,
        argv=("plan", "--stack", "prod", "--out", "plan.txt"),
    ),
    stack(
        "stack-label-key",
        sub(
            DEV,
            "      rootVolumeGib: 150",
            '      rootVolumeGib: 150\n      labels: {"bad key!": x}',
        ),
        "nodePools[0].labels.bad key!",
        "allowed: an optional lowercase DNS prefix and '/'",
    ),
    stack(
        "plan-stack-label-value-out",
        sub(
            DEV, "      rootVolumeGib: 150", '      rootVolumeGib: 150\n      labels: {tier: "x y"}'
        ),
        "nodePools[0].labels.tier",
        "allowed: 1-63 letters, digits",
        argv=("plan", "--stack", "dev", "--out", "plan.txt"),
    ),
    stack(
        "stack-label-key-too-long-for-eks",
        sub(
            DEV,
            "      rootVolumeGib: 150",
            f"      rootVolumeGib: 150\n      labels: {{example.com/{'k' * 52}: x}}",
        ),
        "nodePools[0].labels.example.com/k",
        "at most 63 characters, prefix included",
    ),
    *(
        stack(
            f"stack-label-key-in-{domain}",
            sub(
                DEV,
                "      rootVolumeGib: 150",
                f"      rootVolumeGib: 150\n      labels: {{{key}: x}}",
            ),
            f"nodePools[0].labels.{key}",
            f"the '{domain}' namespace is Kubernetes' own",
        )
        for key, domain in (
            ("node-role.kubernetes.io/gpu", "kubernetes.io"),
            ("k8s.io/team", "k8s.io"),
            ("eks.amazonaws.com/capacityType", "eks.amazonaws.com"),
        )
    ),
    stack(
        "stack-mig-layout-label",
        both(
            sub(
                DEV,
                "driverMode: host",
                "driverMode: host\n      migStrategy: mixed\n      migProfiles: {inference: {1g.18gb: 7}}",
            ),
            sub(
                DEV,
                "      rootVolumeGib: 150",
                "      rootVolumeGib: 150\n      labels: {nvidia.com/mig.config: inferense}",
            ),
        ),
        "nodePools[0].labels.nvidia.com/mig.config",
        "did you mean 'inference'? (allowed: 'all-disabled' or 'inference')",
    ),
    stack(
        "stack-empty-tag",
        sub(DEV, "team: ml-platform", 'team: ""'),
        "tags.team",
        "at least 1 character",
    ),
    stack(
        "stack-long-value",
        sub(DEV, "capacityType: spot", "capacityType: " + "s" * 5000),
        "nodePools[0].capacityType",
        "allowed: 'capacity-block'",
    ),
    # --- add-on settings in a stack file ------------------------------------------------------
    stack(
        "addon-kueue-quota-1e30",
        sub(DEV, "gpus: 2", "gpus: 1000000000000000000000000000000"),
        "nominalQuota",
        "can give 2 at their largest",
    ),
    # Whole numbers in full: not 1e+20 or 1.23457e+06.
    *(
        stack(
            f"addon-kueue-quota-{len(gpus)}-digits",
            sub(DEV, "gpus: 2", f"gpus: {gpus}"),
            "nominalQuota",
            f"grants {gpus} nvidia.com/gpu",
        )
        for gpus in ("99999999999999999999", "1234567")
    ),
    stack(
        "addon-volcano-capability-20-digits",
        sub(
            PROD,
            "capability: {nvidia.com/gpu: 8}",
            "capability: {nvidia.com/gpu: 99999999999999999999}",
        ),
        "spec.capability.nvidia.com/gpu",
        "caps nvidia.com/gpu at 99999999999999999999, the cluster can give",
        file=PROD,
        argv=("config", "check", "--stack", "prod"),
    ),
    stack(
        "addon-kueue-quota-negative",
        sub(DEV, "gpus: 2", "gpus: -1"),
        "addons.kueue.flavors[0].gpus",
        "greater than or equal to 0",
    ),
    stack(
        "addon-kueue-quota-bool",
        sub(DEV, "gpus: 2", "gpus: true"),
        "addons.kueue.flavors[0].gpus",
        "valid integer",
    ),
    stack(
        "addon-kueue-gpu-type",
        sub(DEV, "gpuType: l4", "gpuType: h100"),
        "addons.kueue.flavors[0].gpuType",
        "pools have 'l4'",
    ),
    stack(
        "addon-kueue-key-typo",
        sub(DEV, "teams: [research]", "teem: [research]"),
        "addons.kueue.teem",
        "did you mean 'teams'",
    ),
    # A team's namespace is labelled for its queue and Pod Security baseline.
    *(
        stack(
            f"addon-kueue-team-{team}",
            sub(DEV, "teams: [research]", f"teams: [research, {team}]"),
            "addons.kueue.teams[1]",
            allowed,
            argv=argv,
        )
        for team, allowed, argv in (
            (
                "default",
                "not allowed: 'default' or a name starting with 'kube-'",
                ("config", "check", "--stack", "dev"),
            ),
            (
                "kube-system",
                "the cluster's own namespace, not a team's",
                ("plan", "--stack", "dev", "--out", "plan.txt"),
            ),
            (
                "kube-team",
                "the prefix Kubernetes keeps for its own namespaces",
                ("plan", "--stack", "dev", "--out", "plan.txt"),
            ),
            (
                "kube-public",
                "give the team a namespace of its own",
                ("config", "check", "--stack", "dev"),
            ),
            (
                "kube-node-lease",
                "give the team a namespace of its own",
                ("config", "check", "--stack", "dev"),
            ),
            (
                "gpu-operator",
                "the namespace of the GPU Operator add-on",
                ("config", "check", "--stack", "dev"),
            ),
            (
                "monitoring",
                "the namespace of the Prometheus stack add-on",
                ("plan", "--stack", "dev", "--out", "plan.txt"),
            ),
        )
    ),
    stack(
        "addon-gpu-operator-mode",
        sub(DEV, "driverMode: host", "driverMode: hots"),
        "addons.gpuOperator.driverMode",
        "did you mean 'host'",
    ),
    stack(
        "addon-gpu-operator-mig",
        sub(DEV, "driverMode: host", "driverMode: host\n      migStrategy: mixd"),
        "addons.gpuOperator.migStrategy",
        "did you mean 'mixed'",
    ),
    stack(
        "addon-kueue-cpu",
        sub(DEV, 'cpu: "7"', "cpu: seven"),
        "addons.kueue.flavors[0].cpu",
        "Kubernetes quantity",
    ),
    # A Volcano queue's capability is a whole number or a quantity string: one line each.
    *(
        stack(
            f"addon-volcano-capability-{case_id}",
            sub(
                PROD, "capability: {nvidia.com/gpu: 8}", f"capability: {{nvidia.com/gpu: {value}}}"
            ),
            "addons.volcano.queues[0].capability.nvidia.com/gpu",
            "allowed: a whole number such as 8, or a Kubernetes quantity string",
            file=PROD,
            argv=("config", "check", "--stack", "prod"),
        )
        for case_id, value in (
            ("inf", ".inf"),
            ("fraction", "8.5"),
            ("bool", "true"),
            ("negative", "-1"),
            ("word", "lots"),
        )
    ),
    stack(
        "addon-namespace",
        sub(DEV, "    kueue:\n", "    kueue:\n      namespace: Kueue_System\n"),
        "addons.kueue.namespace",
        "Kubernetes name",
    ),
    # --- the same stack errors through the other commands ------------------------------------
    stack(
        "plan-stack-bad",
        sub(DEV, "maxSize: 2", "maxSize: on"),
        "nodePools[0].maxSize",
        "valid integer",
        argv=("plan", "--stack", "dev", "--format", "json"),
    ),
    # Over the environment's node cap: refused as config check refuses it, not planned and then
    # failed by the policy pack's node-cap rule (exit 1, no file or key).
    stack(
        "plan-stack-over-policy",
        sub(DEV, "maxSize: 2", "maxSize: 5"),
        "nodePools[0].maxSize",
        "allowed: 0 to 4",
        argv=("plan", "--stack", "dev", "--format", "json"),
    ),
    stack(
        "cost-stack-bad",
        sub(DEV, "environment: dev", "environment: prod"),
        "config.gpuinfra:environment",
        "allowed: 'dev'",
        argv=("cost", "--stack", "dev"),
    ),
    stack(
        "render-stack-bad",
        sub(DEV, "aws:region:", "aws:regoin:"),
        "config.aws:regoin",
        "did you mean 'region'",
        argv=("addons", "render", "--stack", "dev"),
    ),
    stack(
        "plan-policy-fails",
        sub(LIMITS, "monthlyBudgetUsd: 100000", "monthlyBudgetUsd: 1"),
        "monthly-cost-ceiling",
        "prod allows $1",
        code=1,
        file="policy",
        argv=("plan", "--stack", "prod", "--format", "json", "--as-of", SUPPORT_TABLE_DAY),
    ),
    # --- versions.yaml --------------------------------------------------------------------------
    vers(
        "versions-containerd-docker-short-key",
        sub(
            "versions.yaml",
            "fingerprint: 9DC858229FC7DD38854AE2D88D81803C0EBFCD88",
            "fingerprint: 0EBFCD88",
        ),
        "containerd_docker.source.signing_key.fingerprint",
        "40 hexadecimal digits",
        code=1,
    ),
    vers(
        "versions-key-typo-is-one-line",
        sub("versions.yaml", 'kubernetes:\n  version: "1.35"', 'kubernetes:\n  versoin: "1.35"'),
        "kubernetes.versoin",
        "did you mean 'version'",
    ),
    vers(
        "versions-number-where-text-goes",
        sub("versions.yaml", 'cuda: "12.2"', "cuda: 12.20"),
        "nvidia_driver.distro.cuda",
        "got the number 12.2; quote the value to keep it as written",
    ),
    vers(
        "versions-duplicate",
        sub("versions.yaml", "kueue:\n  version:", 'kueue:\n  version: "1"\n  version:'),
        "duplicate key 'version'",
        "each key once",
    ),
    vers(
        "versions-float-version",
        sub("versions.yaml", 'version: "0.19.2"', "version: 0.19"),
        "kueue.version",
        "valid string",
    ),
    vers(
        "versions-unknown-key",
        sub("versions.yaml", "kueue:\n  version:", "kueue:\n  channel: x\n  version:"),
        "kueue.channel",
        "allowed: 'digest', 'note', 'releases', 'source', 'tag' or 'version'",
    ),
    vers(
        "versions-source-typo",
        sub(
            "versions.yaml",
            "type: helm, repository: https://volcano",
            "type: hlem, repository: https://volcano",
        ),
        "volcano.source.type",
        "did you mean 'helm'",
    ),
    vers(
        "versions-not-utf8",
        put("versions.yaml", (ROOT / "versions.yaml").read_bytes() + b"\xff\n"),
        "line ",
        "UTF-8",
    ),
    vers("versions-alias-bomb", put("versions.yaml", alias_bomb(9)), "aliases", "at most 100000"),
    vers(
        "versions-directory",
        both(remove("versions.yaml"), mkdir("versions.yaml")),
        "",
        "is a directory",
        argv=("versions", "show"),
    ),
    vers(
        "versions-packages-string",
        sub("versions.yaml", "packages: [containerd]", "packages: containerd"),
        "containerd.source.packages",
        "a list",
    ),
    vers(
        "versions-floating",
        sub("versions.yaml", 'version: "0.19.2"', 'version: "latest"'),
        "kueue.version",
        "pin an exact version",
        code=1,
    ),
    # A pin longer than a Kubernetes label value: no chart folder or release label holds it.
    *(
        vers(
            f"versions-pin-too-long-{'-'.join(argv[:2])}",
            sub("versions.yaml", 'version: "0.19.2"', f'version: "0.19.2{"2" * 300}"'),
            "kueue.version",
            "306 characters (allowed: at most 63)",
            code=1 if argv[0] == "versions" else 2,
            argv=argv,
        )
        for argv in (
            ("versions", "check"),
            ("plan", "--stack", "dev"),
            ("config", "check", "--site", SITE),
        )
    ),
    # A chart version the repository carries no values tree for: nothing is rendered with it.
    *(
        vers(
            f"versions-chart-without-data-{argv[0]}",
            sub("versions.yaml", 'version: "0.19.2"', 'version: "0.19.99"'),
            "kueue.version",
            "no values tree or CRD schemas for chart kueue 0.19.99",
            argv=argv,
        )
        for argv in (
            ("addons", "render", "--stack", "dev", "--out", "build"),
            ("plan", "--site", SITE),
            ("config", "check", "--stack", "dev"),
        )
    ),
    vers(
        "versions-bad-for-plan",
        sub("versions.yaml", 'version: "0.19.2"', "version: 0.19"),
        "kueue.version",
        "valid string",
        argv=("config", "check", "--stack", "dev"),
    ),
    # --- sites: inventory and vars files --------------------------------------------------------
    site_case(
        "site-duplicate-key",
        sub(
            f"{NODE_VARS}/driver.yml",
            "nvidia_driver_source:",
            "nvidia_driver_source: distro\nnvidia_driver_source:",
        ),
        f"{NODE_VARS}/driver.yml",
        "duplicate key 'nvidia_driver_source'",
        "each key once",
    ),
    site_case(
        "site-containerd-source-unknown",
        put(f"{NODE_VARS}/zz.yml", "nvidia_container_toolkit_containerd_source: dockr\n"),
        f"{NODE_VARS}/zz.yml",
        "nvidia_container_toolkit_containerd_source",
        "did you mean 'docker'",
    ),
    site_case(
        "site-containerd-repo-url-option",
        put(
            f"{NODE_VARS}/zz.yml",
            "nvidia_container_toolkit_containerd_source: docker\n"
            "nvidia_container_toolkit_containerd_repo_url: '[trusted=yes] http://mirror.example/debian'\n",
        ),
        f"{NODE_VARS}/zz.yml",
        "nvidia_container_toolkit_containerd_repo_url",
        "a repository URL is one plain http(s) URL",
    ),
    site_case(
        "site-containerd-key-over-http",
        put(
            f"{NODE_VARS}/zz.yml",
            "nvidia_container_toolkit_containerd_repo_key_url: http://mirror.example/docker.gpg\n",
        ),
        f"{NODE_VARS}/zz.yml",
        "nvidia_container_toolkit_containerd_repo_key_url",
        "serve the key over https",
    ),
    site_case(
        "site-containerd-short-key-id",
        put(
            f"{NODE_VARS}/zz.yml",
            "nvidia_container_toolkit_containerd_repo_key_fingerprint: 0EBFCD88\n",
        ),
        f"{NODE_VARS}/zz.yml",
        "nvidia_container_toolkit_containerd_repo_key_fingerprint",
        "40 hexadecimal digits",
    ),
    site_case(
        "site-nested-dir",
        put(f"{NODE_VARS}/more/gpus.yml", "gpu_node_check_expected_gpu_count: -3\n"),
        f"{NODE_VARS}/more/gpus.yml",
        "gpu_node_check_expected_gpu_count",
        "allowed: 0 to 16",
    ),
    site_case(
        "site-json-vars",
        put(f"{NODE_VARS}/driver2.json", '{"nvidia_driver_source": "distr"}'),
        f"{NODE_VARS}/driver2.json",
        "nvidia_driver_source",
        "did you mean 'distro'",
    ),
    site_case(
        "site-no-extension",
        put(f"{NODE_VARS}/zz", "nvidia_driver_source: distr\n"),
        f"{NODE_VARS}/zz",
        "nvidia_driver_source",
        "did you mean 'distro'",
    ),
    site_case(
        "site-group-file-yaml",
        put(f"{SITE}/group_vars/gpu_nodes.yaml", "gpu_node_check_expected_gpu_count: 99\n"),
        f"{SITE}/group_vars/gpu_nodes.yaml",
        "gpu_node_check_expected_gpu_count",
        "allowed: 0 to 16",
    ),
    # A node registered with a GPU type has GPUs: one line, not the quotas, serving groups and
    # smoke test that would each find none.
    site_case(
        "site-gpu-count-zero-on-a-gpu-node",
        put(f"{SITE}/host_vars/gpu-node-01.yml", "gpu_node_check_expected_gpu_count: 0\n"),
        f"{SITE}/host_vars/gpu-node-01.yml",
        "gpu_node_check_expected_gpu_count",
        "0, but gpu-node-01 registers as a GPU node (gpu_node_registration_gpu_type) "
        "(allowed: 1 to 16",
    ),
    site_case(
        "site-host-vars",
        put(f"{SITE}/host_vars/gpu-node-01.yml", "nvidia_driver_reboot: maybe\n"),
        f"{SITE}/host_vars/gpu-node-01.yml",
        "nvidia_driver_reboot",
        "expected bool",
    ),
    site_case(
        "site-host-vars-unknown-host",
        put(f"{SITE}/host_vars/gpu-node-1.yml", "ansible_port: 22\n"),
        f"{SITE}/host_vars/gpu-node-1.yml",
        "no host 'gpu-node-1'",
        "did you mean 'gpu-node-01'",
    ),
    site_case(
        "site-group-vars-unknown-group",
        put(f"{SITE}/group_vars/gpu_node.yml", "ansible_port: 22\n"),
        f"{SITE}/group_vars/gpu_node.yml",
        "no group 'gpu_node'",
        "did you mean 'gpu_nodes'",
    ),
    *(
        site_case(
            f"site-gpu-count-{case}",
            put(f"{NODE_VARS}/zz.yml", f"gpu_node_check_expected_gpu_count: {value}\n"),
            f"{NODE_VARS}/zz.yml",
            "gpu_node_check_expected_gpu_count",
            allowed,
        )
        for case, value, allowed in (
            ("bool", "true", "expected int"),
            ("17", "17", "allowed: 0 to 16"),
            ("words", "eight", "expected int"),
        )
    ),
    site_case(
        "site-version-as-float",
        put(f"{NODE_VARS}/zz.yml", "nvidia_driver_version: 535.10\n"),
        f"{NODE_VARS}/zz.yml",
        "nvidia_driver_version",
        "expected str",
    ),
    site_case(
        "site-port-range",
        put(f"{NODE_VARS}/zz.yml", "ansible_port: 70000\n"),
        f"{NODE_VARS}/zz.yml",
        "ansible_port",
        "allowed: 1 to 65535",
    ),
    site_case(
        "site-role-var-typo",
        put(f"{NODE_VARS}/zz.yml", "nvidia_driver_sorce: distro\n"),
        f"{NODE_VARS}/zz.yml",
        "nvidia_driver_sorce",
        "did you mean 'nvidia_driver_source'",
    ),
    site_case(
        "site-vars-list",
        put(f"{NODE_VARS}/zz.yml", "- a\n- b\n"),
        f"{NODE_VARS}/zz.yml",
        "",
        "must be a mapping",
    ),
    site_case(
        "site-vars-not-utf8",
        put(f"{NODE_VARS}/zz.yml", b"nvidia_driver_source: \xe9\n"),
        f"{NODE_VARS}/zz.yml",
        "line 1",
        "UTF-8",
    ),
    site_case(
        "site-vars-symlink-loop",
        link(f"{NODE_VARS}/loop", "loop"),
        f"{NODE_VARS}/loop",
        "",
        "symlink loop",
    ),
    site_case(
        "site-vars-alias-bomb",
        put(f"{NODE_VARS}/zz.yml", alias_bomb(9)),
        f"{NODE_VARS}/zz.yml",
        "aliases",
        "at most 100000",
    ),
    site_case(
        "site-vars-unreadable-dir",
        lambda root: (root / NODE_VARS).chmod(0),
        NODE_VARS,
        "",
        "permission denied",
        skip=AS_ROOT,
    ),
    site_case("site-empty-inventory", put(HOSTS, ""), HOSTS, "empty", "at least one host"),
    site_case(
        "site-no-hosts",
        put(HOSTS, "gpu_nodes:\n  hosts: {}\n"),
        HOSTS,
        "no hosts",
        "at least one host",
    ),
    site_case(
        "site-empty-address",
        sub(HOSTS, "ansible_host: gpu-node-01.example.internal", 'ansible_host: ""'),
        HOSTS,
        "ansible_host",
        "a host name or an IP address",
    ),
    site_case(
        "site-address-number",
        sub(HOSTS, "ansible_host: gpu-node-01.example.internal", "ansible_host: 10"),
        HOSTS,
        "ansible_host",
        "as a string",
    ),
    *(
        site_case(
            f"site-host-name-{case}",
            sub(HOSTS, "    gpu-node-02:", f"    {name}:"),
            HOSTS,
            f"gpu_nodes.hosts.{name.strip(chr(34))}",
            "not a host name (allowed: up to 253 letters, digits",
        )
        for case, name in (("space", '"gpu node 02!"'), ("range", '"gpu-node-[02:03]"'))
    ),
    site_case(
        "site-group-key-typo",
        sub(HOSTS, "  hosts:", "  hots:"),
        HOSTS,
        "gpu_nodes.hots",
        "did you mean 'hosts'",
    ),
    site_case(
        "site-hosts-duplicate",
        sub(HOSTS, "    gpu-node-02:", "    gpu-node-01:\n      ansible_host: x\n    gpu-node-02:"),
        HOSTS,
        "duplicate key 'gpu-node-01'",
        "each key once",
    ),
    site_case("site-hosts-missing", remove(HOSTS), SITE, "no hosts.yml", "hosts.yml or hosts.yaml"),
    site_case(
        "site-hosts-directory", both(remove(HOSTS), mkdir(HOSTS)), HOSTS, "", "is a directory"
    ),
    site_case(
        "site-driver-not-pinned",
        put(f"{NODE_VARS}/zz.yml", 'nvidia_driver_version: "535.1"\n'),
        f"{NODE_VARS}/zz.yml",
        "nvidia_driver_version",
        "pinned drivers",
    ),
    site_case(
        "site-name-too-long",
        nothing,
        "no site at",
        "inventory/",
        "sites under inventory/",
        argv=("config", "check", "--site", "inventory/" + "x" * 300),
    ),
    site_case(
        "site-missing",
        nothing,
        "no site at",
        "inventory/exmaple",
        "did you mean 'inventory/example'",
        argv=("config", "check", "--site", "inventory/exmaple"),
    ),
    # Bytes that are not UTF-8 reach Python as surrogates (a file name from another locale).
    *(
        site_case(
            f"site-name-not-utf8-{argv[0]}",
            nothing,
            "no site at inventory/ex\\udcffample",
            "did you mean 'inventory/example'",
            "sites under inventory/",
            argv=(*argv, "inventory/ex\udcffample"),
        )
        for argv in (("config", "check", "--site"), ("plan", "--site"))
    ),
    site_case(
        "site-by-its-folder-name",
        nothing,
        "no site at example",
        "did you mean 'inventory/example'",
        "sites under inventory/",
        argv=("config", "check", "--site", "example"),
    ),
    # --- add-on settings in a site: config check and plan refuse the same ---------------------
    # Each value made negative.
    *(
        site_case(
            f"{command}site-{case}",
            sub(file, old, old.replace(": ", ": -")),
            file,
            key,
            "greater than or equal to 0",
            argv=argv,
        )
        for case, file, old, key in (
            ("kueue-negative", f"{ALL_VARS}/kueue.yml", "gpus: 8", "kueue_flavors[0].gpus"),
            (
                "triton-delay",
                f"{ALL_VARS}/triton.yml",
                "max_queue_delay_microseconds: 200",
                "max_queue_delay_microseconds",
            ),
        )
        for command, argv in (("", ("config", "check", "--site", SITE)), ("plan-", PLAN_SITE))
    ),
    site_case(
        "site-triton-model-in-two-groups",
        sub(
            f"{ALL_VARS}/triton.yml",
            "triton_models:",
            "triton_serving_groups:\n  - {name: a, models: [resnet50]}\n"
            "  - {name: b, models: [resnet50]}\ntriton_models:",
        ),
        f"{ALL_VARS}/triton.yml",
        "triton_serving_groups",
        "a model belongs to exactly one group",
    ),
    # A check across an add-on's settings names the variable it is about, in its file.
    *(
        site_line(
            f"{command}site-triton-min-above-max",
            sub(f"{ALL_VARS}/triton.yml", "triton_min_replicas: 1", "triton_min_replicas: 9"),
            f"{ALL_VARS}/triton.yml",
            "triton_min_replicas",
            "min_replicas 9 is greater than max_replicas 4 (allowed: 1 to 4)",
            argv=argv,
        )
        for command, argv in (("", ("config", "check", "--site", SITE)), ("plan-", PLAN_SITE))
    ),
    site_line(
        "site-triton-model-twice",
        sub(
            f"{ALL_VARS}/triton.yml",
            "triton_models:\n",
            "triton_models:\n  - {name: resnet50, backend: onnxruntime}\n",
        ),
        f"{ALL_VARS}/triton.yml",
        "triton_models[1].name",
        "duplicate model names: resnet50 (allowed: each model name once)",
    ),
    site_line(
        # Unset: named in the file that enables Triton.
        "site-triton-no-model-repository",
        sub(f"{ALL_VARS}/triton.yml", "triton_model_repository:\n  pvc: triton-models\n", ""),
        f"{ALL_VARS}/triton.yml",
        "triton_model_repository",
        "model_repository is required when triton is enabled "
        "(allowed: a mapping with s3 or with pvc)",
    ),
    site_line(
        "site-triton-vllm-in-the-default-image",
        sub(f"{ALL_VARS}/triton.yml", "backend: onnxruntime", "backend: vllm"),
        f"{ALL_VARS}/triton.yml",
        "triton_models[0].backend",
        "model 'resnet50' has backend 'vllm', which the default Triton image does not contain; "
        "set image_variant: vllm (the -vllm-python-py3 tag pinned in versions.yaml "
        "triton.variants.vllm)",
    ),
    site_line(
        "site-kueue-gpu-type-twice",
        sub(f"{ALL_VARS}/kueue.yml", "gpu_type: l4", "gpu_type: h100"),
        f"{ALL_VARS}/kueue.yml",
        "kueue_flavors[1].gpu_type",
        "duplicate flavors (gpu_type): h100 (allowed: each gpu_type once)",
    ),
    site_line(
        "site-kueue-team-twice",
        sub(f"{ALL_VARS}/kueue.yml", "  - inference\n", "  - research\n"),
        f"{ALL_VARS}/kueue.yml",
        "kueue_teams[1]",
        "duplicate teams: research (allowed: each team once)",
    ),
    site_line(
        "site-volcano-queue-twice",
        both(
            sub(f"{ALL_VARS}/volcano.yml", "volcano_enabled: false", "volcano_enabled: true"),
            sub(f"{ALL_VARS}/volcano.yml", "name: experiments", "name: training"),
        ),
        f"{ALL_VARS}/volcano.yml",
        "volcano_queues[1].name",
        "duplicate queue names: training (allowed: each queue name once)",
    ),
    site_line(
        "site-keda-workload-twice",
        sub(
            f"{ALL_VARS}/keda.yml",
            "namespace: test\n    deployment: llm-eval",
            "namespace: dev\n    deployment: notebook-gpu",
        ),
        f"{ALL_VARS}/keda.yml",
        "keda_idle_reclaim[1]",
        "idle_reclaim lists dev/notebook-gpu twice (allowed: each namespace and deployment once)",
    ),
    site_line(
        "site-keda-workload-in-kube-system",
        sub(f"{ALL_VARS}/keda.yml", "namespace: test", "namespace: kube-system"),
        f"{ALL_VARS}/keda.yml",
        "keda_idle_reclaim[1].namespace",
        "idle_reclaim: kube-system/llm-eval is not in a reclaim namespace (allowed: dev, test)",
    ),
    site_case(
        "site-triton-group-on-a-mig-slice-no-host-offers",
        sub(
            f"{ALL_VARS}/triton.yml",
            "triton_models:",
            "triton_serving_groups:\n"
            "  - {name: vision, models: [resnet50], gpu_resource: nvidia.com/mig-3g.71gb}\n"
            "triton_models:",
        ),
        f"{SITE}",
        "Deployment triton/triton-vision",
        "nvidia.com/mig-3g.71gb 1 requested, 0 allocatable",
    ),
    site_case(
        "site-variable-in-two-files-of-a-group",
        put(f"{ALL_VARS}/zz.yml", "prometheus_stack_retention: 10d\nmy_own_setting: 1\n"),
        f"{ALL_VARS}/zz.yml",
        "prometheus_stack_retention",
        f"also set in {ALL_VARS}/prometheus_stack.yml, and Ansible keeps only the value of "
        "the file it reads last (allowed: each variable once per group)",
    ),
    site_case(
        "site-prometheus-retention-zero",
        sub(f"{ALL_VARS}/prometheus_stack.yml", "retention: 30d", "retention: 0d"),
        f"{ALL_VARS}/prometheus_stack.yml",
        "prometheus_stack_retention",
        "should match pattern",
    ),
    site_case(
        "site-prometheus-retention-size-past-the-volume",
        sub(f"{ALL_VARS}/prometheus_stack.yml", "retention_size: 180GB", "retention_size: 201GB"),
        f"{ALL_VARS}/prometheus_stack.yml",
        "prometheus_stack_storage_size",
        "200Gi is less than the retention size 201GB",
    ),
    site_case(
        "site-kueue-quota-huge",
        sub(f"{ALL_VARS}/kueue.yml", "gpus: 8", "gpus: 100000"),
        f"{SITE}",
        "nominalQuota",
        "can give",
    ),
    *(
        site_case(
            f"{command}site-kueue-team-{team}",
            sub(f"{ALL_VARS}/kueue.yml", "  - research\n", f"  - research\n  - {team}\n"),
            f"{ALL_VARS}/kueue.yml",
            "kueue_teams[1]",
            allowed,
            argv=argv,
        )
        for team, allowed in (
            ("kube-system", "the cluster's own namespace, not a team's"),
            ("kube-team", "not allowed: 'default' or a name starting with 'kube-'"),
            ("triton", "the namespace of the Triton add-on"),
        )
        for command, argv in (("", ("config", "check", "--site", SITE)), ("plan-", PLAN_SITE))
    ),
    site_case(
        "site-mig-layout-label",
        sub(
            HOSTS,
            "gpu_node_registration_gpu_type: h100\n",
            "gpu_node_registration_gpu_type: h100\n"
            "      gpu_node_registration_labels: {nvidia.com/mig.config: inferense}\n",
        ),
        SITE,
        "host gpu-node-01 gpu_node_registration_labels",
        "did you mean 'inference'? (allowed: 'all-disabled' or 'inference')",
    ),
    *(
        site_case(
            f"site-registration-label-{name}",
            sub(
                HOSTS,
                "gpu_node_registration_gpu_type: h100\n",
                "gpu_node_registration_gpu_type: h100\n"
                f"      gpu_node_registration_labels: {{{labels}}}\n",
            ),
            HOSTS,
            "gpu_node_registration_labels",
            message,
        )
        for name, labels, message in (
            (
                "kubernetes-io",
                "node-role.kubernetes.io/gpu: ''",
                "the 'kubernetes.io' namespace is Kubernetes' own",
            ),
            ("key-syntax", "'bad key!': x", "allowed: an optional lowercase DNS prefix"),
            ("value-syntax", "tier: 'x y'", "allowed: 0-63 letters"),
            ("value-not-a-string", "spot: yes", "True is not a string; quote it"),
        )
    ),
    site_case(
        "site-addon-var-typo",
        sub(f"{ALL_VARS}/kueue.yml", "kueue_teams:", "kueue_teems:"),
        f"{ALL_VARS}/kueue.yml",
        "kueue_teems",
        "did you mean 'kueue_teams'",
    ),
    site_case(
        "site-addon-bool-for-int",
        sub(f"{ALL_VARS}/triton.yml", "triton_min_replicas: 1", "triton_min_replicas: true"),
        f"{ALL_VARS}/triton.yml",
        "triton_min_replicas",
        "expected int",
    ),
    site_case(
        "site-addon-nested-string",
        sub(f"{ALL_VARS}/kueue.yml", "gpus: 8", 'gpus: "8"'),
        f"{ALL_VARS}/kueue.yml",
        "kueue_flavors[0].gpus",
        "valid integer",
    ),
    site_case(
        "site-addon-choice",
        sub(
            f"{ALL_VARS}/gpu_operator.yml",
            "gpu_operator_mig_strategy: mixed",
            "gpu_operator_mig_strategy: mixd",
        ),
        f"{ALL_VARS}/gpu_operator.yml",
        "gpu_operator_mig_strategy",
        "did you mean 'mixed'",
    ),
    site_case(
        "render-site-bad",
        put(f"{NODE_VARS}/zz.json", '{"gpu_node_check_expected_gpu_count": -1}'),
        f"{NODE_VARS}/zz.json",
        "gpu_node_check_expected_gpu_count",
        "allowed: 0 to 16",
        argv=("addons", "render", "--site", SITE),
    ),
    site_case(
        "converge-site-bad",
        put(f"{NODE_VARS}/zz.yml", "nvidia_driver_source: distr\n"),
        f"{NODE_VARS}/zz.yml",
        "nvidia_driver_source",
        "did you mean 'distro'",
        argv=("converge", "--site", SITE),
    ),
    # --- the 10^4-leaf alias bomb stays under the bound: its value is quoted as an excerpt --
    stack(
        "stack-alias-10k-leaves",
        both(
            put(DEV, alias_bomb(4) + DEV_TEXT),
            sub(DEV, "team: ml-platform", "team: *a3"),
        ),
        "tags.team",
        "valid string",
    ),
    # --- arguments ------------------------------------------------------------------------------
    arg(
        "lab-port-base-zero", ("lab", "up", "--port-base", "0"), "--port-base", "allowed 1024-65000"
    ),
    arg(
        "lab-port-base-high",
        ("lab", "status", "--port-base", "70000"),
        "--port-base",
        "allowed 1024-65000",
    ),
    arg(
        "lab-port-base-word", ("lab", "down", "--port-base", "abc"), "--port-base", "valid integer"
    ),
    arg("lab-prefix-empty", ("lab", "down", "--prefix", ""), "--prefix", "allowed 1-40"),
    arg("lab-prefix-upper", ("lab", "up", "--prefix", "Bad_Lab"), "--prefix", "lowercase letters"),
    arg("lab-prefix-long", ("lab", "status", "--prefix", "a" * 300), "--prefix", "allowed: 1-40"),
    arg("lab-hosts-zero", ("lab", "up", "--hosts", "0"), "--hosts", "allowed 1-32"),
    # int() reads these; nobody means them on a command line.
    *(
        arg(f"whole-number-{case_id}", argv, name, "allowed: digits, such as 8")
        for case_id, argv, name in (
            ("underscore", ("lab", "up", "--hosts", "1_0"), "--hosts"),
            ("spaces", ("lab", "status", "--port-base", " 2400 "), "--port-base"),
            ("fullwidth", ("workloads", "training", "t", "--nodes", "\uff12"), "--nodes"),
            (
                "decimal",
                ("workloads", "training", "t", "--gpus-per-node", "8.0"),
                "--gpus-per-node",
            ),
            ("canary-weight", ("triton", "canary", "main", "1_0", "--stack", "dev"), "weight"),
        )
    ),
    arg("stack-name-long", ("config", "check", "--stack", "x" * 300), "--stack", "letters, digits"),
    arg("stack-name-path", ("plan", "--stack", "../../etc/passwd"), "--stack", "letters, digits"),
    arg("stack-unknown", ("cost", "--stack", "dve"), "no stack 'dve'", "did you mean 'dev'"),
    arg("plan-both", ("plan", "--stack", "dev", "--site", SITE), "--stack ENV", "exactly one"),
    arg("config-check-neither", ("config", "check"), "--stack ENV", "exactly one"),
    arg(
        "format-unknown",
        ("plan", "--stack", "dev", "--format", "xml"),
        "--format",
        "'table', 'json', 'markdown'",
    ),
    arg("unknown-command", ("plna",), "gpuinfra", "see gpuinfra --help", key="no such command"),
    arg("cost-without-stack", ("cost",), "--stack", "see gpuinfra cost --help"),
    arg("out-is-directory", ("plan", "--site", SITE, "--out", "/proc"), "--out", "cannot write"),
    # Output written over an input would be read back as configuration.
    arg(
        "out-over-a-stack-file",
        ("cost", "--stack", "dev", "--out", "stacks/Pulumi.dev.yaml"),
        "--out stacks/Pulumi.dev.yaml: under stacks/",
        "a path outside stacks/, inventory/",
    ),
    arg(
        "out-over-versions",
        ("plan", "--stack", "dev", "--out", "./versions.yaml"),
        "--out versions.yaml: versions.yaml, which gpuinfra reads as input",
        "the files versions.yaml, Pulumi.yaml",
    ),
    arg(
        "render-into-group-vars",
        ("addons", "render", "--site", SITE, "--out", f"{SITE}/group_vars/all"),
        f"--out {SITE}/group_vars/all: under inventory/",
        "a path outside",
    ),
    arg(
        "report-into-roles",
        ("converge", "--report-json", "roles/report.json"),
        "--report-json roles/report.json: under roles/",
        "a path outside",
    ),
    arg(
        "diff-outside-git",
        ("diff", "--base", "HEAD"),
        "not a git repository",
        "compares a commit with the working tree",
        key="diff",
    ),
    # In a git repository, so that only the argument is wrong.
    *(
        arg(case_id, ("diff", "--base", *argv), name, allowed, edit=git_repo(nothing))
        for case_id, argv, name, allowed in (
            ("diff-unknown-base", ("no-such-ref", "--stack", "dev"), "--base", "not a commit"),
            # An unset shell variable: the message shows the empty value.
            ("diff-empty-base", ("", "--stack", "dev"), "--base ''", "empty"),
            ("diff-blank-base", (" ", "--stack", "dev"), "--base ' '", "empty"),
            ("diff-site-name-long", ("HEAD", "--site", "x" * 300), "--site", "at most 255 bytes"),
            ("diff-stack-path", ("HEAD", "--stack", "../x"), "--stack", "letters, digits"),
        )
    ),
    arg(
        "out-name-too-long",
        ("plan", "--site", SITE, "--out", "x" * 300),
        "--out",
        "File name too long",
    ),
    # --as-of is read with the command line: refused before a plan is printed or written.
    *(
        arg(case_id, argv, "--as-of", "allowed: YYYY-MM-DD", key=key)
        for case_id, argv, key in (
            ("as-of-word-plan-dev", ("plan", "--stack", "dev", "--as-of", "tomorrow"), "tomorrow"),
            (
                "as-of-word-plan-prod-out",
                ("plan", "--stack", "prod", "--as-of", "tomorrow", "--out", "plan.txt"),
                "tomorrow",
            ),
            ("as-of-word-plan-site", ("plan", "--site", SITE, "--as-of", "soon"), "soon"),
            (
                "as-of-no-such-day-check",
                ("config", "check", "--stack", "dev", "--as-of", "2026-02-30"),
                "2026-02-30",
            ),
            (
                "as-of-week-form-check-site",
                ("config", "check", "--site", SITE, "--as-of", "2026-W01-1"),
                "2026-W01-1",
            ),
            ("as-of-empty-versions", ("versions", "check", "--as-of", ""), "''"),
        )
    ),
    # addons render --out: a DIR that is not one, or that cannot become one, is refused first.
    *(
        arg(case_id, ("addons", "render", "--stack", "dev", "--out", out), "--out", allowed, edit=e)
        for case_id, out, allowed, e in (
            (
                "render-out-is-a-file",
                "/etc/hostname",
                "not a directory (allowed: a directory",
                nothing,
            ),
            (
                "render-out-under-a-file",
                "/etc/hostname/addons",
                "/etc/hostname is not a directory",
                nothing,
            ),
            ("render-out-proc", "/proc/gpuinfra-x", "No such file or directory", nothing),
            ("render-out-empty", "", "'' is empty (allowed: a directory", nothing),
            (
                "render-out-addon-dir-is-a-file",
                "build",
                "keda is not a directory and a file is written into it",
                put("build/keda", "mine\n"),
            ),
            (
                "render-out-file-is-a-dir",
                "build",
                "keda/values.yaml is a directory where a file is written",
                mkdir("build/keda/values.yaml"),
            ),
        )
    ),
    # addons role-files --roles: an existing directory that holds add-on roles, or nothing.
    *(
        arg(case_id, ("addons", "role-files", *argv), "--roles", allowed, key=key)
        for case_id, argv, key, allowed in (
            ("roles-missing", ("--roles", "nowhere"), "--roles nowhere", "no such directory"),
            (
                "roles-missing-check",
                ("--check", "--roles", "nowhere/roles"),
                "nowhere/roles",
                "no such directory",
            ),
            ("roles-a-file", ("--check", "--roles", DEV), DEV, "not a directory"),
            ("roles-no-role", ("--roles", "stacks"), "--roles stacks", "holds no add-on role"),
        )
    ),
    # schemas counters: a counter list line the DCGM exporter would refuse; nothing is written.
    *(
        Case(
            case_id,
            ("schemas", "counters", "4.6.0-4.8.3", COUNTERS, "--out", "data"),
            put(COUNTERS, f"# DCGM FIELD, Prometheus metric type, help message\n{text}"),
            2,
            COUNTERS,
            key,
            allowed,
        )
        for case_id, text, key, allowed in (
            (
                "counters-no-type",
                "DCGM_FI_DEV_GPU_TEMP\n",
                "line 2",
                "allowed: DCGM field, Prometheus metric type, help message",
            ),
            (
                "counters-no-help",
                "DCGM_FI_DEV_GPU_TEMP, gauge, Temp.\nDCGM_FI_DEV_SM_CLOCK, gauge\n",
                "line 3",
                "2 columns, expected 3",
            ),
            (
                "counters-extra-column",
                "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature, in C\n",
                "line 2",
                "4 columns, expected 3",
            ),
            (
                "counters-unknown-type",
                "DCGM_FI_DEV_GPU_TEMP, gauges, Temp.\n",
                "line 2",
                "'gauges' is not allowed; did you mean 'gauge'? (allowed: 'counter', 'gauge'",
            ),
            (
                "counters-unknown-field",
                "GPU_TEMP, gauge, Temp.\n",
                "line 2",
                "'GPU_TEMP' is not a DCGM field name (allowed: DCGM_FI_<NAME>",
            ),
            (
                "counters-header-row",
                "field,type,help\nDCGM_FI_DEV_GPU_TEMP, gauge, Temp.\n",
                "line 2",
                "'field' is not a DCGM field name",
            ),
            (
                "counters-unknown-exporter-field",
                "DCGM_EXP_XID_ERROR_COUNT, counter, XIDs.\n",
                "line 2",
                "did you mean 'DCGM_EXP_XID_ERRORS_COUNT'?",
            ),
            ("counters-none", "# DCGM_FI_DEV_GPU_TEMP, gauge, Temp.\n", "no counter", "allowed: "),
            (
                "counters-field-twice",
                "DCGM_FI_DEV_GPU_TEMP, gauge, Temp.\nDCGM_FI_DEV_GPU_TEMP, counter, Again.\n",
                "line 3",
                "DCGM_FI_DEV_GPU_TEMP is listed again, first on line 2",
            ),
        )
    ),
    # schemas api: each file one CRD with a served schema; nothing is written otherwise.
    *(
        Case(
            case_id,
            ("schemas", "api", "gateway-api", "1.6.1", "crd.yaml", "--out", "data"),
            put("crd.yaml", text),
            2,
            "crd.yaml",
            "crd.yaml",
            allowed,
        )
        for case_id, text, allowed in (
            ("api-empty-file", "", "not a CustomResourceDefinition"),
            (
                "api-no-group",
                "kind: CustomResourceDefinition\nspec: {versions: []}\n",
                "spec.group",
            ),
            (
                "api-nothing-served",
                "kind: CustomResourceDefinition\nspec: {group: g.io, names: {kind: A}, "
                "versions: [{name: v1, served: false}]}\n",
                "serves no version with an openAPIV3Schema",
            ),
        )
    ),
    arg(
        "schemas-build-empty-version",
        ("schemas", "build", "stacks", "--version", "", "--out", "data"),
        "--version",
        "not a chart version",
        key="--version ''",
    ),
    # schemas --out: a tree of files is written under DIR; a file in the way stops it first.
    *(
        Case(
            case_id,
            ("schemas", "counters", "4.6.0-4.8.3", COUNTERS, "--out", out),
            put(COUNTERS, "DCGM_FI_DEV_GPU_TEMP, gauge, Temp.\n"),
            2,
            "--out",
            key,
            allowed,
        )
        for case_id, out, key, allowed in (
            ("counters-out-is-a-file", COUNTERS, f"--out {COUNTERS}", "not a directory"),
            ("counters-out-empty", "", "'--out'", "'' is empty (allowed: a directory"),
        )
    ),
    Case(
        "diff-bad-working-tree",
        ("diff", "--base", "HEAD", "--stack", "dev"),
        git_repo(sub(DEV, "maxSize: 2", "maxSize: on")),
        2,
        DEV,
        "nodePools[0].maxSize",
        "valid integer",
    ),
]


def _snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every path under ``root`` with its kind and content hash (links by their target)."""
    seen: dict[str, tuple[str, str]] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                seen[rel] = ("dir", "")
            else:
                try:
                    seen[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
                except OSError as exc:
                    seen[rel] = ("unreadable", str(exc.errno))
    return seen


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files a user edits, copied; what they only read (roles, playbooks) linked."""
    root = tmp_path_factory.mktemp("template") / "repo"
    root.mkdir()
    for name in ("versions.yaml", "Pulumi.yaml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "stacks", root / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / SITE, root / SITE)
    (root / "policies").mkdir()
    shutil.copy(ROOT / LIMITS, root / LIMITS)
    for name in ("roles", "playbooks", "components"):
        (root / name).symlink_to(ROOT / name)
    return root


def run_in_process(
    argv: tuple[str, ...],
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str]:
    monkeypatch.setenv("GPUINFRA_ROOT", str(root))
    monkeypatch.chdir(root)
    versions.pinned.cache_clear()
    site.role_specs.cache_clear()
    capsys.readouterr()
    try:
        cli.main(list(argv))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        versions.pinned.cache_clear()
        site.role_specs.cache_clear()
    out, err = capsys.readouterr()
    return code, out, err


def test_the_suite_is_large_enough() -> None:
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES), "case ids are unique"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(
    case: Case,
    template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if case.skip:
        pytest.skip(case.skip)
    root = tmp_path / "repo"
    shutil.copytree(template, root, symlinks=True)
    try:
        case.edit(root)
        before = _snapshot(root)
        code, out, err = run_in_process(case.argv, root, monkeypatch, capsys)
        after = _snapshot(root)
    finally:
        for folder, _dirs, _files in os.walk(root):
            Path(folder).chmod(0o755)
    assert "Traceback" not in out + err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"exit {code}, stderr:\n{err}"
    (line,) = lines
    assert code == case.code, line
    assert line.startswith("error: "), line
    assert len(line) <= MAX_LINE + len("error: "), f"{len(line)} characters: {line}"
    for part, what in ((case.file, "file"), (case.key, "key"), (case.allowed, "allowed")):
        assert part in line, f"the {what} {part!r} is not in: {line}"
    if case.line is not None:
        assert line == case.line
    assert after == before, "the command changed the tree"


def test_an_ansible_coercible_string_is_accepted(
    template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ansible turns "8" into 8 for an int option; the site check accepts what Ansible does."""
    root = tmp_path / "repo"
    shutil.copytree(template, root, symlinks=True)
    path = root / NODE_VARS / "node_check.yml"
    text = path.read_text()
    assert "gpu_node_check_expected_gpu_count: 8" in text
    path.write_text(
        text.replace(
            "gpu_node_check_expected_gpu_count: 8", 'gpu_node_check_expected_gpu_count: "8"'
        )
    )
    code, out, err = run_in_process(("config", "check", "--site", SITE), root, monkeypatch, capsys)
    assert (code, err) == (0, ""), err
    assert "site example: valid (2 hosts)" in out


def test_vars_files_are_read_as_ansible_reads_them(
    template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nested directories, .json and extension-less files are read; hidden ones, backups and
    other extensions are not (Ansible's host_group_vars rules)."""
    monkeypatch.setenv("GPUINFRA_ROOT", str(tmp_path / "repo"))
    root = tmp_path / "repo"
    shutil.copytree(template, root, symlinks=True)
    base = root / NODE_VARS
    (base / "a" / "b").mkdir(parents=True)
    (base / "a" / "b" / "deep.yml").write_text("ansible_port: 2201\n")
    (base / "plain").write_text("ansible_user: ops\n")
    (base / "x.json").write_text('{"ansible_become": true}')
    for ignored in (".hidden.yml", "old.yml~", "notes.txt"):
        (base / ignored).write_text("ansible_port: [not, read]\n")
    versions.pinned.cache_clear()
    site.role_specs.cache_clear()
    loaded = site.load_site(root / SITE)
    host = loaded.hosts["gpu-node-01"]
    assert host.vars["ansible_port"] == 2201
    assert host.vars["ansible_user"] == "ops"
    assert host.vars["ansible_become"] is True
    assert host.origin["ansible_port"].endswith("group_vars/gpu_nodes/a/b/deep.yml")


def test_cost_says_when_a_region_has_no_price(
    template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A g5 stack in ca-central-1 is valid; its instances are not priced with us-east-1's."""
    root = tmp_path / "repo"
    shutil.copytree(template, root, symlinks=True)
    both(
        sub(DEV, "aws:region: us-east-1", "aws:region: ca-central-1"),
        sub(DEV, "[us-east-1a, us-east-1b]", "[ca-central-1a, ca-central-1b]"),
        sub(
            DEV,
            "instanceType: g6.xlarge\n      capacityType: spot",
            "instanceType: g5.xlarge\n      capacityType: on-demand",
        ),
        sub(
            LIMITS,
            "allowedInstanceTypes: [g6.xlarge, g6.2xlarge]",
            "allowedInstanceTypes: [g5.xlarge]",
        ),
        sub(DEV, "gpuType: l4, gpus: 2", "gpuType: a10g, gpus: 2"),
    )(root)
    code, out, err = run_in_process(
        ("cost", "--stack", "dev", "--format", "json"), root, monkeypatch, capsys
    )
    assert code == 0, err
    import json

    doc = json.loads(out)
    pool = next(line for line in doc["lines"] if line["category"] == "gpu-instances")
    assert pool["status"] == "lacking"
    assert "no on-demand price for ca-central-1" in pool["note"]
    assert doc["monthly_max_usd"] == 0


@pytest.mark.parametrize(
    ("number", "words"),
    [
        (errno.EACCES, "permission denied: cannot read it"),
        (errno.ENAMETOOLONG, "name too long (each part of a path takes at most 255 bytes)"),
        (errno.ELOOP, "a symlink loop: the link never reaches a file"),
        (errno.EISDIR, "is a directory, not a file"),
    ],
)
def test_filesystem_errors_become_one_line_naming_the_file(
    number: int, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``open`` raises for a user file (also the errors root never sees) is one line."""
    from gpuinfra.errors import ConfigError
    from gpuinfra.loading import load_yaml

    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("config: {}\n")
    monkeypatch.chdir(tmp_path)

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    assert caught.value.lines() == [f"Pulumi.dev.yaml: {words}"]


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", "--stack", "prod", "--as-of", "tomorrow"),
        ("plan", "--stack", "prod", "--as-of", "tomorrow", "--out", "build/plan.txt"),
        ("plan", "--site", SITE, "--format", "json", "--as-of", "2026-02-30"),
        ("config", "check", "--stack", "dev", "--as-of", "2026-02-30"),
    ],
)
def test_a_bad_as_of_stops_the_command_before_it_prints_or_writes(
    argv: tuple[str, ...],
    template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "repo"
    shutil.copytree(template, root, symlinks=True)
    (root / "build").mkdir()
    code, out, err = run_in_process(argv, root, monkeypatch, capsys)
    assert code == 2
    assert out == ""
    (line,) = err.splitlines()
    assert "invalid value for '--as-of'" in line
    assert "is not a date (allowed: YYYY-MM-DD)" in line
    assert list((root / "build").iterdir()) == []


def test_a_good_as_of_judges_prod_on_that_day(
    template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The parsed date reaches the support check: prod passes on 2026-12-01 (README)."""
    root = tmp_path / "repo"
    shutil.copytree(template, root, symlinks=True)
    argv = ("config", "check", "--stack", "prod", "--as-of", "2026-12-01")
    code, out, err = run_in_process(argv, root, monkeypatch, capsys)
    assert (code, err) == (0, ""), err
    assert "stack prod: valid" in out
