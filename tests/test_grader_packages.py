"""The grader's children import the grader's own torch, transformers and kit, or grading stops with a message
that names both versions and the fix (`grading.packages`), never a silently wrong grade.

On a GPU machine the grader found transformers 5.24 through PYTHONPATH; its sandboxed child (which keeps
only the kit's view on PYTHONPATH) imported the machine's 5.17 and scored the reference 10.7/45.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import transformers

from specdec_helpers import cli
from specdec_helpers.assignment.grading import packages
from specdec_helpers.assignment.grading.sandbox import Child

ROOT = Path(__file__).resolve().parent.parent


def forged(monkeypatch, version: str = "5.17.0") -> None:
    """The grader believes it runs transformers ``version``: its children (which import the real one) differ."""
    mine = {name: dict(value) for name, value in packages._mine().items()}
    mine["transformers"]["version"] = version
    monkeypatch.setattr(packages, "_mine", lambda: mine)


def test_the_same_packages_pass_and_the_check_is_silent_without_the_graders_word(monkeypatch):
    monkeypatch.setenv("SPECDEC_SANDBOX", "none")
    assert packages.mismatch({packages.ENV: packages.expected()}) is None
    assert packages.mismatch({}) is None  # a child not started by a grader (InProcess, a test) checks nothing
    child = Child({})
    try:
        assert child.ready == {}
    finally:
        child.close()


def test_a_child_with_another_transformers_stops_with_both_versions_and_the_fix(monkeypatch):
    monkeypatch.setenv("SPECDEC_SANDBOX", "none")
    forged(monkeypatch)
    with pytest.raises(packages.PackagesDiffer) as caught:
        Child({})
    text = str(caught.value)
    assert f"transformers {transformers.__version__} from" in text and "the grader runs transformers 5.17.0" in text
    assert "not onto PYTHONPATH" in text and "torch" not in text.split("wrong:")[1].split(".")[0]


def test_grade_stops_before_grading_and_writes_no_results(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SPECDEC_SANDBOX", "none")
    forged(monkeypatch)
    results = tmp_path / "results.json"
    assert cli.grade([str(ROOT / "notebooks"), "--no-perf", "--no-similarity", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert "grade: not graded:" in err and "the grader runs transformers 5.17.0" in err, err
    assert not results.exists()


SHIM = '''
"""transformers as a machine's PYTHONPATH gives it to the grader: here the real one, calling itself {version}."""
import os, sys
here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
del sys.modules["transformers"]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
import transformers as real
real.__version__ = "{version}"
sys.modules["transformers"] = real
'''


@pytest.mark.slow
@pytest.mark.sandbox(bwrap=True)
def test_a_sandboxed_child_that_drops_the_graders_pythonpath_is_refused(tmp_path):
    """As on the GPU machine: the grader imports a transformers found on PYTHONPATH, the sandbox does not keep
    PYTHONPATH, its processes import another one. Grading stops up front (before nbval), exit 2, no results."""
    shim = tmp_path / "site" / "transformers"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(textwrap.dedent(SHIM.format(version="5.17.0")))
    results = tmp_path / "out" / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)]), "SPECDEC_SANDBOX": "auto"}
    done = subprocess.run([sys.executable, "-m", "specdec_helpers", "grade", str(ROOT / "notebooks"), "--no-perf",
                           "--results", str(results)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"transformers {transformers.__version__} from" in done.stderr, done.stderr
    assert "the grader runs transformers 5.17.0" in done.stderr and "not onto PYTHONPATH" in done.stderr
    assert not results.exists() and "checks" not in done.stdout  # stopped before nbval ran a notebook
    assert json.loads(packages.expected())["transformers"]["version"] == transformers.__version__
