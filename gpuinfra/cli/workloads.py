"""CLI commands: workloads (templates the cluster's users start from)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuinfra.cli.console import out
from gpuinfra.cli.options import STACK_HELP, parse_site, parse_whole
from gpuinfra.errors import UsageError

workloads_app = typer.Typer(
    help="Workload templates for the cluster's users.", no_args_is_help=True
)


@workloads_app.command("training")
def training(
    name: Annotated[str, typer.Argument(help="The Job's name")],
    namespace: Annotated[str, typer.Option(help="A team namespace with a Kueue LocalQueue")],
    image: Annotated[str, typer.Option(help="The training image, pinned by tag or digest")],
    gpu_type: Annotated[
        str, typer.Option(help="The nodes' gpuinfra.dev/gpu-type label (h100, l4)")
    ],
    queue: Annotated[str, typer.Option(help="The LocalQueue that admits the Job")] = "gpu",
    gpus_per_node: Annotated[
        int, typer.Option(parser=parse_whole, help="GPUs per node (one pod per node)")
    ] = 8,
    nodes: Annotated[
        int, typer.Option(parser=parse_whole, help="Nodes (pods of the indexed Job)")
    ] = 1,
    network: Annotated[str, typer.Option(help="efa, infiniband, roce or tcp")] = "tcp",
    efa_interfaces: Annotated[
        int, typer.Option(parser=parse_whole, help="EFA interfaces per node (network efa)")
    ] = 0,
    socket_ifname: Annotated[
        str | None, typer.Option(help="The data network interface NCCL bootstraps over")
    ] = None,
    shm_size: Annotated[str, typer.Option(help="Size of /dev/shm for DataLoader workers")] = "64Gi",
    team: Annotated[
        str | None,
        typer.Option(
            help="The pods' team label, GPU-hours are reported by (default: the namespace)"
        ),
    ] = None,
    project: Annotated[
        str | None, typer.Option(help="The pods' project label (default: the Job's name)")
    ] = None,
    stack: Annotated[
        str | None, typer.Option(help=f"Check the Job against this stack's cluster. {STACK_HELP}")
    ] = None,
    site: Annotated[
        Path | None,
        typer.Option(
            parser=parse_site, help="Check the Job against this site inventory directory's cluster"
        ),
    ] = None,
) -> None:
    """Print a Kueue-queued training Job and its headless Service, checked against the schemas.

    Both objects are validated against the pinned Kubernetes schemas before they are printed.
    With --stack or --site, the Job is refused (exit 2) where that cluster could never run it:
    no node of the GPU type, none that gives a pod the GPUs, too few for every pod, or nothing
    in Kueue to admit it.
    """
    import yaml

    from gpuinfra import schemas, versions, workloads
    from gpuinfra.errors import CheckFailed, InputInvalid

    if stack is not None and site is not None:
        raise UsageError("give at most one of --stack ENV or --site DIR")
    job = workloads.TrainingJob(
        name=name,
        namespace=namespace,
        queue=queue,
        image=image,
        gpu_type=gpu_type,
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        network=network,
        efa_interfaces=efa_interfaces,
        socket_ifname=socket_ifname,
        shm_size=shm_size,
        team=team,
        project=project,
    )
    objects = workloads.training_objects(job)
    kubernetes = versions.pinned().kubernetes.version
    problems = [p for obj in objects for p in schemas.core_problems(obj, kubernetes)]
    if problems:
        raise CheckFailed(problems)
    cluster = None
    if stack is not None:
        cluster = workloads.stack_cluster(stack)
    elif site is not None:
        cluster = workloads.site_cluster(site)
    if cluster is not None and (refused := workloads.cluster_problems(job, cluster)):
        raise InputInvalid(refused)
    text = yaml.safe_dump_all(objects, sort_keys=False)
    out.print(text, end="", markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gpuinfra` app."""
    app.add_typer(workloads_app, name="workloads")
