"""The ansible-runner bridge on a real local run: recap, failures and node check reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuinfra.errors import UsageError
from gpuinfra.lab import runner

# A stand-in with the real module's name and return shape, so the bridge's lookup is exercised.
CHECK_MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec={"host": {"type": "str", "required": True}})
module.exit_json(changed=False, report={
    "host": module.params["host"], "gpu_present": False, "summary": "no GPU present",
    "checks": [{"name": "driver_version", "status": "skip", "detail": "no GPU",
                "expected": "535.261.03", "actual": None}]})
"""

PLAYBOOK = """
- name: Local run
  hosts: all
  gather_facts: false
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
      changed_when: true
    - name: Break on beta
      ansible.builtin.fail:
        msg: "beta broke: {{ inventory_hostname }}"
      when: inventory_hostname == 'beta'
    - name: Check the node
      gpu_node_check:
        host: "{{ inventory_hostname }}"
"""


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> runner.RunResult:
    work = tmp_path_factory.mktemp("run")
    (work / "library").mkdir()
    (work / "library" / "gpu_node_check.py").write_text(CHECK_MODULE)
    (work / "play.yml").write_text(PLAYBOOK)
    inventory = work / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    alpha: {ansible_connection: local}\n"
        "    beta: {ansible_connection: local}\n"
        "  vars: {ansible_python_interpreter: '{{ ansible_playbook_python }}'}\n"
    )
    events: list[str] = []
    outcome = runner.converge(
        work / "play.yml",
        inventory,
        on_event=lambda event, _progress: events.append(str(event.get("event"))),
        root=repo_root,
    )
    assert "playbook_on_stats" in events
    return outcome


def test_recap_counts_per_host(result: runner.RunResult) -> None:
    assert result.recap["alpha"]["changed"] == 1
    assert result.recap["alpha"]["failures"] == 0
    assert result.recap["beta"]["failures"] == 1
    assert result.changed() == {"alpha": 1, "beta": 1}
    assert result.failed_hosts() == {"beta"}
    assert not result.ok


def test_failures_name_host_task_and_message(result: runner.RunResult) -> None:
    (failure,) = result.failures
    assert (failure.host, failure.task) == ("beta", "Break on beta")
    assert failure.message == "beta broke: beta"
    assert str(failure) == "beta: failed at 'Break on beta': beta broke: beta"


def test_node_check_report_is_taken_from_the_module_result(result: runner.RunResult) -> None:
    assert set(result.reports) == {"alpha"}
    report = result.reports["alpha"]
    assert report["summary"] == "no GPU present"
    assert report["checks"][0]["status"] == "skip"


def test_artifacts_are_kept_for_inspection(result: runner.RunResult) -> None:
    assert (result.artifact_dir / "job_events").is_dir()
    assert "beta broke" in (result.artifact_dir / "stdout").read_text()


def test_unknown_playbook_names_the_known_ones(repo_root: Path) -> None:
    with pytest.raises(UsageError, match=r"did you mean 'nodes\.yml'") as caught:
        runner.find_playbook("node.yml", root=repo_root)
    assert "site.yml" in caught.value.message


def test_a_failed_fetch_names_its_url() -> None:
    progress = runner.Progress()
    res = {"msg": "Request failed: <urlopen error timed out>", "url": "http://127.0.0.1:9/gpgkey"}
    progress.feed(
        {
            "event": "runner_on_failed",
            "event_data": {
                "host": "gpu-1",
                "task": "Repository | fetch the signing key",
                "res": res,
            },
        }
    )
    (failure,) = progress.failures
    assert str(failure) == (
        "gpu-1: failed at 'Repository | fetch the signing key': "
        "Request failed: <urlopen error timed out> (http://127.0.0.1:9/gpgkey)"
    )
