"""A submission: a folder or zip of notebooks. Its graded cells (`cells.graded_sources`) go to the
hidden tests; the notebooks themselves run under nbval, each in its own kernel, after every locked
cell (check cells and their saved outputs) is replaced by the instructor's version, matched by
nbgrader ``grade_id``. nbval's lines are reported with 0 points: a student cell that prints a
check's verdict earns nothing. pytest and nbval run as the grader; each notebook's kernel runs in the
student's `privilege.Jail`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
import zipfile
from pathlib import Path

from specdec_helpers.assignment.parts.cells import (
    chosen_copy,
    graded_cell_copies,
    graded_sources,
    nbgrader,
    notebook_files,
    read_notebook,
)
from specdec_helpers.assignment.grading import privilege
from specdec_helpers.assignment.grading.scoring import Result

ROOT = Path(__file__).resolve().parents[3]  # the kit's top folder (release.py is instructor-only: not imported)


INSTRUCTOR_NOTEBOOKS = ROOT / "notebooks"


class SubmissionError(Exception):
    """The submission cannot be read; the message says what was looked for."""


def notebooks_in(path) -> list[Path]:
    """The notebooks of a folder, a zip (extracted to a temporary folder) or a single .ipynb, at any depth
    (a zipped folder); a Mac's ``__MACOSX`` resource forks and Jupyter's checkpoints are not notebooks."""
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"{path} does not exist")
    if path.suffix == ".zip":
        folder = Path(tempfile.mkdtemp(prefix="specdec-handin-"))
        atexit.register(shutil.rmtree, folder, True)  # a class run reads hundreds of zips
        try:
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    if member.endswith(".ipynb") and ".." not in Path(member).parts and not member.startswith("/"):
                        archive.extract(member, folder)
        except zipfile.BadZipFile as error:
            raise SubmissionError(
                f"{path.name} is not a readable zip ({error}); make it again with "
                "`python -m specdec_helpers handin` and resubmit"
            ) from None
        path = folder
    found = notebook_files([path])
    if not found:
        raise SubmissionError(f"no notebooks (.ipynb) in {path}")
    return found


def readable(paths: list[Path]) -> tuple[list[Path], list[Result]]:
    """``(notebooks that read, one 0-point line per file that does not)``: a broken upload (a Drive page
    saved as .ipynb, a half-written file) is named to the student, and the rest is still graded."""
    good, bad = [], []
    for path in paths:
        try:
            read_notebook(path)
        except Exception as error:  # noqa: BLE001 - whatever it is, it is not a notebook
            bad.append(
                Result(
                    "load",
                    f"{path.name} reads as a notebook",
                    0.0,
                    0.0,
                    "error",
                    f"not a notebook ({type(error).__name__}: {str(error)[:120]}); download it again with "
                    "File > Download > Download .ipynb and resubmit",
                    test_id=f"load.{path.stem}",
                )
            )
        else:
            good.append(path)
    if not good:
        raise SubmissionError("; ".join(r.feedback for r in bad) or "no notebooks")
    return good, bad


def graded_parts(paths: list[Path]) -> tuple[dict, list[Result]]:
    """``({part: source}, one 0-point line per part that several notebooks hold)``: a student who handed in
    two copies of a notebook (Colab's "Copy of ...", a second download) reads which copy was graded."""
    copies = graded_cell_copies(paths)
    notes = []
    for part, held in copies.items():
        if len(held) > 1:
            chosen = chosen_copy(held)[1].name
            names = ", ".join(repr(path.name) for _, path in held)
            notes.append(
                Result(
                    "load",
                    f"{part}: graded the cell in {chosen!r}",
                    0.0,
                    0.0,
                    "passed",
                    f"{len(held)} notebooks hold this part ({names}); the last finished one is graded. "
                    "Hand in one copy of each notebook to choose yourself",
                    test_id=f"load.{part}",
                )
            )
    return {part: chosen_copy(held)[0] for part, held in copies.items()}, notes


def reference_sources(folder=INSTRUCTOR_NOTEBOOKS) -> dict:
    """The instructor's graded cells (the reference solution)."""
    return graded_sources([folder])


def instructor_notebook(nb, instructor_dir=INSTRUCTOR_NOTEBOOKS) -> Path | None:
    """The instructor's notebook that ``nb`` is a copy of, whatever the student's file is called: the one
    sharing the most locked cells' grade_ids (Colab saves "Copy of 03_...", browsers "03_... (1)")."""

    def locked(notebook) -> set:
        return {
            nbgrader(c)["grade_id"] for c in notebook.cells if nbgrader(c).get("locked") and nbgrader(c).get("grade_id")
        }

    mine = locked(nb)
    shared = {path: len(mine & locked(read_notebook(path))) for path in sorted(Path(instructor_dir).glob("*.ipynb"))}
    best = max(shared, key=shared.get, default=None)
    return best if best is not None and shared[best] else None


def with_instructor_cells(nb, instructor):
    """``nb`` with each locked cell replaced by the instructor's cell of the same grade_id."""
    locked = {
        nbgrader(c)["grade_id"]: c
        for c in instructor.cells
        if nbgrader(c).get("locked") and nbgrader(c).get("grade_id")
    }
    for i, cell in enumerate(nb.cells):
        grade_id = nbgrader(cell).get("grade_id")
        if grade_id in locked:
            nb.cells[i] = locked[grade_id]
    return nb


def run_nbval(
    paths: list[Path], instructor_dir=INSTRUCTOR_NOTEBOOKS, timeout: float = 900, preset: str = "toy"
) -> list[Result]:
    """Run each notebook under nbval (its own pytest and kernel); one 0-point line per check cell."""
    work = Path(tempfile.mkdtemp(prefix="specdec-nbval-"))
    try:
        return _run_nbval(paths, instructor_dir, timeout, preset, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the notebooks' copies and junit files, read by then


def _run_nbval(paths: list[Path], instructor_dir, timeout: float, preset: str, work: Path) -> list[Result]:
    import nbformat

    copies = []
    for path in paths:
        nb = read_notebook(path)
        reference = instructor_notebook(nb, instructor_dir)
        if reference is not None:
            nb = with_instructor_cells(nb, read_notebook(reference))
        nbformat.write(nb, str(work / path.name))
        copies.append((work / path.name, nb))
    # pytest and nbval run here, as the grader; only the kernels (the student's code) run in the student's jail
    own = privilege.current() is None
    jail = privilege.Jail() if own else privilege.current()
    # SPECDEC_QUICK: the notebooks' own measurements at their small sizes (as under CI's nbval), since only
    # the check cells' verdicts are graded; a class's grading spends its minutes on the hand-ins, not on plots
    kernel_env = {
        "SPECDEC_PRESET": preset,
        "SPECDEC_THREADS": "1",
        "SPECDEC_QUICK": "1",
        "SPECDEC_EXPORT_DIR": str(jail.scratch / "export"),
    }
    env = {
        **os.environ,
        "SPECDEC_PRESET": preset,
        "SPECDEC_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "JUPYTER_PATH": str(work / "jupyter"),
    }
    results = []
    try:
        _beside_the_kernels(copies, jail)
        kernel = jail.kernel_spec(work / "jupyter", kernel_env)
        for copy, nb in copies:
            junit = work / (copy.stem + ".xml")
            try:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pytest",
                        "-q",
                        "--nbval-lax",
                        f"--nbval-kernel-name={kernel}",
                        "-p",
                        "no:cacheprovider",
                        f"--junitxml={junit}",
                        "--rootdir",
                        str(work),
                        str(copy),
                    ],
                    cwd=work,
                    env=env,
                    timeout=timeout,
                    capture_output=True,
                    start_new_session=True,
                )
            except subprocess.TimeoutExpired:
                results.append(
                    Result(
                        "checks",
                        f"{copy.name} runs",
                        0.0,
                        0.0,
                        "failed",
                        f"did not finish in {timeout:g} s",
                        test_id=f"nbval.{copy.stem}",
                    )
                )
                continue
            finally:
                jail.kill()  # its kernel and whatever that left behind
            results += _check_lines(copy.name, nb, junit)
    finally:
        if own:
            jail.close()
    return results


def _beside_the_kernels(copies, jail) -> None:
    """The notebooks in the kernels' working folder (the jail's scratch), as they sit side by side in the
    student's: a check that reads an earlier notebook's part (`cells.earlier_parts`) finds it in the sandbox.
    Never through a link the student's code may have left there: removed, then created anew."""
    for copy, _ in copies:
        target = jail.scratch / copy.name
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(copy.read_bytes())


def _verdict(report: str) -> str:
    """What the student needs from nbval's failure report: the error's last line (a failed check's whole
    verdict), not the colour codes and the cell's source before it."""
    text = re.sub(r"(\x1b|#x1B)\[[0-9;]*m", "", report).split("Traceback:")[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "failed")[:400]


SKIPPED = "skipped (NBVAL_SKIP): it never ran"


def _cell_words(cell, index: int) -> str:
    """A code cell as a student finds it: its number among the code cells from 1, and its first line."""
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    return f"code cell {index + 1} ({first[:60]!r})"


def _check_lines(name: str, nb, junit: Path) -> list[Result]:
    """A 0-point line per check cell, and one for the notebook's other cells: a cell that fails with no check after
    it is reported too, so the grading of a solved hand-in runs every cell as plain nbval would (tests/test_course)."""
    verdicts = {}
    if junit.is_file():
        for case in ElementTree.parse(junit).getroot().iter("testcase"):
            failure = case.find("failure") if case.find("failure") is not None else case.find("error")
            index = int(case.get("name", "Cell -1").split()[-1])
            verdicts[index] = "" if failure is None else _verdict(failure.text or failure.get("message") or "failed")
            if failure is None and case.find("skipped") is not None:  # NBVAL_SKIP: the cell never ran
                verdicts[index] = SKIPPED
    code = [c for c in nb.cells if c.cell_type == "code"]
    lines = []
    for index, cell in enumerate(code):
        grade_id = nbgrader(cell).get("grade_id", "")
        if not grade_id.endswith("_check"):
            continue
        problem = verdicts.get(index, "not run")
        lines.append(
            Result(
                "checks",
                f"{name}: {grade_id}",
                0.0,
                0.0,
                "passed" if problem == "" else "failed",
                problem,
                test_id=f"nbval.{Path(name).stem}.{grade_id}",
            )
        )
    others = [i for i, cell in enumerate(code) if not nbgrader(cell).get("grade_id", "").endswith("_check")]
    broken = [i for i in others if verdicts.get(i, "not run") not in ("", SKIPPED)]
    skipped = [i for i in others if verdicts.get(i) == SKIPPED]
    if verdicts and others:  # every cell counts: one that fails with no check after it would go unseen
        said = []
        if broken:
            i = broken[0]
            said.append(f"{len(broken)} of them failed, first {_cell_words(code[i], i)}: {verdicts.get(i, 'not run')}")
        if skipped:
            said.append(f"{len(skipped)} skipped (NBVAL_SKIP), first {_cell_words(code[skipped[0]], skipped[0])}")
        lines.append(
            Result(
                "checks",
                f"{name}: its {len(others)} other cells run",
                0.0,
                0.0,
                "failed" if broken else "passed",
                "; ".join(said),
                test_id=f"nbval.{Path(name).stem}.cells",
            )
        )
    if not verdicts:
        lines.append(
            Result(
                "checks",
                f"{name} runs under nbval",
                0.0,
                0.0,
                "failed",
                "nbval did not run the notebook",
                test_id=f"nbval.{Path(name).stem}",
            )
        )
    return lines
