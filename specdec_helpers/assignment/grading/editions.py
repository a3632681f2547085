"""The student edition of a source, line by line: what ``release`` writes into the student kit and what the
grader's `isolation.view` shows student code (the instructor's implementations and hidden tests left out).

The markers are nbgrader's (see ``authoring/release.py``): SOLUTION regions become nbgrader's stub,
HIDDEN TESTS regions go, INSTRUCTOR ONLY regions become their STUDENT EDITION half. This module ships in
the student kit: its `check` builds the same view (whose files then hold no marker), so nothing on that
path imports the instructor-only ``authoring`` package.
"""
from __future__ import annotations

import re

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
                raise ReleaseError(f"{where}: INSTRUCTOR ONLY region without '### STUDENT EDITION' (line {number}): "
                                   "say what the student edition does instead")
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
