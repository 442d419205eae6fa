"""Ansible filter: what an S3 model repository lacks for the declared version policies.

The rules are the gpuinfra core's (``triton.repository_problems``), so the role checks what the
init container checks on a volume and what ``gpuinfra`` reports, with the same lines.
"""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleFilterError


def triton_repository_problems(
    keys: list[str], models: list[dict[str, Any]] | dict[str, Any], prefix: str = ""
) -> list[str]:
    """One line per missing version directory or backend file, given the listed keys.

    ``models`` is the models list, or Triton's whole settings: then every model as some pod
    serves it, a canary's version policy too."""
    try:
        from gpuinfra.addons import triton
    except ImportError as err:
        raise AnsibleFilterError(
            f"the gpuinfra package is not importable by this Ansible ({err})"
        ) from None
    # Ansible hands over its own container and string types; plain JSON data is what the
    # settings model validates.
    plain = json.loads(json.dumps(models, default=str))
    if isinstance(plain, dict):
        parsed = triton.served_models(triton.TritonSettings.model_validate(plain))
    else:
        parsed = [triton.TritonModel.model_validate(model) for model in plain]
    return triton.repository_problems(parsed, keys, prefix)


def triton_index_problems(index: Any, settings: dict[str, Any], deployment: str) -> list[str]:
    """What one Deployment's server lists in ``/v2/repository/index`` against the version
    policies its models declare (a canary's its own), one line per problem."""
    try:
        from gpuinfra.addons import triton
    except ImportError as err:
        raise AnsibleFilterError(
            f"the gpuinfra package is not importable by this Ansible ({err})"
        ) from None
    parsed = triton.TritonSettings.model_validate(json.loads(json.dumps(settings, default=str)))
    groups = {g.name: g for g in triton.groups(parsed)}
    if deployment not in groups:
        raise AnsibleFilterError(f"{deployment!r} is not a Triton Deployment of these settings")
    if not isinstance(index, list):
        raise AnsibleFilterError(f"a repository index is a list of models, not {index!r}")
    # The HTTP index lists a model without version or state where it is not loaded.
    entries = [
        (str(m["name"]), int(m["version"]), str(m.get("state", "")))
        for m in index
        if isinstance(m, dict) and m.get("version")
    ]
    return triton.index_problems(list(groups[deployment].models), entries)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpuinfra_triton_repository_problems": triton_repository_problems,
            "gpuinfra_triton_index_problems": triton_index_problems,
        }
