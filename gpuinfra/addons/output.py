"""An add-on render as the files a reviewer reads: chart coordinates, values, objects, extras."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuinfra.addons.base import AddonRender


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


def write(renders: list[AddonRender], out: Path) -> list[Path]:
    """Write every render under ``out``; returns the files written, in order."""
    written = []
    for render in renders:
        for relative, text in render_files(render).items():
            path = out / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written
