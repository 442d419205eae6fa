"""In-cluster add-ons: one spec per add-on, used by both delivery paths.

Each spec module (``gpu_operator``, ``volcano``, ``kueue``, ``triton``, ``prometheus_stack``)
provides typed settings, a function settings -> Helm values and a function settings -> extra
Kubernetes objects. ``render_all`` is what the Pulumi ``ClusterAddons`` component, the Ansible
add-on roles, ``gpuinfra addons render`` and the plan call; no Helm value is written anywhere
else.
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic.alias_generators import to_snake
from pydantic_core import InitErrorDetails, PydanticCustomError

from gpuinfra import chartdata
from gpuinfra import versions as versions_mod
from gpuinfra.addons import (
    gpu_operator,
    isolation,
    keda,
    kueue,
    logs,
    prometheus_stack,
    triton,
    volcano,
)
from gpuinfra.addons.base import AddonRender, AddonSettings, Chart, Settings
from gpuinfra.addons.gpu_operator import GpuOperatorSettings
from gpuinfra.addons.keda import KedaSettings
from gpuinfra.addons.kueue import KueueSettings
from gpuinfra.addons.logs import AlloySettings, LokiSettings
from gpuinfra.addons.prometheus_stack import PrometheusStackSettings
from gpuinfra.addons.triton import TritonSettings
from gpuinfra.addons.volcano import VolcanoSettings
from gpuinfra.errors import ConfigError, Problem, UsageError
from gpuinfra.loading import join_path, located_messages, validate
from gpuinfra.site import Site, VarSpec, coerce
from gpuinfra.suggest import did_you_mean
from gpuinfra.versions import Versions

# Install order: the Prometheus stack first, because the others create ServiceMonitors and
# PrometheusRules whose CRDs it installs; then the GPU Operator, the schedulers, and Triton.
# KEDA next: its ScaledObjects target the GPU Deployments and read the Prometheus stack.
# Then the logs: Loki before Alloy, which pushes to it.
ADDONS: tuple[str, ...] = (
    "prometheus_stack",
    "gpu_operator",
    "volcano",
    "kueue",
    "triton",
    "keda",
    "loki",
    "alloy",
)


class AddonsSettings(Settings):
    """The ``gpuinfra:addons`` block of a stack file (camelCase there, e.g. ``gpuOperator``)."""

    prometheus_stack: PrometheusStackSettings = Field(default_factory=PrometheusStackSettings)
    gpu_operator: GpuOperatorSettings = Field(default_factory=GpuOperatorSettings)
    volcano: VolcanoSettings = Field(default_factory=VolcanoSettings)
    kueue: KueueSettings = Field(default_factory=KueueSettings)
    triton: TritonSettings = Field(default_factory=TritonSettings)
    keda: KedaSettings = Field(default_factory=KedaSettings)
    loki: LokiSettings = Field(default_factory=LokiSettings)
    alloy: AlloySettings = Field(default_factory=AlloySettings)

    @model_validator(mode="after")
    def _teams_apart(self) -> AddonsSettings:
        # A team's namespace gets Kueue's Pod Security level and queue label; on an add-on's
        # namespace that would overrule the add-on's own level (the GPU Operator runs
        # privileged) and queue the add-on's pods as a team's.
        owners = {
            getattr(self, addon).namespace: addon
            for addon in reversed(ADDONS)
            if getattr(self, addon).enabled
        }
        errors = [
            InitErrorDetails(
                type=PydanticCustomError(
                    "value_error",
                    "'{team}' is the namespace of the {owner} add-on; give the team a "
                    "namespace of its own",
                    {"team": team, "owner": _TITLES[owners[team]]},
                ),
                # Located at the team, as a field's own check would be.
                loc=("kueue", "teams", i),
                input=team,
            )
            for i, team in enumerate(self.kueue.teams)
            if team in owners
        ]
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @model_validator(mode="after")
    def _operator_exempt(self) -> AddonsSettings:
        # The GPU Operator's validators and smoke test request GPUs and carry no team or
        # project label: the cost policy would refuse them, and the GPU stack never comes up.
        stack, operator = self.prometheus_stack, self.gpu_operator
        exempt = stack.cost_labels_exempt_namespaces
        if not (stack.enabled and stack.require_cost_labels and operator.enabled):
            return self
        if operator.namespace in exempt:
            return self
        error = InitErrorDetails(
            type=PydanticCustomError(
                "value_error",
                "lacks '{namespace}', the GPU Operator's namespace, whose pods request GPUs "
                "without team or project labels: the cost policy would refuse them (allowed: a "
                "list with '{namespace}')",
                {"namespace": operator.namespace},
            ),
            # As the stack file writes it; a site's role variable is named from it.
            loc=("prometheusStack", "costLabelsExemptNamespaces"),
            input=exempt,
        )
        raise ValidationError.from_exception_data(type(self).__name__, [error])


# How messages name each add-on.
_TITLES = {
    "prometheus_stack": "Prometheus stack",
    "gpu_operator": "GPU Operator",
    "volcano": "Volcano",
    "kueue": "Kueue",
    "triton": "Triton",
    "keda": "KEDA",
    "loki": "Loki",
    "alloy": "Alloy",
}


_Renderer = Callable[[Any, Versions], AddonRender]
_SPECS: dict[str, tuple[type[AddonSettings], _Renderer]] = {
    "prometheus_stack": (PrometheusStackSettings, prometheus_stack.render),
    "gpu_operator": (GpuOperatorSettings, gpu_operator.render),
    "volcano": (VolcanoSettings, volcano.render),
    "kueue": (KueueSettings, kueue.render),
    "triton": (TritonSettings, triton.render),
    "keda": (KedaSettings, keda.render),
    "loki": (LokiSettings, logs.render_loki),
    "alloy": (AlloySettings, logs.render_alloy),
}


def settings_model(addon: str) -> type[AddonSettings]:
    """The settings model of one add-on; UsageError for an unknown name."""
    if addon not in _SPECS:
        raise UsageError(
            f"unknown add-on '{addon}'{did_you_mean(addon, ADDONS)}; add-ons: {', '.join(ADDONS)}"
        )
    return _SPECS[addon][0]


def parse_settings(
    addon: str, settings: BaseModel | Mapping[str, Any] | None, *, file: str = "<settings>"
) -> AddonSettings:
    """Settings as a model: given, validated from a mapping (ConfigError naming ``file``), or
    the defaults."""
    model = settings_model(addon)
    if isinstance(settings, model):
        return settings
    if isinstance(settings, BaseModel):
        raise TypeError(f"{addon} takes {model.__name__}, not {type(settings).__name__}")
    return validate(model, dict(settings or {}), file)


def settings_from_role_vars(
    addon: str, variables: Mapping[str, Any], *, file: str = "<role variables>"
) -> AddonSettings:
    """Settings from Ansible role variables ``<addon>_<field>`` (gpu_operator_mig_strategy).

    Variables of other roles are ignored; an unknown ``<addon>_`` variable is an error naming
    the variable as the user wrote it.
    """
    model = settings_model(addon)
    prefix = f"{addon}_"
    data = {k.removeprefix(prefix): v for k, v in variables.items() if k.startswith(prefix)}
    known = [prefix + name for name in model.model_fields]
    unknown = [
        Problem(
            file,
            prefix + key,
            f"unknown variable of role '{addon}'{did_you_mean(prefix + key, known)}",
        )
        for key in data
        if key not in model.model_fields
    ]
    if unknown:
        raise ConfigError(unknown)
    data, wrong = _as_ansible_converts(addon, model, data, file)
    if wrong:
        raise ConfigError(wrong)
    try:
        return validate(model, data, file, strict=True, by_field=True)
    except ConfigError as exc:
        raise ConfigError(
            Problem(p.file, prefix + p.path if p.path else "", in_role_words(p.message))
            for p in exc.problems
        ) from None


# A camelCase word, as the settings' checks name a key in the words of the stack files.
_CAMEL_WORD = re.compile(r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b")


def in_role_words(message: str) -> str:
    """``message`` with each settings key named as role variables and site files write it:
    ``maxBatchSize`` as ``max_batch_size``. Other camelCase words (Kubernetes fields) stay."""
    names = _snake_names()
    return _CAMEL_WORD.sub(lambda word: names.get(word.group(), word.group()), message)


@functools.cache
def _snake_names() -> dict[str, str]:
    """Every camelCase key of every add-on's settings, nested models included: its field name."""
    names: dict[str, str] = {}
    seen: set[type[BaseModel]] = set()

    def walk(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation in seen:
                return
            seen.add(annotation)
            for name, field in annotation.model_fields.items():
                if field.alias and field.alias != name:
                    names[field.alias] = name
                walk(field.annotation)
            return
        for inner in typing.get_args(annotation):
            walk(inner)

    for addon in ADDONS:
        walk(settings_model(addon))
    return names


def _as_ansible_converts(
    addon: str, model: type[AddonSettings], data: dict[str, Any], file: str
) -> tuple[dict[str, Any], list[Problem]]:
    """Top-level values converted as the role's argument_specs make Ansible convert them
    ("8" for an int); what stays is validated with its YAML type."""
    from gpuinfra.addons.rolefiles import argument_type

    converted: dict[str, Any] = {}
    wrong: list[Problem] = []
    for key, value in data.items():
        kind = argument_type(model.model_fields[key].annotation)
        spec = VarSpec(addon, f"{addon}_{key}", kind["type"], elements=kind.get("elements"))
        if isinstance(value, str) and "{{" in value:
            converted[key] = value
            continue
        try:
            converted[key] = coerce(value, spec)
        except ValueError as exc:
            wrong.append(Problem(file, spec.name, str(exc)))
    return converted, wrong


def settings_from_site(site: Site) -> AddonsSettings:
    """Add-on settings of a bare-metal site, from its role variables.

    Add-ons are cluster-wide, so every host must see the same value of each add-on variable;
    a variable that differs between hosts is an error naming both files. A site read from its
    files also knows what the add-on play sees on the controller (group_vars/all, hosts.yml's
    all: vars, host_vars/localhost): the settings are those, and a host that sees another value
    of an add-on variable, or one the controller lacks, is an error naming the file, since this
    plan would show what the play does not apply.
    """
    if not site.hosts:
        raise ConfigError([Problem(site.name, "", "the site has no hosts")])
    prefixes = tuple(f"{addon}_" for addon in ADDONS)
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    problems: list[Problem] = []
    controller = site.controller
    if controller is not None:
        merged = {k: v for k, v in controller.vars.items() if k.startswith(prefixes)}
        origin = {k: controller.origin.get(k, site.name) for k in merged}
    for host in site.hosts.values():
        for key, value in host.vars.items():
            if not key.startswith(prefixes):
                continue
            where = host.origin.get(key, site.name)
            if controller is not None:
                if key not in merged or merged[key] != value:
                    problem = Problem(
                        where,
                        key,
                        f"differs from {origin[key]}, which the add-on play reads on the "
                        "controller (allowed: add-on settings once, in group_vars/all)"
                        if key in merged
                        else "an add-on setting the add-on play never reads: it runs on the "
                        "controller, which sees group_vars/all, host_vars/localhost and "
                        "hosts.yml's all: vars only "
                        "(allowed: add-on settings in group_vars/all)",
                    )
                    if problem not in problems:
                        problems.append(problem)
                continue
            if key in merged and merged[key] != value:
                problems.append(
                    Problem(
                        where,
                        key,
                        f"differs from {origin[key]} (host {host.name}); add-on settings apply "
                        "to the whole cluster, set them once in group_vars/all",
                    )
                )
                continue
            merged[key] = value
            origin.setdefault(key, where)
    if problems:
        raise ConfigError(problems)
    chosen: dict[str, AddonSettings] = {}
    for addon in ADDONS:
        owned = {k: v for k, v in merged.items() if _owner(k) == addon}
        try:
            chosen[addon] = settings_from_role_vars(addon, owned, file=site.name)
        except ConfigError as exc:
            problems += [_in_file(p, origin) for p in exc.problems]
    if problems:
        raise ConfigError(problems)
    return _together(
        chosen, lambda _addon, path, message: _in_file(Problem(site.name, path, message), origin)
    )


def settings_from_play(
    variables: Mapping[str, Any], *, file: Callable[[str], str] = lambda addon: addon
) -> AddonsSettings:
    """Every add-on's settings from the variables of the play that installs them, as Ansible
    resolved them: each add-on's ``<addon>_<field>`` (as settings_from_role_vars reads them),
    then the checks across add-ons that settings_from_site applies to a site (a Kueue team in
    an enabled add-on's namespace). ``file(addon)`` names where the add-on's variables come
    from in a problem; ConfigError names every problem of every add-on."""
    chosen: dict[str, AddonSettings] = {}
    problems: list[Problem] = []
    for addon in ADDONS:
        try:
            chosen[addon] = settings_from_role_vars(addon, variables, file=file(addon))
        except ConfigError as exc:
            problems += exc.problems
    if problems:
        raise ConfigError(problems)
    return _together(chosen, lambda addon, path, message: Problem(file(addon), path, message))


def _together(
    chosen: Mapping[str, AddonSettings], place: Callable[[str, str, str], Problem]
) -> AddonsSettings:
    """The add-ons' settings as one, checked across add-ons; ``place(addon, role variable,
    message)`` locates a problem."""
    try:
        return AddonsSettings.model_validate(dict(chosen))
    except ValidationError as exc:
        # A check across add-ons, located at one add-on's field: its role variable.
        raise ConfigError(
            place(to_snake(str(loc[0])), _role_variable(loc), in_role_words(message))
            for loc, message in located_messages(exc, AddonsSettings)
        ) from None


def _role_variable(loc: tuple[str | int, ...]) -> str:
    """``("kueue", "teams", 0)`` as the site writes it: ``kueue_teams[0]``."""
    addon, field_name, *rest = loc
    return join_path([f"{to_snake(str(addon))}_{to_snake(str(field_name))}", *rest])


def _in_file(problem: Problem, origin: dict[str, str]) -> Problem:
    """The problem, placed in the file that set its variable; for a variable the site leaves
    unset (a required one), the file that sets its add-on's ``enabled``, or another of the
    add-on's variables, where it would go."""
    variable = re.split(r"[.\[]", problem.path, maxsplit=1)[0]
    addon = _owner(variable)
    siblings = [f"{addon}_enabled", *(k for k in origin if _owner(k) == addon)] if addon else []
    file = next((origin[k] for k in [variable, *siblings] if k in origin), problem.file)
    return Problem(file, problem.path, problem.message)


def _owner(variable: str) -> str | None:
    # The longest add-on name that prefixes the variable owns it.
    owners = [a for a in ADDONS if variable.startswith(f"{a}_")]
    return max(owners, key=len) if owners else None


def render(
    addon: str,
    settings: BaseModel | Mapping[str, Any] | None = None,
    *,
    versions: Versions | None = None,
    file: str = "<settings>",
) -> AddonRender:
    """Everything one add-on applies, from its settings and the pinned versions."""
    parsed = parse_settings(addon, settings, file=file)
    return _isolated(addon, parsed, versions or versions_mod.pinned())


def render_all(settings: AddonsSettings, *, versions: Versions | None = None) -> list[AddonRender]:
    """The enabled add-ons, rendered, in install order."""
    pins = versions or versions_mod.pinned()
    chartdata.require(pins)
    renders = []
    for addon in ADDONS:
        addon_settings: AddonSettings = getattr(settings, addon)
        if addon_settings.enabled:
            renders.append(_isolated(addon, addon_settings, pins))
    return renders


def _isolated(addon: str, settings: AddonSettings, pins: Versions) -> AddonRender:
    """The spec's render, its namespaces labelled and fenced (gpuinfra/addons/isolation.py)."""
    repo = getattr(settings, "model_repository", None)
    s3 = bool(getattr(repo, "s3", None))
    return isolation.isolate(_SPECS[addon][1](settings, pins), pins, s3=s3)


__all__ = [
    "ADDONS",
    "AddonRender",
    "AddonsSettings",
    "AlloySettings",
    "Chart",
    "GpuOperatorSettings",
    "KedaSettings",
    "KueueSettings",
    "LokiSettings",
    "PrometheusStackSettings",
    "TritonSettings",
    "VolcanoSettings",
    "parse_settings",
    "render",
    "render_all",
    "settings_from_play",
    "settings_from_role_vars",
    "settings_from_site",
    "settings_model",
]
