"""The training workload template: queued by Kueue, NCCL set from the network, valid objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import addons, schemas, site, versions, workloads
from gpuinfra.errors import InputInvalid
from tests.conftest import ROOT, run_cli, run_main

K8S = versions.pinned().kubernetes.version


def job(**changes: Any) -> workloads.TrainingJob:
    settings: dict[str, Any] = {
        "name": "llm-pretrain",
        "namespace": "team-a",
        "queue": "gpu",
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "gpu_type": "h100",
        "nodes": 2,
        "network": "infiniband",
        "socket_ifname": "ens1f0",
    }
    settings.update(changes)
    return workloads.TrainingJob(**settings)


def env(obj: dict[str, Any]) -> dict[str, str]:
    container = obj["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"]}


@pytest.mark.parametrize("network", ["efa", "infiniband", "roce", "tcp"])
def test_every_network_gives_valid_objects(network: str) -> None:
    efa = 32 if network == "efa" else 0
    objects = workloads.training_objects(job(network=network, efa_interfaces=efa))
    for obj in objects:
        assert schemas.core_problems(obj, K8S) == []


def test_the_job_waits_for_kueue_and_fits_the_gpu_nodes() -> None:
    obj = workloads.training_job(job())
    cost = {"team": "team-a", "project": "llm-pretrain"}
    assert obj["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "gpu", **cost}
    assert obj["spec"]["template"]["metadata"]["labels"] == cost
    assert obj["spec"]["suspend"] is True
    pod = obj["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpuinfra.dev/gpu-type": "h100"}
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert toleration in pod["tolerations"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]


# What the Pod Security Standards' baseline level lets a container add: the level of the team
# namespaces gpuinfra creates (docs/decisions/0027).
BASELINE_CAPABILITIES = {
    *("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD"),
    *("NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"),
}


def test_the_pods_carry_the_team_and_project_given() -> None:
    obj = workloads.training_job(job(team="vision", project="resnet"))
    labels = obj["spec"]["template"]["metadata"]["labels"]
    assert labels == {"team": "vision", "project": "resnet"}
    (line,) = lines_of(team="", project="resnet")
    assert line == (
        "--team '': not a label value (allowed: 1-63 letters, digits, '-', '_' and '.', starting "
        "and ending with a letter or digit)"
    )
    (line,) = lines_of(project="-x")
    assert line.startswith("--project '-x': not a label value (allowed: 1-63 letters")


@pytest.mark.parametrize("network", workloads.NETWORKS)
def test_the_pods_pass_the_team_namespaces_pod_security_level(network: str) -> None:
    # A pod the namespace refuses never starts: the Job waits with FailedCreate events. RDMA's
    # locked memory comes from the runtime's limit instead (docs/decisions/0082).
    settings = addons.settings_from_site(site.load_site(ROOT / "inventory" / "example"))
    (kueue,) = [r for r in addons.render_all(settings) if r.name == "kueue"]
    team = settings.kueue.teams[0]
    assert kueue.namespace_labels[team]["pod-security.kubernetes.io/enforce"] == "baseline"
    efa = 32 if network == "efa" else 0
    pod = workloads.training_job(job(namespace=team, network=network, efa_interfaces=efa))
    spec = pod["spec"]["template"]["spec"]
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert not any("hostPath" in volume for volume in spec.get("volumes", []))
    for container in spec["containers"]:
        context = container.get("securityContext", {})
        assert not context.get("privileged")
        assert set(context.get("capabilities", {}).get("add", [])) <= BASELINE_CAPABILITIES
        assert not any(port.get("hostPort") for port in container.get("ports", []))


def test_nccl_follows_the_network() -> None:
    ib = env(workloads.training_job(job()))
    assert (ib["NCCL_IB_TIMEOUT"], ib["NCCL_IB_RETRY_CNT"]) == ("22", "7")
    assert ib["NCCL_SOCKET_IFNAME"] == "ens1f0"
    efa_job = workloads.training_job(job(network="efa", efa_interfaces=32, socket_ifname=None))
    efa = env(efa_job)
    assert (efa["FI_PROVIDER"], efa["NCCL_NET_PLUGIN"]) == ("efa", "ofi")
    assert "NCCL_IB_TIMEOUT" not in efa
    limits = efa_job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["vpc.amazonaws.com/efa"] == 32
    assert env(workloads.training_job(job(network="tcp")))["NCCL_IB_DISABLE"] == "1"


def test_missing_network_settings_are_refused() -> None:
    with pytest.raises(InputInvalid, match="--socket-ifname: required with --network infiniband"):
        workloads.training_job(job(socket_ifname=None))
    with pytest.raises(InputInvalid, match="--efa-interfaces 0: out of range with --network efa"):
        workloads.training_job(job(network="efa", socket_ifname=None))
    with pytest.raises(InputInvalid, match="--network 'ethernet': not allowed"):
        workloads.training_job(job(network="ethernet"))


def test_the_command_prints_both_objects_and_refuses_a_missing_setting() -> None:
    common = ["--namespace", "team-a", "--image", "nvcr.io/nvidia/pytorch:25.01-py3"]
    result = run_cli(
        "workloads", "training", "llm-pretrain", *common, "--gpu-type", "h100",
        "--nodes", "2", "--network", "roce", "--socket-ifname", "ens1f0",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert [obj["kind"] for obj in yaml.safe_load_all(result.stdout)] == ["Job", "Service"]
    bad = run_cli("workloads", "training", "x", *common, "--gpu-type", "h100", "--network", "roce")
    assert bad.code == 2
    assert bad.stderr == (
        "error: --socket-ifname: required with --network roce: the interface of the site's data "
        "network NCCL bootstraps over, e.g. --socket-ifname ens1f0\n"
    )


def lines_of(**changes: Any) -> list[str]:
    with pytest.raises(InputInvalid) as info:
        workloads.training_job(job(**changes))
    return info.value.lines()


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        ({"name": "Job_1"}, "NAME 'Job_1': not a name for the Job and its Service (allowed: at most 61"),
        ({"name": "1job"}, "NAME '1job': not a name"),
        ({"name": "j" * 62}, "NAME 'jjjj"),
        ({"name": "j" * 60, "nodes": 1000}, "NAME 'jjjj"),
        ({"namespace": "Team"}, "--namespace 'Team': not a Kubernetes namespace (allowed:"),
        ({"namespace": "team-"}, "--namespace 'team-': not a Kubernetes namespace"),
        ({"namespace": "kube-system"}, "--namespace 'kube-system': the cluster's own namespace, not a team's (not allowed: 'default' or a name starting with 'kube-', the prefix Kubernetes keeps for its own namespaces)"),
        ({"namespace": "kube-foo"}, "--namespace 'kube-foo': the cluster's own namespace, not a team's (not allowed: 'default' or a name starting with 'kube-'"),
        ({"namespace": "default"}, "--namespace 'default': the cluster's own namespace, not a team's"),
        ({"namespace": "kube-"}, "--namespace 'kube-': not a Kubernetes namespace (allowed:"),
        ({"queue": "Bad_Q"}, "--queue 'Bad_Q': not a Kubernetes LocalQueue name (allowed:"),
        ({"gpu_type": "H 100"}, "--gpu-type 'H 100': not a GPU type gpuinfra knows; did you mean 'h100'? (allowed: 'a10', "),
        ({"gpu_type": "H100"}, "--gpu-type 'H100': not a GPU type gpuinfra knows; did you mean 'h100'?"),
        ({"gpu_type": "b300"}, "--gpu-type 'b300': not a GPU type gpuinfra knows"),
        ({"image": "nvcr.io/nvidia/pytorch:latest"}, "--image 'nvcr.io/nvidia/pytorch:latest': the tag 'latest' moves"),
        ({"image": "nvcr.io/nvidia/pytorch:nightly"}, "--image 'nvcr.io/nvidia/pytorch:nightly': the tag 'nightly' moves"),
        ({"image": "nvcr.io/nvidia/pytorch"}, "--image 'nvcr.io/nvidia/pytorch': no tag or digest"),
        ({"image": "NVCR.io/Nvidia/PyTorch:25.01"}, "--image 'NVCR.io/Nvidia/PyTorch:25.01': not an image reference"),
        ({"image": "pytorch@sha256:abc"}, "--image 'pytorch@sha256:abc': not an image reference"),
        ({"image": "r.io/" + "a" * 251 + ":1.0"}, "--image 'r.io/aaaa"),
        ({"shm_size": "64GB"}, "--shm-size '64GB': not a Kubernetes quantity above zero; did you mean '64Gi'? (allowed:"),
        ({"shm_size": "0"}, "--shm-size '0': not a Kubernetes quantity above zero (allowed:"),
        ({"shm_size": "lots"}, "--shm-size 'lots': not a Kubernetes quantity"),
        ({"gpus_per_node": 0}, "--gpus-per-node 0: out of range (allowed: 1 to 16;"),
        ({"gpus_per_node": 17}, "--gpus-per-node 17: out of range (allowed: 1 to 16;"),
        ({"nodes": 0}, "--nodes 0: out of range (allowed: 1 to 100000;"),
        ({"network": "efa", "efa_interfaces": 33}, "--efa-interfaces 33: out of range with --network efa (allowed: 1 to 32, the share of 8 GPUs in an instance type's EFA interfaces; 32 for 8 GPUs on p5.48xlarge)"),
        ({"network": "efa", "efa_interfaces": 5, "gpus_per_node": 1}, "--efa-interfaces 5: out of range with --network efa (allowed: 1 to 4, the share of 1 GPU in an instance type's EFA interfaces; 32 for 8 GPUs on p5.48xlarge)"),
        ({"network": "efa", "efa_interfaces": 32, "gpu_type": "l40s"}, "--efa-interfaces 32: out of range with --network efa (allowed: 1 to 4, the share of 8 GPUs in an instance type's EFA interfaces; 4 for 8 GPUs on g6e.48xlarge)"),
        ({"network": "efa", "efa_interfaces": 32, "gpus_per_node": 16}, "--gpus-per-node 16: more GPUs than an instance type with EFA and h100 GPUs has (allowed: 1 to 8 with --network efa; 8 on p5.48xlarge)"),
        ({"network": "efa", "efa_interfaces": 1, "gpu_type": "a40"}, "--network efa: no instance type of the catalog has EFA and a40 GPUs (allowed with --network efa: --gpu-type 'a100', 'a10g', 'h100', 'h200', 'l4' or 'l40s')"),
        ({"efa_interfaces": 4}, "--efa-interfaces 4: only with --network efa (allowed: 0 with --network infiniband)"),
        ({"socket_ifname": "eth 0"}, "--socket-ifname 'eth 0': not an interface name (allowed:"),
        ({"socket_ifname": "averyveryverylongname"}, "--socket-ifname 'averyveryverylongname': not an interface name"),
    ],
)  # fmt: skip
def test_each_bad_setting_is_one_line_naming_its_flag(changes: dict[str, Any], start: str) -> None:
    (line,) = lines_of(**changes)
    assert line.startswith(start), line


def test_an_image_name_longer_than_a_registry_takes_is_refused_in_one_line() -> None:
    longest = "r.io/" + "a" * 250
    assert job(image=f"{longest}:1.0").problems() == []
    (line,) = lines_of(image=f"{longest}a@sha256:{'0' * 64}")
    assert line.endswith(
        ": the repository name has 256 characters (allowed: at most 255, the registry's host "
        "included)"
    )


def test_pinned_images_and_nccl_interface_lists_are_accepted() -> None:
    digest = "sha256:" + "0" * 64
    for image in (
        "nvcr.io/nvidia/pytorch:25.01-py3",
        f"nvcr.io/nvidia/pytorch@{digest}",
        f"nvcr.io/nvidia/pytorch:latest@{digest}",  # run by digest: the tag is a label
        "registry.example.internal:5000/team/train:v1.2",
        "pytorch:2.5.1",
    ):
        assert workloads.training_job(job(image=image))["kind"] == "Job"
    for ifname in ("ens1f0", "^docker,lo", "=eth0", "ib0,ib1"):
        assert (
            env(workloads.training_job(job(socket_ifname=ifname)))["NCCL_SOCKET_IFNAME"] == ifname
        )


def test_the_default_tcp_network_needs_no_interface() -> None:
    """NCCL picks the pod's own interface over TCP: the command's defaults print a valid Job."""
    obj = workloads.training_job(job(network="tcp", socket_ifname=None))
    assert env(obj) == {"NNODES": "2", "NPROC_PER_NODE": "8", "NCCL_IB_DISABLE": "1"}
    assert schemas.core_problems(obj, K8S) == []


def test_every_catalog_gpu_is_a_known_gpu_type() -> None:
    from gpuinfra import catalog

    known = workloads.gpu_types()
    assert {t.gpu_name for t in catalog.instance_types().values()} <= set(known)
    assert {"h100", "h200", "l4", "a100"} <= set(known)


def test_the_command_refuses_every_bad_flag_and_prints_nothing(tmp_path: Path) -> None:
    result = run_cli(
        "workloads", "training", "Job_1", "--namespace", "Team", "--gpu-type", "H 100",
        "--image", "nvcr.io/nvidia/pytorch:latest", "--queue", "Bad_Q", "--shm-size", "64GB",
        "--socket-ifname", "eth0", cwd=tmp_path, root=ROOT,
    )  # fmt: skip
    assert result.code == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    flags = ["NAME", "--namespace", "--queue", "--gpu-type", "--image", "--shm-size"]
    assert [line.split(" ", 2)[1] for line in lines] == flags, result.stderr
    assert all(line.startswith("error: ") and len(line) <= 320 for line in lines)
    for internal in ("socket_ifname", "shm_size", "gpu_type", "efa_interfaces"):
        assert internal not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_command_refuses_a_kube_namespace_in_one_line(tmp_path: Path) -> None:
    result = run_cli(
        "workloads", "training", "llm-pretrain", "--namespace", "kube-foo", "--gpu-type", "h100",
        "--image", "nvcr.io/nvidia/pytorch:25.01-py3", cwd=tmp_path, root=ROOT,
    )  # fmt: skip
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "error: --namespace 'kube-foo': the cluster's own namespace, not a team's (not allowed: "
        "'default' or a name starting with 'kube-', the prefix Kubernetes keeps for its own "
        "namespaces)"
    ]


def test_the_command_runs_with_its_defaults(tmp_path: Path) -> None:
    result = run_cli(
        "workloads", "training", "llm-pretrain", "--namespace", "team-a", "--gpu-type", "h100",
        "--image", "nvcr.io/nvidia/pytorch:25.01-py3", cwd=tmp_path, root=ROOT,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    job_obj, service = yaml.safe_load_all(result.stdout)
    assert service["metadata"]["name"] == job_obj["metadata"]["name"] == "llm-pretrain"
    assert list(tmp_path.iterdir()) == []


def test_the_command_bounds_efa_interfaces_by_the_catalog(tmp_path: Path) -> None:
    common = ["--namespace", "team-a", "--gpu-type", "h100", "--network", "efa"]
    image = ["--image", "nvcr.io/nvidia/pytorch:25.01-py3"]
    bad = run_cli("workloads", "training", "llm", *common, *image, "--efa-interfaces", "33")
    assert bad.code == 2
    assert bad.stderr.startswith("error: --efa-interfaces 33: out of range with --network efa")
    good = run_cli("workloads", "training", "llm", *common, *image, "--efa-interfaces", "32")
    assert good.code == 0, good.stderr
    one_gpu = ["--gpus-per-node", "1"]
    bad = run_cli(
        "workloads", "training", "llm", *common, *image, *one_gpu, "--efa-interfaces", "5"
    )
    assert (bad.code, bad.stdout) == (2, "")
    assert bad.stderr.startswith("error: --efa-interfaces 5: out of range with --network efa")


NODES = "allowed: 1 to 100000; Kubernetes runs an indexed Job on at most 100000 pods"
SHM = "allowed: 1Mi to 1Ti, a number with a suffix such as 64Gi, 512Mi or 64G"


@pytest.mark.parametrize(
    ("flag", "value", "line"),
    [
        ("--nodes", "1" + "0" * 30, f"--nodes 1{'0' * 30}: out of range ({NODES})"),
        ("--nodes", "2147483648", f"--nodes 2147483648: out of range ({NODES})"),
        ("--nodes", "100001", f"--nodes 100001: out of range ({NODES})"),
        ("--shm-size", "9" * 29 + "Ei", f"--shm-size '{'9' * 29}Ei': out of range ({SHM})"),
        ("--shm-size", "1m", f"--shm-size '1m': out of range ({SHM})"),
        ("--shm-size", "0.0000001Ki", f"--shm-size '0.0000001Ki': out of range ({SHM})"),
        ("--shm-size", "1048575", f"--shm-size '1048575': out of range ({SHM})"),
        ("--shm-size", "1025Gi", f"--shm-size '1025Gi': out of range ({SHM})"),
        ("--shm-size", "0Gi", f"--shm-size '0Gi': not a Kubernetes quantity above zero ({SHM})"),
        ("--shm-size", "0GB", f"--shm-size '0GB': not a Kubernetes quantity above zero ({SHM})"),
        ("--shm-size", "2TB", f"--shm-size '2TB': not a Kubernetes quantity above zero ({SHM})"),
        ("--shm-size", "64GB", f"--shm-size '64GB': not a Kubernetes quantity above zero; did you mean '64Gi'? ({SHM})"),
        ("--shm-size", "64 gib", f"--shm-size '64 gib': not a Kubernetes quantity above zero; did you mean '64Gi'? ({SHM})"),
    ],
)  # fmt: skip
def test_the_command_bounds_nodes_and_shm_size(
    flag: str, value: str, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--nodes lands in the Job's int32 completions and parallelism, which Kubernetes bounds
    at 100,000 for an indexed Job; --shm-size is a memory size, never a suggestion of itself."""
    code, out, err = run_main(
        capsys,
        *("workloads", "training", "llm", "--namespace", "team-a", "--gpu-type", "h100"),
        *("--image", "nvcr.io/nvidia/pytorch:25.01-py3", f"{flag}={value}"),
    )
    assert (code, out) == (2, "")
    assert err == f"error: {line}\n"


def test_the_bounds_of_nodes_and_shm_size_are_allowed() -> None:
    for nodes, shm in ((100_000, "1Mi"), (1, "1Ti"), (2, "1.5Gi"), (2, "1048576"), (2, "1T")):
        obj = workloads.training_job(job(nodes=nodes, shm_size=shm))
        assert (obj["spec"]["completions"], obj["spec"]["parallelism"]) == (nodes, nodes)
        volume = obj["spec"]["template"]["spec"]["volumes"][0]
        assert volume["emptyDir"]["sizeLimit"] == shm
        assert schemas.core_problems(obj, K8S) == []


def test_kueue_covers_every_resource_an_efa_job_asks_for() -> None:
    """Kueue never admits a Job asking for a resource its ClusterQueue does not cover."""
    flavor = {"gpuType": "h100", "gpus": 16, "cpu": "192", "memory": "2000Gi"}
    efa_job = workloads.training_job(job(network="efa", efa_interfaces=32, socket_ifname=None))
    asked = set(efa_job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"])
    assert "vpc.amazonaws.com/efa" in asked

    def covered(**quota: int) -> set[str]:
        settings = {"flavors": [{**flavor, **quota}], "teams": ["team-a"]}
        objects = addons.render("kueue", settings).objects
        (queue,) = [o for o in objects if o["kind"] == "ClusterQueue"]
        (group,) = queue["spec"]["resourceGroups"]
        (quotas,) = [f["resources"] for f in group["flavors"]]
        assert [r["name"] for r in quotas] == group["coveredResources"]
        return set(group["coveredResources"])

    assert asked <= {"cpu", "memory"} | covered(efaInterfaces=64)
    assert "vpc.amazonaws.com/efa" not in covered()


def test_the_readme_lists_the_gpu_types_the_command_accepts() -> None:
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    start = text.index("`--gpu-type` a GPU type gpuinfra knows")
    listed = text[start : text.index(")", start)].split("(", 1)[1]
    assert [t.strip(" `") for t in listed.split(",")] == workloads.gpu_types()
