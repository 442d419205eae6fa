"""GpuStorage: a closed, encrypted, versioned bucket and FSx for Lustre PERSISTENT_2."""

from __future__ import annotations

import json

from components.storage import FsxArgs, GpuStorage, GpuStorageArgs
from tests.unit.components.conftest import TAGS, refused


def test_bucket_blocks_public_access_and_is_encrypted_and_versioned(run) -> None:
    result = run(lambda: GpuStorage("st", GpuStorageArgs(tags=TAGS)))
    block = result.named("st-models").inputs
    assert result.named("st-models").type_ == "aws:s3/bucket:Bucket"
    assert result.of_type("aws:s3/bucket:Bucket")[0].inputs["tags"] == TAGS
    access = [
        r.inputs for r in result.of_type("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    ]
    assert access == [
        {
            "blockPublicAcls": True,
            "blockPublicPolicy": True,
            "bucket": "st-models-id",
            "ignorePublicAcls": True,
            "restrictPublicBuckets": True,
        }
    ]
    assert block["forceDestroy"] is False
    (sse,) = result.of_type(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )
    default = sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"]
    assert default["sseAlgorithm"] == "aws:kms"
    assert default["kmsMasterKeyId"].endswith(":st-key")
    (versioning,) = result.of_type("aws:s3/bucketVersioning:BucketVersioning")
    assert versioning.inputs["versioningConfiguration"] == {"status": "Enabled"}
    assert result.named("st-key").inputs["enableKeyRotation"] is True


def test_bucket_refuses_plain_http(run) -> None:
    result = run(lambda: GpuStorage("st", GpuStorageArgs(tags=TAGS)))
    (policy,) = result.of_type("aws:s3/bucketPolicy:BucketPolicy")
    (statement,) = json.loads(policy.inputs["policy"])["Statement"]
    assert statement["Effect"] == "Deny"
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert statement["Resource"] == ["arn:aws:s3:::st-models", "arn:aws:s3:::st-models/*"]


def test_fsx_persistent_2_in_the_given_subnet_linked_to_the_bucket(run) -> None:
    fsx = FsxArgs(subnet_id="subnet-a", security_group_ids=["sg-nodes"], storage_capacity_gib=4800)
    result = run(lambda: GpuStorage("st", GpuStorageArgs(tags=TAGS, fsx=fsx)))
    lustre = result.named("st-fsx").inputs
    assert lustre["deploymentType"] == "PERSISTENT_2"
    assert lustre["storageCapacity"] == 4800
    assert lustre["perUnitStorageThroughput"] == 125
    assert lustre["subnetIds"] == "subnet-a"
    assert lustre["kmsKeyId"].endswith(":st-key")
    link = result.named("st-fsx-models").inputs
    assert link["dataRepositoryPath"] == "s3://st-models/"
    assert link["fileSystemPath"] == "/models"


def test_no_fsx_unless_asked(run) -> None:
    result = run(lambda: GpuStorage("st", GpuStorageArgs(tags=TAGS)))
    assert not result.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")


def test_fsx_sizes_and_tiers_outside_persistent_2_are_refused(run) -> None:
    fsx = FsxArgs(
        subnet_id="s", security_group_ids=[], storage_capacity_gib=2000, throughput_per_tib=200
    )
    program = refused(lambda: GpuStorage("st", GpuStorageArgs(tags=TAGS, fsx=fsx)))
    assert run(program).resources == []
    assert [p.path for p in program.errors[0].problems] == [
        "args.fsx.storage_capacity_gib",
        "args.fsx.throughput_per_tib",
    ]


def test_an_export_without_the_bucket_link_is_refused(run) -> None:
    fsx = FsxArgs(
        subnet_id="s", security_group_ids=[], link_model_bucket=False, export_to_bucket=True
    )
    program = refused(lambda: GpuStorage("st", GpuStorageArgs(tags=TAGS, fsx=fsx)))
    assert run(program).resources == []
    assert [str(p) for p in program.errors[0].problems] == [
        "GpuStorage 'st': args.fsx.export_to_bucket: exportToBucket: true writes files back "
        "through the link to the model bucket, which linkModelBucket: false leaves out "
        "(allowed: linkModelBucket: true, or no export)"
    ]


def test_fsx_exports_nothing_to_the_serving_bucket_unless_asked(run) -> None:
    fsx = FsxArgs(subnet_id="subnet-a", security_group_ids=["sg-nodes"])
    result = run(lambda: GpuStorage("st", GpuStorageArgs(tags=TAGS, fsx=fsx)))
    link = result.named("st-fsx-models").inputs
    assert "autoExportPolicy" not in link["s3"]
    assert link["s3"]["autoImportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]
    asked = FsxArgs(subnet_id="subnet-a", security_group_ids=["sg-nodes"], export_to_bucket=True)
    result = run(lambda: GpuStorage("st", GpuStorageArgs(tags=TAGS, fsx=asked)))
    # A file deleted on Lustre never deletes a served model.
    assert result.named("st-fsx-models").inputs["s3"]["autoExportPolicy"] == {
        "events": ["NEW", "CHANGED"]
    }


def test_the_bucket_key_lets_the_file_systems_s3_role_read_through_s3(run) -> None:
    fsx = FsxArgs(subnet_id="subnet-a", security_group_ids=["sg-nodes"])
    result = run(lambda: GpuStorage("st", GpuStorageArgs(tags=TAGS, fsx=fsx)))
    (policy,) = result.of_type("aws:kms/keyPolicy:KeyPolicy")
    assert policy.inputs["keyId"] == "st-key-id"
    admin, fsx_use = json.loads(policy.inputs["policy"])["Statement"]
    assert admin["Principal"]["AWS"].endswith(":root")
    role = fsx_use["Principal"]["AWS"]
    assert role.endswith(
        "/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_st-fsx-id"
    )
    assert "*" not in role.split(":")[4]
    assert set(fsx_use["Action"]) == {"kms:Decrypt", "kms:DescribeKey"}
    assert fsx_use["Condition"]["StringEquals"]["kms:ViaService"].startswith("s3.")
    # Without a linked bucket, the key states KMS's default policy and names no FSx role.
    unlinked = FsxArgs(
        subnet_id="subnet-a", security_group_ids=["sg-nodes"], link_model_bucket=False
    )
    for fsx in (unlinked, None):
        result = run(lambda fsx=fsx: GpuStorage("st", GpuStorageArgs(tags=TAGS, fsx=fsx)))
        (stated,) = result.of_type("aws:kms/keyPolicy:KeyPolicy")
        (only,) = json.loads(stated.inputs["policy"])["Statement"]
        assert only["Principal"] == {"AWS": "arn:aws:iam::123456789012:root"}
