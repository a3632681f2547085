"""The assignment: graded cells in the notebooks, the sandboxed grader, the mistake catalog, cheats.

Student code always runs in a child process here, exactly as in grading (the mistake catalog, the
instructor's own code, is answered in process; one test keeps that equal to a child's). Timings are never
asserted; the performance tests assert only what a cheat earns (nothing) or the reference's marks.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from specdec_helpers import cli
from specdec_helpers.assignment.parts import cells
from specdec_helpers.assignment.authoring import mutations
from specdec_helpers.assignment.grading import classroom, grader, speed, submission
from specdec_helpers.assignment.testing import world
from specdec_helpers.assignment.authoring import release
from specdec_helpers.assignment.grading.sandbox import InProcess
from specdec_helpers.assignment.grading.speed import Measurement
from specdec_helpers.assignment.parts.cells import load_functions

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
STUDENT_URL = "https://github.com/course/specdec-students"
POINTS = grader.load_config()["points"]


@pytest.fixture(scope="module")
def reference():
    return submission.reference_sources()


def implementation(report_results):
    return sum(r.score for r in report_results if r.item in grader.EXERCISES)


def test_every_part_is_one_graded_cell_with_nbgrader_metadata(reference):
    assert set(reference) == set(grader.EXERCISES)
    for path in sorted(NOTEBOOKS.glob("0*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        ids = [cells.nbgrader(c)["grade_id"] for c in nb.cells if cells.nbgrader(c)]
        assert len(ids) == len(set(ids)), path.name
        for i, c in enumerate(nb.cells):
            meta = cells.nbgrader(c)
            if meta.get("solution"):
                assert "### BEGIN SOLUTION" in c.source and meta["locked"] is False, (path.name, i)
                check = cells.nbgrader(nb.cells[i + 1])
                assert check.get("locked") and check["grade_id"] == meta["grade_id"] + "_check", (path.name, i)


# --------------------------------------------------------------------------- release


def test_strip_keeps_indentation_and_drops_hidden_tests():
    source = (
        "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\n\n"
        "### BEGIN HIDDEN TESTS\nassert f(1) == 2\n### END HIDDEN TESTS\nprint('visible')\n"
    )
    out = release.strip(source)
    assert out == "def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\nprint('visible')\n"
    assert release.strip("### BEGIN SOLUTION\nanswer\n### END SOLUTION\n", markdown=True) == "YOUR ANSWER HERE\n"  # noqa: B005 - release.strip, not str.strip
    with pytest.raises(release.ReleaseError, match="unmatched"):
        release.strip("x = 1\n### BEGIN SOLUTION\nx = 2\n")  # noqa: B005 - release.strip, not str.strip


def _instructor_tree(root: Path) -> None:
    """A small instructor repository: a marked module, a marked notebook with outputs, an unmarked
    notebook, and instructor-only files."""
    pkg = root / "specdec_helpers" / "assignment"
    pkg.mkdir(parents=True)
    (root / "specdec_helpers" / "mod.py").write_text(
        "def answer():\n    ### BEGIN SOLUTION\n    return 'forty-two-is-the-secret'\n    ### END SOLUTION\n"
    )
    (pkg / "mutations.py").write_text("SECRET = 1\n")
    (root / "notebooks").mkdir()
    marked = new_notebook(
        cells=[
            new_markdown_cell("Explain:\n### BEGIN SOLUTION\nthe-secret-explanation-here\n### END SOLUTION"),
            new_code_cell(
                "def g():\n    ### BEGIN SOLUTION\n    return 'solution-text-not-to-ship'\n    ### END SOLUTION",
                outputs=[new_output("stream", name="stdout", text="done\n")],
                execution_count=3,
            ),
            new_code_cell(
                "### BEGIN HIDDEN TESTS\nassert g() == 'solution-text-not-to-ship'\n### END HIDDEN TESTS\n"
                "print('visible check')"
            ),
        ]
    )
    nbformat.write(marked, str(root / "notebooks" / "01_marked.ipynb"))
    plain = new_notebook(cells=[new_code_cell("print(1)", outputs=[new_output("stream", name="stdout", text="1\n")])])
    nbformat.write(plain, str(root / "notebooks" / "02_plain.ipynb"))
    (root / "README.md").write_text("# kit\n")


def test_release_strips_module_and_notebooks(tmp_path):
    _instructor_tree(tmp_path / "src")
    out = tmp_path / "kit"
    release.release(out, tmp_path / "src", STUDENT_URL)
    assert not (out / "specdec_helpers/assignment/authoring").exists()
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
    assert (
        cli.release(["--out", str(tmp_path / "kit"), "--root", str(tmp_path / "src"), "--repo-url", STUDENT_URL]) == 1
    )
    assert "RELEASE FAILED" in capsys.readouterr().err and not (tmp_path / "kit").exists()
    # The scan itself: a solution line copied into a shipped file is caught.
    kit = tmp_path / "kit2"
    (kit / "notebooks").mkdir(parents=True)
    (kit / "notebooks" / "x.py").write_text("return 'forty-two-is-the-secret'\n")
    secrets = {"notebooks/x.py": (["    return 'forty-two-is-the-secret'\n"], "")}
    with pytest.raises(release.ReleaseError, match="leaked"):
        release.verify(kit, secrets)


def test_released_notebooks_are_stubs_and_the_kit_has_no_catalog(tmp_path):
    out = tmp_path / "kit"
    assert cli.release(["--out", str(out), "--repo-url", STUDENT_URL]) == 0
    assert not (out / "specdec_helpers/assignment/authoring").exists()
    kit_suite = (out / "specdec_helpers/assignment/testing/suite.py").read_text()
    assert "BEGIN HIDDEN" not in kit_suite and "hidden=True" not in kit_suite
    sources = cells.graded_sources([out / "notebooks"])
    assert set(sources) == set(grader.EXERCISES) and all(cells.is_stub(s) for s in sources.values())
    for nb_path in (out / "notebooks").glob("*.ipynb"):
        nb = nbformat.read(str(nb_path), as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), nb_path.name


# --------------------------------------------------------------------------- grading


# Grading worlds are drawn at grade time; CI uses fixed ones (deterministic runs), and
# `benchmarks/grading_worlds.py --worlds N` scans many fresh ones for a world in which a test judges wrongly: one where
# a mutation escapes goes to WORLDS (the catalog alternates over them), one where the reference loses a point to
# REFERENCE_WORLDS (the reference is graded in a child in world 7 by test_course).
WORLDS = (0, 1)
REFERENCE_WORLDS = (0,)


def test_the_grading_seed_is_the_callers_then_the_environments_then_drawn(monkeypatch):
    monkeypatch.setenv(world.SEED_ENV, "17")
    assert world.grading_seed(3) == 3 and world.grading_seed() == 17
    monkeypatch.setenv(world.SEED_ENV, "seventeen")
    with pytest.raises(ValueError, match="SPECDEC_GRADE_SEED='seventeen' is not a whole number: set it to one"):
        world.grading_seed()
    monkeypatch.delenv(world.SEED_ENV)
    assert len({world.grading_seed() for _ in range(20)}) > 1  # a fresh world per grading


def test_a_bad_grading_seed_stops_grade_before_it_grades(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(world.SEED_ENV, "0x")
    assert cli.grade([str(tmp_path / "missing.zip"), "--results", str(tmp_path / "r.json")]) == 2
    assert "SPECDEC_GRADE_SEED='0x' is not a whole number" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_a_worlds_model_folders_go_when_its_process_ends(tmp_path):
    """The init tests' saved models (~17 MB a world) are deleted when the process that made them exits."""
    script = "from specdec_helpers.assignment.testing import world\nprint(world.world(0).folders()[0])\n"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.split()[-1]).parent.parent == tmp_path and list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", REFERENCE_WORLDS)
def test_reference_scores_exactly_full_implementation_marks(reference, seed):
    """The suite's judgement of the reference in fixed worlds, answered in process like the mistake catalog (the
    instructor's own code). In a child it is graded in world 7 by tests/test_course.py (the Gradescope bundle), its
    decode part in world 0 by tests/test_fair_grading.py; benchmarks/grading_worlds.py scans fresh worlds."""
    results = grader.run_suite(reference, POINTS, seed=seed, child_factory=lambda: InProcess(load_functions(reference)))
    assert all(r.passed for r in results), (f"world {seed}", [(r.test_id, r.feedback) for r in results if not r.passed])
    report = grader.Report(results)
    assert report.score == report.max_score == 25  # exactly: no 24.997 from a part split in thirds
    assert sum(t["score"] for t in report.gradescope()["tests"]) == pytest.approx(25, abs=1e-9)


def test_only_the_graders_run_times_the_child_a_check_cells_runs_what_the_student_kit_holds(reference, monkeypatch):
    """The hidden parts of visible tests (the checks of cost, measured outside the child) run in the grader's suite
    (``hidden=True``) and not in a check cell's (``hidden=False``): release strips them from the student kit, so the
    instructor's solved notebooks check what a student's check does."""
    from specdec_helpers.assignment.testing import suite, suite_decode

    ran = []
    for module, name in (
        (suite, "_draft_cache_reused_outside"),
        (suite, "_one_pass_outside"),
        (suite_decode, "_rounds_real_outside"),
        (suite_decode, "_cache_reused_outside"),
        (suite_decode, "_one_pass_outside"),
    ):
        monkeypatch.setattr(module, name, lambda *args, name=name, module=module: ran.append((module.__name__, name)))
    ids = {"draft.draft_cache_reuse", "verify.verify_vectorized", "decode.decode_cached", "decode.decode_cache_reused"}
    ids.add("decode.decode_one_pass")
    for hidden in (False, True):
        ran.clear()
        results = grader.run_suite(
            reference,
            POINTS,
            seed=0,
            hidden=hidden,
            ids=ids,
            child_factory=lambda: InProcess(load_functions(reference)),
        )
        assert {r.test_id for r in results} == ids and all(r.passed for r in results), results
        assert len(ran) == (5 if hidden else 0), (hidden, ran)


@pytest.mark.slow
def test_released_stubs_are_not_implemented(reference):
    stubs = {}
    for path in sorted(NOTEBOOKS.glob("0*.ipynb")):
        nb = release.strip_notebook(nbformat.read(str(path), as_version=4))
        stubs.update({k: v for k, v in cells.graded_cells(nb).items() if k in reference})
    assert set(stubs) == set(reference) and all(cells.is_stub(s) for s in stubs.values())
    results = grader.run_suite(stubs, POINTS, seed=0)
    assert implementation(results) == 0 and {r.status for r in results} == {"not implemented"}


@pytest.mark.slow
@pytest.mark.parametrize("m", mutations.CATALOG, ids=lambda m: m.name)
def test_every_mutation_is_caught_with_its_message(m, reference):
    """Answered in this process (the catalog is the instructor's code): the next test keeps that equal to a child's.
    Only the test that must catch it runs (the part's others cost most of the time; benchmarks/grading_worlds.py
    grades whole parts), except for a check without points, whose flag needs the rest of its part."""
    seed = WORLDS[mutations.CATALOG.index(m) % len(WORLDS)]  # fixed worlds; the scan script draws fresh ones
    scored = next(t.weight for t in grader.TESTS if t.id == m.test_id) > 0
    report = mutations.grade_mutation(m, reference, seed=seed, in_process=True, ids={m.test_id} if scored else None)
    r = report.find(m.test_id)
    assert not r.passed and m.phrase in r.feedback, (m.name, f"world {seed}", r.status, r.feedback)
    if r.max_score:
        assert report.score < POINTS[m.part]
    else:  # a check without points (the device check): the gradebook flags it for the instructor instead
        flags = classroom.Student("s", Path("."), results=report.gradescope()).review()
        assert flags and r.name in flags[0], flags
        # its whole part was graded: it loses that check only, a visible one (notebook 04's check catches it too)
        assert [t.test_id for t in report.results if not t.passed] == [m.test_id] and not r.hidden, report.table()
        if m.test_id == "decode.decode_device":
            assert "cpu" in r.feedback and "cuda" in r.feedback, r.feedback


@pytest.mark.slow
@pytest.mark.parametrize("name", ["no_cache_rollback", "models_not_moved"])
def test_a_mutation_graded_in_a_child_and_in_process_gets_the_same_report(reference, name):
    """The same tests, statuses and feedback either way: for the decode loop (crashes, with the line of the
    graded cell) and for loading the models (the init tests' own requests)."""
    m = next(m for m in mutations.CATALOG if m.name == name)
    child, here = (mutations.grade_mutation(m, reference, seed=0, in_process=flag) for flag in (False, True))
    rows = [[(r.test_id, r.status, r.score, r.feedback) for r in report.results] for report in (child, here)]
    assert rows[0] == rows[1] and any(not r.passed for r in child.results)
    if m.part == "decode":
        assert any("(in verify_tokens_cached, line" in row[3] for row in rows[0])


def test_catalog_covers_the_known_mistakes():
    names = {m.name for m in mutations.CATALOG}
    assert {
        "logits_offset",
        "no_bonus_token",
        "no_correction_token",
        "extra_target_pass",
        "eos_in_prompt",
        "sampling_draft",
        "no_cache_rollback",
        "draft_from_scratch",
        "overshoot_max_tokens",
        "bonus_counted_as_accepted",
        "target_cache_not_reused",
        "draft_k_minus_1",
        "eos_only_among_draft_tokens",
        "models_not_moved",
        "cache_cropped_too_far",
        # the five that earned full marks before (issue 25)
        "draft_cache_cropped_short",
        "always_k_minus_1",
        "use_cache_ignored",
        "stats_skip_eos_round",
        "tokens_to_cpu",
        # issues 33 and 34: a mistake that shows only on a GPU, and the count of a round cut at EOS
        "new_tokens_on_cpu",
        "eos_count_after_cut",
    } <= names
    reference = submission.reference_sources()
    for m in mutations.CATALOG:
        assert m.sources(reference)[m.part] != reference[m.part], m.name


# --------------------------------------------------------------------------- cheats, written as a student would

GREEDY_LOOP = """
import torch

@torch.inference_mode()
def verify_tokens_cached(self, input_ids, draft_tokens, attention_mask=None):
    return [], 0   # written, never used: the loop below does not speculate

@torch.inference_mode()
def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
    out = self.target_model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                     max_new_tokens=max_tokens, eos_token_id=self.eos_token_id,
                                     pad_token_id=self.eos_token_id or 0)
    self.stats = {"proposed": 100, "accepted": 100, "rounds": 1}   # faked acceptance
    return out
"""

IMPORT_CHEATS = {
    "sys_exit_at_import": "import sys\nsys.exit(0)\n",
    # waits rather than spins: the grader stops a child that never answers by the clock (`Child`'s ready timeout),
    # whatever it does meanwhile; spinning only burnt those 10 s of CPU
    "endless_loop_at_import": "import time\nwhile True:\n    time.sleep(1)\n",
    "results_json_and_exit": (
        "import json, os\nfor folder in ('.', os.environ.get('PWD', '.')):\n"
        "    open(os.path.join(folder, 'results.json'), 'w').write(json.dumps({'score': 45}))\n"
        "os._exit(0)\n"
    ),
    "replace_test_list": (
        "import sys\nfor name, module in list(sys.modules.items()):\n"
        "    if name.startswith('specdec_helpers.assignment'):\n"
        "        for attr in ('TESTS', 'run_suite', 'run_test'):\n"
        "            if hasattr(module, attr):\n"
        "                setattr(module, attr, [] if attr == 'TESTS' else (lambda *a, **k: ('passed', '')))\n"
    ),
    "patch_timer": "import time\ntime.perf_counter = lambda: 0.0\ntime.monotonic = lambda: 0.0\n",
}


WRONG = "\n".join(
    f"def {name}(self, *args, **kwargs):\n    return None\n"
    for name in (
        "initialize_target_model",
        "initialize_draft_model",
        "generate_draft_tokens",
        "accept_draft",
        "verify_tokens_vectorized",
        "verify_tokens_cached",
        "generate_ids",
    )
)


def _submission_with(folder: Path, source_for) -> Path:
    """The instructor's notebooks with every graded cell replaced by ``source_for(part)``."""
    folder.mkdir()
    for path in sorted(NOTEBOOKS.glob("0[1-4]*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            part = cells.nbgrader(cell).get("grade_id")
            if cells.nbgrader(cell).get("solution") and part in grader.EXERCISES:
                cell.source = source_for(part)
        nbformat.write(nb, str(folder / path.name))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(IMPORT_CHEATS))
def test_cheats_earn_nothing(name, tmp_path, monkeypatch):
    """Each cheat sits in every graded cell next to functions that do nothing useful: it must earn 0,
    and results.json is the grader's own (written after the cheat ran, listing every test)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    folder = _submission_with(tmp_path / "handin", lambda part: IMPORT_CHEATS[name] + "\n" + WRONG)
    (tmp_path / "config.json").write_text(json.dumps({"test_timeout_s": 10}))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"score": 45, "stale": True}))
    assert (
        cli.grade(
            [
                str(folder),
                "--no-nbval",
                "--no-perf",
                "--config",
                str(tmp_path / "config.json"),
                "--results",
                str(results),
            ]
        )
        == 0
    )
    data = json.loads(results.read_text())
    assert data["score"] == 0 and "stale" not in data and len(data["tests"]) >= 20, data.get("output")


@pytest.mark.slow
def test_delegating_to_the_kit_earns_nothing(reference):
    sources = dict(reference)
    sources["verify"] = (
        "from specdec_helpers.core.verify import accept_greedy, score_draft\n\n"
        "def accept_draft(self, target_logits, draft_tokens):\n"
        "    r = accept_greedy(target_logits, draft_tokens.reshape(-1))\n"
        "    return r.tokens.tolist(), r.num_accepted\n\n"
        "def verify_tokens_vectorized(self, input_ids, draft_tokens, attention_mask=None):\n"
        "    return self.accept_draft(score_draft(self.target_model, input_ids, draft_tokens), draft_tokens)\n"
    )
    sources["draft"] = (
        "import importlib\n\ndef generate_draft_tokens(self, input_ids, attention_mask=None, "
        "num_speculative_tokens=5):\n    kit = importlib.import_module('specdec_helpers.assignment.parts.decoder')\n"
        "    return kit.STANDINS['generate_draft_tokens'](self, input_ids, attention_mask, "
        "num_speculative_tokens)\n"
    )
    results = grader.run_suite(sources, POINTS, only=["verify", "draft"], seed=0)
    assert sum(r.score for r in results) == 0
    assert any("kit" in r.feedback for r in results if r.item == "verify")
    # No import statement to see (an alias of importlib is seen since issue 34): the child catches the call itself.
    sources["verify"] = (
        "_load = getattr(__builtins__, 'get', lambda *a: None)('__im' 'port__') or "
        "getattr(__builtins__, '__im' 'port__')\n\ndef accept_draft(self, target_logits, draft_tokens):\n"
        "    r = _load('specdec_helpers.core.verify', fromlist=['x']).accept_greedy(target_logits, "
        "draft_tokens.reshape(-1))\n    return r.tokens.tolist(), r.num_accepted\n\n"
        + reference["verify"].split("@torch.inference_mode()")[-1].join(["import torch\n\n@torch.inference_mode()", ""])
    )
    assert cells.kit_references(sources["verify"]) == []
    results = grader.run_suite(sources, POINTS, only=["verify"], seed=0)
    accept = [r for r in results if r.test_id.startswith("verify.accept")]
    # In the sandbox the kit's verify is absent from the child's view (`isolation.least_code`); without one, the
    # child's guard names the delegation.
    absent = "No module named 'specdec_helpers.core.verify'"
    assert all(r.score == 0 and ("kit's own implementation" in r.feedback or absent in r.feedback) for r in accept), (
        accept
    )


@pytest.mark.slow
def test_a_decoder_that_does_not_speculate_earns_no_performance_points(reference):
    sources = dict(reference, decode=GREEDY_LOOP)
    perf = dict(grader.load_config()["performance"], repeats=2, max_new_tokens=32)
    m = speed.measure(sources, reference, perf, seed=0)
    assert not m.speculates and m.acceptance == 0
    scores = {r.item: r.score for r in grader.performance_results(m, grader.load_config())}
    assert scores["speedup"] == 0 and scores["acceptance"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("baseline", ["reference", "greedy"])
def test_memoizing_and_slowing_the_baseline_do_not_help(reference, baseline):
    """Against either baseline (the CPU default, and greedy decoding as on a GPU). Both effects are made
    visible without a clock: a memo hit returns a wrong text (so a hit would show as a difference from
    greedy), and the greedy loop the student patches raises (so greedy run in the student's child would
    fail the measurement). The grader's greedy runs happen in the reference's child, which the student's
    code never reaches, on prompts made at grade time, which no memo knows."""
    memo = reference["decode"].replace("def generate_ids(self, input_ids", "def _unused(self, input_ids") + (
        "\n\n_MEMO = {}\n\n\ndef generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):\n"
        "    key = tuple(input_ids[0].tolist())\n"
        "    type(self).greedy_ids = lambda *a, **k: 1 / 0\n"
        "    if key in _MEMO:\n"
        "        return _MEMO[key].flip(-1)\n"
        "    _MEMO[key] = _unused(self, input_ids, max_tokens, num_speculative_tokens, use_cache)\n"
        "    return _MEMO[key]\n"
    )
    perf = dict(grader.load_config()["performance"], repeats=2, max_new_tokens=32, baseline=baseline)
    assert "generate_ids" in cells.load_functions({"decode": memo})  # the cell runs: no stand-in hides it
    m = speed.measure(dict(reference, decode=memo), reference, perf, seed=1)
    assert m.identical and not m.error and m.detail["baseline"] == baseline  # no memo hit
    assert len(m.detail["greedy_s"]) == (2 if baseline == "greedy" else 0)  # the patched greedy was never run
    # the speedup is the median over the paired runs of baseline time / student time; the detail's times are
    # rounded to 0.1 ms, so the ratios are known to within the bounds that rounding leaves
    base, mine, half = m.detail[f"{baseline}_s"], m.detail["student_s"], 5e-5
    assert len(base) == len(mine) == 2
    low = statistics.median((b - half) / (s + half) for b, s in zip(base, mine))
    high = statistics.median((b + half) / (s - half) for b, s in zip(base, mine))
    assert low <= m.speedup <= high, (m.speedup, base, mine)


def test_performance_scoring_relative_on_cpu_absolute_on_gpu(tmp_path):
    config = grader.load_config()
    score = lambda m: {r.item: r.score for r in grader.performance_results(m, config)}
    assert score(Measurement(0.95, 0.5, reference_acceptance=0.52)) == {"speedup": 10, "acceptance": 10, "bonus": 0}
    assert score(Measurement(0.6, 0.3, reference_acceptance=0.52)) == {"speedup": 0, "acceptance": 0, "bonus": 0}
    assert score(Measurement(1.2, 0.6, speculates=False, reference_acceptance=0.5))["speedup"] == 0
    gpu = dict(device="cuda", baseline="greedy")  # what `speed.baseline_of` picks on a GPU
    assert speed.baseline_of({"baseline": "auto", "preset": "pythia-1.4b/160m"}, "cuda") == "greedy"
    assert speed.baseline_of({}, "cpu") == "reference"
    # the course's offline pairs on a GPU: PA3's 75% bar was set for Pythia; the reference must get full marks
    assert speed.baseline_of({"baseline": "auto", "preset": "toy"}, "cuda") == "reference"
    (tmp_path / "c.json").write_text(json.dumps({"performance": {"baseline": "gredy"}}))
    with pytest.raises(ValueError, match="performance.baseline must be 'auto', 'greedy' or 'reference'"):
        grader.load_config(tmp_path / "c.json")
    assert score(Measurement(1.8, 0.86, detail=gpu)) == {"speedup": 10, "acceptance": 10, "bonus": 5}
    assert score(Measurement(0.99, 0.75, detail=gpu)) == {"speedup": 0, "acceptance": 0, "bonus": 0}
    wrong = grader.performance_results(Measurement(3.0, 0.99, identical=False), config)
    assert all(r.score == 0 and "differs from greedy" in r.feedback for r in wrong if r.status != "skipped")


# --------------------------------------------------------------------------- check and hand-in
