"""Assignment tooling: release, grader, known-mistake catalog, self-check, hand-in.

Everything runs on the grader's tiny in-memory models (seconds); only the last test touches the
trained `toy` pair, and it is skipped when that pair is not available. No timing is asserted:
performance grading is tested with injected measurements.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from specdec_helpers.assignment import exercises
from specdec_helpers.assignment import check, grader, mutations, release, submission, suite
from specdec_helpers import cli
from specdec_helpers.assignment.grader import Measurement

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parent.parent
STUDENT_URL = "https://github.com/course/specdec-students"
Reference = exercises.SpeculativeDecoder


def fake_measure(speedup=1.3, acceptance=0.8, identical=True):
    return lambda cls, perf: Measurement(speedup, acceptance, identical)


@pytest.fixture(scope="module")
def reference_report():
    return grader.grade(Reference, measure_fn=fake_measure())


# --------------------------------------------------------------------------- release


def test_strip_keeps_indentation_and_drops_hidden_tests():
    source = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\n\n" \
             "### BEGIN HIDDEN TESTS\nassert f(1) == 2\n### END HIDDEN TESTS\nprint('visible')\n"
    out = release.strip(source)
    assert out == "def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\nprint('visible')\n"
    assert release.strip("### BEGIN SOLUTION\nanswer\n### END SOLUTION\n", markdown=True) == "YOUR ANSWER HERE\n"
    with pytest.raises(release.ReleaseError, match="unmatched"):
        release.strip("x = 1\n### BEGIN SOLUTION\nx = 2\n")


def _instructor_tree(root: Path) -> None:
    """A small instructor repository: a marked module, a marked notebook with outputs, an unmarked
    notebook, and instructor-only files."""
    pkg = root / "specdec_helpers" / "assignment"
    pkg.mkdir(parents=True)
    (root / "specdec_helpers" / "mod.py").write_text(
        "def answer():\n    ### BEGIN SOLUTION\n    return 'forty-two-is-the-secret'\n    ### END SOLUTION\n")
    (pkg / "mutations.py").write_text("SECRET = 1\n")
    (root / "notebooks").mkdir()
    (root / "notebooks" / "_build.py").write_text("# builds notebooks with solutions\n")
    marked = new_notebook(cells=[
        new_markdown_cell("Explain:\n### BEGIN SOLUTION\nthe-secret-explanation-here\n### END SOLUTION"),
        new_code_cell("def g():\n    ### BEGIN SOLUTION\n    return 'solution-text-not-to-ship'\n    ### END SOLUTION",
                      outputs=[new_output("stream", name="stdout", text="done\n")], execution_count=3),
        new_code_cell("### BEGIN HIDDEN TESTS\nassert g() == 'solution-text-not-to-ship'\n### END HIDDEN TESTS\n"
                      "print('visible check')"),
    ])
    nbformat.write(marked, str(root / "notebooks" / "01_marked.ipynb"))
    plain = new_notebook(cells=[new_code_cell("print(1)", outputs=[new_output("stream", name="stdout", text="1\n")])])
    nbformat.write(plain, str(root / "notebooks" / "02_plain.ipynb"))
    (root / "README.md").write_text("# kit\n")


def test_release_strips_module_and_notebooks(tmp_path):
    _instructor_tree(tmp_path / "src")
    out = tmp_path / "kit"
    written = release.release(out, tmp_path / "src", STUDENT_URL)
    assert "notebooks/_build.py" not in written and not (out / "specdec_helpers/assignment/mutations.py").exists()
    module = (out / "specdec_helpers/mod.py").read_text()
    assert "    # YOUR CODE HERE\n    raise NotImplementedError()" in module and "forty-two" not in module
    nb = nbformat.read(str(out / "notebooks/01_marked.ipynb"), as_version=4)
    assert nb.cells[0].source == "Explain:\nYOUR ANSWER HERE"  # nbgrader's stub, nbgrader's newlines
    assert nb.cells[1].outputs == [] and nb.cells[1].execution_count is None
    assert "raise NotImplementedError()" in nb.cells[1].source
    assert nb.cells[2].source == "print('visible check')"
    plain = nbformat.read(str(out / "notebooks/02_plain.ipynb"), as_version=4)
    assert plain.cells[0].source == "print(1)" and plain.cells[0].outputs == []


def test_release_fails_loudly_and_writes_nothing(tmp_path, capsys):
    _instructor_tree(tmp_path / "src")
    (tmp_path / "src/specdec_helpers/broken.py").write_text("### BEGIN SOLUTION\nx = 1\n")  # no END marker
    assert cli.release(["--out", str(tmp_path / "kit"), "--root", str(tmp_path / "src"), "--repo-url", STUDENT_URL]) == 1
    assert "RELEASE FAILED" in capsys.readouterr().err and not (tmp_path / "kit").exists()
    # The scan itself: a solution line copied into a shipped file is caught.
    kit = tmp_path / "kit2"
    (kit / "notebooks").mkdir(parents=True)
    (kit / "notebooks" / "x.py").write_text("return 'forty-two-is-the-secret'\n")
    secrets = {"notebooks/x.py": (["    return 'forty-two-is-the-secret'\n"], "")}
    with pytest.raises(release.ReleaseError, match="leaked"):
        release.verify(kit, secrets)


def test_released_kit_imports_and_checks_say_not_implemented(tmp_path):
    out = tmp_path / "kit"
    assert cli.release(["--out", str(out), "--repo-url", STUDENT_URL]) == 0
    student = (out / "specdec_helpers/assignment/exercises.py").read_text()
    assert "BEGIN SOLUTION" not in student and student.count("raise NotImplementedError()") >= 8
    kit_suite = (out / "specdec_helpers/assignment/suite.py").read_text()
    assert "BEGIN HIDDEN" not in kit_suite and "hidden=True" not in kit_suite
    assert not (out / "specdec_helpers/assignment/mutations.py").exists()
    for nb_path in (out / "notebooks").glob("*.ipynb"):
        nb = nbformat.read(str(nb_path), as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), nb_path.name
    # The student module imports (as a submodule of the installed kit) and every check runs to the end.
    cls, _ = submission.load(out / "specdec_helpers/assignment/exercises.py")
    lines = []

    class Sink:
        def write(self, text):
            lines.append(text)

    for exercise in suite.EXERCISES:
        assert check.check_exercise(exercise, cls=cls, file=Sink()) is False
    text = "".join(lines)
    assert text.count("not implemented yet") == 4 and "💥" not in text and "❌" not in text


# --------------------------------------------------------------------------- grading


def test_reference_scores_full_points(reference_report):
    implementation = [r for r in reference_report.results if r.item in suite.EXERCISES]
    assert all(r.passed for r in implementation), [(r.test_id, r.feedback) for r in implementation if not r.passed]
    assert sum(r.score for r in implementation) == pytest.approx(25)
    assert any(r.hidden for r in implementation) and any(not r.hidden for r in implementation)
    assert reference_report.score == pytest.approx(45) and reference_report.max_score == pytest.approx(45)


@pytest.mark.parametrize("m", mutations.CATALOG, ids=lambda m: m.name)
def test_every_mutation_is_caught_with_its_message(m):
    t = next(t for t in suite.TESTS if t.id == m.test_id)
    status, feedback = grader.run_test(t, suite.Ctx(m.cls))
    assert status == "failed", (m.name, status, feedback)
    assert m.phrase in feedback, (m.name, feedback)


def test_catalog_covers_the_known_mistakes():
    names = {m.name for m in mutations.CATALOG}
    assert {"logits_offset", "no_bonus_token", "no_correction_token", "extra_target_pass", "eos_in_prompt",
            "sampling_draft", "no_cache_rollback", "draft_from_scratch", "overshoot_max_tokens",
            "bonus_counted_as_accepted", "retokenized_throughput"} <= names


def test_unfinished_work_is_not_implemented_not_a_crash():
    class Blank(Reference):
        def accept_draft(self, target_logits, draft_tokens):
            raise NotImplementedError()

    t = next(t for t in suite.TESTS if t.id == "verify.accept_all")
    assert grader.run_test(t, suite.Ctx(Blank))[0] == "not implemented"


def test_results_json_shape(reference_report, tmp_path):
    data = json.loads(json.dumps(reference_report.gradescope()))
    assert set(data) >= {"score", "max_score", "tests", "output"}
    assert data["tests"] and all(set(t) >= {"name", "score", "max_score", "output"} for t in data["tests"])
    assert sum(t["score"] for t in data["tests"]) == pytest.approx(data["score"], abs=0.01)
    assert {t["visibility"] for t in data["tests"]} == {"visible", "after_due_date"}
    assert "total" in data["output"] and "4 decode loop" in data["output"]


def test_toy_preset_has_its_own_acceptance_bar():
    assert grader.load_config()["thresholds"]["acceptance"] == 0.60  # toy is the default preset
    assert grader.load_config(preset="pythia-1.4b/160m")["thresholds"]["acceptance"] == 0.75  # PA3's
    assert grader.load_config(thresholds={"acceptance": 0.8})["thresholds"]["acceptance"] == 0.8


def test_performance_thresholds_with_injected_measurements():
    config = grader.load_config(preset="pythia-1.4b/160m")  # PA3's thresholds
    score = lambda m: {r.item: r.score for r in grader.performance_results(m, config)}  # noqa: E731
    assert score(Measurement(1.0, 0.76)) == {"speedup": 10, "acceptance": 10, "bonus": 0}  # >= 1.0x, > 75%
    assert score(Measurement(0.99, 0.75)) == {"speedup": 0, "acceptance": 0, "bonus": 0}
    assert score(Measurement(1.8, 0.86)) == {"speedup": 10, "acceptance": 10, "bonus": 5}
    assert score(Measurement(1.8, 0.80)) == {"speedup": 10, "acceptance": 10, "bonus": 0}  # bonus needs both
    wrong = grader.performance_results(Measurement(3.0, 0.99, identical=False), config)
    assert all(r.score == 0 and "differs from greedy" in r.feedback for r in wrong)
    skipped = grader.performance_results(None, config, "needs a correct decode loop")
    assert all(r.status == "skipped" for r in skipped)


def test_measure_plumbing_on_tiny_models(monkeypatch):
    """`measure` on a stand-in pair: outputs compared with greedy, acceptance counted from the student's
    verification results (not from its own stats). Timings are only checked to be positive."""
    w = suite.world()

    class TinyPair(suite.Pair):
        preset = "tiny"

        def encode(self, prompt):
            return w.prompts[0]

    monkeypatch.setattr("specdec_helpers.models.pairs.load_pair", lambda name, **kw: TinyPair(w.target, w.draft, w.tokenizer))
    perf = dict(grader.DEFAULT_CONFIG["performance"], max_new_tokens=12, repeats=1, warmup=0, prompts=1)
    m = grader.measure(mutations.BonusCountedAsAccepted, perf)
    assert m.identical and not m.error
    (row,) = m.detail["prompts"]
    assert m.speedup == pytest.approx(row["speedup"], abs=5e-4)  # one prompt: its own ratio of medians
    assert m.acceptance == pytest.approx(row["accepted"] / row["proposed"]) and m.acceptance < 1


def test_points_config_file_and_overrides(tmp_path):
    (tmp_path / "points.toml").write_text('[points]\ndecode = 20\nbonus = 0\n[thresholds]\nspeedup = 1.5\n')
    config = grader.load_config(tmp_path / "points.toml", points={"init": 2}, thresholds={"acceptance": 0.5})
    assert config["points"]["decode"] == 20 and config["points"]["init"] == 2
    results = grader.performance_results(Measurement(1.3, 0.6), config)
    assert {r.item: r.score for r in results} == {"speedup": 0, "acceptance": 10}  # bonus 0 points: not listed
    (tmp_path / "bad.json").write_text(json.dumps({"points": {"style": 3}}))
    with pytest.raises(ValueError, match="unknown point items"):
        grader.load_config(tmp_path / "bad.json")
    # Points of an exercise are split over its tests by weight.
    results = grader.run_suite(Reference, {"verify": 8}, hidden=False, only=["verify"])
    assert sum(r.max_score for r in results) == pytest.approx(8) and all(r.passed for r in results)


def _notebook_with_reference(path: Path) -> None:
    """A PA3-style notebook: set-up, the class (the reference, as a student would paste it), then
    cells that load hub models and benchmark, which grading must not run."""
    source = (ROOT / "specdec_helpers/assignment/exercises.py").read_text().replace("from .", "from specdec_helpers.")
    body = source[source.index("class SpeculativeDecoder"):]
    nb = new_notebook(cells=[
        new_markdown_cell("# PA3"),
        new_code_cell("%pip install -q transformers\nimport time\nimport torch\n"
                      "from specdec_helpers.core.cache import cache_length, crop_cache, new_cache\nK = 4"),
        new_code_cell(body),
        new_code_cell('decoder = SpeculativeDecoder("EleutherAI/pythia-1.4b-deduped", "EleutherAI/pythia-160m-deduped")\n'
                      'print(decoder.benchmark("The future of AI is"))'),
    ])
    nbformat.write(nb, str(path))


def test_grade_cli_on_a_notebook_writes_results_json(tmp_path, capsys):
    nb_path = tmp_path / "pa3.ipynb"
    _notebook_with_reference(nb_path)
    results = tmp_path / "results.json"
    rc = cli.grade([str(nb_path), "--no-perf", "--visible-only", "--results", str(results)])
    out = capsys.readouterr().out
    assert rc == 0 and "1 initialization" in out
    data = json.loads(results.read_text())
    assert data["score"] == pytest.approx(25) and data["max_score"] == pytest.approx(45)


def test_grade_cli_explains_a_missing_class(tmp_path, capsys):
    (tmp_path / "empty.py").write_text("x = 1\n")
    assert cli.grade([str(tmp_path / "empty.py"), "--no-perf", "--results", str(tmp_path / "r.json")]) == 1
    assert "defines no class SpeculativeDecoder" in capsys.readouterr().err
    assert json.loads((tmp_path / "r.json").read_text())["score"] == 0


# hand-in: tests/test_handin.py


# --------------------------------------------------------------------------- end to end on the toy pair


@pytest.mark.slow
def test_e2e_toy_pair_measurement():
    """END TO END (slow, trains the toy pair once if it is not cached): the reference decoder measured on
    the course pair. Checks the measurement is sane; never asserts a timing."""
    perf = dict(grader.DEFAULT_CONFIG["performance"], max_new_tokens=24, repeats=1, prompts=1)
    m = grader.measure(Reference, perf)
    (row,) = m.detail["prompts"]
    assert m.identical and m.speedup == pytest.approx(row["speedup"], abs=5e-4) and 0 <= m.acceptance <= 1
    assert re.match(r"toy", m.detail["preset"])
