"""Plan documents: the desired state of a stack or a site, computed offline.

A stack plan runs the stack's Pulumi program under the mock runtime (``gpuinfra.review.stackrun``) with
the stack's real config; a site plan reads the inventory with the roles' typed variables. Both
are plain JSON-able documents with a stable order, no timestamps and no absolute paths, so the
same commit always gives byte-identical JSON and ``gpuinfra.review.diff`` can compare two of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pulumi.runtime import MockResourceArgs

from gpuinfra import addons, integrity, secrets
from gpuinfra import config as config_mod
from gpuinfra import site as site_mod
from gpuinfra import versions as versions_mod
from gpuinfra.addons import AddonRender
from gpuinfra.loading import display_path, load_yaml
from gpuinfra.paths import repo_root
from gpuinfra.review import cost as cost_mod
from gpuinfra.review import ordering, stackrun
from gpuinfra.review import policy as policy_mod
from gpuinfra.review.documents import flatten

PLAN_FORMAT = 1
COMPUTED = stackrun.COMPUTED


def to_json(document: Mapping[str, Any]) -> str:
    """The canonical text of a document: sorted keys, two-space indent, a final newline."""
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def versions_section(pins: versions_mod.Versions) -> dict[str, dict[str, str | None]]:
    section: dict[str, dict[str, str | None]] = {}
    for name, comp in pins.entries():
        section[name] = {"version": comp.version, "tag": comp.tag, "source": comp.source.describe()}
        for suite, build in comp.releases.items():
            section[f"{name}.releases.{suite}"] = {
                "version": build.version,
                "tag": None,
                "source": f"{comp.source.type} {', '.join(comp.source.packages)} from {suite}",
            }
    for operand, value in sorted(pins.gpu_operator.operands.items()):
        section[f"gpu_operator.operands.{operand}"] = {
            "version": value,
            "tag": None,
            "source": "deployed by the GPU Operator",
        }
    return section


def addons_sections(renders: Iterable[AddonRender]) -> dict[str, list[dict[str, Any]]]:
    """Helm releases (chart, version, full values), extra objects and files of the add-ons."""
    releases: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    for render in renders:
        if render.chart is not None:
            releases.append(
                {
                    "addon": render.name,
                    "release": render.release,
                    "namespace": render.namespace,
                    "chart": {
                        "repository": render.chart.repository,
                        "name": render.chart.name,
                        "version": render.chart.version,
                    },
                    "values": render.values,
                }
            )
        objects.extend(render.objects)
        files.extend(
            {"addon": render.name, "path": path, "content": text}
            for path, text in sorted(render.files.items())
        )
    releases.sort(key=lambda r: (r["namespace"], r["release"]))
    objects.sort(key=_object_order)
    return {"helm_releases": releases, "objects": objects, "files": files}


def _object_order(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (
        str(obj.get("apiVersion")),
        str(obj.get("kind")),
        str(meta.get("namespace") or ""),
        str(meta.get("name")),
    )


# Shorter stand-ins would match inside ordinary words.
_SHORTEST = 6


class Redactor:
    """Turns values only the cloud can know into ``<computed>`` and drops absolute paths.

    The mock runtime answers every registration with stand-ins (``<name>-id``, ARNs, endpoints)
    so the program can run to the end; a plan must not present them as real values. Each
    stand-in is recomputed from the same mocks, then replaced wherever it appears, whole or
    inside a longer string (an ARN in an IAM policy document).
    """

    def __init__(self, root: Path, made_up: Iterable[str] = ()) -> None:
        self.root = str(root)
        self.made_up = {v for v in made_up if len(v) >= _SHORTEST}
        self._by_prefix: dict[str, list[str]] = {}
        for value in sorted(self.made_up, key=len, reverse=True):
            self._by_prefix.setdefault(value[:_SHORTEST], []).append(value)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        if isinstance(value, float) and value.is_integer():
            # Pulumi carries every number as a float; sizes and counts read better as integers.
            return int(value)
        if isinstance(value, str):
            return self._text(value)
        return value

    def _text(self, text: str) -> str:
        if text in self.made_up:
            return COMPUTED
        if self._by_prefix and len(text) > _SHORTEST:
            text = self._inner(text)
        return text.replace(f"{self.root}/", "").replace(self.root, ".")

    def _inner(self, text: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(text):
            for candidate in self._by_prefix.get(text[i : i + _SHORTEST], ()):
                if text.startswith(candidate, i):
                    out.append(COMPUTED)
                    i += len(candidate)
                    break
            else:
                out.append(text[i])
                i += 1
        return "".join(out)


def stand_ins(run: stackrun.StackRun, region: str) -> set[str]:
    """Every value the mock runtime made up for the resources of ``run``."""
    mock = stackrun.StandInMocks(region)
    made_up: set[str] = set()
    for resource in run.resources:
        if not resource.custom:
            continue
        resource_id, state = mock.new_resource(
            MockResourceArgs(typ=resource.type_, name=resource.name, inputs=dict(resource.inputs))
        )
        if resource_id:
            made_up.add(resource_id)
        given = flatten(resource.inputs)
        for path, value in flatten(state).items():
            if isinstance(value, str) and path not in given and value != resource.name:
                made_up.add(value)
    return made_up


HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def _properties(
    type_: str, inputs: Mapping[str, Any], rendered: Mapping[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """A resource's inputs, with add-on content shown once: a Helm release's values and a
    rendered object's body live in ``helm_releases`` and ``objects``, and the resource that
    applies them points there."""
    if type_ == HELM_RELEASE and any(
        r["release"] == inputs.get("name") for r in rendered["helm_releases"]
    ):
        return {**inputs, "values": "<helm_releases>"}
    if type_.startswith("kubernetes:") and _object_order(inputs) in {
        _object_order(o) for o in rendered["objects"]
    }:
        return {
            k: (v if k in ("apiVersion", "kind", "metadata") else "<objects>")
            for k, v in inputs.items()
        }
    return dict(inputs)


def stack_plan(
    env: str, *, root: Path | None = None, config: config_mod.StackConfig | None = None
) -> dict[str, Any]:
    """The plan of one stack: raises ConfigError (exit 2) before running anything if invalid."""
    root = root or repo_root()
    if config is None:
        cfg = config_mod.load_stack(env, root)
    else:
        cfg = config_mod.check_stack(config, display_path(config_mod.stack_path(env, root)))
    # The environment's node cap and instance types, as config check and cost refuse them: a
    # stack over its limits is a mistake in its file (exit 2), named by file and key, not a plan
    # that fails the policy pack's node-cap rule after it is drawn.
    policy_mod.refuse_pools_over_limits(env, cfg, root)
    pins = versions_mod.pinned(root)
    renders = addons.render_all(cfg.addons, versions=pins)
    # Whether the cluster can run what it declares: an error stops the plan (exit 2).
    shown = display_path(config_mod.stack_path(env, root))
    warnings = integrity.check_stack(cfg, shown, renders=renders)
    run = stackrun.run_checked(env, cfg, pins, renders=renders, root=root)
    warnings += integrity.enforce(ordering.check(run.resources), shown)
    rendered = addons_sections(renders)
    redact = Redactor(root, stand_ins(run, cfg.region))
    resources = sorted(
        (
            {
                "type": r.type_,
                "name": r.name,
                "parent": r.parent,
                "properties": redact(_properties(r.type_, r.inputs, rendered)),
            }
            for r in run.resources
        ),
        key=lambda r: (r["type"], r["name"], r["parent"] or ""),
    )
    estimate = cost_mod.estimate(cfg)
    document: dict[str, Any] = {
        "plan_format": PLAN_FORMAT,
        "kind": "stack",
        "stack": env,
        "region": cfg.region,
        "resources": resources,
        "outputs": redact(run.outputs),
        "versions": versions_section(pins),
        "cost": estimate.document(),
    }
    document.update(rendered)
    document["integrity"] = [w.document() for w in warnings]
    document["policy"] = _policy(env, run, root)
    redacted: dict[str, Any] = secrets.redact(document)
    return redacted


def _policy(env: str, run: stackrun.StackRun, root: Path) -> dict[str, Any]:
    """The policy pack's verdicts: the same validator functions ``pulumi preview`` runs, with
    the limits ``policies/limits.yaml`` gives the stack's environment."""
    verdicts = policy_mod.evaluate(run.resources, policy_mod.Limits.for_stack(env, root))
    described = {**policy_mod.RESOURCE_RULES, **policy_mod.STACK_RULES}
    rules: list[dict[str, Any]] = [
        {
            "policy": name,
            "description": described[name][0],
            "passed": not messages,
            "violations": sorted(messages),
        }
        for name, messages in sorted(verdicts.items())
    ]
    return {
        "passed": all(rule["passed"] for rule in rules),
        "rules": rules,
        "violations": [
            {"policy": rule["policy"], "message": message}
            for rule in rules
            for message in rule["violations"]
        ],
    }


def site_plan(path: Path, *, root: Path | None = None) -> dict[str, Any]:
    """The plan of a bare-metal site: hosts and groups, role settings and versions per host."""
    root = root or repo_root()
    roles_dir = root / "roles"
    pins = versions_mod.pinned(root)
    checked = integrity.load_checked_site(path, roles_dir=roles_dir, versions=pins)
    site = checked.site
    specs = site_mod.role_specs(roles_dir)
    defaults = {role: _role_defaults(roles_dir / role, role, specs) for role in specs}
    plays = _plays(root / "playbooks" / "site.yml")
    inventory = site.inventory or path / site_mod.HOSTS_FILES[0]
    members = _play_members(inventory, [pattern for pattern, _ in plays])
    hosts = []
    for host in sorted(site.hosts.values(), key=lambda h: h.name):
        roles = sorted(
            {role for pattern, names in plays if host.name in members[pattern] for role in names}
        )
        settings = {
            role: {
                **defaults.get(role, {}),
                **{k: v for k, v in host.vars.items() if site_mod.owner(k, specs) == role},
            }
            for role in roles
        }
        hosts.append(
            {
                "name": host.name,
                "groups": sorted(host.groups),
                "roles": Redactor(root)(settings),
                "versions": _host_versions(host.vars, defaults, pins),
            }
        )
    document: dict[str, Any] = {
        "plan_format": PLAN_FORMAT,
        "kind": "site",
        "site": site.name,
        "groups": {group: sorted(names) for group, names in sorted(site.groups.items())},
        "hosts": hosts,
        "versions": versions_section(pins),
    }
    document.update(addons_sections(checked.renders))
    document["integrity"] = [w.document() for w in checked.warnings]
    redacted: dict[str, Any] = secrets.redact(document)
    return redacted


def _role_defaults(
    role_dir: Path, role: str, specs: dict[str, dict[str, site_mod.VarSpec]]
) -> dict[str, Any]:
    path = role_dir / "defaults" / "main.yml"
    data = load_yaml(path) if path.exists() else {}
    return {k: v for k, v in (data or {}).items() if site_mod.owner(k, specs) == role}


_ROLE_TASKS = (
    "ansible.builtin.import_role",
    "ansible.builtin.include_role",
    "import_role",
    "include_role",
)


def _plays(playbook: Path) -> list[tuple[str, list[str]]]:
    """(hosts pattern, roles) of every play, following ``import_playbook``; roles listed under
    ``roles:`` and those imported or included by the play's tasks."""
    if not playbook.exists():
        return []
    plays: list[tuple[str, list[str]]] = []
    for play in load_yaml(playbook) or []:
        imported = play.get("ansible.builtin.import_playbook") or play.get("import_playbook")
        if imported:
            plays += _plays(playbook.parent / str(imported))
            continue
        roles = [
            r if isinstance(r, str) else str(r.get("role") or r.get("name"))
            for r in play.get("roles") or []
        ]
        for section in ("pre_tasks", "tasks", "post_tasks"):
            for task in play.get(section) or []:
                for key in _ROLE_TASKS:
                    if isinstance(task.get(key), dict) and task[key].get("name"):
                        roles.append(str(task[key]["name"]))
        if roles:
            plays.append((str(play.get("hosts", "all")), roles))
    return plays


def _play_members(hosts_file: Path, patterns: list[str]) -> dict[str, set[str]]:
    """Hosts each play pattern selects, as Ansible resolves it (groups, ``:``, ``&``, ``!``)."""
    from ansible.inventory.manager import InventoryManager  # type: ignore[import-untyped]
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]

    inventory = InventoryManager(loader=DataLoader(), sources=[str(hosts_file)])
    return {p: {h.name for h in inventory.get_hosts(pattern=p)} for p in set(patterns)}


def _host_versions(
    variables: Mapping[str, Any],
    defaults: Mapping[str, Mapping[str, Any]],
    pins: versions_mod.Versions,
) -> dict[str, Any]:
    """What the node roles install on a host, as far as the inventory tells: the sources its
    variables choose, and, for an entry that pins a build per Debian release, each release's
    build (the host's own release is a fact, read when the roles run)."""

    def chosen(role: str, name: str, default: str) -> str:
        return str(variables.get(name, defaults.get(role, {}).get(name, default)))

    source = chosen("nvidia_driver", "nvidia_driver_source", "distro")
    driver = pins.driver(source)
    containerd_source = chosen(
        "nvidia_container_toolkit", "nvidia_container_toolkit_containerd_source", "distro"
    )
    containerd = pins.containerd_docker if containerd_source == "docker" else pins.containerd
    return {
        "nvidia_driver": {
            "source": source,
            "version": driver.version,
            "cuda": pins.cuda_for(driver),
            **_by_release(driver, lambda pinned: pinned or pins.cuda_for(driver)),
        },
        "nvidia_container_toolkit": pins.nvidia_container_toolkit.version,
        "containerd": {
            "source": containerd_source,
            "version": containerd.version,
            **_by_release(containerd),
        },
        "kubernetes": pins.kubernetes.version,
    }


def _by_release(
    entry: versions_mod.Component, cuda: Callable[[str | None], str] | None = None
) -> dict[str, Any]:
    """``by_release``: the version each Debian release installs (with the CUDA version it
    serves, given ``cuda`` for a driver), where the entry pins builds of other releases than its
    own suite's; nothing otherwise."""
    if not entry.releases:
        return {}

    def shown(version: str, pinned_cuda: str | None) -> str:
        return version if cuda is None else f"{version} (CUDA {cuda(pinned_cuda)})"

    builds = {entry.suites()[0]: shown(entry.version, None)}
    for suite, pin in entry.releases.items():
        builds[suite] = shown(pin.version, pin.cuda)
    return {"by_release": builds}


# --- summaries for people ----------------------------------------------------------------------

Rows = tuple[str, tuple[str, ...], list[tuple[str, ...]]]


def _brief(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _installed(pin: Any) -> str:
    """A host's pin as a person reads it: its source, then the build of each Debian release
    (``distro: bookworm 535.261.03 (CUDA 12.2), trixie 550.163.01 (CUDA 12.4)``)."""
    if not isinstance(pin, Mapping):
        return _brief(pin or "")
    if pin.get("by_release"):
        builds = ", ".join(f"{suite} {build}" for suite, build in pin["by_release"].items())
    else:
        builds = str(pin.get("version", "")) + (f" (CUDA {pin['cuda']})" if pin.get("cuda") else "")
    return f"{pin.get('source', '')}: {builds}"


def summary_rows(doc: Mapping[str, Any]) -> list[Rows]:
    """What a person reads first, as (title, columns, rows) tables."""
    where = f"stack {doc['stack']}" if doc["kind"] == "stack" else f"site {doc['site']}"
    tables: list[Rows] = []
    if doc.get("resources"):
        tables.append(
            (
                f"{where}: {len(doc['resources'])} resources",
                ("type", "name", "properties"),
                [
                    (r["type"], r["name"], _brief_properties(r["properties"]))
                    for r in doc["resources"]
                ],
            )
        )
    if doc.get("hosts"):
        tables.append(
            (
                f"{where}: {len(doc['hosts'])} hosts",
                ("host", "groups", "roles", "driver", "containerd"),
                [
                    (
                        h["name"],
                        ", ".join(h["groups"]),
                        ", ".join(sorted(h["roles"])),
                        _installed(h["versions"].get("nvidia_driver")),
                        _installed(h["versions"].get("containerd")),
                    )
                    for h in doc["hosts"]
                ],
            )
        )
    tables.append(
        (
            f"{where}: Helm releases",
            ("release", "namespace", "chart", "version", "values set"),
            [
                (
                    r["release"],
                    r["namespace"],
                    f"{r['chart']['repository']}/{r['chart']['name']}",
                    r["chart"]["version"],
                    str(_leaf_count(r["values"])),
                )
                for r in doc.get("helm_releases", [])
            ],
        )
    )
    tables.append(
        (
            f"{where}: Kubernetes objects",
            ("apiVersion", "kind", "namespace", "name"),
            [
                (
                    str(o.get("apiVersion")),
                    str(o.get("kind")),
                    str((o.get("metadata") or {}).get("namespace") or ""),
                    str((o.get("metadata") or {}).get("name")),
                )
                for o in doc.get("objects", [])
            ],
        )
    )
    tables.append(
        (
            f"{where}: pinned versions in force",
            ("component", "version", "from"),
            [
                (name, v["version"] + (f" ({v['tag']})" if v.get("tag") else ""), v["source"])
                for name, v in doc.get("versions", {}).items()
            ],
        )
    )
    integrity_findings = doc.get("integrity")
    if integrity_findings is not None:
        tables.append(
            (
                f"{where}: integrity warnings (no errors)",
                ("rule", "object", "path", "what to change"),
                [(f["rule"], f["object"], f["path"], f["message"]) for f in integrity_findings],
            )
        )
    policy = doc.get("policy")
    if policy is not None:
        tables.append(
            (
                f"{where}: policy pack ({'passes' if policy['passed'] else 'FAILS'})",
                ("policy", "passed", "violations"),
                [
                    (r["policy"], "yes" if r["passed"] else "NO", "; ".join(r["violations"]))
                    for r in policy["rules"]
                ],
            )
        )
    return tables


def _brief_properties(properties: Mapping[str, Any], limit: int = 120) -> str:
    """The known, non-tag properties as ``key=value``, cut at ``limit`` characters."""
    shown = [
        f"{path}={_brief(value, 40)}"
        for path, value in flatten(properties).items()
        if value != COMPUTED and not path.startswith(("tags", "tagsAll"))
    ]
    return _brief(", ".join(shown), limit)


def _leaf_count(value: Any) -> int:
    if isinstance(value, Mapping):
        return sum(_leaf_count(v) for v in value.values())
    if isinstance(value, list):
        return sum(_leaf_count(v) for v in value) or 1
    return 1


def _markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cell(text: str) -> str:
        # GitHub drops what reads as an HTML tag (`<objects>`, `<computed>`): written as text.
        text = text.replace("&", "&amp;").replace("<", "&lt;")
        return text.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def render_markdown(doc: Mapping[str, Any]) -> str:
    """A plan as markdown: summary tables, then the full values of each release, folded."""
    where = f"stack `{doc['stack']}`" if doc["kind"] == "stack" else f"site `{doc['site']}`"
    out = [f"## Plan of {where}", ""]
    for title, columns, rows in summary_rows(doc):
        out += [f"### {title}", ""]
        out += _markdown_table(columns, rows) if rows else ["(none)"]
        out.append("")
    for release in doc.get("helm_releases", []):
        out += [
            f"<details><summary>values of {release['release']}</summary>",
            "",
            "```json",
            json.dumps(release["values"], sort_keys=True, indent=2),
            "```",
            "",
            "</details>",
            "",
        ]
    if doc.get("cost"):
        out += cost_markdown(doc["cost"]).splitlines()
    return "\n".join(out).rstrip() + "\n"


def cost_markdown(cost: Mapping[str, Any]) -> str:
    def usd(value: float | None) -> str:
        return "lacking" if value is None else f"${value:,.2f}"

    prices = cost["prices"]
    out = [
        f"### Monthly cost estimate: {cost['environment']} ({cost['region']})",
        "",
        f"Instance prices as of {prices['instances']['as_of']} ({prices['instances']['source']}); "
        f"storage prices as of {prices['storage']['as_of']} ({prices['storage']['source']}); "
        f"{cost['hours_per_month']:g} hours a month.",
        "",
    ]
    rows = []
    for line in cost["lines"]:
        if line["status"] == "usage":
            desired = maximum = f"${line['unit_usd']} per {line['unit']} used"
        else:
            desired, maximum = usd(line["monthly_desired_usd"]), usd(line["monthly_max_usd"])
        rows.append((line["category"], line["item"], desired, maximum, line["note"]))
    rows.append(
        (
            "**total**",
            "priced lines",
            usd(cost["monthly_desired_usd"]),
            usd(cost["monthly_max_usd"]),
            "",
        )
    )
    out += _markdown_table(("category", "item", "at desired size", "at max size", "note"), rows)
    if cost["lacking_prices"]:
        out += ["", "Lacking a price (not in the totals): " + "; ".join(cost["lacking_prices"])]
    return "\n".join(out) + "\n"
