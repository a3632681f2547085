"""CPU time read from outside the student's process, held against the grader's own: the verdicts no counter in
the child can forge (`suite._one_pass_outside`; `suite_decode._live_against_own`, for `_cache_reused_outside` and
`_one_pass_outside`).

CPU seconds move with the machine's load even for the same work (a busy sibling hyperthread, a cold cache), and the
child and the grader are timed one after the other. So a decoder not clearly within its bound on a first try is
timed again, each time on another input and beside a fresh timing of the grader, and most tries decide (`within`):
an honest decoder (ratio about 1) must be slowed alone on most tries to fail, a mistake (twice the passes or more)
must be sped up alone on most tries to pass. Only decoders past ``EARLY`` times the grader's time on their first try
pay for the extra tries, and not one over ``NO_RETRY`` times its bound.

These checks catch a decoder that runs more passes than it says, as PA3's did. One that hides extra passes on
purpose, only in calls that are not timed, gets through: the timed calls can be told apart (`live`, random texts),
and the pass counter can be patched. Timing every call from outside would close that; these time only their own.

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

TRIES = 3  # a decoder not clearly within its bound at once is timed up to this many times, and most tries decide
EARLY = 1.15  # a first try within this many times the grader's time passes at once
LOAD_ROOM = 2.0  # a later try's grader time counts at most this many times the first try's, whatever load it shares
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
    """``(ok, used, own)``: whether the child's CPU time stayed within ``margin`` times the grader's own plus ``slack``
    on most tries, with the times of the middle try (the worse of two; the only one). Try ``i`` times the child on
    the caller's ``i``-th input, then the grader on the same input, so that both share the load of their moment; each
    try has its own input, so a decoder cannot answer a retry from memory (a review found one that memoized its
    answer passed in no time).

    A first try within ``EARLY`` times the grader's time passes: honest decoders' tries were at 0.75-1.35 times but
    one at 1.62 (122 tries, three gradings at once on two cores, stop 54). One over ``NO_RETRY`` times its bound
    fails (a decoder that forgets its target cache: 3.7 times its bound). Anything between is timed again until most
    of ``TRIES`` tries are within the bound or most are over it: past the first, one lucky or unlucky try decides
    nothing. The rule this replaced passed on any one try within the bound: hidden second passes came in at 1.28-2.57
    times the grader's time (114 tries), and CI saw one pass that way in about one run in five. A later try's grader
    time counts at most ``LOAD_ROOM`` times the first try's: load that starts after the first try cannot loosen the
    bound much."""
    used, own = child_seconds(0), own_seconds(0)
    if used <= EARLY * own:
        return True, used, own
    if used > NO_RETRY * (margin * own + slack):  # far over: not load's doing
        return False, used, own
    first, tries = own, [(used, own)]
    within_bound = [used <= margin * own + slack]
    while len(tries) < TRIES and max(within_bound.count(True), within_bound.count(False)) * 2 <= TRIES:  # no majority
        used = child_seconds(len(tries))
        own = min(own_seconds(len(tries)), LOAD_ROOM * first)
        tries.append((used, own))
        within_bound.append(used <= margin * own + slack)
    used, own = sorted(tries, key=lambda t: t[0] - margin * t[1])[len(tries) // 2]
    return within_bound.count(True) * 2 > TRIES, used, own


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
