"""A Colab student's hand-in, the way it really arrives: notebooks renamed by Colab ("Copy of ...")
or by the browser ("... (1).ipynb"), a fresh stub copy next to the finished one, zips made on a Mac
(``__MACOSX/._*.ipynb``) with a nested folder, and notebooks downloaded from Colab (nbformat 4.0,
Colab's metadata). Each is read as the student meant it.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from specdec_helpers.assignment.parts import cells

from specdec_helpers.assignment.grading import submission

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
NB02, NB03 = "02_draft_generation.ipynb", "03_vectorized_verification.ipynb"


def stubbed(src: Path, dst: Path) -> Path:
    """``src`` with every graded part replaced by the released stub (a fresh copy from the badge)."""
    nb = nbformat.read(str(src), as_version=4)
    for cell in nb.cells:
        if cells.nbgrader(cell).get("solution"):
            cell.source = "def f(self):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    nbformat.write(nb, str(dst))
    return dst


def colab_download(src: Path, dst: Path) -> Path:
    """What File > Download .ipynb writes: nbformat 4.0 without cell ids, Colab's metadata, widget state."""
    data = json.loads(src.read_text())
    data["nbformat_minor"] = 0
    data["metadata"] = {
        "colab": {"provenance": []},
        "accelerator": "GPU",
        "kernelspec": {"name": "python3", "display_name": "Python 3"},
        "widgets": {"application/vnd.jupyter.widget-state+json": {"m1": {"state": {}}}},
    }
    for i, cell in enumerate(data["cells"]):
        cell.pop("id", None)
        cell["metadata"] = {**cell["metadata"], "id": f"c{i}", "colab": {"base_uri": "https://localhost:8080/"}}
    dst.write_text(json.dumps(data))
    return dst


@pytest.mark.parametrize("name", [f"Copy of {NB02}", "02_draft_generation (1).ipynb", "my drafting.ipynb"])
def test_a_later_notebook_finds_earlier_parts_under_any_name(tmp_path, capsys, name):
    colab_download(NOTEBOOKS / NB02, tmp_path / name)
    functions = cells.earlier_parts("04", tmp_path)
    assert "generate_draft_tokens" in functions
    out = capsys.readouterr().out
    assert f"draft   (02): yours ({name})" in out, out


@pytest.mark.slow  # grades: the graded cells run in the grader's child process
def test_a_finished_cell_wins_over_a_fresh_stub_copy_whatever_the_names(tmp_path, capsys):
    from specdec_helpers import cli

    shutil.copy(NOTEBOOKS / NB03, tmp_path / NB03)
    stubbed(NOTEBOOKS / NB03, tmp_path / f"Copy of {NB03}")  # sorts after the finished one
    sources = cells.graded_sources([tmp_path])
    assert not cells.is_stub(sources["verify"])
    assert "verify_tokens_vectorized" in cells.earlier_parts("04", tmp_path, verbose=False)
    results = tmp_path / "results.json"
    assert cli.grade([str(tmp_path), "--no-nbval", "--no-perf", "--visible-only", "--results", str(results)]) == 0
    data = json.loads(results.read_text())
    verify = [t["status"] for t in data["tests"] if t["name"].startswith("3 verification")]
    assert verify and set(verify) == {"passed"}  # the finished copy was graded
    note = f"verify: graded the cell in {NB03!r}"  # the grade says which copy it took, of which
    lines = [t for t in data["tests"] if note in t["name"]]
    assert len(lines) == 1 and lines[0]["max_score"] == 0 and f"'Copy of {NB03}'" in lines[0]["output"]
    assert note in capsys.readouterr().out


def test_a_zip_made_on_a_mac_with_a_nested_folder(tmp_path):
    handin = tmp_path / "handin.zip"
    with zipfile.ZipFile(handin, "w") as archive:
        archive.write(NOTEBOOKS / NB03, f"my work/notebooks/{NB03}")
        archive.writestr(f"__MACOSX/my work/notebooks/._{NB03}", b"\x00\x05\x16\x07 AppleDouble resource fork")
        archive.writestr("my work/.ipynb_checkpoints/03-checkpoint.ipynb", b"{}")
    paths = submission.notebooks_in(handin)
    assert [p.name for p in paths] == [NB03]
    assert not cells.is_stub(cells.graded_sources(paths)["verify"])


def test_a_renamed_notebook_is_graded_with_the_instructors_check_cells(tmp_path):
    path = colab_download(NOTEBOOKS / NB03, tmp_path / f"Copy of {NB03}")
    nb = cells.read_notebook(path)
    check = next(c for c in nb.cells if cells.nbgrader(c).get("grade_id") == "verify_check")
    check.source = "print('✅ all good')  # a student's edit of a locked cell"
    reference = submission.instructor_notebook(nb)
    assert reference is not None and reference.name == NB03
    restored = submission.with_instructor_cells(nb, cells.read_notebook(reference))
    check = next(c for c in restored.cells if cells.nbgrader(c).get("grade_id") == "verify_check")
    assert "check_part" in check.source


def test_a_graded_check_on_the_stub_says_not_implemented_and_what_to_do(capsys):
    from specdec_helpers.assignment.student.check import CheckFailed, check_part

    def stub(self, model_name):
        raise NotImplementedError()

    with pytest.raises(CheckFailed) as failed:
        check_part("init", initialize_target_model=stub, initialize_draft_model=stub)
    assert "not implemented yet" in capsys.readouterr().out
    assert str(failed.value).startswith("Not done yet:") and "see the checks above" not in str(failed.value)


@pytest.mark.slow  # grades: the graded cells run in the grader's child process
def test_a_file_that_is_not_a_notebook_is_named_and_the_rest_graded(tmp_path):
    from specdec_helpers import cli

    shutil.copy(NOTEBOOKS / NB03, tmp_path / NB03)
    (tmp_path / "04_kv_cached_verification.ipynb").write_text("<!DOCTYPE html><html>Google Drive</html>")
    results = tmp_path / "results.json"
    assert cli.grade([str(tmp_path), "--no-nbval", "--no-perf", "--visible-only", "--results", str(results)]) == 0
    data = json.loads(results.read_text())
    broken = [t for t in data["tests"] if "04_kv_cached_verification.ipynb" in t["name"]]
    assert broken and "File > Download" in broken[0]["output"], data["output"]
    verify = [t for t in data["tests"] if t["name"].startswith("3 verification")]
    assert verify and all(t["status"] == "passed" for t in verify)


def test_on_colab_the_copies_saved_in_a_mounted_drive_are_found(tmp_path, monkeypatch, capsys):
    drive, content = tmp_path / "drive" / "MyDrive" / "Colab Notebooks", tmp_path / "content"
    drive.mkdir(parents=True)
    content.mkdir()
    shutil.copy(NOTEBOOKS / NB02, drive / f"Copy of {NB02}")  # File > Save a copy in Drive
    monkeypatch.setattr(cells, "COLAB_DRIVE_NOTEBOOKS", drive)
    assert "generate_draft_tokens" not in cells.earlier_parts("04", content)  # not on Colab: only the folder
    monkeypatch.setitem(__import__("sys").modules, "google.colab", object())
    assert "generate_draft_tokens" in cells.earlier_parts("04", content)
    assert f"draft   (02): yours (Copy of {NB02})" in capsys.readouterr().out


def test_a_failed_check_line_shows_the_verdict_not_nbvals_report(tmp_path):
    from nbformat.v4 import new_code_cell, new_notebook

    verdict = "Not done yet: the exercise above still raises NotImplementedError. compare the two dicts."
    text = (
        "#x1B[91mNotebook cell execution failed#x1B[0m\n#x1B[94mCell 1: Cell execution caused an exception\n\n"
        "Input:\n#x1B[0m# NBVAL_CHECK_OUTPUT\nnb.check(lambda: same(a, b), 'ok', 'compare the two dicts.')\n\n"
        f"#x1B[94mTraceback:#x1B[0m\n\n{verdict}\n"
    )
    junit = tmp_path / "01.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase name="Cell 0"/><testcase name="Cell 1">'
        '<failure message="Notebook cell execution failed [+1 more line]">'
        f"{text.replace('&', '&amp;').replace('<', '&lt;')}</failure></testcase></testsuite></testsuites>"
    )
    nb = new_notebook(
        cells=[
            new_code_cell("x = 1"),
            new_code_cell("nb.check(...)", metadata={"nbgrader": {"grade_id": "ex1_check", "locked": True}}),
        ]
    )
    line, others = submission._check_lines("01_x.ipynb", nb, junit)
    assert line.status == "failed" and line.feedback == verdict
    assert (others.name, others.status) == ("01_x.ipynb: its 1 other cells run", "passed")


def test_a_failed_cell_without_a_check_gets_a_line_too(tmp_path):
    """nbval-lax runs every cell: one that fails with no check cell after it (a plot at the end) is reported, naming
    the first such cell and its error, with 0 points; a cell nbval never ran counts as failed."""
    from nbformat.v4 import new_code_cell, new_notebook

    junit = tmp_path / "05.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase name="Cell 0"/><testcase name="Cell 1"/><testcase name="Cell 2">'
        "<failure>Traceback:\nNameError: name 'plot' is not defined</failure></testcase></testsuite></testsuites>"
    )
    check = {"nbgrader": {"grade_id": "ex1_check", "locked": True}}
    cells = [new_code_cell("x = 1"), new_code_cell("nb.check(...)", metadata=check), new_code_cell("plot(x)")]
    line, others = submission._check_lines("05_x.ipynb", new_notebook(cells=cells), junit)
    assert line.status == "passed" and (others.status, others.score, others.max_score) == ("failed", 0.0, 0.0)
    assert others.feedback == "1 of them failed, first code cell 3 ('plot(x)'): NameError: name 'plot' is not defined"
    cells.append(new_code_cell("never_run()"))
    _, others = submission._check_lines("05_x.ipynb", new_notebook(cells=cells), junit)
    assert others.feedback.startswith("2 of them failed, first code cell 3")
    # a cell nbval skipped (NBVAL_SKIP) never ran: said, not failed; a skipped check cell fails
    junit.write_text(
        '<testsuites><testsuite><testcase name="Cell 0"><skipped/></testcase><testcase name="Cell 1"><skipped/>'
        '</testcase><testcase name="Cell 2"/></testsuite></testsuites>'
    )
    line, others = submission._check_lines("05_x.ipynb", new_notebook(cells=cells[:3]), junit)
    assert line.status == "failed" and others.status == "passed"
    assert others.feedback == "1 skipped (NBVAL_SKIP), first code cell 1 ('x = 1')"


def _verify_solution() -> str:
    nb = cells.read_notebook(NOTEBOOKS / NB03)
    source = next(c.source for c in nb.cells if cells.nbgrader(c).get("grade_id") == "verify")
    return "\n".join(line for line in source.splitlines() if "### " not in line)


@pytest.mark.slow
def test_a_check_cell_tests_the_graded_cell_as_the_grader_runs_it_alone():
    """The grader runs each graded cell on its own: a helper defined in another cell of the notebook
    works in the kernel but not there, so the check cell must fail too, and say why."""
    import nbclient
    from nbformat.v4 import new_code_cell, new_notebook

    check = (
        "from specdec_helpers.assignment.student.check import check_part\n"
        "check_part('verify', accept_draft=accept_draft, verify_tokens_vectorized=verify_tokens_vectorized)"
    )
    with_helper = _verify_solution().replace("choices = target_logits.argmax(-1)", "choices = _greedy(target_logits)")
    assert with_helper != _verify_solution()
    nb = new_notebook(
        cells=[
            new_code_cell("from specdec_helpers.present import notebook_help as nb\ninfo = nb.setup()"),
            new_code_cell("def _greedy(logits):\n    return logits.argmax(-1)"),
            new_code_cell(with_helper),
            new_code_cell(check),
            new_code_cell(_verify_solution()),
            new_code_cell(check),
        ]
    )
    nbclient.NotebookClient(nb, timeout=300, allow_errors=True).execute()
    text = ["".join(o.get("text", "") + o.get("evalue", "") for o in c.outputs) for c in nb.cells]
    assert any(o.output_type == "error" for o in nb.cells[3].outputs), text[3]
    assert "_greedy" in text[3] and "on its own" in text[3], text[3]
    assert not any(o.output_type == "error" for o in nb.cells[5].outputs) and "✅" in text[5], text[5]
