"""The decode loops: speculative decoding, and plain greedy decoding as its k = 0 special case."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch.profiler import (
    record_function,  # labels phases for `profile_decode`; ~µs when no profiler runs
)

from specdec_helpers.core import checks
from specdec_helpers.core.adaptive import KSchedule, as_schedule
from specdec_helpers.core.cache import crop_cache, new_cache
from specdec_helpers.core.compiled import compiled_forward
from specdec_helpers.core.drafters import Drafter, Proposal, as_drafter, exclusive
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.timing import sync_device
from specdec_helpers.core.verify import score_draft, verify


@dataclass
class Step:
    """One round: what the draft proposed, how many the target accepted, what was appended."""

    draft: list[int]
    accepted: int
    emitted: list[int]  # tokens appended this round (accepted draft + correction/bonus, cut at EOS/limit)

    @property
    def rejected(self) -> list[int]:
        return self.draft[self.accepted:]

    @property
    def target_token_kind(self) -> str:
        """'bonus' (all k accepted), 'correction' (first mismatch) or 'target' (nothing was drafted)."""
        if not self.draft:
            return "target"
        return "bonus" if self.accepted == len(self.draft) else "correction"


@dataclass
class DecodeStats:
    """Counters of one decode call.

    - ``new_tokens``: tokens appended after the prompt.
    - ``proposed`` / ``accepted``: draft tokens proposed / accepted by verification, summed over rounds
      (correction and bonus tokens come from the target and are never counted as accepted).
    - ``acceptance_rate`` = accepted / proposed (0 when nothing was proposed).
    - ``mean_accepted_length`` = new tokens per target call (1.0 for plain greedy decoding).
    - ``target_calls`` = rounds (one target pass each, prefill included); ``draft_calls`` = draft passes.
    - ``accepted_per_step``: accepted draft tokens in each round.
    - ``wall_time_s`` / ``tokens_per_s``: time of the whole call (device synced) and new_tokens / time.
    """

    new_tokens: int = 0
    proposed: int = 0
    accepted: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    accepted_per_step: list[int] = field(default_factory=list)
    wall_time_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def record_round(self, proposed: int, accepted: int, draft_calls: int) -> None:
        """Count one round: one target pass that judged ``proposed`` draft tokens."""
        self.target_calls += 1
        self.draft_calls += draft_calls
        self.proposed += proposed
        self.accepted += accepted
        self.accepted_per_step.append(accepted)

    def as_dict(self) -> dict:
        names = ["new_tokens", "proposed", "accepted", "acceptance_rate", "mean_accepted_length",
                 "target_calls", "draft_calls", "accepted_per_step", "wall_time_s", "tokens_per_s"]
        return {name: getattr(self, name) for name in names}


@dataclass
class DecodeOutput:
    sequences: torch.Tensor  # [1, prompt + new], as target.generate(do_sample=False) returns
    stats: DecodeStats
    steps: list[Step]  # per-round trace, for explaining and colouring the output

    @property
    def new_tokens(self) -> torch.Tensor:
        return self.sequences[0, self.sequences.shape[1] - self.stats.new_tokens:]


def cut_at_eos(tokens: list[int], eos: set[int]) -> list[int]:
    """``tokens`` up to and including the first EOS (an EOS inside an accepted block ends the text)."""
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[: i + 1]
    return tokens


class _NoDraft:
    """Proposes nothing: every round is one ordinary target step (plain greedy decoding)."""

    def reset(self) -> None:
        pass

    def rollback(self, n_kept: int) -> None:
        pass

    def propose(self, input_ids, k, sampler=None) -> Proposal:
        return Proposal(input_ids.new_empty(0))


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
) -> DecodeOutput:
    """Generate with ``draft`` proposing and ``target`` verifying; output is the target's own.

    Greedy (``temperature=0``): ``sequences`` equals ``target.generate(input_ids, do_sample=False,
    max_new_tokens=...)`` token for token. Sampling: tokens follow the target's warped distribution
    exactly (rejection sampling). ``use_cache=False`` re-runs the target over the whole text each
    round (vectorized verification); ``True`` keeps a KV cache and feeds only new positions.
    ``num_speculative_tokens="auto"`` adapts k each round (HF's heuristic, see `adaptive.KSchedule`).
    ``compile=True`` runs the target's forward compiled over a static cache (`compiled`), after
    minutes of compiling on first use; measure it (``perf --compile``): on 2 CPU cores it lost 3%.
    Every prompt token is read, pad tokens too: ``generate(ids)`` without an attention mask masks pads
    out, so pass prompts without padding (`ModelPair.encode` refuses text that encodes to a pad token).
    """
    checks.check_model(target, "target")
    input_ids = checks.check_input_ids(target, input_ids)
    max_new_tokens = checks.check_positive_int(max_new_tokens, "max_new_tokens", 0)
    schedule = as_schedule(num_speculative_tokens)
    sampler = Sampler(temperature, top_k, top_p, generator)
    drafter = as_drafter(draft, target)
    eos = checks.eos_ids(target, eos_token_id)
    prompt_length = input_ids.shape[1]
    checks.check_fits_context(target, "target", prompt_length + max_new_tokens, prompt_length, max_new_tokens)
    draft_model = getattr(drafter, "model", None)
    if draft_model is not None:
        checks.check_draft_vocab(draft_model, input_ids)
        checks.check_fits_context(draft_model, "draft", prompt_length + max_new_tokens, prompt_length, max_new_tokens)
    if compile:
        checks.check_compilable(use_cache, drafter)
    with exclusive(drafter):  # stateful: one decode at a time per drafter (see `exclusive`)
        return _decode_loop(target, drafter, input_ids, max_new_tokens, schedule, sampler, eos, use_cache, compile)


def greedy_decode(target, input_ids, *, max_new_tokens: int = 100, eos_token_id=None, use_cache: bool = True,
                  compile: bool = False):
    """Plain greedy decoding (one target pass per token), the baseline speculative decoding must match."""
    return speculative_decode(target, _NoDraft(), input_ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                              use_cache=use_cache, compile=compile)


def _decode_loop(target, drafter: Drafter, input_ids, max_new_tokens, schedule: KSchedule, sampler, eos, use_cache,
                 compile=False):
    device = input_ids.device
    prompt_length = input_ids.shape[1]
    buffer = torch.empty(1, prompt_length + max_new_tokens, dtype=torch.long, device=device)
    buffer[:, :prompt_length] = input_ids
    length = prompt_length
    end = prompt_length + max_new_tokens
    eos_set = set(eos)
    if compile:  # the same loop, with the target's compiled forward over a static cache
        target = compiled_forward(target)
        cache = target.new_cache(end)
    else:
        cache = new_cache(target) if use_cache else None
    stats, steps = DecodeStats(), []
    drafter.reset()
    observe = getattr(drafter, "observe_target", None)  # drafts that read the target's features (`eagle`)

    sync_device(device)
    start_time = time.perf_counter()
    while length < end:
        context = buffer[:, :length]
        # Leave room for the target's own token: never overshoot max_new_tokens.
        with record_function("specdec::draft"):
            proposal = drafter.propose(context, min(schedule.current, end - length - 1), sampler)
        with record_function("specdec::target_forward"):
            if observe is None:
                logits = score_draft(target, context, proposal.tokens, cache)
            else:
                logits, features = score_draft(target, context, proposal.tokens, cache, features=True)
                observe(features, length + proposal.tokens.numel() - features.shape[1])
        with record_function("specdec::accept"):
            result = verify(logits, proposal.tokens, proposal.probs, sampler)
            emitted = cut_at_eos(result.tokens.tolist(), eos_set)
        buffer[0, length : length + len(emitted)] = result.tokens[: len(emitted)]
        # Kept: the old text plus the accepted draft tokens; the new last token is fed next round.
        with record_function("specdec::rollback"):
            if cache is not None:
                crop_cache(cache, length + result.num_accepted)
            drafter.rollback(length + result.num_accepted)
        length += len(emitted)

        stats.record_round(result.num_proposed, result.num_accepted, proposal.forward_calls)
        schedule.update(result.num_accepted, result.num_proposed)
        steps.append(Step(proposal.tokens.tolist(), result.num_accepted, emitted))
        if emitted[-1] in eos_set:
            break
    sync_device(device)
    stats.wall_time_s = time.perf_counter() - start_time
    stats.new_tokens = length - prompt_length
    return DecodeOutput(buffer[:, :length].clone(), stats, steps)
