"""Choosing a draft and k by what they cost on THIS device (``load_pair("auto")``).

Leviathan et al.'s bound, with the verify cost measured: a round of k draft tokens yields
(1 - a^(k+1)) / (1 - a) tokens on average and costs k draft steps plus one target pass over k + 1
tokens, so the speedup over greedy decoding is that / (k c + v_k), with c = draft step / target step and
v_k = the (k + 1)-token pass / the target step (`measure.theory.refined_speedup`). The acceptance a is the
preset's (what PA3 measured); c and v_k are timed here in a few seconds, as the decoder runs the models
(over static caches with CUDA graphs on a GPU, `core.graphs`; eagerly elsewhere). Which draft wins depends
on the device: an eager GPU is launch-bound (a 12-layer 160m step costs 0.6-0.85 of a 24-layer 1.4b one),
a graphed or memory-bound one is not.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from specdec_helpers.core.cache import cache_kwargs, new_cache, rollback
from specdec_helpers.core.graphs import static_forward
from specdec_helpers.core.timing import sync_device

KS = tuple(range(1, 9))  # the draft lengths considered


@torch.inference_mode()
def pass_costs(model, sizes, repeats: int = 5, prefix: int = 32) -> dict[int, float]:
    """Median seconds of one pass over ``n`` new tokens after a ``prefix``-token cached text, per ``n`` in ``sizes``."""
    device = model.device
    graphs = device.type == "cuda"
    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.randint(0, vocab, (1, prefix + max(sizes)), generator=torch.Generator().manual_seed(0)).to(device)
    runner = static_forward(model, graphs) if graphs else model
    cache = runner.new_cache(prefix + max(sizes)) if graphs else new_cache(model)
    try:
        if graphs:
            runner.prepare(cache, sizes)  # every step captured before the timing
        runner(input_ids=ids[:, :prefix], **cache_kwargs(runner, cache), use_cache=True)
        times = {n: [] for n in sizes}
        for i in range(repeats + 1):  # the first round warms up
            for n in sizes:
                sync_device(device)
                start = time.perf_counter()
                runner(
                    input_ids=ids[:, prefix : prefix + n],
                    **cache_kwargs(runner, cache),
                    use_cache=True,
                    logits_to_keep=1,
                )
                sync_device(device)
                if i:
                    times[n].append(time.perf_counter() - start)
                rollback(cache, prefix)
    finally:
        if graphs:
            runner.release(cache)
    return {n: statistics.median(t) for n, t in times.items()}


def bound(alpha: float, k: int, c: float, v: float) -> float:
    """Expected speedup over greedy decoding: expected tokens per round / (k c + v) (see the module's docstring)."""
    tokens = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (k * c + v)


@dataclass
class Choice:
    name: str  # the winning draft's name (a key of the candidates)
    k: int
    bound: float
    table: dict  # name -> dict(c, alpha, k, bound): each candidate at its own best k
    target_step_s: float

    def reason(self, device) -> str:
        rows = "; ".join(
            f"{name}: c={row['c']:.2f}, acceptance {row['alpha']:.2f}, best k={row['k']} -> {row['bound']:.2f}x"
            for name, row in self.table.items()
        )
        return (
            f"measured on {device} (target step {self.target_step_s * 1e3:.2f} ms): {rows}; chose {self.name} "
            f"with k={self.k}, the highest bound on the speedup"
        )


def choose(target, drafts: dict, ks=KS, repeats: int = 5) -> Choice:
    """The draft and k maximising `bound`, from ``drafts`` = ``{name: (draft model, acceptance)}``, all timed here."""
    target_costs = pass_costs(target, [1] + [k + 1 for k in ks], repeats)
    step = target_costs[1]
    table = {}
    for name, (draft, alpha) in drafts.items():
        c = pass_costs(draft, [1], repeats)[1] / step
        k = max(ks, key=lambda k: bound(alpha, k, c, target_costs[k + 1] / step))
        table[name] = dict(c=c, alpha=alpha, k=k, bound=bound(alpha, k, c, target_costs[k + 1] / step))
    best = max(table, key=lambda name: table[name]["bound"])
    return Choice(best, table[best]["k"], table[best]["bound"], table, step)
