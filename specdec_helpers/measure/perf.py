"""Performance report: every ratio of the performance goals from ONE interleaved run, plus a profile.

    python -m specdec_helpers perf --preset toy,smollm2-135m

Per preset and prompt, at the preset's k and with its default draft:

- ``vs HF assisted``: HF assisted generation's time / ours (same draft, same constant k; HF's
  confidence-based early stop is turned off so both draft exactly k tokens a round);
- ``vs greedy``: our greedy decoding's time / our speculative time (same target, same kernels), and
  the same against HF ``generate`` greedy;
- ``of bound``: measured speedup over our greedy / the speedup the refined Leviathan formula
  predicts from this run's acceptance alpha, draft/target step cost c and verify cost v, round by
  round with the number of tokens each round actually proposed (`bound_for_rounds`).

``--compile`` adds, per run, a row ``<draft> compiled``: ours with the target's forward compiled over a
static cache (`compiled`) against HF assisted, against our greedy compiled the same way, and against the
bound from a forward-cost curve measured through the compiled forward.

Then the geometric means, and where one round's time goes (torch profiler over the phases the
decode loop labels: draft, target forward, acceptance, cache rollback, the rest).
Timings are medians of interleaved runs; tests never assert them.
"""

from __future__ import annotations

import math

import torch

from specdec_helpers.core.compiled import compiled_forward
from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.core.drafters import HybridDrafter
from specdec_helpers.measure.methods import TreeDraft, draft_label
from specdec_helpers.measure.sweep import load_cases
from specdec_helpers.measure.theory import (
    costs_from_curve,
    expected_tokens_per_step,
    measure_forward_cost,
)

PERF_METHODS = ("hf_greedy", "greedy", "spec_cached", "hf_assisted")
PHASES = ("draft", "target_forward", "accept", "rollback")
# Drafts compared when --draft is not given: n-gram lookup, then the preset's draft model (hybrid), that
# model alone (added by `with_inner_models`), and lookup alone. smollm2-135m's default is the kit's own
# lookup (2-token n-grams or more, proposals growing with the match), which HF cannot express; ours meets
# HF on the plain lookup (HF's prompt lookup) and on the int8 copy of the target (HF assisted generation).
# The shipped feature draft runs behind the lookup, since alone it loses at any k, as a token tree
# (tree:hybrid:eagle, `FEATURE_TREE`: more tokens per target call than its chain, hybrid:eagle, which takes
# its place so the run stays as long). None of these trains on first use (the distilled draft would, for
# ~10 minutes: ask for it with --draft).
DEFAULT_DRAFTS = {"smollm2-135m": "default,tree:hybrid:eagle,prompt-lookup,int8"}


# The shape of 'tree:<draft>' (widths per depth; 'tree:4x2x1:<draft>' names another): the feature draft's top 3
# first tokens, then the best 3 paths a level for two more (EAGLE-2's expansion by total draft log-prob). Of the
# shapes tried on smollm2-135m (3x3x3, 2x2x2, 3x2x1) it kept the most tokens per target call (benchmarks/RESULTS.md).
FEATURE_TREE = (3, 3, 3)


def tree_spec(spec: str) -> tuple[tuple[int, ...] | None, str]:
    """``'tree:eagle'`` -> ``(FEATURE_TREE, 'eagle')``; ``'tree:4x2x1:hybrid:eagle'`` -> ``((4, 2, 1), 'hybrid:eagle')``;
    a spec without ``tree:`` -> ``(None, spec)``."""
    if not spec.startswith("tree:"):
        return None, spec
    rest = spec[len("tree:") :]
    head, _, tail = rest.partition(":")
    if head and all(part.isdigit() and int(part) > 0 for part in head.split("x")):
        shape, rest = tuple(int(part) for part in head.split("x")), tail
    else:
        shape = FEATURE_TREE
    if not rest:
        raise ValueError(f"{spec!r} names no draft: write e.g. 'tree:eagle' or 'tree:4x2x1:hybrid:eagle'")
    return shape, rest


def perf_cases(args) -> list:
    """`sweep.load_cases` for ``args.draft``, where a ``tree:`` spec (`tree_spec`) decodes its draft as a token tree
    (`TreeDraft`), and a hybrid over a draft model is followed by that model alone (`with_inner_models`)."""
    from argparse import Namespace
    from dataclasses import replace

    parsed = [tree_spec(spec.strip()) for spec in args.draft.split(",") if spec.strip()]
    cases = load_cases(Namespace(**{**vars(args), "draft": ",".join(inner for _, inner in parsed)}))
    out = []
    for case, (shape, inner) in zip(cases, parsed):
        if shape is None:
            out += with_inner_models([case])
        else:
            tree = TreeDraft(case.draft, shape, f"tree:{'x'.join(map(str, shape))}:{inner}")
            out.append(replace(case, drafter=tree.label, draft=tree))
    return out


def geometric_mean(values) -> float:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def bound_for_rounds(alpha: float, draft_lengths: list[int], draft_calls: int, c: float, target_curve: dict) -> float:
    """The refined Leviathan bound for the rounds this run actually had.

    Each round proposed ``m`` tokens (n-gram drafters often propose fewer than k, or none; the last
    rounds are cut by max_new_tokens): it is expected to yield (1 - a^(m+1)) / (1 - a) tokens for one
    target pass over m + 1 tokens (from the measured forward-cost curve, in target steps). The draft
    model ran ``draft_calls`` steps of cost c in all (n-gram proposals cost none). Bound = expected
    tokens / expected cost. For a model draft at constant k this is `theory.refined_speedup`.
    """
    sizes, times = target_curve["sizes"], target_curve["median_s"]
    step = times[sizes.index(1)]

    def verify(m):  # the cost of a pass over m + 1 tokens, in target steps (nearest measured size above)
        size = min((n for n in sizes if n >= m + 1), default=max(sizes))
        return times[sizes.index(size)] / step

    tokens = sum(expected_tokens_per_step(alpha, m) for m in draft_lengths)
    cost = draft_calls * c + sum(verify(m) for m in draft_lengths)
    return tokens / cost if cost else float("nan")


def _median_time(run: dict, method: str):
    return run["methods"].get(method, {}).get("median_time")


# (label suffix, our speculative method, our greedy method): `--compile` adds the compiled variant's rows.
VARIANTS = (("", "spec_cached", "greedy"), (" compiled", "spec_compiled", "greedy_compiled"))


def ratio_rows(results: dict) -> list[dict]:
    """One row per (preset, drafter, k, prompt) with the ratios above, then one geometric-mean row each."""
    rows, groups = [], {}
    for run, suffix, spec, greedy_method in ((run, *variant) for run in results["runs"] for variant in VARIANTS):
        ours, greedy = _median_time(run, spec), _median_time(run, greedy_method)
        hf, hf_greedy = _median_time(run, "hf_assisted"), _median_time(run, "hf_greedy")
        if not ours:
            continue
        drafter = run["drafter"] + suffix
        cost = results["costs"][f"{run['preset']}/{drafter}"]
        k = run["k"]
        v = cost["verify_cost"].get(k) or cost["verify_cost"].get(str(k))
        stats = run["methods"][spec]["stats"]
        alpha = stats["alpha"]
        vs_greedy = greedy / ours if greedy else None
        bound = bound_for_rounds(alpha, stats["draft_lengths"], stats["draft_calls"], cost["c"], cost["target_forward"])
        row = dict(
            preset=run["preset"],
            drafter=drafter,
            k=k,
            prompt=run["prompt"],
            acceptance=stats["acceptance_rate"],
            alpha=alpha,
            tokens_per_call=stats["mean_accepted_length"],
            vs_hf_assisted=hf / ours if hf else None,
            vs_greedy=vs_greedy,
            vs_hf_greedy=hf_greedy / ours if hf_greedy else None,
            bound=bound,
            of_bound=vs_greedy / bound if vs_greedy else None,
            c=cost["c"],
            v=v,
            identical=all(m.get("identical", True) for m in run["methods"].values()),
        )
        rows.append(row)
        groups.setdefault((row["preset"], row["drafter"], k), []).append(row)
    _add_vs_best_hf(rows)
    for (preset, drafter, k), group in groups.items():
        mean = {
            key: geometric_mean(r[key] for r in group)
            for key in (
                "vs_hf_assisted",
                "vs_greedy",
                "vs_hf_greedy",
                "vs_best_hf",
                "bound",
                "of_bound",
                "tokens_per_call",
            )
        }
        rows.append(
            dict(
                preset=preset,
                drafter=drafter,
                k=k,
                prompt=f"geometric mean ({len(group)} prompts)",
                acceptance=sum(r["acceptance"] for r in group) / len(group),
                alpha=sum(r["alpha"] for r in group) / len(group),
                c=group[0]["c"],
                v=group[0]["v"],
                identical=all(r["identical"] for r in group),
                **mean,
            )
        )
    return rows


def _add_vs_best_hf(rows: list[dict]) -> None:
    """``vs_best_hf``: our speedup over greedy / the best HF method's (HF greedy, or HF assisted with any draft of the
    run), per preset and prompt. Each draft's rows have their own interleaved greedy, so HF's speedups are read
    against the greedy timed beside them."""
    best = {}
    for r in rows:
        for other in ("vs_hf_greedy", "vs_hf_assisted"):
            if r[other] and r["vs_greedy"]:
                key = (r["preset"], r["prompt"])
                best[key] = max(best.get(key, 0.0), r["vs_greedy"] / r[other])
    for r in rows:
        hf = best.get((r["preset"], r["prompt"]))
        r["vs_best_hf"] = r["vs_greedy"] / hf if hf and r["vs_greedy"] else None


@torch.inference_mode()
def profile_decode(target, draft, input_ids, k: int, max_new_tokens: int = 100) -> dict:
    """Milliseconds per round in each phase of `speculative_decode` (torch profiler), and the rest."""
    from torch.profiler import ProfilerActivity, profile

    speculative_decode(target, draft, input_ids, max_new_tokens=max_new_tokens, num_speculative_tokens=k)  # warm up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = speculative_decode(target, draft, input_ids, max_new_tokens=max_new_tokens, num_speculative_tokens=k)
    rounds = out.stats.target_calls
    totals = {e.key: e.cpu_time_total / 1000 for e in prof.key_averages() if e.key.startswith("specdec::")}
    phases = {name: totals.get(f"specdec::{name}", 0.0) / rounds for name in PHASES}
    wall = out.stats.wall_time_s * 1000 / rounds
    phases["rest"] = max(wall - sum(phases.values()), 0.0)
    draft_calls = out.stats.draft_calls / rounds
    return dict(
        ms_per_round=phases,
        wall_ms_per_round=wall,
        rounds=rounds,
        draft_calls_per_round=draft_calls,
        tokens_per_round=out.stats.mean_accepted_length,
    )


def compiled_costs(costs: dict, target, input_ids) -> dict:
    """The same costs with the target's forward-cost curve measured again through its compiled forward."""
    first = next(iter(costs.values()))
    curve = measure_forward_cost(compiled_forward(target), input_ids, sizes=first["target_forward"]["sizes"], warmup=1)
    return {
        f"{name} compiled": costs_from_curve(curve, cost["draft_step_s"], cost["verify_cost"])
        for name, cost in costs.items()
    }


def with_inner_models(cases: list) -> list:
    """Each case, and after a hybrid drafter with a draft model a case with that model alone, which HF
    assisted generation can run too: that is where ours and HF's are compared. (A feature drafter behind
    the lookup gets no case alone: HF cannot run it, and alone it loses at any k; ask for 'eagle' to see.)"""
    from dataclasses import replace

    out = []
    for case in cases:
        out.append(case)
        if isinstance(case.draft, HybridDrafter) and case.draft.model is not None:
            out.append(replace(case, drafter=draft_label(case.draft.model), draft=case.draft.model))
    return out
