"""Ansible lookup: render one gpuinfra add-on from the calling role's variables.

The add-on roles hold no Helm values of their own. This lookup runs on the controller, where the
gpuinfra package is installed in the same virtual environment as Ansible, reads every variable
named ``<addon>_<field>``, builds the add-on's typed settings from them and returns the spec's
render: chart coordinates pinned in versions.yaml, release, namespace, Helm values, extra
objects and files. A mistake in a variable fails the task with the same one-line problems the
``gpuinfra`` CLI prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

if TYPE_CHECKING:
    from gpuinfra.addons import AddonRender

DOCUMENTATION = r"""
name: gpuinfra_addon
short_description: Render a gpuinfra add-on (chart, values, objects, files) from role variables
description:
  - Builds the typed settings of one add-on from the variables named C(<addon>_<field>) and
    returns what the add-on applies to the cluster, as rendered by the gpuinfra core.
  - Runs on the controller; the gpuinfra package must be importable by the Python running Ansible.
options:
  _terms:
    description: Add-on names (gpu_operator, volcano, kueue, triton, prometheus_stack, keda, loki, alloy).
    required: true
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Render the GPU Operator
  ansible.builtin.set_fact:
    _gpu_operator_render: "{{ lookup('gpuinfra_addon', 'gpu_operator') }}"
"""

RETURN = r"""
_raw:
  description:
    - One render per term with keys name, release, namespace, values, objects, files, chart,
      prerequisites (what must exist before it is applied, each with its message), enabled, and
      settings (the validated settings, snake_case, defaults filled in).
    - A disabled add-on applies nothing; release and chart are null, values, objects and files
      empty.
    - chart is null for an add-on without a chart (Triton), else a mapping with repository, name,
      version, and the ref and repo_url to pass to kubernetes.core.helm (an OCI chart is
      addressed by its full oci:// reference and has no repo_url).
  type: list
  elements: dict
"""


class LookupModule(LookupBase):
    def run(
        self, terms: list[str], variables: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[dict[str, Any]]:
        try:
            from gpuinfra import addons
            from gpuinfra.errors import GpuinfraError
        except ImportError as err:
            raise AnsibleLookupError(
                f"the gpuinfra package is not importable by this Ansible ({err}); run "
                "ansible-playbook from the project's virtual environment (.venv/bin/ansible-playbook)"
            ) from None

        renders: list[dict[str, Any]] = []
        for addon in terms:
            prefix = f"{addon}_"
            role_vars = {
                name: self._templar.template(value)
                for name, value in (variables or {}).items()
                if name.startswith(prefix)
            }
            try:
                settings = addons.settings_from_role_vars(
                    addon, role_vars, file=f"variables of role {addon}"
                )
                # A disabled add-on applies nothing; its settings are still checked.
                render = addons.render(addon, settings) if settings.enabled else None
            except GpuinfraError as err:
                raise AnsibleLookupError("\n".join(err.lines())) from None
            renders.append(
                {
                    **_as_data(render, addon, settings.namespace),
                    "enabled": settings.enabled,
                    "settings": settings.model_dump(mode="json"),
                }
            )
        return renders


def _as_data(render: AddonRender | None, addon: str, namespace: str) -> dict[str, Any]:
    if render is None:
        return {
            "name": addon,
            "release": None,
            "namespace": namespace,
            "chart": None,
            "values": {},
            "objects": [],
            "files": {},
            "prerequisites": [],
            "namespace_labels": {},
        }
    chart = render.chart
    chart_data: dict[str, Any] | None = None
    if chart is not None:
        oci = chart.repository.startswith("oci://")
        chart_data = {
            "repository": chart.repository,
            "name": chart.name,
            "version": chart.version,
            "ref": f"{chart.repository.rstrip('/')}/{chart.name}" if oci else chart.name,
            "repo_url": None if oci else chart.repository,
        }
    return {
        "name": render.name,
        "release": render.release,
        "namespace": render.namespace,
        "chart": chart_data,
        "values": render.values,
        "objects": render.objects,
        "files": dict(render.files),
        "prerequisites": [p.document() for p in render.site_prerequisites()],
        "namespace_labels": {ns: dict(labels) for ns, labels in render.namespace_labels.items()},
    }
