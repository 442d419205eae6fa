"""The add-on roles' variables are the add-on specs' settings, no more, no less.

A role variable that is not a settings field would be silently ignored by the render; a field
without a role variable could not be set from an inventory; a role default that differs from
the settings default would change what a bare-metal site gets compared with a cloud stack.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import Field

from gpuinfra import addons, chartdata
from gpuinfra.addons import rolefiles
from gpuinfra.site import check_vars, role_specs

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "roles"
# Connection settings every add-on role reads; they belong to no add-on's settings.
SHARED = {
    "gpuinfra_kubeconfig",
    "gpuinfra_kubernetes_timeout",
    "gpuinfra_helm_timeout",
    "gpuinfra_chart_cache_dir",
}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _options(addon: str) -> dict[str, dict[str, Any]]:
    spec = _yaml(ROLES / addon / "meta" / "argument_specs.yml")
    options: dict[str, dict[str, Any]] = spec["argument_specs"]["main"]["options"]
    return options


def _defaults(addon: str) -> dict[str, Any]:
    return _yaml(ROLES / addon / "defaults" / "main.yml") or {}


@pytest.mark.parametrize("addon", addons.ADDONS)
def test_role_variables_are_exactly_the_settings_fields(addon: str) -> None:
    options = _options(addon)
    role_vars = {name for name in options if name.startswith(f"{addon}_")}
    fields = {f"{addon}_{name}" for name in addons.settings_model(addon).model_fields}
    assert role_vars - fields == set(), "role variables the spec does not know"
    assert fields - role_vars == set(), "settings fields the role does not declare"
    assert set(options) - role_vars <= SHARED, "variables outside the role's prefix"
    assert "gpuinfra_kubeconfig" in options


def test_committed_role_files_are_what_the_settings_models_give() -> None:
    """defaults/main.yml and meta/argument_specs.yml are generated; a stale one fails here."""
    stale = [str(path.relative_to(ROOT)) for path in rolefiles.stale(ROLES)]
    assert stale == [], f"stale role files, run `{rolefiles.COMMAND}`: {stale}"


@pytest.mark.parametrize("addon", addons.ADDONS)
def test_role_files_say_they_are_generated_and_by_what(addon: str) -> None:
    for path in (
        ROLES / addon / "defaults" / "main.yml",
        ROLES / addon / "meta" / "argument_specs.yml",
    ):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# Generated from the settings model"), path
        assert f"`{rolefiles.COMMAND}`" in first, path


def test_a_new_setting_reaches_both_role_files(tmp_path: Path) -> None:
    """A new field gives its default, type, choices and words, and the old files turn stale."""
    model = addons.settings_model("volcano")

    class Extended(model):  # type: ignore[misc,valid-type]
        preemption: typing.Literal["off", "within-queue"] = Field(
            default="off", description="Whether jobs preempt others in their queue."
        )
        tiers: list[int] = Field(default_factory=lambda: [1, 2], description="Tier numbers.")
        owner: str = Field(description="Who runs this scheduler.")

    roles = tmp_path / "roles"
    rolefiles.write(roles)
    assert rolefiles.stale(roles) == []
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(addons._SPECS, "volcano", (Extended, addons._SPECS["volcano"][1]))
        stale = sorted(str(p.relative_to(roles)) for p in rolefiles.stale(roles))
        assert stale == ["volcano/defaults/main.yml", "volcano/meta/argument_specs.yml"]
        rolefiles.write(roles)
    spec = _yaml(roles / "volcano" / "meta" / "argument_specs.yml")
    options = spec["argument_specs"]["main"]["options"]
    assert options["volcano_preemption"] == {
        "description": "Whether jobs preempt others in their queue.",
        "type": "str",
        "choices": ["off", "within-queue"],
        "default": "off",
    }
    assert options["volcano_tiers"]["elements"] == "int"
    assert options["volcano_owner"]["required"] is True
    assert "default" not in options["volcano_owner"]
    defaults = _yaml(roles / "volcano" / "defaults" / "main.yml")
    assert (defaults["volcano_preemption"], defaults["volcano_tiers"]) == ("off", [1, 2])
    assert "volcano_owner" not in defaults


def test_a_setting_without_a_description_is_refused() -> None:
    model = addons.settings_model("kueue")

    class Undescribed(model):  # type: ignore[misc,valid-type]
        spare: bool = True

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(addons._SPECS, "kueue", (Undescribed, addons._SPECS["kueue"][1]))
        with pytest.raises(ValueError, match="setting 'spare' has no description"):
            rolefiles.argument_specs_file("kueue")


@pytest.mark.parametrize("addon", addons.ADDONS)
def test_defaults_agree_with_argument_specs(addon: str) -> None:
    options, defaults = _options(addon), _defaults(addon)
    assert set(defaults) == {name for name in options if name.startswith(f"{addon}_")}
    for name, value in defaults.items():
        assert options[name].get("default") == value, name


@pytest.mark.parametrize("addon", addons.ADDONS)
def test_role_defaults_give_the_specs_default_settings(addon: str) -> None:
    from_role = addons.settings_from_role_vars(addon, _defaults(addon))
    assert from_role == addons.settings_model(addon)()


@pytest.mark.parametrize("addon", addons.ADDONS)
def test_site_check_types_role_variables_from_the_specs(addon: str) -> None:
    """A misspelt or mistyped add-on variable in an inventory is caught by the site check."""
    variables = {f"{addon}_enabeld": True, f"{addon}_namespace": 7}
    problems = {p.path: p.message for p in check_vars(variables, "group_vars/all.yml", ROLES)}
    assert "did you mean" in problems[f"{addon}_enabeld"]
    assert f"{addon}_enabled" in problems[f"{addon}_enabeld"]
    assert problems[f"{addon}_namespace"].startswith("expected str")
    assert addon in role_specs(ROLES)


def test_example_inventory_sets_only_known_add_on_variables() -> None:
    folder = ROOT / "inventory" / "example" / "group_vars" / "all"
    for addon in addons.ADDONS:
        path = folder / f"{addon}.yml"
        variables = _yaml(path)
        assert check_vars(variables, str(path), ROLES) == []
        # The example is a working site: its settings render.
        settings = addons.settings_from_role_vars(addon, variables, file=str(path))
        if settings.enabled:
            assert addons.render(addon, settings).namespace == settings.namespace


def test_playbook_applies_the_add_ons_in_the_specs_install_order() -> None:
    (play,) = _yaml(ROOT / "playbooks" / "addons.yml")
    assert tuple(role["role"] for role in play["roles"]) == addons.ADDONS
    assert tuple(play["vars"]["_addons_install_order"]) == addons.ADDONS
    # The settings of every add-on and the site as a whole, then what every add-on reads,
    # before the first role runs.
    settings, prerequisites = play["pre_tasks"]
    each, whole = settings["ansible.builtin.assert"]["that"]
    assert "query('gpuinfra_addon', *_addons_install_order)" in each
    assert "query('gpuinfra_site')" in whole
    assert prerequisites["ansible.builtin.include_role"]["tasks_from"] == "prerequisites"


def _effective(values: dict[str, Any], chart_defaults: dict[str, Any], path: str) -> Any:
    """A chart value as Helm sees it: the render's value, else the chart's default."""
    for source in (values, chart_defaults):
        node: Any = source
        for key in path.split("."):
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            return node
    raise KeyError(path)


def test_gpu_operator_upgrades_its_crds_with_the_chart() -> None:
    """Helm never upgrades crds/; the GPU Operator's pre-upgrade hook must stay on."""
    render = addons.render("gpu_operator")
    assert render.chart is not None
    chart_defaults = chartdata.load_values(render.chart.name, render.chart.version)
    assert _effective(render.values, chart_defaults, "operator.upgradeCRD") is True


def _phases(addon: str) -> list[str]:
    """The steps of a role's tasks/main.yml in order: its own task files, addon_helm's entry
    points (``addon_helm:<entry>``) and the tasks written there, by name."""
    steps: list[str] = []

    def walk(tasks: list[dict[str, Any]]) -> None:
        for task in tasks:
            if "block" in task:
                walk(task["block"])
            elif "ansible.builtin.import_tasks" in task:
                steps.append(task["ansible.builtin.import_tasks"])
            elif "ansible.builtin.import_role" in task:
                imported = task["ansible.builtin.import_role"]
                steps.append(f"{imported['name']}:{imported['tasks_from']}")
            else:
                steps.append(task["name"])

    walk(_yaml(ROLES / addon / "tasks" / "main.yml"))
    return steps


@pytest.mark.parametrize("addon", addons.ADDONS)
def test_roles_apply_through_the_shared_helm_role_in_phase_order(addon: str) -> None:
    """Render, preflight, namespaces, install (a chart only), objects, verify; nothing between
    the render and the shared preflight reaches the cluster."""
    steps = _phases(addon)
    shared = [s.removeprefix("addon_helm:") for s in steps if s.startswith("addon_helm:")]
    example = _yaml(ROOT / "inventory" / "example" / "group_vars" / "all" / f"{addon}.yml")
    settings = addons.settings_from_role_vars(addon, example).model_copy(update={"enabled": True})
    chart = addons.render(addon, settings).chart is not None
    assert shared == ["preflight", "prepare", *(["install"] if chart else []), "objects"]
    assert steps[1].startswith("Render ") and steps[2] == "addon_helm:preflight"
    assert steps[-1] == "verify.yml"
    verify = _yaml(ROLES / addon / "tasks" / "verify.yml")
    imports_release_check = [
        t["ansible.builtin.import_role"]["tasks_from"]
        for t in verify
        if "ansible.builtin.import_role" in t
    ]
    assert imports_release_check == (["verify"] if chart else [])


def test_prometheus_stack_applies_the_pulled_charts_crds_before_helm() -> None:
    """kube-prometheus-stack's CRDs sit in a crds/ directory Helm never upgrades."""
    tasks = ROLES / "prometheus_stack" / "tasks"
    steps = _phases("prometheus_stack")
    assert steps.index("crds.yml") < steps.index("addon_helm:install")
    crds = {t["name"]: t for t in _yaml(tasks / "crds.yml")}
    apply = next(t["kubernetes.core.k8s"] for t in crds.values() if "kubernetes.core.k8s" in t)
    assert apply["apply"] is True
    assert apply["server_side_apply"]["force_conflicts"] is True
    (block,) = [t for t in _yaml(tasks / "main.yml") if "block" in t]
    (install,) = [
        t
        for t in block["block"]
        if t.get("ansible.builtin.import_role", {}).get("tasks_from") == "install"
    ]
    assert install["vars"]["addon_helm_skip_crds"] is True
    (helm,) = _yaml(ROLES / "addon_helm" / "tasks" / "install.yml")
    assert helm["kubernetes.core.helm"]["skip_crds"] == "{{ addon_helm_skip_crds }}"
