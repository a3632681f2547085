"""Leviathan et al. (2023) theory and the costs it needs: forward-cost curves, c, v, alpha."""

from __future__ import annotations

import torch

from specdec_helpers.core.cache import cache_kwargs, new_cache, rollback
from specdec_helpers.core.timing import interleaved_order, spread, timed


def estimate_alpha(accepted_per_step, draft_lengths) -> float:
    """Per-token acceptance probability alpha (Leviathan et al.'s), from the trace.

    Each round is a run of successes ended by one failure unless the whole draft passed, so the
    maximum-likelihood estimate is accepted / (accepted + rejections). PA3's acceptance rate
    (accepted / proposed) is lower: it also counts the draft tokens after a rejection, never tried.
    """
    accepted = sum(accepted_per_step)
    rejections = sum(1 for a, m in zip(accepted_per_step, draft_lengths) if a < m)
    return accepted / (accepted + rejections) if accepted + rejections else 0.0


def _random_prefix(model, length: int = 16, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    vocab = model.get_input_embeddings().num_embeddings
    return torch.randint(0, vocab, (1, length), generator=generator).to(model.device)


@torch.inference_mode()
def measure_forward_cost(
    model, input_ids: torch.Tensor | None = None, sizes=range(1, 33), repeats: int = 5, warmup: int = 2
) -> dict:
    """Time of ONE forward pass over ``n`` new tokens on top of a cached prefix, for each ``n``.

    This is the curve speculative decoding lives on: on a GPU (and often a CPU) scoring k + 1
    tokens costs little more than 1, so verifying a draft is nearly free. Sizes run interleaved.
    Returns ``{"sizes", "median_s", "q1_s", "q3_s"}``.
    """
    prefix = _random_prefix(model) if input_ids is None else input_ids.to(model.device)
    prefix_length = prefix.shape[1]
    sizes = [int(n) for n in sizes]
    # The kit's forwards (`backends`: lean, graphs, compiled) bring their own static cache, and give it back after.
    cache = model.new_cache(prefix_length + max(sizes)) if hasattr(model, "new_cache") else new_cache(model)
    try:
        if hasattr(model, "prepare"):  # graphs: every step captured before the timing, as a decode does
            model.prepare(cache, sizes)
        model(input_ids=prefix, **cache_kwargs(model, cache), use_cache=True)
        filler = _random_prefix(model, max(sizes), seed=1)

        def run(n):
            model(input_ids=filler[:, :n], **cache_kwargs(model, cache), use_cache=True, logits_to_keep=n)
            rollback(cache, prefix_length)

        for _ in range(warmup):
            for n in sizes:
                run(n)
        times = {n: [] for n in sizes}
        for n in interleaved_order(sizes, repeats):
            times[n].append(timed(lambda: run(n), model.device)[1])  # noqa: B023 - called at once, on this n
    finally:
        if hasattr(model, "release"):
            model.release(cache)
    spreads = [spread(times[n]) for n in sizes]
    return dict(
        sizes=sizes,
        median_s=[s["median"] for s in spreads],
        q1_s=[s["q1"] for s in spreads],
        q3_s=[s["q3"] for s in spreads],
        prefix_length=prefix_length,
    )


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Leviathan et al. (2023) eq. 1: E[tokens per target pass] = (1 - a^(k+1)) / (1 - a); k + 1 at a = 1."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al. Thm 3.8: wall-time speedup (1 - a^(k+1)) / ((1 - a)(k c + 1)), c = draft/target step.

    Assumes verifying k + 1 tokens costs one target step; `refined_speedup` drops that assumption.
    """
    return expected_tokens_per_step(alpha, k) / (k * c + 1.0)


def refined_speedup(alpha: float, k: int, c: float, v: float) -> float:
    """Like `expected_speedup`, with the measured verify cost v = time(k+1-token pass) / time(1-token step)."""
    return expected_tokens_per_step(alpha, k) / (k * c + v)


def costs_from_curve(curve: dict, draft_step_s: float, ks) -> dict:
    """Step cost, c and the verify cost v at each k, from a target forward-cost curve and a draft step time."""
    step = curve["median_s"][curve["sizes"].index(1)]
    return dict(
        target_forward=curve,
        target_step_s=step,
        draft_step_s=draft_step_s,
        c=draft_step_s / step,
        verify_cost={int(k): curve["median_s"][curve["sizes"].index(int(k) + 1)] / step for k in ks},
    )
