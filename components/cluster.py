"""GpuCluster: the EKS control plane, the node role, pod identities and the EBS StorageClass.

The control plane runs the pinned Kubernetes version with its secrets encrypted by a
customer-managed key and its endpoint reachable only from the configured CIDRs. The node role
holds only what a node needs (join, pull images); the VPC CNI and workloads that touch S3 or FSx
get their own role through EKS Pod Identity, never through the node.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.storage import key_policy
from components.validation import raise_findings, require_tags
from gpuinfra import autoscaler, efa
from gpuinfra.config import (
    POOL_LABEL,
    SYSTEM_POOL,
    Finding,
    ebs_iops_problem,
    eks_cluster_name_problem,
    system_type_problem,
    world_cidr,
)
from gpuinfra.versions import Versions, pinned

_MANAGED = "arn:aws:iam::aws:policy/"
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly")
# The VPC CNI (aws-node) manages every node's network interfaces with its own role, through Pod
# Identity: on the node role, any pod that reached the node's credentials could too.
CNI_POLICY = "AmazonEKS_CNI_Policy"
CNI_SERVICE_ACCOUNT = "aws-node"
# Every control-plane log type: the scheduler's and controller manager's explain pods that stay
# Pending and nodes that leave, on a cluster where GPU capacity is the scarce thing.
CONTROL_PLANE_LOGS = ("api", "audit", "authenticator", "controllerManager", "scheduler")


@dataclass
class ServiceAccountRef:
    namespace: str
    name: str


@dataclass
class GpuClusterArgs:
    kubernetes_version: str
    subnet_ids: Sequence[pulumi.Input[str]]
    node_security_group_id: pulumi.Input[str]
    tags: dict[str, str]
    model_bucket_arn: pulumi.Input[str]
    model_kms_key_arn: pulumi.Input[str]
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] = field(default_factory=list)
    admin_role_arn: str | None = None
    fsx_csi_driver: bool = False
    ebs_volume_type: str = "gp3"
    # The IOPS of each io2 volume (required with io2).
    ebs_iops: int | None = None
    # Service accounts that read the model repository (Triton's), through Pod Identity.
    model_readers: list[ServiceAccountRef] = field(default_factory=list)
    # The EKS cluster's name; Pulumi picks a unique one when None.
    eks_name: str | None = None
    # CPU nodes for the controllers (add-on operators, Prometheus, Kueue): GPU nodes are tainted.
    system_instance_type: str = "m7i.large"
    system_node_count: int = 2
    # The EKS AMI release (versions.yaml eks_gpu_ami: GPU and standard AMIs share releases).
    ami_release_version: str | None = None
    # The Cluster Autoscaler's region (gpuinfra/autoscaler.py); None runs none. It needs
    # eks_name, which its auto-discovery tags name.
    autoscaler_region: str | None = None
    # Whether a pool has EFA: then the EFA device plugin runs on its nodes (gpuinfra/efa.py).
    efa_device_plugin: bool = False
    # The pins of the images the cluster runs itself (the autoscaler's, the EFA device plugin's);
    # versions.yaml's when None.
    versions: Versions | None = None


class GpuCluster(pulumi.ComponentResource):
    cluster_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    node_role_arn: pulumi.Output[str]
    cluster_security_group_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(
        self, name: str, args: GpuClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        raise_findings("GpuCluster", name, _findings(args))
        super().__init__("gpuinfra:cluster:GpuCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)

        cluster_role = aws.iam.Role(
            f"{name}-cluster",
            assume_role_policy=_trust("eks.amazonaws.com"),
            tags=tags,
            opts=child,
        )
        aws.iam.RolePolicyAttachment(
            f"{name}-cluster-policy",
            role=cluster_role.name,
            policy_arn=_MANAGED + "AmazonEKSClusterPolicy",
            opts=child,
        )
        secrets_key = aws.kms.Key(
            f"{name}-secrets",
            description=f"{name}: Kubernetes secrets encryption",
            enable_key_rotation=True,
            tags=tags,
            opts=child,
        )
        aws.kms.KeyPolicy(
            f"{name}-secrets-policy",
            key_id=secrets_key.id,
            policy=secrets_key.arn.apply(key_policy),
            opts=child,
        )
        vpc_config = aws.eks.ClusterVpcConfigArgs(
            subnet_ids=args.subnet_ids,
            security_group_ids=[args.node_security_group_id],
            endpoint_private_access=True,
            endpoint_public_access=args.endpoint_public_access,
            public_access_cidrs=args.public_access_cidrs if args.endpoint_public_access else None,
        )
        cluster = aws.eks.Cluster(
            f"{name}-eks",
            name=args.eks_name,
            version=args.kubernetes_version,
            role_arn=cluster_role.arn,
            vpc_config=vpc_config,
            # Access entries only (no aws-auth ConfigMap). The identity running Pulumi keeps
            # admin rights: it installs the add-ons through the Kubernetes provider.
            access_config={
                "authentication_mode": "API",
                "bootstrap_cluster_creator_admin_permissions": True,
            },
            encryption_config={"provider": {"key_arn": secrets_key.arn}, "resources": ["secrets"]},
            enabled_cluster_log_types=list(CONTROL_PLANE_LOGS),
            upgrade_policy={"support_type": "STANDARD"},
            tags=tags,
            opts=child,
        )

        node_role = aws.iam.Role(
            f"{name}-node", assume_role_policy=_trust("ec2.amazonaws.com"), tags=tags, opts=child
        )
        attached = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=node_role.name,
                policy_arn=_MANAGED + policy,
                opts=child,
            )
            for policy in NODE_POLICIES
        ]

        self._system_nodes(name, args, cluster, node_role, attached, tags)

        if args.admin_role_arn:
            admin = aws.eks.AccessEntry(
                f"{name}-admin",
                cluster_name=cluster.name,
                principal_arn=args.admin_role_arn,
                type="STANDARD",
                tags=tags,
                opts=child,
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-admin-policy",
                cluster_name=cluster.name,
                principal_arn=args.admin_role_arn,
                policy_arn="arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                access_scope={"type": "cluster"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[admin]),
            )

        # EKS add-on versions are left to EKS's default for the pinned Kubernetes version.
        pod_identity = aws.eks.Addon(
            f"{name}-pod-identity-agent",
            cluster_name=cluster.name,
            addon_name="eks-pod-identity-agent",
            tags=tags,
            opts=child,
        )
        after_agent = pulumi.ResourceOptions(parent=self, depends_on=[pod_identity])
        # Reports GPU and node failures as node conditions, which node auto repair acts on.
        aws.eks.Addon(
            f"{name}-node-monitoring-agent",
            cluster_name=cluster.name,
            addon_name="eks-node-monitoring-agent",
            tags=tags,
            opts=child,
        )
        self._pod_identity_addon(
            f"{name}-vpc-cni",
            "vpc-cni",
            CNI_SERVICE_ACCOUNT,
            cluster,
            tags,
            after_agent,
            managed=[CNI_POLICY],
            # EKS installed aws-node with the cluster; the add-on takes it over.
            resolve_conflicts_on_create="OVERWRITE",
        )
        ebs = self._pod_identity_addon(
            f"{name}-ebs-csi",
            "aws-ebs-csi-driver",
            "ebs-csi-controller-sa",
            cluster,
            tags,
            after_agent,
            managed=["service-role/AmazonEBSCSIDriverPolicy"],
        )
        read_models = pulumi.Output.all(args.model_bucket_arn, args.model_kms_key_arn).apply(
            lambda arns: _read_bucket_policy(arns[0], arns[1])
        )
        self._pod_identity_addon(
            f"{name}-s3-csi",
            "aws-mountpoint-s3-csi-driver",
            "s3-csi-driver-sa",
            cluster,
            tags,
            after_agent,
            inline=read_models,
        )
        if args.fsx_csi_driver:
            # The file system is made here, not by the driver: static volumes need no AWS role.
            aws.eks.Addon(
                f"{name}-fsx-csi",
                cluster_name=cluster.name,
                addon_name="aws-fsx-csi-driver",
                tags=tags,
                opts=after_agent,
            )
        if args.model_readers:
            reader_role = self._pod_role(
                f"{name}-model-reader", tags, cluster.arn, inline=read_models
            )
            for ref in args.model_readers:
                reader = f"{name}-model-reader-{ref.namespace}-{ref.name}"
                self._pod_identity(reader, ref, reader_role, cluster, tags, after_agent)

        kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(cluster.name, cluster.endpoint, cluster.certificate_authority).apply(
                lambda parts: _kubeconfig(parts[0], parts[1], parts[2]["data"])
            )
        )
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=kubeconfig,
            opts=child,
        )
        k8s.storage.v1.StorageClass(
            f"{name}-{args.ebs_volume_type}",
            metadata={
                "name": f"{args.ebs_volume_type}-encrypted",
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            provisioner="ebs.csi.aws.com",
            parameters={
                "type": args.ebs_volume_type,
                "encrypted": "true",
                **({"iops": str(args.ebs_iops)} if args.ebs_iops is not None else {}),
            },
            volume_binding_mode="WaitForFirstConsumer",
            allow_volume_expansion=True,
            reclaim_policy="Delete",
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[ebs]),
        )

        if args.autoscaler_region and args.eks_name:
            self._autoscaler(name, args, tags, cluster, after_agent)
        if args.efa_device_plugin:
            self._apply(f"{name}-efa", efa.objects(args.versions or pinned()))

        self.cluster_name = cluster.name
        self.endpoint = cluster.endpoint
        self.node_role_arn = node_role.arn
        self.cluster_security_group_id = cluster.vpc_config.cluster_security_group_id
        self.kubeconfig = kubeconfig
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "endpoint": self.endpoint,
                "node_role_arn": self.node_role_arn,
                "kubeconfig": self.kubeconfig,
            }
        )

    def _system_nodes(
        self,
        name: str,
        args: GpuClusterArgs,
        cluster: aws.eks.Cluster,
        node_role: aws.iam.Role,
        attached: list[aws.iam.RolePolicyAttachment],
        tags: dict[str, str],
    ) -> None:
        system_tags = {**tags, POOL_LABEL: SYSTEM_POOL}
        template = aws.ec2.LaunchTemplate(
            f"{name}-system-lt",
            description=f"{name}: system nodes",
            update_default_version=True,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name="/dev/xvda",
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=80, volume_type="gp3", encrypted="true"
                    ),
                )
            ],
            vpc_security_group_ids=[
                args.node_security_group_id,
                cluster.vpc_config.cluster_security_group_id,
            ],
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=system_tags)
                for kind in ("instance", "volume")
            ],
            tags=system_tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        count = args.system_node_count
        aws.eks.NodeGroup(
            f"{name}-system-ng",
            cluster_name=cluster.name,
            node_role_arn=node_role.arn,
            subnet_ids=args.subnet_ids,
            instance_types=[args.system_instance_type],
            ami_type="AL2023_x86_64_STANDARD",
            release_version=args.ami_release_version,
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=count, max_size=count, desired_size=count
            ),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=template.id, version=template.latest_version.apply(str)
            ),
            labels={POOL_LABEL: SYSTEM_POOL},
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            tags=system_tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(attached)),
        )

    def _autoscaler(
        self,
        name: str,
        args: GpuClusterArgs,
        tags: dict[str, str],
        cluster: aws.eks.Cluster,
        after_agent: pulumi.ResourceOptions,
    ) -> None:
        """The Cluster Autoscaler: its AWS role through Pod Identity, and its objects."""
        assert args.eks_name and args.autoscaler_region
        policy = json.dumps(autoscaler.iam_policy(args.eks_name, args.autoscaler_region))
        role = self._pod_role(f"{name}-autoscaler", tags, cluster.arn, inline=policy)
        account = ServiceAccountRef(autoscaler.NAMESPACE, autoscaler.NAME)
        self._pod_identity(f"{name}-autoscaler", account, role, cluster, tags, after_agent)
        pins = args.versions or pinned()
        self._apply(
            f"{name}-autoscaler",
            autoscaler.objects(args.eks_name, args.autoscaler_region, pins),
        )

    def _apply(self, prefix: str, objects: list[dict[str, Any]]) -> None:
        """One resource per Kubernetes object, named <prefix>-<kind>."""
        on_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider)
        for obj in objects:
            group, _, version = str(obj["apiVersion"]).rpartition("/")
            token = f"kubernetes:{group or 'core'}/{version}:{obj['kind']}"
            pulumi.CustomResource(
                token, f"{prefix}-{str(obj['kind']).lower()}", dict(obj), on_cluster
            )

    def _pod_identity(
        self,
        name: str,
        account: ServiceAccountRef,
        role: aws.iam.Role,
        cluster: aws.eks.Cluster,
        tags: dict[str, str],
        opts: pulumi.ResourceOptions,
    ) -> None:
        """Pods running as ``account`` act through ``role``, by Pod Identity."""
        aws.eks.PodIdentityAssociation(
            name,
            cluster_name=cluster.name,
            namespace=account.namespace,
            service_account=account.name,
            role_arn=role.arn,
            tags=tags,
            opts=opts,
        )

    def _pod_identity_addon(
        self,
        name: str,
        addon: str,
        service_account: str,
        cluster: aws.eks.Cluster,
        tags: dict[str, str],
        opts: pulumi.ResourceOptions,
        *,
        managed: list[str] | None = None,
        inline: pulumi.Input[str] | None = None,
        **extra: Any,
    ) -> aws.eks.Addon:
        """An EKS add-on whose ``service_account`` acts through a role of its own, by Pod
        Identity: the role holds the ``managed`` policies and the ``inline`` one."""
        role = self._pod_role(name, tags, cluster.arn, managed=managed, inline=inline)
        return aws.eks.Addon(
            name,
            cluster_name=cluster.name,
            addon_name=addon,
            pod_identity_associations=[{"role_arn": role.arn, "service_account": service_account}],
            tags=tags,
            opts=opts,
            **extra,
        )

    def _pod_role(
        self,
        name: str,
        tags: dict[str, str],
        cluster_arn: pulumi.Input[str],
        *,
        managed: list[str] | None = None,
        inline: pulumi.Input[str] | None = None,
    ) -> aws.iam.Role:
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-role",
            # Only Pod Identity acting for this cluster: a trust in the service alone would let
            # any cluster's agent, in any account, take the role (the confused deputy).
            assume_role_policy=pulumi.Output.from_input(cluster_arn).apply(
                lambda arn: _trust(
                    "pods.eks.amazonaws.com",
                    tag_session=True,
                    condition={"ArnEquals": {"aws:SourceArn": arn}},
                )
            ),
            tags=tags,
            opts=child,
        )
        for policy in managed or []:
            aws.iam.RolePolicyAttachment(
                f"{name}-{policy.rsplit('/', 1)[-1]}",
                role=role.name,
                policy_arn=_MANAGED + policy,
                opts=child,
            )
        if inline is not None:
            aws.iam.RolePolicy(f"{name}-policy", role=role.id, policy=inline, opts=child)
        return role


def _findings(args: GpuClusterArgs) -> list[Finding]:
    found = require_tags(args.tags)
    if args.endpoint_public_access and not args.public_access_cidrs:
        found.append(
            (("public_access_cidrs",), "a public endpoint needs the CIDRs allowed to reach it")
        )
    for i, cidr in enumerate(args.public_access_cidrs):
        try:
            net = ipaddress.ip_network(cidr, strict=True)
        except ValueError as exc:
            found.append((("public_access_cidrs", i), f"'{cidr}' is not a CIDR block ({exc})"))
            continue
        if net.prefixlen == 0:
            found.append(
                (("public_access_cidrs", i), f"'{cidr}' opens the endpoint to the internet")
            )
    world = world_cidr(args.public_access_cidrs)
    if world is not None and not any(str(c).endswith("/0") for c in args.public_access_cidrs):
        found.append(
            (
                ("public_access_cidrs",),
                f"{', '.join(args.public_access_cidrs)} together open the endpoint to the "
                f"internet ({world})",
            )
        )
    if args.eks_name is not None and (why := eks_cluster_name_problem(args.eks_name)):
        found.append((("eks_name",), why))
    system = system_type_problem(args.system_instance_type)
    if system:
        found.append((("system_instance_type",), system))
    if not 1 <= args.system_node_count <= 10:
        found.append((("system_node_count",), "the system node group takes 1 to 10 nodes"))
    if args.ebs_volume_type not in ("gp3", "io2"):
        found.append((("ebs_volume_type",), f"'{args.ebs_volume_type}': allowed 'gp3' or 'io2'"))
    elif why := ebs_iops_problem(args.ebs_volume_type, args.ebs_iops):
        found.append((("ebs_iops",), why))
    return found


def _trust(
    service: str, *, tag_session: bool = False, condition: dict[str, Any] | None = None
) -> str:
    actions = ["sts:AssumeRole", "sts:TagSession"] if tag_session else "sts:AssumeRole"
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": actions,
    }
    if condition:
        statement["Condition"] = condition
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def _read_bucket_policy(bucket_arn: str, key_arn: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": bucket_arn},
                {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": f"{bucket_arn}/*"},
                {"Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": key_arn},
            ],
        }
    )


def _kubeconfig(cluster: str, endpoint: str, ca: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": cluster, "cluster": {"server": endpoint, "certificate-authority-data": ca}}
            ],
            "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
            "current-context": cluster,
            "users": [
                {
                    "name": cluster,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": ["eks", "get-token", "--cluster-name", cluster],
                        }
                    },
                }
            ],
        }
    )
