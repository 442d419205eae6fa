"""CLI commands: triton (tune a model against an SLA; check a running server's versions)."""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from gpuinfra.cli.console import out, say, warn
from gpuinfra.cli.options import STACK_HELP, parse_site, parse_whole
from gpuinfra.errors import CheckFailed, ToolError, UsageError, excerpt

if TYPE_CHECKING:
    from gpuinfra.addons.triton import TritonSettings
    from gpuinfra.lab.tune import Candidate, Result
    from gpuinfra.modeledit import TritonFile

triton_app = typer.Typer(help="Triton: tune batching against an SLA, verify a server.")

# The admin key a gpuinfra Triton asks for on its repository API (the index ``verify`` reads,
# the loads ``tune --url`` makes), from the environment: an option would leave it in the shell's
# history and the process list. Never shown.
ADMIN_KEY_ENV = "GPUINFRA_TRITON_ADMIN_KEY"


# Numbers as a person types them, in ASCII digits (``int`` and ``float`` would also read other
# scripts' digits, and ``float`` ``nan`` and ``inf``); a sign is read so that -1 is out of range.
_WHOLE = re.compile(r"[-+]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?", re.ASCII)
# The local stand-in's cost per batch and per item: up to a second each, which perf_analyzer
# still measures within its window.
MAX_STAND_IN_COST_US = 1_000_000


def _levels(text: str, option: str, most: int, example: str) -> list[int]:
    """A comma-separated list of whole numbers from 1 to ``most`` (a field of the model
    config, or perf_analyzer's concurrency)."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    shown = f"{option} {excerpt(repr(text), 60)}"
    allowed = f"allowed: whole numbers from 1 to {most}, comma-separated, e.g. {example}"
    if not parts or not all(_WHOLE.fullmatch(part) for part in parts):
        raise UsageError(f"{shown}: not a list of whole numbers ({allowed})")
    # A number longer than the bound's digits is out of range before it is read.
    if any(len(part.lstrip("+0")) > len(str(most)) or not 1 <= int(part) <= most for part in parts):
        raise UsageError(f"{shown}: out of range ({allowed})")
    return [int(part) for part in parts]


def _number(text: str, option: str, allowed: str, *, above_zero: bool) -> float:
    """A finite decimal number written in ASCII digits, above 0 or at least 0."""
    shown = f"{option} {excerpt(repr(text), 60)}"
    if not _DECIMAL.fullmatch(text.strip()):
        raise UsageError(f"{shown}: not a number (allowed: {allowed})")
    value = float(text)
    if not math.isfinite(value) or (value <= 0 if above_zero else value < 0):
        raise UsageError(f"{shown}: out of range (allowed: {allowed})")
    return value


def _stand_in_cost(text: str) -> str:
    """``--stand-in-cost-us``: microseconds per batch and per item, two numbers."""
    allowed = (
        f"allowed: two numbers of microseconds from 0 to {MAX_STAND_IN_COST_US}, per batch and "
        "per item, e.g. 10000,500"
    )
    shown = f"--stand-in-cost-us {excerpt(repr(text), 60)}"
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 2 or not all(_DECIMAL.fullmatch(part) for part in parts):
        raise UsageError(f"{shown}: not a cost per batch and per item ({allowed})")
    if not all(0 <= float(part) <= MAX_STAND_IN_COST_US for part in parts):
        raise UsageError(f"{shown}: out of range ({allowed})")
    return ",".join(parts)


def _source(
    stack: str | None, site: Path | None, setting: str = "models"
) -> tuple[TritonSettings, TritonFile, str, Path]:
    """The Triton settings, the file that declares their ``setting`` (a list: ``models``,
    ``serving_groups``), a name for the source and the directory its measurements go to."""
    from gpuinfra import addons, config
    from gpuinfra import site as site_mod
    from gpuinfra.loading import display_path
    from gpuinfra.modeledit import TritonFile, site_key
    from gpuinfra.paths import repo_root

    if (stack is None) == (site is None):
        raise UsageError("give exactly one of --stack ENV or --site DIR")
    if stack is not None:
        path = config.stack_path(stack)
        where = TritonFile.stack(path, setting)
        return config.load_stack(stack).addons.triton, where, stack, path.parent
    assert site is not None
    loaded = site_mod.load_site(site)
    settings = addons.settings_from_site(loaded).triton
    key = site_key(setting)
    # The file the add-on play's value comes from: group_vars/all, or all's vars in the
    # inventory file (docs/decisions/0081).
    shown = loaded.controller.origin.get(key) if loaded.controller is not None else None
    if shown is None:
        raise UsageError(f"{loaded.name}: no {key} in the site's variables")
    origin = Path(shown)
    inventory = loaded.inventory is not None and shown == display_path(loaded.inventory)
    # Beside the inventory, not under group_vars/, where Ansible would read it as variables.
    return (
        settings,
        TritonFile.site(
            origin if origin.is_absolute() else repo_root() / origin,
            setting,
            ("all", "vars") if inventory else (),
        ),
        loaded.name,
        site,
    )


def _check_edit(stack: str | None, site: Path | None, where: TritonFile, text: str) -> None:
    """Refuse (exit 2, nothing written) an edit that leaves the stack or site failing what
    ``config check`` checks: the file, the node limits, the whole stack's or site's integrity."""
    from gpuinfra.cli import checks

    if stack is not None:
        checks.edited_stack(stack, text)
    else:
        assert site is not None
        checks.edited_site(site, where.path, text)


def _table(result: Result) -> Table:
    table = Table(title=f"{result.model}: P99 bound {result.sla.p99_ms:g} ms ({result.target})")
    table.add_column("configuration", overflow="fold")
    for level in result.concurrency:
        table.add_column(f"c={level} infer/s", justify="right")
        table.add_column(f"c={level} P99 ms", justify="right")
    table.add_column("SLA")
    for row in result.rows:
        cells = []
        for point in row.points:
            cells += [f"{point.throughput:.0f}", f"{point.p99_ms:.1f}"]
        mark = "chosen" if row is result.chosen else ("ok" if row.meets_sla else "no")
        label = row.candidate.label() + (" (untuned)" if row.candidate.untuned else "")
        table.add_row(label, *cells, mark)
    return table


def _written(candidate: Candidate) -> dict[str, Any]:
    """The model settings ``tune`` writes for a configuration."""
    return {
        "max_batch_size": candidate.max_batch_size,
        "dynamic_batching": {
            "preferred_batch_size": list(candidate.preferred_batch_size) or None,
            "max_queue_delay_microseconds": candidate.max_queue_delay_microseconds,
        },
        "instance_group": {"count": candidate.instances},
    }


@triton_app.command("tune")
def tune(
    model: Annotated[str, typer.Option(help="The model's name in the stack or site")],
    p99_ms: Annotated[str, typer.Option("--p99-ms", help="SLA: P99 latency bound (ms)")],
    stack: Annotated[str | None, typer.Option(help=STACK_HELP)] = None,
    site: Annotated[
        Path | None, typer.Option(parser=parse_site, help="A site inventory directory")
    ] = None,
    min_throughput: Annotated[
        str | None, typer.Option(help="SLA: least inferences/s at the highest concurrency")
    ] = None,
    concurrency: Annotated[str, typer.Option(help="Concurrency levels, e.g. 1,8,16")] = "1,8,16",
    max_batch_size: Annotated[str, typer.Option(help="max_batch_size values swept")] = "8,32",
    queue_delay_us: Annotated[
        str, typer.Option(help="max_queue_delay_microseconds values swept")
    ] = "200,1000",
    instances: Annotated[str, typer.Option(help="Instance counts swept")] = "1,2",
    url: Annotated[
        str | None,
        typer.Option(
            help="gRPC address of a Triton in explicit model control mode serving the model "
            f"(its admin key from ${ADMIN_KEY_ENV}); default: a local Triton with a stand-in of "
            "known cost"
        ),
    ] = None,
    stand_in_cost_us: Annotated[
        str, typer.Option(help="Local stand-in: microseconds per batch and per item")
    ] = "10000,500",
    write: Annotated[
        bool, typer.Option("--write/--dry-run", help="Write the chosen settings into the file")
    ] = True,
) -> None:
    """Sweep batching and instances with perf_analyzer; write the best config that meets the SLA."""
    from gpuinfra import modeledit
    from gpuinfra.addons import triton as spec
    from gpuinfra.lab import tune as tune_mod
    from gpuinfra.loading import display_path

    # Every option is checked before a file is read or a server started.
    bound = _number(
        p99_ms, "--p99-ms", "a number of milliseconds above 0, e.g. 200 or 12.5", above_zero=True
    )
    least = (
        None
        if min_throughput is None
        else _number(
            min_throughput,
            "--min-throughput",
            "a number of inferences/s of 0 or more, e.g. 250",
            above_zero=False,
        )
    )
    # The values land in the model config's int32 and uint64 fields.
    grid = tune_mod.Grid(
        max_batch_sizes=tuple(_levels(max_batch_size, "--max-batch-size", spec.INT32_MAX, "8,32")),
        queue_delays_us=tuple(
            _levels(queue_delay_us, "--queue-delay-us", spec.UINT64_MAX, "200,1000")
        ),
        instance_counts=tuple(_levels(instances, "--instances", spec.INT32_MAX, "1,2")),
    )
    levels = _levels(concurrency, "--concurrency", spec.INT32_MAX, "1,8,16")
    cost = _stand_in_cost(stand_in_cost_us)
    if url is not None:
        _grpc_address(url)
    settings, where, source, records = _source(stack, site)
    found = [m for m in settings.models if m.name == model]
    if not found:
        names = ", ".join(m.name for m in settings.models) or "none"
        raise UsageError(f"{display_path(where.path)}: no model {model!r} (models: {names})")
    # A file config check refuses is refused now, not after minutes of measuring; so are
    # settings the file shares with another model through an anchor.
    _check_edit(stack, site, where, where.path.read_text("utf-8"))
    modeledit.check_shared(where, model, _written(tune_mod.untuned(found[0])))
    record = records / "tuning" / f"{source}-{model}.json"
    _check_record(record)
    # The local stand-in is open; a server given by --url may restrict loading to its admin key.
    headers = _admin_headers() if url is not None else {}
    try:
        result = tune_mod.tune(
            found[0],
            tune_mod.Sla(bound, least),
            levels,
            grid=grid,
            url=url,
            stand_in_cost_us=cost,
            progress=lambda label: say(f"measuring {label}"),
            headers=headers,
        )
    except tune_mod.AdminKeyRefused as refused:
        raise ToolError(_admin_refusal(refused.message, settings, bool(headers))) from None
    out.print(_table(result))
    baseline = result.baseline.at_highest().throughput
    say(
        f"{len(result.rows)} configurations x {len(result.concurrency)} concurrency levels in "
        f"{result.seconds:.0f} s on Triton {result.triton_version}"
    )
    if result.chosen is None:
        if write:
            _record(record, result)
        raise CheckFailed(
            [
                f"no configuration of {model} meets P99 <= {bound:g} ms"
                + (f" with >= {least:g} infer/s" if least else "")
                + (
                    f"; measurement in {display_path(record)}"
                    if write
                    else "; dry run: nothing written"
                )
            ]
        )
    best = result.chosen.candidate
    gain = result.chosen.at_highest().throughput / baseline if baseline else float("inf")
    highest = max(result.concurrency)
    say(f"chosen: {best.label()} ({gain:.1f}x the untuned throughput at c={highest})")
    if best.untuned:
        say("the model's current settings are already the best: nothing to change")
        if write:
            _record(record, result)
        else:
            say("dry run: nothing written")
        return
    before, after = modeledit.edit(where, model, _written(best))
    _check_edit(stack, site, where, after)
    shown = display_path(where.path)
    for line in difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"a/{shown}", f"b/{shown}", lineterm=""
    ):
        say(line)
    if not write:
        say("dry run: nothing written")
        return
    # The measurement first: a file it cannot write leaves the settings as they were.
    _record(record, result)
    where.path.write_text(after, "utf-8")
    say(f"wrote {shown} and {display_path(record)}")


@triton_app.command("canary")
def canary(
    group: Annotated[str, typer.Argument(help="The serving group whose canary to weigh")],
    weight: Annotated[
        int | None,
        typer.Argument(
            parser=parse_whole, help="Percent of the group's traffic the canary gets, 0 to 100"
        ),
    ] = None,
    stack: Annotated[str | None, typer.Option(help=STACK_HELP)] = None,
    site: Annotated[
        Path | None, typer.Option(parser=parse_site, help="A site inventory directory")
    ] = None,
    remove: Annotated[
        bool, typer.Option("--remove", help="Roll back: delete the canary and its pods")
    ] = False,
    write: Annotated[
        bool, typer.Option("--write/--dry-run", help="Write the change into the file")
    ] = True,
) -> None:
    """Shift a serving group's traffic to its canary (0 rolls back), as a reviewable change."""
    from gpuinfra import modeledit
    from gpuinfra.loading import display_path

    if remove == (weight is not None):
        raise UsageError("give exactly one of WEIGHT (0 to 100) or --remove")
    settings, where, _, _ = _source(stack, site, "serving_groups")
    before, after = modeledit.canary_weight(where, settings, group, None if remove else weight)
    _check_edit(stack, site, where, after)
    shown = display_path(where.path)
    if not settings.enabled:
        switch = "triton.enabled" if stack is not None else "triton_enabled"
        warn(f"Triton is off ({switch}: false): no route carries this weight until it is on")
    for line in difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"a/{shown}", f"b/{shown}", lineterm=""
    ):
        say(line)
    if not write:
        say("dry run: nothing written")
        return
    where.path.write_text(after, "utf-8")
    say(f"wrote {shown}: review it with `gpuinfra diff`")


def _admin_headers() -> dict[str, str]:
    """The gRPC metadata carrying the admin key, or none where the variable is unset."""
    from gpuinfra.addons import triton as spec

    key = os.environ.get(ADMIN_KEY_ENV, "")
    if not key:
        return {}
    if not (key.isascii() and key.isprintable()) or key != key.strip():
        raise UsageError(
            f"{ADMIN_KEY_ENV}: not a header value (allowed: printable ASCII, no space at either "
            "end)"
        )
    return {spec.ADMIN_GRPC_HEADER: key}


def _admin_refusal(what: str, settings: TritonSettings, sent: bool) -> str:
    """One line for a server that refused a request for the admin key; never the key itself."""
    from gpuinfra.addons import triton as spec

    secret = (
        f"key {settings.admin_secret_key} of Secret {settings.namespace}/{settings.admin_secret}"
    )
    if sent:
        return (
            f"{what}: {ADMIN_KEY_ENV} is not its admin key (the {spec.ADMIN_HEADER} header; "
            f"{secret})"
        )
    return (
        f"{what}: it requires the admin key in the {spec.ADMIN_HEADER} header; set "
        f"{ADMIN_KEY_ENV} to the value of {secret}"
    )


# Seconds ``triton verify`` waits for a server's repository index.
VERIFY_TIMEOUT = 10.0
_NO_ANSWER = ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")

_GRPC_ADDRESS = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})", re.ASCII)


def _grpc_address(url: str) -> None:
    """``--url``: a gRPC address, HOST:PORT (an IPv6 host in brackets), without a scheme."""
    found = _GRPC_ADDRESS.fullmatch(url)
    if found is None or not 1 <= int(found.group(1)) <= 65535:
        raise UsageError(
            f"--url {excerpt(repr(url), 60)}: not a gRPC address (allowed: HOST:PORT with a port "
            "of 1-65535, e.g. 127.0.0.1:8001, without http://)"
        )


@triton_app.command("verify")
def verify(
    url: Annotated[
        str,
        typer.Option(
            help=f"gRPC address of the Triton to check, HOST:PORT (its admin key from "
            f"${ADMIN_KEY_ENV})"
        ),
    ],
    stack: Annotated[str | None, typer.Option(help=STACK_HELP)] = None,
    site: Annotated[
        Path | None, typer.Option(parser=parse_site, help="A site inventory directory")
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(help="The Deployment checked: triton-<group> or triton-<group>-canary"),
    ] = None,
) -> None:
    """Compare a running Triton's repository index with the declared version policies."""
    from tritonclient.grpc import InferenceServerClient
    from tritonclient.utils import InferenceServerException

    from gpuinfra.addons import triton as spec

    _grpc_address(url)
    settings, _, source, _ = _source(stack, site)
    groups = {g.name: g for g in spec.groups(settings)}
    if group is None and len(groups) > 1:
        raise UsageError(f"--group: give the Deployment checked ({', '.join(groups)})")
    if group is not None and group not in groups:
        raise UsageError(
            f"--group: {group!r} is not a Deployment of {source} ({', '.join(groups)})"
        )
    served = groups[group] if group is not None else next(iter(groups.values()))
    headers = _admin_headers()
    try:
        client = InferenceServerClient(url)
        index = client.get_model_repository_index(
            headers=headers, client_timeout=VERIFY_TIMEOUT
        ).models
    except InferenceServerException as failed:
        # Triton refuses a request without the admin key with UNAVAILABLE, as if it were down.
        if spec.refused_for_admin_key(failed.message() or ""):
            what = f"Triton at {url} refused the repository index"
            raise ToolError(_admin_refusal(what, settings, bool(headers))) from None
        # No index, so nothing was checked: the server does not answer, or not as Triton does.
        status = failed.status() or "error"
        what = "does not answer" if status in _NO_ANSWER else "gave no repository index"
        raise ToolError(f"Triton at {url} {what}: {status}: {failed.message()}") from None
    entries = [(m.name, int(m.version), m.state) for m in index if m.version]
    problems = spec.index_problems(list(served.models), entries)
    for name, version, state in sorted(entries):
        say(f"{name} {version}: {state}")
    if problems:
        raise CheckFailed(f"{url}: {p}" for p in problems)
    say(f"{url}: every model of {source} serves the versions its policy declares")


@triton_app.command("repository")
def repository(
    stack: Annotated[str | None, typer.Option(help=STACK_HELP)] = None,
    site: Annotated[
        Path | None, typer.Option(parser=parse_site, help="A site inventory directory")
    ] = None,
    endpoint_url: Annotated[
        str | None, typer.Option(help="An S3-compatible endpoint instead of AWS's")
    ] = None,
) -> None:
    """Check an S3 model repository against every version policy some pod serves."""
    from gpuinfra.addons import triton as spec
    from gpuinfra.ops.http import server

    if endpoint_url is not None:
        # The option's mistake is the user's: checked before the site or the network.
        try:
            server("--endpoint-url", endpoint_url)
        except UsageError:
            raise UsageError(
                f"--endpoint-url {excerpt(repr(endpoint_url), 60)}: not an S3 endpoint (allowed: "
                "an http:// or https:// URL with a host, a port 1-65535 where given, no query)"
            ) from None
    settings, _, source, _ = _source(stack, site)
    if not settings.enabled:
        raise UsageError(f"{source}: Triton is not enabled there; no model repository to check")
    repo = settings.model_repository
    if repo is None or repo.s3 is None:
        raise UsageError(
            f"{source}: triton.modelRepository is not an S3 URI; a PVC repository is checked "
            "by the Triton pod's init container when it starts"
        )
    bucket, _, prefix = repo.s3.removeprefix("s3://").partition("/")
    keys = _s3_keys(bucket, prefix, repo.region, endpoint_url, source)
    models = spec.served_models(settings)
    problems = spec.repository_problems(models, keys, prefix)
    if problems:
        raise CheckFailed(problems)
    say(f"{repo.s3}: {len(keys)} objects; every version policy of {source} finds its versions")
    for model in models:
        say(f"  {model.name}: version_policy {model.version_policy.describe()}")


def _s3_keys(
    bucket: str, prefix: str, region: str | None, endpoint_url: str | None, source: str
) -> list[str]:
    """Every key under the prefix, within the bounds of ``gpuinfra.ops.s3``.

    A bucket that does not exist is the check's finding (exit 1); no credentials, no answer or
    a refusal (access denied, an expired token) mean it could not look (exit 3).
    """
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        InvalidRegionError,
        NoCredentialsError,
        ParamValidationError,
    )

    from gpuinfra.ops import s3

    where = f"s3://{bucket}/{prefix}"
    try:
        client = s3.client(region, endpoint_url)
    except InvalidRegionError:
        raise UsageError(
            f"{source}: triton.modelRepository.region {excerpt(repr(region), 40)}: not an AWS "
            "region name (allowed: e.g. us-east-1)"
        ) from None
    except ValueError as refused:
        raise UsageError(
            f"--endpoint-url {excerpt(repr(endpoint_url), 60)}: {refused} (allowed: an http:// "
            "or https:// URL)"
        ) from None
    try:
        return s3.list_keys(client, bucket, prefix)
    except ClientError as failed:
        error = failed.response.get("Error", {})
        code = error.get("Code", "error")
        line = f"{where}: {code}: {error.get('Message', '')}"
        if code == "NoSuchBucket":
            raise CheckFailed([line]) from None
        raise ToolError(line) from None
    except NoCredentialsError as failed:
        raise ToolError(
            f"{where}: {failed}; give AWS credentials as the AWS CLI reads them "
            "(AWS_PROFILE, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, an instance role)"
        ) from None
    except ParamValidationError as failed:
        raise UsageError(f"{source}: triton.modelRepository.s3 {where}: {failed}") from None
    except BotoCoreError as failed:
        raise ToolError(f"{where}: {failed}") from None


def _check_record(path: Path) -> None:
    """Refuse, before anything is measured, a measurement file that could not be written: a
    file where its folder goes, or a folder where it goes."""
    from gpuinfra.loading import display_path

    for folder in reversed(path.parents):
        if (folder.exists() or folder.is_symlink()) and not folder.is_dir():
            raise UsageError(
                f"{display_path(folder)}: not a directory, and the measurement is written "
                f"into it as {display_path(path)} (move it away)"
            )
    if path.is_dir():
        raise UsageError(
            f"{display_path(path)}: a directory where the measurement is written (move it away)"
        )


def _record(path: Path, result: Result) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.document(), indent=2) + "\n", "utf-8")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gpuinfra` app."""
    app.add_typer(triton_app, name="triton")
