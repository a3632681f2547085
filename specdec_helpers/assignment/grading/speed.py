"""Speed and acceptance, measured by the grader from outside the student's process.

The student's decoder and the reference solution run in two children on the course pair; the speed
item compares the student's time with the reference's (CPU presets) or with greedy decoding, run by
the kit in the reference's child (GPU presets: PA3's bars are speedups over greedy). Each
timed run uses a prompt made at grade time, partly sampled from the target (`fresh_prompts`: no
warm-up or memo can know it); the runs alternate (reference, student, student, reference, ...) and the
child that is not being timed is paused (SIGSTOP) so it cannot steal the CPU. Time is the wall
time from sending the request to receiving the answer. Every timed output is compared with greedy
decoding that the grader computed itself. Acceptance is the grader's own: the rounds every correct decoder
runs with the course's draft on that prompt and text, computed in this process (`replay.grader_rounds`), so
nothing the student's process writes can raise it. The rounds the child reports are a consistency check
(`replay.check_rounds`): rounds that break the rule stated in notebook 04, or that do not add up, cost the
performance points with a message, and so do drafts off the draft model's greedy proposals in the timed runs
from a decoder whose drafting passed its tests (`scoring`): it told the timed runs apart.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field

import torch

from specdec_helpers.assignment.testing.wire import encode
from specdec_helpers.core.timing import child_threads
from specdec_helpers.assignment.testing.replay import check_rounds, grader_rounds
from specdec_helpers.assignment.grading.sandbox import Child, ChildFailed
from specdec_helpers.assignment.testing.wire import StudentError
from specdec_helpers.core.checks import greedy_divergence
from specdec_helpers.core.decode import greedy_decode
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.models.presets import OFFLINE_PRESETS
from specdec_helpers.present.notebook_help import prompts_for


@dataclass
class Measurement:
    """What the performance items are graded on (tests inject these; the grader measures them)."""

    speedup: float  # median of paired runs: baseline time / student time (`baseline_of`: greedy or the reference)
    acceptance: float  # accepted / proposed draft tokens of a correct decoder's rounds, computed by the grader
    identical: bool = True  # every timed output equal to the target's greedy output
    speculates: bool = True  # the observed rounds follow `replay.ROUND_RULE` and verify at least one draft token
    reference_acceptance: float = 0.0
    detail: dict = field(default_factory=dict)
    error: str = ""


def fresh_prompts(pair, n: int, rng: random.Random, sampled: int = 8) -> list[torch.Tensor]:
    """``n`` prompts no one can know before grading: a random stretch of one of the preset's prompts,
    then ``sampled`` tokens the target itself samples (temperature 1) from a generator seeded here.
    The text stays in the pair's domain (acceptance as on real text), but there are vocabulary^sampled
    continuations of each stretch, so an untimed warm-up cannot decode them in advance."""
    texts = [pair.encode(text) for text in prompts_for(pair)]
    generator = torch.Generator().manual_seed(rng.getrandbits(62))
    prompts = []
    with torch.inference_mode():
        for _ in range(n):
            ids = texts[rng.randrange(len(texts))]
            begin = rng.randrange(max(1, ids.shape[1] // 2))
            ids = ids[:, begin : begin + rng.randint(3, 12)].to(pair.device)
            for _ in range(sampled):
                logits = pair.target(input_ids=ids).logits[0, -1].float()
                token = torch.multinomial(logits.softmax(-1).cpu(), 1, generator=generator)
                ids = torch.cat([ids, token.view(1, 1).to(ids.device)], dim=1)
            prompts.append(ids)
    return prompts


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
    """What the speed item compares with: ``perf['baseline']``, or with 'auto' greedy decoding where PA3's bars
    mean something (a hub preset, PA3's Pythia pairs, on a GPU: its bars are speedups over greedy) and the
    reference solution elsewhere: on a CPU, where speculation gains little, and for the offline pairs on a GPU
    too (PA3's 75% acceptance bar was set for Pythia, not for the course's tiny pair), so the reference gets
    full marks wherever it is graded."""
    baseline = perf.get("baseline", "auto")
    if baseline not in ("auto", "greedy", "reference"):
        raise ValueError(f"performance.baseline must be 'auto', 'greedy' or 'reference', got {baseline!r}")
    if baseline != "auto":
        return baseline
    return "greedy" if device != "cpu" and perf.get("preset", "toy") not in OFFLINE_PRESETS else "reference"


def measure(
    student_sources: dict, reference_sources: dict, perf: dict, *, seed: int | None = None, timeout: float = 120
) -> Measurement:
    """Time the student's decoder against the reference on the course pair (see the module's doc), with
    as many torch threads here as in the children (``$SPECDEC_THREADS``, default 1): the grader's own
    greedy decoding and replay took 25x longer with two threads on a shared 2-core machine."""
    with child_threads():
        return _measure(student_sources, reference_sources, perf, seed, timeout)


def _measure(student_sources: dict, reference_sources: dict, perf: dict, seed, timeout) -> Measurement:
    rng = random.Random(seed)  # None: fresh prompts every grading, even in a fixed test world
    pair = load_pair(perf["preset"], progress=False)
    k = perf.get("num_speculative_tokens") or pair.num_speculative_tokens
    n_new, repeats = perf["max_new_tokens"], perf["repeats"]
    baseline = baseline_of(perf, torch.device(pair.device).type)
    prompts = fresh_prompts(pair, repeats + perf["warmup"], rng)
    expected = [
        greedy_decode(pair.target, p, max_new_tokens=n_new, eos_token_id=None).sequences[0, p.shape[1] :].tolist()
        for p in prompts
    ]
    students = reference = None
    try:
        reference = Child(reference_sources, trusted=True)
        students = Child(student_sources)  # if this fails, the finally below still closes the reference
        handles = {c: c.request("pair", timeout=timeout, preset=perf["preset"]) for c in (reference, students)}
        where = {c.request("where", timeout=timeout, handle=handles[c]) for c in (reference, students)}
        if where != {str(next(pair.target.parameters()).device)}:
            raise RuntimeError(
                f"the grader's pair is on {next(pair.target.parameters()).device} but its children's on "
                f"{', '.join(sorted(where))}: they cannot see the same device (a sandbox without the "
                "GPU's device files, or CUDA_VISIBLE_DEVICES): grading would time another device"
            )
        times = {"reference": [], "student": [], "greedy": []}
        identical, problems, notes = True, {}, {}
        totals = {who: [0, 0] for who in ("reference", "student")}  # the grader's own rounds (`grader_rounds`)
        reported = {who: [0, 0, 0] for who in ("reference", "student")}  # the child's: accepted, proposed, off greedy
        for run in range(repeats + perf["warmup"]):
            order = [("reference", reference, students), ("student", students, reference)]
            if run % 2:
                order.reverse()
            for who, child, other in order:
                ids = prompts[run]  # the same fresh prompt for both: paired runs, comparable acceptance
                answer, seconds = _timed(
                    child,
                    other,
                    "generate",
                    timeout=timeout,
                    handle=handles[child],
                    ids=encode(ids),
                    max_tokens=n_new,
                    k=k,
                )
                out = answer["result"]
                got = out[0, ids.shape[1] :].tolist() if isinstance(out, torch.Tensor) and out.dim() == 2 else None
                want = expected[run]
                if got is not None and got != want and not _stopped_at_eos(got, want, pair):
                    # in half precision a divergence is right only at a numerical near-tie of the target
                    got = got if greedy_divergence(pair.target, ids, got, want=want)[0] else None
                if got is None:
                    identical &= who == "reference"
                    problems.setdefault(who, "an output differs from greedy decoding")
                    continue
                rounds = check_rounds(pair.draft, ids, got, answer["log"], k, n_new)
                if not rounds.speculates:
                    problems.setdefault(who, rounds.why_not())
                if rounds.note:
                    notes.setdefault(who, rounds.note)
                for i, count in enumerate((rounds.accepted, rounds.proposed, rounds.off_greedy)):
                    reported[who][i] += count
                for i, count in enumerate(grader_rounds(pair.draft, ids, got, k, n_new)):
                    totals[who][i] += count
                if run >= perf["warmup"]:
                    times[who].append(seconds)
            if baseline == "greedy":  # the kit's greedy loop, in the reference's child, on the same prompt
                answer, seconds = _timed(
                    reference,
                    students,
                    "greedy",
                    timeout=timeout,
                    handle=handles[reference],
                    ids=encode(prompts[run]),
                    max_tokens=n_new,
                )
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
    rate = lambda who: totals[who][0] / totals[who][1] if totals[who][1] else 0.0
    speculates = "student" not in problems
    paired = (
        [b / s for b, s in zip(times[baseline], times["student"])]
        if len(times["student"]) == len(times[baseline]) == repeats
        else []
    )
    ratio = statistics.median(paired) if paired else 0.0
    return Measurement(
        speedup=ratio,
        acceptance=rate("student") if speculates else 0.0,
        identical=identical,
        speculates=speculates,
        reference_acceptance=rate("reference"),
        detail=dict(
            preset=pair.preset,
            device=torch.device(pair.device).type,
            k=k,
            max_new_tokens=n_new,
            repeats=repeats,
            baseline=baseline,
            student_s=[round(t, 4) for t in times["student"]],
            reference_s=[round(t, 4) for t in times["reference"]],
            greedy_s=[round(t, 4) for t in times["greedy"]],
            problem=problems.get("student", ""),
            note=notes.get("student", ""),
            off_greedy=reported["student"][2],  # rounds whose draft was not the draft model's greedy proposal
            reference_off_greedy=reported["reference"][2],  # the same, for the reference (near-ties in half precision)
            reported_acceptance=round(reported["student"][0] / reported["student"][1], 4)
            if reported["student"][1]
            else 0.0,
        ),
    )


def _stopped_at_eos(got: list[int], want: list[int], pair) -> bool:
    eos = pair.target.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos])
    return bool(got) and got[-1] in eos and want[: len(got)] == got
