"""GpuNetwork: the VPC the GPU nodes live in.

Private subnets hold the nodes and public ones the load balancers and NAT gateways, one of each
per availability zone. An S3 gateway endpoint keeps model downloads off the NAT gateway (and its
per-GB charge). The node security group admits nothing from outside the VPC, and carries the
all-traffic rules to itself that EFA requires.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.validation import findings_error, raise_findings, require_tags
from gpuinfra.config import carved_subnet_lists, default_subnets, network_findings, vpc_problem

# Subnet tags the AWS Load Balancer Controller and EKS use to find where load balancers go.
_PUBLIC_ELB_TAG = {"kubernetes.io/role/elb": "1"}
_PRIVATE_ELB_TAG = {"kubernetes.io/role/internal-elb": "1"}


@dataclass
class GpuNetworkArgs:
    region: str
    availability_zones: list[str]
    tags: dict[str, str]
    cidr: str = "10.40.0.0/16"
    # One per zone, in zone order; carved from ``cidr`` when None.
    private_subnet_cidrs: list[str] | None = None
    public_subnet_cidrs: list[str] | None = None
    # One NAT gateway for all zones is cheaper; one per zone survives a zone outage.
    single_nat_gateway: bool = True
    flow_logs: bool = False
    flow_log_retention_days: int = 30
    cluster_name: str | None = None
    extra_subnet_tags: dict[str, str] = field(default_factory=dict)


class GpuNetwork(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: list[pulumi.Output[str]]
    public_subnet_ids: list[pulumi.Output[str]]
    # Zone name -> private subnet id, for single-zone pools (EFA) and FSx.
    private_subnet_by_zone: dict[str, pulumi.Output[str]]
    node_security_group_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: GpuNetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        private_cidrs, public_cidrs = _subnet_plan(name, args)
        super().__init__("gpuinfra:network:GpuNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": f"{name}-vpc"},
            opts=child,
        )
        # The default security group of a new VPC allows all traffic between its members;
        # adopting it with no rules leaves it empty, so nothing lands in it by accident.
        aws.ec2.DefaultSecurityGroup(f"{name}-default-sg", vpc_id=vpc.id, tags=tags, opts=child)
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": f"{name}-igw"}, opts=child
        )
        cluster_tag = (
            {f"kubernetes.io/cluster/{args.cluster_name}": "shared"} if args.cluster_name else {}
        )

        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            tags={**tags, "Name": f"{name}-public"},
            opts=child,
        )
        public_subnets: list[aws.ec2.Subnet] = []
        private_subnets: list[aws.ec2.Subnet] = []
        for zone, public_cidr, private_cidr in zip(
            args.availability_zones, public_cidrs, private_cidrs, strict=True
        ):
            public = aws.ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=vpc.id,
                cidr_block=public_cidr,
                availability_zone=zone,
                # Load balancers get their addresses from AWS; nothing else here needs one.
                map_public_ip_on_launch=False,
                tags={
                    **tags,
                    **_PUBLIC_ELB_TAG,
                    **cluster_tag,
                    **args.extra_subnet_tags,
                    "Name": f"{name}-public-{zone}",
                },
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-rta-{zone}",
                subnet_id=public.id,
                route_table_id=public_rt.id,
                opts=child,
            )
            public_subnets.append(public)
            private = aws.ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                cidr_block=private_cidr,
                availability_zone=zone,
                map_public_ip_on_launch=False,
                tags={
                    **tags,
                    **_PRIVATE_ELB_TAG,
                    **cluster_tag,
                    **args.extra_subnet_tags,
                    "Name": f"{name}-private-{zone}",
                },
                opts=child,
            )
            private_subnets.append(private)

        nat_zones = (
            args.availability_zones[:1] if args.single_nat_gateway else args.availability_zones
        )
        nat_by_zone: dict[str, aws.ec2.NatGateway] = {}
        for zone, public in zip(nat_zones, public_subnets, strict=False):
            eip = aws.ec2.Eip(
                f"{name}-nat-eip-{zone}",
                domain="vpc",
                tags={**tags, "Name": f"{name}-nat-{zone}"},
                opts=child,
            )
            nat_by_zone[zone] = aws.ec2.NatGateway(
                f"{name}-nat-{zone}",
                allocation_id=eip.id,
                subnet_id=public.id,
                tags={**tags, "Name": f"{name}-nat-{zone}"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
            )

        private_rts: list[aws.ec2.RouteTable] = []
        for zone, private in zip(args.availability_zones, private_subnets, strict=True):
            nat = nat_by_zone.get(zone) or nat_by_zone[nat_zones[0]]
            rt = aws.ec2.RouteTable(
                f"{name}-private-rt-{zone}",
                vpc_id=vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                tags={**tags, "Name": f"{name}-private-{zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-rta-{zone}", subnet_id=private.id, route_table_id=rt.id, opts=child
            )
            private_rts.append(rt)

        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_rts],
            tags={**tags, "Name": f"{name}-s3"},
            opts=child,
        )

        nodes_sg = aws.ec2.SecurityGroup(
            f"{name}-nodes",
            vpc_id=vpc.id,
            description="GPU nodes: all traffic among themselves (EFA), no ingress from outside",
            # EFA's OS-bypass traffic is only allowed between members of one security group
            # that admits all traffic from and to itself.
            ingress=[
                {
                    "protocol": "-1",
                    "from_port": 0,
                    "to_port": 0,
                    "self": True,
                    "description": "all traffic between GPU nodes (EFA, NCCL)",
                }
            ],
            egress=[
                {
                    "protocol": "-1",
                    "from_port": 0,
                    "to_port": 0,
                    "self": True,
                    "description": "all traffic between GPU nodes (EFA)",
                },
                {
                    "protocol": "-1",
                    "from_port": 0,
                    "to_port": 0,
                    "cidr_blocks": ["0.0.0.0/0"],
                    "description": "image pulls, AWS APIs, model downloads",
                },
            ],
            tags={**tags, "Name": f"{name}-nodes"},
            opts=child,
        )

        if args.flow_logs:
            _flow_logs(name, args, vpc, tags, child)

        self.vpc_id = vpc.id
        self.private_subnet_ids = [s.id for s in private_subnets]
        self.public_subnet_ids = [s.id for s in public_subnets]
        self.private_subnet_by_zone = {
            zone: s.id for zone, s in zip(args.availability_zones, private_subnets, strict=True)
        }
        self.node_security_group_id = nodes_sg.id
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "private_subnet_ids": self.private_subnet_ids,
                "public_subnet_ids": self.public_subnet_ids,
                "node_security_group_id": self.node_security_group_id,
            }
        )


def _subnet_plan(name: str, args: GpuNetworkArgs) -> tuple[list[str], list[str]]:
    findings = require_tags(args.tags)
    try:
        why = vpc_problem(args.cidr)
    except ValueError as exc:
        why = str(exc)
    if why:
        # The subnets are carved from the block: a block that is no VPC's stops here.
        raise findings_error("GpuNetwork", name, [*findings, (("cidr",), why)])
    private, public = default_subnets(args.cidr, len(args.availability_zones))
    carved = carved_subnet_lists(args.private_subnet_cidrs, args.public_subnet_cidrs)
    private = args.private_subnet_cidrs or private
    public = args.public_subnet_cidrs or public
    findings += network_findings(
        region=args.region,
        cidr=args.cidr,
        availability_zones=args.availability_zones,
        private_subnet_cidrs=private,
        public_subnet_cidrs=public,
        carved=carved,
    )
    raise_findings("GpuNetwork", name, findings)
    return private, public


def _flow_logs(
    name: str,
    args: GpuNetworkArgs,
    vpc: aws.ec2.Vpc,
    tags: dict[str, str],
    child: pulumi.ResourceOptions,
) -> None:
    group = aws.cloudwatch.LogGroup(
        f"{name}-flow-logs",
        retention_in_days=args.flow_log_retention_days,
        tags=tags,
        opts=child,
    )
    role = aws.iam.Role(
        f"{name}-flow-logs-role",
        assume_role_policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "vpc-flow-logs.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
        tags=tags,
        opts=child,
    )
    aws.iam.RolePolicy(
        f"{name}-flow-logs-policy",
        role=role.id,
        policy=group.arn.apply(
            lambda arn: json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": [
                                "logs:CreateLogStream",
                                "logs:PutLogEvents",
                                "logs:DescribeLogStreams",
                            ],
                            "Resource": [arn, f"{arn}:*"],
                        }
                    ],
                }
            )
        ),
        opts=child,
    )
    aws.ec2.FlowLog(
        f"{name}-flow-logs",
        vpc_id=vpc.id,
        traffic_type="ALL",
        log_destination_type="cloud-watch-logs",
        log_destination=group.arn,
        iam_role_arn=role.arn,
        tags=tags,
        opts=child,
    )
