"""The whole program with each stack's real config file, and the stack-file error contract."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import catalog, versions
from gpuinfra.config import MAX_STACK_NAME, REQUIRED_TAGS, load_stack, max_pool_name
from gpuinfra.errors import ConfigError
from gpuinfra.review import stackrun
from gpuinfra.review.policy import Limits, evaluate, taggable
from gpuinfra.review.stackrun import StackRun, run_stack
from tests.conftest import ROOT, run_cli, run_main

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


@pytest.fixture(scope="module")
def runs() -> dict[str, StackRun]:
    return {env: run_stack(env) for env in ("dev", "staging", "prod")}


def pools(run: StackRun) -> dict[str, dict]:
    """The GPU pools by name (the CPU system group aside)."""
    groups = {r.inputs["labels"]["gpuinfra.dev/pool"]: r.inputs for r in run.of_type(NODE_GROUP)}
    return {name: inputs for name, inputs in groups.items() if name != "system"}


def template_of(run: StackRun, pool: str) -> dict:
    return run.named(f"gpuinfra-{run.env}-{pool}-lt").inputs


def count(run: StackRun, type_: str) -> int:
    return len(run.of_type(type_))


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_policy_pack_passes_on_every_resource(runs: dict[str, StackRun], env: str) -> None:
    verdicts = evaluate(runs[env].resources, Limits.for_stack(env))
    assert {rule: v for rule, v in verdicts.items() if v} == {}


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_every_taggable_resource_has_the_cost_tags(runs: dict[str, StackRun], env: str) -> None:
    tagged = [r for r in runs[env].resources if taggable(r.type_)]
    assert len(tagged) > 20, "the check must cover the network, storage, cluster and pools"
    for resource in tagged:
        tags = resource.inputs.get("tags") or {}
        assert all(tags.get(k) for k in REQUIRED_TAGS), f"{resource.name}: {tags}"
        assert tags["environment"] == env, resource.name


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_imdsv2_required_on_every_launch_template(runs: dict[str, StackRun], env: str) -> None:
    templates = runs[env].of_type(LAUNCH_TEMPLATE)
    assert len(templates) == len(runs[env].of_type(NODE_GROUP))
    for template in templates:
        assert template.inputs["metadataOptions"]["httpTokens"] == "required", template.name


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_controllers_get_untainted_cpu_nodes(runs: dict[str, StackRun], env: str) -> None:
    system = runs[env].named(f"gpuinfra-{env}-system-ng").inputs
    assert system["instanceTypes"] == ["m7i.large"]
    assert system["amiType"] == "AL2023_x86_64_STANDARD"
    assert "taints" not in system
    assert system.get("releaseVersion") == (
        None if env == "dev" else versions.pinned().eks_gpu_ami.version
    )


def test_dev_is_one_small_spot_pool_that_scales_to_zero(runs: dict[str, StackRun]) -> None:
    dev = runs["dev"]
    (pool,) = pools(dev).values()
    assert pool["instanceTypes"] == ["g6.xlarge"]
    assert pool["capacityType"] == "SPOT"
    assert pool["scalingConfig"]["minSize"] == 0 and pool["scalingConfig"]["desiredSize"] == 0
    assert "releaseVersion" not in pool, "dev follows the newest GPU AMI"
    assert pool["labels"]["gpuinfra.dev/gpu-type"] == "l4"
    assert "networkInterfaces" not in template_of(dev, "l4")
    assert count(dev, "aws:ec2/placementGroup:PlacementGroup") == 0
    assert count(dev, "aws:fsx/lustreFileSystem:LustreFileSystem") == 0
    assert count(dev, "aws:ec2/subnet:Subnet") == 4
    assert count(dev, "aws:ec2/natGateway:NatGateway") == 1
    eks = dev.of_type("aws:eks/cluster:Cluster")[0].inputs
    assert eks["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_staging_runs_on_demand_l40s_on_the_pinned_ami(runs: dict[str, StackRun]) -> None:
    staging = runs["staging"]
    (pool,) = pools(staging).values()
    assert pool["instanceTypes"] == ["g6e.xlarge"]
    assert pool["capacityType"] == "ON_DEMAND"
    assert pool["releaseVersion"] == versions.pinned().eks_gpu_ami.version
    assert pool["labels"]["gpuinfra.dev/gpu-type"] == "l40s"
    assert count(staging, "aws:ec2/flowLog:FlowLog") == 1


def test_prod_trains_on_reserved_p5_with_efa_placement_and_lustre(
    runs: dict[str, StackRun],
) -> None:
    prod = runs["prod"]
    h100 = pools(prod)["h100"]
    assert h100["instanceTypes"] == ["p5.48xlarge"]
    assert h100["releaseVersion"] == versions.pinned().eks_gpu_ami.version
    assert h100["subnetIds"] == ["gpuinfra-prod-private-us-east-1a-id"]
    template = template_of(prod, "h100")
    efa = catalog.instance_types()["p5.48xlarge"].efa_interfaces
    assert len(template["networkInterfaces"]) == efa == 32
    assert template["placement"]["availabilityZone"] == "us-east-1a"
    (group,) = prod.of_type("aws:ec2/placementGroup:PlacementGroup")
    assert group.inputs["strategy"] == "cluster"
    assert template["placement"]["groupName"] == group.name
    assert template["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0a1b2c3d4e5f67890"}
    }
    (lustre,) = prod.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    assert lustre.inputs["deploymentType"] == "PERSISTENT_2"
    assert lustre.inputs["subnetIds"] == "gpuinfra-prod-private-us-east-1a-id", "beside the GPUs"
    assert lustre.inputs["storageCapacity"] == 4800
    assert count(prod, "aws:ec2/natGateway:NatGateway") == 3
    eks = prod.of_type("aws:eks/cluster:Cluster")[0].inputs
    assert eks["vpcConfig"]["endpointPublicAccess"] is False
    assert sorted(pools(prod)) == ["h100", "serving"]
    assert "networkInterfaces" not in template_of(prod, "serving")


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_desired_size_is_left_to_the_autoscaler_only_where_it_runs(
    runs: dict[str, StackRun], env: str
) -> None:
    autoscaler = load_stack(env).cluster.autoscaler
    for group in runs[env].of_type("aws:eks/nodeGroup:NodeGroup"):
        if group.name.endswith("-system-ng"):
            continue
        left = "scalingConfig.desiredSize" in group.ignore_changes
        assert left == autoscaler, f"{env} {group.name}: ignore_changes {group.ignore_changes}"


def test_outputs_are_exported_and_the_kubeconfig_stays_secret(runs: dict[str, StackRun]) -> None:
    outputs = runs["prod"].outputs
    assert outputs["clusterName"] == "gpuinfra-prod"
    assert outputs["kubeconfig"] == stackrun.SECRET
    assert outputs["nodeGroups"] == {
        "h100": "gpuinfra-prod-h100-ng",
        "serving": "gpuinfra-prod-serving-ng",
    }
    assert outputs["fsxDnsName"].endswith(".fsx.example.invalid")


def test_runs_are_repeatable_in_one_process(runs: dict[str, StackRun]) -> None:
    again = run_stack("dev")
    assert again == runs["dev"]
    assert len(again.resources) == len({(r.type_, r.name) for r in again.resources})


def test_pulumi_yaml_documents_every_stack_key() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    documented = set(project["config"])
    used = {
        key.partition(":")[2]
        for env in ("dev", "staging", "prod")
        for key in yaml.safe_load((ROOT / "stacks" / f"Pulumi.{env}.yaml").read_text())["config"]
        if key.startswith("gpuinfra:")
    }
    from gpuinfra.config import _STACK_KEYS

    assert documented == set(_STACK_KEYS)
    assert used <= documented
    assert all(project["config"][key].get("description") for key in documented)


# --- a personal stack: names unique in the account and region follow the stack -------------

EKS_CLUSTER = "aws:eks/cluster:Cluster"


def with_personal_stack(tmp_path: Path) -> Path:
    """A copy of the repository's stack files with ``dev-alice``, a copy of ``dev``."""
    root = repo_copy(tmp_path)
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copy(root / "stacks" / "Pulumi.dev.yaml", root / "stacks" / "Pulumi.dev-alice.yaml")
    return root


def plan_of(
    stack: str, root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """``gpuinfra plan --stack <stack> --format json`` in the checkout at ``root``."""
    monkeypatch.setenv("GPUINFRA_ROOT", str(root))
    monkeypatch.chdir(root)
    versions.pinned.cache_clear()
    try:
        code, out, err = run_main(capsys, "plan", "--stack", stack, "--format", "json")
    finally:
        versions.pinned.cache_clear()
    assert code == 0, err
    plan: dict[str, Any] = json.loads(out)
    return plan


def cluster_names(plan: dict[str, Any]) -> dict[str, set[str]]:
    """Every place a plan names an EKS cluster, and the names it gives there."""
    found: dict[str, set[str]] = {}

    def add(where: str, name: str) -> None:
        found.setdefault(where, set()).add(name)

    for r in plan["resources"]:
        props = r["properties"]
        if r["type"] == EKS_CLUSTER:
            add("EKS cluster", props["name"])
        elif r["type"] == NODE_GROUP:
            add("node groups' cluster", props["clusterName"])
        elif r["type"] == "aws:ec2/subnet:Subnet":
            for key in props["tags"]:
                if key.startswith("kubernetes.io/cluster/"):
                    add("subnet discovery tags", key.removeprefix("kubernetes.io/cluster/"))
        elif r["type"] == "aws:autoscaling/tag:Tag" and props["tag"]["value"] == "owned":
            add("ASG tags", props["tag"]["key"].removeprefix("k8s.io/cluster-autoscaler/"))
        elif r["name"].endswith("-autoscaler-policy"):
            for statement in json.loads(props["policy"])["Statement"]:
                resource = statement["Resource"]
                if "nodegroup/" in resource:
                    add("autoscaler IAM node groups", resource.split("/")[1])
                elif "autoScalingGroupName/" in resource:
                    group = resource.rpartition("autoScalingGroupName/eks-")[2]
                    add("autoscaler IAM groups", group.removesuffix("-*"))
                    owner = next(iter(statement["Condition"]["StringEquals"]))
                    add("autoscaler IAM tag", owner.rpartition("/")[2])
        elif r["name"].endswith("-autoscaler-deployment"):
            (container,) = props["spec"]["template"]["spec"]["containers"]
            for arg in container["command"]:
                if arg.startswith("--node-group-auto-discovery="):
                    add("autoscaler discovery", arg.rpartition("/")[2])
    return found


def test_a_personal_stack_names_its_cluster_for_itself_and_dev_keeps_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dev-alice`` beside ``dev`` in one account and region: two EKS clusters, each with a name
    of its own that its subnets, node groups and autoscaler point at."""
    root = with_personal_stack(tmp_path)
    places = {
        "EKS cluster",
        "node groups' cluster",
        "subnet discovery tags",
        "ASG tags",
        "autoscaler IAM node groups",
        "autoscaler IAM groups",
        "autoscaler IAM tag",
        "autoscaler discovery",
    }
    for stack, cluster in (("dev-alice", "gpuinfra-dev-alice"), ("dev", "gpuinfra-dev")):
        plan = plan_of(stack, root, monkeypatch, capsys)
        assert cluster_names(plan) == {place: {cluster} for place in places}, stack
        # EKS names a node group's Auto Scaling group eks-<node group>-<id>, and Pulumi names
        # the node group after its logical name: the autoscaler may resize it only if that
        # name starts with the cluster's.
        groups = [r["name"] for r in plan["resources"] if r["type"] == NODE_GROUP]
        assert groups and all(g.startswith(f"{cluster}-") for g in groups), groups


def test_a_personal_stack_keeps_what_it_made_under_its_environment_s_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before its names followed the stack, ``dev-alice`` named its components ``gpuinfra-dev``;
    each top-level component answers to that name, so Pulumi moves its resources (their names
    start with their component's) rather than replacing them. ``dev`` needs no alias."""
    root = with_personal_stack(tmp_path)
    monkeypatch.chdir(root)
    alice, dev = run_stack("dev-alice", root=root), run_stack("dev", root=root)
    top = sorted((r.type_, r.name, r.aliases) for r in alice.resources if r.parent is None)
    assert top == [
        ("gpuinfra:addons:ClusterAddons", "gpuinfra-dev-alice", ("gpuinfra-dev",)),
        ("gpuinfra:cluster:GpuCluster", "gpuinfra-dev-alice", ("gpuinfra-dev",)),
        ("gpuinfra:network:GpuNetwork", "gpuinfra-dev-alice", ("gpuinfra-dev",)),
        ("gpuinfra:node_pool:GpuNodePool", "gpuinfra-dev-alice-l4", ("gpuinfra-dev-l4",)),
        ("gpuinfra:storage:GpuStorage", "gpuinfra-dev-alice", ("gpuinfra-dev",)),
    ]
    assert all(r.name.startswith(r.parent) for r in alice.resources if r.parent)
    assert [r.name for r in dev.resources if r.aliases] == []


# The names Pulumi gives what the program leaves unnamed, <logical name>-<7 random hex>, and the
# most each kind takes: IAM roles (botocore's iam roleNameType), node groups (pulumi-aws's
# NodeGroup.node_group_name), the bucket (pulumi-aws's Bucket.bucket, lowercased).
AUTONAMED = {
    "aws:iam/role:Role": 64,
    "aws:eks/nodeGroup:NodeGroup": 63,
    "aws:s3/bucket:Bucket": 63,
}
RANDOM_SUFFIX = len("-0123abc")


def test_every_name_aws_gives_the_longest_stack_and_pool_names_is_one_aws_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The longest stack name and the longest pool name it allows, with every optional role
    (the autoscaler's, Triton's model reader, the flow logs'): each autonamed resource's name
    fits. One character more is refused (tests/unit/cli/test_bad_input.py)."""
    root = with_personal_stack(tmp_path)
    longest = "dev-" + "x" * (MAX_STACK_NAME - len("dev-"))
    pool = "p" * max_pool_name(longest)
    text = (root / "stacks" / "Pulumi.dev.yaml").read_text()
    # A g6.2xlarge: Triton's pod asks for more CPU than a g6.xlarge has.
    text = text.replace("- name: l4", f"- name: {pool}").replace("g6.xlarge", "g6.2xlarge")
    text = text.replace(
        "    singleNatGateway: true\n", "    singleNatGateway: true\n    flowLogs: true\n"
    )
    triton = (
        "    triton:\n      enabled: true\n      gpuType: l4\n      modelRepository:\n"
        "        s3: s3://models-dev/triton\n        region: us-east-1\n"
        "        serviceAccount: triton-models\n"
        "      models:\n        - {name: resnet50, backend: onnxruntime, maxBatchSize: 8}\n"
    )
    (root / "stacks" / f"Pulumi.{longest}.yaml").write_text(text + triton)
    plan = plan_of(longest, root, monkeypatch, capsys)
    names = {r["name"]: kind for r in plan["resources"] if (kind := r["type"]) in AUTONAMED}
    assert {f"gpuinfra-{longest}-model-reader-role", f"gpuinfra-{longest}-{pool}-ng"} <= set(names)
    too_long = {
        name: len(name) + RANDOM_SUFFIX
        for name, kind in names.items()
        if len(name) + RANDOM_SUFFIX > AUTONAMED[kind]
    }
    assert too_long == {}
    buckets = [name for name, kind in names.items() if kind == "aws:s3/bucket:Bucket"]
    assert buckets and all(re.fullmatch(r"[a-z0-9][a-z0-9-]*", b.lower()) for b in buckets)


# --- bad stack files: one line per problem, exit 2, nothing registered ---------------------


def repo_copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "stacks").mkdir(parents=True)
    shutil.copy(ROOT / "versions.yaml", root / "versions.yaml")
    (root / "policies").mkdir()
    shutil.copy(ROOT / "policies" / "limits.yaml", root / "policies" / "limits.yaml")
    for name in ("Pulumi.dev.yaml", "__main__.py"):
        shutil.copy(ROOT / "stacks" / name, root / "stacks" / name)
    return root


def edit_dev(root: Path, old: str, new: str) -> None:
    path = root / "stacks" / "Pulumi.dev.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


BAD_STACKS = {
    "unknown key": (
        "  gpuinfra:nodePools:\n",
        "  gpuinfra:nodePool: []\n  gpuinfra:nodePools:\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePool: unknown key 'nodePool'; "
            "did you mean 'nodePools'?"
        ],
    ),
    "unknown instance type": (
        "instanceType: g6.xlarge",
        "instanceType: g6.xlarg",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].instanceType: unknown GPU "
            "instance type 'g6.xlarg'; did you mean 'g6.xlarge'?"
        ],
    ),
    "EFA on g6.xlarge": (
        "      capacityType: spot\n",
        "      capacityType: spot\n      efa: true\n      availabilityZone: us-east-1a\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].efa: g6.xlarge has no EFA "
            "interfaces; EFA needs one of g6.8xlarge, g6.12xlarge, g6.16xlarge, g6.24xlarge, "
            "g6.48xlarge"
        ],
    ),
    "Kueue flavor without a pool": (
        "gpuType: l4,",
        "gpuType: h100,",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:addons.kueue.flavors[0].gpuType: no node "
            "pool has h100 GPUs (pools have 'l4')"
        ],
    ),
    "pool zone outside the network": (
        "      capacityType: spot\n",
        "      capacityType: spot\n      availabilityZone: us-east-1c\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].availabilityZone: 'us-east-1c' "
            "is not one of network.availabilityZones, so the pool has no subnet there (allowed: "
            "'us-east-1a' or 'us-east-1b')"
        ],
    ),
    "node label key": (
        "      rootVolumeGib: 150\n",
        '      rootVolumeGib: 150\n      labels: {"bad key!": x}\n',
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].labels.bad key!: not a node "
            "label key (allowed: an optional lowercase DNS prefix and '/', then 1-63 letters, "
            "digits, '-', '_' and '.', starting and ending with a letter or digit)"
        ],
    ),
    "node label value": (
        "      rootVolumeGib: 150\n",
        '      rootVolumeGib: 150\n      labels: {example.com/tier: "x y"}\n',
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].labels.example.com/tier: 'x y' "
            "is not a node label value (allowed: 1-63 letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit)"
        ],
    ),
    "MIG layout label without the layout": (
        "      rootVolumeGib: 150\n",
        "      rootVolumeGib: 150\n      labels: {nvidia.com/mig.config: inference}\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].labels.nvidia.com/mig.config: "
            "'inference' is not a MIG layout of addons.gpuOperator.migProfiles (allowed: "
            "'all-disabled')"
        ],
    ),
    "Kueue team in a namespace every cluster shares": (
        "teams: [research]",
        "teams: [research, kube-system]",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:addons.kueue.teams[1]: 'kube-system' is the "
            "cluster's own namespace, not a team's (not allowed: 'default' or a name starting "
            "with 'kube-', the prefix Kubernetes keeps for its own namespaces); give the team a "
            "namespace of its own"
        ],
    ),
    "Kueue team in a kube- namespace": (
        "teams: [research]",
        "teams: [kube-research, research]",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:addons.kueue.teams[0]: 'kube-research' is "
            "the cluster's own namespace, not a team's (not allowed: 'default' or a name "
            "starting with 'kube-', the prefix Kubernetes keeps for its own namespaces); give "
            "the team a namespace of its own"
        ],
    ),
    "Kueue team in an add-on's namespace": (
        "teams: [research]",
        "teams: [gpu-operator, research]",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:addons.kueue.teams[0]: 'gpu-operator' is "
            "the namespace of the GPU Operator add-on; give the team a namespace of its own"
        ],
    ),
    "API endpoint open to the internet in two halves": (
        "publicAccessCidrs: [203.0.113.0/24]",
        "publicAccessCidrs: [0.0.0.0/1, 128.0.0.0/1]",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:cluster.publicAccessCidrs: '0.0.0.0/1', "
            "'128.0.0.0/1' open the API endpoint to the whole internet (0.0.0.0/0); list your "
            "CIDRs"
        ],
    ),
    "policy limits in the stack file": (
        "  gpuinfra:addons:\n",
        "  gpuinfra:policy: {maxNodes: 100}\n  gpuinfra:addons:\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:policy: the policy pack's limits live in "
            "policies/limits.yaml, not in the stack file they police"
        ],
    ),
    "system node size EC2 does not offer": (
        "    autoscaler: true\n",
        "    autoscaler: true\n    systemInstanceType: m6i.metal-48xl\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:cluster.systemInstanceType: "
            "'m6i.metal-48xl' is not a size EC2 offers in m6i (allowed: large, xlarge, 2xlarge, "
            "4xlarge, 8xlarge, 12xlarge, 16xlarge, 24xlarge, 32xlarge, metal)"
        ],
    ),
    "FSx export without the bucket link": (
        "    ebsVolumeType: gp3\n",
        "    ebsVolumeType: gp3\n    fsx: {enabled: true, linkModelBucket: false, "
        "exportToBucket: true}\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:storage.fsx.exportToBucket: exportToBucket: "
            "true writes files back through the link to the model bucket, which linkModelBucket: "
            "false leaves out (allowed: linkModelBucket: true, or no export)"
        ],
    ),
    "subnet smaller than AWS takes": (
        "    singleNatGateway: true\n",
        "    singleNatGateway: true\n    privateSubnetCidrs: [10.40.0.0/19, 10.40.32.0/29]\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:network.privateSubnetCidrs[1]: "
            "'10.40.32.0/29' is smaller than the smallest subnet AWS takes (allowed: /16 to /28, "
            "16 addresses or more)"
        ],
    ),
    "private subnet over the carved public ones": (
        "    singleNatGateway: true\n",
        "    singleNatGateway: true\n    privateSubnetCidrs: [10.40.0.0/19, 10.40.228.0/22]\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:network.privateSubnetCidrs[1]: "
            "'10.40.228.0/22' overlaps the public subnet '10.40.228.0/22', which is carved from "
            "the VPC block since publicSubnetCidrs is not set (allowed: a block clear of it, or "
            "publicSubnetCidrs set too)"
        ],
    ),
    "two pools of one name": (
        "  gpuinfra:storage:\n",
        "    - {name: l4, instanceType: g6.xlarge}\n  gpuinfra:storage:\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[1].name: 'l4' is the name of "
            "nodePools[0] too (allowed: a name of its own: the pool's node group and "
            "gpuinfra.dev/pool label are named for it)"
        ],
    ),
    "pool name ending in '-'": (
        "name: l4",
        "name: l4-",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].name: 'l4-' is not a pool name "
            "(allowed: 2-40 lowercase letters, digits and '-', starting with a letter and ending "
            "with a letter or digit)"
        ],
    ),
    "a long unknown key": (
        "    costCenter: cc-1042\n",
        f"    costCenter: cc-1042\n    {'x' * 400}: 1\n",
        [
            f"stacks/Pulumi.dev.yaml: config.gpuinfra:tags.{'x' * 42} ... {'x' * 32}: unknown key "
            f"'{'x' * 23} ... {'x' * 12}' (allowed: 'costCenter', 'project' or 'team')"
        ],
    ),
    "a long unknown instance type": (
        "instanceType: g6.xlarge",
        f"instanceType: g6.{'x' * 400}",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].instanceType: unknown GPU "
            f"instance type 'g6.{'x' * 20} ... {'x' * 12}' (allowed in g6: 'g6.12xlarge', "
            "'g6.16xlarge', 'g6.24xlarge', 'g6.2xlarge', 'g6.48xlarge', 'g6.4xlarge', "
            "'g6.8xlarge' or 'g6.xlarge')"
        ],
    ),
    "io2 volumes without their IOPS": (
        "ebsVolumeType: gp3",
        "ebsVolumeType: io2",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:storage.ebsIops: ebsVolumeType io2 needs "
            "ebsIops, the IOPS each volume is provisioned with: EC2 creates no io2 volume without "
            "(allowed: 100 to 256000)"
        ],
    ),
    "misspelled top-level key": (
        "config:\n",
        "confg:\n  aws:region: us-east-1\nconfig:\n",
        [
            "stacks/Pulumi.dev.yaml: confg: unknown key 'confg'; did you mean 'config'? (Pulumi "
            "would ignore it and what it holds)"
        ],
    ),
    "misspelled secrets provider": (
        "config:\n",
        "secretprovider: awskms://alias/x\nconfig:\n",
        [
            "stacks/Pulumi.dev.yaml: secretprovider: unknown key 'secretprovider'; did you mean "
            "'secretsprovider'? (Pulumi would ignore it and what it holds)"
        ],
    ),
    "a metal GPU type the catalog lacks": (
        "instanceType: g6.xlarge",
        "instanceType: p5.metal",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].instanceType: unknown GPU "
            "instance type 'p5.metal' (allowed in p5: 'p5.48xlarge')"
        ],
    ),
    "overlapping CIDRs": (
        "    singleNatGateway: true\n",
        "    singleNatGateway: true\n    privateSubnetCidrs: [10.40.0.0/19, 10.40.16.0/20]\n",
        [
            "stacks/Pulumi.dev.yaml: config.gpuinfra:network.privateSubnetCidrs[1]: "
            "'10.40.16.0/20' overlaps the private subnet '10.40.0.0/19'"
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_STACKS))
def test_bad_stack_file_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    old, new, lines = BAD_STACKS[case]
    root = repo_copy(tmp_path)
    edit_dev(root, old, new)
    result = run_cli("config", "check", "--stack", "dev", root=root, cwd=root)
    assert result.code == 2, result
    assert "Traceback" not in result.stdout + result.stderr
    assert [ln for ln in result.stderr.splitlines() if ln.startswith("error:")] == [
        f"error: {line}" for line in lines
    ]


@pytest.mark.parametrize("case", sorted(BAD_STACKS))
def test_bad_stack_file_stops_run_stack_before_any_resource(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new, lines = BAD_STACKS[case]
    root = repo_copy(tmp_path)
    edit_dev(root, old, new)
    monkeypatch.chdir(root)
    started: list[str] = []
    monkeypatch.setattr(stackrun, "run_program", lambda *a, **k: started.append("run"))
    with pytest.raises(ConfigError) as caught:
        run_stack("dev", root=root)
    assert [str(p) for p in caught.value.problems] == lines
    assert started == [], "the program must not start"


def test_a_metal_system_node_type_is_sized_like_the_others(tmp_path: Path) -> None:
    root = repo_copy(tmp_path)
    edit_dev(
        root,
        "    autoscaler: true\n",
        "    autoscaler: true\n    systemInstanceType: m7i.metal-48xl\n",
    )
    result = run_cli("config", "check", "--stack", "dev", root=root, cwd=root)
    assert (result.code, result.stdout.strip()) == (0, "stack dev: valid (1 node pools)"), result


def test_pools_whose_max_sizes_add_up_over_max_nodes_are_refused(tmp_path: Path) -> None:
    root = repo_copy(tmp_path)
    second = "    - name: l4b\n      instanceType: g6.xlarge\n      maxSize: 3\n"
    edit_dev(root, "maxSize: 2", "maxSize: 3")
    edit_dev(root, "  gpuinfra:storage:\n", second + "  gpuinfra:storage:\n")
    line = (
        "error: stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools: the pools' maxSize add up to "
        "6, over dev's maxNodes 4 in policies/limits.yaml (allowed: a sum of at most 4)"
    )
    for command in (("config", "check"), ("cost",)):
        result = run_cli(*command, "--stack", "dev", root=root, cwd=root)
        assert (result.code, result.stdout, result.stderr.splitlines()) == (2, "", [line])


def test_a_stack_argument_that_is_no_stack_name_is_told_the_readme_s_rule() -> None:
    result = run_cli("config", "check", "--stack", "dev/x")
    assert (result.code, result.stdout, result.stderr.splitlines()) == (
        2,
        "",
        [
            "error: --stack 'dev/x': not a stack name (allowed: 1-29 letters, digits or '-', "
            "starting with a letter or digit: AWS names follow gpuinfra-<stack>)"
        ],
    )
    readme = (ROOT / "README.md").read_text()
    assert "| a stack's name (`Pulumi.<stack>.yaml`) | 1-29 letters, digits or `-`, " in readme


@pytest.mark.parametrize("command", [("cost",), ("config", "check"), ("plan",), ("diff",)])
def test_stack_help_names_personal_stacks(command: tuple[str, ...]) -> None:
    result = run_cli(*command, "--help")
    assert result.code == 0, result
    assert "<environment>-<suffix>" in result.stdout


def test_a_bad_config_object_is_refused_like_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_stack("dev")
    network = cfg.network.model_copy(update={"availability_zones": ["us-east-1a", "us-west-2a"]})
    started: list[str] = []
    monkeypatch.setattr(stackrun, "run_program", lambda *a, **k: started.append("run"))
    with pytest.raises(ConfigError) as caught:
        run_stack("dev", config=cfg.model_copy(update={"network": network}))
    (problem,) = caught.value.problems
    assert problem.path == "config.gpuinfra:network.availabilityZones[1]"
    assert started == []


def test_monthly_on_demand_cost_uses_the_dated_catalog_price() -> None:
    # p5.48xlarge at 55.04 USD/h (catalog of 2026-07-20), two nodes, 730 hours.
    assert catalog.monthly_on_demand_usd("p5.48xlarge", 2) == 80_358.4
    assert catalog.monthly_on_demand_usd("g6.xlarge", 1, hours=24) == 19.32
    assert catalog.monthly_on_demand_usd("p5e.48xlarge", 1) is None, "no price in the snapshot"
    assert catalog.monthly_on_demand_usd("x9.huge", 1) is None


def test_a_region_outside_the_catalog_is_named_once_at_the_region() -> None:
    cfg = load_stack("prod").model_copy(update={"region": "sa-east-1"})
    with pytest.raises(ConfigError) as caught:
        run_stack("prod", config=cfg)
    (problem,) = caught.value.problems
    assert problem.path == "config.aws:region"
    assert problem.message.startswith("region 'sa-east-1' is not in the catalog (known: ")


PROD_SECRET_CONFIG = ("alerting-pagerduty-routing-key", "alerting-slack-webhook-url")


def test_prod_plans_its_alerting_secret_from_secret_config(runs: dict[str, StackRun]) -> None:
    prod = runs["prod"]
    (secret,) = [
        r
        for r in prod.of_type("kubernetes:core/v1:Secret")
        if r.inputs["metadata"]["name"] == "alerting"
    ]
    assert secret.inputs["metadata"]["namespace"] == "monitoring"
    assert secret.inputs["stringData"] == stackrun.SECRET
    # Alertmanager mounts it; the release waits for it.
    (release,) = [
        r for r in prod.of_type("kubernetes:helm.sh/v3:Release") if "prometheus" in r.name
    ]
    assert secret.name in release.dependencies
    values = release.inputs["values"]["alertmanager"]
    assert values["alertmanagerSpec"]["secrets"] == ["alerting"]


def test_prod_hands_its_alerting_credentials_to_the_secret_as_pulumi_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each credential reaches the alerting Secret as a Pulumi secret (``require_secret``).

    The Kubernetes SDK marks a Secret's whole data secret whatever it is given, so the plan
    shows ``[secret]`` either way; a value read with ``require`` would be plain in the
    program, and in the state of anything else that read it. The Secret's inputs are looked
    at as the program passes them, before the SDK wraps them.
    """
    import pulumi
    import pulumi_kubernetes as k8s
    from pulumi.runtime.sync_await import _sync_await

    from gpuinfra import addons

    given: dict[str, dict[str, Any]] = {}

    class Seen(k8s.core.v1.Secret):
        def __init__(self, resource_name: str, *args: Any, **kwargs: Any) -> None:
            given[kwargs["metadata"]["name"]] = dict(kwargs.get("string_data") or {})
            super().__init__(resource_name, *args, **kwargs)

    monkeypatch.setattr(k8s.core.v1, "Secret", Seen)
    run_stack("prod")
    renders = addons.render_all(load_stack("prod").addons, versions=versions.pinned())
    (alerting,) = [s for r in renders for s in r.secrets if s.name == "alerting"]
    assert sorted(alerting.from_config.values()) == sorted(PROD_SECRET_CONFIG)
    for key in alerting.from_config:
        value = given["alerting"][key]
        assert isinstance(value, pulumi.Output), f"{key}: {value!r} is not a Pulumi secret"
        assert _sync_await(value.is_secret()), f"{key}: a Pulumi output, but not secret"


def test_the_offline_plan_stands_in_for_unset_secret_config_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pulumi

    from gpuinfra import addons

    renders = addons.render_all(load_stack("prod").addons, versions=versions.pinned())
    monkeypatch.delenv("PULUMI_CONFIG", raising=False)
    monkeypatch.setenv("PULUMI_CONFIG_GPUINFRA_ALERTING_SLACK_WEBHOOK_URL", "https://set.invalid/")
    with stackrun._secret_config_stand_ins(renders):
        config = pulumi.Config("gpuinfra")
        assert config.get(PROD_SECRET_CONFIG[0]) == stackrun.SECRET_STAND_IN
        assert config.get(PROD_SECRET_CONFIG[1]) == "https://set.invalid/"
    # Nothing is left behind for the next run (or a real one in the same process).
    assert pulumi.Config("gpuinfra").get(PROD_SECRET_CONFIG[0]) is None


def test_secret_config_in_the_stack_file_is_accepted_only_where_a_secret_reads_it(
    tmp_path: Path,
) -> None:
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    stack = tmp_path / "stacks" / "Pulumi.prod.yaml"
    text = stack.read_text()
    set_ = "".join(f"  gpuinfra:{k}:\n    secure: v1:abc=\n" for k in PROD_SECRET_CONFIG)
    stack.write_text(text + set_)
    assert load_stack("prod", tmp_path).addons.prometheus_stack.alerting.secret == "alerting"
    stack.write_text(text + "  gpuinfra:alerting-pagerduty-routing:\n    secure: v1:abc=\n")
    with pytest.raises(ConfigError) as refused:
        load_stack("prod", tmp_path)
    (line,) = refused.value.lines()
    assert "config.gpuinfra:alerting-pagerduty-routing: secret config" in line
    assert "read by no Secret" in line and "alerting-pagerduty-routing-key" in line


def test_a_secret_config_value_set_in_plain_text_is_refused_naming_the_command(
    tmp_path: Path,
) -> None:
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    stack = tmp_path / "stacks" / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text() + "  gpuinfra:alerting-pagerduty-routing-key: R0UTE\n")
    with pytest.raises(ConfigError) as refused:
        load_stack("prod", tmp_path)
    (line,) = refused.value.lines()
    assert "unknown key 'alerting-pagerduty-routing-key'" in line
    assert line.endswith(
        "(a Secret's value is set with pulumi config set --secret "
        "gpuinfra:alerting-pagerduty-routing-key)"
    )
    assert "R0UTE" not in line
