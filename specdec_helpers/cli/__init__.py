"""Command line: ``python -m specdec_helpers <command> [options]``.

Every command's arguments live in this package, and no algorithm or measurement: each command parses its
arguments, calls the library and prints what it returns. It is the only place that imports every layer (core, models, measure,
present, assignment); library modules never import it. `run` holds the commands that use the kit, `train`
those that train models, `course` the ones a submission goes through (check, handin, grade), `instructor` the
instructor's authoring commands, `machine_check` selfcheck, `args` their shared argparse types.
"""

from __future__ import annotations

import sys
import zipfile

from specdec_helpers.cli.course import check, grade, handin
from specdec_helpers.cli.instructor import autograder, mistakes, release
from specdec_helpers.cli.run import bench, demo, perf, report
from specdec_helpers.cli.train import distill, train_toy
from specdec_helpers.cli.machine_check import selfcheck

__all__ = [
    "COMMANDS",
    "main",
    "autograder",
    "bench",
    "check",
    "demo",
    "distill",
    "grade",
    "handin",
    "mistakes",
    "perf",
    "release",
    "report",
    "selfcheck",
    "train_toy",
]


COMMANDS = {
    "demo": (demo, "speculative decoding on an offline pair, tokens coloured"),
    "bench": (bench, "benchmark sweep: methods, k, theory; writes results, figures, tables"),
    "perf": (perf, "performance ratios from one run: ours vs HF assisted, vs greedy, vs the bound; a profile"),
    "distill": (distill, "train (once) a draft from a preset's target: eagle (default) or distilled"),
    "train-toy": (train_toy, "maintainer: retrain the toy pair with its recipe and rewrite the shipped files"),
    "report": (report, "build report/build/report.md, report.html (and a PDF with Chromium)"),
    "release": (release, "instructor: write the student repository (--repo-url: its badges, no solutions)"),
    "grade": (grade, "instructor: grade a submission (results.json) or a class folder (gradebook, similarity report)"),
    "autograder": (autograder, "instructor: a Gradescope autograder (setup.sh, run_autograder, the kit, the toy pair)"),
    "mistakes": (mistakes, "instructor: the known-mistake catalog, each graded (exit 1 if one goes uncaught)"),
    "selfcheck": (
        selfcheck,
        "instructor: check the kit on this machine's GPU/CPU and dtype before a course; writes a JSON",
    ),
    "check": (check, "student: run the visible tests on your exercises"),
    "handin": (handin, "student: bundle notebooks and report/ into a zip; refuses unfinished work (--force)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m specdec_helpers <command> [options]\n\ncommands:")
        for name, (_, summary) in COMMANDS.items():
            print(f"  {name:<10} {summary}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    try:
        return int(COMMANDS[argv[0]][0](argv[1:]) or 0)
    except (ValueError, OSError, ImportError, zipfile.BadZipFile) as error:
        # A user's mistake (bad value, missing or unreadable file, a package to install): one line, no traceback.
        # json and toml decode errors are ValueErrors; argparse errors exit 2 before this.
        print(f"{argv[0]}: {error}", file=sys.stderr)
        return 2
