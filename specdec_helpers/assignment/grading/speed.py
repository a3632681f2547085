"""Speed and acceptance, measured by the grader from outside the student's process.

The student's decoder and the reference solution run in two children on the course pair; the speed
item compares the student's time with the reference's (CPU presets) or with greedy decoding, run by
the kit in the reference's child (GPU presets: PA3's bars are speedups over greedy). Each
timed run uses a prompt picked at grade time and never used before in this grading (memoizing
outputs cannot help); the runs alternate (reference, student, student, reference, ...) and the
child that is not being timed is paused (SIGSTOP) so it cannot steal the CPU. Time is the wall
time from sending the request to receiving the answer. Every timed output is compared with greedy
decoding that the grader computed itself. Acceptance is the grader's: it replays the draft's greedy
proposals on the rounds the student's decoder reported and rejects reports that do not match.
"""
from __future__ import annotations

import contextlib
import os
import random
import statistics
from dataclasses import dataclass, field

import torch

from specdec_helpers.assignment.grading.child import encode
from specdec_helpers.assignment.grading.sandbox import Child, ChildFailed, StudentError
from specdec_helpers.core.checks import greedy_divergence
from specdec_helpers.core.decode import greedy_decode
from specdec_helpers.core.drafters import ModelDrafter
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.present.notebook import prompts_for


@dataclass
class Measurement:
    """What the performance items are graded on (tests inject these; the grader measures them)."""

    speedup: float  # median of paired runs: baseline time / student time (`baseline_of`: greedy or the reference)
    acceptance: float  # accepted / proposed draft tokens, replayed by the grader
    identical: bool = True  # every timed output equal to the target's greedy output
    speculates: bool = True  # the reported rounds match the replay (a decoder that does not speculate: False)
    reference_acceptance: float = 0.0
    detail: dict = field(default_factory=dict)
    error: str = ""


def fresh_prompts(pair, n: int, rng: random.Random) -> list[torch.Tensor]:
    """``n`` distinct prompts: prefixes of random length of the preset's prompts, each used once."""
    pool = []
    for text in prompts_for(pair):
        ids = pair.encode(text)
        low = max(3, ids.shape[1] // 2)
        pool += [ids[:, :length] for length in range(low, ids.shape[1] + 1)]
    rng.shuffle(pool)
    if len(pool) < n:
        raise ValueError(f"only {len(pool)} distinct prompts for {n} timed runs; lower performance.repeats")
    return pool[:n]


def replay(pair, ids: torch.Tensor, output: list[int], log: list) -> tuple[int, int, str]:
    """``(accepted, proposed, problem)`` from the rounds a decoder reported, checked against the
    grader's own replay: each round's draft must be the draft's greedy continuation of the text so
    far, its accepted count the matching prefix with the target's output, and the rounds must tile
    the output. ``problem`` is empty when the report holds."""
    rounds = [entry for entry in log if entry[0] == "verify"]
    drafts = [entry for entry in log if entry[0] == "draft"]
    if not rounds or len(drafts) != len(rounds):
        return 0, 0, "no draft-and-verify rounds observed: the decoder does not speculate"
    text = ids[0].tolist() + output
    drafter = ModelDrafter(pair.draft)
    position, accepted, proposed = ids.shape[1], 0, 0
    for (_, length, k, result), (_, _, _, proposal) in zip(rounds, drafts):
        if length != position:
            return 0, 0, f"a round started at position {length}, expected {position}: rounds do not tile the output"
        want = drafter.propose(torch.tensor([text[:position]]), k).tokens.tolist() if k else []
        if list(proposal) != want:
            return 0, 0, "a reported draft is not the draft model's greedy proposal"
        n = next((j for j, token in enumerate(want) if position + j >= len(text) or text[position + j] != token), len(want))
        try:
            reported = int(result[1])
        except (TypeError, ValueError, IndexError):
            return 0, 0, "a verification result is not (accepted_tokens, accepted_position)"
        if reported != n:
            return 0, 0, f"a round reported {reported} accepted draft tokens where {n} matched the target"
        accepted, proposed, position = accepted + n, proposed + k, position + n + 1
    return accepted, proposed, ""


def _timed(child: Child, other: Child, op: str, **request):
    import time

    other.pause()
    try:
        start = time.perf_counter()
        answer = child.request(op, **request)
        seconds = time.perf_counter() - start
    finally:
        other.resume()
    return answer, seconds


def baseline_of(perf: dict, device: str) -> str:
    """What the speed item compares with: ``perf['baseline']``, or with 'auto' greedy decoding on a GPU
    (PA3's bars are speedups over it) and the reference solution on a CPU (where speculation gains
    little, so only a side-by-side comparison with the reference is fair)."""
    baseline = perf.get("baseline", "auto")
    if baseline not in ("auto", "greedy", "reference"):
        raise ValueError(f"performance.baseline must be 'auto', 'greedy' or 'reference', got {baseline!r}")
    return ("reference" if device == "cpu" else "greedy") if baseline == "auto" else baseline


def measure(student_sources: dict, reference_sources: dict, perf: dict, *, seed: int | None = None,
            timeout: float = 120) -> Measurement:
    """Time the student's decoder against the reference on the course pair (see the module's doc), with
    as many torch threads here as in the children (``$SPECDEC_THREADS``, default 1): the grader's own
    greedy decoding and replay took 25x longer with two threads on a shared 2-core machine."""
    with grader_threads():
        return _measure(student_sources, reference_sources, perf, seed, timeout)


@contextlib.contextmanager
def grader_threads():
    """Torch threads as in the student's child (``$SPECDEC_THREADS``, default 1) while grading, then back."""
    threads = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("SPECDEC_THREADS", "1")))
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _measure(student_sources: dict, reference_sources: dict, perf: dict, seed, timeout) -> Measurement:
    rng = random.Random(seed)
    pair = load_pair(perf["preset"], progress=False)
    k = perf.get("num_speculative_tokens") or pair.num_speculative_tokens
    n_new, repeats = perf["max_new_tokens"], perf["repeats"]
    baseline = baseline_of(perf, torch.device(pair.device).type)
    prompts = fresh_prompts(pair, repeats + perf["warmup"], rng)
    expected = [greedy_decode(pair.target, p, max_new_tokens=n_new, eos_token_id=None).sequences[0, p.shape[1]:].tolist()
                for p in prompts]
    students = reference = None
    try:
        reference, students = Child(reference_sources, trusted=True), Child(student_sources)
        handles = {c: c.request("pair", timeout=timeout, preset=perf["preset"]) for c in (reference, students)}
        times = {"reference": [], "student": [], "greedy": []}
        identical, totals, problems = True, {"reference": [0, 0], "student": [0, 0]}, {}
        for run in range(repeats + perf["warmup"]):
            order = [("reference", reference, students), ("student", students, reference)]
            if run % 2:
                order.reverse()
            for who, child, other in order:
                ids = prompts[run]  # the same fresh prompt for both: paired runs, comparable acceptance
                answer, seconds = _timed(child, other, "generate", timeout=timeout, handle=handles[child],
                                         ids=encode(ids), max_tokens=n_new, k=k)
                out = answer["result"]
                got = out[0, ids.shape[1]:].tolist() if isinstance(out, torch.Tensor) and out.dim() == 2 else None
                want = expected[run]
                if got is not None and got != want and not _stopped_at_eos(got, want, pair):
                    # in half precision a divergence is right only at a numerical near-tie of the target
                    got = got if greedy_divergence(pair.target, ids, got, want=want)[0] else None
                if got is None:
                    identical &= who == "reference"
                    problems.setdefault(who, "an output differs from greedy decoding")
                    continue
                accepted, proposed, problem = replay(pair, ids, got, answer["log"])
                if problem:
                    problems.setdefault(who, problem)
                totals[who][0] += accepted
                totals[who][1] += proposed
                if run >= perf["warmup"]:
                    times[who].append(seconds)
            if baseline == "greedy":  # the kit's greedy loop, in the reference's child, on the same prompt
                answer, seconds = _timed(reference, students, "greedy", timeout=timeout, handle=handles[reference],
                                         ids=encode(prompts[run]), max_tokens=n_new)
                if run >= perf["warmup"]:
                    times["greedy"].append(seconds)
    except (ChildFailed, StudentError) as error:
        return Measurement(0.0, 0.0, False, False, error=f"measuring failed: {error}")
    finally:
        for child in (students, reference):
            if child is not None:
                child.close()
    if "reference" in problems:
        raise RuntimeError(f"the reference solution failed its own measurement: {problems['reference']}")
    rate = lambda who: totals[who][0] / totals[who][1] if totals[who][1] else 0.0  # noqa: E731
    speculates = "student" not in problems
    paired = ([b / s for b, s in zip(times[baseline], times["student"])]
              if len(times["student"]) == len(times[baseline]) == repeats else [])
    ratio = statistics.median(paired) if paired else 0.0
    return Measurement(
        speedup=ratio, acceptance=rate("student") if speculates else 0.0, identical=identical, speculates=speculates,
        reference_acceptance=rate("reference"),
        detail=dict(preset=pair.preset, device=torch.device(pair.device).type, k=k, max_new_tokens=n_new, repeats=repeats, baseline=baseline,
                    student_s=[round(t, 4) for t in times["student"]],
                    reference_s=[round(t, 4) for t in times["reference"]],
                    greedy_s=[round(t, 4) for t in times["greedy"]], problem=problems.get("student", "")))


def _stopped_at_eos(got: list[int], want: list[int], pair) -> bool:
    eos = pair.target.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos])
    return bool(got) and got[-1] in eos and want[: len(got)] == got
