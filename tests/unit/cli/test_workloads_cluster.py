"""`workloads training --stack/--site`: a Job the cluster could never run is refused, in one line.

The dev stack has one L4 pool of g6.xlarge (1 GPU each, maxSize 2), Kueue's L4 flavor grants 2
GPUs and its one team is `research`; the example site has one H100 host and one L4 host of 8
GPUs each, Kueue grants 8 H100s and 7 L4s to the teams `research` and `inference`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_main

JOB = ("workloads", "training", "llm-pretrain", "--image", "nvcr.io/nvidia/pytorch:25.01-py3")
SITE = "inventory/example"


@pytest.fixture(autouse=True)
def in_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUINFRA_ROOT", str(ROOT))
    monkeypatch.chdir(ROOT)


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line a refused run prints; nothing on stdout, exit 2."""
    code, out, err = run_main(capsys, *JOB, *args)
    assert (code, out) == (2, ""), err
    assert len(err.splitlines()) == 1, err
    return err.removeprefix("error: ").rstrip("\n")


def test_a_gpu_type_no_node_carries_is_refused_naming_those_offered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = refused(capsys, "--namespace", "research", "--gpu-type", "h100", "--stack", "dev")
    assert line == (
        "--gpu-type h100: no node of stack dev carries gpuinfra.dev/gpu-type=h100 (allowed: 'l4')"
    )
    line = refused(capsys, "--namespace", "research", "--gpu-type", "a100", "--site", SITE)
    assert line == (
        "--gpu-type a100: no node of site example carries gpuinfra.dev/gpu-type=a100 "
        "(allowed: 'h100' or 'l4')"
    )


def test_more_gpus_per_pod_than_a_node_gives_is_refused_naming_the_most(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The defaults (8 GPUs a pod) against the dev stack's one-GPU L4 nodes."""
    line = refused(capsys, "--namespace", "research", "--gpu-type", "l4", "--stack", "dev")
    assert line == (
        "--gpus-per-node 8: no l4 node of stack dev gives one pod 8 GPUs "
        "(allowed: 1, what node pool l4 gives)"
    )


def test_a_node_whose_gpus_mig_splits_gives_no_whole_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The H100 host labelled with the site's MIG layout offers slices (mixed strategy), no
    nvidia.com/gpu: the scheduling rule's reason is given."""
    site = tmp_path / "example"
    shutil.copytree(ROOT / SITE, site)
    hosts = site / "hosts.yml"
    text = hosts.read_text()
    typed = "      gpu_node_registration_gpu_type: h100\n"
    assert typed in text
    labels = "      gpu_node_registration_labels: {nvidia.com/mig.config: inference}\n"
    hosts.write_text(text.replace(typed, typed + labels))
    line = refused(capsys, "--namespace", "research", "--gpu-type", "h100", "--site", str(site))
    assert line == (
        "--gpu-type h100: no h100 node of site example can run the Job's pods "
        "(host gpu-node-01: nvidia.com/gpu 8 requested, 0 allocatable)"
    )


def test_more_pods_than_the_nodes_hold_at_their_largest_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = refused(
        capsys, "--namespace", "research", "--gpu-type", "l4", "--gpus-per-node", "1",
        "--nodes", "3", "--stack", "dev",
    )  # fmt: skip
    assert line == (
        "--nodes 3: stack dev can run at most 2 of these pods at once, 1 on each of node pool "
        "l4's 2 nodes at its maxSize (allowed: 1 to 2, or a larger maxSize)"
    )
    line = refused(
        capsys, "--namespace", "research", "--gpu-type", "h100", "--nodes", "2", "--site", SITE
    )
    assert line == (
        "--nodes 2: site example can run at most 1 of these pods at once, 1 on host "
        "gpu-node-01 (allowed: 1, or more hosts with gpu_node_registration_gpu_type: h100)"
    )


def test_pods_that_share_a_node_count_as_it_holds_them(capsys: pytest.CaptureFixture[str]) -> None:
    """Two pods of 4 H100s fit the one 8-GPU host together: not refused."""
    code, _out, err = run_main(
        capsys, *JOB, "--namespace", "research", "--gpu-type", "h100", "--gpus-per-node", "4",
        "--nodes", "2", "--site", SITE,
    )  # fmt: skip
    assert (code, err) == (0, "")


def test_kueue_turned_off_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "example"
    shutil.copytree(ROOT / SITE, site)
    kueue = site / "group_vars" / "all" / "kueue.yml"
    text = kueue.read_text()
    assert "kueue_enabled: true\n" in text
    kueue.write_text(text.replace("kueue_enabled: true\n", "kueue_enabled: false\n"))
    line = refused(capsys, "--namespace", "research", "--gpu-type", "h100", "--site", str(site))
    assert line == (
        "--queue gpu: Kueue is off in site example, so nothing admits the Job through its "
        "kueue.x-k8s.io/queue-name label and it stays suspended; set kueue_enabled: true"
    )


def test_a_namespace_that_is_no_kueue_team_is_refused_naming_the_teams(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = refused(
        capsys, "--namespace", "team-a", "--gpu-type", "l4", "--gpus-per-node", "1",
        "--stack", "dev",
    )  # fmt: skip
    assert line == (
        "--namespace team-a: not a Kueue team namespace of stack dev, so no LocalQueue there "
        "admits the Job (allowed: 'research', or add it to kueue.teams)"
    )


def test_a_queue_that_is_not_the_teams_local_queue_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = refused(
        capsys, "--namespace", "research", "--gpu-type", "l4", "--gpus-per-node", "1",
        "--queue", "batch", "--stack", "dev",
    )  # fmt: skip
    assert line == (
        "--queue batch: not the LocalQueue Kueue gives each team of stack dev (allowed: 'gpu')"
    )


def test_more_gpus_than_the_flavors_quota_is_refused_naming_the_quota(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The L4 host gives 8 GPUs, Kueue grants 7 of them: the Job would wait forever."""
    line = refused(capsys, "--namespace", "inference", "--gpu-type", "l4", "--site", SITE)
    assert line == (
        "--nodes 1 --gpus-per-node 8: 8 l4 GPUs in all, more than Kueue's quota of 7 for l4 in "
        "site example, so the Job waits forever (allowed: at most 7 GPUs in all, or raise gpus "
        "of kueue_flavors' l4 entry)"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--gpu-type", "l4", "--gpus-per-node", "1", "--nodes", "2", "--stack", "dev"),
        ("--gpu-type", "h100", "--site", SITE),
    ],
)
def test_a_job_the_cluster_can_run_is_printed_as_without_it(
    args: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    option = args.index("--stack") if "--stack" in args else args.index("--site")
    without = args[:option] + args[option + 2 :]
    code, plain, err = run_main(capsys, *JOB, "--namespace", "research", *without)
    assert (code, err) == (0, "")
    code, checked, err = run_main(capsys, *JOB, "--namespace", "research", *args)
    assert (code, err) == (0, "")
    assert checked == plain
    assert "kind: Job" in checked


def test_stack_and_site_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(
        capsys, "--namespace", "research", "--gpu-type", "h100", "--stack", "dev", "--site", SITE
    )
    assert line == "give at most one of --stack ENV or --site DIR"
