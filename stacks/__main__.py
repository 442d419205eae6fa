"""The gpuinfra Pulumi program: read the stack's config, build the components, export outputs.

``pulumi up -s <env>`` runs this file as ``__main__`` with the stack file
``stacks/Pulumi.<env>.yaml``; ``gpuinfra.review.stackrun`` calls ``main`` under Pulumi's mock runtime.
"""

from __future__ import annotations

import pulumi

from components.addons import ClusterAddons, ClusterAddonsArgs, missing_secret_config
from components.cluster import GpuCluster, GpuClusterArgs, ServiceAccountRef
from components.network import GpuNetwork, GpuNetworkArgs
from components.node_pool import GpuNodePool, GpuNodePoolArgs
from components.storage import FsxArgs, GpuStorage, GpuStorageArgs
from gpuinfra import addons, integrity, versions
from gpuinfra.config import StackConfig, cluster_name, load_stack, stack_path
from gpuinfra.loading import display_path


def main(
    cfg: StackConfig,
    pins: versions.Versions,
    renders: list[addons.AddonRender] | None = None,
    *,
    stack: str | None = None,
) -> None:
    """The stack: ``renders`` are the add-ons as ``addons.render_all`` renders them for ``cfg``
    (the plan passes the ones it already has); rendered here when not given. ``stack`` is the
    Pulumi stack being run (``pulumi.get_stack()`` when not given): the names that must be unique
    in an account and region follow it, not the environment (decision 0077)."""
    # The EKS cluster's name, and the prefix of every logical name: Pulumi names a node group
    # after its logical name, EKS its Auto Scaling group eks-<node group>-<id>, and the
    # autoscaler's IAM policy resizes only groups named eks-<cluster name>-*.
    name = cluster_name(stack or pulumi.get_stack())

    def aliases(logical: str) -> list[pulumi.Alias] | None:
        """The name a component had before decision 0077, where it differs: a stack named
        <environment>-<suffix> keeps what it made (network, bucket, keys) instead of replacing it."""
        before = f"gpuinfra-{cfg.environment}{logical.removeprefix(name)}"
        return [pulumi.Alias(name=before)] if before != logical else None

    tags = {**cfg.tags.as_aws(), "environment": cfg.environment}
    # Everything single-zone (EFA placement, reservations, FSx) shares the first pinned zone.
    pinned_zone = next(
        (p.availability_zone for p in cfg.node_pools if p.availability_zone),
        cfg.network.availability_zones[0],
    )

    network = GpuNetwork(
        name,
        GpuNetworkArgs(
            region=cfg.region,
            availability_zones=cfg.network.availability_zones,
            tags=tags,
            cidr=cfg.network.cidr,
            private_subnet_cidrs=cfg.network.private_subnet_cidrs,
            public_subnet_cidrs=cfg.network.public_subnet_cidrs,
            single_nat_gateway=cfg.network.single_nat_gateway,
            flow_logs=cfg.network.flow_logs,
            cluster_name=name,
        ),
        opts=pulumi.ResourceOptions(aliases=aliases(name)),
    )
    fsx = cfg.storage.fsx
    storage = GpuStorage(
        name,
        GpuStorageArgs(
            tags=tags,
            versioning=cfg.storage.model_bucket_versioning,
            fsx=FsxArgs(
                subnet_id=network.private_subnet_by_zone[pinned_zone],
                security_group_ids=[network.node_security_group_id],
                storage_capacity_gib=fsx.storage_capacity_gib,
                throughput_per_tib=fsx.throughput_per_tib,
                link_model_bucket=fsx.link_model_bucket,
                export_to_bucket=fsx.export_to_bucket,
            )
            if fsx.enabled
            else None,
        ),
        opts=pulumi.ResourceOptions(aliases=aliases(name)),
    )
    triton = cfg.addons.triton
    repository = triton.model_repository
    readers = (
        [ServiceAccountRef(triton.namespace, repository.service_account)]
        if triton.enabled and repository and repository.s3 and repository.service_account
        else []
    )
    ami = pins.eks_gpu_ami
    # dev follows EKS's newest AMI release to meet a breaking one before staging and prod.
    ami_release = None if cfg.environment == "dev" else ami.version
    cluster = GpuCluster(
        name,
        GpuClusterArgs(
            kubernetes_version=pins.kubernetes.version,
            subnet_ids=network.private_subnet_ids,
            node_security_group_id=network.node_security_group_id,
            tags=tags,
            model_bucket_arn=storage.bucket_arn,
            model_kms_key_arn=storage.kms_key_arn,
            endpoint_public_access=cfg.cluster.endpoint_public_access,
            public_access_cidrs=cfg.cluster.public_access_cidrs,
            admin_role_arn=cfg.cluster.admin_role_arn,
            fsx_csi_driver=fsx.enabled,
            ebs_volume_type=cfg.storage.ebs_volume_type,
            ebs_iops=cfg.storage.ebs_iops,
            model_readers=readers,
            eks_name=name,
            system_instance_type=cfg.cluster.system_instance_type,
            system_node_count=cfg.cluster.system_node_count,
            ami_release_version=ami_release,
            autoscaler_region=cfg.region if cfg.cluster.autoscaler else None,
            efa_device_plugin=any(pool.efa for pool in cfg.node_pools),
            versions=pins,
        ),
        opts=pulumi.ResourceOptions(aliases=aliases(name)),
    )
    pools: dict[str, GpuNodePool] = {}
    for pool in cfg.node_pools:
        pools[pool.name] = GpuNodePool(
            f"{name}-{pool.name}",
            GpuNodePoolArgs(
                **pool.model_dump(),
                cluster_name=cluster.cluster_name,
                node_role_arn=cluster.node_role_arn,
                region=cfg.region,
                subnet_by_zone=network.private_subnet_by_zone,
                security_group_ids=[
                    network.node_security_group_id,
                    cluster.cluster_security_group_id,
                ],
                tags=tags,
                ami_type=ami.source.ami_type or "AL2023_x86_64_NVIDIA",
                ami_release_version=ami_release,
                autoscaler_cluster=name if cfg.cluster.autoscaler else None,
            ),
            opts=pulumi.ResourceOptions(
                depends_on=[cluster], aliases=aliases(f"{name}-{pool.name}")
            ),
        )
    ClusterAddons(
        name,
        ClusterAddonsArgs(
            renders=renders
            if renders is not None
            else addons.render_all(cfg.addons, versions=pins),
            provider=cluster.provider,
        ),
        # Add-ons schedule onto GPU nodes; their pools must exist before the charts wait.
        opts=pulumi.ResourceOptions(depends_on=list(pools.values()), aliases=aliases(name)),
    )

    pulumi.export("vpcId", network.vpc_id)
    pulumi.export("clusterName", cluster.cluster_name)
    pulumi.export("clusterEndpoint", cluster.endpoint)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("modelBucket", storage.bucket_name)
    pulumi.export("fsxDnsName", storage.fsx_dns_name)
    pulumi.export("nodeGroups", {n: p.node_group_name for n, p in pools.items()})


def run(env: str) -> None:
    """``pulumi up``: what ``gpuinfra plan`` refuses (the integrity check's errors) is refused here
    too, before anything is registered."""
    cfg, pins = load_stack(env), versions.pinned()
    renders = addons.render_all(cfg.addons, versions=pins)
    integrity.check_stack(cfg, display_path(stack_path(env)), renders=renders, versions=pins)
    missing = missing_secret_config(renders)
    if missing:
        raise pulumi.RunError(f"{display_path(stack_path(env))}: {missing}")
    main(cfg, pins, renders, stack=env)


if __name__ == "__main__":
    run(pulumi.get_stack())
