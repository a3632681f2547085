"""Command line: ``python -m specdec_helpers <command> [options]``; each command lives in its own module."""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "demo": ("specdec_helpers.demo", "speculative decoding on an offline pair, tokens coloured"),
    "bench": ("specdec_helpers.bench", "benchmark sweep: methods, k, theory; writes results, figures, tables"),
    "perf": ("specdec_helpers.perf", "performance ratios from one run: ours vs HF assisted, vs greedy, vs the bound; a profile"),
    "distill": ("specdec_helpers.distill", "train (once) a draft from a preset's target: eagle (default) or distilled"),
    "report": ("specdec_helpers.report", "build report/build/report.md, report.html (and a PDF with Chromium)"),
    "release": ("specdec_helpers.assignment.release", "instructor: write the student kit (solutions stubbed, hidden tests removed)"),
    "grade": ("specdec_helpers.assignment.grader", "instructor: grade a submission, write Gradescope results.json"),
    "check": ("specdec_helpers.assignment.check", "student: run the visible tests on your exercises"),
    "handin": ("specdec_helpers.assignment.handin", "student: bundle notebooks, exercises and report/ into a zip"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m specdec_helpers <command> [options]\n\ncommands:")
        for name, (_, summary) in COMMANDS.items():
            print(f"  {name:<10} {summary}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
