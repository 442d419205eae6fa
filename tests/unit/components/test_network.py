"""GpuNetwork: subnets per zone, NAT, the S3 gateway endpoint, EFA rules, no public SSH."""

from __future__ import annotations

from components.network import GpuNetwork, GpuNetworkArgs
from tests.unit.components.conftest import TAGS, refused

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


def network(**overrides: object) -> GpuNetwork:
    values: dict[str, object] = {"region": "us-east-1", "availability_zones": ZONES, "tags": TAGS}
    values.update(overrides)
    return GpuNetwork("net", GpuNetworkArgs(**values))  # type: ignore[arg-type]


def test_one_private_and_one_public_subnet_per_zone_carved_from_the_vpc(run) -> None:
    result = run(network)
    assert result.named("net-vpc").inputs["cidrBlock"] == "10.40.0.0/16"
    private = [result.named(f"net-private-{z}").inputs for z in ZONES]
    public = [result.named(f"net-public-{z}").inputs for z in ZONES]
    assert [s["cidrBlock"] for s in private] == ["10.40.0.0/19", "10.40.32.0/19", "10.40.64.0/19"]
    assert [s["cidrBlock"] for s in public] == [
        "10.40.224.0/22",
        "10.40.228.0/22",
        "10.40.232.0/22",
    ]
    assert [s["availabilityZone"] for s in private] == ZONES
    assert all(s["tags"]["kubernetes.io/role/internal-elb"] == "1" for s in private)
    assert all(s["tags"]["kubernetes.io/role/elb"] == "1" for s in public)
    assert not any(s.get("mapPublicIpOnLaunch") for s in private + public)


def test_single_nat_gateway_or_one_per_zone(run) -> None:
    assert len(run(network).of_type("aws:ec2/natGateway:NatGateway")) == 1
    per_zone = run(lambda: network(single_nat_gateway=False))
    gateways = per_zone.of_type("aws:ec2/natGateway:NatGateway")
    assert sorted(g.name for g in gateways) == [f"net-nat-{z}" for z in ZONES]
    routes = [per_zone.named(f"net-private-rt-{z}").inputs["routes"] for z in ZONES]
    assert [r[0]["natGatewayId"] for r in routes] == [f"net-nat-{z}-id" for z in ZONES]


def test_model_downloads_bypass_nat_through_the_s3_gateway_endpoint(run) -> None:
    result = run(network)
    endpoint = result.named("net-s3").inputs
    assert endpoint["serviceName"] == "com.amazonaws.us-east-1.s3"
    assert endpoint["vpcEndpointType"] == "Gateway"
    assert endpoint["routeTableIds"] == [f"net-private-rt-{z}-id" for z in ZONES]


def test_node_security_group_allows_efa_traffic_and_nothing_from_outside(run) -> None:
    group = run(network).named("net-nodes").inputs
    (ingress,) = group["ingress"]
    assert ingress["self"] is True and ingress["protocol"] == "-1"
    assert "cidrBlocks" not in ingress, "no ingress from any CIDR, SSH included"
    assert any(e.get("self") is True and e["protocol"] == "-1" for e in group["egress"])


def test_flow_logs_only_when_asked(run) -> None:
    assert not run(network).of_type("aws:ec2/flowLog:FlowLog")
    result = run(lambda: network(flow_logs=True))
    (flow_log,) = result.of_type("aws:ec2/flowLog:FlowLog")
    assert flow_log.inputs["trafficType"] == "ALL"
    assert flow_log.inputs["logDestination"].endswith("net-flow-logs")


def test_bad_zones_and_overlapping_cidrs_are_all_reported_and_nothing_is_created(run) -> None:
    program = refused(
        lambda: network(
            availability_zones=["us-east-1a", "eu-west-1a"],
            private_subnet_cidrs=["10.40.0.0/20", "10.40.8.0/21"],
            public_subnet_cidrs=["10.40.200.0/24", "10.50.0.0/24"],
            tags={"team": "ml"},
        )
    )
    result = run(program)
    assert result.resources == []
    (error,) = program.errors
    assert [str(p) for p in error.problems] == [
        "GpuNetwork 'net': args.tags: missing cost tags project, cost-center "
        "(required: team, project, cost-center)",
        "GpuNetwork 'net': args.availability_zones[1]: 'eu-west-1a' is not an availability zone "
        "of us-east-1 (allowed: 'us-east-1a', 'us-east-1b', 'us-east-1c', 'us-east-1d', "
        "'us-east-1e' or 'us-east-1f')",
        "GpuNetwork 'net': args.private_subnet_cidrs[1]: '10.40.8.0/21' overlaps the private "
        "subnet '10.40.0.0/20'",
        "GpuNetwork 'net': args.public_subnet_cidrs[1]: '10.50.0.0/24' lies outside the VPC "
        "block 10.40.0.0/16",
    ]
