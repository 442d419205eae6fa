"""An add-on render as the files a reviewer reads: chart coordinates, values, objects, extras."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from gpuinfra.addons.base import AddonRender
from gpuinfra.errors import UsageError, excerpt


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def render_files(render: AddonRender) -> dict[str, str]:
    """Relative path -> text, for one add-on, under a directory named after it."""
    base = render.name
    release: dict[str, Any] = {"release": render.release, "namespace": render.namespace}
    if render.chart is not None:
        release["chart"] = {
            "repository": render.chart.repository,
            "name": render.chart.name,
            "version": render.chart.version,
        }
    files = {f"{base}/release.yaml": _yaml(release)}
    if render.chart is not None:
        files[f"{base}/values.yaml"] = _yaml(render.values)
    if render.objects:
        files[f"{base}/objects.yaml"] = yaml.safe_dump_all(
            render.objects, sort_keys=False, explicit_start=True, allow_unicode=True
        )
    for relative, text in sorted(render.files.items()):
        files[f"{base}/{relative}"] = text
    return files


# What ``addons render --out DIR`` wrote there last: the files it owns in DIR. A file it no
# longer renders (an add-on turned off, a model removed) is deleted on the next render; every
# other file in DIR is the user's and left alone.
MANIFEST = ".gpuinfra-render.json"


def _shown(out: Path) -> str:
    return excerpt(str(out), 80)


def check_out(out: Path, relative: str | None = None) -> None:
    """Refuse, before anything is written, an ``--out`` that is not a directory (or cannot become
    one), and a path under it that a file of the render takes but that is in the way."""
    allowed = "allowed: a directory, or a path where one can be created"
    if relative is None:
        if out.is_symlink() and not out.exists():
            raise UsageError(
                f"--out {_shown(out)}: a link to {excerpt(str(out.readlink()), 80)}, which does "
                f"not exist ({allowed})"
            )
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
        if folder.is_symlink() and not folder.exists():
            raise UsageError(
                f"--out {_shown(out)}: {excerpt(str(folder.relative_to(out)), 80)} is a link to "
                f"{excerpt(str(folder.readlink()), 80)}, which does not exist, and a file is "
                "written into it (remove the link)"
            )
        if folder.exists() and not folder.is_dir():
            raise UsageError(
                f"--out {_shown(out)}: {excerpt(str(folder.relative_to(out)), 80)} is not a "
                "directory and a file is written into it (move it away)"
            )
    if target.is_symlink():
        raise UsageError(
            f"--out {_shown(out)}: {excerpt(relative, 80)} is a link to "
            f"{excerpt(str(target.readlink()), 80)} where a file is written, which the write "
            "would follow (remove the link)"
        )
    if target.is_dir():
        raise UsageError(
            f"--out {_shown(out)}: {excerpt(relative, 80)} is a directory where a file "
            "is written (move it away)"
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


def write(out: Path, files: dict[str, str]) -> list[str]:
    """Write ``files`` under ``out``, delete what the previous render wrote and this one does
    not, and record what is now owned; returns the deleted files' relative paths."""
    previous = _owned(out)
    try:
        # With every add-on off there is no file to write, but the manifest still records that.
        out.mkdir(parents=True, exist_ok=True)
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
