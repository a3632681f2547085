"""Bundle your work for submission: ``python -m specdec_helpers handin [--out handin.zip] [--force]``.

Packs ``notebooks/*.ipynb`` and ``report/`` into one zip (upload it to Gradescope). It refuses, one
line a problem, while the hand-in is not finished: a report that still holds the template's TODO
paragraphs, notebooks whose graded cells were never run, raised an error, or still hold the stubs
(``raise NotImplementedError()``, ``YOUR ANSWER HERE``, a ``# YOUR CODE HERE`` with nothing under
it). ``--force`` writes the zip anyway, with the problems as a warning (a partial hand-in).

Graded cells are the ones nbgrader's metadata marks: answers (``solution: true``) and their checks
(``grade: true`` or a locked ``..._check`` cell). In a notebook without that metadata, a cell holding
a stub counts as an unfinished answer.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import nbformat

#: (what, glob pattern relative to the kit root); each needs at least one match (README.md does not count).
REQUIRED = [
    ("the notebooks", "notebooks/*.ipynb"),
    ("your report (a .md file in report/)", "report/*.md"),
]
PACKED = ["notebooks/*.ipynb", "report/**/*"]
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints"}
MAX_FILE_MB = 20
NOT_REPORTS = {"README.md"}
CODE_MARK = "# YOUR CODE HERE"
TODO_PARAGRAPH = re.compile(r"(?:\A|\n[ \t]*\n)[ \t]*TODO\b")


class HandinError(ValueError):
    """The hand-in is not finished; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def missing(root: Path) -> list[str]:
    """Descriptions of the required files that are not there."""
    return [
        f"missing {what}: {pattern}"
        for what, pattern in REQUIRED
        if not any(p.is_file() and p.name not in NOT_REPORTS for p in root.glob(pattern))
    ]


def report_problems(root: Path) -> list[str]:
    """Empty if at least one report (``report/*.md`` but README.md) has no TODO paragraph left."""
    reports = sorted(p for p in root.glob("report/*.md") if p.name not in NOT_REPORTS)
    todos = {p: len(TODO_PARAGRAPH.findall(p.read_text(errors="replace"))) for p in reports}
    if not reports or not all(todos.values()):
        return []
    return [
        f"{p.relative_to(root).as_posix()}: {n} TODO paragraph(s) of the template left; replace each with "
        "your own words"
        for p, n in todos.items()
    ]


def has_stub(source: str) -> bool:
    """A stub is left: ``raise NotImplementedError()``, ``YOUR ANSWER HERE``, or a ``# YOUR CODE HERE``
    with nothing written under it (the comment kept above the student's code is fine)."""
    lines = source.splitlines()
    if any(line.strip() in ("raise NotImplementedError()", "YOUR ANSWER HERE") for line in lines):
        return True
    for i, line in enumerate(lines):
        if line.strip() == CODE_MARK:
            indent = len(line) - len(line.lstrip())
            after = [x for x in lines[i + 1 :] if x.strip() and not x.strip().startswith("#")]
            if not after or len(after[0]) - len(after[0].lstrip()) < indent:
                return True
    return False


def _graded(cell, by_metadata: bool) -> tuple[bool, bool]:
    """(is an answer cell, is a check cell) by nbgrader metadata, else by a stub in it."""
    meta = cell.metadata.get("nbgrader", {})
    answer = bool(meta.get("solution")) if by_metadata else has_stub(cell.source)
    check = not answer and (
        bool(meta.get("grade")) or (bool(meta.get("locked")) and str(meta.get("grade_id", "")).endswith("_check"))
    )
    return answer, check


def _name(cell, index: int) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index + 1}"


def notebook_problems(path: Path, rel: str) -> list[str]:
    """One line per kind of problem in one notebook's exercise cells (graded and practice) and check cells."""
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as error:  # noqa: BLE001 - not JSON, not a notebook: whatever it is, said as a problem
        return [f"{rel}: cannot be read as a notebook ({type(error).__name__}: {error})"]
    stubs, unrun, graded_code, problems = [], [], [], []
    by_metadata = any("nbgrader" in cell.metadata for cell in nb.cells)
    for i, cell in enumerate(nb.cells):
        answer, check = _graded(cell, by_metadata)
        if not (answer or check):
            continue
        if answer and has_stub(cell.source):
            stubs.append(_name(cell, i))
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        graded_code.append(_name(cell, i))
        if cell.execution_count is None and not cell.outputs:
            unrun.append(_name(cell, i))
        for output in cell.outputs:
            if output.get("output_type") == "error":
                message = (output.get("evalue") or "").strip().splitlines()
                problems.append(
                    f"{rel}: cell '{_name(cell, i)}' raised {output.get('ename', 'an error')}"
                    + (f": {message[0][:120]}" if message else "")
                    + "; fix it and run it again"
                )
    if stubs:
        problems.insert(
            0,
            f"{rel}: {len(stubs)} exercise cell(s) still hold the stub ({', '.join(stubs)}): "
            "write your code in place of raise NotImplementedError() / YOUR ANSWER HERE (practice "
            "exercises too: a notebook is handed in finished)",
        )
    if unrun and len(unrun) == len(graded_code):
        problems.append(
            f"{rel}: not run (none of its {len(unrun)} exercise and check cells has output): "
            "Run all, then save the notebook"
        )
    elif unrun:
        problems.append(f"{rel}: exercise or check cells not run ({', '.join(unrun)}): Run all, then save the notebook")
    return problems


def problems(root) -> list[str]:
    """Everything that stops a hand-in, one line each (empty: ready)."""
    root = Path(root)
    found = missing(root) + report_problems(root)
    for path in sorted(root.glob("notebooks/*.ipynb")):
        found += notebook_problems(path, path.relative_to(root).as_posix())
    return found


def files(root: Path) -> list[Path]:
    found = {p for pattern in PACKED for p in root.glob(pattern) if p.is_file() and not SKIP_PARTS & set(p.parts)}
    return sorted(p for p in found if p.stat().st_size <= MAX_FILE_MB * 1e6)


def check_out(out: Path) -> None:
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; name the zip to write, e.g. {out / 'handin.zip'}")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: the folder {out.parent} does not exist")


def handin(root=".", out="handin.zip", force: bool = False) -> tuple[Path, list[str]]:
    """Write the zip; returns ``(zip path, problems)``.

    Raises HandinError listing the problems unless ``force`` (then they are returned as warnings),
    ValueError for an ``out`` that cannot be written, FileNotFoundError when there is nothing to pack.
    """
    root, out = Path(root).resolve(), Path(out).resolve()
    check_out(out)
    found = problems(root)
    if found and not force:
        raise HandinError(found)
    packed = [p for p in files(root) if p != out]
    if not packed:
        raise FileNotFoundError(
            f"nothing to hand in: no notebooks/*.ipynb or report/ in {root}; run this from "
            "the kit's top folder or pass --root"
        )
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in packed:
            archive.write(path, path.relative_to(root).as_posix())
    return out, found
