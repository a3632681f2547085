"""The chain loop: speculative decoding of one text (`_rounds`) and the text every chain or tree loop grows (`Text`),
and plain greedy decoding as the same loop with a drafter that proposes nothing (`_NoDraft`). Trees (`tree`) and
batches (`batch`) have loops of their own; which forward runs the models is `backends`' choice."""

from __future__ import annotations

import time

import torch
from torch.profiler import (
    record_function,  # labels phases for `profile_decode`; ~µs when no profiler runs
)

# The edition modules are looked up per call (`reference_parts.score_draft`): the student kit swaps them whole.
from specdec_helpers.core import checks, reference_loop, reference_parts, verify
from specdec_helpers.core.adaptive import KSchedule, as_schedule
from specdec_helpers.core.backends import Backend, backend
from specdec_helpers.core.batch import batch_speculative_decode
from specdec_helpers.core.checks import is_batch
from specdec_helpers.core.drafters import Drafter, Proposal, as_drafter, exclusive
from specdec_helpers.core.rounds import DecodeOutput, DecodeStats, Step, cut_at_eos
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.timing import sync_device


__all__ = ["DecodeOutput", "DecodeStats", "Step", "Text", "cut_at_eos", "greedy_decode", "speculative_decode"]


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
    lean: bool = True,
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
    steps eagerly (what the CPU tests check). Where graphs are off, a Llama target on a CPU (and a plain Llama draft
    model) runs through its lean forward (`lean`: transformers' operations without its per-layer Python, bitwise
    the same logits, over a static cache); ``lean=False`` keeps the model itself there.
    The student edition (``release``) refuses greedy and near-greedy use, and verifies without a cache:
    greedy speculative decoding is what the students write in notebooks 02-04.
    ``score``: the target's scoring pass, ``score(target, input_ids [1, L], draft_tokens [k]) -> logits [k + 1, vocab]``
    (row ``j`` judges draft token ``j``, row ``k`` gives the bonus), in place of the kit's
    `reference_parts.score_draft`; it reads no cache, so the target re-reads the text each round. The student edition
    has no scoring pass of its own: there sampling needs the student's, ``score=nb.your_scoring(decoder)`` (notebook
    06).
    Every prompt token is read, pad tokens too: ``generate(ids)`` without an attention mask masks pads
    out, so pass prompts without padding (`ModelPair.encode` refuses text that encodes to a pad token).
    A batch (``[B, L]`` ids with B > 1, a list of prompts, or any ``attention_mask``) goes to
    `batch.batch_speculative_decode` and returns a `batch.BatchDecodeOutput`.
    """
    if is_batch(input_ids, attention_mask):
        if score is not None or graphs:
            raise ValueError(
                f"{'score= (a scoring pass of your own)' if score is not None else 'graphs=True'} decodes "
                "one prompt at a time; pass one [1, L] prompt, or leave it out for a batch"
            )
        return batch_speculative_decode(
            target,
            None if isinstance(draft, _NoDraft) else draft,
            input_ids,
            attention_mask,
            max_new_tokens=max_new_tokens,
            num_speculative_tokens=num_speculative_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            eos_token_id=eos_token_id,
            use_cache=use_cache,
            generator=generator,
            compile=compile,
        )
    input_ids, max_new_tokens, eos = checks.decode_args(target, input_ids, max_new_tokens, eos_token_id)
    schedule = as_schedule(num_speculative_tokens)
    sampler = Sampler(temperature, top_k, top_p, generator)
    reference_loop.check_decoding(temperature, top_k)  # (the student edition: greedy decoding is theirs)
    drafter = as_drafter(draft, target)
    checks.check_draft_model(drafter.model, input_ids, max_new_tokens)
    if compile or graphs:
        checks.check_compilable(use_cache, drafter, "graphs=True" if graphs else "compile=True")
    if compile and graphs:
        raise ValueError("compile=True and graphs=True are two ways to a static-cache forward: choose one")
    if score is not None and (compile or graphs or drafter.needs_target_features or not callable(score)):
        raise ValueError(
            "score= must be a function score(target, input_ids, draft_tokens) -> logits [k + 1, vocab]; it "
            "reads no cache and returns no target features, so use it without compile=True or graphs=True "
            "and with a draft that needs none (not 'eagle')"
        )
    with exclusive(draft if isinstance(draft, Drafter) else drafter):  # stateful: one decode at a time per drafter
        largest_k = 0 if isinstance(drafter, _NoDraft) else schedule.largest
        with backend(
            target, drafter, input_ids, max_new_tokens, largest_k, use_cache, compile, graphs, score, lean
        ) as run:  # set up (graphs captured) before the rounds' timing starts
            out = _rounds(run, input_ids, max_new_tokens, schedule, sampler, eos, score)
    out.backend = str(run)
    return out


def greedy_decode(
    target,
    input_ids,
    *,
    max_new_tokens: int = 100,
    eos_token_id=None,
    use_cache: bool = True,
    compile: bool = False,
    attention_mask=None,
    graphs: bool | None = None,
    lean: bool = True,
):
    """Plain greedy decoding (one target pass per token), the baseline speculative decoding must match.
    ``graphs=False, lean=False``: eagerly, the model itself over transformers' cache, as a decoder of one's own runs."""
    return reference_loop.greedy_baseline(
        speculative_decode,
        _NoDraft(),
        target,
        input_ids,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos_token_id,
        use_cache=use_cache,
        compile=compile,
        attention_mask=attention_mask,
        graphs=graphs,
        lean=lean,
    )


def _rounds(run: Backend, input_ids, max_new_tokens, schedule: KSchedule, sampler, eos, score=None) -> DecodeOutput:
    """One round on one screen: draft, one target pass, accept, append, roll back to the kept text."""
    # Built by `backends.backend` (`choose` says why); on lean, graphs and compiled `target` is the kit's forward.
    target, cache, drafter = run.target, run.cache, run.drafter
    text = Text(input_ids, max_new_tokens, eos)
    drafter.update(0)  # a new text
    sync_device(input_ids.device)
    start = time.perf_counter()
    while not text.done:
        context, length = text.context, text.length
        k = min(schedule.current, text.room, run.max_k or text.room)
        with record_function("specdec::draft"):
            proposal = drafter.propose(context, k, sampler)
            if proposal.tokens.numel() > k:
                raise ValueError(
                    f"{type(drafter).__name__}.propose returned {proposal.tokens.numel()} tokens when "
                    f"asked for at most {k}: a drafter proposes at most k tokens (the loop sized the "
                    "round, the cache and its steps for k)"
                )
        with record_function("specdec::target_forward"):  # the positions the cache lacks, then the draft
            if score is not None:  # the caller's own scoring pass (the student's: written in 03, used in 06)
                logits, features = score(target, context, proposal.tokens), None
            elif drafter.needs_target_features:  # e.g. `eagle`: it reads what the target computed
                logits, features = reference_parts.score_draft(target, context, proposal.tokens, cache, features=True)
            else:
                logits, features = reference_parts.score_draft(target, context, proposal.tokens, cache), None
        with record_function("specdec::accept"):
            result = verify.accept(logits, proposal.tokens, proposal.probs, sampler)  # greedy: `accept_greedy`
            emitted = text.append(result.tokens, result.token_list)
        # Kept: the old text plus the accepted draft tokens; the new last token is fed next round.
        with record_function("specdec::rollback"):
            kept = length + result.num_accepted
            # core/cache.py's `rollback` (a StaticKV: `keep`, a moved position); empty in the student edition, whose
            # loop scores with the students' own pass, which reads no cache
            reference_loop.keep_target_cache(cache, kept)
            if features is not None:  # the rejected draft tokens' features go too
                features = features[:, : features.shape[1] - (result.num_proposed - result.num_accepted)]
            drafter.update(kept, features)  # the drafter rolls its own state back
        schedule.update(result.num_accepted, result.num_proposed)
        text.record(Step(proposal.tokens, result.num_accepted, emitted), result.num_proposed, proposal.forward_calls)
    sync_device(input_ids.device)
    return text.finish(time.perf_counter() - start)


class Text:
    """The text a decode loop grows: the prompt, then each round's kept tokens, up to EOS or the limit."""

    def __init__(self, input_ids: torch.Tensor, max_new_tokens: int, eos):
        self.prompt_length = input_ids.shape[1]
        self.end = self.prompt_length + max_new_tokens
        self.buffer = torch.empty(1, self.end, dtype=torch.long, device=input_ids.device)
        self.buffer[:, : self.prompt_length] = input_ids
        self.length = self.prompt_length
        self.eos = set(eos)
        self.ended = False  # an EOS was appended
        self.stats, self.steps = DecodeStats(), []

    @property
    def context(self) -> torch.Tensor:
        """``[1, length]``: the text so far (a view; the next round's input)."""
        return self.buffer[:, : self.length]

    @property
    def room(self) -> int:
        """Draft tokens this round may propose: leave room for the target's own token, never overshoot."""
        return self.end - self.length - 1

    @property
    def done(self) -> bool:
        return self.ended or self.length >= self.end

    def append(self, tokens, token_list: list[int] | None = None) -> list[int]:
        """Append a round's tokens (kept draft tokens + the target's own), cut after the first EOS and at
        ``max_new_tokens`` (a loop that drafts at most ``room`` tokens never reaches that cut); returns
        what was appended. ``token_list``: the same tokens already read to the host (saves a device read)."""
        tokens = torch.as_tensor(tokens)
        emitted = cut_at_eos(tokens.tolist() if token_list is None else token_list, self.eos)[: self.end - self.length]
        self.buffer[0, self.length : self.length + len(emitted)] = tokens[: len(emitted)]
        self.length += len(emitted)
        self.ended = emitted[-1] in self.eos
        return emitted

    def record(self, step: Step, proposed: int, draft_calls: int) -> None:
        """Count the round (one target pass that judged ``proposed`` draft tokens) and keep its trace."""
        self.stats.record_round(proposed, step.accepted, draft_calls)
        self.steps.append(step)

    def finish(self, wall_time_s: float) -> DecodeOutput:
        """The loop is over: the output, with the drafts read from the device in one go and the time taken."""
        _drafts_to_lists(self.steps)
        self.stats.wall_time_s = wall_time_s
        self.stats.new_tokens = self.length - self.prompt_length
        return DecodeOutput(self.context.clone(), self.stats, self.steps)


def _drafts_to_lists(steps: list[Step]) -> None:
    """Each step's draft tokens as a list, read from the device in one go once the loop is over."""
    held = [step for step in steps if isinstance(step.draft, torch.Tensor)]
    if held:
        flat = torch.cat([step.draft.reshape(-1) for step in held]).tolist()
        for step in held:
            n = step.draft.numel()
            step.draft, flat = flat[:n], flat[n:]
