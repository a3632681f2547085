"""The student edition of the kit: what ``release`` writes into the student kit and what the grader's
`isolation.view` shows student code (the instructor's implementations and hidden tests left out).

Two mechanisms, applied by both (and by the student kit's `check`, which builds the same view):

- whole modules (`SWAPS`): the kit's own implementations of the graded parts live in modules of their own
  (``core/reference_*.py``); the student edition has a module of the same public names in their place
  (``assignment/student/edition_*.py``, never imported where it lies, and not shipped under its own name);
- markers, line by line (`strip`), for what is left (answer cells, hidden tests, the assignment's stand-ins): the
  markers are nbgrader's (see ``authoring/release.py``): SOLUTION regions become nbgrader's stub, HIDDEN TESTS
  regions go, INSTRUCTOR ONLY regions become their STUDENT EDITION half. ``core/`` holds no marker.

This module ships in the student kit, so nothing on the view's path imports the instructor-only ``authoring``.
"""

from __future__ import annotations

import re
from pathlib import Path

#: Instructor module -> its student edition, paths inside the package (``specdec_helpers/``).
SWAPS = {
    "core/reference_parts.py": "assignment/student/edition_parts.py",
    "core/reference_loop.py": "assignment/student/edition_loop.py",
}

LINE_BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN (?P<kind>SOLUTION|HIDDEN TESTS|INSTRUCTOR ONLY)\s*$")
LINE_ELSE = re.compile(r"^\s*### STUDENT EDITION\s*$")
LINE_END = re.compile(r"^\s*### END (?P<kind>SOLUTION|HIDDEN TESTS|INSTRUCTOR ONLY)\s*$")
STUDENT_LINE = re.compile(r"^(?P<indent>\s*)# ?(?P<code>.*)$")
#: nbgrader's default stubs (ClearSolutions.code_stub["python"], ClearSolutions.text_stub).
CODE_STUB = ["# YOUR CODE HERE", "raise NotImplementedError()"]
TEXT_STUB = ["YOUR ANSWER HERE"]


class ReleaseError(Exception):
    """The kit would leak solutions or hidden tests, or a marker is malformed."""


def strip(source: str, markdown: bool = False, where: str = "") -> str:
    """``source`` with solutions stubbed out and hidden tests removed, line by line as nbgrader's
    ``generate_assignment`` does (same stubs, same indentation, same newlines)."""
    out, inside, student = [], None, False
    for number, line in enumerate(source.split("\n"), 1):
        begin, end = LINE_BEGIN.match(line), LINE_END.match(line)
        if begin:
            if inside:
                raise ReleaseError(f"{where}: unmatched marker '### BEGIN {inside}' (a second BEGIN at line {number})")
            inside, student = begin["kind"], False
            if inside == "SOLUTION":
                out += [begin["indent"] + stub for stub in (TEXT_STUB if markdown else CODE_STUB)]
        elif LINE_ELSE.match(line):
            if inside != "INSTRUCTOR ONLY" or student:
                raise ReleaseError(f"{where}: '### STUDENT EDITION' outside an INSTRUCTOR ONLY region (line {number})")
            student = True
        elif end:
            if end["kind"] != inside:
                raise ReleaseError(f"{where}: unmatched marker '### END {end['kind']}' (line {number})")
            if inside == "INSTRUCTOR ONLY" and not student:
                raise ReleaseError(
                    f"{where}: INSTRUCTOR ONLY region without '### STUDENT EDITION' (line {number}): "
                    "say what the student edition does instead"
                )
            inside = None
        elif inside is None:
            out.append(line)
        elif student:  # the student edition's code, written as comments in the instructor's source
            match = STUDENT_LINE.match(line)
            if line.strip() and not match:
                raise ReleaseError(f"{where}: line {number} of a STUDENT EDITION part is not a comment")
            out.append(match["indent"] + match["code"] if match else line)
    if inside:
        raise ReleaseError(f"{where}: unmatched marker '### BEGIN {inside}' (no END)")
    return "\n".join(out)


def edition_source(package: Path, rel: str) -> Path | None:
    """Which file the student edition holds at ``rel`` (a path inside ``package``): the student module in place of
    a swapped instructor module, nothing (None) at a student module's own path, else ``rel`` itself. In the student
    kit (already swapped: its student modules are gone) every file is its own."""
    if rel in SWAPS.values():
        return None
    if rel not in SWAPS:
        return package / rel
    return _student_module(package, rel) or package / rel


def swap_modules(package: Path) -> None:
    """In a copy of the package (the student's view), move each student module into its instructor module's place;
    in the student kit (already swapped) nothing changes."""
    for rel in SWAPS:
        student = _student_module(package, rel)
        if student is not None:
            student.replace(package / rel)


def _student_module(package: Path, rel: str) -> Path | None:
    """The student module for the swapped ``rel``; None in the student kit (swapped already). In the instructor's
    tree (it has ``assignment/authoring``) a missing one is an error: the instructor's module would stay in place."""
    student = package / SWAPS[rel]
    if student.is_file():
        return student
    if (package / "assignment" / "authoring").is_dir():
        raise ReleaseError(
            f"the student edition of {rel} ({SWAPS[rel]}) is missing: without it the student's view "
            f"and kit would hold the instructor's {rel}; restore it"
        )
    return None
