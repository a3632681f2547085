"""The full class of 30 graded at once, timed: what `grade CLASS_FOLDER` costs a course on this machine.

    python benchmarks/class_grading.py               # 30 hand-ins, --jobs 6, hangs stopped at 180 s
    python benchmarks/class_grading.py --jobs 4 --timeout 300
    python benchmarks/class_grading.py --suite-class # the test suite's 12, to compare on the same machine

tests/test_classroom.py grades a class of the same kinds, each case once and some in one hand-in
(`classroom_handins.SUITE_CLASS`, 12 hand-ins), which keeps CI short; this grades `classroom_handins.build_class` at
its defaults (the reference and four disguised copies of it, nine released stubs, three independent authors, a friend
who copied one whole, a paste of the kit of its own, a fake verdict, a second crasher, a sleeper, and the rest as in
the test), checks the gradebook and the flagged pairs as the test does, and prints the
wall time, the grading's CPU time (as root: every process it started, in a cgroup of its own; `suite_cpu.py`) and
the load. Its numbers: benchmarks/RESULTS.md ("Where CI's time goes"). Needs root and bubblewrap, as CI and Gradescope have.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: As tests/test_classroom.py grades its class: no nbval, no performance points, a per-test limit of an hour.
CONFIG = "test_timeout_s = 3600\n[points]\nspeedup = 0\nacceptance = 0\nbonus = 0\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--jobs", type=int, help="students graded at once (default 6; 3, as the test, with --suite-class)"
    )
    parser.add_argument("--timeout", type=int, default=180, help="per-student limit in seconds (the test's 180)")
    parser.add_argument("--suite-class", action="store_true", help="the test suite's smaller class (SUITE_CLASS)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    import classroom_handins as handins  # the test suite's hand-ins

    args.jobs = args.jobs or (handins.SUITE_JOBS if args.suite_class else 6)
    from suite_cpu import cpu_seconds, leave_cgroup, own_cgroup  # beside this script

    with tempfile.TemporaryDirectory(prefix="specdec-class-bench-") as tmp:
        tmp = Path(tmp)
        os.chmod(tmp, 0o711)  # the student users reach their own scratch below it, as under /tmp
        expected = handins.build_class(tmp / "class", **(handins.SUITE_CLASS if args.suite_class else {}))
        (tmp / "class.toml").write_text(CONFIG)
        env = {
            **os.environ,
            "TMPDIR": str(tmp),
            "SPECDEC_GRADE_SEED": os.environ.get("SPECDEC_GRADE_SEED", "0"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }
        command = [sys.executable, "-m", "specdec_helpers", "grade", str(tmp / "class"), "--no-nbval", "--no-perf"]
        command += ["--config", str(tmp / "class.toml"), "--timeout", str(args.timeout), "--jobs", str(args.jobs)]
        load, cgroup = os.getloadavg()[0], own_cgroup()
        try:
            start, cpu = time.perf_counter(), cpu_seconds(cgroup)
            done = subprocess.run(
                [*command, "--out", str(tmp / "out")],
                capture_output=True,
                text=True,
                env=env,
                timeout=3600,
                check=False,
            )
            seconds, used = time.perf_counter() - start, cpu_seconds(cgroup) - cpu
        finally:
            leave_cgroup(cgroup)
        if done.returncode != 0:
            print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
            return 1
        with open(tmp / "out" / "gradebook.csv") as file:
            rows = {row["student"]: row for row in csv.DictReader(file)}
        missing = set(expected) - set(rows)
        wrong = handins.wrong_rows(expected, rows) if not missing else {}
        flags = handins.flags_found(expected, json.loads((tmp / "out" / "similarity.json").read_text()))
        flags_wrong = {name for name, want in expected.items() if flags[name] != want["flags"]}
    print(
        f"graded {len(expected)} students in {seconds:.0f} s wall, {used:.0f} s CPU (the grading and its "
        f"processes), --jobs {args.jobs}, hangs stopped at {args.timeout} s; load {load:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after"
    )
    for what, problem in (
        ("not in the gradebook", missing),
        ("graded wrongly", wrong),
        ("flagged wrongly", flags_wrong),
    ):
        if problem:
            print(f"{what}: {problem}")
    return 1 if missing or wrong or flags_wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
