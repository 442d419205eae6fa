"""An adversarial corpus: variations of the prod stack that the policy pack must refuse.

Each case takes what the real prod program registers (``run_stack("prod")``, with the property
dependencies the engine reports) and changes or adds resources the way a careless or hostile
change would. The rule named in the case must refuse it, naming the resource; the unchanged
stack passes every rule.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pytest

from gpuinfra.review import policy
from gpuinfra.review.stackrun import Resource, run_stack

ENV = "prod"
PROJECT_URN = f"urn:pulumi:{ENV}::gpuinfra::"
SG = policy.SECURITY_GROUP
TAGS = {"team": "ml-platform", "project": "gpuinfra", "cost-center": "cc-1042"}
WORLD_HALVES = ["0.0.0.0/1", "128.0.0.0/1"]


@pytest.fixture(scope="module")
def prod() -> list[Resource]:
    return run_stack(ENV).resources


@pytest.fixture(scope="module")
def limits() -> policy.Limits:
    return policy.Limits.for_stack(ENV)


Stack = list[Resource]
Change = Callable[[Stack], Stack]


def named(stack: Stack, name: str) -> Resource:
    (found,) = [r for r in stack if r.name == name]
    return found


def edit(name: str, change: Callable[[dict[str, Any]], None]) -> Change:
    """Change the inputs of the resource ``name`` in place of the program's."""

    def apply(stack: Stack) -> Stack:
        out = []
        for r in stack:
            if r.name == name:
                inputs = copy.deepcopy(r.inputs)
                change(inputs)
                r = replace(r, inputs=inputs)
            out.append(r)
        return out

    return apply


def add(type_: str, name: str, inputs: Mapping[str, Any], **reads: str | list[str]) -> Change:
    """Add a resource whose input properties (keys of ``reads``) read the named resources."""

    def apply(stack: Stack) -> Stack:
        deps = {
            prop: tuple(named(stack, n).urn for n in ([names] if isinstance(names, str) else names))
            for prop, names in reads.items()
        }
        urn = f"{PROJECT_URN}{type_}::{name}"
        return [*stack, Resource(type_, name, dict(inputs), None, urn, property_dependencies=deps)]

    return apply


def both(*changes: Change) -> Change:
    def apply(stack: Stack) -> Stack:
        for change in changes:
            stack = change(stack)
        return stack

    return apply


def ingress(protocol: str, low: int, high: int, *cidrs: str) -> dict[str, Any]:
    v6 = [c for c in cidrs if ":" in c]
    v4 = [c for c in cidrs if ":" not in c]
    rule: dict[str, Any] = {"protocol": protocol, "fromPort": low, "toPort": high}
    if v4:
        rule["cidrBlocks"] = v4
    if v6:
        rule["ipv6CidrBlocks"] = v6
    return rule


def nodes_sg_ingress(*rules: dict[str, Any]) -> Change:
    return edit("gpuinfra-prod-nodes", lambda i: i["ingress"].extend(rules))


def group(name: str, *rules: dict[str, Any]) -> Change:
    return add(SG, name, {"ingress": list(rules), "tags": TAGS, "vpcId": "vpc-1"})


def sg_rule(name: str, protocol: str, low: int, high: int, *cidrs: str) -> Change:
    return add(
        policy.SECURITY_GROUP_RULE,
        name,
        {"type": "ingress", **ingress(protocol, low, high, *cidrs), "securityGroupId": "<sg>"},
        securityGroupId="gpuinfra-prod-nodes",
    )


def metadata(**options: Any) -> Change:
    return edit("gpuinfra-prod-h100-lt", lambda i: i["metadataOptions"].update(options))


def doc(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def role_policy(name: str, *statements: dict[str, Any]) -> Change:
    return add(
        "aws:iam/rolePolicy:RolePolicy",
        name,
        {"role": "<role>", "policy": doc(*statements)},
        role="gpuinfra-prod-node",
    )


def attach(name: str, managed: str) -> Change:
    return add(
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        name,
        {"role": "gpuinfra-prod-node", "policyArn": f"arn:aws:iam::aws:policy/{managed}"},
        role="gpuinfra-prod-node",
    )


def trusting(name: str, principal: Any) -> Change:
    statement = {"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}
    return add(policy.IAM_ROLE, name, {"assumeRolePolicy": doc(statement), "tags": TAGS})


def endpoint(**vpc: Any) -> Change:
    return edit("gpuinfra-prod-eks", lambda i: i["vpcConfig"].update(vpc))


def bucket(name: str, **inputs: Any) -> Change:
    return add("aws:s3/bucket:Bucket", name, {"tags": TAGS, **inputs})


def companions(of: str, reads: str) -> Change:
    """A public access block and an encryption configuration created for ``of`` but reading
    the bucket ``reads``."""
    return both(
        add(
            policy.PUBLIC_ACCESS_BLOCK,
            f"{of}-public-access",
            {
                "bucket": "<bucket>",
                **dict.fromkeys(
                    (
                        "blockPublicAcls",
                        "blockPublicPolicy",
                        "ignorePublicAcls",
                        "restrictPublicBuckets",
                    ),
                    True,
                ),
            },
            bucket=reads,
        ),
        add(
            policy.BUCKET_ENCRYPTION[0],
            f"{of}-encryption",
            {
                "bucket": "<bucket>",
                "rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}],
            },
            bucket=reads,
        ),
    )


def protected_bucket(name: str, **inputs: Any) -> Change:
    return both(bucket(name, **inputs), companions(name, name))


def bucket_policy(name: str, *statements: dict[str, Any]) -> Change:
    return add(
        policy.BUCKET_POLICY,
        name,
        {"bucket": "<bucket>", "policy": doc(*statements)},
        bucket="gpuinfra-prod-models",
    )


def instance(name: str, **inputs: Any) -> Change:
    base = {
        "instanceType": "g6e.2xlarge",
        "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
        "rootBlockDevice": {"encrypted": True, "volumeSize": 100},
        "tags": TAGS,
    }
    return add(policy.INSTANCE, name, {**base, **inputs})


def launch_template(name: str, **inputs: Any) -> Change:
    base = {
        "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true"}}],
        "tags": TAGS,
    }
    return add(policy.LAUNCH_TEMPLATE, name, {**base, **inputs})


def node_group_on(template: str, name: str, max_size: int, **inputs: Any) -> Change:
    """A GPU node group whose instance type is set only on its launch template."""
    return add(
        policy.NODE_GROUP,
        name,
        {
            "clusterName": "gpuinfra-prod",
            "labels": {"gpuinfra.dev/pool": name},
            "launchTemplate": {"id": "<lt>", "version": "1"},
            "releaseVersion": "1.34.2-20261110",
            "scalingConfig": {"minSize": 0, "maxSize": max_size, "desiredSize": 0},
            "tags": TAGS,
            **inputs,
        },
        launchTemplate=template,
    )


def p5_template_group(max_size: int) -> Change:
    return both(
        launch_template("big-lt", instanceType="p5.48xlarge"),
        node_group_on("big-lt", "big-ng", max_size),
    )


def drop(name: str) -> Change:
    """Leave out the resource ``name``."""
    return lambda stack: [r for r in stack if r.name != name]


def key_policy_statements(change: Callable[[list[dict[str, Any]]], None]) -> Change:
    """Change the statements of the storage key's KeyPolicy."""

    def apply(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs["policy"])
        change(document["Statement"])
        inputs["policy"] = json.dumps(document)

    return edit("gpuinfra-prod-key-policy", apply)


def fsx_statement(update: Mapping[str, Any]) -> Callable[[list[dict[str, Any]]], None]:
    def apply(statements: list[dict[str, Any]]) -> None:
        for statement in statements:
            if statement.get("Sid") == "FsxDataRepositoryReadsTheBucket":
                statement.update(update)

    return apply


def without(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda inputs: inputs.pop(key, None)


def setting(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda inputs: inputs.__setitem__(key, value)


@dataclass(frozen=True)
class Case:
    id: str
    rule: str
    # The resource the refusal names.
    resource: str
    change: Change


CASES = [
    # Ingress from the whole internet, any port, any spelling, any resource type.
    Case(
        "sg-protocol-ALL-world",
        "no-world-ingress",
        "gpuinfra-prod-nodes",
        nodes_sg_ingress(ingress("ALL", 0, 0, "0.0.0.0/0")),
    ),
    Case(
        "sg-protocol-minus-one-ipv6-world",
        "no-world-ingress",
        "gpuinfra-prod-nodes",
        nodes_sg_ingress(ingress("-1", 0, 0, "::/0")),
    ),
    Case(
        "sg-ssh-from-two-halves-in-one-entry",
        "no-world-ingress",
        "gpuinfra-prod-nodes",
        nodes_sg_ingress(ingress("tcp", 22, 22, *WORLD_HALVES)),
    ),
    Case(
        "sg-ssh-from-two-halves-in-two-entries",
        "no-world-ingress",
        "gpuinfra-prod-nodes",
        nodes_sg_ingress(
            ingress("tcp", 22, 22, WORLD_HALVES[0]), ingress("tcp", 22, 22, WORLD_HALVES[1])
        ),
    ),
    Case(
        "sg-kubelet-10250-world",
        "no-world-ingress",
        "gpuinfra-prod-nodes",
        nodes_sg_ingress(ingress("tcp", 10250, 10250, "0.0.0.0/0")),
    ),
    Case(
        "new-sg-https-world",
        "no-world-ingress",
        "lb",
        group("lb", ingress("tcp", 443, 443, "0.0.0.0/0")),
    ),
    Case(
        "new-sg-TCP-uppercase-all-ports",
        "no-world-ingress",
        "wide",
        group("wide", ingress("TCP", 0, 65535, "0.0.0.0/0")),
    ),
    Case(
        "sg-udp-by-number-world",
        "no-world-ingress",
        "udp",
        group("udp", ingress("17", 0, 65535, "0.0.0.0/0")),
    ),
    Case(
        "sg-ipv6-two-halves",
        "no-world-ingress",
        "v6",
        group("v6", ingress("tcp", 22, 22, "::/1", "8000::/1")),
    ),
    Case(
        "sg-world-with-host-bits",
        "no-world-ingress",
        "hostbits",
        group("hostbits", ingress("tcp", 22, 22, "10.1.2.3/0")),
    ),
    Case(
        "sg-overlapping-port-ranges-cover-22",
        "no-world-ingress",
        "ranges",
        group(
            "ranges",
            ingress("tcp", 0, 100, WORLD_HALVES[0]),
            ingress("tcp", 20, 30, WORLD_HALVES[1]),
        ),
    ),
    Case(
        "sg-all-traffic-half-plus-tcp-half",
        "no-world-ingress",
        "mixed",
        group(
            "mixed", ingress("-1", 0, 0, WORLD_HALVES[0]), ingress("tcp", 22, 22, WORLD_HALVES[1])
        ),
    ),
    Case(
        "default-sg-all-from-world",
        "no-world-ingress",
        "gpuinfra-prod-default-sg",
        edit("gpuinfra-prod-default-sg", setting("ingress", [ingress("-1", 0, 0, "0.0.0.0/0")])),
    ),
    Case(
        "standalone-rule-kubelet-world-mixed-case",
        "no-world-ingress",
        "gpuinfra-prod-nodes",
        sg_rule("kubelet", "Tcp", 10250, 10250, "0.0.0.0/0"),
    ),
    Case(
        "two-standalone-rules-halves-ssh",
        "no-world-ingress",
        "gpuinfra-prod-nodes",
        both(
            sg_rule("ssh-a", "tcp", 22, 22, WORLD_HALVES[0]),
            sg_rule("ssh-b", "tcp", 22, 22, WORLD_HALVES[1]),
        ),
    ),
    Case(
        "inline-half-and-standalone-half",
        "no-world-ingress",
        "gpuinfra-prod-nodes",
        both(
            nodes_sg_ingress(ingress("tcp", 0, 100, WORLD_HALVES[0])),
            sg_rule("ssh-b", "tcp", 20, 30, WORLD_HALVES[1]),
        ),
    ),
    Case(
        "vpc-ingress-rule-all-ipv6",
        "no-world-ingress",
        "gpuinfra-prod-nodes",
        add(
            policy.INGRESS_RULE,
            "v6-all",
            {"ipProtocol": "-1", "cidrIpv6": "::/0", "securityGroupId": "<sg>"},
            securityGroupId="gpuinfra-prod-nodes",
        ),
    ),
    Case(
        "node-group-remote-access-without-sources",
        "no-world-ingress",
        "gpuinfra-prod-h100-ng",
        edit("gpuinfra-prod-h100-ng", setting("remoteAccess", {"ec2SshKey": "ops"})),
    ),
    Case(
        "default-sg-self-ingress",
        "default-security-group-closed",
        "gpuinfra-prod-default-sg",
        edit("gpuinfra-prod-default-sg", setting("ingress", [{"protocol": "-1", "self": True}])),
    ),
    Case(
        "default-sg-egress",
        "default-security-group-closed",
        "gpuinfra-prod-default-sg",
        edit("gpuinfra-prod-default-sg", setting("egress", [ingress("-1", 0, 0, "0.0.0.0/0")])),
    ),
    # The metadata service.
    Case(
        "lt-hop-limit-2",
        "imdsv2-required",
        "gpuinfra-prod-h100-lt",
        metadata(httpPutResponseHopLimit=2),
    ),
    Case(
        "lt-tokens-optional",
        "imdsv2-required",
        "gpuinfra-prod-h100-lt",
        metadata(httpTokens="optional"),
    ),
    Case(
        "lt-hop-limit-unset",
        "imdsv2-required",
        "gpuinfra-prod-h100-lt",
        edit(
            "gpuinfra-prod-h100-lt", lambda i: i["metadataOptions"].pop("httpPutResponseHopLimit")
        ),
    ),
    Case(
        "lt-no-metadata-options",
        "imdsv2-required",
        "gpuinfra-prod-h100-lt",
        edit("gpuinfra-prod-h100-lt", without("metadataOptions")),
    ),
    Case(
        "instance-without-metadata-options",
        "imdsv2-required",
        "vm",
        instance("vm", metadataOptions={}),
    ),
    Case(
        "node-group-without-launch-template",
        "imdsv2-required",
        "gpuinfra-prod-serving-ng",
        edit("gpuinfra-prod-serving-ng", without("launchTemplate")),
    ),
    # EC2 volumes.
    Case(
        "gpu-lt-without-mappings",
        "ebs-encrypted",
        "gpuinfra-prod-h100-lt",
        edit("gpuinfra-prod-h100-lt", without("blockDeviceMappings")),
    ),
    Case(
        "lt-root-encrypted-false",
        "ebs-encrypted",
        "gpuinfra-prod-serving-lt",
        edit(
            "gpuinfra-prod-serving-lt",
            lambda i: i["blockDeviceMappings"][0]["ebs"].update(encrypted="false"),
        ),
    ),
    Case(
        "lt-maps-only-a-data-volume",
        "ebs-encrypted",
        "gpuinfra-prod-h100-lt",
        edit(
            "gpuinfra-prod-h100-lt",
            setting(
                "blockDeviceMappings", [{"deviceName": "/dev/xvdb", "ebs": {"encrypted": "true"}}]
            ),
        ),
    ),
    Case(
        "instance-without-root-device", "ebs-encrypted", "vm", instance("vm", rootBlockDevice=None)
    ),
    Case(
        "instance-unencrypted-data-volume",
        "ebs-encrypted",
        "vm",
        instance("vm", ebsBlockDevices=[{"deviceName": "/dev/sdf", "volumeSize": 500}]),
    ),
    Case(
        "volume-unencrypted",
        "ebs-encrypted",
        "scratch",
        add(policy.EBS_VOLUME, "scratch", {"size": 100, "tags": TAGS}),
    ),
    Case(
        "default-encryption-turned-off",
        "ebs-encrypted",
        "scratch",
        both(
            add(policy.EBS_DEFAULT_ENCRYPTION, "ebs-default", {"enabled": False}),
            add(policy.EBS_VOLUME, "scratch", {"size": 100, "tags": TAGS}),
        ),
    ),
    Case(
        "instance-public-ip",
        "no-public-instance-ip",
        "vm",
        instance("vm", associatePublicIpAddress=True),
    ),
    Case(
        "lt-interface-public-ip",
        "no-public-instance-ip",
        "gpuinfra-prod-h100-lt",
        edit(
            "gpuinfra-prod-h100-lt",
            lambda i: i["networkInterfaces"][0].update(associatePublicIpAddress="true"),
        ),
    ),
    # Buckets.
    Case(
        "bucket-acl-public-read",
        "s3-no-public-access",
        "open",
        protected_bucket("open", acl="public-read"),
    ),
    Case(
        "bucket-acl-v2-public-read-write",
        "s3-no-public-access",
        "acl",
        add(
            policy.BUCKET_ACL_TYPES[1],
            "acl",
            {"bucket": "<b>", "acl": "Public-Read-Write"},
            bucket="gpuinfra-prod-models",
        ),
    ),
    Case(
        "bucket-acl-grant-all-users",
        "s3-no-public-access",
        "grant",
        add(
            policy.BUCKET_ACL_TYPES[1],
            "grant",
            {
                "bucket": "<b>",
                "accessControlPolicy": {
                    "grants": [
                        {
                            "grantee": {"type": "Group", "uri": policy.PUBLIC_GRANTEES[0]},
                            "permission": "READ",
                        }
                    ]
                },
            },
            bucket="gpuinfra-prod-models",
        ),
    ),
    Case(
        "bucket-policy-public-get",
        "s3-no-public-access",
        "public-get",
        bucket_policy(
            "public-get",
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::x/*",
            },
        ),
    ),
    Case(
        "bucket-policy-aws-star",
        "s3-no-public-access",
        "aws-star",
        bucket_policy(
            "aws-star",
            {
                "Effect": "Allow",
                "Principal": {"AWS": ["*"]},
                "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::x/*",
            },
        ),
    ),
    Case(
        "second-bucket-companions-point-at-models",
        "buckets-protected",
        "open",
        both(bucket("open"), companions("open", "gpuinfra-prod-models")),
    ),
    Case("second-bucket-without-companions", "buckets-protected", "bare", bucket("bare")),
    Case(
        "public-access-block-half-off",
        "s3-public-access-blocked",
        "gpuinfra-prod-models-public-access",
        edit("gpuinfra-prod-models-public-access", setting("restrictPublicBuckets", False)),
    ),
    Case(
        "bucket-encryption-without-algorithm",
        "encryption-at-rest",
        "gpuinfra-prod-models-encryption",
        edit("gpuinfra-prod-models-encryption", setting("rules", [{"bucketKeyEnabled": True}])),
    ),
    Case(
        "fsx-without-customer-key",
        "encryption-at-rest",
        "gpuinfra-prod-fsx",
        edit("gpuinfra-prod-fsx", without("kmsKeyId")),
    ),
    Case(
        "cluster-secrets-unencrypted",
        "encryption-at-rest",
        "gpuinfra-prod-eks",
        edit("gpuinfra-prod-eks", without("encryptionConfig")),
    ),
    # Keys.
    Case(
        "bucket-key-rotation-off",
        "kms-key-policies",
        "gpuinfra-prod-key",
        edit("gpuinfra-prod-key", setting("enableKeyRotation", False)),
    ),
    Case(
        "key-policy-open-to-everyone",
        "kms-key-policies",
        "gpuinfra-prod-key",
        edit(
            "gpuinfra-prod-key",
            setting(
                "policy",
                doc({"Effect": "Allow", "Principal": "*", "Action": "kms:*", "Resource": "*"}),
            ),
        ),
    ),
    Case(
        "separate-key-policy-aws-star",
        "kms-key-policies",
        "gpuinfra-prod-key",
        add(
            policy.KMS_KEY_POLICY,
            "key-policy",
            {
                "keyId": "<key>",
                "policy": doc(
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": "*"},
                        "Action": "kms:Decrypt",
                        "Resource": "*",
                    }
                ),
            },
            keyId="gpuinfra-prod-key",
        ),
    ),
    Case(
        "key-without-a-policy",
        "kms-key-policy-defined",
        "loose",
        add(policy.KMS_KEY, "loose", {"enableKeyRotation": True, "tags": TAGS}),
    ),
    Case(
        "storage-key-policy-left-out",
        "kms-key-policy-defined",
        "gpuinfra-prod-key",
        drop("gpuinfra-prod-key-policy"),
    ),
    Case(
        "secrets-key-policy-left-out",
        "kms-key-policy-defined",
        "gpuinfra-prod-secrets",
        drop("gpuinfra-prod-secrets-policy"),
    ),
    # FSx and its keys.
    Case(
        "fsx-s3-role-left-out-of-the-bucket-key",
        "fsx-key-policy",
        "gpuinfra-prod-key",
        key_policy_statements(
            lambda statements: statements.__setitem__(
                slice(None),
                [s for s in statements if s.get("Sid") != "FsxDataRepositoryReadsTheBucket"],
            )
        ),
    ),
    Case(
        "fsx-s3-role-without-decrypt",
        "fsx-key-policy",
        "gpuinfra-prod-key",
        key_policy_statements(fsx_statement({"Action": ["kms:DescribeKey"]})),
    ),
    Case(
        "fsx-export-turned-on-behind-an-import-only-key",
        "fsx-key-policy",
        "gpuinfra-prod-key",
        edit(
            "gpuinfra-prod-fsx-models",
            lambda i: i["s3"].update(autoExportPolicy={"events": ["NEW", "CHANGED"]}),
        ),
    ),
    Case(
        "fsx-key-policy-star-with-a-condition",
        "fsx-key-policy",
        "gpuinfra-prod-key",
        key_policy_statements(
            lambda statements: statements.append(
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": "*"},
                    "Action": "kms:Decrypt",
                    "Resource": "*",
                    "Condition": {"StringEquals": {"kms:CallerAccount": "123456789012"}},
                }
            )
        ),
    ),
    Case(
        "fsx-key-without-the-accounts-iam",
        "fsx-key-policy",
        "gpuinfra-prod-key",
        key_policy_statements(
            lambda statements: statements[0].update(
                Principal={"AWS": "arn:aws:iam::123456789012:role/ops"}, Action="kms:Decrypt"
            )
        ),
    ),
    Case(
        "fsx-on-a-key-without-a-policy",
        "fsx-key-policy",
        "scratch-key",
        both(
            add(policy.KMS_KEY, "scratch-key", {"enableKeyRotation": True, "tags": TAGS}),
            add(
                policy.FSX_LUSTRE,
                "scratch",
                {"kmsKeyId": "<key>", "storageCapacity": 1200, "tags": TAGS},
                kmsKeyId="scratch-key",
            ),
        ),
    ),
    # Identity.
    Case(
        "cni-policy-on-the-node-role",
        "node-role-no-cni-policy",
        "gpuinfra-prod-node",
        attach("cni", "AmazonEKS_CNI_Policy"),
    ),
    Case(
        "ipv6-cni-policy-as-a-managed-arn",
        "node-role-no-cni-policy",
        "gpuinfra-prod-node",
        edit(
            "gpuinfra-prod-node",
            setting("managedPolicyArns", ["arn:aws:iam::aws:policy/AmazonEKS_CNI_IPv6_Policy"]),
        ),
    ),
    Case(
        "pass-role-and-run-instances",
        "iam-no-privilege-escalation",
        "gpuinfra-prod-node",
        role_policy(
            "launch",
            {"Effect": "Allow", "Action": ["iam:PassRole", "ec2:RunInstances"], "Resource": "*"},
        ),
    ),
    Case(
        "escalation-split-across-two-policies",
        "iam-no-privilege-escalation",
        "gpuinfra-prod-node",
        both(
            role_policy("pass", {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"}),
            role_policy(
                "glue", {"Effect": "Allow", "Action": "glue:CreateDevEndpoint", "Resource": "*"}
            ),
        ),
    ),
    Case(
        "escalation-through-an-attached-policy",
        "iam-no-privilege-escalation",
        "gpuinfra-prod-node",
        both(
            role_policy(
                "pass-only", {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"}
            ),
            add(
                "aws:iam/policy:Policy",
                "run-only",
                {
                    "policy": doc(
                        {"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": "*"}
                    ),
                    "tags": TAGS,
                },
            ),
            add(
                "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
                "run-only-attached",
                {"role": "<role>", "policyArn": "<arn>"},
                role="gpuinfra-prod-node",
                policyArn="run-only",
            ),
        ),
    ),
    Case(
        "create-access-key-by-wildcard",
        "iam-no-privilege-escalation",
        "gpuinfra-prod-node",
        role_policy("keys", {"Effect": "Allow", "Action": "iam:Create*", "Resource": "*"}),
    ),
    Case(
        "session-token-on-a-named-resource",
        "iam-no-credentials-exposure",
        "session",
        role_policy(
            "session",
            {
                "Effect": "Allow",
                "Action": "sts:GetSessionToken",
                "Resource": "arn:aws:iam::123456789012:role/ci",
            },
        ),
    ),
    Case(
        "assume-any-role",
        "iam-no-credentials-exposure",
        "hop",
        role_policy("hop", {"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}),
    ),
    Case(
        "redshift-credentials-through-not-action",
        "iam-no-credentials-exposure",
        "not-iam",
        role_policy("not-iam", {"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}),
    ),
    Case(
        "every-secret",
        "iam-no-data-exfiltration",
        "secrets",
        role_policy(
            "secrets",
            {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": "*"},
        ),
    ),
    Case(
        "every-object-inline-on-a-role",
        "iam-no-data-exfiltration",
        "reader",
        add(
            policy.IAM_ROLE,
            "reader",
            {
                "assumeRolePolicy": doc(
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "ec2.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ),
                "inlinePolicies": [
                    {
                        "name": "read",
                        "policy": doc(
                            {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["*"]}
                        ),
                    }
                ],
                "tags": TAGS,
            },
        ),
    ),
    Case(
        "permissions-management-anywhere-under-a-condition",
        "iam-no-wildcards",
        "grant",
        role_policy(
            "grant",
            {
                "Effect": "Allow",
                "Action": "iam:PutRolePolicy",
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:RequestedRegion": "us-east-1"}},
            },
        ),
    ),
    Case(
        "unconstrained-write",
        "iam-no-wildcards",
        "terminate",
        role_policy(
            "terminate", {"Effect": "Allow", "Action": "ec2:TerminateInstances", "Resource": "*"}
        ),
    ),
    Case(
        "node-role-administrator",
        "iam-no-admin-policies",
        "admin",
        attach("admin", "AdministratorAccess"),
    ),
    Case(
        "node-role-power-user", "iam-no-admin-policies", "power", attach("power", "PowerUserAccess")
    ),
    Case(
        "role-managed-admin-arn",
        "iam-no-admin-policies",
        "ops",
        add(
            policy.IAM_ROLE,
            "ops",
            {"managedPolicyArns": ["arn:aws:iam::aws:policy/AdministratorAccess"], "tags": TAGS},
        ),
    ),
    Case(
        "node-role-inline-star-star",
        "iam-no-wildcards",
        "star",
        role_policy("star", {"Effect": "Allow", "Action": "*", "Resource": "*"}),
    ),
    Case(
        "inline-service-wildcard",
        "iam-no-wildcards",
        "s3-all",
        role_policy(
            "s3-all", {"Effect": "Allow", "Action": ["s3:*"], "Resource": "arn:aws:s3:::b"}
        ),
    ),
    Case(
        "inline-every-resource",
        "iam-no-wildcards",
        "any-resource",
        role_policy("any-resource", {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}),
    ),
    Case(
        "inline-not-action",
        "iam-no-wildcards",
        "not-action",
        role_policy(
            "not-action", {"Effect": "Allow", "NotAction": "iam:*", "Resource": "arn:aws:s3:::b"}
        ),
    ),
    Case("trust-aws-star", "iam-trust-principals", "anyone", trusting("anyone", {"AWS": "*"})),
    Case("trust-star", "iam-trust-principals", "anyone", trusting("anyone", "*")),
    Case(
        "trust-whole-account",
        "iam-trust-principals",
        "account",
        trusting("account", {"AWS": "arn:aws:iam::123456789012:root"}),
    ),
    Case(
        "pod-identity-trust-without-source",
        "iam-trust-principals",
        "gpuinfra-prod-s3-csi-role",
        edit(
            "gpuinfra-prod-s3-csi-role",
            lambda i: i.update(
                assumeRolePolicy=doc(
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                    }
                )
            ),
        ),
    ),
    # The EKS endpoint.
    Case(
        "prod-endpoint-public-two-halves",
        "eks-endpoint",
        "gpuinfra-prod-eks",
        endpoint(endpointPublicAccess=True, publicAccessCidrs=WORLD_HALVES),
    ),
    Case(
        "prod-endpoint-public-to-a-cidr",
        "eks-endpoint",
        "gpuinfra-prod-eks",
        endpoint(endpointPublicAccess=True, publicAccessCidrs=["203.0.113.0/24"]),
    ),
    Case(
        "endpoint-access-left-to-aws-default",
        "eks-endpoint",
        "gpuinfra-prod-eks",
        edit("gpuinfra-prod-eks", lambda i: i["vpcConfig"].pop("endpointPublicAccess")),
    ),
    Case(
        "control-plane-logs-partial",
        "eks-control-plane-logs",
        "gpuinfra-prod-eks",
        edit("gpuinfra-prod-eks", setting("enabledClusterLogTypes", ["api", "audit"])),
    ),
    # Capacity wherever the instance type is set.
    Case("lt-only-type-64-p5-node-cap", "node-cap", "", p5_template_group(64)),
    Case("lt-only-type-64-p5-cost", "monthly-cost-ceiling", "", p5_template_group(64)),
    Case(
        "lt-only-type-not-allowed",
        "allowed-instance-types",
        "g5-ng",
        both(
            launch_template("g5-lt", instanceType="g5.xlarge"), node_group_on("g5-lt", "g5-ng", 1)
        ),
    ),
    Case(
        "autoscaling-group-on-p5-template",
        "node-cap",
        "",
        both(
            launch_template("asg-lt", instanceType="p5.48xlarge"),
            add(
                policy.AUTOSCALING_GROUP,
                "asg",
                {"maxSize": 16, "launchTemplate": {"id": "<lt>", "version": "$Latest"}},
                launchTemplate="asg-lt",
            ),
        ),
    ),
    Case(
        "instance-of-a-type-not-allowed",
        "allowed-instance-types",
        "vm",
        instance("vm", instanceType="g4dn.xlarge"),
    ),
    Case(
        "gpu-group-labelled-system",
        "allowed-instance-types",
        "gpuinfra-prod-h100-ng",
        edit(
            "gpuinfra-prod-h100-ng", lambda i: i["labels"].update({"gpuinfra.dev/pool": "system"})
        ),
    ),
    Case(
        "prod-ami-floating",
        "pinned-versions",
        "gpuinfra-prod-h100-ng",
        edit("gpuinfra-prod-h100-ng", setting("releaseVersion", "latest")),
    ),
    Case(
        "untagged-bucket", "required-cost-tags", "untagged", protected_bucket("untagged", tags={})
    ),
    Case(
        "prod-idle-reclaim",
        "no-idle-reclaim-in-prod",
        "notebook-idle-reclaim",
        add(
            policy.SCALED_OBJECT,
            "notebook-idle-reclaim",
            {"metadata": {"name": "notebook-idle-reclaim", "namespace": "dev"}},
        ),
    ),
]


def test_the_corpus_is_large_and_covers_every_security_rule() -> None:
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)
    covered = {c.rule for c in CASES}
    assert covered == set(policy.RESOURCE_RULES) | set(policy.STACK_RULES)


def test_the_unchanged_prod_stack_passes(prod: Stack, limits: policy.Limits) -> None:
    assert {k: v for k, v in policy.evaluate(prod, limits).items() if v} == {}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_variation_is_refused_by_its_rule(
    case: Case, prod: Stack, limits: policy.Limits
) -> None:
    verdicts = policy.evaluate(case.change(list(prod)), limits)
    refusals = verdicts[case.rule]
    assert refusals, f"{case.rule} let it pass; failing: {[k for k, v in verdicts.items() if v]}"
    if case.resource:
        assert any(f"'{case.resource}'" in message for message in refusals), refusals


# Near misses: changes a rule must let through, so that the refusals above are not a rule
# refusing everything of a type.
PASSES = [
    Case(
        "ssh-from-the-vpc",
        "no-world-ingress",
        "",
        nodes_sg_ingress(ingress("tcp", 22, 22, "10.42.0.0/16")),
    ),
    Case(
        "halves-on-different-ports",
        "no-world-ingress",
        "",
        nodes_sg_ingress(
            ingress("tcp", 22, 22, WORLD_HALVES[0]), ingress("tcp", 443, 443, WORLD_HALVES[1])
        ),
    ),
    Case(
        "halves-on-different-groups",
        "no-world-ingress",
        "",
        both(
            group("a", ingress("tcp", 22, 22, WORLD_HALVES[0])),
            group("b", ingress("tcp", 22, 22, WORLD_HALVES[1])),
        ),
    ),
    Case(
        "tls-only-deny-to-everyone",
        "s3-no-public-access",
        "",
        bucket_policy(
            "deny",
            {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::x/*"},
        ),
    ),
    Case("compliant-instance", "ebs-encrypted", "", instance("vm")),
    Case(
        "account-default-encryption",
        "ebs-encrypted",
        "",
        both(
            add(policy.EBS_DEFAULT_ENCRYPTION, "ebs-default", {"enabled": True}),
            add(policy.EBS_VOLUME, "scratch", {"size": 100, "tags": TAGS}),
        ),
    ),
    Case(
        "small-template-only-group",
        "node-cap",
        "",
        both(
            launch_template("small-lt", instanceType="g6e.2xlarge"),
            node_group_on("small-lt", "small-ng", 1),
        ),
    ),
    Case(
        "key-policy-star-with-condition",
        "kms-key-policies",
        "",
        edit(
            "gpuinfra-prod-key",
            setting(
                "policy",
                doc(
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": "*"},
                        "Action": "kms:Decrypt",
                        "Resource": "*",
                        "Condition": {"StringEquals": {"kms:CallerAccount": "123456789012"}},
                    }
                ),
            ),
        ),
    ),
    Case("protected-second-bucket", "buckets-protected", "", protected_bucket("second")),
    Case(
        "ecr-authorization-token",
        "iam-no-credentials-exposure",
        "",
        role_policy(
            "pull", {"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"}
        ),
    ),
    Case(
        "assume-a-named-role",
        "iam-no-credentials-exposure",
        "",
        role_policy(
            "chain",
            {
                "Effect": "Allow",
                "Action": "sts:AssumeRole",
                "Resource": "arn:aws:iam::123456789012:role/reader",
            },
        ),
    ),
    Case(
        "escalation-under-a-condition",
        "iam-no-privilege-escalation",
        "",
        role_policy(
            "tagged",
            {
                "Effect": "Allow",
                "Action": ["iam:PassRole", "ec2:RunInstances"],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:ResourceTag/team": "ml-platform"}},
            },
        ),
    ),
    Case(
        "escalation-taken-back-by-a-deny",
        "iam-no-privilege-escalation",
        "",
        role_policy(
            "denied",
            {"Effect": "Allow", "Action": ["iam:PassRole", "ec2:RunInstances"], "Resource": "*"},
            {"Effect": "Deny", "Action": "iam:PassRole", "Resource": "*"},
        ),
    ),
    Case(
        "objects-of-the-model-bucket",
        "iam-no-data-exfiltration",
        "",
        role_policy(
            "models",
            {
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::gpuinfra-prod-models/*",
            },
        ),
    ),
    Case(
        "cni-policy-on-its-own-pod-role",
        "node-role-no-cni-policy",
        "",
        add(
            "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            "cni-again",
            {
                "role": "gpuinfra-prod-vpc-cni-role",
                "policyArn": "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
            },
            role="gpuinfra-prod-vpc-cni-role",
        ),
    ),
    Case(
        "trust-a-named-role",
        "iam-trust-principals",
        "",
        trusting("ci", {"AWS": "arn:aws:iam::123456789012:role/ci"}),
    ),
]


@pytest.mark.parametrize("case", PASSES, ids=[c.id for c in PASSES])
def test_near_misses_pass_their_rule(case: Case, prod: Stack, limits: policy.Limits) -> None:
    verdicts = policy.evaluate(case.change(list(prod)), limits)
    assert verdicts[case.rule] == []
