"""Commands that need no cloud SDK start without one: help and checks stay quick to answer.

Importing pulumi and its providers takes a second or more, tritonclient.grpc brings numpy; a
command that loads them for nothing is a command that feels slow again.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, SUPPORT_TABLE_DAY

HEAVY = ("pulumi", "tritonclient", "numpy")

COMMANDS = [
    ["--help"],
    ["versions", "show"],
    ["versions", "check"],
    ["config", "check", "--stack", "prod", "--as-of", SUPPORT_TABLE_DAY],
    ["config", "check", "--site", "inventory/example"],
    ["lab", "--help"],
    ["lab", "up", "--help"],
]

# Each command runs through the console script's entry, in one child process that has imported
# nothing else; after each one, the heavy modules now loaded are listed with its exit code.
CHILD = """
import json, sys
import gpuinfra.cli

heavy = tuple(sys.argv[1].split(","))
report = []
for argv in json.loads(sys.argv[2]):
    try:
        gpuinfra.cli.main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    loaded = sorted(m for m in sys.modules if m.split(".")[0].startswith(heavy))
    report.append({"argv": argv, "code": code, "loaded": loaded})
print("REPORT " + json.dumps(report))
"""


def test_help_checks_and_lab_load_no_pulumi_tritonclient_or_numpy() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(HEAVY), json.dumps(COMMANDS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT "))
    report = json.loads(line.removeprefix("REPORT "))
    assert [r["argv"] for r in report] == COMMANDS
    for result in report:
        command = "gpuinfra " + " ".join(result["argv"])
        assert result["code"] == 0, f"{command} exited {result['code']}: {proc.stderr}"
        packages = sorted({m.split(".")[0] for m in result["loaded"]})
        assert not packages, f"{command} loaded {', '.join(packages)}: {result['loaded']}"
