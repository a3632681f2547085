"""CPU time read from outside the student's process, held against the grader's own: the verdicts no counter in
the child can forge (`suite._one_pass_outside`; `suite_decode._live_against_own`, for `_cache_reused_outside` and
`_one_pass_outside`).

CPU seconds move with the machine's load even for the same work (a busy sibling hyperthread, a cold cache), and the
child and the grader are timed one after the other. So a bound is tried up to ``TRIES`` times, each time timing
the child again (on another input) and the grader afresh, and only a decoder over the bound on every try fails:
an honest decoder (ratio about 1) must be unlucky ``TRIES`` times in a row, a mistake (twice the passes or more) is
over it each time. Only failing decoders pay for the extra tries, and not one over ``NO_RETRY`` times its bound.

Time alone can be bought by changing the model: a layer that adds exactly zero can be found and skipped (red team,
2026-11-27). So these checks run `World.live`, whose every layer changes the logits, and hold what the child returns
against the grader's own run of it (`expect_own_texts`, `same_pass`)."""

from __future__ import annotations

import gc
import secrets
import time
from collections.abc import Callable

import torch

from specdec_helpers.assignment.testing.cases import expect_greedy, first_difference
from specdec_helpers.core.timing import child_threads
from specdec_helpers.core.checks import NEAR_TIE, greedy_divergence

TRIES = 3
LOAD_ROOM = 2.0  # how much looser than the first try's bound a retry's may be, whatever load it shares
NO_RETRY = 3.0  # a first try over this many times its bound is not retried: no load seen came near it


def stopped(child, own_seconds: Callable[[int], float]) -> Callable[[int], float]:
    """``own_seconds`` run with ``child`` stopped (`Child.pause`: as root, every process of the student's user; in
    bubblewrap alone, the processes of its namespace; else its process group): a child that keeps processes busy
    between its requests, where its own time is not read, cannot load the machine while the grader times itself."""

    def timed(attempt: int) -> float:
        child.pause()
        try:
            return own_seconds(attempt)
        finally:
            child.resume()

    return timed


def within(
    child_seconds: Callable[[int], float], own_seconds: Callable[[int], float], margin: float, slack: float
) -> tuple[bool, float, float]:
    """``(ok, used, own)``: whether the child's time stayed under ``margin * own + slack`` on some try, with the
    last try's times. Try ``i`` runs on the caller's ``i``-th input (``child_seconds(i)``, ``own_seconds(i)``): a
    decoder over the bound cannot answer a retry from what it computed on an earlier try (a review found that one
    that memoized its answer passed its second try in no time). Each try holds the child against the grader's time
    for the same input measured right after it (a retry: the faster of the grader's times just before and just after
    it), so that both share the machine's load of their moment. Against a time kept from an earlier, busier moment, a
    second verification pass once passed (CI, three workers on two cores); against one kept from a quieter moment,
    CI once failed an honest decoder on all three tries (1.63 s against a bound of 1.04 s; about 0.55 s alone). A
    retry must also stay within ``LOAD_ROOM`` times the first bound: load that starts after the first try and slows
    the grader's timings (three busy loops let PA3's second pass through once) cannot loosen the bound further. A
    first try over ``NO_RETRY`` times its bound is not retried: load would have to slow the child NO_RETRY times more
    than the grader's run right after it, where the reference's first tries stayed at 0.30-0.78 of their bound (35
    checks, sandboxed, load 4-9, three busy torch loops beside 20 of them) and CI's worst seen was 1.57; a decoder
    that forgets its target cache is at about 3.7, so it is timed once, not three times."""
    used = child_seconds(0)
    own = own_seconds(0)
    ceiling = LOAD_ROOM * (margin * own + slack)
    if used > NO_RETRY * (margin * own + slack):  # far over: not load's doing
        return False, used, own
    for attempt in range(1, TRIES):
        if used <= min(margin * own + slack, ceiling):
            return True, used, own
        before = own_seconds(attempt)
        used = child_seconds(attempt)
        own = min(before, own_seconds(attempt))
    return used <= min(margin * own + slack, ceiling), used, own


def random_texts(vocab: int, length: int) -> Callable[[int], torch.Tensor]:
    """Try ``i``'s input for `within`, each try its own: ``length`` random token ids drawn from a secret of this call
    (not the world's seed, which every request carries: from it a graded cell could work the texts out, and run the
    passes ahead, while the grader does not time it)."""
    secret = secrets.randbits(62)
    return lambda i: torch.randint(3, vocab, (1, length), generator=torch.Generator().manual_seed(secret + 1009 * i))


def own_seconds_keeping(store: dict, key, run: Callable[[], object]) -> float:
    """The grader's CPU time for ``run`` (`own_seconds`), measured afresh at each call: the faster of two runs the
    first time for ``key`` (which pays the one-time costs), keeping what ``run`` returned in ``store[key]`` for the
    checks of what the child returned; one run after that."""
    if key not in store:
        seconds, store[key] = own_seconds(run)
        return seconds
    return own_seconds(run, runs=1)[0]


def own_seconds(run: Callable[[], object], runs: int = 2) -> tuple[float, object]:
    """``(seconds, result)``: the grader's CPU time for ``run()`` with the child's threads, the fastest of ``runs`` runs
    (the first may pay one-time costs), and what it returned. Counted over every thread of this process, as the
    child's is over its whole process tree: with more than one torch thread the others' work (and their spinning) is
    in the child's time too, and one thread's clock held a correct decoder at 2 threads to 2.5 times the grader's
    (an H100 run, ``SPECDEC_THREADS=2``). The garbage collector is off while timed: the grader's process holds the
    test worlds (390k objects with one loaded), whose full collection took 0.24 s beside 0.42-0.48 s for the
    verification pass on `World.live`; one counted in the grader's time would loosen the bound a child is held to."""
    own, out = float("inf"), None
    for _ in range(runs):
        collecting = gc.isenabled()
        gc.disable()
        try:
            start = time.process_time()
            with torch.inference_mode(), child_threads():  # the child's threads
                out = run()
            own = min(own, time.process_time() - start)
        finally:
            if collecting:
                gc.enable()
    return own, out


def expect_own_texts(model, prompt: torch.Tensor, texts: list, want: list[int], what: str) -> None:
    """Each of ``texts`` (the child's decodings) is ``want`` (the grader's own of ``model``), up to numerical near-ties
    (`greedy_divergence`: in fp32 about none): a decoder that bought its time by skipping layers writes another text."""
    for got in texts:
        if got != want and not greedy_divergence(model, prompt, got, want=want)[0]:
            expect_greedy(got, want, what)


def same_pass(logits: torch.Tensor, draft: list[int], got: tuple[list[int], int]) -> tuple[bool, tuple[list[int], int]]:
    """``(ok, want)``: ``want`` is what one pass with ``logits`` (over the text and ``draft``) verifies, the accepted
    tokens with the correction or bonus token and the accepted count; ``ok`` if ``got`` is it, or differs first at a
    numerical near-tie of that pass (the child's kernels may round differently), with either top token."""
    rows = logits[0, -len(draft) - 1 :].float()
    top = rows.argmax(-1).tolist()
    n = next((j for j, (a, b) in enumerate(zip(draft, top)) if a != b), len(draft))
    want = (top[: n + 1], n)
    if got == want:
        return True, want
    i = first_difference(got[0], want[0])
    if i >= len(rows) or i >= len(got[0]):
        return False, want
    values, indices = rows[i].topk(2)
    return float(values[0] - values[1]) <= NEAR_TIE[torch.float32] and got[0][i] in indices.tolist(), want
