"""Turn the shared checks' findings into the project's ConfigError for a component's arguments."""

from __future__ import annotations

from collections.abc import Iterable

from gpuinfra.config import REQUIRED_TAGS, Finding
from gpuinfra.errors import ConfigError, Problem
from gpuinfra.loading import join_path


def findings_error(component: str, name: str, findings: Iterable[Finding]) -> ConfigError:
    """One ConfigError listing every finding, each as ``<Component> 'name': args.path: ...``."""
    return ConfigError(
        Problem(f"{component} '{name}'", join_path(["args", *path]), message)
        for path, message in findings
    )


def raise_findings(component: str, name: str, findings: list[Finding]) -> None:
    if findings:
        raise findings_error(component, name, findings)


def require_tags(tags: dict[str, str]) -> list[Finding]:
    """The cost tags every taggable resource carries."""
    missing = [key for key in REQUIRED_TAGS if not tags.get(key)]
    if not missing:
        return []
    required = ", ".join(REQUIRED_TAGS)
    return [(("tags",), f"missing cost tags {', '.join(missing)} (required: {required})")]
