"""Near-copies among graded cells, found with copydetect (winnowed fingerprints of the code with every
name replaced, as MOSS does), flagged for the instructor to judge and never scored.

Each graded cell is compared, part by part, with the reference solution's cell, with the kit's own
code (`KIT_FILES`: the instructor-only implementations of the graded steps and the shipped code a
student could copy) and with the same cell of every other student of the class. The released stub
of each cell (signature, docstring, the lines around ``# YOUR CODE HERE``) is boilerplate: what
every student starts from counts for nothing, so a stub matches nothing.

Thresholds, measured on the course's cells (tests/test_similarity.py, with k = 25 masked characters):
- a pair is flagged when at least `PAIR_THRESHOLD` (0.7) of either cell's own code (after the
  boilerplate) is found in the other. Names are masked, so renaming changes nothing, and a swapped
  line breaks only the windows that cross it: disguised copies of the reference (renamed, reordered,
  recommented, padded with dead code) keep 0.85-1.0. Three independently written correct solutions
  share at most 0.52 with each other and with the reference (the decode loop, whose shape the
  docstring dictates, is the closest).
- a cell is flagged against the kit when at least `KIT_THRESHOLD` (0.35) of its own code is found
  somewhere in the kit. Kit code must be adapted to the notebook's methods (``self``, the cache
  argument), which breaks windows: kit functions pasted and adapted keep 0.38-0.43 of their cell,
  independent solutions 0.0-0.17, the reference 0.07-0.27 (its ``accept_draft`` is the kit's
  ``accept_greedy``). The margin is narrower than for pairs: read the kit flags side by side.
"""

from __future__ import annotations

import ast
import io
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import get_copied_slices, highlight_overlap

from specdec_helpers.assignment.grading.editions import strip

PACKAGE = Path(__file__).resolve().parents[2]
#: Kit code a graded cell could be copied from (paths inside the package; absent ones are skipped).
KIT_FILES = (
    "core/reference_parts.py",
    "core/reference_loop.py",
    "core/verify.py",
    "core/decode.py",
    "core/drafters.py",
    "core/cache.py",
    "core/rounds.py",
    "core/tree.py",
    "core/sampling.py",
    "core/adaptive.py",
    "core/compiled.py",
    "assignment/parts/decoder.py",
)
#: Parts compared. Not ``init``: two documented library calls that every correct answer writes alike.
PARTS = ("draft", "verify", "decode")
NOISE = 25  # copydetect's k: matches shorter than this many characters of masked code are noise
PAIR_THRESHOLD = 0.7
KIT_THRESHOLD = 0.35
MIN_OVERLAP = 60  # masked characters in common below which nothing is flagged (a line or two)
TEMPLATE = Path(__file__).resolve().parent / "templates" / "similarity.html.j2"


def fingerprint(code: str, name: str, boilerplate=()) -> CodeFingerprint:
    return CodeFingerprint(
        f"{name}.py", NOISE, 1, boilerplate=sorted(boilerplate), language="python", fp=io.StringIO(code)
    )


@dataclass
class Match:
    """One flagged pair: ``student``'s cell of ``part`` and ``other`` ("reference", "kit" or a student)."""

    part: str
    student: str
    other: str
    kind: str  # what ``other`` is: "student", "reference" or "kit"
    similarity: float  # the larger of the two shares below
    shares: tuple[float, float]  # of the student's own code found in the other, and the other way round
    student_html: str = ""
    other_html: str = ""
    other_label: str = ""

    def brief(self) -> dict:
        return {
            "part": self.part,
            "student": self.student,
            "other": self.other,
            "kind": self.kind,
            "similarity": round(self.similarity, 3),
            "other_label": self.other_label,
        }


@dataclass
class Detector:
    """Fingerprints of the reference, its stubs (boilerplate) and the kit, made once for a whole class."""

    reference: dict[str, str]
    parts: tuple = PARTS
    kit_root: Path = PACKAGE
    boilerplate: dict = field(default_factory=dict)
    kit: list = field(default_factory=list)

    def __post_init__(self):
        for part in self.parts:
            if part in self.reference:
                self.boilerplate[part] = fingerprint(strip(self.reference[part]), f"stub_{part}").hashes
        for rel in KIT_FILES:
            path = self.kit_root / rel
            if path.is_file():
                self.kit += [(f"{rel}: {name}", fingerprint(code, name)) for name, code in functions_of(path)]

    def cell(self, part: str, code: str, who: str) -> CodeFingerprint:
        return fingerprint(code, who, self.boilerplate.get(part, ()))

    def compare(self, students: dict[str, dict[str, str]], cross: bool = True) -> list[Match]:
        """Flagged matches of each student's cells with the reference, the kit and (``cross``) each other."""
        matches = []
        for part in self.parts:
            cells = {
                who: self.cell(part, parts[part], who)
                for who, parts in sorted(students.items())
                if part in parts and parts[part]
            }
            ref = self.cell(part, self.reference[part], "reference") if part in self.reference else None
            names = list(cells)
            for i, who in enumerate(names):
                others = ([("reference", "reference", ref)] if ref is not None else []) + (
                    [(other, "student", cells[other]) for other in names[i + 1 :]] if cross else []
                )
                for other, kind, fp in others:
                    match = pair_match(part, who, cells[who], other, kind, fp)
                    if match:
                        matches.append(match)
                kit = self.kit_match(part, who, cells[who])
                if kit:
                    matches.append(kit)
        return sorted(matches, key=lambda m: (-m.similarity, m.part, m.student, m.other))

    def kit_match(self, part: str, who: str, cell: CodeFingerprint) -> Match | None:
        """The share of the cell's own code found anywhere in the kit; the kit functions it came from."""
        found, sources = set(), []
        for label, fp in self.kit:
            common = cell.hashes & fp.hashes
            if common:
                found |= common
                sources.append((len(common), label, fp))
        covered, slices = _found(cell, found)
        if not cell.token_coverage or covered < MIN_OVERLAP or covered / cell.token_coverage < KIT_THRESHOLD:
            return None
        sources.sort(key=lambda s: -s[0])
        student_html = _highlight(cell, slices)
        other_html = "\n\n".join(_highlight(fp, compare_files(cell, fp)[2][1]) for _, _, fp in sources[:3])
        share = float(covered / cell.token_coverage)
        return Match(
            part,
            who,
            "kit",
            "kit",
            share,
            (share, 0.0),
            student_html,
            other_html,
            "kit: " + "; ".join(label for _, label, _ in sources[:3]),
        )


def pair_match(part: str, who: str, a: CodeFingerprint, other: str, kind: str, b: CodeFingerprint) -> Match | None:
    overlap, shares, slices = compare_files(a, b)
    if overlap < MIN_OVERLAP or max(shares) < PAIR_THRESHOLD:
        return None
    return Match(
        part,
        who,
        other,
        kind,
        float(max(shares)),
        (float(shares[0]), float(shares[1])),
        _highlight(a, slices[0]),
        _highlight(b, slices[1]),
        other if kind == "student" else "the reference",
    )


def similarity(a: str, b: str, part: str, reference: dict) -> tuple[float, float]:
    """``(share of a found in b, share of b found in a)`` for two cells of ``part`` (for tests and tuning)."""
    detector = Detector(reference, parts=(part,), kit_root=Path("/nonexistent"))
    return tuple(float(s) for s in compare_files(detector.cell(part, a, "a"), detector.cell(part, b, "b"))[1])


def functions_of(path: Path) -> list[tuple[str, str]]:
    """``(qualified name, source)`` of every function and method in a kit module."""
    text = path.read_text()
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for child in node.body:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                owner = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
                out.append((owner + child.name, "\n".join(lines[first - 1 : child.end_lineno])))
    return out


def _found(cell: CodeFingerprint, hashes: set) -> tuple[int, object]:
    """``(masked characters of cell covered by hashes, their slices in the raw cell)``, as copydetect's
    `compare_files` computes them for one pair."""
    idx = np.array(sorted(i for h in hashes for i in cell.hash_idx.get(h, [])), dtype=int)
    slices = get_copied_slices(idx, cell.k)
    if not slices.size:
        return 0, slices
    covered = int(np.sum(slices[1] - slices[0]))
    if len(cell.offsets):
        slices = (
            slices
            + cell.offsets[:, 1][np.clip(np.searchsorted(cell.offsets[:, 0], slices), 0, cell.offsets.shape[0] - 1)]
        )
    return covered, slices


def _highlight(fp: CodeFingerprint, slices) -> str:
    if getattr(slices, "size", 0) == 0:
        return str(jinja2.utils.markupsafe.escape(fp.raw_code))
    return highlight_overlap(fp.raw_code, slices, "<mark>", "</mark>", escape_html=True)[0]


def write_report(matches: list[Match], path, title: str = "Similar graded cells", note: str = "") -> Path:
    """The HTML report: one section per flagged pair, the two cells side by side, shared code marked."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=True)
    html = env.get_template(TEMPLATE.name).render(
        title=title, note=note, matches=matches, thresholds={"pair": PAIR_THRESHOLD, "kit": KIT_THRESHOLD}, parts=PARTS
    )
    path = Path(path)
    path.write_text(html)
    return path
