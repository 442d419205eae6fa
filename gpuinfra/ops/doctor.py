"""The morning check: one list of items, each ok, failed or skipped, from the live cluster.

What is checked, and against what the stack or site declares:

- GPU nodes: Ready, and allocatable ``nvidia.com/gpu`` equal to the GPUs declared for them
  (a node pool's instance type, a site host's ``gpu_node_check_expected_gpu_count``; without a
  declaration, GPU Feature Discovery's ``nvidia.com/gpu.count`` label); on an EFA pool's nodes,
  allocatable ``vpc.amazonaws.com/efa`` equal to the instance type's interfaces;
- Triton: its Deployment's replicas ready, and every declared model version loaded (Triton
  exports per-version metrics for each loaded version);
- Prometheus: DCGM exporter targets up (at least one), and no target failing its scrape;
- Alertmanager: no critical or warning alert firing unsilenced;
- the latest node check reports, as ``gpuinfra converge --report-json`` or the role writes them,
  and the hosts converge found unreachable or failed before their check.

Each source is read only when its option is given; an item that cannot be judged says why. A
server that cannot be read (it does not answer, refuses the request, or is not what it should be)
is one unread item, and the other sources are still checked.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import queue
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from gpuinfra import processes
from gpuinfra.addons.base import EFA_RESOURCE, GPU_RESOURCE, GPU_TYPE_LABEL
from gpuinfra.addons.gpu_operator import DCGM_EXPORTER_JOB
from gpuinfra.addons.triton import NAME as TRITON_NAME
from gpuinfra.addons.triton import TritonSettings
from gpuinfra.addons.triton import groups as triton_groups
from gpuinfra.errors import ToolError, UsageError, excerpt
from gpuinfra.integrity import Nodes
from gpuinfra.loading import load_yaml
from gpuinfra.ops.http import TIMEOUT_S, Deadline, Server, not_within, read_bounded, server, watch
from gpuinfra.ops.prometheus import Prometheus

Status = Literal["ok", "fail", "skip", "unread"]
T = TypeVar("T")

# How long a kubeconfig user's exec plugin may take to print its credential. The client waits
# forever: a plugin that waits on a network that does not answer would hold the command.
EXEC_PLUGIN_TIMEOUT_S = 30.0
# How long reading the kubeconfig may take in all: its user's exec plugin, or the token refresh
# of an OIDC auth-provider, which asks the issuer twice without a timeout of its own.
CREDENTIALS_TIMEOUT_S = EXEC_PLUGIN_TIMEOUT_S + TIMEOUT_S
DCGM_JOB = DCGM_EXPORTER_JOB
# GPU Feature Discovery's count of the node's physical GPUs.
GFD_COUNT_LABEL = "nvidia.com/gpu.count"
NOTIFYING = ("critical", "warning")
# Alerts that fire by design: the dead man's switch and the chart's info-level helper.
ALWAYS_FIRING = ("Watchdog", "InfoInhibitor")
# A node check report older than this is not "the latest" any more.
STALE_REPORT_S = 24 * 3600
# A report stamped further ahead of this machine's clock was written by a host whose clock (or
# this machine's) is wrong; NTP keeps a synchronized pair within a fraction of a second.
CLOCK_AHEAD_S = 5 * 60


@dataclass(frozen=True)
class Item:
    check: str
    subject: str
    status: Status
    detail: str


@dataclass(frozen=True)
class Declared:
    """What the stack or site declares: its GPU node kinds and Triton's settings."""

    nodes: tuple[Nodes, ...] = ()
    triton: TritonSettings | None = None
    # A site names each GPU host (its node is named after it); a stack has pools.
    by_host: bool = False


# --- Kubernetes -----------------------------------------------------------------------------------


class _Answer:
    """A body in the shape the client's ``deserialize`` reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def check_kubeconfig(kubeconfig: Path) -> None:
    """UsageError when ``kubeconfig`` is not a file holding a mapping: the checks needing no client."""
    if kubeconfig.is_dir():
        raise UsageError(f"--kubeconfig {kubeconfig}: a directory (allowed: a kubeconfig file)")
    if not kubeconfig.is_file():
        raise UsageError(f"--kubeconfig {kubeconfig}: no such file")
    if not isinstance(load_yaml(kubeconfig), dict):
        raise UsageError(
            f"--kubeconfig {kubeconfig}: not a kubeconfig (allowed: a mapping with clusters, "
            "users, contexts and current-context)"
        )


def kubernetes_objects(kubeconfig: Path, triton: TritonSettings | None) -> dict[str, Any]:
    """Nodes (and Triton's Deployments) from the API server the kubeconfig names.

    The kubernetes client reads the kubeconfig (TLS, tokens, exec plugins) and checks each answer
    against its models; the requests are made here, once each, and read within the bounds of
    ``gpuinfra.ops.http``: the client's own retries four times a server that never answers.
    The file is one that ``check_kubeconfig`` passed."""
    import urllib3
    import yaml
    from kubernetes import config

    try:
        # persist_config=False: a token the client refreshes is not written back to the file.
        with _exec_plugin_failures() as failures, _exec_plugin_bounded(EXEC_PLUGIN_TIMEOUT_S):
            api = _within(
                CREDENTIALS_TIMEOUT_S,
                lambda: config.new_client_from_config(
                    config_file=str(kubeconfig), persist_config=False
                ),
                f"--kubeconfig {kubeconfig}: the user's credentials did not load within "
                f"{CREDENTIALS_TIMEOUT_S:.0f} s (an OIDC issuer or an exec plugin that does not "
                "answer)",
            )
    # The client reads the file as it finds it: YAML that does not parse, or a list or a
    # number where a mapping goes, fails inside it.
    except (
        config.ConfigException,
        yaml.YAMLError,
        UnicodeDecodeError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
    ) as exc:
        reason = excerpt(" ".join(str(exc).split()), 160)
        raise UsageError(f"--kubeconfig {kubeconfig}: not a usable kubeconfig: {reason}") from None
    if failures:
        api.close()
        reason = excerpt(" ".join(failures[0].split()), 160)
        raise ToolError(f"--kubeconfig {kubeconfig}: the user's exec plugin failed: {reason}")
    # A cluster with insecure-skip-tls-verify: the user chose not to check the server's
    # certificate, and urllib3's two-line warning on each request would break the one line per
    # unread server. The filter holds for the whole process while the requests run; the other
    # sources' reads (urllib) warn of nothing meanwhile.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        try:
            found: dict[str, Any] = {"nodes": _kubernetes_get(api, "/api/v1/nodes", "V1NodeList")}
            if triton is not None and triton.enabled:
                # One Deployment per serving group (and canary), each read by name.
                found["triton"] = {
                    group.name: _kubernetes_get(
                        api,
                        f"/apis/apps/v1/namespaces/{triton.namespace}/deployments/{group.name}",
                        "V1Deployment",
                        missing_ok=True,
                    )
                    for group in triton_groups(triton)
                }
        finally:
            api.close()
    return found


def _within(seconds: float, load: Callable[[], T], why: str) -> T:
    """``load()``'s result, or ToolError(why) when it has not returned after ``seconds``.

    The client's OIDC refresh waits on its sockets for good and cannot be interrupted: it runs
    in a daemon thread, left behind when it does not return, which the command's exit ends."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(load())
        except BaseException as exc:  # re-raised in the caller's thread
            error.append(exc)

    thread = threading.Thread(target=run, name="kubeconfig", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise ToolError(why)
    if error:
        raise error[0]
    return result[0]


@contextmanager
def _exec_plugin_failures() -> Iterator[list[str]]:
    """The errors the client logs while it runs the user's exec plugin, collected.

    The client logs a plugin that is missing, fails or answers without a credential, and goes
    on without one: every request would then be refused, or the API would be asked as nobody.
    While a handler is on the root logger, nothing is printed in its place."""
    failures: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            failures.append(record.getMessage())

    handler = Collect(logging.ERROR)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield failures
    finally:
        root.removeHandler(handler)


@contextmanager
def _exec_plugin_bounded(timeout: float) -> Iterator[None]:
    """The client's exec plugin run ends after ``timeout`` seconds, with the error it logs.

    The client starts the plugin with ``subprocess.Popen`` and reads it to the end without a
    bound; its module sees a ``Popen`` here whose ``communicate`` has one. A plugin run without a
    terminal gets a session of its own, so that what it started ends with it; one run at a
    terminal (a login prompt) keeps the terminal and is ended alone."""
    from kubernetes.config import ConfigException, exec_provider

    class BoundedPopen(subprocess.Popen[str]):
        def __init__(self, args: Any, **kwargs: Any) -> None:
            self._own_session = kwargs.get("stdin") is None
            super().__init__(args, start_new_session=self._own_session, **kwargs)

        def communicate(self, input: Any = None, timeout: float | None = None) -> Any:
            try:
                return super().communicate(input, timeout=timeout or limit)
            except subprocess.TimeoutExpired:
                self._end()
                raise ConfigException(f"exec: no credential within {limit:.0f} s") from None

        def _end(self) -> None:
            processes.end(self, group=self._own_session)

    limit = timeout
    shim = type("subprocess", (), {"Popen": BoundedPopen, "PIPE": subprocess.PIPE})
    original = exec_provider.subprocess
    exec_provider.subprocess = shim
    try:
        yield
    finally:
        exec_provider.subprocess = original


def _kubernetes_get(
    api: Any, path: str, model: str, *, missing_ok: bool = False
) -> dict[str, Any] | None:
    """GET ``path`` as the client would, bounded in time and size, as the JSON the API sent;
    None for a 404 when ``missing_ok``. ToolError for a server that fails or is not the API."""
    import urllib3

    server = api.configuration.host
    source = f"Kubernetes API at {server}"
    url = f"{server}{path}"
    headers = {"Accept": "application/json", **api.default_headers}
    api.update_params_for_auth(headers, [], ["BearerToken"])
    pool = api.rest_client.pool_manager.connection_from_url(url)
    pool.ConnectionCls = _watched(type(pool).ConnectionCls)
    with Deadline() as deadline:
        try:
            response = api.rest_client.pool_manager.request(
                "GET",
                url,
                headers=headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=TIMEOUT_S, read=TIMEOUT_S),
                retries=False,
            )
            try:
                # What has come, as it comes: stream() waits for a whole chunk of 64 KiB.
                body = read_bounded(iter(lambda: response.read1(1 << 16), b""), source)
            finally:
                # Not kept for the next request: a deadline watches the connections its own
                # request opens.
                response.close()
                response.release_conn()
        # urllib3 derives a refused connection from its connect timeout: it comes first.
        except urllib3.exceptions.NewConnectionError as exc:
            reason = str(exc).rpartition("Failed to establish a new connection: ")[2]
            raise ToolError(f"{source} does not answer: {reason}") from None
        except urllib3.exceptions.TimeoutError:
            raise ToolError(f"{source} does not answer within {TIMEOUT_S:.0f} s") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if deadline.expired:
                raise not_within(source) from None
            reason = excerpt(" ".join(str(exc).split()), 160)
            raise ToolError(f"{source} does not answer: {reason}") from None
    # An answer the deadline cut short ends as if complete.
    if deadline.expired:
        raise not_within(source)
    if response.status == 404 and missing_ok:
        return None
    if not 200 <= response.status < 300:
        raise ToolError(f"{source}: HTTP {response.status}: {_status_message(body, response)}")
    try:
        # The client builds its model from the answer: a page or JSON of another server
        # (a proxy, a port that is not the API server's) has none of its fields.
        checked = api.deserialize(_Answer(body), model)
        if not isinstance(json.loads(body), dict):
            raise ValueError(model)
    except (ValueError, TypeError, AttributeError):
        raise ToolError(f"{source}: the answer is not what the Kubernetes API returns") from None
    document: dict[str, Any] = api.sanitize_for_serialization(checked)
    return document


@functools.cache
def _watched(connection: type) -> type:
    """``connection`` (a urllib3 connection class), its sockets watched by the deadline active
    in the thread that opens them, from before the TLS handshake."""

    class Watched(connection):  # type: ignore[misc]
        def _new_conn(self) -> Any:
            sock = super()._new_conn()
            watch(sock)
            return sock

    return Watched


def _status_message(body: bytes, response: Any) -> str:
    """What a failed request's answer says: the API's Status message, else the HTTP reason."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    if isinstance(message, str) and message.strip():
        return excerpt(" ".join(message.split()), 160)
    return str(response.reason or "no reason given")


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _count(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _declared_kind(node: Mapping[str, Any], declared: Declared) -> Nodes | None:
    """The declared kind of GPU node this node is: a site's host by name, a stack's pool by its
    labels; None where none declares a number of GPUs for it."""
    meta = node.get("metadata", {})
    labels = meta.get("labels") or {}
    for kind in declared.nodes:
        gpus = kind.allocatable.get(GPU_RESOURCE)
        if gpus is None or gpus <= 0 or gpus == float("inf"):
            continue
        if declared.by_host:
            if kind.name == f"host {meta.get('name')}":
                return kind
        elif kind.labels and all(labels.get(k) == v for k, v in kind.labels.items()):
            return kind
    return None


def _declared_gpus(node: Mapping[str, Any], declared: Declared) -> tuple[int | None, str]:
    """The GPUs the node should offer, and where that number comes from."""
    kind = _declared_kind(node, declared)
    if kind is not None:
        return int(kind.allocatable[GPU_RESOURCE]), kind.name
    labels = node.get("metadata", {}).get("labels") or {}
    gfd = _count(labels.get(GFD_COUNT_LABEL))
    return gfd, f"label {GFD_COUNT_LABEL}" if gfd is not None else ""


def _is_gpu_node(node: Mapping[str, Any], declared: Declared) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    status = node.get("status", {})
    return (
        GPU_RESOURCE in (status.get("capacity") or {})
        or GPU_TYPE_LABEL in labels
        or GFD_COUNT_LABEL in labels
        or _declared_gpus(node, declared)[1].startswith(("node pool", "host"))
    )


def node_items(nodes_list: Mapping[str, Any], declared: Declared) -> list[Item]:
    items: list[Item] = []
    nodes = [n for n in nodes_list.get("items") or [] if _is_gpu_node(n, declared)]
    names = {n.get("metadata", {}).get("name") for n in nodes}
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        allocatable = node.get("status", {}).get("allocatable") or {}
        have = _count(allocatable.get(GPU_RESOURCE)) or 0
        want, source = _declared_gpus(node, declared)
        # An EFA pool's interfaces reach pods only through the EFA device plugin.
        kind = _declared_kind(node, declared)
        efa = int(kind.allocatable.get(EFA_RESOURCE, 0)) if kind is not None else 0
        efa_have = _count(allocatable.get(EFA_RESOURCE)) or 0
        problems = []
        if not _ready(node):
            problems.append("not Ready")
        if node.get("spec", {}).get("unschedulable"):
            problems.append("cordoned")
        if want is not None and have != want:
            problems.append(f"allocatable {GPU_RESOURCE} {have}, declared {want} ({source})")
        if efa and efa_have != efa:
            problems.append(
                f"allocatable {EFA_RESOURCE} {efa_have}, declared {efa} ({source}): is the EFA "
                "device plugin running there?"
            )
        detail = "; ".join(problems) or (
            f"Ready, {have} GPU{'' if have == 1 else 's'}"
            + (f" and {efa} EFA interfaces" if efa else "")
            + " allocatable"
            + (f" as declared ({source})" if want else "")
        )
        items.append(Item("gpu-node", name, "fail" if problems else "ok", detail))
    if declared.by_host:
        for kind in declared.nodes:
            host = kind.name.removeprefix("host ")
            if kind.name.startswith("host ") and host not in names:
                items.append(Item("gpu-node", host, "fail", "declared GPU host has no node"))
    if not items:
        items.append(Item("gpu-node", "-", "fail", "no GPU node in the cluster"))
    return items


def triton_items(found: Mapping[str, Any], settings: TritonSettings) -> list[Item]:
    """Each serving group's Deployment, as read (None where it is not found)."""
    return [
        triton_deployment_item(found.get(g.name), settings, g.name) for g in triton_groups(settings)
    ]


def triton_deployment_item(
    deployment: Mapping[str, Any] | None, settings: TritonSettings, name: str = TRITON_NAME
) -> Item:
    subject = f"{settings.namespace}/{name}"
    if deployment is None:
        return Item("triton", subject, "fail", "Deployment not found")
    want = deployment.get("spec", {}).get("replicas", 1)
    ready = deployment.get("status", {}).get("readyReplicas") or 0
    status: Status = "ok" if ready >= want and want > 0 else "fail"
    return Item("triton", subject, status, f"{ready} of {want} replicas ready")


# --- Prometheus -----------------------------------------------------------------------------------


def target_items(prometheus: Prometheus) -> list[Item]:
    targets = prometheus.targets()
    dcgm = [t for t in targets if t.job == DCGM_JOB]
    items = [
        Item(
            "dcgm-exporter",
            t.instance,
            "ok" if t.health == "up" else "fail",
            "up" if t.health == "up" else f"{t.health}: {t.last_error or 'not scraped yet'}",
        )
        for t in sorted(dcgm, key=lambda t: t.instance)
    ]
    if not dcgm:
        items.append(Item("dcgm-exporter", "-", "fail", f"no target of job {DCGM_JOB}"))
    failing = [t for t in targets if t.health != "up" and t.job != DCGM_JOB]
    items += [
        Item("scrape", f"{t.job} {t.instance}", "fail", t.last_error or t.health)
        for t in sorted(failing, key=lambda t: (t.job, t.instance))
    ]
    if not failing:
        items.append(Item("scrape", "-", "ok", f"all {len(targets)} targets up"))
    return items


def model_items(prometheus: Prometheus, settings: TritonSettings) -> list[Item]:
    loaded: dict[str, set[str]] = {}
    for sample in prometheus.query("count by (model, version) (nv_inference_request_success)"):
        loaded.setdefault(sample.labels.get("model", ""), set()).add(
            sample.labels.get("version", "")
        )
    items = []
    for model in settings.models:
        have = loaded.get(model.name, set())
        policy = model.version_policy
        if policy.policy == "specific":
            want = {str(v) for v in policy.versions}
            missing = sorted(want - have, key=int)
            status: Status = "fail" if missing else "ok"
            detail = (
                f"version(s) {', '.join(missing)} not loaded"
                + (f" (loaded: {', '.join(sorted(have))})" if have else "")
                if missing
                else f"version(s) {', '.join(sorted(want, key=int))} loaded"
            )
        else:
            status = "ok" if have else "fail"
            detail = f"loaded version(s) {', '.join(sorted(have))}" if have else "no version loaded"
        items.append(Item("triton-model", model.name, status, detail))
    return items


# --- Alertmanager ---------------------------------------------------------------------------------


def alert_items(alertmanager: Server) -> list[Item]:
    alerts = alertmanager.get_json(
        "/api/v2/alerts",
        {"active": "true", "silenced": "false", "inhibited": "false"},
        what="Alertmanager",
    )
    # Another service, or a proxy's page, can answer JSON that is no list of alerts.
    if not isinstance(alerts, list) or not all(
        isinstance(a, dict)
        and isinstance(a.get("labels"), dict)
        and isinstance(a.get("annotations") or {}, dict)
        for a in alerts
    ):
        raise ToolError(
            f"Alertmanager at {alertmanager.url}/api/v2/alerts: the answer is not a list of alerts"
        )
    items = []
    for alert in alerts:
        labels = alert["labels"]
        name = str(labels.get("alertname", ""))
        severity = str(labels.get("severity", ""))
        if name in ALWAYS_FIRING or severity not in NOTIFYING:
            continue
        where = labels.get("Hostname") or labels.get("instance") or labels.get("namespace", "")
        summary = (alert.get("annotations") or {}).get("summary", "")
        subject = f"{name} {where}".strip()
        items.append(Item("alert", subject, "fail", f"{severity} since "
                          f"{str(alert.get('startsAt') or '?')[:19]}: {summary}".rstrip(": ")))  # fmt: skip
    if not items:
        items.append(Item("alert", "-", "ok", "no critical or warning alert firing"))
    return items


# --- node check reports ---------------------------------------------------------------------------


def _checked(file: Path, where: str, report: Any) -> dict[str, Any]:
    """``report`` when it is a node check report: its checks a list, each with a name."""
    if isinstance(report, dict):
        checks = report.get("checks")
        if isinstance(checks, list) and all(
            isinstance(c, dict) and isinstance(c.get("name"), str) for c in checks
        ):
            return report
    raise UsageError(
        f"--node-checks {file}: {where}checks: not a node check report's checks "
        "(allowed: a list of checks, each with a name and a status)"
    )


def _checked_at(file: Path, where: str, report: dict[str, Any], mtime: float) -> float:
    """When the check ran: the report's own ``checked_at``, which a copy of the file keeps (an
    artifact download or a plain ``scp`` gives the copy a new modification time); for a report
    written before that field, the file's modification time."""
    stamp = report.get("checked_at")
    if stamp is None:
        return mtime
    try:
        moment = dt.datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise UsageError(
            f"--node-checks {file}: {where}checked_at: {excerpt(repr(stamp), 60)} is not a time "
            "(allowed: ISO 8601 with its zone, e.g. 2026-12-01T06:00:00Z)"
        )
    return moment.timestamp()


def _report_of(file: Path, where: str, report: Any, mtime: float) -> tuple[dict[str, Any], float]:
    checked = _checked(file, where, report)
    return checked, _checked_at(file, where, checked, mtime)


def _reports(path: Path) -> dict[str, tuple[dict[str, Any] | str, float]]:
    """Each host's latest node check report and when its check ran; for a host that
    converge's report says was unreachable or failed, and has no node check report, why."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files or not files[0].exists():
        raise UsageError(f"--node-checks {path}: no such file or no *.json in the directory")
    found: dict[str, tuple[dict[str, Any] | str, float]] = {}
    for file in files:
        try:
            document = json.loads(file.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"--node-checks {file}: not a JSON report ({exc})") from None
        mtime = file.stat().st_mtime
        if isinstance(document, dict) and isinstance(document.get("reports"), dict):
            recap = document.get("recap")
            for host, counts in (recap if isinstance(recap, dict) else {}).items():
                if isinstance(counts, dict) and (counts.get("failures") or counts.get("dark")):
                    how = "unreachable" if counts.get("dark") else "failed"
                    found[str(host)] = (f"{how} in converge, no node check report", mtime)
            found.update(
                {
                    str(h): _report_of(file, f"reports.{h}.", r, mtime)
                    for h, r in document["reports"].items()
                }
            )
        elif isinstance(document, dict) and "checks" in document:
            found[str(document.get("host") or file.stem)] = _report_of(file, "", document, mtime)
        else:
            raise UsageError(
                f"--node-checks {file}: neither a node check report nor converge's --report-json"
            )
    return found


def node_check_items(path: Path, now: float | None = None) -> list[Item]:
    items = []
    moment = time.time() if now is None else now
    for host, (report, checked_at) in sorted(_reports(path).items()):
        if isinstance(report, str):
            items.append(Item("node-check", host, "fail", report))
            continue
        failed = [c for c in report["checks"] if c.get("status") == "fail"]
        # A report stamped a little ahead of this machine's clock is just taken.
        age_h = max(0.0, moment - checked_at) / 3600
        if failed:
            names = ", ".join(f"{c['name']} ({c.get('detail', '')})" for c in failed)
            items.append(Item("node-check", host, "fail", f"failed: {names}"))
        elif checked_at - moment > CLOCK_AHEAD_S:
            # Its age cannot be told, and a clock that far off breaks TLS and log order too.
            detail = (
                f"report is stamped {_span(checked_at - moment)} ahead of this machine's clock: "
                "the host's clock or this one is wrong"
            )
            items.append(Item("node-check", host, "fail", detail))
        elif report.get("gpu_present") is False:
            items.append(Item("node-check", host, "skip", "no GPU present"))
        elif moment - checked_at > STALE_REPORT_S:
            items.append(Item("node-check", host, "fail", f"report is {age_h:.0f} h old"))
        else:
            items.append(Item("node-check", host, "ok", f"all checks pass ({age_h:.1f} h ago)"))
    if not items:
        # "all ok" would say every node passed its checks when none was read.
        items.append(Item("node-check", "-", "fail", f"no node check report in {path}"))
    return items


def _span(seconds: float) -> str:
    """A time span as people read it: 7 min, 3.0 h, 2.5 d."""
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 24 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


# --- all of it ------------------------------------------------------------------------------------


def run(
    *,
    declared: Declared,
    kubeconfig: Path | None = None,
    prometheus_url: str | None = None,
    alertmanager_url: str | None = None,
    node_checks: Path | None = None,
) -> list[Item]:
    """Every item the given sources allow; a source not given is one skipped item, a server that
    cannot be read one unread item.

    What the user gave is checked before any server is asked: the URLs, the kubeconfig's file and
    the node check reports, so that a mistake in them is one line (UsageError) and nothing else.
    The servers are then read side by side: when the network does not answer, the command waits
    for one bound, not for one per server."""
    triton = declared.triton if declared.triton and declared.triton.enabled else None
    reports = node_check_items(node_checks) if node_checks is not None else []
    reads: dict[str, Callable[[], list[Item]]] = {}
    if kubeconfig is not None:
        check_kubeconfig(kubeconfig)
        reads["kubernetes"] = lambda: _kubernetes_items(kubeconfig, declared, triton)
    if prometheus_url is not None:
        prometheus = Prometheus(prometheus_url)
        reads["prometheus"] = lambda: _prometheus_items(prometheus, triton)
    if alertmanager_url is not None:
        alertmanager = server("--alertmanager", alertmanager_url)
        reads["alertmanager"] = lambda: alert_items(alertmanager)
    read = _side_by_side(reads)
    skipped = {
        "kubernetes": Item("gpu-node", "-", "skip", "no --kubeconfig"),
        "prometheus": Item("scrape", "-", "skip", "no --prometheus"),
        "alertmanager": Item("alert", "-", "skip", "no --alertmanager"),
    }
    items = [item for source in skipped for item in read.get(source, [skipped[source]])]
    return items + reports


def _kubernetes_items(
    kubeconfig: Path, declared: Declared, triton: TritonSettings | None
) -> list[Item]:
    found = kubernetes_objects(kubeconfig, triton)
    items = node_items(found["nodes"], declared)
    if triton is not None:
        items += triton_items(found.get("triton") or {}, triton)
    return items


def _prometheus_items(prometheus: Prometheus, triton: TritonSettings | None) -> list[Item]:
    items = target_items(prometheus)
    if triton is not None:
        items += model_items(prometheus, triton)
    return items


def _side_by_side(reads: Mapping[str, Callable[[], list[Item]]]) -> dict[str, list[Item]]:
    """Each source's items, the sources read in threads of their own. A source that cannot be
    read (ToolError) is one unread item naming why.

    Any other error (a kubeconfig the client cannot use) is raised as soon as it comes: the
    command ends on it without waiting for the other servers, whose daemon threads it leaves.
    Each read is bounded (``gpuinfra.ops.http``, the kubeconfig's credentials), so every thread
    ends: waiting for all of them takes the longest bound, not their sum."""
    done: queue.Queue[tuple[str, list[Item] | BaseException]] = queue.Queue()

    def read(source: str, load: Callable[[], list[Item]]) -> None:
        try:
            done.put((source, load()))
        except ToolError as exc:
            done.put((source, [Item("source", source, "unread", exc.message)]))
        except BaseException as exc:  # re-raised in the caller's thread
            done.put((source, exc))

    for source, load in reads.items():
        threading.Thread(target=read, args=(source, load), name=source, daemon=True).start()
    results: dict[str, list[Item]] = {}
    while len(results) < len(reads):
        source, outcome = done.get()
        if isinstance(outcome, BaseException):
            raise outcome
        results[source] = outcome
    # In the order the sources were given, whichever answered first.
    return {source: results[source] for source in reads}


def failed(items: Iterable[Item]) -> list[Item]:
    return [i for i in items if i.status == "fail"]


def unread(items: Iterable[Item]) -> list[Item]:
    return [i for i in items if i.status == "unread"]
