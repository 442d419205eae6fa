"""CLI commands: addons."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer

from gpuinfra.cli.console import say
from gpuinfra.errors import UsageError, excerpt

addons_app = typer.Typer(help="In-cluster add-ons, as both delivery paths apply them.")


@addons_app.command("render")
def render(
    stack: Annotated[str | None, typer.Option(help="A stack: dev, staging or prod")] = None,
    site: Annotated[Path | None, typer.Option(help="A site inventory directory")] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write one directory per add-on here (files an earlier render wrote there and "
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
    if out is not None:
        _check_out(out)
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
    for relative in files:
        _check_out(out, relative)
    removed = _write(out, files)
    names = ", ".join(r.name for r in renders) or "none"
    say(f"wrote {len(files)} files under {out} (add-ons: {names})")
    if removed:
        listed = excerpt(", ".join(removed), 200)
        say(f"removed {len(removed)} files an earlier render wrote and this one does not: {listed}")


# What ``addons render --out DIR`` wrote there last: the files it owns in DIR. A file it no
# longer renders (an add-on turned off, a model removed) is deleted on the next render; every
# other file in DIR is the user's and left alone.
MANIFEST = ".gpuinfra-render.json"


def _shown(out: Path) -> str:
    return excerpt(str(out), 80)


def _check_out(out: Path, relative: str | None = None) -> None:
    """Refuse, before anything is written, an ``--out`` that is not a directory (or cannot become
    one), and a path under it that a file of the render takes but that is in the way."""
    allowed = "allowed: a directory, or a path where one can be created"
    if relative is None:
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {_shown(out)}: not a directory ({allowed})")
        # The nearest path above that exists must be a directory: DIR is created in it.
        above = next((p for p in out.parents if p.exists() or p.is_symlink()), None)
        if above is not None and not above.is_dir():
            raise UsageError(
                f"--out {_shown(out)}: {excerpt(str(above), 80)} is not a directory ({allowed})"
            )
        return
    target = out / relative
    for folder in target.parents[: len(Path(relative).parts) - 1]:
        if folder.exists() and not folder.is_dir():
            raise UsageError(
                f"--out {_shown(out)}: {excerpt(str(folder.relative_to(out)), 80)} is not a "
                "directory and the render writes into it (move it away)"
            )
    if target.is_dir():
        raise UsageError(
            f"--out {_shown(out)}: {excerpt(relative, 80)} is a directory where the render "
            "writes a file (move it away)"
        )


def _owned(out: Path) -> list[str]:
    """The files the last render into ``out`` wrote, as its manifest lists them; paths that
    would leave ``out`` are not ours and are skipped, and a manifest that cannot be read lists none."""
    try:
        data = json.loads((out / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        return []
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list):
        return []
    owned = []
    for item in files:
        if not isinstance(item, str) or not item:
            continue
        rel = PurePosixPath(item)
        if rel.is_absolute() or ".." in rel.parts or rel.name == MANIFEST:
            continue
        owned.append(item)
    return owned


def _write(out: Path, files: dict[str, str]) -> list[str]:
    """Write ``files`` under ``out``, delete what the previous render wrote and this one does
    not, and record what is now owned; returns the deleted files' relative paths."""
    previous = _owned(out)
    try:
        for relative, text in files.items():
            path = out / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        removed = []
        for relative in sorted(set(previous) - set(files)):
            path = out / relative
            # Only a plain file that is really below ``out``: not through a linked folder.
            inside = out.resolve() in path.resolve().parents
            if inside and path.is_file() and not path.is_symlink():
                path.unlink()
                removed.append(relative)
                _prune(out, path.parent)
        manifest = {"written_by": "gpuinfra addons render", "files": sorted(files)}
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        where = f" {excerpt(exc.filename, 80)}" if isinstance(exc.filename, str) else ""
        raise UsageError(
            f"--out {_shown(out)}: cannot write{where}: {exc.strerror or exc}"
        ) from None
    return removed


def _prune(out: Path, folder: Path) -> None:
    """Remove ``folder`` and its parents below ``out`` while they are empty."""
    while folder != out and out in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


@addons_app.command("role-files")
def role_files(
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; fail when a file is stale")
    ] = False,
    roles: Annotated[Path | None, typer.Option(help="The roles directory")] = None,
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
