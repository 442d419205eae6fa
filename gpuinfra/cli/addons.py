"""CLI commands: addons."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuinfra.cli.console import say
from gpuinfra.errors import UsageError

addons_app = typer.Typer(help="In-cluster add-ons, as both delivery paths apply them.")


@addons_app.command("render")
def render(
    stack: Annotated[str | None, typer.Option(help="A stack: dev, staging or prod")] = None,
    site: Annotated[Path | None, typer.Option(help="A site inventory directory")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write one directory per add-on here; else print")
    ] = None,
) -> None:
    """Render the enabled add-ons: chart, values, objects and model configs, as applied."""
    from gpuinfra import addons, config
    from gpuinfra import site as site_mod
    from gpuinfra.addons import output

    if (stack is None) == (site is None):
        raise UsageError("give exactly one of --stack ENV or --site DIR")
    if stack is not None:
        settings = config.load_stack(stack).addons
    else:
        assert site is not None
        settings = addons.settings_from_site(site_mod.load_site(site))
    renders = addons.render_all(settings)
    if out is None:
        for item in renders:
            for relative, text in output.render_files(item).items():
                say(f"# --- {relative}")
                say(text.rstrip("\n"))
        return
    written = output.write(renders, out)
    names = ", ".join(r.name for r in renders) or "none"
    say(f"wrote {len(written)} files under {out} (add-ons: {names})")


@addons_app.command("role-files")
def role_files(
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; fail when a file is stale")
    ] = False,
    roles: Annotated[Path | None, typer.Option(help="The roles directory")] = None,
) -> None:
    """Write the add-on roles' defaults and argument specs from the settings models."""
    from gpuinfra.addons import rolefiles
    from gpuinfra.paths import repo_root

    roles_dir = roles or repo_root() / "roles"
    if check:
        rolefiles.check(roles_dir)
        say(f"role files under {roles_dir} are up to date")
        return
    written = rolefiles.write(roles_dir)
    for path in written:
        say(f"wrote {path.relative_to(roles_dir.parent)}")
    if not written:
        say(f"role files under {roles_dir} are up to date")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gpuinfra` app."""
    app.add_typer(addons_app, name="addons")
