"""Batched speculative decoding: B prompts of different lengths, each row accepting its own number of
draft tokens every round, each row's output equal to that prompt's own decoding.

`speculative_decode` sends a batch here (more than one row, a list of prompts, or an
``attention_mask``); a single prompt keeps the chain loop of `core/decode.py`.

One round, for every row still running (rows that finished, at EOS or at their own budget, have left
the batch and their cache rows are dropped):
1. the draft proposes up to ``min(k, room)`` tokens per row (a draft model for all rows at once,
   prompt lookup in each row's own text);
2. ONE target pass over a ``[B, U + K]`` block: each row's tokens the cache has not seen (its whole
   prompt in round 1, then its last token), then its draft, aligned so that the last ``K + 1`` logits
   of every row judge its draft (`batch_rows.block`);
3. each row accepts its own prefix (greedy matching, vectorised; or rejection sampling row by row,
   `verify.accept_sampled`), then appends, cut at EOS and at its budget;
4. per-row rollback of the target's and the draft's caches.

Per-row rollback with one shared cache: rows accept different counts, so the cache keeps shared columns
and a mask says which ones each row reads (`batch_rows.RowCache`): rejected positions become holes
masked out for good, and position ids are counted from the mask. We chose this over realigning the rows
by shifting their caches each round (a gather over the whole cache, every round): a mask update is free,
and the holes cost only some attention over masked columns and memory, bounded by the trailing crop, by
finished rows leaving, and by packing each row's live positions together (one gather) whenever holes
fill over half the cache. Left padding is the same mechanism (pads are masked columns).

Exactness: a row's logits in the batch equal its single-row logits up to float rounding (other matmul
shapes, masked columns add exact zeros); fp32 greedy rows therefore equal their own greedy decoding
except at a numerical near-tie (top-2 logit gap ~1e-6), which `checks.greedy_divergence` recognises.
Sampling is exact row by row: each row is Leviathan et al.'s rejection sampling with its own draws.

Self-contained (its own greedy speculative loop): an edition that must not ship a decode loop can drop
this module and `batch_rows.py` together.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from numbers import Integral

import torch

from specdec_helpers.core import checks, reference_loop
from specdec_helpers.core.batch_rows import RowCache, block, row_drafter
from specdec_helpers.core.checks import is_batch  # noqa: F401 - re-exported
from specdec_helpers.core.drafters import Drafter, as_drafter, exclusive
from specdec_helpers.core.rounds import DecodeStats, cut_at_eos
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.timing import sync_device
from specdec_helpers.core.verify import accept_sampled


@dataclass
class BatchDecodeOutput:
    """What a batched decode returns. ``stats`` counts the whole batch (``new_tokens`` summed over rows,
    ``target_calls`` = batched target passes, ``tokens_per_s`` over the batch); ``row_stats[b]`` one row."""

    prompts: list[torch.Tensor]  # row b's prompt, without padding
    new_tokens: list[torch.Tensor]  # row b's generated tokens (up to and including its EOS)
    stats: DecodeStats
    row_stats: list[DecodeStats] = field(default_factory=list)
    row_proposed: list[list[int]] = field(default_factory=list)  # draft tokens row b was offered, per round
    pad_token_id: int = 0
    input_ids: torch.Tensor | None = None  # the padded ``[B, L]`` input, when one was given

    def row(self, b: int) -> torch.Tensor:
        """``[1, prompt + new]``: row ``b`` as `speculative_decode` returns a single prompt's ``sequences``."""
        return torch.cat([self.prompts[b], self.new_tokens[b]]).view(1, -1)

    @property
    def sequences(self) -> torch.Tensor:
        """``[B, L]``: the input as given (a list of prompts: left-padded) then the new tokens, right-padded with
        ``pad_token_id``, as HF ``generate`` returns a padded batch."""
        width_n = max(n.numel() for n in self.new_tokens)
        if self.input_ids is not None:
            out = torch.full(
                (len(self.prompts), width_n), self.pad_token_id, dtype=torch.long, device=self.input_ids.device
            )
            for b, n in enumerate(self.new_tokens):
                out[b, : n.numel()] = n
            return torch.cat([self.input_ids, out], dim=1)
        width_p = max(p.numel() for p in self.prompts)
        out = torch.full(
            (len(self.prompts), width_p + width_n), self.pad_token_id, dtype=torch.long, device=self.prompts[0].device
        )
        for b, (p, n) in enumerate(zip(self.prompts, self.new_tokens)):
            out[b, width_p - p.numel() : width_p + n.numel()] = torch.cat([p, n])
        return out


def _prompts(target, input_ids, attention_mask) -> list[torch.Tensor]:
    """Each row's prompt without padding: a ``[B, L]`` tensor (with its mask: any padding, left or right),
    or a list of prompts of different lengths."""
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() != 2:
            raise ValueError(f"batched input_ids must have shape [batch, prompt_length], got {tuple(input_ids.shape)}")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attention_mask = torch.as_tensor(attention_mask)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids has "
                f"{tuple(input_ids.shape)}; pass the mask the tokenizer returned with the ids"
            )
        rows = [ids[m.bool().to(ids.device)] for ids, m in zip(input_ids, attention_mask)]
    elif isinstance(input_ids, (list, tuple)) and input_ids:
        if attention_mask is not None:
            raise ValueError("give either a list of prompts (no padding, no mask) or a padded tensor with its mask")
        rows = list(input_ids)
        empty = [b for b, row in enumerate(rows) if hasattr(row, "__len__") and len(row) == 0]
        if empty:
            raise ValueError(
                f"prompt {empty[0]} of the {len(rows)} is empty; give each prompt at least one token "
                "(e.g. the tokenizer's BOS token)"
            )
    else:
        raise TypeError(
            f"input_ids must be a [batch, length] tensor or a list of prompts, got {type(input_ids).__name__}"
        )
    return [checks.check_input_ids(target, row)[0] for row in rows]  # each: ids checked, on the target's device


def _budgets(max_new_tokens, batch: int) -> list[int]:
    """One budget per row: an int for all, or one int per row."""
    if isinstance(max_new_tokens, torch.Tensor):
        max_new_tokens = max_new_tokens.tolist()
    if isinstance(max_new_tokens, (list, tuple)):
        if len(max_new_tokens) != batch:
            raise ValueError(
                f"max_new_tokens has {len(max_new_tokens)} entries for a batch of {batch} prompts; "
                "give one int for all rows or one per row"
            )
        return [checks.check_positive_int(m, "max_new_tokens", 0) for m in max_new_tokens]
    return [checks.check_positive_int(max_new_tokens, "max_new_tokens", 0)] * batch


def _samplers(temperature, top_k, top_p, generator, batch: int) -> list[Sampler]:
    """One sampler per row: one generator shared by all rows (draws in row order), or one generator per row."""
    if isinstance(generator, (list, tuple)):
        if len(generator) != batch:
            raise ValueError(f"{len(generator)} generators for a batch of {batch} prompts; give one, or one per row")
        return [Sampler(temperature, top_k, top_p, g) for g in generator]
    return [Sampler(temperature, top_k, top_p, generator)] * batch


@torch.inference_mode()
def batch_speculative_decode(
    target,
    draft,
    input_ids,
    attention_mask=None,
    *,
    max_new_tokens=100,
    num_speculative_tokens: int = 5,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id=None,
    use_cache: bool = True,
    generator=None,
    compile: bool = False,
) -> BatchDecodeOutput:
    """Speculative decoding of a batch of prompts (``draft=None``: batched greedy decoding).

    ``input_ids``: ``[B, L]`` with ``attention_mask`` (padding masked out), or a list of prompts.
    ``max_new_tokens``: an int, or one per row. ``generator``: one, or one per row. Each row equals
    `speculative_decode` of its prompt alone (greedy: token for token up to fp32 near-ties; sampling:
    in distribution). Drafts: an HF model, a `ModelDrafter`, a `PromptLookupDrafter`, or None.
    """
    checks.check_model(target, "target")
    if not use_cache or compile:
        raise ValueError(
            "batched speculative decoding runs with use_cache=True and compile=False only; "
            "decode the prompts one at a time for the uncached or compiled loops"
        )
    if isinstance(num_speculative_tokens, bool) or not isinstance(num_speculative_tokens, Integral):
        raise TypeError(
            f"batched speculative decoding needs an int num_speculative_tokens (no 'auto' schedule), "
            f"got {num_speculative_tokens!r}"
        )
    k = checks.check_positive_int(num_speculative_tokens, "num_speculative_tokens", 0)
    prompts = _prompts(target, input_ids, attention_mask)
    budgets = _budgets(max_new_tokens, len(prompts))
    samplers = _samplers(temperature, top_k, top_p, generator, len(prompts))
    reference_loop.check_batch(draft, prompts, samplers)  # (the student edition: greedy of one prompt is theirs)
    eos = set(checks.eos_ids(target, eos_token_id))
    drafter = None if draft is None else as_drafter(draft, target)
    for p, m in zip(prompts, budgets):
        checks.check_fits_context(target, "target", p.numel() + m, p.numel(), m)
        if drafter is not None and drafter.model is not None:
            checks.check_draft_model(drafter.model, p.view(1, -1), m)
    rows = row_drafter(drafter, len(prompts), target.device)
    held = draft if isinstance(draft, Drafter) else drafter  # the caller's drafter: one decode at a time uses it
    with exclusive(held) if held is not None else contextlib.nullcontext():
        out = _loop(target, rows, prompts, budgets, k, samplers, eos)
    if isinstance(input_ids, torch.Tensor):
        out.input_ids = input_ids.to(device=target.device, dtype=torch.long)
    return out


def _loop(target, drafts, prompts, budgets, k, samplers, eos) -> BatchDecodeOutput:
    device = prompts[0].device
    end = [p.numel() + m for p, m in zip(prompts, budgets)]
    buffer = torch.zeros(len(prompts), max(end), dtype=torch.long, device=device)
    for b, p in enumerate(prompts):
        buffer[b, : p.numel()] = p
    length = [p.numel() for p in prompts]
    stats, row_stats, row_proposed = DecodeStats(), [DecodeStats() for _ in prompts], [[] for _ in prompts]
    active = [b for b, m in enumerate(budgets) if m > 0]  # row of the caches -> row of the batch
    targets = RowCache(target, len(active), device)
    drafts.select(torch.tensor(active, dtype=torch.long, device=device))
    sync_device(device)
    start = time.perf_counter()
    while active:
        texts = [buffer[b, : length[b]] for b in active]
        ks = [min(k, end[b] - length[b] - 1) for b in active]
        calls = drafts.calls
        proposals = drafts.propose(texts, ks, [samplers[b] for b in active])
        unseen = [t[int(s) :] for t, s in zip(texts, targets.seen.tolist())]
        tokens, valid, width_k = block(unseen, [p.tokens for p in proposals], device)
        logits = targets.forward(tokens, valid, width_k + 1)  # [B, K + 1, V]: row b's draft j judged at j
        if samplers[active[0]].greedy:
            kept = _accept_greedy_rows(logits, [p.tokens for p in proposals])
        else:
            kept = []
            for i, (p, b) in enumerate(zip(proposals, active)):
                n = p.tokens.numel()
                result = accept_sampled(logits[i, : n + 1], p.tokens, p.probs, samplers[b])
                kept.append((result.num_accepted, result.tokens.tolist()))
        stats.record_round(sum(p.tokens.numel() for p in proposals), sum(n for n, _ in kept), drafts.calls - calls)
        cache_keep, still = [], []
        for i, (b, (n, new)) in enumerate(zip(active, kept)):
            cache_keep.append(length[b] + n)  # the old text plus the accepted draft; the new last token is fed next
            emitted = cut_at_eos(new, eos)[: end[b] - length[b]]
            buffer[b, length[b] : length[b] + len(emitted)] = torch.tensor(emitted, device=device)
            length[b] += len(emitted)
            row_stats[b].record_round(proposals[i].tokens.numel(), n, drafts.calls - calls)
            row_proposed[b].append(proposals[i].tokens.numel())
            if emitted[-1] not in eos and length[b] < end[b]:
                still.append(i)
        targets.keep(torch.tensor(cache_keep, device=device))
        if len(still) < len(active):  # finished rows leave the batch
            index = torch.tensor(still, dtype=torch.long, device=device)
            targets.select(index)
            drafts.select(index)
            active = [active[i] for i in still]
    sync_device(device)
    stats.wall_time_s = time.perf_counter() - start
    new = [buffer[b, p.numel() : length[b]].clone() for b, p in enumerate(prompts)]
    for s, n in zip(row_stats, new):
        s.new_tokens, s.wall_time_s = n.numel(), stats.wall_time_s
    stats.new_tokens = sum(n.numel() for n in new)
    # As HF generate: the configured pad id, else the first EOS id, else 0.
    pad = getattr(getattr(target, "generation_config", None), "pad_token_id", None)
    pad = pad if isinstance(pad, int) else min(eos) if eos else 0
    return BatchDecodeOutput(prompts, new, stats, row_stats, row_proposed, pad)


def _accept_greedy_rows(logits: torch.Tensor, drafts: list[torch.Tensor]) -> list[tuple[int, list[int]]]:
    """`verify.accept_greedy` for every row at once: ``(accepted, kept tokens)`` per row."""
    choices = logits.argmax(-1)  # [B, K + 1]
    width_k = choices.shape[1] - 1
    padded = torch.full_like(choices[:, :width_k], -1)
    for b, d in enumerate(drafts):
        padded[b, : d.numel()] = d
    accepted = (choices[:, :width_k] == padded).long().cumprod(1).sum(1).tolist()
    rows = choices.tolist()
    return [(n, row[: n + 1]) for n, row in zip(accepted, rows)]
