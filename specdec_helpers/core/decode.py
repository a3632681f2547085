"""The decode loops: speculative decoding, and plain greedy decoding as the same loop with a drafter that
proposes nothing (`_NoDraft`)."""
from __future__ import annotations

import time

import torch
from torch.profiler import (
    record_function,  # labels phases for `profile_decode`; ~µs when no profiler runs
)

from specdec_helpers.core import checks
from specdec_helpers.core import verify as verification  # `verification.score_draft`, looked up per call: no alias here
from specdec_helpers.core.adaptive import KSchedule, as_schedule
from specdec_helpers.core.batch import batch_speculative_decode, is_batch
from specdec_helpers.core.cache import crop_cache, new_cache
from specdec_helpers.core.compiled import compiled_forward
from specdec_helpers.core.drafters import Drafter, Proposal, as_drafter, exclusive
from specdec_helpers.core.graphs import graphs_by_default, static_pair
from specdec_helpers.core.rounds import DecodeOutput, DecodeStats, Step, Text, cut_at_eos
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.timing import sync_device
from specdec_helpers.core.verify import verify


STUDENT_MIN_TEMPERATURE = checks.STUDENT_MIN_TEMPERATURE
student_edition = checks.student_edition  # raised by the student edition's parts (see `release`)

__all__ = ["DecodeOutput", "DecodeStats", "Step", "cut_at_eos", "greedy_decode", "speculative_decode"]


class _NoDraft(Drafter):
    """Proposes nothing: every round is one ordinary target step (plain greedy decoding)."""

    def propose(self, input_ids, k, sampler=None) -> Proposal:
        return Proposal(input_ids.new_empty(0))

    def update(self, n_kept, target_features=None) -> None:
        pass


@torch.inference_mode()
def speculative_decode(
    target,
    draft,
    input_ids,
    *,
    max_new_tokens: int = 100,
    num_speculative_tokens: int | str | KSchedule = 5,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id=None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    compile: bool = False,
    attention_mask=None,
    score=None,
    graphs: bool | None = None,
) -> DecodeOutput:
    """Generate with ``draft`` proposing and ``target`` verifying; output is the target's own.

    Greedy (``temperature=0``): ``sequences`` equals ``target.generate(input_ids, do_sample=False,
    max_new_tokens=...)`` token for token. Sampling: tokens follow the target's warped distribution
    exactly (rejection sampling). ``use_cache=False`` re-runs the target over the whole text each
    round (vectorized verification); ``True`` keeps a KV cache and feeds only new positions.
    ``num_speculative_tokens="auto"`` adapts k each round (HF's heuristic, see `adaptive.KSchedule`).
    ``compile=True`` runs the target's forward compiled over a static cache (`compiled`), after
    minutes of compiling on first use; whether it pays depends on the machine: measure it
    (``perf --compile``; what it gave here is in benchmarks/RESULTS.md).
    ``graphs``: run both models over static KV caches, each fixed-size pass (the draft's one-token step, the
    target's verify) replayed from a CUDA graph captured once (`graphs`); a rollback moves a position.
    ``None`` (default): on for a CUDA target, off elsewhere; ``True`` on a CPU runs the same static-cache
    steps eagerly (what the CPU tests check).
    The student edition (``release``) refuses greedy and near-greedy use, and verifies without a cache:
    greedy speculative decoding is what the students write in notebooks 02-04.
    ``score``: the target's scoring pass, ``score(target, input_ids [1, L], draft_tokens [k]) -> logits [k + 1, vocab]``
    (row ``j`` judges draft token ``j``, row ``k`` gives the bonus), in place of the kit's `verify.score_draft`; it
    reads no cache, so the target re-reads the text each round. The student edition has no scoring pass of its
    own: there sampling needs the student's, ``score=nb.your_scoring(decoder)`` (notebook 06).
    Every prompt token is read, pad tokens too: ``generate(ids)`` without an attention mask masks pads
    out, so pass prompts without padding (`ModelPair.encode` refuses text that encodes to a pad token).
    A batch (``[B, L]`` ids with B > 1, a list of prompts, or any ``attention_mask``) goes to
    `batch.batch_speculative_decode` and returns a `batch.BatchDecodeOutput`.
    """
    if is_batch(input_ids, attention_mask):
        if score is not None:
            raise ValueError("score= (a scoring pass of your own) decodes one prompt at a time; pass one [1, L] prompt, "
                             "or leave score out for a batch")
        return batch_speculative_decode(
            target, None if isinstance(draft, _NoDraft) else draft, input_ids, attention_mask,
            max_new_tokens=max_new_tokens, num_speculative_tokens=num_speculative_tokens, temperature=temperature,
            top_k=top_k, top_p=top_p, eos_token_id=eos_token_id, use_cache=use_cache, generator=generator,
            compile=compile)
    input_ids, max_new_tokens, eos = checks.decode_args(target, input_ids, max_new_tokens, eos_token_id)
    schedule = as_schedule(num_speculative_tokens)
    sampler = Sampler(temperature, top_k, top_p, generator)
    ### BEGIN INSTRUCTOR ONLY
    pass  # greedy speculative decoding is what notebooks 02-04 grade: the student edition refuses it
    ### STUDENT EDITION
    # if temperature < STUDENT_MIN_TEMPERATURE or top_k == 1:  # near-greedy sampling is greedy decoding
    #     raise student_edition(f"speculative decoding at temperature={temperature}, top_k={top_k} (greedy or "
    #                           f"nearly so; the student edition samples at temperature >= {STUDENT_MIN_TEMPERATURE})",
    #                           "04", "generate_ids")
    ### END INSTRUCTOR ONLY
    drafter = as_drafter(draft, target)
    checks.check_draft_model(drafter.model, input_ids, max_new_tokens)
    if compile or graphs:
        checks.check_compilable(use_cache, drafter, "graphs=True" if graphs else "compile=True")
    if graphs is None:
        graphs = score is None and graphs_by_default(target, use_cache, compile, drafter)
    if compile and graphs:
        raise ValueError("compile=True and graphs=True are two ways to a static-cache forward: choose one")
    if score is not None and (compile or graphs or drafter.needs_target_features or not callable(score)):
        raise ValueError("score= must be a function score(target, input_ids, draft_tokens) -> logits [k + 1, vocab]; it "
                         "reads no cache and returns no target features, so use it without compile=True or graphs=True "
                         "and with a draft that needs none (not 'eagle')")
    with exclusive(drafter):  # stateful: one decode at a time per drafter (see `exclusive`)
        return _decode_loop(target, drafter, input_ids, max_new_tokens, schedule, sampler, eos, use_cache, compile,
                            graphs, score)


def greedy_decode(target, input_ids, *, max_new_tokens: int = 100, eos_token_id=None, use_cache: bool = True,
                  compile: bool = False, attention_mask=None, graphs: bool | None = None):
    """Plain greedy decoding (one target pass per token), the baseline speculative decoding must match."""
    ### BEGIN INSTRUCTOR ONLY
    return speculative_decode(target, _NoDraft(), input_ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                              use_cache=use_cache, compile=compile, attention_mask=attention_mask, graphs=graphs)
    ### STUDENT EDITION
    # if is_batch(input_ids, attention_mask):  # the batched baseline (notebook 08): no draft, nothing graded
    #     return batch_speculative_decode(target, None, input_ids, attention_mask, max_new_tokens=max_new_tokens,
    #                                     eos_token_id=eos_token_id)
    # return generate_greedy(target, input_ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    ### END INSTRUCTOR ONLY


@torch.inference_mode()
def generate_greedy(target, input_ids, *, max_new_tokens: int = 100, eos_token_id=None) -> DecodeOutput:
    """Greedy decoding by Hugging Face ``generate`` (the student edition's `greedy_decode`: it holds no
    decode loop of its own), with the same output and counters as `greedy_decode`."""
    input_ids, max_new_tokens, eos = checks.decode_args(target, input_ids, max_new_tokens, eos_token_id)
    text = Text(input_ids, max_new_tokens, eos)
    sync_device(input_ids.device)
    start = time.perf_counter()
    out = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                          max_new_tokens=max_new_tokens, eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0)
    sync_device(input_ids.device)
    for token in out[0, input_ids.shape[1]:].tolist():  # one target pass per token
        if not text.done:
            text.record(Step([], 0, text.append([token])), 0, 0)
    return text.finish(time.perf_counter() - start)


def _decode_loop(target, drafter: Drafter, input_ids, max_new_tokens, schedule: KSchedule, sampler, eos, use_cache,
                 compile=False, graphs=False, score=None):
    """The target's cache (dynamic, static or none), then the rounds (`_rounds`)."""
    ### BEGIN INSTRUCTOR ONLY
    if graphs:  # the same rounds, both models over static caches (CUDA graphs on a GPU): see `graphs`
        cuda = target.device.type == "cuda"
        with static_pair(target, drafter, input_ids.shape[1] + max_new_tokens, cuda) as (target, cache, drafter):
            return _rounds(target, drafter, cache, input_ids, max_new_tokens, schedule, sampler, eos)
    if compile:  # the same loop, with the target's compiled forward over a static cache
        target = compiled_forward(target)
        cache = target.new_cache(input_ids.shape[1] + max_new_tokens)
    else:
        cache = new_cache(target) if use_cache and score is None else None  # a caller's score= reads no cache
    ### STUDENT EDITION
    # cache = None  # no cached verification here (notebook 04's exercise): the target re-reads the text
    ### END INSTRUCTOR ONLY
    return _rounds(target, drafter, cache, input_ids, max_new_tokens, schedule, sampler, eos, score)


def _rounds(target, drafter: Drafter, cache, input_ids, max_new_tokens, schedule: KSchedule, sampler, eos, score=None):
    """The rounds, written out: draft, one target pass, verify, append, roll both back to the kept text."""
    text = Text(input_ids, max_new_tokens, eos)
    drafter.update(0)  # a new text
    sync_device(input_ids.device)
    start = time.perf_counter()
    while not text.done:
        context, length = text.context, text.length
        with record_function("specdec::draft"):
            proposal = drafter.propose(context, min(schedule.current, text.room), sampler)
        with record_function("specdec::target_forward"):  # the positions the cache lacks, then the draft
            if score is not None:  # the caller's own scoring pass (the student's, from notebook 03)
                logits, features = score(target, context, proposal.tokens), None
            elif drafter.needs_target_features:  # e.g. `eagle`: it reads what the target computed
                logits, features = verification.score_draft(target, context, proposal.tokens, cache, features=True)
            else:
                logits, features = verification.score_draft(target, context, proposal.tokens, cache), None
        with record_function("specdec::accept"):
            result = verify(logits, proposal.tokens, proposal.probs, sampler)
            emitted = text.append(result.tokens, result.token_list)
        # Kept: the old text plus the accepted draft tokens; the new last token is fed next round.
        with record_function("specdec::rollback"):
            ### BEGIN INSTRUCTOR ONLY
            if cache is not None:
                crop_cache(cache, length + result.num_accepted)
            ### STUDENT EDITION
            # pass  # nothing to roll back: no target cache in the student edition
            ### END INSTRUCTOR ONLY
            if features is not None:  # the rejected draft tokens' features go too
                features = features[:, : features.shape[1] - (result.num_proposed - result.num_accepted)]
            drafter.update(length + result.num_accepted, features)
        schedule.update(result.num_accepted, result.num_proposed)
        text.record(Step(proposal.tokens, result.num_accepted, emitted), result.num_proposed,
                    proposal.forward_calls)
    sync_device(input_ids.device)
    return text.finish(time.perf_counter() - start)
