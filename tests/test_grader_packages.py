"""The grader's children import the grader's own torch, transformers and kit, or grading stops with a message
that names both versions and the fix (`grading.packages`), never a silently wrong grade.

On a GPU machine the grader found transformers 5.24 through PYTHONPATH; its sandboxed child (which keeps
only the kit's view on PYTHONPATH) imported the machine's 5.17 and scored the reference 10.7/45.
"""

from __future__ import annotations

import os
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


@pytest.mark.sandbox(bwrap=True)
def test_a_sandboxed_child_with_another_transformers_stops_and_names_both(monkeypatch):
    """As root in bubblewrap, the child runs as the student's user on the kit's view: the same check."""
    monkeypatch.setenv("SPECDEC_SANDBOX", "auto")
    forged(monkeypatch, "5.17.0")
    with pytest.raises(packages.PackagesDiffer) as caught:
        Child({})
    text = str(caught.value)
    assert f"transformers {transformers.__version__} from" in text and "the grader runs transformers 5.17.0" in text
    assert "specdec_helpers" not in text.split("wrong:")[1]  # the kit's view counts as the grader's kit


def test_the_sandbox_shows_and_puts_on_the_path_the_folders_of_the_graders_packages(monkeypatch):
    """On the GPU machine the grader found transformers 5.24 on PYTHONPATH and its sandboxed child, which does
    not keep PYTHONPATH, imported the machine's 5.17. The folders the grader imports torch and transformers
    from are now bound into bubblewrap and on the child's path, after the kit's view."""
    from specdec_helpers.assignment.grading import isolation

    folders, roots = isolation.package_dirs(), isolation.python_roots()
    assert Path(transformers.__file__).resolve().parents[1] in folders
    assert all(any(f == r or r in f.parents for r in roots) for f in folders), (folders, roots)
    if os.geteuid() == 0:
        monkeypatch.setenv("SPECDEC_SANDBOX", "auto")
        from specdec_helpers.assignment.grading import privilege

        jail = privilege.Jail()
        try:
            path = jail.env()["PYTHONPATH"].split(os.pathsep)
            assert path == [str(isolation.view("child")), *map(str, folders)], path
        finally:
            jail.close()
