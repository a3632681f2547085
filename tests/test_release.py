"""release --repo-url: the student repository (its README, badges, install cells, no solutions) and
the refusals that keep it from overwriting or pointing at the instructor's repository."""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest

from course_notebooks import SECRETS, instructor_kit, solution_lines
from specdec_helpers import cli
from specdec_helpers.assignment.authoring import notebook_sync, release

URL = "https://github.com/course/specdec-students"


def run_release(capsys, *args) -> tuple[int, str]:
    rc = cli.release(list(map(str, args)))
    return rc, capsys.readouterr().err


def test_student_repository_has_its_readme_badges_and_no_solutions(tmp_path, capsys):
    src = instructor_kit(tmp_path / "src")
    out = tmp_path / "students"
    rc, err = run_release(capsys, "--out", out, "--root", src, "--repo-url", URL)
    assert rc == 0, err
    readme = (out / "README.md").read_text()
    assert "Instructor kit" not in readme and "solutions" not in readme.lower()
    assert f"git clone {URL}" in readme and "python -m specdec_helpers check" in readme
    assert "python -m specdec_helpers handin" in readme and "REPORT_TEMPLATE.md" in readme
    rows = [line for line in readme.splitlines() if line.startswith("| `notebooks/")]
    assert [row.split("`")[1] for row in rows] == ["notebooks/01_multiply.ipynb", "notebooks/02_times.ipynb"]
    assert (
        "01 · Multiply" in rows[0] and "colab.research.google.com/github/course/specdec-students/blob/main" in rows[0]
    )
    assert notebook_sync.check(out / "notebooks", URL) == []
    assert notebook_sync.check(out / "notebooks") != []  # no longer the instructor's placeholder
    text = "\n".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert not [s for s in SECRETS if s in text]
    nb = nbformat.read(str(out / "notebooks/01_multiply.ipynb"), as_version=4)
    assert (
        nb.cells[2].source
        == 'def multiply(a, b):\n    """Multiply."""\n    # YOUR CODE HERE\n    raise NotImplementedError()'
    )
    assert nb.cells[3].source == "assert multiply(2, 3) == 6"
    assert nb.cells[4].source == "Why does it work?\n\nYOUR ANSWER HERE"
    assert nb.cells[2].metadata["nbgrader"]["grade_id"] == "multiply"  # the grader finds answers by grade_id


def test_answer_cell_without_markers_becomes_the_stub(tmp_path):
    src = instructor_kit(tmp_path / "src")
    path = src / "notebooks/01_multiply.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[2].source = "def multiply(a, b):\n    return a * b + 0  # secret-product"
    nbformat.write(nb, str(path))
    release.release(tmp_path / "out", src, URL)
    stub = nbformat.read(str(tmp_path / "out/notebooks/01_multiply.ipynb"), as_version=4).cells[2].source
    assert stub == "# YOUR CODE HERE\nraise NotImplementedError()"  # nbgrader does the same


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("out is root", "inside the instructor repository"),
        ("out inside root", "inside the instructor repository"),
        ("out contains root", "contains the instructor repository"),
        ("out is a file", "is a file"),
        ("root is no kit", "is not the course kit"),
        ("no url", "needs --repo-url"),
        ("not github", "not a GitHub repository URL"),
        ("instructor remote", "Colab would install the solutions"),
        ("instructor url given", "Colab would install the solutions"),
        ("config missing", "No such file"),
    ],
)
def test_refusals_are_one_line_exit_2_and_touch_nothing(tmp_path, capsys, case, fragment):
    src = instructor_kit(tmp_path / "repo" / "src")
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    subprocess.run(
        ["git", "-C", str(src), "remote", "add", "origin", "git@github.com:Course/Specdec-Instructor.git"], check=True
    )
    (tmp_path / "file.txt").write_text("keep me")
    args = {
        "out is root": ["--out", src, "--force"],
        "out inside root": ["--out", src / "notebooks", "--force"],
        "out contains root": ["--out", tmp_path / "repo", "--force"],
        "out is a file": ["--out", tmp_path / "file.txt"],
        "root is no kit": ["--out", tmp_path / "o", "--root", tmp_path / "repo"],
        "no url": ["--out", tmp_path / "o"],
        "not github": ["--out", tmp_path / "o", "--repo-url", "https://gitlab.com/course/students"],
        "instructor remote": ["--out", tmp_path / "o", "--repo-url", "https://github.com/course/specdec-instructor"],
        "instructor url given": ["--out", tmp_path / "o", "--repo-url", URL, "--instructor-url", URL + ".git"],
        "config missing": ["--config", tmp_path / "nope.toml"],
    }[case]
    if "--root" not in args:
        args += ["--root", src]
    if "--repo-url" not in args and case != "no url":
        args += ["--repo-url", URL]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    rc, err = run_release(capsys, *args)
    assert rc == 2 and fragment in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_config_file_and_force_keep_the_student_clone(tmp_path, capsys):
    src = instructor_kit(tmp_path / "src")
    out = tmp_path / "students"
    (out / ".git").mkdir(parents=True)
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (out / "old.txt").write_text("from the last release")
    (tmp_path / "release.toml").write_text(
        f'[release]\nout = "{out}"\nrepo_url = "{URL}"\nbranch = "spring"\nroot = "{src}"\n'
    )
    rc, err = run_release(capsys, "--config", tmp_path / "release.toml")
    assert rc == 2 and "not empty" in err
    rc, err = run_release(capsys, "--config", tmp_path / "release.toml", "--force")
    assert rc == 0, err
    assert (out / ".git/HEAD").read_text() == "ref: refs/heads/main\n" and not (out / "old.txt").exists()
    assert notebook_sync.check(out / "notebooks", URL, branch="spring") == []
    (tmp_path / "bad.toml").write_text('[release]\nrepo = "x"\n')
    rc, err = run_release(capsys, "--config", tmp_path / "bad.toml")
    assert rc == 2 and "unknown keys ['repo']" in err


@pytest.mark.slow
def test_the_real_kit_releases_without_any_solution_line(tmp_path):
    """Scans the release for every solution line of the instructor's notebooks and modules."""
    out = tmp_path / "students"
    release.release(out, release.ROOT, URL)
    secrets = solution_lines(release.ROOT)
    assert len(secrets) > 20  # the scan has something to find
    shipped = {}
    for path in out.rglob("*"):
        text = release._text(path) if path.is_file() else None
        if text:
            shipped[path.relative_to(out).as_posix()] = {line.strip() for line in text.splitlines()}
    leaks = [(rel, line) for rel, lines in shipped.items() for line in secrets & lines]
    assert not leaks, leaks[:5]
    assert not [rel for rel in release.INSTRUCTOR_ONLY if (out / rel).exists()]
    assert notebook_sync.check(out / "notebooks", URL) == []
    assert "For instructors" not in (out / "README.md").read_text()
    # Every shipped module imports without the instructor-only ones (they must not import those).
    code = (
        "import importlib, pkgutil, specdec_helpers as p\n"
        "assert p.__file__.startswith(%r), p.__file__\n"
        "for m in pkgutil.walk_packages(p.__path__, 'specdec_helpers.'):\n"
        "    importlib.import_module(m.name)\n" % str(out)
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=out,
        env={**os.environ, "PYTHONPATH": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_student_readme_walks_a_colab_student_from_badge_to_hand_in(tmp_path):
    readme = release.student_readme([("01_multiply.ipynb", "01 · Multiply")], URL)
    colab = readme.split("## On Colab, start to finish")[1].split("\n## ")[0]
    for step in ("Run all", "File > Download > Download .ipynb", "Gradescope", "Files pane", "Copy of"):
        assert step in colab, step
    assert "python -m" not in colab and "`.py` file" in colab  # notebooks only: no terminal, no .py file
    assert "local copy before you hand in" not in readme
    assert f"{URL}/blob/main/report/REPORT_TEMPLATE.md" in readme
