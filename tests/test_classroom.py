"""A class graded at once: ``grade CLASS_FOLDER`` on 12 synthetic hand-ins (`classroom_handins.build_class` at
`SUITE_CLASS`): an independent author and a classmate who copied a part of it and pasted the kit's code into others
(the reference's grading and whole and disguised copies are tests/test_course.py's and tests/test_similarity.py's),
released stubs (a folder, a zip, a Colab copy), a crasher that prints a fake verdict first, a bounded fork storm that
hangs, cheats (a forged results.json that kills the grader, calls of the kit) and broken uploads. The gradebook
must be exact, the flagged pairs exactly the copies, and nothing a student started may survive the run. The full class of 30 (more copies and stubs of the same kinds) is graded by
benchmarks/class_grading.py, which prints its time (benchmarks/RESULTS.md).

The class run uses --no-nbval and no points for speed (config below): performance is measured per
student by timing the reference beside the student, which this test does not need to show. Hangs are
left to the per-student limit (the config's per-test limit is an hour).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import classroom_handins as handins
from leftovers import leftovers
from specdec_helpers.assignment.grading import classroom, contain
from specdec_helpers.cli import course as cli_course

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "test_timeout_s = 3600\n[points]\nspeedup = 0\nacceptance = 0\nbonus = 0\n"
# Hangs wait this long. A legitimate student took 17 s (median) to 36 s at load 1 on the 2-core machine with
# grading workers (before them, up to 97 s at load 12): room for a busy CI worker beside this one.
PER_STUDENT_S = 180


def command(*args, timeout=1800, env=None, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "specdec_helpers", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kwargs,
    )


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("class")
    expected = handins.build_class(tmp / "class", **handins.SUITE_CLASS)
    (tmp / "class.toml").write_text(CONFIG)
    start = time.perf_counter()
    # 3 at a time (`SUITE_JOBS`): the fork storm, graded first, holds a worker while sleeping, and two grade everyone
    # else. Each worker imports the grader (about 4.5 CPU s), and CI's two cores are busy anyway: more workers cost CI
    # more CPU than they save wall time. `left`: what the gradings left in the run's TMPDIR (the storm is killed at its
    # limit, past its own clean-up)
    with leftovers() as (tmpdir, left):
        done = command(
            "grade",
            str(tmp / "class"),
            "--no-nbval",
            "--no-perf",
            "--config",
            str(tmp / "class.toml"),
            "--timeout",
            str(PER_STUDENT_S),
            "--jobs",
            str(handins.SUITE_JOBS),
            "--out",
            str(tmp / "out"),
            env={"TMPDIR": str(tmpdir)},
        )
    seconds = time.perf_counter() - start
    print(f"graded {len(expected)} students in {seconds:.0f} s (load {os.getloadavg()[0]:.1f})")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(tmp / "out" / "gradebook.csv") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    return expected, rows, tmp / "out", done, left


@pytest.mark.slow
def test_each_student_of_the_class_is_in_the_gradebook(graded):
    expected, rows, out, done, _ = graded
    assert set(rows) == set(expected)
    assert f"graded {len(expected)} students" in done.stdout
    assert f"{len(expected)}/{len(expected)}" in done.stderr  # tqdm's progress bar


@pytest.mark.slow
def test_the_gradebook_is_exact(graded):
    expected, rows, out, *_ = graded
    wrong = handins.wrong_rows(expected, rows)
    assert not wrong, wrong
    assert {float(row["max_score"]) for row in rows.values()} == {25.0}


@pytest.mark.slow
def test_the_flagged_pairs_are_exactly_the_copies(graded):
    expected, rows, out, *_ = graded
    got = handins.flags_found(expected, json.loads((out / "similarity.json").read_text()))
    assert got == {name: want["flags"] for name, want in expected.items()}
    assert {name for name, row in rows.items() if row["flags"]} == {name for name, w in expected.items() if w["flags"]}
    html = (out / "similarity.html").read_text()
    assert html.count("<section") == len(json.loads((out / "similarity.json").read_text()))


@pytest.mark.slow
def test_each_student_has_the_graders_results_json(graded):
    expected, rows, out, *_ = graded
    for name in expected:
        data = json.loads((out / "students" / name / "results.json").read_text())
        assert round(data["score"], 2) == float(rows[name]["total"]), name  # the gradebook shows 2 decimals
        assert "similarity" in data["extra_data"]
    forged = json.loads((out / "students" / "cheat_forges_results" / "results.json").read_text())
    assert forged["score"] == 0 and forged["max_score"] == 25  # the grader's (or the run's) file, not the forgery
    late = json.loads((out / "students" / "0_fork_storm" / "results.json").read_text())
    assert f"within {PER_STUDENT_S} s" in late["output"]
    crasher = json.loads((out / "students" / "crasher_segfault" / "results.json").read_text())
    fake = "total 45.0 / 45"  # its fake verdict, the child's last output before it died, shown and not believed
    assert crasher["score"] == 0 and any(fake in t["output"] for t in crasher["tests"]), crasher["tests"][:2]


@pytest.mark.slow
def test_nothing_a_student_started_outlives_the_run(graded):
    _, _, out, *_ = graded
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if handins.STORM_MARK in (p.info["cmdline"] or [])]
    assert left == []
    log = (out / "students" / "0_fork_storm" / "grade.log").read_text()
    killed = int(log.split("contain: killed ")[1].split()[0])
    assert killed >= 200, log[-500:]


@pytest.mark.slow
def test_no_grading_leaves_files_behind(graded):
    """Each forked grading's views and scratch live in a folder of its own, deleted after its sweep: the fork
    storm, killed at its limit, leaves nothing either (each view is ~18 MB, a class has hundreds)."""
    *_, left = graded
    assert left == [], left


@pytest.mark.slow
def test_the_histogram_is_a_png(graded):
    _, _, out, *_ = graded
    assert (out / "histogram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_one_worker_grades_students_one_after_another(tmp_path):
    """A worker imports the grader once and forks a grading per student (`grade_worker`); it ends with its input."""
    from specdec_helpers.cli.course import WORKER

    workers = classroom.Workers(WORKER)
    try:
        for name in ("ana", "ben"):
            folder = handins.write_handin(tmp_path / name, None, notebooks=handins.GRADED_NOTEBOOKS[:1])
            student = classroom.grade_one(
                classroom.Student(name, folder), tmp_path / "out", ["--no-nbval", "--no-perf"], 300, 25.0, workers
            )
            log = (tmp_path / "out" / "students" / name / "grade.log").read_text()
            assert student.status == "graded" and "graded in" in log, log[-2000:]
        assert len(workers.started) == 1
    finally:
        workers.close()
    assert [w.returncode for w in workers.started] == [0]


# --------------------------------------------------------------------------- fast: no grading


def test_a_class_folder_is_told_from_one_hand_in(tmp_path):
    one = handins.write_handin(tmp_path / "one" / "notebooks", None).parent
    (one / "report").mkdir()
    (one / "report" / "REPORT.md").write_text("mine\n")
    assert not classroom.is_class(one)  # an unzipped hand-in: notebooks/ and report/
    assert not classroom.is_class(one / "notebooks")  # notebooks at the top
    two = tmp_path / "two"
    for name in ("ana", "ben"):
        handins.write_handin(two / name, None, notebooks=handins.GRADED_NOTEBOOKS[:1])
    assert classroom.is_class(two)
    zipped = tmp_path / "zipped"
    handins.write_handin(zipped / "ana", None, zipped=True, notebooks=handins.GRADED_NOTEBOOKS[:1])
    assert classroom.is_class(zipped)  # a class of one zip
    (two / ".DS_Store").write_text("")
    (two / "__MACOSX").mkdir()
    assert [s.name for s in classroom.students_in(two)] == ["ana", "ben"]


def test_a_class_folder_with_no_hand_in_is_refused(tmp_path, capsys):
    from specdec_helpers import cli

    (tmp_path / "empty").mkdir()
    assert cli.grade([str(tmp_path / "empty"), "--class", "--no-nbval", "--no-perf"]) == 2
    assert "no student hand-ins" in capsys.readouterr().err


def _marked(mark: str) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"]) if mark in (p.info["cmdline"] or [])]


def _contained(gradings: list[tuple[float, str]], folder: Path, mark: str) -> list[dict]:
    """Gradings as a class's worker runs them (`grade_worker.grade`: forked, supervised, swept), one after another
    in one process of its own that is a subreaper like the worker (and imports the grader once, as it does); each
    is ``(limit in seconds, Python run in the fork)``. Per grading: its status, its log, and the processes with
    ``mark`` in their command line left right after it."""
    script = (
        "import json, psutil\nfrom specdec_helpers.assignment.grading import contain, grade_worker\n"
        "contain.become_subreaper()\n"
        f"for i, (seconds, body) in enumerate({gradings!r}):\n"
        "    def run(argv, body=body):\n        exec(body)\n        return 0\n"
        f"    log = {str(folder)!r} + f'/grade-{{i}}.log'\n"
        "    status = grade_worker.grade(run, [], log, seconds)\n"
        f"    left = [p.pid for p in psutil.process_iter(['cmdline']) if {mark!r} in (p.info['cmdline'] or [])]\n"
        "    print(json.dumps({'status': status, 'log': open(log).read(), 'left': left}), flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_contain_sweeps_escaped_processes_and_stops_at_its_limit(tmp_path):
    mark = f"{3000 + os.getpid() % 500}.5"
    spawner = (
        "import os, subprocess\n"
        f"for _ in range(20): subprocess.Popen(['sleep', '{mark}'], start_new_session=True)\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execvp('sleep', ['sleep', '{mark}'])\n    os._exit(0)\n"
    )
    done, late, killed = _contained(
        [
            (60, spawner),
            (1, f"import time\ntime.sleep({mark})"),
            (60, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
        ],
        tmp_path,
        mark,
    )
    assert done["status"] == 0 and int(done["log"].split("killed ")[1].split()[0]) >= 21, done["log"]
    assert done["left"] == []
    assert late["status"] == contain.TIMED_OUT and late["left"] == [] and "still running after 1 s" in late["log"]
    assert killed["status"] == 128 + 9  # the grading was killed by a signal: a crash, not a time-out
    assert _marked(mark) == []


def test_a_worker_that_dies_hangs_or_talks_nonsense_is_told_from_a_student_and_replaced():
    """`classroom.Workers` with stand-in workers (no grading): a dead or garbled worker is LOST (the gradebook
    says the worker stopped, not the student's code), a silent one STUCK (timed out), a good one reused."""

    def fake(body: str) -> list[str]:
        return [sys.executable, "-c", "import sys, json, time\n" + body]

    answers = classroom.Workers(fake("for line in sys.stdin: print(json.dumps({'status': 1}), flush=True)"))
    try:
        assert [answers.ask({"argv": []}, 30) for _ in range(3)] == [1, 1, 1]
        assert len(answers.started) == 1  # one worker, three students
    finally:
        answers.close()
    assert answers.started[0].returncode == 0  # it ended with its input
    for body, expected in [
        ("sys.exit(3)", classroom.LOST),
        ("sys.stdin.readline(); print('hello', flush=True)", classroom.LOST),
        ("sys.stdin.readline(); time.sleep(60)", classroom.STUCK),
    ]:
        workers = classroom.Workers(fake(body))
        try:
            assert workers.ask({"argv": []}, 2) == expected, body
            assert workers.started[0].poll() is not None  # stopped, not reused
            assert workers.ask({"argv": []}, 2) == expected and len(workers.started) == 2
        finally:
            workers.close()


def test_results_means_one_submission_whatever_the_folder_holds(tmp_path, capsys):
    """Gradescope's run_autograder passes --results: two zips uploaded by one student are not a class."""
    from specdec_helpers import cli

    folder = tmp_path / "submission"
    for name in ("a", "b"):
        handins.write_handin(folder / name, None, zipped=True, notebooks=handins.GRADED_NOTEBOOKS[:1])
    assert classroom.is_class(folder)
    results = tmp_path / "results.json"
    assert cli.grade([str(folder), "--no-nbval", "--no-perf", "--no-similarity", "--results", str(results)]) in (0, 1)
    assert json.loads(results.read_text())["tests"] and not (tmp_path / "submission-grades").exists()
    with pytest.raises(SystemExit):
        cli.grade([str(folder), "--class", "--results", str(results)])


def test_the_per_student_limit_is_the_commands_and_defaults_to_twenty_minutes(tmp_path, monkeypatch):
    """The class test above stops its hangs at --timeout 180; a class graded without --timeout gets the
    production default, 1200 s: room for a legitimate student on a loaded machine (97 s at load 12)."""
    from specdec_helpers import cli

    for name in ("ana", "ben"):
        handins.write_handin(tmp_path / "class" / name, None, notebooks=handins.GRADED_NOTEBOOKS[:1])
    limits = []
    monkeypatch.setattr(classroom, "grade_class", lambda *a, timeout, **k: limits.append(timeout) or [])
    for extra in ([], ["--timeout", "7"]):
        assert (
            cli.grade([str(tmp_path / "class"), "--no-nbval", "--no-perf", "--out", str(tmp_path / "out"), *extra]) == 0
        )
    assert limits == [1200, 7]
    with pytest.raises(SystemExit):  # a limit must be a positive number of seconds
        cli.grade([str(tmp_path / "class"), "--timeout", "0"])


def test_missing_output_folders_are_made_before_grading_and_unusable_ones_refused(tmp_path, monkeypatch, capsys):
    """A class run once graded 4 hand-ins for 252 s, then crashed writing similarity.html into a --results folder
    that did not exist: no gradebook. Output folders are made (or refused) before the first student."""
    from specdec_helpers import cli

    folder = tmp_path / "submission"
    for name in ("a", "b"):  # looks like a class; --results grades it as one submission (as Gradescope does)
        handins.write_handin(folder / name, None, zipped=True, notebooks=handins.GRADED_NOTEBOOKS[:1])
    results = tmp_path / "not" / "made" / "results.json"
    assert cli.grade([str(folder), "--no-nbval", "--no-perf", "--results", str(results)]) in (0, 1)
    assert json.loads(results.read_text())["tests"]
    assert "looks like a class, but --results grades it as ONE submission" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("")
    graded = []
    monkeypatch.setattr(cli_course, "grade_sources", lambda *a, **k: graded.append(1))
    assert cli.grade([str(folder), "--no-nbval", "--no-perf", "--results", str(tmp_path / "a-file" / "r.json")]) == 2
    assert "cannot write there" in capsys.readouterr().err and graded == []
    # a class: --out made before grade_class starts; one that cannot be made stops before it
    seen = []
    monkeypatch.setattr(classroom, "grade_class", lambda f, out, *a, **k: seen.append(Path(out).is_dir()) or [])
    assert cli.grade([str(folder), "--class", "--no-nbval", "--no-perf", "--out", str(tmp_path / "x" / "y")]) == 0
    assert seen == [True] and (tmp_path / "x" / "y" / "students").is_dir()
    assert cli.grade([str(folder), "--class", "--no-nbval", "--out", str(tmp_path / "a-file" / "out")]) == 2
    assert "cannot make the class's output folder" in capsys.readouterr().err and seen == [True]
