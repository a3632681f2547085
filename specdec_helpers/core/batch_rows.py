"""Per-row state for batched decoding: one KV cache shared by B rows of different lengths, and the drafts.

`RowCache` is the whole trick (see `core/batch.py` for the loop): the cache's columns are shared by
every row, and a boolean column mask ``[B, C]`` says which columns each row reads. A row that rejects
draft tokens masks their columns out (holes it never reads again), so per-row rollback is one mask
update; only columns that no row reads any more, at the end, are cropped, and when holes fill over
half the cache each row's live positions are packed together (one gather; rare). Position ids are counted
from the mask (a row's next position is the number of columns it reads), never from the column index,
so left padding, pads between tokens and holes shift nothing.
"""

from __future__ import annotations

import torch

from specdec_helpers.core.cache import (
    cache_kwargs,
    check_plain_layers,
    keep_cache_rows,
    new_cache,
    rollback,
)
from specdec_helpers.core.drafters import ModelDrafter, Proposal, PromptLookupDrafter

PACK_SLACK = 16  # columns of holes tolerated beyond twice the longest row before `RowCache.pack`
PAD = 0  # the id fed at masked positions: never read by any row, so any id in the vocabulary would do


class RowCache:
    """A model, its KV cache and, per row, which cached columns it reads and how many tokens it has."""

    def __init__(self, model, batch: int, device):
        self.model = model
        self.cache = new_cache(model)
        self.mask = torch.zeros(batch, 0, dtype=torch.bool, device=device)  # [B, C]: row b reads column c
        self.seen = torch.zeros(batch, dtype=torch.long, device=device)  # tokens row b has in the cache
        self.passes = 0

    def forward(self, tokens: torch.Tensor, valid: torch.Tensor, keep: int) -> torch.Tensor:
        """Feed ``tokens`` ``[B, W]`` (``valid`` marks real tokens, the rest are masked pads); logits of the
        last ``keep`` columns ``[B, keep, V]``."""
        positions = (self.seen[:, None] + valid.long().cumsum(1) - 1).clamp_min(0)
        self.mask = torch.cat([self.mask, valid], dim=1)
        out = self.model(
            input_ids=tokens,
            attention_mask=self.mask.long(),
            position_ids=positions,
            **cache_kwargs(self.model, self.cache),
            use_cache=True,
            logits_to_keep=keep,
        )
        if not self.passes:
            check_plain_layers(self.cache, "batched speculative decoding")
        self.passes += 1
        self.seen += valid.sum(1)
        return out.logits

    def keep(self, lengths: torch.Tensor) -> None:
        """Rollback, per row: row ``b`` keeps its first ``lengths[b]`` tokens; the rest become holes."""
        lengths = torch.minimum(lengths.to(self.seen.device), self.seen)
        self.mask &= self.mask.long().cumsum(1) <= lengths[:, None]
        self.seen = lengths
        read = self.mask.any(0).nonzero()
        end = int(read[-1]) + 1 if read.numel() else 0
        if end < self.mask.shape[1]:  # trailing columns no row reads: give them back
            rollback(self.cache, end)
            self.mask = self.mask[:, :end]
        if self.mask.shape[1] > 2 * int(self.seen.max()) + PACK_SLACK:
            self.pack()

    def pack(self) -> None:
        """Move each row's live positions together, right-aligned (holes and pads become left padding):
        run when holes make up over half the columns, so the cache stays within twice the longest row."""
        width = int(self.seen.max())
        # A stable sort puts each row's dead columns first and its live ones last, both in column order.
        index = torch.sort(self.mask.long(), dim=1, stable=True).indices[:, self.mask.shape[1] - width :]
        rollback(self.cache, index)
        self.mask = torch.arange(width, device=self.mask.device) >= (width - self.seen)[:, None]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows ``rows`` (the others finished)."""
        if self.passes:
            keep_cache_rows(self.cache, rows)
        self.mask, self.seen = self.mask[rows], self.seen[rows]


def block(first: list[torch.Tensor], second: list[torch.Tensor], device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One ``[B, U + K]`` input block: row ``b`` holds ``first[b]`` ending at column ``U - 1`` (pads before)
    and ``second[b]`` from column ``U`` (pads after), so the last ``K + 1`` logits of every row are those
    of its last ``first`` token and of its ``second`` tokens, in order. Returns ``(tokens, valid, K)``."""
    width_u = max(t.numel() for t in first)
    width_k = max((t.numel() for t in second), default=0)
    batch = len(first)
    tokens = torch.full((batch, width_u + width_k), PAD, dtype=torch.long, device=device)
    valid = torch.zeros(batch, width_u + width_k, dtype=torch.bool, device=device)
    for b, (u, d) in enumerate(zip(first, second)):
        tokens[b, width_u - u.numel() : width_u + d.numel()] = torch.cat([u, d.to(device)])
        valid[b, width_u - u.numel() : width_u + d.numel()] = True
    return tokens, valid, width_k


class NoRows:
    """No draft: every round is one batched greedy step of the target (the batched baseline)."""

    calls = 0

    def propose(self, texts, ks, samplers) -> list[Proposal]:
        return [Proposal(t.new_empty(0)) for t in texts]

    def select(self, rows) -> None:
        pass


class LookupRows(NoRows):
    """Prompt lookup per row: model-free, stateless, so each row simply looks up in its own text."""

    def __init__(self, lookup: PromptLookupDrafter):
        self.lookup = lookup

    def propose(self, texts, ks, samplers) -> list[Proposal]:
        return [self.lookup.propose(t.view(1, -1), k) if k else Proposal(t.new_empty(0)) for t, k in zip(texts, ks)]


class ModelRows(NoRows):
    """A draft model drafting for every row at once, with its own `RowCache` (what `ModelDrafter` does for one row)."""

    def __init__(self, drafter: ModelDrafter, batch: int, device):
        self.rows = RowCache(drafter.model, batch, device)
        self.vocab_limit, self.input_vocab = drafter.vocab_limit, drafter.input_vocab

    @property
    def calls(self) -> int:
        return self.rows.passes

    def select(self, rows) -> None:
        self.rows.select(rows)

    def _forward(self, tokens, valid) -> torch.Tensor:
        # A token the draft cannot read (a target padding id) is read as 0, as `ModelDrafter` does.
        tokens = torch.where(tokens < self.input_vocab, tokens, 0)
        return self.rows.forward(tokens, valid, 1)[:, -1, : self.vocab_limit]

    def propose(self, texts, ks, samplers) -> list[Proposal]:
        most = max(ks)
        if not most:
            return [Proposal(t.new_empty(0)) for t in texts]
        device = texts[0].device
        # The last text token is always fed (its logits give the first draft token): keep all but it.
        self.rows.keep(torch.tensor([t.numel() - 1 for t in texts], device=device))
        unseen = [t[int(s) :] for t, s in zip(texts, self.rows.seen.tolist())]
        tokens, valid, _ = block(unseen, [t.new_empty(0) for t in texts], device)
        logits = self._forward(tokens, valid)
        drafted, probs = [[] for _ in texts], [[] for _ in texts]
        for step in range(most):
            chosen = logits.argmax(-1)
            for b, sampler in enumerate(samplers):
                if step < ks[b] and not sampler.greedy:  # each row draws from its own sampler, in row order
                    token, prob = sampler.choose(logits[b : b + 1])
                    chosen[b] = token[0]
                    probs[b].append(prob)
            for b in range(len(texts)):
                if step < ks[b]:
                    drafted[b].append(chosen[b : b + 1])
            if step + 1 < most:
                # Rows past their own k still feed a token; the next `keep` drops it with the rejected ones.
                logits = self._forward(chosen.view(-1, 1), torch.ones_like(chosen, dtype=torch.bool).view(-1, 1))
        out = []
        for t, d, p in zip(texts, drafted, probs):
            out.append(Proposal(torch.cat(d) if d else t.new_empty(0), torch.cat(p) if p else None))
        return out


def row_drafter(drafter, batch: int, device):
    """The per-row version of ``drafter`` (None: no draft), or a TypeError naming what batches support."""
    if drafter is None:
        return NoRows()
    if type(drafter) is PromptLookupDrafter:
        return LookupRows(drafter)
    if type(drafter) is ModelDrafter:
        if drafter.confidence_threshold is not None:
            raise ValueError(
                "batched speculative decoding does not support a ModelDrafter's confidence_threshold; "
                "use confidence_threshold=None, or decode the prompts one at a time"
            )
        return ModelRows(drafter, batch, device)
    raise TypeError(
        f"batched speculative decoding supports a Hugging Face draft model, a ModelDrafter or a "
        f"PromptLookupDrafter (or no draft), got {type(drafter).__name__}; decode the prompts one at a time "
        "(a batch of 1, no attention_mask) to use it"
    )
