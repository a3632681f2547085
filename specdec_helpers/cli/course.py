"""The commands a submission goes through: check (the visible tests, the student's), handin (the zip),
grade (one submission, or a class: the instructor's). The instructor's authoring commands are `instructor`'s."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import zipfile
from pathlib import Path

from specdec_helpers.assignment.student import check as check_module
from specdec_helpers.assignment.grading import grader as grader_module
from specdec_helpers.assignment.grading import packages, privilege
from specdec_helpers.assignment.student import handin as handin_module
from specdec_helpers.assignment.student.check import run_check
from specdec_helpers.assignment.grading.grader import _pairs, load_config
from specdec_helpers.assignment.grading.grader import grade as grade_sources
from specdec_helpers.assignment.grading.scoring import EXTRA_CREDIT, LABELS, Report, Result
from specdec_helpers.assignment.student.handin import handin as write_handin
from specdec_helpers.assignment.grading.speed import measure as measure_speed
from specdec_helpers.assignment.testing.world import grading_seed
from specdec_helpers.assignment.grading.submission import (
    SubmissionError,
    graded_parts,
    notebooks_in,
    readable,
    reference_sources,
    run_nbval,
)
from specdec_helpers.cli.args import positive_int, preset_names
from specdec_helpers.cli.instructor import instructor_only, left_out
from specdec_helpers.present.notebook_help import quiet

# What `grade` needs beyond the kit (pyproject's `grade` extra): students never install it.
GRADE_EXTRA = ("pytest", "nbval", "copydetect", "psutil")
try:  # these need the grader's extra (`grade` says what to install); the student kit leaves them out
    import specdec_helpers.assignment.grading.classroom as classroom  # (a missing module: ModuleNotFoundError)
    import specdec_helpers.assignment.grading.similarity as similarity
except ModuleNotFoundError as error:
    if not left_out(error, GRADE_EXTRA):
        raise
    classroom = similarity = None


def grade(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers grade",
        description=grader_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "submission",
        help="a folder or a zip of notebooks (or one .ipynb); or a class: a folder "
        "holding one zip or folder per student",
    )
    parser.add_argument("--config", help="points/thresholds/performance settings (.toml or .json)")
    parser.add_argument("--points", action="append", metavar="ITEM=N", help=f"override points ({', '.join(LABELS)})")
    parser.add_argument(
        "--threshold",
        action="append",
        metavar="NAME=X",
        help="override thresholds (relative_speed, relative_acceptance; GPU: speedup, acceptance, "
        "bonus_speedup, bonus_acceptance)",
    )
    parser.add_argument("--preset", type=preset_names, help="pair for the performance items (default: toy)")
    parser.add_argument("--no-perf", action="store_true", help="skip the performance items")
    parser.add_argument("--no-nbval", action="store_true", help="do not run the notebooks under nbval")
    parser.add_argument(
        "--visible-only",
        action="store_true",
        help="only what the student kit holds: no hidden test, and no hidden part of a visible one (the checks of cost)",
    )
    parser.add_argument("--no-similarity", action="store_true", help="do not look for copied graded cells")
    parser.add_argument(
        "--seed",
        type=int,
        help="the hidden tests' world, to repeat a grading (its log and "
        "results.json's extra_data name the one drawn; default: "
        "$SPECDEC_GRADE_SEED, else drawn per grading)",
    )
    parser.add_argument(
        "--results",
        help="where to write Gradescope's results.json (default: results.json); "
        "means one submission: a folder is then never taken for a class",
    )
    group = parser.add_argument_group("a class at once (a folder of hand-ins; detected, or forced with --class)")
    group.add_argument(
        "--class",
        dest="is_class",
        action="store_true",
        help="SUBMISSION is a class folder even if it does not look like one (e.g. one student)",
    )
    group.add_argument(
        "--out",
        help="folder for the gradebook, histogram, similarity report and each student's "
        "results.json (default: CLASS_FOLDER-grades beside it)",
    )
    group.add_argument("--jobs", type=positive_int, help="students graded at once (default: the machine's cores)")
    group.add_argument(
        "--timeout",
        type=positive_int,
        default=1200,
        help="seconds one student's grading may take before it is stopped with 0 points (default 1200)",
    )
    args = parser.parse_args(argv)

    missing = [name for name in GRADE_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"grade: the grader's packages are not installed (missing: {', '.join(missing)}); install them with "
            "pip install -e '.[grade]' (or pip install -r requirements.txt)",
            file=sys.stderr,
        )
        return 2
    quiet()
    try:  # a bad $SPECDEC_GRADE_SEED stops here, before minutes of nbval (and before a class's every student)
        seed = grading_seed(args.seed)
    except ValueError as error:
        print(f"grade: {error}", file=sys.stderr)
        return 2
    if args.is_class and classroom is None:
        return instructor_only("grade --class")
    if args.is_class and args.results:
        parser.error("--results is for one submission; a class's results go under --out")
    # --results (as Gradescope's run_autograder passes it) means one submission, whatever the folder holds
    one_class = classroom is not None and (args.is_class or (not args.results and classroom.is_class(args.submission)))
    if args.results and not one_class and classroom is not None and classroom.is_class(args.submission):
        print(
            f"note: {args.submission} looks like a class, but --results grades it as ONE submission (as Gradescope "
            "does); to grade each student, leave out --results and give --out DIR",
            file=sys.stderr,
        )
    args.results = args.results or "results.json"
    results_path = Path(args.results)
    if not one_class:
        try:  # its folder now, not after minutes of grading (similarity.html goes beside it too)
            results_path.parent.mkdir(parents=True, exist_ok=True)
            results_path.unlink(missing_ok=True)  # a stale results.json must never pass for this grading's
        except OSError as error:
            print(
                f"grade: --results {args.results}: cannot write there ({error}); name a file in a folder you can write",
                file=sys.stderr,
            )
            return 2
    try:
        config = load_config(
            args.config, _pairs(args.points, "points"), _pairs(args.threshold, "threshold"), args.preset
        )
    except (OSError, ValueError) as error:  # a missing or invalid --config: one line, no traceback
        print(f"grade: --config {args.config}: {error}".replace("\n", " "), file=sys.stderr)
        return 2
    if one_class:
        return _grade_class(args, config)
    try:
        paths, unreadable = readable(notebooks_in(args.submission))
    except SubmissionError as error:
        report = Report([Result("load", "submission loads", 0.0, 0.0, "error", str(error))], args.submission)
        results_path.write_text(
            json.dumps({**report.gradescope(), "max_score": _max_score(config), "output": str(error)}, indent=2)
        )
        print(f"❌ {error}", file=sys.stderr)
        return 1
    print(f"grading {len(paths)} notebook(s) from {args.submission} ...", flush=True)
    sources, copies = graded_parts(paths)
    for note in copies:  # a passed 0-point line: the table below lists only what did not pass
        print(f"{note.name}: {note.feedback}")
    print(privilege.describe(), flush=True)
    print(f"hidden tests in world {seed} (grade --seed {seed} repeats them)", flush=True)
    began = time.perf_counter()  # execution_time counts nbval's minutes too
    try:
        with privilege.student() as jail:  # every process of the student's is gone on the way out, before results.json
            if not args.no_nbval:  # (the graded cells' child checks this too, but after nbval's minutes)
                packages.verify(jail)
            checks = (
                unreadable
                + copies
                + ([] if args.no_nbval else run_nbval(paths, preset=config["performance"]["preset"]))
            )
            report = grade_sources(
                sources,
                config,
                reference_sources=reference_sources(),
                measure_fn=None if args.no_perf else measure_speed,
                hidden=not args.visible_only,
                source=str(args.submission),
                checks=checks,
                seed=seed,
            )
    except packages.PackagesDiffer as error:  # the grader's setup, not the student's code: grade nothing
        print(f"grade: not graded: {error}", file=sys.stderr)
        return 2
    report.seconds = time.perf_counter() - began
    print(report.table())
    if report.measurement.get("detail"):
        print("\nperformance:", json.dumps(report.measurement["detail"], indent=1))
    data = report.gradescope()
    data["extra_data"] = {"world_seed": seed}  # extra_data: the instructor's, not shown to the student
    if similarity is not None and not args.no_similarity:
        data["extra_data"]["similarity"] = _flag_copies(sources, results_path)
    print(f"\ngraded in {report.seconds:.1f} s; wrote {args.results}")
    results_path.write_text(json.dumps(data, indent=2))
    return 0


def _max_score(config: dict) -> float:
    return sum(v for k, v in config["points"].items() if k not in EXTRA_CREDIT)


def _flag_copies(sources: dict, results_path: Path) -> list[str]:
    """One submission's cells against the reference and the kit: printed for the instructor (not in the
    results' output, which students see), kept in results.json's extra_data, shown in an HTML report."""
    matches = similarity.Detector(reference_sources()).compare({"this submission": sources}, cross=False)
    for m in matches:
        print(
            f"⚑ similarity: the {m.part} cell is {m.similarity:.0%} like {m.other_label} (a flag for the "
            "instructor; no points taken)"
        )
    if matches:
        report = similarity.write_report(matches, results_path.with_name("similarity.html"))
        print(f"⚑ side by side: {report}")
    return [f"{m.part}≈{m.other} {m.similarity:.2f}" for m in matches]


#: A class's grading worker (`specdec_helpers/cli/worker.py`): it runs `grade` for each student, forked.
WORKER = [sys.executable, "-m", "specdec_helpers.cli.worker"]


def _grade_class(args, config: dict) -> int:
    folder = Path(args.submission)
    if not folder.is_dir():
        print(f"grade --class: {folder} is not a folder of hand-ins", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else folder.resolve().with_name(folder.resolve().name + "-grades")
    try:  # made (or refused) before the first student is graded
        out.mkdir(parents=True, exist_ok=True)
        (out / "students").mkdir(exist_ok=True)
    except OSError as error:
        print(
            f"grade: --out {out}: cannot make the class's output folder there ({error}); name a folder you can write",
            file=sys.stderr,
        )
        return 2
    passed = [
        flag
        for flag, on in (
            ("--no-perf", args.no_perf),
            ("--no-nbval", args.no_nbval),
            ("--visible-only", args.visible_only),
        )
        if on
    ]
    passed += ["--config", str(Path(args.config).resolve())] if args.config else []
    passed += ["--preset", args.preset] if args.preset else []
    passed += ["--seed", str(args.seed)] if args.seed is not None else []  # else each student's own draw
    passed += [x for p in args.points or [] for x in ("--points", p)]
    passed += [x for t in args.threshold or [] for x in ("--threshold", t)]
    try:
        students = classroom.grade_class(
            folder,
            out,
            passed,
            worker=WORKER,
            jobs=args.jobs,
            timeout=args.timeout,
            reference=None if args.no_similarity else reference_sources(),
            max_score=_max_score(config),
        )
    except ValueError as error:
        print(f"grade: {error}", file=sys.stderr)
        return 2
    statuses = {}
    for s in students:
        statuses[s.status] = statuses.get(s.status, 0) + 1
    flagged = sum(bool(s.flags) for s in students)
    print(
        f"graded {len(students)} students ({', '.join(f'{n} {k}' for k, n in sorted(statuses.items()))}); "
        f"{flagged} with similarity flags"
    )
    for name in ("gradebook.csv", "histogram.png", "similarity.html", "students/"):
        if (out / name).exists():
            print(f"  {out / name}")
    return 0


def check(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers check",
        description=check_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "path", nargs="?", help="folder of your notebooks (default: notebooks/, else the current folder)"
    )
    args = parser.parse_args(argv)

    quiet()
    return 1 if run_check(args.path) else 0


def handin(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers handin",
        description=handin_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="handin.zip", help="zip to write (default: handin.zip)")
    parser.add_argument("--root", default=".", help="the kit's top folder (default: the current folder)")
    parser.add_argument("--force", action="store_true", help="write the zip even if the hand-in is not finished")
    args = parser.parse_args(argv)

    try:
        out, problems = write_handin(args.root, args.out, force=args.force)
    except handin_module.HandinError as error:
        print(
            f"❌ not ready to hand in ({len(error.problems)} problem(s)):",
            *error.problems,
            sep="\n  - ",
            file=sys.stderr,
        )
        print("Fix these (or hand in as it is with --force).", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError) as error:
        print(f"handin: {error}", file=sys.stderr)
        return 2
    if problems:
        print(
            f"⚠️  handing in anyway (--force) with {len(problems)} problem(s):", *problems, sep="\n  - ", file=sys.stderr
        )
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB, {len(names)} files):")
    for name in names:
        print(f"  {name}")
    print("Upload this zip to Gradescope.")
    return 0
