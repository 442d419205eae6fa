"""What ``config check`` refuses in a stack or a site, as functions: a command that edits one of
those files (``triton canary``, ``triton tune``) checks the edited text with them before it
writes, so that it never writes a file ``config check`` would refuse."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from gpuinfra.errors import ConfigError, Problem, UsageError

if TYPE_CHECKING:
    from gpuinfra.config import StackConfig
    from gpuinfra.integrity import Finding


def stack_warnings(stack: str, cfg: StackConfig) -> list[Finding]:
    """The checks of a stack beyond its file's own (which ``config.load_stack`` and
    ``config.parse_stack`` run): the policy's node limits and the whole-stack integrity check.
    Raises ConfigError on an error; returns the integrity warnings."""
    from gpuinfra import config, integrity
    from gpuinfra.loading import display_path
    from gpuinfra.review import policy

    policy.refuse_pools_over_limits(stack, cfg)
    return integrity.check_stack(cfg, display_path(config.stack_path(stack)))


def edited_stack(stack: str, text: str) -> None:
    """Raise ConfigError where ``text``, as the new content of ``stack``'s file, would fail
    ``config check --stack`` (its file, its node limits, its integrity)."""
    from gpuinfra import config
    from gpuinfra.loading import display_path, parse_yaml

    shown = display_path(config.stack_path(stack))
    cfg = config.parse_stack(parse_yaml(text, shown), shown, stack=stack)
    stack_warnings(stack, config.check_stack(cfg, shown))


def edited_site(site: Path, file: Path, text: str) -> None:
    """Raise ConfigError where the site, with ``text`` as the new content of its vars file
    ``file``, would fail ``config check --site``. The check reads a copy of the site in a
    temporary directory; the messages name the site's own files."""
    from gpuinfra import integrity
    from gpuinfra.loading import display_path

    home = Path(os.path.abspath(site))
    try:
        relative = Path(os.path.abspath(file)).relative_to(home)
    except ValueError:
        raise UsageError(
            f"{display_path(file)}: not a file of the site {display_path(site)}, so the edit "
            "cannot be checked with it"
        ) from None
    with tempfile.TemporaryDirectory(prefix="gpuinfra-edit-") as tmp:
        copy = Path(tmp) / (home.name or "site")
        # Links are followed: a link relative to the site would lead nowhere from the copy.
        shutil.copytree(home, copy, ignore_dangling_symlinks=True)
        target = copy / relative
        if target.is_symlink():
            target.unlink()
        target.write_text(text, encoding="utf-8")
        copied, original = display_path(copy), display_path(site)

        def named(line: str) -> str:
            return line.replace(copied, original)

        try:
            integrity.load_checked_site(copy)
        except ConfigError as refused:
            raise ConfigError(
                Problem(named(p.file), p.path, named(p.message)) for p in refused.problems
            ) from None
        except UsageError as refused:
            raise UsageError(named(refused.message)) from None
