"""One plan document as JSON, made by this checkout's own code.

``gpuinfra diff`` runs this inside the base revision's worktree
(``python -m gpuinfra.review stack dev``, ``python -m gpuinfra.review site inventory/example``),
so the base is planned by the library as it was at that revision, without going through its
command line. Errors are the library's: their lines on stderr, their exit code. What it writes is
read by ``diff``, not by people, so it bypasses the CLI's console (gpuinfra/cli/console.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuinfra.errors import EXIT_USAGE, GpuinfraError
from gpuinfra.review import plan

KINDS = ("stack", "site")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in KINDS:
        sys.stderr.write("usage: python -m gpuinfra.review {stack ENV | site DIR}\n")
        return EXIT_USAGE
    kind, name = argv
    try:
        document = plan.stack_plan(name) if kind == "stack" else plan.site_plan(Path(name))
    except GpuinfraError as exc:
        sys.stderr.writelines(f"error: {line}\n" for line in exc.lines())
        return exc.exit_code
    sys.stdout.write(plan.to_json(document))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
