"""`gpuinfra converge` as a user sees it: progress lines, recap, node check table, exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.lab.test_runner import CHECK_MODULE, PLAYBOOK


def test_converge_reports_progress_tables_and_the_failed_host(tmp_path: Path, cli: Any) -> None:
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "gpu_node_check.py").write_text(CHECK_MODULE)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    alpha: {ansible_connection: local}\n"
        "    beta: {ansible_connection: local}\n"
        "  vars: {ansible_python_interpreter: '{{ ansible_playbook_python }}'}\n"
    )
    report = tmp_path / "report.json"
    result = cli(
        "converge", "--site", str(tmp_path), "--playbook", str(tmp_path / "play.yml"),
        "--report-json", str(report),
    )  # fmt: skip
    assert result.code == 1
    assert result.stderr.strip() == "error: beta: failed at 'Break on beta': beta broke: beta"
    # Without a terminal, progress is one line per task, in order.
    tasks = [line.split("| ")[-1] for line in result.stdout.splitlines() if " | " in line]
    assert tasks == ["Change something", "Break on beta", "Check the node"]
    assert "PLAY RECAP" in result.stdout
    assert "node check alpha: no GPU present" in result.stdout
    assert "driver_version" in result.stdout
    document = json.loads(report.read_text())
    assert document["recap"]["beta"]["failures"] == 1
    assert document["reports"]["alpha"]["summary"] == "no GPU present"
