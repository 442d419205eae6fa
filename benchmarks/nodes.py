"""Converge timings of playbooks/nodes.yml on N lab hosts, against two floors.

For each N: the first converge of N fresh hosts, the no-op re-converge, the fact-gathering
floor (``ansible -m setup`` on the same hosts) and the package floor (one ``apt-get install`` of
the same package set, with the same apt pin, on one more fresh host). Prints the ratios and
writes JSON. Targets: re-converge <= 2x the fact floor; first converge <= 1.5x the package floor
plus the fact floor.

Every figure is taken warm: one more host is converged first, untimed, so the apt proxy and the
page cache hold every package before anything is timed; its apt state (sources, keys, pins) is
what the package floors start from.

The re-converge and the fact floor take a few seconds, where a shared machine's noise is a tenth
either way: each is the median of ``--repeat`` runs (default 5), taken in turns, and every
re-converge must change nothing.

For N > 1 the same ``apt-get install`` also runs on N fresh hosts at once (the parallel package
floor): N hosts installing on the same CPUs is what the first converge does, and the ratio against
it tells framework overhead from CPU contention. Both ratios are written; the target is judged on
the one-host floor.

CPU time is recorded beside the wall times. The one-host floor's transaction (the shell's ``times``
after ``apt-get``: every process apt-get waited for, dpkg and the maintainer scripts included) used
``package_floor_cpu_s``; N hosts need N times that, which this machine's CPUs cannot give in less
than ``apt_cpu_bound_s`` = N x that / CPUs of wall time. The first converge's own CPU time, the
controller's (ansible-playbook and its workers) and the hosts' (podman's count per container), is
``first_converge_cpu_s``. Where a bound exceeds the first-converge target, no play can meet the
target on this machine.

The re-converge also records the tasks each host ran or skipped and the controller's CPU time
(median). Their ratio, per host and task, moves little between plays of the same N (57 ms and
68 ms on four hosts in docs/decisions/0070), so it tells a play that runs more steps from one
whose steps cost more. It includes ansible-playbook's own start, which weighs more on fewer hosts.

Lab hosts run on the controller's CPUs, so on a small machine a Python module's run on N hosts
competes with the controller's own work. ``--split-cpus`` puts the hosts on the last CPU and the
controller on the others for the re-converges and fact floors, as separate machines would be.

    .venv/bin/python benchmarks/nodes.py --hosts 1,2,4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from gpuinfra import lab, versions
from gpuinfra.lab import aptrepo, runner
from gpuinfra.paths import repo_root

ROOT = repo_root()


def timed(action: Any) -> tuple[float, Any]:
    start = time.monotonic()
    value = action()
    return time.monotonic() - start, value


def controller_cpu_s() -> float:
    """CPU seconds of this process and of every child it waited for (ansible-playbook and its forks)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def hosts_cpu_s(hosts: list[lab.Host]) -> float:
    """CPU seconds the hosts' containers have used since they started, as podman counts them."""
    stats = json.loads(
        lab.podman("stats", "--no-stream", "--format", "json", *(h.name for h in hosts))
    )
    return sum(go_duration_s(row["cpu_time"]) for row in stats)


def go_duration_s(text: str) -> float:
    """Seconds in a Go duration as podman prints it: "43.386454636s", "1m2.5s", "512ms"."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([\d.]+)(h|ms|m|s|us|µs|ns)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise SystemExit(f"unexpected CPU time from podman stats: {text!r}")
    return sum(float(number) * units[unit] for number, unit in parts)


@contextmanager
def split_cpus(hosts: list[lab.Host]) -> Iterator[str]:
    """The hosts' containers on the last CPU, this process and every child it starts on the rest.

    Lab hosts share the controller's CPUs, so a module's run on four hosts competes with the
    controller's own work; real hosts have CPUs of their own. Yields what went where.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--split-cpus needs at least 2 CPUs")
    host_cpu, controller = cpus[-1], cpus[:-1]
    for host in hosts:
        lab.podman("update", "--cpuset-cpus", str(host_cpu), host.name)
    os.sched_setaffinity(0, controller)
    try:
        yield f"controller on CPU {','.join(map(str, controller))}, hosts on CPU {host_cpu}"
    finally:
        os.sched_setaffinity(0, cpus)
        for host in hosts:
            lab.podman("update", "--cpuset-cpus", ",".join(map(str, cpus)), host.name)


def package_set() -> list[str]:
    pins = versions.pinned()
    driver = pins.driver("distro").source
    toolkit = pins.nvidia_container_toolkit.source
    containerd = pins.containerd.source
    return (
        [f"{p}={driver.package_version}" for p in driver.packages]
        + [f"{p}={toolkit.package_version}" for p in toolkit.packages]
        + [f"{p}={containerd.package_version}" for p in containerd.packages]
    )


def package_floor(
    settings: lab.Settings, floors: list[lab.Host], donor: lab.Host
) -> tuple[float, list[float]]:
    """apt-get update + install of the converge's package set on fresh hosts, all at once.

    Each fresh host gets the converged host's apt sources, keys and pins first, so apt solves
    the same transaction the roles ask for. Returns the wall time and, per host, the CPU time
    (user + system) of everything the transaction ran.
    """
    apt_state = subprocess.run(
        lab.ssh_command(
            settings,
            donor.port,
            "tar -C / -cf - --exclude=etc/apt/apt.conf.d/01gpuinfra-proxy "
            "etc/apt/sources.list etc/apt/sources.list.d etc/apt/preferences.d etc/apt/keyrings",
        ),
        capture_output=True,
        check=True,
    ).stdout
    for floor in floors:
        subprocess.run(
            lab.ssh_command(settings, floor.port, "tar -C / -xf -"), input=apt_state, check=True
        )
    # `times` prints the shell's own CPU time, then that of the processes it waited for.
    install = (
        "apt-get -qq update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -y -qq "
        "--no-install-recommends --allow-downgrades install "
        + " ".join(package_set())
        + " >/dev/null && times"
    )

    def install_everywhere() -> list[str]:
        procs = [
            subprocess.Popen(
                lab.ssh_command(settings, f.port, install), stdout=subprocess.PIPE, text=True
            )
            for f in floors
        ]
        outputs = [proc.communicate()[0] for proc in procs]
        failed = [f.name for f, proc in zip(floors, procs, strict=True) if proc.returncode != 0]
        if failed:
            raise SystemExit(f"apt-get install failed on {', '.join(failed)}")
        return outputs

    seconds, outputs = timed(install_everywhere)
    return seconds, [children_cpu_s(out) for out in outputs]


def children_cpu_s(times_output: str) -> float:
    """User + system seconds on the last line of `times` ("0m21.503s 0m6.118s")."""
    spent = re.findall(r"(\d+)m([\d.]+)s", times_output.strip().splitlines()[-1])
    if len(spent) != 2:
        raise SystemExit(f"unexpected output of `times`: {times_output!r}")
    return round(sum(int(m) * 60 + float(s) for m, s in spent), 1)


def fact_floor(inventory: Path, limit: str) -> float:
    cmd = [str(Path(sys.executable).parent / "ansible"), "-i", str(inventory), limit]
    cmd += ["-m", "ansible.builtin.setup"]
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "/usr/bin:/bin"}
    seconds, proc = timed(
        lambda: subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, check=False)
    )
    if proc.returncode != 0:
        raise SystemExit(f"ansible -m setup failed: {proc.stdout[-400:]!r}")
    return float(seconds)


def apt_seconds(run: runner.RunResult) -> dict[str, float]:
    """Per host, how long the package run's apt-get took (the async job's delta, which the
    wait task's last poll carries as a ``result=`` line), from the run's events."""
    seconds = {}
    for path in (run.artifact_dir / "job_events").glob("*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and str(data.get("task", "")).startswith(
            "Packages | wait for the transaction"
        ):
            stdout = str((data.get("res") or {}).get("stdout", ""))
            line = next((x for x in stdout.splitlines() if x.startswith("result=")), "result={}")
            delta = json.loads(line[7:]).get("delta")
            if delta is None:  # killed at its deadline: no time of its own
                continue
            hours, minutes, rest = str(delta).split(":")
            seconds[data["host"]] = round(int(hours) * 3600 + int(minutes) * 60 + float(rest), 1)
    return dict(sorted(seconds.items()))


def median_of(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]


def measure(
    settings: lab.Settings, count: int, server: aptrepo.Server, repeat: int, split: bool
) -> dict[str, Any]:
    lab.down(settings)
    parallel = count if count > 1 else 0
    started = lab.up(
        settings, count + 2 + parallel, repo_url=server.url, repo_fingerprint=server.fingerprint
    )
    donor, nodes = started[0], started[1 : count + 1]
    floor, floors = started[count + 1], started[count + 2 :]
    limit = ",".join(h.name for h in nodes)
    playbook = ROOT / "playbooks" / "nodes.yml"
    warm = runner.converge(playbook, settings.hosts_file, limit=donor.name)
    if not warm.ok:
        raise SystemExit(f"warm-up converge failed: {[str(f) for f in warm.failures]}")
    cpu_before = controller_cpu_s(), hosts_cpu_s(nodes)
    first_s, first = timed(lambda: runner.converge(playbook, settings.hosts_file, limit=limit))
    if not first.ok:
        raise SystemExit(f"first converge failed: {[str(f) for f in first.failures]}")
    first_cpu = {
        "controller": round(controller_cpu_s() - cpu_before[0], 1),
        "hosts": round(hosts_cpu_s(nodes) - cpu_before[1], 1),
    }
    # A second or two on a shared machine moves by a tenth either way: each of these is the median
    # of `repeat` runs, taken in turns so that a slow spell hits both.
    facts, agains, again_cpus = [], [], []
    with split_cpus(nodes) if split else nullcontext("shared") as placement:
        for _ in range(repeat):
            facts.append(fact_floor(settings.hosts_file, limit))
            cpu_before_again = controller_cpu_s()
            seconds, again = timed(
                lambda: runner.converge(playbook, settings.hosts_file, limit=limit)
            )
            again_cpus.append(controller_cpu_s() - cpu_before_again)
            if not again.ok or sum(again.changed().values()):
                raise SystemExit(
                    f"re-converge changed {again.changed()} or failed: {again.failures}"
                )
            agains.append(seconds)
    facts_s, again_s, again_cpu_s = median_of(facts), median_of(agains), median_of(again_cpus)
    # What a re-converge is made of: each task a host runs or skips costs the controller about the
    # same (a worker, the host's variables, the result), so the count and the CPU per task tell a
    # play that does more from one whose steps cost more.
    tasks = max(counts["ok"] + counts["skipped"] for counts in again.recap.values())
    packages_s, (packages_cpu_s,) = package_floor(settings, [floor], donor)
    parallel_s = package_floor(settings, floors, donor)[0] if floors else packages_s
    cpus = len(os.sched_getaffinity(0))
    first_target_s = 1.5 * (packages_s + facts_s)
    return {
        "hosts": count,
        "first_converge_s": round(first_s, 1),
        # apt's share of the first converge, per host: it varies run to run with the hosts' I/O.
        "first_converge_apt_s": apt_seconds(first),
        "reconverge_s": round(again_s, 2),
        "reconverge_changed": sum(again.changed().values()),
        "reconverge_samples_s": [round(x, 2) for x in agains],
        "reconverge_controller_cpu_s": round(again_cpu_s, 2),
        "reconverge_tasks_per_host": tasks,
        "reconverge_cpu_per_host_task_ms": round(1000 * again_cpu_s / (tasks * count)),
        "reconverge_cpus": placement,
        "fact_floor_s": round(facts_s, 2),
        "fact_floor_samples_s": [round(x, 2) for x in facts],
        "package_floor_s": round(packages_s, 1),
        "package_floor_parallel_s": round(parallel_s, 1),
        "package_floor_cpu_s": packages_cpu_s,
        "cpus": cpus,
        # The least wall time N such transactions take on this machine's CPUs.
        "apt_cpu_bound_s": round(count * packages_cpu_s / cpus, 1),
        "first_converge_cpu_s": first_cpu,
        "first_converge_cpu_bound_s": round(sum(first_cpu.values()) / cpus, 1),
        "first_converge_target_s": round(first_target_s, 1),
        "reconverge_over_fact_floor": round(again_s / facts_s, 2),
        "first_over_package_plus_fact_floor": round(first_s / (packages_s + facts_s), 2),
        "first_over_parallel_package_plus_fact_floor": round(first_s / (parallel_s + facts_s), 2),
        "targets": {"reconverge_over_fact_floor": 2.0, "first_over_package_plus_fact_floor": 1.5},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,2,4", help="comma-separated host counts")
    parser.add_argument("--prefix", default="gpuinfrabench")
    parser.add_argument("--port-base", type=int, default=2700)
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/nodes.json")
    parser.add_argument("--repeat", type=int, default=5, help="re-converges and fact floors per N")
    parser.add_argument(
        "--split-cpus",
        action="store_true",
        help="re-converges and fact floors with the hosts on the last CPU, the controller on the rest",
    )
    args = parser.parse_args()
    settings = lab.Settings.from_env(prefix=args.prefix, port_base=args.port_base)
    with tempfile.TemporaryDirectory(prefix="gpuinfra-bench-") as work:
        repo = aptrepo.build(Path(work) / "repo")
        counts = [int(n) for n in args.hosts.split(",")]
        results = run_all(settings, counts, repo.path, args.repeat, args.split_cpus)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"benchmark": "nodes", "results": results}, indent=2) + "\n")
    print(f"wrote {args.json}")


def run_all(
    settings: lab.Settings, counts: list[int], repo: Path, repeat: int, split: bool
) -> list[dict[str, Any]]:
    results = []
    with aptrepo.serving(repo) as server:
        try:
            for count in counts:
                row = measure(settings, count, server, repeat, split)
                results.append(row)
                print(
                    f"N={count}: first {row['first_converge_s']}s (apt per host: "
                    f"{', '.join(map(str, row['first_converge_apt_s'].values()))}s), re-converge "
                    f"{row['reconverge_s']}s (changed={row['reconverge_changed']}; "
                    f"{row['reconverge_tasks_per_host']} tasks per host, controller CPU "
                    f"{row['reconverge_controller_cpu_s']}s, "
                    f"{row['reconverge_cpu_per_host_task_ms']} ms per host and task; CPUs: "
                    f"{row['reconverge_cpus']}), fact floor "
                    f"{row['fact_floor_s']}s, package floor {row['package_floor_s']}s "
                    f"(on {count} at once: {row['package_floor_parallel_s']}s) | "
                    f"re/fact {row['reconverge_over_fact_floor']}x (target <=2), "
                    f"first/(pkg+fact) {row['first_over_package_plus_fact_floor']}x "
                    f"(target <=1.5; parallel floor "
                    f"{row['first_over_parallel_package_plus_fact_floor']}x) | apt CPU "
                    f"{row['package_floor_cpu_s']}s per host: {count} host(s) on "
                    f"{row['cpus']} CPUs need >= {row['apt_cpu_bound_s']}s of apt alone; "
                    f"the first converge used {sum(row['first_converge_cpu_s'].values()):.1f} "
                    f"CPU-s, >= {row['first_converge_cpu_bound_s']}s "
                    f"(target {row['first_converge_target_s']}s)",
                    flush=True,
                )
        finally:
            lab.down(settings)
    return results


if __name__ == "__main__":
    main()
