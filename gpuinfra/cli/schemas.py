"""CLI commands: schemas (the validation data the repository carries, rebuilt from upstream)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuinfra.cli.console import say
from gpuinfra.cli.options import out_dir

schemas_app = typer.Typer(
    help="The chart values trees, CRD schemas and DCGM counter lists in gpuinfra/data.",
    no_args_is_help=True,
)

_OUT_HELP = "Data directory to write under (default: the package's gpuinfra/data)"


@schemas_app.command("build")
def build(
    path: Annotated[Path, typer.Argument(help="A chart directory or a .tgz from helm pull")],
    version: Annotated[
        str | None,
        typer.Option(help="File the data under this version instead of Chart.yaml's"),
    ] = None,
    out: Annotated[Path | None, out_dir(_OUT_HELP)] = None,
) -> None:
    """Write a chart's values tree and CRD schemas, for its name and version."""
    from gpuinfra import chartdata
    from gpuinfra.loading import display_path

    source = chartdata.read_chart(path, version=version)
    files = chartdata.chart_files(source)
    written = _write(files, out)
    kinds = sum(len(k) for k in chartdata.crd_schemas(source.crds).values())
    for target in written:
        say(f"wrote {display_path(target)}")
    say(
        f"{source.name} {source.version}: {len(source.values)} top-level values, {kinds} CRD schemas"
    )


@schemas_app.command("counters")
def counters(
    version: Annotated[str, typer.Argument(help="The DCGM exporter version, as pinned")],
    csv_files: Annotated[
        list[Path], typer.Argument(help="Counter lists (etc/*.csv of NVIDIA/dcgm-exporter)")
    ],
    out: Annotated[Path | None, out_dir(_OUT_HELP)] = None,
) -> None:
    """Write the DCGM exporter's counter lists (metric names and types) for a version."""
    from gpuinfra import chartdata
    from gpuinfra.loading import display_path

    written = _write(chartdata.counter_files(version, csv_files), out)
    for target in written:
        say(f"wrote {display_path(target)}")


@schemas_app.command("api")
def api(
    name: Annotated[str, typer.Argument(help="The API's name, e.g. gateway-api")],
    version: Annotated[str, typer.Argument(help="Its release, e.g. 1.6.1")],
    crd_files: Annotated[list[Path], typer.Argument(help="The release's CRD YAML files")],
    out: Annotated[Path | None, out_dir(_OUT_HELP)] = None,
) -> None:
    """Write the CRD schemas of an API the cluster provides (not a pinned chart's)."""
    from gpuinfra import chartdata
    from gpuinfra.loading import display_path

    written = _write(chartdata.api_files(name, version, crd_files), out)
    for target in written:
        say(f"wrote {display_path(target)}")


def _write(files: dict[str, str], out: Path | None) -> list[Path]:
    from gpuinfra import chartdata
    from gpuinfra.addons.output import check_out

    data = out or chartdata.DATA
    # Every file's folders checked before the first is written: nothing half done.
    for relative in files:
        check_out(data, relative)
    return chartdata.write(files, data)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gpuinfra` app."""
    app.add_typer(schemas_app, name="schemas")
