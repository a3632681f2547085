"""Grading as root (Gradescope, CI) with nbval on: every check line of the instructor's notebooks passes.

The notebooks' kernels run in the student's sandbox on the kit's view, which holds of grading/ only what the
kernels import (`isolation.needs`). It once lacked cases.py and rounds.py: the set-up cell's import failed and
every check line read "NameError: name 'nb' is not defined", worth 0 points, so no other test noticed.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specdec_helpers import cli

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.sandbox(bwrap=True)
def test_the_reference_graded_as_root_passes_every_check_line(tmp_path, monkeypatch):
    """Notebooks 01-04 (the graded parts), as root with bubblewrap, nbval on: full implementation marks and
    every nbval check line passed."""
    monkeypatch.setenv("SPECDEC_SANDBOX", "auto")
    folder = tmp_path / "handin"
    folder.mkdir()
    for path in sorted((ROOT / "notebooks").glob("0[1-4]_*.ipynb")):
        shutil.copy(path, folder / path.name)
    results = tmp_path / "results.json"
    assert cli.grade([str(folder), "--no-perf", "--no-similarity", "--results", str(results)]) == 0
    data = json.loads(results.read_text())
    checks = [t for t in data["tests"] if t["name"].startswith("checks")]
    assert len(checks) >= 4 and all(t["status"] == "passed" for t in checks), [t for t in checks if t["status"] != "passed"]
    parts = [t for t in data["tests"] if t["max_score"] > 0  # the implementation items (--no-perf: no speed)
             and not t["name"].split(":")[0].startswith(("speedup", "acceptance", "bonus"))]
    assert parts and all(t["score"] == t["max_score"] for t in parts), [t for t in parts if t["score"] != t["max_score"]]
    assert data["score"] == pytest.approx(25), data["output"]
