"""GpuNodePool: EFA sized from the instance type, placement, IMDSv2, labels and validation."""

from __future__ import annotations

import copy

import pytest

from components.node_pool import GpuNodePool, GpuNodePoolArgs
from gpuinfra.config import NodePoolConfig, load_stack, parse_stack, stack_path
from gpuinfra.errors import ConfigError
from gpuinfra.loading import load_yaml
from tests.unit.components.conftest import TAGS, refused

ZONES = {"us-east-1a": "subnet-a", "us-east-1b": "subnet-b"}


def pool_args(**overrides: object) -> GpuNodePoolArgs:
    values: dict[str, object] = {
        "name": "pool",
        "cluster_name": "gpu",
        "node_role_arn": "arn:aws:iam::123456789012:role/node",
        "region": "us-east-1",
        "instance_type": "g6.xlarge",
        "subnet_by_zone": ZONES,
        "security_group_ids": ["sg-nodes"],
        "tags": TAGS,
    }
    values.update(overrides)
    # Unchecked, as a caller's model_copy(update=...) would be: the component's own check is
    # what these tests see.
    return GpuNodePoolArgs.model_construct(**values)


def test_p5_pool_gets_32_efa_interfaces_and_a_cluster_placement_group(run) -> None:
    result = run(
        lambda: GpuNodePool(
            "train",
            pool_args(
                instance_type="p5.48xlarge",
                efa=True,
                availability_zone="us-east-1a",
                capacity_type="capacity-reservation",
                capacity_reservation_id="cr-0a1b2c3d4e5f67890",
                max_size=2,
            ),
        )
    )
    template = result.named("train-lt").inputs
    interfaces = template["networkInterfaces"]
    assert len(interfaces) == 32, "train-lt: p5.48xlarge has 32 EFA interfaces"
    assert {i["interfaceType"] for i in interfaces} == {"efa"}
    assert [i["networkCardIndex"] for i in interfaces] == list(range(32))
    assert interfaces[0]["deviceIndex"] == 0 and interfaces[1]["deviceIndex"] == 1
    assert all(i["securityGroups"] == ["sg-nodes"] for i in interfaces)
    assert "vpcSecurityGroupIds" not in template, "EFA interfaces carry the security groups"
    group = result.named("train-placement").inputs
    assert group["strategy"] == "cluster"
    assert template["placement"] == {
        "availabilityZone": "us-east-1a",
        "groupName": "train-placement",
    }
    target = template["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0a1b2c3d4e5f67890"}
    node_group = result.named("train-ng").inputs
    assert node_group["subnetIds"] == ["subnet-a"], "one zone for the placement group"
    assert node_group["labels"]["gpuinfra.dev/gpu-type"] == "h100"


def test_dev_pool_without_efa_gets_no_efa_and_no_placement_group(run) -> None:
    result = run(
        lambda: GpuNodePool("dev", pool_args(capacity_type="spot", min_size=0, max_size=2))
    )
    template = result.named("dev-lt").inputs
    assert "networkInterfaces" not in template
    assert "placement" not in template
    assert template["vpcSecurityGroupIds"] == ["sg-nodes"]
    assert not result.of_type("aws:ec2/placementGroup:PlacementGroup")
    node_group = result.named("dev-ng").inputs
    assert node_group["capacityType"] == "SPOT"
    assert node_group["scalingConfig"] == {"minSize": 0, "maxSize": 2, "desiredSize": 0}
    assert node_group["subnetIds"] == ["subnet-a", "subnet-b"]


def test_nodes_require_imdsv2_and_encrypt_their_root_volume(run) -> None:
    result = run(lambda: GpuNodePool("p", pool_args(root_volume_gib=300)))
    template = result.named("p-lt").inputs
    assert template["metadataOptions"]["httpTokens"] == "required"
    assert template["metadataOptions"]["httpPutResponseHopLimit"] == 1
    (root,) = template["blockDeviceMappings"]
    assert root["ebs"] == {
        "deleteOnTermination": "true",
        "encrypted": "true",
        "volumeSize": 300,
        "volumeType": "gp3",
    }
    assert result.named("p-ng").inputs["launchTemplate"]["id"] == "p-lt-id"


def test_nodes_carry_the_gpu_taint_and_the_labels_kueue_selects(run) -> None:
    result = run(
        lambda: GpuNodePool(
            "gpuinfra-staging-l40s",
            pool_args(instance_type="g6e.xlarge", name="l40s", labels={"tier": "serve"}),
        )
    )
    node_group = result.named("gpuinfra-staging-l40s-ng").inputs
    assert node_group["labels"] == {
        "gpuinfra.dev/gpu-type": "l40s",
        "gpuinfra.dev/pool": "l40s",
        "tier": "serve",
    }
    assert node_group["taints"] == [
        {"effect": "NO_SCHEDULE", "key": "nvidia.com/gpu", "value": "present"}
    ]


def test_labels_that_differ_in_punctuation_alone_each_get_their_autoscaler_tag(run) -> None:
    labels = {"example.com/a_b": "x", "example.com/a.b": "y", "example.com/A-b": "z"}
    result = run(
        lambda: GpuNodePool(
            "gpuinfra-dev-l4", pool_args(name="l4", labels=labels, autoscaler_cluster="gpu")
        )
    )
    tags = result.of_type("aws:autoscaling/tag:Tag")
    names = [t.name for t in tags]
    assert len(names) == len(set(names)), sorted(names)
    template = "k8s.io/cluster-autoscaler/node-template/label/"
    tagged = {t.inputs["tag"]["key"]: t.inputs["tag"]["value"] for t in tags}
    assert {f"{template}{key}": value for key, value in labels.items()}.items() <= tagged.items()


def test_eks_repairs_a_node_whose_gpu_fails(run) -> None:
    result = run(lambda: GpuNodePool("gpuinfra-dev-l4", pool_args()))
    node_group = result.named("gpuinfra-dev-l4-ng").inputs
    assert node_group["nodeRepairConfig"] == {"enabled": True}


def test_ami_release_is_pinned_when_given(run) -> None:
    result = run(lambda: GpuNodePool("p", pool_args(ami_release_version="1.34.2-20261110")))
    node_group = result.named("p-ng").inputs
    assert node_group["releaseVersion"] == "1.34.2-20261110"
    assert node_group["amiType"] == "AL2023_x86_64_NVIDIA"


def test_capacity_block_uses_the_capacity_block_market(run) -> None:
    result = run(
        lambda: GpuNodePool(
            "cb",
            pool_args(
                instance_type="p5.48xlarge",
                capacity_type="capacity-block",
                capacity_reservation_id="cr-0a1b2c3d4e5f67890",
                availability_zone="us-east-1b",
            ),
        )
    )
    assert result.named("cb-ng").inputs["capacityType"] == "CAPACITY_BLOCK"
    assert result.named("cb-lt").inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}


def test_every_problem_is_reported_at_once_before_anything_is_created(run) -> None:
    program = refused(
        lambda: GpuNodePool(
            "bad",
            pool_args(
                instance_type="g6.xlarg", availability_zone="us-east-1z", min_size=3, max_size=1
            ),
        )
    )
    result = run(program)
    assert result.resources == [], "a refused pool registers nothing"
    (error,) = program.errors
    assert [str(p) for p in error.problems] == [
        "GpuNodePool 'bad': args.instance_type: unknown GPU instance type 'g6.xlarg'; "
        "did you mean 'g6.xlarge'?",
        "GpuNodePool 'bad': args.min_size: minSize 3 is greater than maxSize 1",
        "GpuNodePool 'bad': args.availability_zone: 'us-east-1z' is not an availability zone "
        "of us-east-1 (allowed: 'us-east-1a', 'us-east-1b', 'us-east-1c', 'us-east-1d', "
        "'us-east-1e' or 'us-east-1f')",
        "GpuNodePool 'bad': args.availability_zone: 'us-east-1z' has no private subnet in the "
        "network (zones: us-east-1a, us-east-1b)",
    ]


def test_efa_on_a_type_without_it_is_refused(run) -> None:
    with pytest.raises(ConfigError) as caught:
        run(lambda: GpuNodePool("x", pool_args(efa=True, availability_zone="us-east-1a")))
    (problem,) = caught.value.problems
    assert problem.path == "args.efa"
    assert problem.message == (
        "g6.xlarge has no EFA interfaces; EFA needs one of g6.8xlarge, g6.12xlarge, "
        "g6.16xlarge, g6.24xlarge, g6.48xlarge"
    )


def test_the_labels_kueue_relies_on_cannot_be_overridden(run) -> None:
    program = refused(lambda: GpuNodePool("p", pool_args(labels={"gpuinfra.dev/gpu-type": "a100"})))
    assert run(program).resources == []
    (problem,) = program.errors[0].problems
    assert str(problem) == (
        "GpuNodePool 'p': args.labels.gpuinfra.dev/gpu-type: 'gpuinfra.dev/*' labels are set "
        "by gpuinfra"
    )


def test_labels_kubernetes_or_eks_would_refuse_are_refused_before_anything(run) -> None:
    labels = {"bad key!": "x", "tier": "x y", "example.com/" + "k" * 52: "x", "ok": "fine"}
    program = refused(lambda: GpuNodePool("p", pool_args(labels=labels)))
    assert run(program).resources == []
    assert [(p.path, p.message.split(" (")[0]) for p in program.errors[0].problems] == [
        ("args.labels.bad key!", "not a node label key"),
        ("args.labels.tier", "'x y' is not a node label value"),
        (
            "args.labels.example.com/" + "k" * 52,
            "a node label key takes at most 63 characters, prefix included",
        ),
    ]


def test_a_pool_from_the_stack_file_is_the_component_argument(run) -> None:
    pool = load_stack("prod").node_pools[0]
    # Validated: GpuNodePoolArgs is the stack file's pool model with the cluster's wiring.
    args = GpuNodePoolArgs(
        **pool.model_dump(),
        cluster_name="gpu",
        node_role_arn="arn:aws:iam::123456789012:role/node",
        region="us-east-1",
        subnet_by_zone=ZONES,
        security_group_ids=["sg-nodes"],
        tags=TAGS,
    )
    result = run(lambda: GpuNodePool("h100", args))
    node_group = result.named("h100-ng").inputs
    assert node_group["instanceTypes"] == [pool.instance_type]
    assert node_group["scalingConfig"] == {"minSize": 2, "maxSize": 2, "desiredSize": 2}
    assert node_group["labels"]["gpuinfra.dev/pool"] == pool.name
    (root,) = result.named("h100-lt").inputs["blockDeviceMappings"]
    assert root["ebs"]["volumeSize"] == pool.root_volume_gib


def _root_volume_bounds() -> tuple[int, int]:
    """The bounds as the model writes them (Field(ge=..., le=...)), the one place they live."""
    meta = NodePoolConfig.model_fields["root_volume_gib"].metadata
    (low,) = (m.ge for m in meta if hasattr(m, "ge"))
    (high,) = (m.le for m in meta if hasattr(m, "le"))
    return int(low), int(high)


def _stack_file_problem(key: str, value: object) -> str | None:
    document = copy.deepcopy(load_yaml(stack_path("dev")))
    document["config"]["gpuinfra:nodePools"][0][key] = value
    try:
        parse_stack(document, "stacks/Pulumi.dev.yaml")
    except ConfigError as exc:
        (problem,) = exc.problems
        assert problem.path == f"config.gpuinfra:nodePools[0].{key}"
        return problem.message
    return None


def _component_problem(run, field: str, value: object) -> str | None:
    try:
        run(lambda: GpuNodePool("p", pool_args(**{field: value})))
    except ConfigError as exc:
        (problem,) = exc.problems
        assert problem.path == f"args.{field}"
        return problem.message
    return None


def test_the_stack_file_and_the_component_hold_the_same_bounds_and_choices(run) -> None:
    low, high = _root_volume_bounds()
    for value in (low, high):
        assert _stack_file_problem("rootVolumeGib", value) is None
        assert _component_problem(run, "root_volume_gib", value) is None
    cases = [
        ("rootVolumeGib", "root_volume_gib", low - 1),
        ("rootVolumeGib", "root_volume_gib", high + 1),
    ]
    cases += [("capacityType", "capacity_type", "spto"), ("minSize", "min_size", -1)]
    for key, field, value in cases:
        in_file = _stack_file_problem(key, value)
        assert in_file, f"{key}: {value!r} passed the stack file"
        assert _component_problem(run, field, value) == in_file, f"{field}: {value!r}"
