"""Student self-check: ``python -m specdec_helpers check [path]``.

Runs the visible tests on your exercise module (default ``specdec_helpers/assignment/exercises.py``), a notebook
or a folder, and says per exercise what works, what is not written yet and what to fix. Unfinished
exercises show "not implemented yet"; they never stop the others from being checked. The grader
runs more (hidden) tests and measures speed on the course's pair, so passing here is necessary, not
sufficient.
"""
from __future__ import annotations

import sys
from pathlib import Path

from specdec_helpers.assignment import exercises
from specdec_helpers.assignment.grader import run_suite
from specdec_helpers.assignment.submission import load
from specdec_helpers.assignment.suite import EXERCISES

LABELS = {"init": "1 · initialization", "draft": "2 · drafting", "verify": "3 · verification",
          "decode": "4 · decode loop"}
MARKS = {"passed": "✅", "not implemented": "⏳", "failed": "❌", "error": "💥"}


def default_path() -> Path:
    """The exercise module of the checkout in the current folder, else of the installed kit."""
    local = Path.cwd() / "specdec_helpers" / "assignment" / "exercises.py"
    if local.is_file():
        return local

    return Path(exercises.__file__)


def _load(path):
    return load(path)[0]


def check_exercise(exercise: str, path=None, cls=None, file=None) -> bool:
    """Check one exercise (``"init"``, ``"draft"``, ``"verify"``, ``"decode"``) and print the verdict.

    Never raises: unfinished work prints "not implemented yet", a crash prints where it happened. For
    a check cell at the end of each exercise in a notebook. Returns whether every visible test passed.
    """
    if exercise not in EXERCISES:
        raise ValueError(f"exercise must be one of {', '.join(EXERCISES)}, got {exercise!r}")
    file = file or sys.stdout
    try:
        cls = cls or _load(path or default_path())
    except Exception as error:  # a syntax error in the student's file, say
        print(f"💥 {LABELS[exercise]}: your code does not load: {error}", file=file)
        return False
    results = run_suite(cls, {exercise: 1}, hidden=False, only=[exercise])
    statuses = {r.status for r in results}
    if statuses == {"not implemented"}:
        print(f"⏳ {LABELS[exercise]}: not implemented yet", file=file)
        return False
    done = sum(r.passed for r in results)
    print(f"{'✅' if done == len(results) else '❌'} {LABELS[exercise]}: {done} of {len(results)} checks pass", file=file)
    for r in results:
        note = "not implemented yet" if r.status == "not implemented" else r.feedback
        print(f"   {MARKS.get(r.status, '?')} {r.name}" + (f"\n      {note}" if note else ""), file=file)
    return done == len(results)


def run_check(path=None, file=None) -> int:
    """Check every exercise; returns the number of exercises that do not pass yet."""
    import torch

    file = file or sys.stdout
    path = Path(path) if path else default_path()
    print(f"Checking {path} (visible tests; the grader also runs hidden tests and measures speed)\n", file=file)
    try:
        cls = _load(path)
    except Exception as error:
        print(f"💥 your code does not load: {error}", file=file)
        return len(EXERCISES)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        failing = sum(not check_exercise(exercise, cls=cls, file=file) for exercise in EXERCISES)
    finally:
        torch.set_num_threads(threads)
    print("\n" + ("All visible checks pass. Hand in with: python -m specdec_helpers handin" if not failing else
                  f"{failing} of {len(EXERCISES)} exercises to go."), file=file)
    return failing
