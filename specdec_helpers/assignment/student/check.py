"""Student self-check: ``python -m specdec_helpers check [notebooks folder]``, and the check cells.

Runs the visible tests on the graded cells of your notebooks and says per part what works, what is
not written yet and what to fix. Unfinished parts show "not implemented yet"; they never stop the
others from being checked. The grader runs more (hidden) tests and measures speed against the
reference solution, so passing here is necessary, not sufficient.
"""

from __future__ import annotations

import linecache
import os
import sys
from pathlib import Path

from specdec_helpers.assignment.parts.cells import earlier_parts, exec_cell, graded_sources
from specdec_helpers.assignment.parts.decoder import NOTEBOOK_OF, PARTS
from specdec_helpers.assignment.grading.grader import run_suite
from specdec_helpers.assignment.grading.sandbox import InProcess
from specdec_helpers.assignment.testing.suite import EXERCISES
from specdec_helpers.present import notebook_help as notebook

LABELS = {
    "init": "01 · initialization",
    "draft": "02 · drafting",
    "verify": "03 · verification",
    "decode": "04 · KV cache and the decode loop",
}
MARKS = {"passed": "✅", "not implemented": "⏳", "failed": "❌", "error": "💥"}


class CheckFailed(notebook.CheckFailed):
    """A check cell's verdict when a visible test fails (the message says what to fix)."""


def print_verdict(part: str, results, file=None) -> bool:
    file = file or sys.stdout
    statuses = {r.status for r in results}
    if statuses == {"not implemented"}:
        print(f"⏳ {LABELS[part]}: not implemented yet", file=file)
        return False
    done = sum(r.passed for r in results)
    print(f"{'✅' if done == len(results) else '❌'} {LABELS[part]}: {done} of {len(results)} checks pass", file=file)
    for r in results:
        note = "not implemented yet" if r.status == "not implemented" else r.feedback
        print(
            f"   {MARKS.get(r.status, '?')} {r.name}" + (f"\n      {note}" if note and not r.passed else ""), file=file
        )
    return done == len(results)


def check_part(part: str, **functions) -> None:
    """A check cell: run the visible tests of ``part`` on the functions just defined (the other parts: yours
    from the earlier notebooks next to this one) and print the verdict; raises `CheckFailed` if one fails."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    missing = [name for name in PARTS[part] if name not in functions]
    if missing:
        raise TypeError(f"check_part({part!r}) needs {', '.join(PARTS[part])}; missing {', '.join(missing)}")
    try:
        functions = as_graded(part, functions)
    except Exception as error:  # noqa: BLE001 - the cell itself fails when run alone, as in grading
        raise CheckFailed(
            f"Not yet: your graded cell does not run on its own ({type(error).__name__}: {error}), and the "
            f"grader runs it alone: {ALONE}"
        ) from None
    # The other parts: yours from the notebooks next to this one (a missing one fails with its notebook's name).
    others = earlier_parts(NOTEBOOK_OF[part], verbose=False) if NOTEBOOK_OF[part] > "01" else {}
    child = InProcess({**others, **functions})
    results = run_suite(
        {part: "# defined in this notebook"}, {part: 1}, hidden=False, only=[part], seed=0, child_factory=lambda: child
    )
    if print_verdict(part, results):
        if part == "decode" and all(name in others for name in PARTS["draft"]):  # the student's own from 02
            _check_drafting(child)
        return
    if {r.status for r in results} == {"not implemented"}:
        raise CheckFailed(
            "Not done yet: the graded cell above still raises NotImplementedError. Write your code "
            "in place of raise NotImplementedError(), run the cell, then run this check again."
        )
    if any("NameError" in r.feedback for r in results):
        raise CheckFailed(
            f"Not yet: a name your graded cell uses is not defined in it. The grader runs the cell on its own: {ALONE}"
        )
    missing = next((r.feedback for r in results if "PartMissing" in r.feedback), None)
    if missing:
        raise CheckFailed(
            "Not yet: this check runs your earlier parts too, and one is missing: "
            + missing.split("PartMissing: ", 1)[-1]
        )
    raise CheckFailed(
        "Not yet: see the checks above. Fix the cell, run it, run this check again. "
        + notebook.hint_text(_hint_for(part, results))
    )


def _check_drafting(child) -> None:
    """04's check: the loop's output is right even with a draft cache that holds rejected tokens (only the
    acceptance suffers), so name the drafting part from notebook 02 here when its own check fails."""
    drafted = run_suite(
        {"draft": "# from notebook 02"}, {"draft": 1}, hidden=False, only=["draft"], seed=0, child_factory=lambda: child
    )
    wrong = next((r for r in drafted if not r.passed and r.status != "not implemented"), None)
    if wrong is not None:
        raise CheckFailed(
            f"Your decode loop is right, but your drafting part (notebook 02) fails its check: {wrong.name}: "
            f"{wrong.feedback} " + notebook.hint_text(_hint_for("draft", drafted))
        )


#: Crash texts that mean one likely mistake, and the hint that names it (the crash alone does not).
CRASH_HINTS = {"cannot reshape tensor of 0 elements": "draft_stale_cache"}


#: Feedback that names the part of the decoder that is wrong, and the hint for it.
CAUSE_HINTS = {"draft cache": "draft_cache", "target cache": "decode"}


def _hint_for(part: str, results) -> str:
    """The hint id for a failed check of ``part``: a named likely mistake when a crash text shows it, else the
    cache the feedback names (the draft's or the target's), else the part's own."""
    text = " ".join(r.feedback for r in results if not r.passed)
    crash = next((hint for crash, hint in CRASH_HINTS.items() if crash in text and part == "draft"), None)
    return crash or next((hint for cause, hint in CAUSE_HINTS.items() if cause in text), part)


ALONE = "define or import everything it uses inside that cell (a helper from another cell is not there)."


def as_graded(part: str, functions: dict) -> dict:
    """The functions as the grader gets them: each one's notebook cell (IPython keeps cell sources in
    `linecache`, under a name that is no file) run on its own in a fresh namespace, as `cells.exec_cell`
    does in grading. So a helper defined in another cell fails here as it would there. Functions not
    defined in a cell (a module, ``exec``) stay as given."""
    graded = {}
    for name, fn in functions.items():
        code = getattr(fn, "__code__", None)
        in_cell = code is not None and not os.path.exists(code.co_filename)  # a module's file is on disk
        source = "".join(linecache.getlines(code.co_filename)) if in_cell else ""
        if not source:
            graded[name] = fn
            continue
        graded[name] = exec_cell(source, f"<graded cell {part}>").get(name, fn)
    return graded


def run_check(path=None, file=None) -> int:
    """Check every part found in the notebooks under ``path``; returns the number of parts not passing."""
    file = file or sys.stdout
    path = Path(path) if path else Path("notebooks") if Path("notebooks").is_dir() else Path(".")
    sources = graded_sources([path])
    print(
        f"Checking the graded cells of the notebooks in {path} (visible tests; the grader also runs hidden "
        "tests and measures speed)\n",
        file=file,
    )
    results = run_suite(sources, {part: 1 for part in EXERCISES}, hidden=False, seed=0)
    failing = sum(not print_verdict(part, [r for r in results if r.item == part], file) for part in EXERCISES)
    print(
        "\n"
        + (
            "All visible checks pass. Hand in with: python -m specdec_helpers handin"
            if not failing
            else f"{failing} of {len(EXERCISES)} parts to go."
        ),
        file=file,
    )
    return failing
