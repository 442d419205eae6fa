"""CLI commands: addons."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuinfra.cli.console import say
from gpuinfra.cli.options import STACK_HELP, given_path, out_dir, parse_site
from gpuinfra.errors import UsageError, excerpt

addons_app = typer.Typer(help="In-cluster add-ons, as both delivery paths apply them.")


@addons_app.command("render")
def render(
    stack: Annotated[str | None, typer.Option(help=STACK_HELP)] = None,
    site: Annotated[
        Path | None, typer.Option(parser=parse_site, help="A site inventory directory")
    ] = None,
    out: Annotated[
        Path | None,
        out_dir(
            "Write one directory per add-on here (files an earlier render wrote there and "
            "this one does not are removed); else print"
        ),
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
    files = {rel: text for item in renders for rel, text in output.render_files(item).items()}
    if out is None:
        for relative, text in files.items():
            say(f"# --- {relative}")
            say(text.rstrip("\n"))
        return
    for relative in [*files, output.MANIFEST]:
        output.check_out(out, relative)
    removed = output.write(out, files)
    names = ", ".join(r.name for r in renders) or "none"
    say(f"wrote {len(files)} files under {out} (add-ons: {names})")
    if removed:
        listed = excerpt(", ".join(removed), 200)
        say(f"removed {len(removed)} files an earlier render wrote and this one does not: {listed}")


def _roles_option(value: str) -> Path:
    """``--roles DIR``, not empty."""
    return given_path(value, "a roles directory holding the add-on roles, e.g. roles")


@addons_app.command("role-files")
def role_files(
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; fail when a file is stale")
    ] = False,
    roles: Annotated[
        Path | None,
        typer.Option(parser=_roles_option, metavar="DIR", help="The roles directory"),
    ] = None,
) -> None:
    """Write the add-on roles' defaults and argument specs from the settings models."""
    from gpuinfra.addons import rolefiles
    from gpuinfra.loading import display_path
    from gpuinfra.paths import repo_root

    roles_dir = roles or repo_root() / "roles"
    _check_roles(roles_dir)
    shown = display_path(roles_dir)
    if check:
        rolefiles.check(roles_dir)
        say(f"role files under {shown} are up to date")
        return
    written = rolefiles.write(roles_dir)
    for path in written:
        say(f"wrote {display_path(path)}")
    if not written:
        say(f"role files under {shown} are up to date")


def _check_roles(roles_dir: Path) -> None:
    """``--roles``: an existing directory holding at least one add-on role. The files are
    generated into roles that exist; a directory that holds none is a mistaken path."""
    from gpuinfra.addons import ADDONS

    shown = excerpt(str(roles_dir), 80)
    allowed = f"allowed: a roles directory holding the add-on roles ({', '.join(ADDONS)})"
    if not roles_dir.is_dir():
        what = "not a directory" if roles_dir.exists() else "no such directory"
        raise UsageError(f"--roles {shown}: {what} ({allowed})")
    if not any((roles_dir / addon).is_dir() for addon in ADDONS):
        raise UsageError(f"--roles {shown}: holds no add-on role ({allowed})")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gpuinfra` app."""
    app.add_typer(addons_app, name="addons")
