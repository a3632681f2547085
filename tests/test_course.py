"""END TO END (slow): the instructor's whole path with the real kit, in a temporary folder.

release with a URL -> the student repository (README, badges, no solutions) -> notebooks filled with
the instructor's solutions (graded cells copied back by grade_id) -> handin, run with the student
repository's own code -> the autograder bundle grades the zip in a Gradescope-like root. The same
with the stubs: handin refuses it, and the autograder says "not implemented".

Filling stands in for a student's Run all: each cell gets the instructor's saved outputs (the
notebooks are saved executed, without errors: tests/test_notebooks.py), so the notebooks are not
re-run here (minutes of CPU on the toy pair).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from course_notebooks import solution_lines
from leftovers import leftovers
from specdec_helpers import cli
from specdec_helpers.assignment.authoring import autograder, notebook_sync, release

from specdec_helpers.assignment.student import handin

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
URL = "https://github.com/course/specdec-students"


def key(cell) -> str:
    """How a cell is matched between instructor and student copies: its grade_id, else its cell id."""
    return cell.metadata.get("nbgrader", {}).get("grade_id") or cell.get("id", "")


def fill(student: Path, instructor: Path) -> int:
    """Put the instructor's answers back into the student's notebooks, as if run; returns answers filled."""
    filled = 0
    for path in sorted(student.glob("notebooks/[0-9]*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        source = {key(c): c for c in nbformat.read(str(instructor / "notebooks" / path.name), as_version=4).cells}
        for cell in nb.cells:
            theirs = source[key(cell)]
            if cell.source != theirs.source:  # an answer: the release stubbed it
                cell.source = theirs.source
                filled += 1
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = theirs.outputs, theirs.execution_count or 1
        nbformat.write(nb, str(path))
    return filled


def write_report(root: Path) -> None:
    template = root / "report" / "REPORT_TEMPLATE.md"
    text = template.read_text()
    template.write_text(
        "\n".join("My own words about this part." if line.startswith("TODO") else line for line in text.splitlines())
        + "\n"
    )


def student_command(root: Path, *args) -> subprocess.CompletedProcess:
    """A command run in the student repository with its own copy of the kit (as on the student's machine)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-m", "specdec_helpers", *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )


def grade_on_gradescope(bundle: Path, handin_zip: Path, tmp: Path, grade_args: str = "") -> tuple[dict, str]:
    """run_autograder on ``handin_zip`` in a Gradescope-like root under ``tmp``: its results.json and what it printed
    (the instructor's log on Gradescope)."""
    root = tmp / "autograder"
    with zipfile.ZipFile(bundle.with_name(bundle.name + ".zip")) as archive:
        archive.extractall(root / "source")
        for info in archive.infolist():
            os.chmod(root / "source" / info.filename, info.external_attr >> 16 or 0o644)
    with zipfile.ZipFile(handin_zip) as archive:  # Gradescope unpacks the upload into submission/
        archive.extractall(root / "submission")
    (root / "results").mkdir()
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHON": sys.executable, "SPECDEC_GRADE_ARGS": grade_args}
    env.pop("SPECDEC_CACHE_DIR", None)
    with leftovers() as (tmpdir, left):
        done = subprocess.run(
            [str(root / "source" / "run_autograder")],
            env={**env, "TMPDIR": str(tmpdir)},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert left == [], left  # nbval's work folder, the test world's models, the kit's views, the student's scratch
    data = json.loads((root / "results" / "results.json").read_text())
    assert "autograder failed" not in data.get("output", ""), data  # written by the grader, not the fallback
    return data, done.stdout


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("course")
    students = tmp / "students"
    release.release(students, ROOT, URL)
    autograder.bundle(tmp / "autograder", ROOT)
    return tmp, students, tmp / "autograder"


@pytest.fixture(scope="module")
def solved_run(course):
    """The solved hand-in graded in world 7 (the suite's other gradings are in world 0, conftest.py): ``grade --seed``
    reaches the hidden tests through the bundle, and the reference passes them in a world of its own here."""
    tmp, students, bundle = course
    work = tmp / "solved"
    shutil.copytree(students, work)
    assert fill(work, ROOT) > 0
    write_report(work)
    done = student_command(work, "handin")
    assert done.returncode == 0, done.stdout + done.stderr
    return grade_on_gradescope(bundle, work / "handin.zip", tmp / "gs-solved", "--seed 7")


@pytest.fixture(scope="module")
def solved(solved_run):
    return solved_run[0]


#: ``handin`` then ``handin --force`` in one Python (one import of the student's kit, not two): each one's exit status,
#: its stderr and whether handin.zip was there after it.
REFUSED_THEN_FORCED = """\
import contextlib, io, json, os
from specdec_helpers.cli import main
runs = []
for argv in (["handin"], ["handin", "--force"]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(argv)
    runs.append((status, err.getvalue(), os.path.exists("handin.zip")))
print(json.dumps(runs))
"""


@pytest.fixture(scope="module")
def stubs(course):
    tmp, students, bundle = course
    work = tmp / "stubs"
    shutil.copytree(students, work)
    done = subprocess.run(
        [sys.executable, "-c", REFUSED_THEN_FORCED],
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(work)},  # the student repository's own kit, as student_command runs it
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    refused, forced = (dict(zip(("status", "stderr", "zip"), run)) for run in json.loads(done.stdout.splitlines()[-1]))
    assert refused["status"] == 1 and "not ready to hand in" in refused["stderr"], refused["stderr"]
    assert not refused["zip"]
    assert forced["status"] == 0 and forced["zip"], forced["stderr"]
    # no nbval: the stubs' check cells are tested in test_student_edition; the solved hand-in runs nbval here
    return refused["stderr"], grade_on_gradescope(bundle, work / "handin.zip", tmp / "gs-stubs", "--no-nbval")[0]


def test_student_repository(course):
    tmp, students, bundle = course
    readme = (students / "README.md").read_text()
    names = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
    assert [n for n in names if f"notebooks/{n}" in readme] == names
    assert readme.index(names[0]) < readme.index(names[-1]) and "handin" in readme and "check" in readme
    assert notebook_sync.check(students / "notebooks", URL) == []
    secrets = solution_lines(ROOT)
    shipped = "\n".join(release._text(p) or "" for p in students.rglob("*") if p.is_file())
    shipped_lines = {line.strip() for line in shipped.splitlines()}
    assert not secrets & shipped_lines


def test_stubs_are_refused_per_notebook(course, stubs):
    tmp, students, bundle = course
    refused, _ = stubs
    problems = [line for line in refused.splitlines() if line.startswith("  - ")]
    assert any("TODO paragraph" in p for p in problems)
    unfinished = {p.split(":")[0].removeprefix("  - ") for p in problems if "still hold the stub" in p}
    expected = {
        f"notebooks/{p.name}"
        for p in (students / "notebooks").glob("[0-9]*.ipynb")
        if "raise NotImplementedError()" in p.read_text()
    }
    assert expected and unfinished == expected


def test_run_autograder_writes_what_grade_writes(course, stubs):
    """The bundle's run_autograder gives the verdict `grade` gives here: the stubs' upload, graded again directly
    with the bundle's points.toml and the same arguments, gets the same results.json (moved here from
    tests/test_autograder.py, which graded an empty notebook twice for it)."""
    tmp, students, bundle = course
    _, data = stubs
    direct, upload = tmp / "direct.json", tmp / "gs-stubs" / "autograder" / "submission"  # as run_autograder saw it
    cli.grade([str(upload), "--config", str(bundle / "points.toml"), "--no-nbval", "--results", str(direct)])
    strip = lambda d: {k: v for k, v in d.items() if k != "execution_time"}
    assert strip(data) == strip(json.loads(direct.read_text()))


def test_both_hand_ins_are_graded_by_the_grader(solved, stubs):
    for data in (solved, stubs[1]):
        assert {"score", "tests"} <= set(data) and data["tests"]


def test_the_solved_hand_in_is_flagged_for_the_instructor_and_names_its_world(solved_run):
    """One submission graded alone (Gradescope's --results) is held against the reference solution: its cells, the
    instructor's own, are flagged in extra_data, in the log and in similarity.html beside results.json, never in the
    output the student reads; the log and extra_data name the world of the hidden tests, so that a regrade repeats
    it (moved here from tests/test_classroom.py, which graded a renamed copy of the reference alone for it)."""
    data, log = solved_run
    assert data["extra_data"]["world_seed"] == 7 and "hidden tests in world 7 (grade --seed 7 repeats them)" in log
    flags = sorted(flag.split()[0] for flag in data["extra_data"]["similarity"])
    assert flags == ["decode≈reference", "draft≈reference", "verify≈reference"], flags
    assert "similarity" not in data["output"] and "⚑ similarity" in log
    report = Path(log.split("⚑ side by side: ")[1].split()[0])
    assert report.name == "similarity.html" and report.parent.name == "results" and report.is_file()


def test_solved_hand_in_passes_handin_checks(course):
    tmp, students, bundle = course
    assert handin.problems(tmp / "solved") == []


@pytest.mark.sandbox(bwrap=True)
def test_the_solved_hand_in_graded_as_root_passes_every_check_line(solved):
    """Gradescope grades as root, with the notebooks' kernels in the student's sandbox on the kit's view, which
    holds of grading/ and testing/ only what the kernels import (`isolation.needs`). It once lacked two modules:
    the set-up cell's import failed and every check line read "NameError: name 'nb' is not defined", worth 0
    points, so only this status check notices."""
    checks = [t for t in solved["tests"] if t["name"].startswith("checks")]
    assert len(checks) >= 4 and all(t["status"] == "passed" for t in checks), [
        t for t in checks if t["status"] != "passed"
    ]


def test_every_cell_of_every_notebook_ran_and_passed_in_the_solved_grading(solved):
    """The suite's only fp32 nbval run of the notebooks (the README's command collects no notebooks/ of its own): the
    grader's line for each notebook's other cells, passed with nothing skipped, counting the repository's cells."""
    lines = {t["name"].split(": ")[1]: t for t in solved["tests"] if t["name"].endswith("other cells run")}
    repo = {p.name: nbformat.read(str(p), as_version=4) for p in sorted((ROOT / "notebooks").glob("0*.ipynb"))}
    assert sorted(lines) == sorted(repo), sorted(lines)
    for name, nb in repo.items():
        code = [c for c in nb.cells if c.cell_type == "code"]
        others = sum(1 for c in code if not c.metadata.get("nbgrader", {}).get("grade_id", "").endswith("_check"))
        assert lines[name]["name"].endswith(f"its {others} other cells run"), (name, lines[name]["name"])
        assert lines[name]["status"] == "passed" and "skipped" not in lines[name]["output"], lines[name]
    checks = [t for t in solved["tests"] if t["name"].startswith("checks") and t not in lines.values()]
    assert checks and all(t["status"] == "passed" for t in checks), [t for t in checks if t["status"] != "passed"]


def test_full_marks_for_the_solutions_and_not_implemented_for_the_stubs(solved, stubs):
    assert solved["score"] == solved["max_score"] == 45, solved["output"]
    # the notebooks ran under nbval: one line per check cell, no points (test_assignment's grading skips it)
    checks = [t for t in solved["tests"] if t["name"].startswith("checks")]
    assert checks and all(t["score"] == t["max_score"] == 0 for t in checks), checks
    data = stubs[1]
    scored = [t for t in data["tests"] if t["max_score"] > 0]
    performance = [t for t in scored if t["name"].split(":")[0].startswith(("speedup", "acceptance", "bonus"))]
    parts = [t for t in scored if t not in performance]
    assert data["score"] == 0 and parts and performance
    assert all("not implemented" in t["output"].lower() for t in parts), parts  # each part says so
    assert all("decode loop first" in t["output"] for t in performance), performance  # and why nothing was timed
