"""handin: refuses unfinished work (one line a problem), --force hands in anyway, clear --out errors."""

from __future__ import annotations

import zipfile

import nbformat
import pytest

from course_notebooks import REPORT, error_output, instructor_kit, ran, stream
from specdec_helpers import cli
from specdec_helpers.assignment.student import handin

from specdec_helpers.assignment.authoring import release

URL = "https://github.com/course/specdec-students"


@pytest.fixture
def student(tmp_path):
    """A fresh student repository, released from a small instructor kit."""
    release.release(tmp_path / "students", instructor_kit(tmp_path / "src"), URL)
    return tmp_path / "students"


def finish(root, notebook="01_multiply.ipynb", answer="    return a * b", outputs=None):
    """Fill ``notebook``'s answers and mark its graded cells as run."""
    path = root / "notebooks" / notebook
    nb = nbformat.read(str(path), as_version=4)
    code, check, written = nb.cells[2], nb.cells[3], nb.cells[4]
    code.source = code.source.replace("    # YOUR CODE HERE\n    raise NotImplementedError()", answer)
    written.source = written.source.replace("YOUR ANSWER HERE", "Because it multiplies.")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            ran(cell, count=i)
    ran(check, *(outputs if outputs is not None else [stream()]), count=3)
    nbformat.write(nb, str(path))


def write_report(root):
    (root / "report/REPORT_TEMPLATE.md").write_text(
        REPORT.replace("TODO: how your decoder works.", "It drafts.").replace("TODO: which k is best.", "k = 4.")
    )


def handin_cli(capsys, root, *extra):
    rc = cli.handin(["--root", str(root), "--out", str(root / "handin.zip"), *map(str, extra)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_untouched_kit_is_refused_with_one_line_per_problem(student, capsys):
    rc, out, err = handin_cli(capsys, student)
    assert rc == 1 and not (student / "handin.zip").exists()
    problems = [line for line in err.splitlines() if line.startswith("  - ")]
    assert len(problems) == 5, err  # the report; per notebook: stubs, not run
    assert "report/REPORT_TEMPLATE.md: 2 TODO paragraph(s)" in problems[0]
    assert "notebooks/01_multiply.ipynb: 2 exercise cell(s) still hold the stub (multiply, multiply_why)" in err
    assert "notebooks/02_times.ipynb: not run" in err and "--force" in err


def test_force_hands_in_anyway_with_a_warning(student, capsys):
    rc, out, err = handin_cli(capsys, student, "--force")
    assert rc == 0 and "handing in anyway (--force) with 5 problem(s)" in err
    with zipfile.ZipFile(student / "handin.zip") as archive:
        names = set(archive.namelist())
    assert {"notebooks/01_multiply.ipynb", "notebooks/02_times.ipynb", "report/REPORT_TEMPLATE.md"} <= names
    assert not [n for n in names if n.startswith("specdec_helpers")]


def test_finished_work_is_handed_in(student, capsys):
    for name in ("01_multiply.ipynb", "02_times.ipynb"):
        finish(student, name)
    write_report(student)
    assert handin.problems(student) == []
    rc, out, err = handin_cli(capsys, student)
    assert rc == 0 and "Upload this zip to Gradescope" in out and not err


def test_each_kind_of_unfinished_cell_is_named(student):
    finish(student, "01_multiply.ipynb", outputs=[error_output()])  # its check raised
    finish(student, "02_times.ipynb")
    path = student / "notebooks/02_times.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[2].execution_count, nb.cells[2].outputs = None, []  # edited after the last run
    nbformat.write(nb, str(path))
    write_report(student)
    assert handin.problems(student) == [
        "notebooks/01_multiply.ipynb: cell 'multiply_check' raised CheckFailed: ❌ Not yet: the product is "
        "wrong; fix it and run it again",
        "notebooks/02_times.ipynb: exercise or check cells not run (times): Run all, then save the notebook",
    ]


def test_report_elsewhere_counts_and_readme_does_not(student):
    for name in ("01_multiply.ipynb", "02_times.ipynb"):
        finish(student, name)
    (student / "report/REPORT.md").write_text("# My report\n\nAll written; the template stays as it was.\n")
    assert handin.problems(student) == []
    (student / "report/REPORT.md").unlink()
    (student / "report/REPORT_TEMPLATE.md").unlink()
    assert handin.problems(student) == ["missing your report (a .md file in report/): report/*.md"]


@pytest.mark.parametrize("where, fragment", [("folder", "is a folder"), ("no parent", "does not exist")])
def test_out_errors_are_one_line(student, capsys, where, fragment):
    out = student / "report" if where == "folder" else student / "nope" / "handin.zip"
    rc = cli.handin(["--root", str(student), "--out", str(out), "--force"])
    err = capsys.readouterr().err
    assert rc == 2 and fragment in err and len(err.strip().splitlines()) == 1


def test_nothing_to_hand_in(tmp_path, capsys):
    rc = cli.handin(["--root", str(tmp_path), "--out", str(tmp_path / "h.zip"), "--force"])
    err = capsys.readouterr().err
    assert rc == 2 and "nothing to hand in" in err
    assert handin.problems(tmp_path) == [
        "missing the notebooks: notebooks/*.ipynb",
        "missing your report (a .md file in report/): report/*.md",
    ]


def test_what_counts_as_a_stub():
    assert handin.has_stub("def f():\n    # YOUR CODE HERE\n    raise NotImplementedError()")
    assert handin.has_stub("def f():\n    # YOUR CODE HERE\n\nx = 1")  # nothing written in its place
    assert handin.has_stub("Why?\n\nYOUR ANSWER HERE")
    assert not handin.has_stub("def f():\n    # YOUR CODE HERE\n    return 1")  # the comment may stay
    assert not handin.has_stub("def f():\n    return 1")


def test_with_nbgrader_metadata_only_answer_cells_count(student):
    for name in ("01_multiply.ipynb", "02_times.ipynb"):
        finish(student, name)
    write_report(student)
    path = student / "notebooks/01_multiply.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells.append(
        ran(nbformat.v4.new_code_cell("class Base:\n    def f(self):\n        raise NotImplementedError()"))
    )
    nbformat.write(nb, str(path))
    assert handin.problems(student) == []  # a given cell that raises NotImplementedError is no answer
