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

    .venv/bin/python benchmarks/nodes.py --hosts 1,2,4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuinfra import aptrepo, lab, runner, versions
from gpuinfra.paths import repo_root

ROOT = repo_root()


def timed(action: Any) -> tuple[float, Any]:
    start = time.monotonic()
    value = action()
    return time.monotonic() - start, value


def ssh(settings: lab.Settings, port: int, script: str) -> str:
    proc = subprocess.run(lab.ssh_command(settings, port, script), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"on port {port}: {script[:60]}... failed: {proc.stderr[-400:]}")
    return proc.stdout


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


def package_floor(settings: lab.Settings, floors: list[lab.Host], donor: lab.Host) -> float:
    """apt-get update + install of the converge's package set on fresh hosts, all at once.

    Each fresh host gets the converged host's apt sources, keys and pins first, so apt solves
    the same transaction the roles ask for.
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
    install = (
        "apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get -y -qq "
        "--no-install-recommends --allow-downgrades install " + " ".join(package_set())
    )

    def install_everywhere() -> None:
        procs = [
            subprocess.Popen(lab.ssh_command(settings, f.port, install), stdout=subprocess.DEVNULL)
            for f in floors
        ]
        failed = [f.name for f, proc in zip(floors, procs, strict=True) if proc.wait() != 0]
        if failed:
            raise SystemExit(f"apt-get install failed on {', '.join(failed)}")

    seconds, _ = timed(install_everywhere)
    return seconds


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
    """Per host, how long the package run's apt-get took (its task's delta), from the run's events."""
    seconds = {}
    for path in (run.artifact_dir / "job_events").glob("*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and str(data.get("task", "")).startswith(
            "Packages | read"
        ):
            hours, minutes, rest = str(data["res"]["delta"]).split(":")
            seconds[data["host"]] = round(int(hours) * 3600 + int(minutes) * 60 + float(rest), 1)
    return dict(sorted(seconds.items()))


def median_of(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]


def measure(settings: lab.Settings, count: int, url: str, repeat: int) -> dict[str, Any]:
    lab.down(settings)
    parallel = count if count > 1 else 0
    started = lab.up(settings, count + 2 + parallel, repo_url=url)
    donor, nodes = started[0], started[1 : count + 1]
    floor, floors = started[count + 1], started[count + 2 :]
    limit = ",".join(h.name for h in nodes)
    playbook = ROOT / "playbooks" / "nodes.yml"
    warm = runner.converge(playbook, settings.hosts_file, limit=donor.name)
    if not warm.ok:
        raise SystemExit(f"warm-up converge failed: {[str(f) for f in warm.failures]}")
    first_s, first = timed(lambda: runner.converge(playbook, settings.hosts_file, limit=limit))
    if not first.ok:
        raise SystemExit(f"first converge failed: {[str(f) for f in first.failures]}")
    # A second or two on a shared machine moves by a tenth either way: each of these is the median
    # of `repeat` runs, taken in turns so that a slow spell hits both.
    facts, agains = [], []
    for _ in range(repeat):
        facts.append(fact_floor(settings.hosts_file, limit))
        seconds, again = timed(lambda: runner.converge(playbook, settings.hosts_file, limit=limit))
        if not again.ok or sum(again.changed().values()):
            raise SystemExit(f"re-converge changed {again.changed()} or failed: {again.failures}")
        agains.append(seconds)
    facts_s, again_s = median_of(facts), median_of(agains)
    packages_s = package_floor(settings, [floor], donor)
    parallel_s = package_floor(settings, floors, donor) if floors else packages_s
    return {
        "hosts": count,
        "first_converge_s": round(first_s, 1),
        # apt's share of the first converge, per host: it varies run to run with the hosts' I/O.
        "first_converge_apt_s": apt_seconds(first),
        "reconverge_s": round(again_s, 2),
        "reconverge_changed": sum(again.changed().values()),
        "reconverge_samples_s": [round(x, 2) for x in agains],
        "fact_floor_s": round(facts_s, 2),
        "fact_floor_samples_s": [round(x, 2) for x in facts],
        "package_floor_s": round(packages_s, 1),
        "package_floor_parallel_s": round(parallel_s, 1),
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
    args = parser.parse_args()
    settings = lab.Settings.from_env(prefix=args.prefix, port_base=args.port_base)
    with tempfile.TemporaryDirectory(prefix="gpuinfra-bench-") as work:
        repo = aptrepo.build(Path(work) / "repo")
        counts = [int(n) for n in args.hosts.split(",")]
        results = run_all(settings, counts, repo.path, args.repeat)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"benchmark": "nodes", "results": results}, indent=2) + "\n")
    print(f"wrote {args.json}")


def run_all(
    settings: lab.Settings, counts: list[int], repo: Path, repeat: int
) -> list[dict[str, Any]]:
    results = []
    with aptrepo.serving(repo) as server:
        try:
            for count in counts:
                row = measure(settings, count, server.url, repeat)
                results.append(row)
                print(
                    f"N={count}: first {row['first_converge_s']}s (apt per host: "
                    f"{', '.join(map(str, row['first_converge_apt_s'].values()))}s), re-converge "
                    f"{row['reconverge_s']}s (changed={row['reconverge_changed']}), fact floor "
                    f"{row['fact_floor_s']}s, package floor {row['package_floor_s']}s "
                    f"(on {count} at once: {row['package_floor_parallel_s']}s) | "
                    f"re/fact {row['reconverge_over_fact_floor']}x (target <=2), "
                    f"first/(pkg+fact) {row['first_over_package_plus_fact_floor']}x "
                    f"(target <=1.5; parallel floor "
                    f"{row['first_over_parallel_package_plus_fact_floor']}x)",
                    flush=True,
                )
        finally:
            lab.down(settings)
    return results


if __name__ == "__main__":
    main()
