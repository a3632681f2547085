"""What notebook 07 (tree speculation) calls, as ``nb.trees``: the tree's building blocks, a greedy check
that allows numerical near-ties, and the statistical check of the tree-sampling exercise."""

from __future__ import annotations

import torch

from specdec_helpers.core.cache import new_cache  # noqa: F401 - for the notebook
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.tree import draft_tree, tree_attention_mask, tree_forward  # noqa: F401
from specdec_helpers.core.tree_sampling import RULES, accept_at_node, draw_children
from specdec_helpers.measure.device_checks import chi_square_pvalue
from specdec_helpers.measure.tree_vs_chain import compare_tree_chain, compare_tree_chain_sampling  # noqa: F401
from specdec_helpers.present.benchmarking import matches_greedy  # noqa: F401 - the same near-tie check as 03-06


def _diagnose(residual) -> str:
    """What is off in ``residual`` on one small example, in words (empty if nothing visible)."""
    p, q = (
        torch.tensor([0.5, 0.25, 0.25, 0.0], dtype=torch.float64),
        torch.tensor([0.25, 0.5, 0.125, 0.125], dtype=torch.float64),
    )
    try:
        r = residual(p.clone(), q.clone())
    except Exception as error:  # noqa: BLE001 - the student's code: any failure is the answer
        return f"residual(p, q) fails: {type(error).__name__}: {error}."
    if not isinstance(r, torch.Tensor) or r.shape != p.shape:
        return f"residual(p, q) must return a tensor shaped like p {tuple(p.shape)}, got {type(r).__name__}."
    notes = []
    if (r < 0).any():
        notes.append("it has negative entries (clamp p - q at 0)")
    if abs(float(r.sum()) - 1) > 1e-4:
        notes.append(f"it sums to {float(r.sum()):.3f}, not 1 (renormalise)")
    if (r[q >= p] > 1e-6).any():
        notes.append("it puts mass on tokens where q >= p: the draft already proposes those often enough")
    example = f"On p = {p.tolist()}, q = {q.tolist()} it returned {[round(float(v), 3) for v in r]}"
    return f"{example}: {'; '.join(notes)}." if notes else f"{example}."


def check_tree_residual(residual, runs: int = 2000, children: int = 3, seed: int = 0) -> tuple[bool, str]:
    """Does tree sampling with ``residual(p, q)`` as its residual step keep the target's distribution?

    One tree node with ``children`` drafts, verified ``runs`` times per rule (SpecInfer, Sequoia) with
    the kit's `tree_sampling.accept_at_node` and the given residual; the emitted tokens are tested
    against the target's ``p`` by chi-square (fails below 1e-3: a correct residual fails 1 time in
    1000 at most; the seeds are fixed, so the verdict is the same on every run). ``(ok, message)``.
    """
    vocab = 6
    p = torch.softmax(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed + 1))[0] * 1.5, -1)
    q = torch.softmax(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed + 3))[0] * 1.5, -1)
    verdicts = []
    for rule in RULES:
        sampler = Sampler(1.0, generator=torch.Generator().manual_seed(seed))
        counts = torch.zeros(vocab)
        try:
            for _ in range(runs):
                tokens = draw_children(q, children, rule, sampler)
                draws = [(i, q) for i in range(len(tokens))]
                counts[accept_at_node(p, draws, tokens, rule, sampler, residual=residual)[1]] += 1
        except NotImplementedError:
            raise  # unfinished: `nb.check` says so
        except Exception as error:  # noqa: BLE001 - the student's code: any failure is the answer
            return False, (
                f"tree sampling with your residual crashed ({type(error).__name__}: {error}). {_diagnose(residual)}"
            )
        pvalue = chi_square_pvalue(counts, p)
        if pvalue < 1e-3:
            seen = [round(float(c) / runs, 3) for c in counts]
            return False, (
                f"with {rule} sampling the tokens drawn do not follow the target: frequencies {seen} "
                f"against p = {[round(float(v), 3) for v in p]} (chi-square p-value {pvalue:.1e}). "
                f"{_diagnose(residual)}"
            )
        verdicts.append(f"{rule} p-value {pvalue:.2f}")
    return True, (
        f"{runs} tree nodes with {children} drafted children each keep the target's distribution "
        f"(chi-square: {', '.join(verdicts)})."
    )
