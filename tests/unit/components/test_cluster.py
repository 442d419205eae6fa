"""GpuCluster: pinned version, restricted endpoint, least-privilege node role, pod identities."""

from __future__ import annotations

import json

from components.cluster import NODE_POLICIES, GpuCluster, GpuClusterArgs, ServiceAccountRef
from tests.unit.components.conftest import TAGS, refused


def cluster_args(**overrides: object) -> GpuClusterArgs:
    values: dict[str, object] = {
        "kubernetes_version": "1.34",
        "subnet_ids": ["subnet-a", "subnet-b"],
        "node_security_group_id": "sg-nodes",
        "tags": TAGS,
        "model_bucket_arn": "arn:aws:s3:::models",
        "model_kms_key_arn": "arn:aws:kms:us-east-1:123456789012:key/k",
    }
    values.update(overrides)
    return GpuClusterArgs(**values)  # type: ignore[arg-type]


def test_private_endpoint_pinned_version_and_encrypted_secrets_by_default(run) -> None:
    result = run(lambda: GpuCluster("c", cluster_args()))
    eks = result.named("c-eks").inputs
    assert eks["version"] == "1.34"
    assert eks["vpcConfig"]["endpointPublicAccess"] is False
    assert eks["vpcConfig"]["endpointPrivateAccess"] is True
    assert "publicAccessCidrs" not in eks["vpcConfig"]
    assert eks["encryptionConfig"]["resources"] == ["secrets"]
    assert eks["accessConfig"] == {
        "authenticationMode": "API",
        # Whoever runs Pulumi installs the add-ons, so it must be able to reach the API.
        "bootstrapClusterCreatorAdminPermissions": True,
    }


def test_public_endpoint_only_for_the_configured_cidrs(run) -> None:
    args = cluster_args(endpoint_public_access=True, public_access_cidrs=["203.0.113.0/24"])
    eks = run(lambda: GpuCluster("c", args)).named("c-eks").inputs
    assert eks["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_node_role_holds_only_what_a_node_needs(run) -> None:
    result = run(lambda: GpuCluster("c", cluster_args()))
    attached = sorted(
        r.inputs["policyArn"].rsplit("/", 1)[-1]
        for r in result.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.inputs["role"] == "c-node"
    )
    assert attached == sorted(NODE_POLICIES)
    assert "AmazonEKS_CNI_Policy" not in attached, "the VPC CNI has its own role"
    assert not [
        r
        for r in result.of_type("aws:iam/rolePolicy:RolePolicy")
        if r.inputs["role"] == "c-node-id"
    ], "S3 access goes through pod identity, never the node role"


def test_the_vpc_cni_manages_interfaces_with_its_own_pod_identity(run) -> None:
    result = run(lambda: GpuCluster("c", cluster_args()))
    addon = result.named("c-vpc-cni").inputs
    assert addon["addonName"] == "vpc-cni"
    (association,) = addon["podIdentityAssociations"]
    assert association["serviceAccount"] == "aws-node"
    assert association["roleArn"].endswith(":role/c-vpc-cni-role")
    (attachment,) = [
        r
        for r in result.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.inputs["role"] == "c-vpc-cni-role"
    ]
    assert attachment.inputs["policyArn"] == "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"
    trust = json.loads(result.named("c-vpc-cni-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Statement"][0]["Condition"] == {
        "ArnEquals": {"aws:SourceArn": "arn:aws:eks:us-east-1:123456789012:c-eks"}
    }


def test_the_secrets_key_states_its_policy(run) -> None:
    result = run(lambda: GpuCluster("c", cluster_args()))
    key_policy = result.named("c-secrets-policy").inputs
    assert key_policy["keyId"] == "c-secrets-id"
    (statement,) = json.loads(key_policy["policy"])["Statement"]
    assert statement["Principal"] == {"AWS": "arn:aws:iam::123456789012:root"}


def test_model_readers_get_read_only_bucket_access_through_pod_identity(run) -> None:
    args = cluster_args(model_readers=[ServiceAccountRef("triton", "triton")])
    result = run(lambda: GpuCluster("c", args))
    association = result.named("c-model-reader-triton-triton").inputs
    assert association["namespace"] == "triton"
    assert association["serviceAccount"] == "triton"
    policy = json.loads(result.named("c-model-reader-policy").inputs["policy"])
    actions = sorted(a for s in policy["Statement"] for a in s["Action"])
    assert actions == ["kms:Decrypt", "s3:GetObject", "s3:ListBucket"]
    trust = json.loads(result.named("c-model-reader-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    # Only this cluster's Pod Identity may assume it (the mock runtime's ARN for 'c-eks').
    assert trust["Statement"][0]["Condition"] == {
        "ArnEquals": {"aws:SourceArn": "arn:aws:eks:us-east-1:123456789012:c-eks"}
    }


def test_default_storage_class_is_encrypted_gp3(run) -> None:
    result = run(lambda: GpuCluster("c", cluster_args()))
    (storage_class,) = result.of_type("kubernetes:storage.k8s.io/v1:StorageClass")
    assert storage_class.inputs["provisioner"] == "ebs.csi.aws.com"
    assert storage_class.inputs["parameters"] == {"encrypted": "true", "type": "gp3"}
    annotations = storage_class.inputs["metadata"]["annotations"]
    assert annotations == {"storageclass.kubernetes.io/is-default-class": "true"}


def test_an_io2_storage_class_provisions_the_iops_asked_and_is_refused_without(run) -> None:
    result = run(lambda: GpuCluster("c", cluster_args(ebs_volume_type="io2", ebs_iops=4000)))
    (storage_class,) = result.of_type("kubernetes:storage.k8s.io/v1:StorageClass")
    assert storage_class.inputs["parameters"] == {
        "encrypted": "true",
        "iops": "4000",
        "type": "io2",
    }
    program = refused(lambda: GpuCluster("c", cluster_args(ebs_volume_type="io2")))
    assert run(program).resources == []
    assert [str(p) for p in program.errors[0].problems] == [
        "GpuCluster 'c': args.ebs_iops: ebsVolumeType io2 needs ebsIops, the IOPS each volume is "
        "provisioned with: EC2 creates no io2 volume without (allowed: 100 to 256000)"
    ]


def test_csi_drivers_installed_and_fsx_only_when_asked(run) -> None:
    addons = lambda result: sorted(  # noqa: E731
        r.inputs["addonName"] for r in result.of_type("aws:eks/addon:Addon")
    )
    assert addons(run(lambda: GpuCluster("c", cluster_args()))) == [
        "aws-ebs-csi-driver",
        "aws-mountpoint-s3-csi-driver",
        "eks-node-monitoring-agent",
        "eks-pod-identity-agent",
        "vpc-cni",
    ]
    with_fsx = run(lambda: GpuCluster("c", cluster_args(fsx_csi_driver=True)))
    assert "aws-fsx-csi-driver" in addons(with_fsx)


def test_an_endpoint_open_to_the_internet_is_refused(run) -> None:
    program = refused(
        lambda: GpuCluster(
            "c", cluster_args(endpoint_public_access=True, public_access_cidrs=["0.0.0.0/0"])
        )
    )
    assert run(program).resources == []
    assert [str(p) for p in program.errors[0].problems] == [
        "GpuCluster 'c': args.public_access_cidrs[0]: '0.0.0.0/0' opens the endpoint to the "
        "internet"
    ]


def test_an_endpoint_open_to_the_internet_in_two_halves_is_refused(run) -> None:
    halves = ["0.0.0.0/1", "128.0.0.0/1"]
    program = refused(
        lambda: GpuCluster(
            "c", cluster_args(endpoint_public_access=True, public_access_cidrs=halves)
        )
    )
    assert run(program).resources == []
    assert [str(p) for p in program.errors[0].problems] == [
        "GpuCluster 'c': args.public_access_cidrs: 0.0.0.0/1, 128.0.0.0/1 together open the "
        "endpoint to the internet (0.0.0.0/0)"
    ]


def test_system_nodes_for_controllers_run_a_cpu_type_with_imdsv2(run) -> None:
    result = run(lambda: GpuCluster("c", cluster_args(ami_release_version="1.34.2-20261110")))
    system = result.named("c-system-ng").inputs
    assert system["labels"] == {"gpuinfra.dev/pool": "system"}
    assert system["scalingConfig"] == {"desiredSize": 2, "maxSize": 2, "minSize": 2}
    assert system["releaseVersion"] == "1.34.2-20261110"
    template = result.named("c-system-lt").inputs
    assert template["metadataOptions"]["httpTokens"] == "required"
    assert template["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true"


def test_a_gpu_type_for_the_system_nodes_is_refused(run) -> None:
    program = refused(lambda: GpuCluster("c", cluster_args(system_instance_type="p5.48xlarge")))
    assert run(program).resources == []
    (problem,) = program.errors[0].problems
    assert problem.path == "args.system_instance_type"


def test_a_name_eks_refuses_is_refused_before_anything_is_made(run) -> None:
    for name in ("gpuinfra-dev-a.b", "gpuinfra-" + "x" * 92, "-gpuinfra"):
        program = refused(lambda name=name: GpuCluster("c", cluster_args(eks_name=name)))
        assert run(program).resources == [], name
        (problem,) = program.errors[0].problems
        assert problem.path == "args.eks_name", name
        assert "allowed: 1-100 letters, digits, '-' or '_'" in problem.message
    named = run(lambda: GpuCluster("c", cluster_args(eks_name="gpuinfra-" + "x" * 91)))
    assert named.named("c-eks").inputs["name"] == "gpuinfra-" + "x" * 91
