"""GpuStorage: the model repository bucket and, optionally, FSx for Lustre beside the GPUs.

The bucket is versioned, encrypted with a customer-managed key, closed to the public and to
plain HTTP. FSx for Lustre (PERSISTENT_2) sits in the GPU nodes' zone and can present the bucket
as a file system through a data repository association, so training reads at Lustre speed.
EBS defaults (gp3, encrypted) are a Kubernetes StorageClass, which GpuCluster creates next to
the EBS CSI driver it installs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from components.validation import raise_findings, require_tags
from gpuinfra.config import Finding, fsx_export_problem

FSX_THROUGHPUTS = (125, 250, 500, 1000)


@dataclass
class FsxArgs:
    subnet_id: pulumi.Input[str]
    security_group_ids: Sequence[pulumi.Input[str]]
    storage_capacity_gib: int = 1200
    throughput_per_tib: int = 125
    link_model_bucket: bool = True
    mount_path: str = "/models"
    # Write files created or changed under the mount back into the bucket Triton serves from.
    # Off by default: any writer of the file system would then publish models. Deletions are
    # never exported, so removing a file on Lustre never deletes a served model.
    export_to_bucket: bool = False


@dataclass
class GpuStorageArgs:
    tags: dict[str, str]
    versioning: bool = True
    fsx: FsxArgs | None = None
    # Deleting a bucket that still holds models needs an explicit change here first.
    force_destroy: bool = False


class GpuStorage(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    kms_key_arn: pulumi.Output[str]
    fsx_id: pulumi.Output[str] | None
    fsx_dns_name: pulumi.Output[str] | None
    fsx_mount_name: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: GpuStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        raise_findings("GpuStorage", name, _findings(args))
        super().__init__("gpuinfra:storage:GpuStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)

        key = aws.kms.Key(
            f"{name}-key",
            description=f"{name}: model repository and FSx encryption",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=tags,
            opts=child,
        )
        bucket = aws.s3.Bucket(
            f"{name}-models", force_destroy=args.force_destroy, tags=tags, opts=child
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-models-ownership",
            bucket=bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child,
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-models-public-access",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-models-encryption",
            bucket=bucket.id,
            rules=[
                {
                    "apply_server_side_encryption_by_default": {
                        "sse_algorithm": "aws:kms",
                        "kms_master_key_id": key.arn,
                    },
                    # One data key per bucket rather than per object: far fewer KMS calls
                    # when thousands of model shards are read at start-up.
                    "bucket_key_enabled": True,
                }
            ],
            opts=child,
        )
        aws.s3.BucketVersioning(
            f"{name}-models-versioning",
            bucket=bucket.id,
            versioning_configuration={"status": "Enabled" if args.versioning else "Suspended"},
            opts=child,
        )
        aws.s3.BucketPolicy(
            f"{name}-models-tls-only",
            bucket=bucket.id,
            policy=bucket.arn.apply(_tls_only_policy),
            opts=child,
        )

        self.fsx_id = self.fsx_dns_name = self.fsx_mount_name = None
        # The key's policy is stated, never left to KMS's default (CKV2_AWS_64).
        policy: pulumi.Output[str] = key.arn.apply(key_policy)
        policy_opts = child
        if args.fsx is not None:
            fsx = aws.fsx.LustreFileSystem(
                f"{name}-fsx",
                deployment_type="PERSISTENT_2",
                storage_type="SSD",
                storage_capacity=args.fsx.storage_capacity_gib,
                per_unit_storage_throughput=args.fsx.throughput_per_tib,
                subnet_ids=args.fsx.subnet_id,
                security_group_ids=args.fsx.security_group_ids,
                kms_key_id=key.arn,
                data_compression_type="LZ4",
                copy_tags_to_backups=True,
                tags=tags,
                opts=child,
            )
            if args.fsx.link_model_bucket:
                export = args.fsx.export_to_bucket
                s3 = aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                        events=["NEW", "CHANGED", "DELETED"]
                    ),
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(
                        events=["NEW", "CHANGED"]
                    )
                    if export
                    else None,
                )
                link = aws.fsx.DataRepositoryAssociation(
                    f"{name}-fsx-models",
                    file_system_id=fsx.id,
                    file_system_path=args.fsx.mount_path,
                    data_repository_path=bucket.bucket.apply(lambda b: f"s3://{b}/"),
                    batch_import_meta_data_on_create=True,
                    s3=s3,
                    tags=tags,
                    opts=child,
                )
                # The association reads (and with export, writes) the bucket's objects through
                # a service-linked role made for this file system, which the bucket's key must
                # name: KMS checks that a principal exists, so the policy follows the link.
                policy = pulumi.Output.all(key.arn, fsx.id).apply(
                    lambda a: key_policy(a[0], a[1], export)
                )
                policy_opts = pulumi.ResourceOptions(parent=self, depends_on=[link])
            self.fsx_id = fsx.id
            self.fsx_dns_name = fsx.dns_name
            self.fsx_mount_name = fsx.mount_name

        aws.kms.KeyPolicy(f"{name}-key-policy", key_id=key.id, policy=policy, opts=policy_opts)

        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.arn
        self.kms_key_arn = key.arn
        self.register_outputs(
            {
                "bucket_name": self.bucket_name,
                "bucket_arn": self.bucket_arn,
                "kms_key_arn": self.kms_key_arn,
                "fsx_id": self.fsx_id,
            }
        )


def _findings(args: GpuStorageArgs) -> list[Finding]:
    found = require_tags(args.tags)
    if args.fsx is not None:
        capacity = args.fsx.storage_capacity_gib
        if capacity != 1200 and (capacity < 2400 or capacity % 2400):
            found.append(
                (
                    ("fsx", "storage_capacity_gib"),
                    f"{capacity} GiB: PERSISTENT_2 takes 1200 GiB or a multiple of 2400 GiB",
                )
            )
        if why := fsx_export_problem(args.fsx.link_model_bucket, args.fsx.export_to_bucket):
            found.append((("fsx", "export_to_bucket"), why))
        if args.fsx.throughput_per_tib not in FSX_THROUGHPUTS:
            found.append(
                (
                    ("fsx", "throughput_per_tib"),
                    f"{args.fsx.throughput_per_tib} MB/s/TiB is not a PERSISTENT_2 tier "
                    f"(allowed: {', '.join(map(str, FSX_THROUGHPUTS))})",
                )
            )
    return found


def key_policy(key_arn: str, file_system_id: str | None = None, export: bool = False) -> str:
    """A key's policy: the account administers it through IAM (KMS's default statement), and
    with a file system, the file system's S3 service-linked role uses it, through S3 only."""
    _, partition, _, region, account = key_arn.split(":")[:5]
    statements: list[dict[str, Any]] = [
        {
            "Sid": "AccountAdministersThroughIam",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
    if file_system_id is None:
        return json.dumps({"Version": "2012-10-17", "Statement": statements})
    role = (
        f"arn:{partition}:iam::{account}:role/aws-service-role/"
        f"s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_{file_system_id}"
    )
    actions = ["kms:Decrypt", "kms:DescribeKey"]
    if export:
        actions += ["kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"]
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                *statements,
                {
                    "Sid": "FsxDataRepositoryReadsTheBucket",
                    "Effect": "Allow",
                    "Principal": {"AWS": role},
                    "Action": actions,
                    "Resource": "*",
                    "Condition": {
                        "StringEquals": {
                            "kms:ViaService": f"s3.{region}.amazonaws.com",
                            "kms:CallerAccount": account,
                        }
                    },
                },
            ],
        }
    )


def _tls_only_policy(bucket_arn: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyPlainHttp",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [bucket_arn, f"{bucket_arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )
