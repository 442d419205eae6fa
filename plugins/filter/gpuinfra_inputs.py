"""Ansible filter: the node roles' preflight judges URL, key and path inputs by gpuinfra's rules.

``{{ {'nvidia_driver_cuda_repo_url': nvidia_driver_cuda_repo_url} | gpuinfra_input_problems }}``
is the list of ``name: why`` for each value the rules in gpuinfra/inputs.py refuse: the same
rules ``gpuinfra config check`` applies to a site's files. Runs on the controller, where the
gpuinfra package is importable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpuinfra import inputs


def gpuinfra_input_problems(variables: Mapping[str, Any]) -> list[str]:
    return inputs.problems(variables)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gpuinfra_input_problems": gpuinfra_input_problems}
