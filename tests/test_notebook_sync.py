"""The notebooks' shared parts: every Colab badge and set-up cell points at one repository."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

from course_notebooks import contract_notebook
from specdec_helpers.assignment.authoring import notebook_sync
from specdec_helpers.present import notebook_help as nbh

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
URL = "https://github.com/course/specdec-students"


def test_course_notebooks_share_badge_and_setup():
    paths = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
    assert paths
    assert notebook_sync.check(paths) == []


def test_check_names_each_wrong_link_and_fix_repairs_only_those(tmp_path):
    path = tmp_path / "01_multiply.ipynb"
    nb = contract_notebook(path.name, "multiply", "https://github.com/someone/else")
    nb.cells[1].source = nb.cells[1].source.replace("info = nb.setup()", "")
    nbformat.write(nb, str(path))
    problems = notebook_sync.check(tmp_path, URL)
    assert len(problems) == 3, problems
    assert "badge opens https://colab.research.google.com/github/someone/else/" in problems[0]
    assert (
        "installs git+https://github.com/someone/else@main, expected git+https://github.com/course/specdec-students@main"
        in problems[1]
    )
    assert "nb.setup()" in problems[2]
    before = nbformat.read(str(path), as_version=4)
    assert notebook_sync.fix(tmp_path, URL) == [path]
    after = nbformat.read(str(path), as_version=4)
    assert notebook_sync.check(tmp_path, URL) == [problems[2]]  # fix rewrites links, never writes cells
    assert [c.source for c in after.cells[2:]] == [c.source for c in before.cells[2:]]
    assert notebook_sync.fix(tmp_path, URL) == []  # nothing left to change


def test_missing_badge_and_install_line(tmp_path):
    nb = contract_notebook("01_x.ipynb", "x")
    nb.cells[0].source = "# 01 · X"
    nb.cells[1].source = "from specdec_helpers.present import notebook_help as nb\nnb.setup()"
    problems = notebook_sync.problems_in(nb, "01_x.ipynb")
    assert any("no 'Open in Colab' badge" in p for p in problems)
    assert any("no Colab install line" in p for p in problems)


def test_real_notebooks_point_at_a_new_repository(tmp_path):
    for path in sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))[:2]:
        shutil.copy(path, tmp_path / path.name)
    changed = notebook_sync.fix(tmp_path, URL, branch="2027")
    assert len(changed) == 2 and notebook_sync.check(tmp_path, URL, branch="2027") == []
    first = nbformat.read(str(changed[0]), as_version=4)
    assert nbh.colab_badge(changed[0].name, URL, "2027") in first.cells[0].source


def test_outputs_nbval_never_compares_are_named_and_cleared(tmp_path):
    from nbformat.v4 import new_code_cell, new_output

    path = tmp_path / "01_x.ipynb"
    nb = contract_notebook(path.name, "x")
    stale = new_code_cell(
        "print('plot')", outputs=[new_output("stream", name="stdout", text="plot\n")], id="stale-cell"
    )
    kept = new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(2)", outputs=[new_output("stream", name="stdout", text="2\n")])
    nb.cells += [stale, kept]
    nbformat.write(nb, str(path))
    problems = notebook_sync.check(path)
    assert len(problems) == 1 and "1 cell(s) keep saved outputs" in problems[0] and "stale-cell" in problems[0], (
        problems
    )
    assert notebook_sync.fix(path) == [path]
    after = nbformat.read(str(path), as_version=4)
    assert after.cells[-2].outputs == [] and after.cells[-1].outputs[0]["text"] == "2\n"
    assert notebook_sync.check(path) == []
