"""The grader is fair to correct work and exact for the reference (issue 25, item 6), its tests are data,
and whatever it judges it picks at grade time or observes itself (item 3)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch
from full_marks import full_marks

from specdec_helpers.assignment.authoring import release
from specdec_helpers.assignment.grading import grader, speed
from specdec_helpers.assignment.testing import cases, replay, suite, suite_decode, world
from specdec_helpers.assignment.grading.submission import reference_sources

POINTS = grader.load_config()["points"]
GRADING = Path(grader.__file__).parent
TESTING = Path(suite.__file__).parent


@pytest.fixture(scope="module")
def reference():
    return reference_sources()


# --------------------------------------------------------------------------- points and tests as data


@pytest.mark.parametrize(
    "points, weights",
    [
        (5, [2, 2, 1, 1]),
        (10, [2, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1]),
        (10, [1] * 3),
        (7.5, [3, 1, 1]),
        (0, [1, 2]),
        (1, [1] * 7),
    ],
)
def test_a_part_split_by_weights_adds_up_exactly(points, weights):
    shares = grader.split_points(points, weights)
    assert grader.exact_sum(shares) == points and all(round(s, 3) == s for s in shares)
    assert all(abs(s - points * w / sum(weights)) < 0.001 for s, w in zip(shares, weights))


def test_full_marks_add_up_to_the_maximum_exactly():
    report = grader.Report(full_marks(POINTS))
    assert report.score == report.max_score == 25
    assert grader.exact_sum([t["score"] for t in report.gradescope()["tests"]]) == 25


def test_tests_are_listed_as_data_and_the_hidden_ones_are_stripped_from_the_kit():
    assert isinstance(grader.TESTS, tuple) and all(isinstance(t, cases.TestCase) for t in grader.TESTS)
    assert grader.TESTS == suite.TESTS + suite_decode.TESTS
    assert len({t.id for t in grader.TESTS}) == len(grader.TESTS)
    assert {t.part for t in grader.TESTS} == set(grader.EXERCISES)
    assert "noqa: F401 - suite_decode registers" not in (GRADING / "grader.py").read_text()
    for module, tests in (("suite.py", suite.TESTS), ("suite_decode.py", suite_decode.TESTS)):
        released = release.strip((TESTING / module).read_text())
        listing = released[released.index("TESTS = (") :]
        entry = (
            r'TestCase\(\s*"[^"]*",\s*"[^"]*",\s*\d+,\s*(\w+)(?:,\s*hidden=True)?,?\s*\)'  # part, title, points, body
        )
        listed = set(re.findall(entry, listing))
        assert listed == {t.body.__name__ for t in tests if not t.hidden}, module
        for t in tests:
            assert (f"def {t.body.__name__}(ctx)" in released) is not t.hidden, (module, t.id)


# --------------------------------------------------------------------------- the student kit's grade


def test_grade_in_the_student_kit_awards_no_points_measured_against_itself(reference):
    """Released notebooks carry no solution markers: `grade` says it cannot measure, and never times."""
    student_own = {part: release.strip(source) for part, source in reference.items()}
    assert grader.holds_reference(reference) and not grader.holds_reference(student_own)
    assert not grader.holds_reference(None) and not grader.holds_reference({})

    def never(*args):
        raise AssertionError("measured against the student's own notebooks")

    report = grader.grade({}, reference_sources=student_own, measure_fn=never)
    perf = [r for r in report.results if r.item in ("speedup", "acceptance", "bonus")]
    assert perf and all(
        r.score == 0 and r.status == "skipped" and "holds no reference solution" in r.feedback for r in perf
    )


# --------------------------------------------------------------------------- rounds a decoder may take

ANOTHER_ROUND_STRUCTURE = '''
import torch
from specdec_helpers.core.cache import cache_length, crop_cache, new_cache


@torch.inference_mode()
def verify_tokens_cached(self, input_ids, draft_tokens, attention_mask=None):
    if self.target_cache is None:
        self.target_cache = new_cache(self.target_model)
    cache = self.target_cache
    start, k = input_ids.shape[1], draft_tokens.shape[1]
    fed = torch.cat([input_ids[:, cache_length(cache):], draft_tokens], dim=1)
    logits = self.target_model(input_ids=fed, cache=cache, use_cache=True).logits[0]
    accepted_tokens, accepted_position = self.accept_draft(logits[-(k + 1):], draft_tokens)
    crop_cache(cache, start + accepted_position)
    return accepted_tokens, accepted_position


@torch.inference_mode()
def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
    """Correct, but its rounds differ from the reference's: no draft call when there is room for no
    draft token (it verifies an empty draft), and the counters kept in locals."""
    self.reset()
    verify = self.verify_tokens_cached if use_cache else self.verify_tokens_vectorized
    generated, proposed, accepted = [], 0, 0
    while len(generated) < max_tokens:
        room = max_tokens - len(generated) - 1
        text = torch.cat([input_ids, input_ids.new_tensor([generated])], dim=1) if generated else input_ids
        if room > 0:
            draft = self.generate_draft_tokens(text, None, min(num_speculative_tokens, room))
        else:
            draft = input_ids.new_zeros(1, 0)
        tokens, n = verify(text, draft)
        proposed, accepted = proposed + draft.shape[1], accepted + n
        for token in tokens:
            generated.append(token)
            if token == self.eos_token_id:
                break
        if generated[-1] == self.eos_token_id:
            break
    self.stats = {"proposed": proposed, "accepted": accepted, "new_tokens": len(generated)}
    return torch.cat([input_ids, input_ids.new_tensor([generated])], dim=1)
'''

REPORTS_ONLY_WHAT_PASSES = '''
@torch.inference_mode()
def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
    """Learns each verdict with a target pass the grader does not see, then verifies only the accepted
    prefix: every reported draft token is accepted."""
    self.reset()
    start = input_ids.shape[1]
    stats = {"proposed": 0, "accepted": 0}
    while input_ids.shape[1] - start < max_tokens:
        room = max_tokens - (input_ids.shape[1] - start) - 1
        draft = self.generate_draft_tokens(input_ids, None, min(num_speculative_tokens, room))
        logits = self.target_model(input_ids=torch.cat([input_ids, draft], dim=1)).logits[0]
        n = self.accept_draft(logits[input_ids.shape[1] - 1:], draft)[1]
        tokens, n = self.verify_tokens_cached(input_ids, draft[:, :n])
        stats["proposed"] += n
        stats["accepted"] += n
        input_ids = torch.cat([input_ids, input_ids.new_tensor([tokens])], dim=1)
        if tokens[-1] == self.eos_token_id:
            break
    self.stats = stats
    return input_ids
'''


@pytest.mark.slow
def test_a_correct_decoder_with_another_round_structure_gets_full_marks(reference):
    """Issue 25: a correct decoder that skipped the last round's draft call lost 20 of 45 points."""
    sources = dict(reference, decode=ANOTHER_ROUND_STRUCTURE)
    results = grader.run_suite(sources, POINTS, only=["decode"], seed=0)
    assert all(r.passed for r in results), [(r.test_id, r.feedback) for r in results if not r.passed]
    assert grader.exact_sum([r.score for r in results]) == POINTS["decode"]
    perf = dict(grader.load_config()["performance"], repeats=2, max_new_tokens=21, warmup=0)
    m = speed.measure(sources, reference, perf, seed=0)
    assert m.identical and m.speculates, m.detail
    assert m.acceptance == m.reference_acceptance > 0  # the same rounds: the grader's replay, not the decoder's word
    assert m.detail["off_greedy"] == 0 and m.detail["reported_acceptance"] == round(m.acceptance, 4)  # consistent


@pytest.mark.slow
def test_a_decoder_that_reports_only_what_passes_is_caught(reference):
    """Graded by the one test that must name it (as the mistake catalog is): the part's others, and their checks of
    cost, decide nothing asserted here."""
    cached_verify = reference["decode"].split("@torch.inference_mode()\ndef generate_ids")[0]
    sources = dict(reference, decode=cached_verify + REPORTS_ONLY_WHAT_PASSES)
    (rounds_test,) = grader.run_suite(sources, POINTS, only=["decode"], seed=0, ids={"decode.decode_rounds"})
    assert not rounds_test.passed and (
        "draft num_speculative_tokens tokens each round" in rounds_test.feedback
        or "it ran outside self.verify_tokens_cached" in rounds_test.feedback
    ), rounds_test
    perf = dict(grader.load_config()["performance"], repeats=2, max_new_tokens=32, warmup=0)
    m = speed.measure(sources, reference, perf, seed=1)
    assert m.identical and not m.speculates and m.acceptance == 0, m.detail


def test_round_rule_is_stated_and_names_the_cause():
    assert "ONE call of self.verify_tokens_cached" in replay.ROUND_RULE and replay.ROUND_RULE in replay.__doc__


# --------------------------------------------------------------------------- picked at grade time


@pytest.mark.slow
def test_timed_prompts_are_made_at_grade_time():
    pair = speed.load_pair("toy", progress=False)
    public = [pair.encode(text)[0].tolist() for text in speed.prompts_for(pair)]
    first = speed.fresh_prompts(pair, 6, random.Random(1))
    again = speed.fresh_prompts(pair, 6, random.Random(1))
    other = speed.fresh_prompts(pair, 6, random.Random(2))
    assert all(torch.equal(a, b) for a, b in zip(first, again))  # reproducible from the grader's seed only
    assert [p.tolist() for p in first] != [p.tolist() for p in other]
    for ids in first:
        text = ids[0].tolist()
        # not a piece of a public prompt: its last tokens were sampled from the target
        assert not any(any(p[i : i + len(text)] == text for i in range(len(p))) for p in public)


@pytest.mark.slow
def test_the_test_world_looks_like_the_timed_pair():
    """A decoder that checks vocabulary, config, tokenizer or layer classes cannot tell a test from a timed run."""
    pair = speed.load_pair("toy", progress=False)
    tiny = world.World(3)
    for mine, timed in ((tiny.target, pair.target), (tiny.draft, pair.draft), (tiny.other, pair.draft)):
        assert type(mine) is type(timed)
        assert mine.config.to_dict() == timed.config.to_dict()
        assert [type(m).__name__ for m in mine.modules()] == [type(m).__name__ for m in timed.modules()]
        assert not torch.equal(next(mine.parameters()), next(timed.parameters()))  # its weights are the grader's
    assert tiny.tokenizer.get_vocab() == pair.tokenizer.get_vocab() and tiny.vocab == len(pair.tokenizer)


def test_an_item_not_measured_is_not_reported_as_failed_to_gradescope():
    """The bonus on a CPU preset is skipped: Gradescope gets no 'failed' status for it, and its name says why."""
    report = grader.Report(
        [
            grader.Result("bonus", "speedup >= 1.7x", 0.0, 5.0, "skipped", "not measured on CPU"),
            grader.Result("speed", "speedup", 0.0, 10.0, "failed", "too slow"),
        ]
    )
    bonus, speed = report.gradescope()["tests"]
    assert "status" not in bonus and "not measured" in bonus["name"] and bonus["output"] == "not measured on CPU"
    assert speed["status"] == "failed"
