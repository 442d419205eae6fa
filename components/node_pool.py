"""GpuNodePool: an EKS managed node group of one GPU instance type, with its launch template.

The managed node group brings EKS's GPU AMI (pinned by release version outside dev), rolling
updates and node draining. The launch template carries what a node group alone cannot: IMDSv2
required, an encrypted root volume sized for container images, one EFA interface per network
card of the instance type, a cluster placement group and a capacity reservation target.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

import pulumi
import pulumi_aws as aws
from pydantic import ConfigDict, SkipValidation

from components.validation import raise_findings, require_tags
from gpuinfra import autoscaler, catalog, integrity
from gpuinfra.addons.base import GPU_TAINT
from gpuinfra.config import POOL_LABEL, CapacityType, Finding, NodePoolConfig, node_pool_findings

# The EKS API spells taint effects in upper snake case (NoSchedule -> NO_SCHEDULE).
EKS_GPU_TAINT = {
    "key": GPU_TAINT["key"],
    "value": GPU_TAINT["value"],
    "effect": re.sub(r"(?<!^)(?=[A-Z])", "_", GPU_TAINT["effect"]).upper(),
}

# A Pulumi input: pydantic leaves it alone (an Output is only known to the engine).
StrInput = SkipValidation[str | pulumi.Output[str]]


class GpuNodePoolArgs(NodePoolConfig):
    """One pool as the stack file declares it (``NodePoolConfig``), and the cluster it joins.

    Fields go by their Python names; the pool's bounds, choices and defaults are the model's.
    The pool's ``name`` is its ``gpuinfra.dev/pool`` label.
    """

    model_config = ConfigDict(
        arbitrary_types_allowed=True, validate_by_name=True, validate_by_alias=False
    )

    cluster_name: StrInput
    node_role_arn: StrInput
    region: str
    # Zone name -> private subnet id; a pool with an explicit zone uses that zone's subnet only.
    subnet_by_zone: SkipValidation[Mapping[str, str | pulumi.Output[str]]]
    security_group_ids: SkipValidation[Sequence[str | pulumi.Output[str]]]
    tags: dict[str, str]
    ami_type: str = "AL2023_x86_64_NVIDIA"
    # The EKS GPU AMI release (versions.yaml eks_gpu_ami); None follows EKS's latest (dev only).
    ami_release_version: str | None = None
    # The Cluster Autoscaler runs: tag the pool's Auto Scaling group for its auto-discovery and
    # with what a node would offer, so that it can grow the pool from zero. The EKS name.
    autoscaler_cluster: str | None = None


class GpuNodePool(pulumi.ComponentResource):
    node_group_name: pulumi.Output[str]
    launch_template_id: pulumi.Output[str]
    placement_group_name: pulumi.Output[str] | None
    labels: dict[str, str]

    def __init__(
        self,
        name: str,
        args: GpuNodePoolArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        raise_findings("GpuNodePool", name, _findings(args))
        spec = catalog.instance_types()[args.instance_type]
        super().__init__("gpuinfra:node_pool:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**args.tags, POOL_LABEL: args.name}
        self.labels = integrity.pool_labels(
            args.name, args.instance_type, args.labels, efa=args.efa
        )

        placement: aws.ec2.LaunchTemplatePlacementArgs | None = None
        self.placement_group_name = None
        if args.efa:
            group = aws.ec2.PlacementGroup(
                f"{name}-placement", strategy="cluster", tags=tags, opts=child
            )
            self.placement_group_name = group.name
            placement = aws.ec2.LaunchTemplatePlacementArgs(
                group_name=group.name, availability_zone=args.availability_zone
            )

        template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"{name}: {args.instance_type} GPU nodes",
            update_default_version=True,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                # One hop: pods get AWS credentials through Pod Identity, so they need not (and
                # cannot) borrow the node role from the instance metadata service.
                http_put_response_hop_limit=1,
                instance_metadata_tags="disabled",
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name="/dev/xvda",
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=args.root_volume_gib,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            # With EFA the security groups go on each interface; the two may not be mixed.
            vpc_security_group_ids=None if args.efa else args.security_group_ids,
            network_interfaces=(
                _efa_interfaces(spec.efa_interfaces, args.security_group_ids) if args.efa else None
            ),
            placement=placement,
            capacity_reservation_specification=_reservation(args),
            instance_market_options=_market(args),
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=tags)
                for kind in ("instance", "volume", "network-interface")
            ],
            tags=tags,
            opts=child,
        )

        zones = [args.availability_zone] if args.availability_zone else sorted(args.subnet_by_zone)
        node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=[args.subnet_by_zone[z] for z in zones],
            instance_types=[args.instance_type],
            ami_type=args.ami_type,
            release_version=args.ami_release_version,
            capacity_type=_eks_capacity_type(args.capacity_type),
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=args.min_size, max_size=args.max_size, desired_size=args.desired_size
            ),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=template.id, version=template.latest_version.apply(str)
            ),
            labels=self.labels,
            taints=[aws.eks.NodeGroupTaintArgs(**EKS_GPU_TAINT)],
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            # EKS replaces or reboots a node the node monitoring agent reports unhealthy (a
            # fatal XID, a GPU off the bus): a faulty GPU stops taking work (decision 0043).
            node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=True),
            tags=tags,
            # The cluster autoscaler, where it runs, owns the current size once the pool exists;
            # without it the stack file's desiredSize is the size.
            opts=pulumi.ResourceOptions(
                parent=self,
                ignore_changes=["scalingConfig.desiredSize"] if args.autoscaler_cluster else None,
            ),
        )

        if args.autoscaler_cluster:
            # EKS does not copy a node group's tags to its Auto Scaling group; the autoscaler
            # reads them there.
            group_name = node_group.resources.apply(
                lambda r: r[0].autoscaling_groups[0].name if r and r[0].autoscaling_groups else ""
            )
            asg_tags = {
                **autoscaler.discovery_tags(args.autoscaler_cluster),
                **integrity.pool_template_tags(
                    args.name, args.instance_type, args.labels, efa=args.efa
                ),
            }
            named: set[str] = set()
            for key, value in sorted(asg_tags.items()):
                # Named by the tag's key, so that adding a label renames no other tag.
                short = re.sub(r"[^a-z0-9]+", "-", key.removeprefix(autoscaler.TAG).lower())
                tag_name = f"{name}-asg{short.rstrip('-')}"
                if tag_name in named:
                    # Label keys that differ in case or punctuation alone (a_b, a.b, A-b) would
                    # share the name, and Pulumi refuses two resources of one name.
                    tag_name += "-" + hashlib.sha256(key.encode()).hexdigest()[:8]
                named.add(tag_name)
                aws.autoscaling.Tag(
                    tag_name,
                    autoscaling_group_name=group_name,
                    tag=aws.autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
                    opts=child,
                )

        self.node_group_name = node_group.node_group_name
        self.launch_template_id = template.id
        self.register_outputs(
            {
                "node_group_name": self.node_group_name,
                "launch_template_id": self.launch_template_id,
                "labels": self.labels,
            }
        )


def _findings(args: GpuNodePoolArgs) -> list[Finding]:
    found = require_tags(args.tags) + node_pool_findings(args, args.region)
    if args.availability_zone and args.availability_zone not in args.subnet_by_zone:
        found.append(
            (
                ("availability_zone",),
                f"'{args.availability_zone}' has no private subnet in the network "
                f"(zones: {', '.join(sorted(args.subnet_by_zone))})",
            )
        )
    return found


def _eks_capacity_type(capacity_type: CapacityType) -> str:
    # A capacity reservation is On-Demand capacity held for the pool; the launch template
    # targets it. A Capacity Block is a market of its own (_market).
    if capacity_type == "spot":
        return "SPOT"
    if capacity_type == "capacity-block":
        return "CAPACITY_BLOCK"
    return "ON_DEMAND"


def _efa_interfaces(
    count: int, security_groups: Sequence[pulumi.Input[str]]
) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """One EFA interface per network card: card 0 is the primary (device 0), the rest device 1."""
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=card,
            device_index=0 if card == 0 else 1,
            interface_type="efa",
            security_groups=security_groups,
            delete_on_termination="true",
        )
        for card in range(count)
    ]


def _market(args: GpuNodePoolArgs) -> aws.ec2.LaunchTemplateInstanceMarketOptionsArgs | None:
    # Spot is the node group's capacityType; a Capacity Block is also a launch template market.
    if args.capacity_type != "capacity-block":
        return None
    return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")


def _reservation(
    args: GpuNodePoolArgs,
) -> aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs | None:
    if args.capacity_reservation_id is None:
        return None
    target = aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs
    return aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
        capacity_reservation_target=target(capacity_reservation_id=args.capacity_reservation_id)
    )
