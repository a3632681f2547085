"""Where CI's time goes: the test suite in one process, each test's wall and CPU seconds, every process it
started included; then per file, and the README's ``-n 3 --dist loadfile`` run simulated on 2 cores.

    python benchmarks/suite_cpu.py                      # the whole suite (about 30 min on 2 cores), then the table
    python benchmarks/suite_cpu.py tests/test_course.py # some files
    python benchmarks/suite_cpu.py --report suite_cpu.jsonl   # the table again, from a run's file

CPU seconds are what the 2-core CI machine has to share out, whatever else runs beside: the suite is CPU-bound
(benchmarks/RESULTS.md, "Where CI's time goes"), so a file's CPU is its cost to CI, and the simulation (three
workers handed whole files in `tests/longest_first.py`'s order, sharing two cores) is what to check
`LONGEST_FIRST` against. As root, the run goes into a cgroup of its own, so that processes started in a sandbox,
in a session of their own or reparented are counted too; otherwise only the processes pytest waited for are.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OUT_ENV, CGROUP_ENV = "SUITE_CPU_OUT", "SUITE_CPU_CGROUP"
#: Tests that keep more than one core busy, and tests that last at least this long whatever the load (seconds).
PARALLEL = {"test_each_student_of_the_class_is_in_the_gradebook": 2}
FLOOR = {"test_each_student_of_the_class_is_in_the_gradebook": 200}  # two hangs wait for the 180 s limit


def cpu_seconds(cgroup: str | None = None) -> float:
    """CPU seconds so far: of ``cgroup`` (every process in it), else of this process and those it waited for."""
    if cgroup:
        text = Path(cgroup, "cpuacct.usage" if "cpuacct" in cgroup else "cpu.stat").read_text()
        return int(text) / 1e9 if "cpuacct" in cgroup else int(text.split("usage_usec")[1].split()[0]) / 1e6
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The plugin (``-p suite_cpu``): one JSON line per test; a module fixture counts with its first test."""
    if OUT_ENV not in os.environ:
        yield
        return
    cgroup = os.environ.get(CGROUP_ENV)
    wall, cpu = time.perf_counter(), cpu_seconds(cgroup)
    yield
    row = {
        "id": item.nodeid,
        "file": item.path.name,
        "wall": round(time.perf_counter() - wall, 2),
        "cpu": round(cpu_seconds(cgroup) - cpu, 2),
        "load": round(os.getloadavg()[0], 1),
    }
    with open(os.environ[OUT_ENV], "a") as file:
        file.write(json.dumps(row) + "\n")


def own_cgroup() -> str | None:
    """A fresh cgroup holding this process (and so all it starts), or None where that cannot be made."""
    for base, usage in (("/sys/fs/cgroup/cpuacct", "cpuacct.usage"), ("/sys/fs/cgroup", "cpu.stat")):
        if not Path(base, usage if "cpuacct" in base else "cgroup.controllers").is_file():
            continue  # not that cgroup version here
        folder = Path(base, f"suite-cpu-{os.getpid()}")
        try:
            folder.mkdir(exist_ok=True)
            (folder / "cgroup.procs").write_text(str(os.getpid()))
            if (folder / usage).is_file():
                return str(folder)
        except OSError:
            continue
    return None


def leave_cgroup(cgroup: str | None) -> None:
    """Back to the cgroup above, and the empty one goes (one that a process left behind still holds stays)."""
    if cgroup:
        with contextlib.suppress(OSError):
            Path(cgroup).parent.joinpath("cgroup.procs").write_text(str(os.getpid()))
            Path(cgroup).rmdir()


def simulate(rows: list[dict], order, workers: int = 3, cores: float = 2.0, step: float = 0.25) -> list[float]:
    """When each xdist worker ends: files handed out in ``order`` (then collection order), a file to a worker
    whose own queue is down to 2 tests (xdist's loadfile rule), the cores shared evenly among busy workers."""
    files = collections.OrderedDict()
    for r in rows:
        files.setdefault(r["file"], []).append(r)
    rank = {name: i for i, name in enumerate(order)}
    queue = sorted(files, key=lambda f: rank.get(f, len(rank)))
    nodes: list[list[dict]] = [[] for _ in range(workers)]
    ends = [0.0] * workers

    def give(node):
        for r in files[queue.pop(0)]:
            name = r["id"].split("::")[-1].split("[")[0]
            node.append({"left": r["cpu"], "most": PARALLEL.get(name, 1), "floor": FLOOR.get(name, 0), "ran": 0.0})

    for node in nodes:
        if queue:
            give(node)
    for node in nodes:
        if queue and len(node) <= 2:
            give(node)
    now = 0.0
    while any(nodes):
        wanting = [n for n in nodes if n and n[0]["left"] > 0]
        share = {}
        spare, rest = cores, list(wanting)
        while rest:  # max-min fair: a test that needs less than an even share gets what it needs
            even = spare / len(rest)
            small = [n for n in rest if n[0]["most"] <= even]
            if not small:
                share.update({id(n): even for n in rest})
                break
            for n in small:
                share[id(n)] = n[0]["most"]
                spare -= n[0]["most"]
            rest = [n for n in rest if n not in small]
        now += step
        for i, node in enumerate(nodes):
            if node:
                node[0]["left"] -= share.get(id(node), 0) * step
                node[0]["ran"] += step
            while node and node[0]["left"] <= 0 and node[0]["ran"] >= node[0]["floor"]:
                node.pop(0)
                ends[i] = now
                if queue and len(node) <= 2:
                    give(node)
    return ends


def report(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    by = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        by[r["file"]][0] += r["cpu"]
        by[r["file"]][1] += r["wall"]
        by[r["file"]][2] += 1
    total = sum(cpu for cpu, _, _ in by.values())
    print(f"{'file':44} {'tests':>5} {'CPU s':>7} {'wall s':>7}")
    for name, (cpu, wall, n) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        if cpu >= 0.01 * total:
            print(f"{name:44} {n:5} {cpu:7.1f} {wall:7.1f}")
    loads = [r["load"] for r in rows]
    print(
        f"all {len(rows)} tests: {total:.0f} CPU s, {sum(r['wall'] for r in rows):.0f} s wall in one process; "
        f"load {min(loads):.1f}-{max(loads):.1f}"
    )
    sys.path.insert(0, str(ROOT / "tests"))
    from longest_first import LONGEST_FIRST

    ends = simulate(rows, LONGEST_FIRST)
    print(
        f"-n 3 --dist loadfile on 2 cores, simulated: workers end at {', '.join(f'{e:.0f}' for e in ends)} s "
        f"(half the CPU: {total / 2:.0f} s)"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", type=Path, help="print the table of an earlier run's file instead of running")
    parser.add_argument("--out", type=Path, default=Path("suite_cpu.jsonl"), help="where the rows go")
    args, pytest_args = parser.parse_known_args(argv)
    if args.report:
        report(args.report)
        return 0
    args.out.unlink(missing_ok=True)
    cgroup = own_cgroup()
    if cgroup is None:
        print("no cgroup of its own (not root?): counting only the processes pytest waits for", file=sys.stderr)
    env = {
        **os.environ,
        OUT_ENV: str(args.out.resolve()),
        CGROUP_ENV: cgroup or "",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")) if p),
    }
    if not cgroup:
        env.pop(CGROUP_ENV)
    try:
        code = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suite_cpu", *pytest_args],
            cwd=ROOT,
            env=env,
            check=False,
        ).returncode
    finally:
        leave_cgroup(cgroup)
    report(args.out)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
