"""The Gradescope autograder bundle, run in a temporary root laid out like Gradescope's. That run_autograder gives
the verdict `grade` gives is checked on a real hand-in in tests/test_course.py (one Gradescope grading less here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specdec_helpers import cli
from specdec_helpers.assignment.authoring import autograder

from specdec_helpers.assignment.grading import grader

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """The real kit's bundle (with the toy pair the package ships)."""
    tmp = tmp_path_factory.mktemp("ag")
    autograder.bundle(tmp / "autograder", ROOT)
    return tmp / "autograder"


def gradescope_root(tmp: Path, bundle: Path, submission_files: dict[str, str]) -> Path:
    """``source/`` from the uploaded zip (as Gradescope unpacks it), ``submission/``, empty ``results/``."""
    root = tmp / "autograder"
    with zipfile.ZipFile(bundle.with_name(bundle.name + ".zip")) as archive:
        archive.extractall(root / "source")
        for info in archive.infolist():  # extractall drops permissions; Gradescope keeps them
            os.chmod(root / "source" / info.filename, info.external_attr >> 16 or 0o644)
    for rel, text in submission_files.items():
        (root / "submission" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / rel).write_text(text)
    (root / "results").mkdir()
    return root


def run_autograder(root: Path, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHON": sys.executable, **env}
    environ.pop("SPECDEC_CACHE_DIR", None)  # the bundle brings its own toy pair
    return subprocess.run(
        [str(root / "source" / "run_autograder")], env=environ, capture_output=True, text=True, timeout=600
    )


def test_bundle_layout(bundle):
    rel = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    assert {
        "setup.sh",
        "run_autograder",
        "requirements.txt",
        "constraints.txt",
        "points.toml",
        "kit/pyproject.toml",
        "kit/specdec_helpers/cli/__init__.py",
        "kit/specdec_helpers/assignment/testing/suite.py",
    } <= rel
    assert any(r.startswith("kit/notebooks/") and r.endswith(".ipynb") for r in rel)  # the instructor's, with solutions
    toy = autograder.PACKAGED_TOY.as_posix()
    assert {f"kit/{toy}/toy.json", f"kit/{toy}/target/model.safetensors", f"kit/{toy}/manifest.json"} <= rel
    assert os.access(bundle / "run_autograder", os.X_OK) and os.access(bundle / "setup.sh", os.X_OK)
    assert "torch==" in (bundle / "constraints.txt").read_text()
    assert not [r for r in rel if "__pycache__" in r]


@pytest.mark.slow
def test_a_crashing_grader_still_leaves_results_json(bundle, tmp_path):
    root = gradescope_root(tmp_path, bundle, {"report/REPORT.md": "x"})
    (root / "source/kit/specdec_helpers/cli/__init__.py").write_text("raise SystemExit(3)\n")
    done = run_autograder(root)
    assert done.returncode == 0
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] == 0 and "failed (exit 3)" in data["output"]


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("inside kit", "would overwrite the kit"),
        ("not empty", "not empty"),
        ("bad config", "unknown sections"),
        ("missing config", "No such file"),
    ],
)
def test_refusals(tmp_path, capsys, case, fragment):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "bad.toml").write_text("[style]\n")
    args = {
        "inside kit": ["--out", str(ROOT / "specdec_helpers" / "ag")],
        "not empty": ["--out", str(tmp_path / "full")],
        "bad config": ["--out", str(tmp_path / "o"), "--config", str(tmp_path / "bad.toml")],
        "missing config": ["--out", str(tmp_path / "o"), "--config", str(tmp_path / "nope.toml")],
    }[case]
    assert cli.autograder(args) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists() and not (ROOT / "specdec_helpers" / "ag").exists()


def test_grade_config_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "bad.toml").write_text("points = [\n")
    for config, fragment in ((tmp_path / "nope.toml", "No such file"), (tmp_path / "bad.toml", "Invalid value")):
        assert cli.grade([str(tmp_path), "--config", str(config), "--results", str(tmp_path / "r.json")]) == 2
        err = capsys.readouterr().err
        assert fragment in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


def test_example_points_file_gives_the_defaults():
    assert grader.load_config(autograder.EXAMPLE_CONFIG) == grader.load_config()
    assert "assignment/authoring/templates/*" in (ROOT / "pyproject.toml").read_text()  # ships as package data


def test_the_bundle_runs_student_code_as_its_own_user(bundle):
    """Gradescope's advice: setup.sh makes an unprivileged user for student code and locks source/ from it;
    run_autograder locks the folders again as root (a test root does not run setup.sh). The cheats
    themselves are tried in tests/test_sandbox_cheats.py."""
    setup, run = (bundle / "setup.sh").read_text(), (bundle / "run_autograder").read_text()
    assert "useradd --system" in setup and "specdec-student" in setup and "bubblewrap" in setup
    assert "chmod -R go-rwx /autograder/source" in setup
    assert 'chmod -R go-rwx "$SOURCE" "$ROOT/submission" "$ROOT/results"' in run
