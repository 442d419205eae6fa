"""Component tests run each component under Pulumi's mock runtime via gpuinfra.review.stackrun."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuinfra.errors import ConfigError
from gpuinfra.review.stackrun import StackRun, run_program

TAGS = {"team": "ml-platform", "project": "gpuinfra", "cost-center": "cc-1042"}


@pytest.fixture
def run() -> Callable[[Callable[[], object]], StackRun]:
    def _run(build: Callable[[], object]) -> StackRun:
        def program() -> None:
            build()

        return run_program(program)

    return _run


def refused(build: Callable[[], object]) -> Callable[[], None]:
    """A program that expects ``build`` to raise ConfigError and keeps the error."""

    def program() -> None:
        with pytest.raises(ConfigError) as caught:
            build()
        errors.append(caught.value)

    errors: list[ConfigError] = []
    program.errors = errors  # type: ignore[attr-defined]
    return program
