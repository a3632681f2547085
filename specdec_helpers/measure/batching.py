r"""Throughput against batch size, greedy vs speculative, and the costs that explain it.

Why speculation's gain shrinks as the batch grows. One round of a row accepts on average
``tau = (1 - a^(k+1)) / (1 - a)`` tokens (Leviathan et al.). With ``B`` rows, write ``T(N)`` for one
target pass over ``N = B * n`` new tokens and ``D(B)`` for one draft step over ``B`` rows. Then

    speedup(B) = tau * T(B) / (T(B * (k + 1)) + k * D(B))

Greedy needs ``tau`` passes of ``B`` tokens for what one verify pass of ``B (k + 1)`` tokens gives.
A pass reads every weight once (``2 P`` bytes in fp16, ``4 P`` in fp32) and does ``2 P N`` FLOPs, so
its arithmetic intensity is about ``N`` FLOPs per byte (``N / 2`` in fp32). While ``N`` is below the
machine's balance point (peak FLOP/s over memory bandwidth: about 300 on an H100 in fp16, a few tens on
a CPU), the pass is memory-bound and ``T(N) ~ T(1)``: verifying ``k + 1`` tokens per row costs what one
costs, and ``speedup ~ tau / (1 + k c)`` with ``c = D / T``, Leviathan's result. Beyond the balance
point the pass is compute-bound, ``T(N) ~ N``, so ``T(B (k + 1)) ~ (k + 1) T(B)`` and

    speedup(B) -> tau / ((k + 1) + k c) < 1,

a loss: every rejected draft token is now paid for in FLOPs. Greedy reaches that regime only at
``B ~ balance``, speculation already at ``B (k + 1) ~ balance``: the batch size where speculation
stops paying is about ``k + 1`` times smaller than the one where batching stops paying. On a CPU with a
tiny model the forward is dominated by per-call overhead instead; the same formula, fed with measured
``T`` and ``D`` (`batch_costs`), says where the crossover lies (`predicted_batch_speedup`). A batch also waits
for its slowest row (rows accept different counts) and pads every row's block to the longest draft.
"""

from __future__ import annotations

import torch

from specdec_helpers.core.batch import batch_speculative_decode
from specdec_helpers.core.cache import cache_kwargs, new_cache, rollback
from specdec_helpers.core.checks import StudentEditionError
from specdec_helpers.core.timing import interleaved_order, spread, timed
from specdec_helpers.measure.theory import estimate_alpha, expected_tokens_per_step

BATCH_SIZES = (1, 2, 4, 8, 16)


def _rows(prompts, size: int) -> list[torch.Tensor]:
    """``size`` prompts, cycling through ``prompts`` (each a 1-D or ``[1, L]`` tensor)."""
    flat = [p.reshape(-1) for p in prompts]
    return [flat[i % len(flat)] for i in range(size)]


def batch_sweep(
    target,
    draft,
    prompts,
    *,
    batch_sizes=BATCH_SIZES,
    num_speculative_tokens: int = 4,
    max_new_tokens: int = 32,
    repeats: int = 3,
    warmup: int = 1,
    eos_token_id=None,
    show: bool = True,
) -> list[dict]:
    """Tokens/s over the whole batch, for greedy (batched, no draft) and speculative, per batch size.

    Runs interleave (greedy, speculative, greedy, ...) so that load drifts hit both alike; the ratio of
    each round's pair is kept, and ``ratio`` is their median with ``ratio_min``/``ratio_max`` its spread.
    Every speculative row is checked against the greedy row (column ``same``). One machine, one run:
    read the ratios, not the absolute numbers. A batch size the kit refuses (the student edition: one
    prompt, greedy, with a draft is notebook 04's graded decode loop) is left out, with a printed note.
    """
    rows = []
    for size in batch_sizes:
        try:
            rows.append(
                _sweep_row(
                    target, draft, prompts, size, num_speculative_tokens, max_new_tokens, repeats, warmup, eos_token_id
                )
            )
        except StudentEditionError:
            print(
                f"batch size {size} left out: the student edition of the kit has no greedy speculative decoding of "
                "one prompt (that is your decoder from notebooks 02-04; notebook 05 times it)."
            )
    if show:
        print_sweep(rows)
    return rows


def _sweep_row(
    target, draft, prompts, size, num_speculative_tokens, max_new_tokens, repeats, warmup, eos_token_id
) -> dict:
    """One batch size of `batch_sweep`."""
    batch = _rows(prompts, size)
    kw = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    methods = {
        "greedy": lambda: batch_speculative_decode(target, None, batch, num_speculative_tokens=0, **kw),
        "speculative": lambda: batch_speculative_decode(
            target, draft, batch, num_speculative_tokens=num_speculative_tokens, **kw
        ),
    }
    for _ in range(warmup):
        for run in methods.values():
            run()
    rates = {name: [] for name in methods}
    outs = {}
    accepted = proposed = 0
    per_round, offered = [], []
    for name in interleaved_order(list(methods), repeats):
        out = methods[name]()
        outs[name] = out
        rates[name].append(out.stats.tokens_per_s)
        if name == "speculative":
            accepted, proposed = accepted + out.stats.accepted, proposed + out.stats.proposed
            for s, p in zip(out.row_stats, out.row_proposed):
                per_round += s.accepted_per_step
                offered += p
    ratios = spread([s / g for s, g in zip(rates["speculative"], rates["greedy"])])
    same = all(torch.equal(a, b) for a, b in zip(outs["greedy"].new_tokens, outs["speculative"].new_tokens))
    return dict(
        batch=size,
        greedy_tok_s=spread(rates["greedy"])["median"],
        speculative_tok_s=spread(rates["speculative"])["median"],
        ratio=ratios["median"],
        ratio_min=ratios["min"],
        ratio_max=ratios["max"],
        alpha=estimate_alpha(per_round, offered),
        acceptance=accepted / proposed if proposed else 0.0,
        same=same,
    )


def print_sweep(rows: list[dict]) -> None:
    print(
        f"{'batch':>5} {'greedy tok/s':>13} {'spec tok/s':>11} {'spec/greedy':>12} {'(min-max)':>12} {'alpha':>6}  same"
    )
    for r in rows:
        print(
            f"{r['batch']:>5} {r['greedy_tok_s']:>13.1f} {r['speculative_tok_s']:>11.1f} {r['ratio']:>11.2f}x "
            f"{r['ratio_min']:>5.2f}-{r['ratio_max']:<5.2f}x {r['alpha']:>6.2f}  {r['same']}"
        )


@torch.inference_mode()
def batch_costs(
    target,
    draft,
    *,
    batch_sizes=BATCH_SIZES,
    num_speculative_tokens: int = 4,
    context: int = 32,
    repeats: int = 5,
    warmup: int = 2,
) -> list[dict]:
    """Median seconds of one target pass over ``[B, 1]`` (a greedy step) and ``[B, k + 1]`` (a verify pass),
    and one draft step over ``[B, 1]``, on top of a cached ``context`` of random tokens, per batch size."""
    k = num_speculative_tokens
    out = []
    for size in batch_sizes:
        gen = torch.Generator().manual_seed(size)
        costs = {}
        for role, model, width in (
            ("target_step_s", target, 1),
            ("verify_s", target, k + 1),
            ("draft_step_s", draft, 1),
        ):
            if model is None:
                costs[role] = 0.0
                continue
            vocab = model.get_input_embeddings().num_embeddings
            prefix = torch.randint(0, vocab, (size, context), generator=gen).to(model.device)
            fed = torch.randint(0, vocab, (size, width), generator=gen).to(model.device)
            cache = new_cache(model)
            model(input_ids=prefix, **cache_kwargs(model, cache), use_cache=True, logits_to_keep=1)

            def run(model=model, fed=fed, cache=cache):
                model(input_ids=fed, **cache_kwargs(model, cache), use_cache=True, logits_to_keep=fed.shape[1])
                rollback(cache, context)

            for _ in range(warmup):
                run()
            costs[role] = spread([timed(run, model.device)[1] for _ in range(repeats)])["median"]
        out.append(dict(batch=size, k=k, **costs, verify_over_step=costs["verify_s"] / costs["target_step_s"]))
    return out


def predicted_batch_speedup(cost: dict, alpha: float) -> float:
    """``tau * T(B) / (T(B (k + 1)) + k D(B))`` from one row of `batch_costs` and the acceptance ``alpha``."""
    k = cost["k"]
    return expected_tokens_per_step(alpha, k) * cost["target_step_s"] / (cost["verify_s"] + k * cost["draft_step_s"])
