"""The instructor's commands: release (the student repository), autograder (the Gradescope bundle), mistakes
(the known-mistake catalog, graded). The student kit leaves their modules out (release.INSTRUCTOR_ONLY); each
command says so there, and so does `grade --class`."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from specdec_helpers.assignment.grading.grader import load_config
from specdec_helpers.assignment.parts.cells import read_notebook
from specdec_helpers.present.notebook_help import REPO_BRANCH


def left_out(error: ModuleNotFoundError, also=()) -> bool:
    """Whether ``error`` is a module the student kit leaves out (or one of ``also``), not a broken install."""
    return (error.name or "").startswith("specdec_helpers.") or error.name in also


try:  # instructor-only modules: the student kit leaves them out (release.INSTRUCTOR_ONLY)
    import specdec_helpers.assignment.authoring.autograder as autograder_module
    import specdec_helpers.assignment.authoring.notebook_sync as notebook_sync
    import specdec_helpers.assignment.authoring.release as release_module
    from specdec_helpers.assignment.authoring.mutations import grade_all
except ModuleNotFoundError as error:
    if not left_out(error):
        raise  # a missing dependency, not the student kit
    autograder_module = notebook_sync = release_module = grade_all = None
ROOT = Path(__file__).resolve().parents[2]


def instructor_only(command: str) -> int:
    print(f"{command}: an instructor command; the student kit does not include it", file=sys.stderr)
    return 2


def release(argv=None) -> int:
    if release_module is None:
        return instructor_only("release")
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers release",
        description=release_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", help="folder for the student repository (empty, absent, or with --force a clone of it)"
    )
    parser.add_argument(
        "--repo-url",
        help="the STUDENT repository, https://github.com/OWNER/NAME: Colab badges open and "
        "install cells install from it (never the instructor's: it holds the solutions)",
    )
    parser.add_argument("--branch", help=f"branch the badges and install cells use (default: {REPO_BRANCH})")
    parser.add_argument("--root", help="instructor repository (default: this checkout)")
    parser.add_argument(
        "--instructor-url",
        help="the instructor repository's URL, refused as --repo-url (its git remotes are refused anyway)",
    )
    parser.add_argument(
        "--config", help="TOML file with out, repo_url, branch, root, instructor_url (flags override it)"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the files of a non-empty --out (its .git is kept)"
    )
    args = parser.parse_args(argv)
    try:
        settings = release_module.load_settings(args.config) if args.config else {}
        settings.update({k: v for k, v in vars(args).items() if v is not None and k not in ("config", "force")})
        settings.setdefault("branch", REPO_BRANCH)
        written = release_module.publish(**settings, force=args.force)
    except ValueError as error:
        print(f"release: {error}", file=sys.stderr)
        return 2
    except release_module.ReleaseError as error:
        print(
            "=" * 70
            + "\nRELEASE FAILED: the kit would leak solutions or hidden tests; nothing was written.\n"
            + str(error)
            + "\n"
            + "=" * 70,
            file=sys.stderr,
        )
        return 1
    out = Path(settings["out"])
    stubs = sum(len(STUB_LINE.findall(source)) for rel in written for source in _code(out / rel))
    for problem in notebook_sync.check(out / "notebooks", settings["repo_url"], settings["branch"]):
        print(f"warning: {problem}", file=sys.stderr)
    print(
        f"student repository: {len(written)} files in {out} ({stubs} exercise stubs); no solution or hidden test "
        f"left; badges and install cells point at {settings['repo_url']} ({settings['branch']})"
    )
    return 0


STUB_LINE = re.compile(r"^[ \t]*raise NotImplementedError\(\)[ \t]*$", re.M)


def _code(path: Path) -> list[str]:
    """The code of a released file: a module's text, a notebook's code cells (not the kit's messages
    that mention the stub)."""
    if path.suffix == ".ipynb":
        return [cell["source"] for cell in read_notebook(path).cells if cell["cell_type"] == "code"]
    return [path.read_text()] if path.suffix == ".py" else []


def autograder(argv=None) -> int:
    if autograder_module is None:
        return instructor_only("autograder")
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers autograder",
        description=autograder_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="folder to write (empty or absent); the zip goes beside it")
    parser.add_argument("--config", help="grading config (default: the defaults, see points.example.toml)")
    parser.add_argument("--root", default=str(ROOT), help="instructor repository (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        if args.config:
            load_config(args.config)  # refuse a bad config now, not on Gradescope
        files = autograder_module.bundle(args.out, args.root, args.config)
    except (OSError, ValueError) as error:
        print(f"autograder: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    print(
        f"autograder: {len(files)} files in {out}; upload {out.with_name(out.name + '.zip')} to Gradescope "
        "(Configure Autograder > Zip file upload)"
    )
    return 0


def mistakes(argv=None) -> int:
    """Print the catalog with the grader's verdict on each mutation; exit 1 if one goes uncaught."""
    argparse.ArgumentParser(prog="python -m specdec_helpers mistakes", description=mistakes.__doc__).parse_args(argv)
    if grade_all is None:
        return instructor_only("mistakes")
    missed = 0
    for m, report in grade_all():
        r = report.find(m.test_id)
        caught = not r.passed and m.phrase in r.feedback
        missed += not caught
        print(f"{'✅' if caught else '❌'} {m.name:<26} {report.score:>5.1f} pts  [{m.test_id}] {r.feedback}")
    return 1 if missed else 0
