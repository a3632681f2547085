"""A user's mistake on the command line ends in one line naming it and a non-zero exit, never a
traceback, and never a silent fallback (each case below once did one or the other)."""

import os
import re
import zipfile

import pytest

from specdec_helpers import cli


def run(argv, capsys):
    """(exit code, stderr) of ``python -m specdec_helpers ARGV``, run in this process."""
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse's errors
        code = exit_.code
    return code, capsys.readouterr().err


def assert_one_line_error(argv, phrase, capsys):
    code, err = run(argv, capsys)
    assert code not in (0, None), (argv, err)
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert phrase in last, (argv, err)


@pytest.mark.parametrize(
    "argv, phrase",
    [
        (["demo", "-k", "-3"], "must be 1 or more, got -3"),
        (["demo", "-k", "0"], "must be 1 or more, got 0"),  # once fell back to the preset's k
        (["demo", "--prompt", ""], "--prompt is empty"),  # once fell back to the default prompt
        (["demo", "--prompt", "  "], "--prompt is empty"),
        (["demo", "--preset", ""], "--preset is empty; name one of toy, smollm2-135m"),  # once ran 'auto' silently
        (["demo", "--max-new-tokens", "-5"], "must be 1 or more, got -5"),
        (["bench", "--ks", "abc"], "expected a whole number >= 1, got 'abc'"),
        (["bench", "--ks=-2"], "must be 1 or more, got -2"),
        (["bench", "--ks", ","], "expected comma-separated whole numbers"),
        (["bench", "--max-new-tokens", "0"], "must be 1 or more, got 0"),
        (["bench", "--threads", "-1"], "must be 1 or more, got -1"),
        (["bench", "--warmup", "-1"], "must be 0 or more, got -1"),
        (["perf", "--k=-3"], "must be 1 or more, got -3"),
        (["perf", "--max-new-tokens", "0"], "must be 1 or more, got 0"),
        (["perf", "--threads", "-1"], "must be 1 or more, got -1"),
        (["bench", "--preset", "pythia-99b/1m"], "bench: unknown preset 'pythia-99b/1m'"),
        (["perf", "--preset", "nope"], "perf: unknown preset 'nope'"),
        (["perf", "--preset", ""], "perf: error: argument --preset: '' holds an empty preset name"),
        (["grade", "x", "--preset", "toy,"], "grade: error: argument --preset: 'toy,' holds an empty preset name"),
    ],
)
def test_bad_values_are_one_line_errors(argv, phrase, capsys):
    assert_one_line_error(argv, phrase, capsys)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("command", ["bench", "perf"])
def test_cuda_without_cuda_is_refused_at_once(command, capsys):
    assert_one_line_error([command, "--device", "cuda"], "no CUDA GPU here", capsys)


@pytest.mark.parametrize("command", ["bench", "perf"])
def test_out_naming_a_file_is_refused(command, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert_one_line_error([command, "--out", str(tmp_path / "f")], "is a file; give a folder", capsys)


def test_missing_prompts_file_names_it(tmp_path, capsys):
    missing = tmp_path / "missing.txt"
    assert_one_line_error(
        ["bench", "--preset", "toy", "--prompts", f"@{missing}", "--out", str(tmp_path)], "missing.txt", capsys
    )


def test_demo_beyond_the_models_context(capsys):
    assert_one_line_error(["demo", "--preset", "toy", "--max-new-tokens", "5000"], "context of 1024", capsys)


# --------------------------------------------------------------------------- report


def test_report_on_invalid_json_names_the_file(tmp_path, capsys):
    (tmp_path / "bench_toy.json").write_text('{"runs": [1, 2')  # truncated
    assert_one_line_error(
        ["report", "--results", str(tmp_path), "--out", str(tmp_path / "b"), "--no-pdf"],
        "bench_toy.json is not valid JSON",
        capsys,
    )


def test_report_skips_perf_results_beside_the_sweeps(tmp_path, capsys):
    """README's order, bench then perf then report, once crashed with KeyError: 'summary'."""
    from specdec_helpers.measure.results import load_results

    (tmp_path / "perf.json").write_text('{"runs": [], "ratios": [], "costs": {}}')
    assert_one_line_error(
        ["report", "--results", str(tmp_path), "--out", str(tmp_path / "b"), "--no-pdf"],
        "no `bench` results JSON",
        capsys,
    )
    with pytest.raises(ValueError, match="not a `bench` results file"):
        load_results(tmp_path / "perf.json")


# --------------------------------------------------------------------------- grade


def test_grade_random_bytes_zip(tmp_path, capsys):
    bad = tmp_path / "handin.zip"
    bad.write_bytes(os.urandom(2000))
    code, err = run(["grade", str(bad), "--no-perf", "--results", str(tmp_path / "r.json")], capsys)
    assert code not in (0, None) and "Traceback" not in err
    assert "not a zip file" in err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "config, phrase",
    [
        ("missing.toml", "missing.toml"),
        ("bad.json", "Expecting"),
        ("bad.toml", "Expected ']'"),
    ],
)
def test_grade_missing_or_invalid_config(config, phrase, tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "bad.toml").write_text("[points\nx=")
    with zipfile.ZipFile(tmp_path / "h.zip", "w") as z:
        z.writestr("x.txt", "x")
    assert_one_line_error(["grade", str(tmp_path / "h.zip"), "--config", str(tmp_path / config)], phrase, capsys)


def test_grade_unknown_points_item(tmp_path, capsys):
    assert_one_line_error(["grade", str(tmp_path), "--points", "bogus=3"], "unknown point items ['bogus']", capsys)


def test_grade_without_the_graders_extra_says_what_to_install(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nbval" else real(name, *a))
    code, err = run(["grade", str(tmp_path), "--results", str(tmp_path / "r.json")], capsys)
    assert code == 2 and "missing: nbval" in err and "pip install -e '.[grade]'" in err, err
    assert not (tmp_path / "r.json").exists()


def test_students_install_no_grader_packages():
    """pyproject's dependencies are what a student's `pip install` gets; the grader's packages are its extra,
    which the test extra and requirements.txt (the autograder's image) carry too."""
    import tomllib
    from pathlib import Path

    from specdec_helpers.cli.course import GRADE_EXTRA

    root = Path(__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    names = lambda specs: {re.split(r"[<>=\[ ]", s, maxsplit=1)[0] for s in specs}
    assert not names(project["dependencies"]) & set(GRADE_EXTRA)
    extras = project["optional-dependencies"]
    assert set(GRADE_EXTRA) <= names(extras["grade"]) and set(GRADE_EXTRA) <= names(extras["test"])
    requirements = [line for line in (root / "requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    assert set(GRADE_EXTRA) <= names(requirements)
