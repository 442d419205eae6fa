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
    start = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    relative = [key[len(start) :] for key in keys if key.startswith(start)]
    # Ansible hands over its own container and string types; plain JSON data is what the
    # settings model validates.
    plain = json.loads(json.dumps(models, default=str))
    if isinstance(plain, dict):
        parsed = triton.served_models(triton.TritonSettings.model_validate(plain))
    else:
        parsed = [triton.TritonModel.model_validate(model) for model in plain]
    return triton.repository_problems(parsed, relative)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpuinfra_triton_repository_problems": triton_repository_problems}
