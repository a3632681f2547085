"""Acceptance and cache reuse that the grader measures itself, outside the student's process (issue 43, item 2).

The acceptance scored is the grader's own (`replay.grader_rounds`): the rounds every correct greedy decoder runs
with the course's draft. The rounds the child reports are a consistency check that can only cost points. Whether the
target cache is reused is decided by the child's CPU time, read from outside, never by the child's own counter.
Two of the issue's attacks, in the kit's own words, earn nothing here: acceptance forged only in the timed runs
(`cheat_cells/timed_forger.py`), and a capped position counter (`cheat_cells/capped_counter.py`). Nor does a target
with layers taken out to buy the time (`cheat_cells/skipped_layers.py`): the checks of cost hold the text too.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from specdec_helpers.assignment.grading import grader, scoring, speed
from specdec_helpers.assignment.grading.scoring import Result
from specdec_helpers.assignment.grading.submission import reference_sources
from specdec_helpers.assignment.parts import cells
from specdec_helpers.assignment.testing.replay import check_rounds, grader_rounds
from specdec_helpers.assignment.testing.world import greedy_tokens, world

CHEATS = Path(__file__).parent / "cheat_cells"
CONFIG = grader.load_config()


@pytest.fixture(scope="module")
def reference():
    return reference_sources()


def _honest_log(w, prompt, text, k, n):
    """The rounds a correct decoder reports: the draft model's greedy proposal, verified, one pass each."""
    log, position = [], 0
    while position < n:
        size = max(0, min(k, n - position - 1))
        draft = greedy_tokens(w.draft, prompt.new_tensor([prompt[0].tolist() + text[:position]]), size) if size else []
        m = next((j for j, t in enumerate(draft) if text[position + j] != t), len(draft))
        entry = (text[position : position + m + 1], m)
        log.append(("verify", prompt.shape[1] + position, size, entry, "verify_tokens_cached", draft))
        position += m + 1
    return log + [("generate", len(log), 0, 0)]


def test_the_graders_rounds_are_the_honest_decoders_and_a_folded_log_does_not_add_up():
    """`grader_rounds` (one teacher-forced draft pass) gives what an honest decoder's rounds accept; a log whose
    rounds were merged past their draft no longer adds up (`check_rounds` names it)."""
    w = world(0)
    prompt, k, n = w.prompts[1], 4, 16
    text = greedy_tokens(w.target, prompt, n)
    log = _honest_log(w, prompt, text, k, n)
    honest = check_rounds(w.draft, prompt, text, log, k, n)
    assert not honest.problem and not honest.off_greedy
    assert grader_rounds(w.draft, prompt, text, k, n) == (honest.accepted, honest.proposed)
    verifies = [e for e in log if e[0] == "verify"]
    assert len(verifies) >= 2
    first, second = verifies[0], verifies[1]
    n_merged = first[3][1] + 1 + second[3][1]
    merged = (  # both rounds as one: more tokens accepted than the draft it reports
        "verify",
        first[1],
        first[2],
        (first[3][0] + second[3][0], n_merged),
        first[4],
        text[:n_merged] + [(text[n_merged] + 1) % w.vocab] * max(1, k - n_merged),  # wrong where it stops
    )
    forged = [merged] + verifies[2:] + [("generate", len(verifies) - 1, 0, 0)]
    rounds = check_rounds(w.draft, prompt, text, forged, k, n)
    if n_merged > k:
        assert "not rounds a verification call can return" in rounds.problem, rounds
    else:
        assert rounds.off_greedy and not rounds.problem, rounds  # adds up: the drafting rule below decides
    lying = list(log)
    lying[0] = lying[0][:3] + (([t + 1 for t in first[3][0]], first[3][1]),) + lying[0][4:]
    assert "append exactly the tokens verification returns" in check_rounds(w.draft, prompt, text, lying, k, n).problem


def test_drafts_off_greedy_in_the_timed_runs_cost_the_performance_points_only_where_drafting_passed():
    """One mistake, one loss: a stale draft cache (drafting tests fail) keeps the performance points on the grader's
    acceptance; a decoder whose drafting passed, yet reports off-greedy drafts when timed, told the timed runs apart."""
    m = speed.Measurement(1.0, 0.5, reference_acceptance=0.5, detail={"off_greedy": 3, "reported_acceptance": 0.6})
    stale = {r.item: r.score for r in grader.performance_results(m, CONFIG, drafts_right=False)}
    assert stale["speedup"] == CONFIG["points"]["speedup"] and stale["acceptance"] == CONFIG["points"]["acceptance"]
    told_apart = grader.performance_results(m, CONFIG, drafts_right=True)
    assert all(r.score == 0 for r in told_apart)
    assert all(scoring.OFF_GREEDY in r.feedback and "reported come to 60.0%" in r.feedback for r in told_apart[:2])
    for off, reference_off in ((0, 0), (1, 0), (3, 2)):  # a near-tie in half precision: no more than the reference's
        clean = speed.Measurement(
            1.0, 0.5, reference_acceptance=0.5, detail=dict(off_greedy=off, reference_off_greedy=reference_off)
        )
        assert all(r.passed for r in grader.performance_results(clean, CONFIG, drafts_right=True)[:2]), off


def test_grade_hands_the_drafting_verdict_to_the_performance_items(reference, monkeypatch):
    """`grader.grade` passes whether the drafting tests passed: the rule above is applied in a real grading."""
    off_greedy = speed.Measurement(1.0, 0.5, reference_acceptance=0.5, detail={"off_greedy": 2})
    for drafting, scored in (("passed", 0), ("failed", CONFIG["points"]["acceptance"])):
        tests = [
            Result("draft", "drafts", 5.0 if drafting == "passed" else 0.0, 5.0, drafting, test_id="draft.x"),
            Result("decode", "cached", 2.0, 2.0, "passed", test_id="decode.decode_cached"),
            Result("decode", "verify", 2.0, 2.0, "passed", test_id="decode.verify_cached"),
        ]
        monkeypatch.setattr(grader, "run_suite", lambda *a, tests=tests, **k: list(tests))
        report = grader.grade(reference, reference_sources=reference, measure_fn=lambda *a: off_greedy)
        assert report.find("perf.acceptance").score == scored, report.table()


@pytest.mark.slow
def test_acceptance_forged_only_in_the_timed_runs_earns_no_performance_points(reference):
    """Attack 2: honest in every test (the reference's loop), but when timed (``op_generate`` on the stack) it
    folds its weak rounds into the round before and forges the pass count, so its own rounds claim more than the
    reference's acceptance. The grader's acceptance is its own (exactly the reference's), and the folded rounds'
    drafts are not the draft model's greedy proposals though its drafting passes its tests: no performance point."""
    cheat = reference["decode"] + (CHEATS / "timed_forger.py").read_text()
    assert cells.kit_references(cheat) == []  # nothing the static check sees
    perf = dict(CONFIG["performance"], repeats=2, max_new_tokens=32, warmup=0)
    m = speed.measure(dict(reference, decode=cheat), reference, perf, seed=0)
    assert m.identical and m.speculates and not m.error, m.detail
    assert m.acceptance == m.reference_acceptance > 0  # the grader's number, not the child's
    assert m.detail["reported_acceptance"] > m.reference_acceptance and m.detail["off_greedy"] > 0  # it did forge
    results = grader.performance_results(m, CONFIG, drafts_right=True)
    assert all(r.score == 0 for r in results), [(r.item, r.score) for r in results]
    assert all(scoring.OFF_GREEDY in r.feedback for r in results if r.status != "skipped")


@pytest.mark.slow
def test_patched_position_and_pass_counters_earn_nothing(reference):
    """Attack 4 and its kin: generate_ids forgets both caches every round (the target re-reads the text, and so does
    the draft, openly) and runs the target again after each rejection, and a class body reaches `world.Probe` through
    ``pkgutil.resolve_name`` to count at most 5 positions a pass and none of the extra passes. The child's counters
    agree with one cached pass a round; its CPU time, read from outside, does not: both tests fail, each naming its
    mistake. Graded by those two tests alone, as the mistake catalog is: the part's others decide nothing here."""
    loop = "    while input_ids.shape[1] - prompt_length < max_tokens:\n"
    verify = "        accepted_tokens, accepted_position = verify(input_ids, draft)\n"
    assert loop in reference["decode"] and verify in reference["decode"]
    again = (  # PA3's loop: the target once more after a rejection, hidden from the counter
        "        if accepted_position < draft.shape[1]:\n            _Quiet.hide = True\n"
        "            self.target_model(input_ids=torch.cat([input_ids, draft[:, :accepted_position]], dim=1))\n"
        "            _Quiet.hide = False\n"
    )
    decode = reference["decode"].replace(loop, loop + "        self.reset()\n").replace(verify, verify + again)
    cheat = decode + (CHEATS / "capped_counter.py").read_text()
    assert cells.kit_references(cheat) == []
    named = {"decode.decode_cache_reused", "decode.decode_one_pass"}
    results = grader.run_suite(dict(reference, decode=cheat), CONFIG["points"], only=["decode"], seed=0, ids=named)
    failed = {r.test_id: r.feedback for r in results if not r.passed}
    assert sorted(failed) == ["decode.decode_cache_reused", "decode.decode_one_pass"], failed
    assert all("measured outside your process" in feedback for feedback in failed.values())  # the counters were fooled
    assert "re-reads the whole text" in failed["decode.decode_cache_reused"]
    assert "the target runs again after a rejection" in failed["decode.decode_one_pass"]


@pytest.mark.slow
def test_a_target_with_its_faint_layers_skipped_earns_nothing(reference):
    """Red team A03: generate_ids drops its target cache every round, and on the long prompt of the CPU-time check of
    cache reuse takes the target's faint layers out (`cheat_cells/skipped_layers.py`). With layers that added exactly
    zero it kept the text and bought the time; on `World.live` every layer counts, so its time passes and its text,
    held against the grader's own decoding, does not: that test fails, naming the text (graded by it alone)."""
    verify = "        accepted_tokens, accepted_position = verify(input_ids, draft)\n"
    assert verify in reference["decode"]
    decode = reference["decode"].replace(verify, "        self.target_cache = None\n" + verify)
    cheat = decode + "\n\n" + (CHEATS / "skipped_layers.py").read_text()
    assert cells.kit_references(cheat) == []
    ids = {"decode.decode_cache_reused"}
    results = grader.run_suite(dict(reference, decode=cheat), CONFIG["points"], only=["decode"], seed=0, ids=ids)
    failed = {r.test_id: r.feedback for r in results if not r.passed}
    assert list(failed) == ["decode.decode_cache_reused"], failed
    assert "the output differs from the target's own greedy decoding" in failed["decode.decode_cache_reused"]
    assert "measured outside your process" not in failed["decode.decode_cache_reused"]  # its time passed: control


def _hidden_second_pass(reference) -> str:
    """The reference's verification cell running the target a second time, hidden from the tests' pass counter."""
    line = "    logits = self.target_model(input_ids=torch.cat([input_ids, draft_tokens], dim=1)).logits[0]\n"
    assert line in reference["verify"]
    hidden = (
        "    _Quiet.hide = True\n    self.target_model(input_ids=torch.cat([input_ids, draft_tokens], dim=1))\n"
        "    _Quiet.hide = False\n"
    )
    return reference["verify"].replace(line, line + hidden) + (CHEATS / "capped_counter.py").read_text()


def _the_one_pass_check_fails(reference, cheat: str) -> None:
    """Graded by the test that names it, the verification cell ``cheat`` fails verify_tokens_vectorized's test on its
    CPU time."""
    assert cells.kit_references(cheat) == []
    ids = {"verify.verify_vectorized"}  # graded by the test that names it
    results = grader.run_suite(dict(reference, verify=cheat), CONFIG["points"], only=["verify"], seed=0, ids=ids)
    failed = {r.test_id: r.feedback for r in results if not r.passed}
    assert list(failed) == ["verify.verify_vectorized"], failed
    assert "measured outside your process" in failed["verify.verify_vectorized"]
    assert "runs the target more than once" in failed["verify.verify_vectorized"]


def test_the_graders_own_time_counts_every_thread_of_its_process_as_the_childs_does():
    """The child's CPU time is its whole process's, every torch thread (and its spinning) included; the grader's own
    is counted the same way. On one thread's clock, the reference failed all three checks of cost at
    ``SPECDEC_THREADS=2`` (19.9/45 on an H100, 2026-11-27, and on this CPU): 2.5 times the grader's time."""
    import threading

    from specdec_helpers.assignment.testing import outside

    def busy():  # 0.3 s of CPU in another thread, while the timed thread waits
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass

    def run():
        worker = threading.Thread(target=busy)
        worker.start()
        worker.join()

    seconds, _ = outside.own_seconds(run)
    assert seconds >= 0.25, seconds


def test_no_garbage_collection_counts_in_the_graders_own_time():
    """A full collection of the grader's heap (its test worlds) inside its timed run would count in its time and loosen
    the bound a child is held to: the collector is off while `own_seconds` times, and back on after."""
    import gc

    from specdec_helpers.assignment.testing import outside

    collections = []

    def note(phase, info):
        collections.append(phase)

    def run():  # cycles enough for many collections of the youngest generation, were the collector on; how many ran
        before = len(collections)
        for _ in range(20_000):
            cycle = []
            cycle.append(cycle)
        return gc.isenabled(), len(collections) - before

    gc.callbacks.append(note)
    try:
        _, (enabled, during) = outside.own_seconds(run)
        _, control = run()
    finally:
        gc.callbacks.remove(note)
    assert enabled is False and during == 0 and gc.isenabled()
    assert control > 0, "the control: the same run with the collector on collects"


def test_answers_in_process_run_on_the_childs_torch_threads(monkeypatch):
    """A notebook kernel answers its checks in process (`InProcess`), with its own torch threads (two on Colab), which
    spin 1.6-1.9 times the CPU of one: a correct decoder failed "one target pass" against the grader's own time at
    the child's count. So each answer runs on the child's count (``$SPECDEC_THREADS``, default 1), and the kernel
    keeps its own."""
    from specdec_helpers.assignment.grading.sandbox import InProcess

    seen, threads = [], torch.get_num_threads()
    box = InProcess({})
    monkeypatch.setattr(box.server, "op_threads", lambda: seen.append(torch.get_num_threads()) or "ok", raising=False)
    monkeypatch.delenv("SPECDEC_THREADS", raising=False)
    torch.set_num_threads(2)
    try:
        assert box.request("threads") == "ok" and torch.get_num_threads() == 2
        monkeypatch.setenv("SPECDEC_THREADS", "2")
        torch.set_num_threads(1)
        assert box.request("threads") == "ok" and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert seen == [1, 2]


def test_a_bound_read_outside_is_decided_by_most_of_its_tries():
    """Load moves CPU seconds: a first try clearly within (``EARLY`` times the grader's time) passes; one far over
    (``NO_RETRY`` times its bound) fails; anything between is timed again, each try the child then the grader on an
    input of its own, until most of ``TRIES`` tries agree. One lucky try passed a hidden second pass in CI about once
    in five runs (stop 53); one unlucky try of an honest decoder does not fail it."""
    from specdec_helpers.assignment.testing import outside

    def timer(values):
        values = iter(values)
        return lambda attempt: next(values)

    events = []

    def child(attempt):
        events.append(("child", attempt))
        return [1.2, 1.0][attempt]

    def own(attempt):
        events.append(("own", attempt))
        return 1.0

    # past EARLY, within the bound: timed again, the child then the grader, never on an input seen before (a review: a
    # decoder that memoized its answer passed its retry in no time); two tries within of three decide
    assert outside.within(child, own, 1.5, 0.0) == (True, 1.2, 1.0)
    assert events == [("child", 0), ("own", 0), ("child", 1), ("own", 1)]
    assert outside.within(timer([1.15]), timer([1.0]), 1.5, 0.0) == (True, 1.15, 1.0)  # clearly within: one try
    assert outside.within(timer([1.6, 1.7]), timer([1.0, 1.0]), 1.5, 0.0) == (False, 1.7, 1.0)  # two over: decided
    assert outside.within(timer([1.62, 1.0, 1.0]), timer([1.0] * 3), 1.5, 0.0) == (True, 1.0, 1.0)  # unlucky first
    # a hidden second pass (twice the grader's time) with one lucky try, which the old rule (any try) passed ...
    assert outside.within(timer([2.0, 1.4, 2.0]), timer([1.0] * 3), 1.5, 0.0) == (False, 2.0, 1.0)
    # ... and an honest decoder with one unlucky try, which a rule on the sums of the times failed
    assert outside.within(timer([1.4, 2.3, 1.2]), timer([1.0] * 3), 1.5, 0.0) == (True, 1.4, 1.0)
    assert outside.within(timer([1.6, 1.6]), timer([1.0] * 2), 1.5, 0.1) == (True, 1.6, 1.0)  # the slack counts
    # a later try's grader time counts at most LOAD_ROOM times the first's, however slow the grader was around it
    assert outside.within(timer([1.6, 3.3, 3.3]), timer([1.0, 3.0, 3.0]), 1.5, 0.0) == (False, 3.3, 2.0)
    # a first try over NO_RETRY times its bound is not retried
    tries, over = [], outside.NO_RETRY * 1.6 + 0.01
    assert outside.within(lambda i: tries.append(i) or over, lambda i: 1.0, 1.5, 0.1) == (False, over, 1.0)
    assert tries == [0]
    under = outside.NO_RETRY * 1.5 - 0.01  # just under: timed again
    assert outside.within(timer([under, 1.0, 1.0]), timer([1.0] * 3), 1.5, 0.0) == (True, 1.0, 1.0)
    texts, others = outside.random_texts(50, 12), outside.random_texts(50, 12)  # a secret each: never the world's
    assert torch.equal(texts(1), texts(1)) and not torch.equal(texts(0), texts(1)) and texts(2).shape == (1, 12)
    assert not torch.equal(texts(0), others(0))


def test_the_child_is_stopped_while_the_grader_times_itself():
    """A child that keeps processes busy between its requests (where its own time is not read) would slow the
    grader's measurement and loosen its own bound: the child and its jail are stopped while the grader times itself,
    and go on afterwards, also when the timing fails."""
    from specdec_helpers.assignment.testing import outside

    events = []

    class Child:
        def pause(self):
            events.append("pause")

        def resume(self):
            events.append("resume")

    results = iter([1.5, RuntimeError("the grader's own run failed")])

    def own(attempt):
        events.append(("own", attempt))
        result = next(results)
        if isinstance(result, Exception):
            raise result
        return result

    timed = outside.stopped(Child(), own)
    assert timed(0) == 1.5 and events == ["pause", ("own", 0), "resume"]
    with pytest.raises(RuntimeError):
        timed(1)
    assert events[3:] == ["pause", ("own", 1), "resume"]


def test_the_graders_time_is_two_runs_the_first_time_then_one_and_the_first_result_is_kept():
    """The first measurement is the faster of two runs (the first may pay one-time costs) and keeps its result for
    the checks of what the child returned; each later one is one run, returned as it is, whatever came before."""
    from specdec_helpers.assignment.testing import outside

    costs = iter([0.4, 0.2, 0.8, 0.05])  # CPU seconds of each run

    def run():
        cost = next(costs)
        end = time.process_time() + cost
        while time.process_time() < end:
            pass
        return cost

    store = {}
    first = outside.own_seconds_keeping(store, "k", run)  # runs 0.4 and 0.2: the faster
    assert 0.2 <= first < 0.4 and store["k"] == 0.2
    loaded = outside.own_seconds_keeping(store, "k", run)  # one run, 0.8: returned as measured
    assert loaded >= 0.8
    quiet = outside.own_seconds_keeping(store, "k", run)  # one run, 0.05
    assert quiet < first and store == {"k": 0.2}  # the first result stays
    assert next(costs, None) is None  # four runs in all


@pytest.mark.slow
def test_a_second_pass_that_answers_a_retry_from_memory_earns_nothing(reference):
    """The same patched counter, in the verification cell: verify_tokens_vectorized runs the target twice and hides
    the second pass from `world.Probe`; the child's count says one pass, its CPU time, read from outside, says two.
    With a memo: an input seen before is answered from memory, in no time. When every try of the check of cost ran on
    the same text, the first try failed and the retry passed (a review of stop 49); each try now has its own text, so
    the memo never answers and this is the hidden pass alone, graded once for both."""
    memo = (
        "\n\n_memo, _computed = {}, verify_tokens_vectorized\n\n\n"
        "def verify_tokens_vectorized(self, input_ids, draft_tokens, attention_mask=None):\n"
        "    key = (tuple(input_ids.flatten().tolist()), tuple(draft_tokens.flatten().tolist()))\n"
        "    if key not in _memo:\n"
        "        _memo[key] = _computed(self, input_ids, draft_tokens, attention_mask)\n"
        "    return _memo[key]\n"
    )
    _the_one_pass_check_fails(reference, _hidden_second_pass(reference) + memo)


def test_a_verification_is_held_against_the_graders_pass_up_to_a_near_tie_only():
    """`outside.same_pass`: the accepted tokens and count one pass gives; another answer only where that pass's top
    two logits are a numerical near-tie, and then only with the runner-up."""
    from specdec_helpers.assignment.testing import outside

    logits = torch.zeros(1, 6, 8)  # a 2-token text and a 4-token draft: rows 1..5 judge the draft and give the bonus
    for row, token in zip(range(1, 6), (3, 4, 5, 6, 7)):
        logits[0, row, token] = 1.0
    draft = [3, 4, 1, 6]
    assert outside.same_pass(logits, draft, ([3, 4, 5], 2)) == (True, ([3, 4, 5], 2))
    assert outside.same_pass(logits, draft, ([3, 4, 1, 6, 7], 4))[0] is False  # a model that judged otherwise
    logits[0, 3, 1] = 1.0 - 1e-5  # a near-tie at the draft's third token: accepting it is a greedy choice too
    assert outside.same_pass(logits, draft, ([3, 4, 1, 6, 7], 4))[0] is True
    assert outside.same_pass(logits, draft, ([3, 4, 2], 2))[0] is False  # not one of the two tied
