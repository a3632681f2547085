"""Grade a class at once: ``python -m specdec_helpers grade CLASS_FOLDER`` (one zip or folder per student).

Each student is graded by today's single-submission ``grade``, in its own process, forked by one of ``jobs``
grading workers (`grade_worker`; default: the machine's cores) that import the grader once: nothing the
student's code starts outlives that student's grading, and each has a wall-clock limit. A student whose grading crashes, hangs
or spawns a storm of processes loses that student's points, with the reason in the gradebook; the
run goes on. Then, in ``out``:

- ``students/NAME/results.json`` (Gradescope's format; the class run adds the similarity flags under
  ``extra_data``) and ``students/NAME/grade.log`` (what grading printed);
- ``gradebook.csv``: student, points per part, total, max, status, flags (a row as soon as each student is
  graded, with their results.json: an interrupted run keeps what it graded). The flags are near-copies and the
  failed checks that carry no points (the device check: `Student.review`), for the instructor to look at;
- ``histogram.png``: the totals;
- ``similarity.html`` / ``similarity.json``: near-copies among the graded cells (`similarity`),
  between students, with the reference and with the kit, side by side. Flags are for the instructor
  to judge: no points are taken.
"""

from __future__ import annotations

import csv
import json
import os
import queue
import re
import select
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from specdec_helpers.assignment.grading import similarity
from specdec_helpers.assignment.grading import contain
from specdec_helpers.assignment.grading.scoring import LABELS
from specdec_helpers.assignment.grading.submission import SubmissionError, graded_parts, notebooks_in, readable

SKIP = {"__MACOSX", ".ipynb_checkpoints", "__pycache__"}
GRACE_S = 60  # beyond the per-student limit, for the wrapper's own sweep, before it is killed too


@dataclass
class Student:
    name: str
    path: Path
    status: str = ""  # graded | timed out | crashed | no submission
    seconds: float = 0.0
    results: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

    def points(self) -> dict[str, float]:
        """Points per graded item (label in results.json -> item), from the grader's tests."""
        items = {label: item for item, label in LABELS.items()}
        got = dict.fromkeys(LABELS, 0.0)
        for test in self.results.get("tests", []):
            item = items.get(_label(test))
            if item:
                got[item] += test["score"]
        return {item: round(value, 2) for item, value in got.items()}

    def review(self) -> list[str]:
        """The checks without points (their verdict comes from the student's own process, so it carries no
        points) that failed in a part that otherwise works: the instructor reads the code behind them. A stub
        or a part that does not load fails them too, and is not flagged."""
        tests = self.results.get("tests", [])
        works = {_label(t) for t in tests if t.get("max_score") and t.get("status") == "passed"}
        return [
            f"check: {t['name'].split(': ', 1)[-1]}"
            for t in tests
            if not t.get("max_score") and t.get("status") == "failed" and _label(t) in works
        ]


def _label(test: dict) -> str:
    """The graded item's label a results.json test is named after (``"2 drafting: ..."`` -> ``"2 drafting"``)."""
    return test["name"].split(": ", 1)[0]


def students_in(folder) -> list[Student]:
    """One student per zip or sub-folder of ``folder``, named after it (sorted; hidden entries skipped)."""
    folder = Path(folder)
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name in SKIP:
            continue
        if entry.is_dir() or entry.suffix.lower() == ".zip":
            found.append(Student(re.sub(r"[^\w.@+-]", "_", entry.stem if entry.is_file() else entry.name), entry))
    names = [s.name for s in found]
    for student in found:  # "ana/" and "ana.zip" both there: keep both, told apart
        if names.count(student.name) > 1:
            student.name += "_zip" if student.path.is_file() else ""
    return found


def is_class(folder) -> bool:
    """A folder of hand-ins rather than one hand-in: no notebook at its top, and at least one zip or two
    sub-folders that hold notebooks (one student's unzipped hand-in has one ``notebooks/`` folder)."""
    folder = Path(folder)
    if not folder.is_dir() or any(folder.glob("*.ipynb")):
        return False
    entries = students_in(folder)
    zips = [s for s in entries if s.path.is_file()]
    with_notebooks = [s for s in entries if s.path.is_dir() and any(s.path.rglob("*.ipynb"))]
    return bool(zips) or len(with_notebooks) >= 2


STUCK = -9  # the worker did not answer within the limit and its grace: stopped
LOST = -2  # the worker died or answered nonsense before the student's grading ended


class Workers:
    """The grading workers (`grade_worker`), started on first use: at most one per thread grading at a time."""

    def __init__(self, command: list[str]):
        self.command = command  # the worker's command line (cli's: it runs ``grade``)
        self.idle: queue.SimpleQueue = queue.SimpleQueue()
        self.started: list[subprocess.Popen] = []
        self.closed = False

    def take(self) -> subprocess.Popen:
        while True:
            try:
                worker = self.idle.get_nowait()
            except queue.Empty:
                break
            if worker.poll() is None:  # one that died while idle (out of memory) is not used
                return worker
        if self.closed:
            raise RuntimeError("the class run was stopped")
        worker = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        self.started.append(worker)
        return worker

    def ask(self, job: dict, wait: float) -> int:
        """Send one student to a worker: grade's exit status, `STUCK` or `LOST`."""
        worker = self.take()
        line = ""
        try:
            worker.stdin.write(json.dumps(job) + "\n")
            worker.stdin.flush()
            ready, _, _ = select.select([worker.stdout], [], [], wait)
            line = worker.stdout.readline() if ready else None
            status = int(json.loads(line)["status"])
        except (OSError, ValueError, KeyError, TypeError):  # dead, stuck, or out of step: not used again
            self.stop(worker)
            return STUCK if line is None else LOST
        self.idle.put(worker)
        return status

    @staticmethod
    def stop(worker: subprocess.Popen) -> None:
        """SIGTERM first (the worker sweeps the grading it runs), then SIGKILL to its process group."""
        if worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(worker.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        worker.wait()
        for pipe in (worker.stdin, worker.stdout):
            try:
                pipe.close()
            except OSError:
                pass

    def close(self, interrupted: bool = False) -> None:
        """Idle workers exit when their input ends; busy ones (the run was interrupted) are stopped."""
        self.closed = True
        for worker in list(self.started):
            if interrupted:
                self.stop(worker)
                continue
            try:
                worker.stdin.close()
            except OSError:
                pass
            try:  # an idle worker's exit (its graders' temporary folders removed) took over 5 s at CI's load
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.stop(worker)


def grade_one(
    student: Student, out: Path, grade_args: list[str], timeout: float, max_score: float, workers: Workers
) -> Student:
    """Grade one student on a worker; read its results.json, or write one that says why not."""
    folder = out / "students" / student.name
    folder.mkdir(parents=True, exist_ok=True)
    results = folder / "results.json"
    results.unlink(missing_ok=True)
    log = folder / "grade.log"
    log.write_bytes(b"")
    job = {
        "argv": [str(student.path), "--results", str(results), "--no-similarity", *grade_args],
        "log": str(log),
        "timeout": timeout,
    }
    start = time.perf_counter()
    status = workers.ask(job, timeout + GRACE_S)
    student.seconds = time.perf_counter() - start
    if status in (0, 1) and results.is_file():
        student.results = json.loads(results.read_text())
        student.status = "graded" if status == 0 else "no submission"
        return student
    student.status = "timed out" if status in (contain.TIMED_OUT, STUCK) else "crashed"
    why = (
        f"grading did not finish within {timeout:g} s (your code hung or started processes that did "
        "not end); everything it started was stopped"
        if student.status == "timed out"
        else "the grading worker stopped before this grading ended (not your code's doing: ask the instructor to "
        "grade again)"
        if status == LOST
        else f"grading crashed (exit status {status}); the instructor has the log"
    )
    student.results = {
        "score": 0.0,
        "max_score": max_score,
        "execution_time": round(student.seconds, 1),
        "output": why,
        "tests": [],
    }
    results.write_text(json.dumps(student.results, indent=2))
    return student


def graded_sources(student: Student) -> dict[str, str]:
    """The student's graded cells, read here (no code runs): ``{}`` when nothing can be read."""
    try:
        paths, _ = readable(notebooks_in(student.path))
        return graded_parts(paths)[0]
    except (SubmissionError, OSError, ValueError):
        return {}


def grade_class(
    folder,
    out,
    grade_args: list[str],
    *,
    worker: list[str],
    jobs: int | None = None,
    timeout: float = 1200,
    reference: dict | None = None,
    max_score: float = 0.0,
    progress: bool = True,
) -> list[Student]:
    """Grade every student of ``folder`` into ``out`` with workers started as ``worker`` (a command line: the
    command-line layer's, which runs ``grade``); returns the students with their results and flags."""
    from tqdm.auto import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    students = students_in(folder)
    if not students:
        raise ValueError(f"{folder}: no student hand-ins (a zip or a folder per student) found")
    jobs = jobs or os.cpu_count() or 1
    workers = Workers(worker)
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        with tqdm(total=len(students), desc=f"grading ({jobs} at a time)", unit="student", disable=not progress) as bar:
            futures = [pool.submit(grade_one, s, out, grade_args, timeout, max_score, workers) for s in students]
            for future in as_completed(futures):
                student = future.result()  # its results.json is written; the gradebook gets its row now
                write_gradebook([s for s in students if s.status], out / "gradebook.csv")
                bar.set_postfix_str(f"{student.name}: {student.status}", refresh=False)
                bar.update()
    except BaseException:  # Ctrl-C: no further student starts, the ones being graded are stopped and swept
        pool.shutdown(wait=False, cancel_futures=True)
        workers.close(interrupted=True)
        raise
    finally:
        pool.shutdown(wait=True)
        workers.close()
    write_histogram(students, out / "histogram.png")
    if reference is not None:
        flag_copies(students, reference, out)
        write_gradebook(students, out / "gradebook.csv")  # again, with the flags
    return students


def flag_copies(students: list[Student], reference: dict, out: Path) -> list:
    """Compare every student's cells with the reference, the kit and each other; report and note the flags."""
    detector = similarity.Detector(reference)
    matches = detector.compare({s.name: graded_sources(s) for s in students})
    by_name = {s.name: s for s in students}
    for m in matches:
        by_name[m.student].flags.append(f"{m.part}≈{m.other} {m.similarity:.2f}")
        if m.kind == "student":
            by_name[m.other].flags.append(f"{m.part}≈{m.student} {m.similarity:.2f}")
    for student in students:
        path = out / "students" / student.name / "results.json"
        student.results.setdefault("extra_data", {})["similarity"] = student.flags
        path.write_text(json.dumps(student.results, indent=2))
    (out / "similarity.json").write_text(json.dumps([m.brief() for m in matches], indent=2))
    similarity.write_report(
        matches,
        out / "similarity.html",
        title=f"Similar graded cells: {len(students)} students",
        note=f"{len(matches)} flagged pair(s)",
    )
    return matches


def write_gradebook(students: list[Student], path: Path) -> None:
    items = list(LABELS)
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["student", *items, "total", "max_score", "status", "seconds", "flags"])
        for s in students:
            points = s.points()
            writer.writerow(
                [
                    s.name,
                    *(points[i] for i in items),
                    round(float(s.results.get("score", 0.0)), 2),
                    s.results.get("max_score", ""),
                    s.status,
                    round(s.seconds),
                    "; ".join(s.review() + s.flags),
                ]
            )


def write_histogram(students: list[Student], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    totals = [float(s.results.get("score", 0.0)) for s in students]
    best = max([float(s.results.get("max_score") or 0) for s in students] + totals + [1.0])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(totals, bins=min(20, max(5, len(set(totals)))), range=(0, best), color="#4c72b0", edgecolor="white")
    ax.set_xlabel(f"total points (maximum {best:g}; extra credit on top)")
    ax.set_ylabel("students")
    ax.set_title(f"{len(students)} students")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
