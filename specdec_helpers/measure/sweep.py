"""Sweeps: every case (a preset's pair with one draft) x k x prompt through the harness (`bench`), plus the
forward costs that the theory's predictions need; and the cases and prompts the ``bench`` command sweeps.

Its own module because a sweep is bookkeeping around the harness (what to run, progress over the whole
wait, pooling prompts into a summary), while `bench` holds the rules that make one timing fair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from specdec_helpers.core.drafters import (
    HybridDrafter,
    as_drafter,
)
from specdec_helpers.core.backends import decode_forward
from specdec_helpers.measure.bench import benchmark_ks
from specdec_helpers.measure.methods import METHODS, draft_label
from specdec_helpers.measure.results import (
    SPECULATIVE_METHODS,
    summarize,
    theory_rows,
)
from specdec_helpers.measure.theory import (
    costs_from_curve,
    measure_forward_cost,
)
from specdec_helpers.models import pairs
from specdec_helpers.models.drafts.eagle import measure_draft_step
from specdec_helpers.models.toy import TOY_PROMPTS

PA3_PROMPTS = [
    "The future of Artificial Intelligence is",
    "Write a short story about a robot learning to feel emotions:",
    "Write the lyrics to the song 'Happy Birthday'.",
]
DEFAULT_KS = (1, 2, 4, 8, 16)
# `bench` without --full: under 3 minutes for toy on 2 cores (k around the preset's, 3 prompts, 64 tokens,
# our greedy and HF's as baselines and the cached decoder, each 1 warm-up + 3 timed runs).
QUICK = dict(ks=(2, 4, 8), max_prompts=3, max_new_tokens=64, methods=("hf_greedy", "greedy", "spec_cached"))


@dataclass
class Case:
    """One cell of a sweep: a pair of models, a draft (labelled), and the prompts to run."""

    preset: str
    drafter: str
    target: torch.nn.Module
    draft: object
    prompts: list[tuple[str, torch.Tensor]]  # (text, input_ids)
    eos_token_id: object = None
    extra: dict = field(default_factory=dict)
    decoder: object = None  # a PA3-style decoder to time as the speculative methods (None: the kit's loop)


def run_sweep(
    cases: list[Case],
    ks=DEFAULT_KS,
    *,
    max_new_tokens: int = 100,
    repeats: int = 3,
    warmup: int = 1,
    methods=METHODS,
    cost_repeats: int = 5,
    progress: bool = True,
) -> dict:
    """Benchmark every case x k x prompt (tqdm progress), plus forward costs and the theory.

    Each prompt runs all k in one interleaved schedule (`benchmark_ks`). Returns a JSON-ready dict:
    ``config``, ``runs`` (one `benchmark`-shaped result per case x prompt x k, labelled),
    ``costs`` (per preset/drafter), ``summary`` (per preset/drafter/k/method, prompts pooled) and
    ``theory`` (per preset/drafter/k: predicted vs measured).
    """
    from tqdm.auto import tqdm

    ks = [int(k) for k in ks]
    costs, curves = {}, {}
    for case in tqdm(cases, desc="forward costs", disable=not progress, leave=False):
        # A decoder of one's own runs the models eagerly: its c and v are the eager ones (the kit's loop: as it runs).
        eager = case.decoder is not None
        key = (id(case.target), eager)
        cost = measure_costs(case.target, case.draft, case.prompts[0][1], ks, cost_repeats, curves.get(key), eager)
        curves[key] = cost["target_forward"]
        costs[f"{case.preset}/{case.drafter}"] = cost
    cells = [(case, i) for case in cases for i in range(len(case.prompts))]
    runs = []
    # One bar over every decoding run of the sweep (warm-up and timed), so its estimate covers the whole wait.
    per_prompt = sum(len(ks) if name in SPECULATIVE_METHODS else 1 for name in methods)
    bar = tqdm(total=len(cells) * per_prompt * (warmup + repeats), desc="benchmark", disable=not progress, unit="run")
    for case, i in cells:
        text, ids = case.prompts[i]
        bar.set_postfix_str(f"{case.preset}/{case.drafter} prompt {i + 1}/{len(case.prompts)}")
        by_k = benchmark_ks(
            case.target,
            case.draft,
            ids,
            ks,
            max_new_tokens=max_new_tokens,
            repeats=repeats,
            warmup=warmup,
            methods=methods,
            eos_token_id=case.eos_token_id,
            progress=progress,
            tick=bar.update,
            decoder=case.decoder,
        )
        for k, result in by_k.items():
            result.update(preset=case.preset, drafter=case.drafter, k=k, prompt_index=i, prompt=text)
            runs.append(result)
    bar.close()
    results = dict(
        config=dict(
            ks=ks,
            max_new_tokens=max_new_tokens,
            repeats=repeats,
            warmup=warmup,
            methods=list(methods),
            cost_repeats=cost_repeats,
        ),
        runs=runs,
        costs=costs,
    )
    results["summary"] = summarize(runs)
    results["theory"] = theory_rows(results)
    return results


def measure_costs(
    target, draft, input_ids, ks, repeats: int = 5, target_curve: dict | None = None, eager: bool = False
) -> dict:
    """Target forward-cost curve (1..max(32, k+1) tokens) and the draft/target step-cost ratio c.

    Pass ``target_curve`` to reuse one already measured for the same target (several drafts). ``eager``: time the
    models themselves (as a decoder of one's own runs them), not the forwards the kit's decode runs."""
    run_as = (lambda model: model) if eager else decode_forward
    # Dense where the curve bends (small n), sparse beyond; always every k + 1 the sweep verifies.
    sizes = sorted({*range(1, 9), 12, 16, 24, 32, *(k + 1 for k in ks)})
    # Timed through the forwards a decode runs (`backends.decode_forward`: graphed on a GPU, lean on a CPU Llama).
    curve = target_curve or measure_forward_cost(run_as(target), input_ids, sizes=sizes, repeats=repeats, warmup=1)
    drafter = as_drafter(draft, target)
    # What drafts where a hybrid's lookup finds nothing: that is the step worth timing.
    inner = drafter.model_drafter if isinstance(drafter, HybridDrafter) else drafter
    if inner.needs_target_features:
        draft_step = measure_draft_step(target, inner, input_ids, repeats)
    elif drafter.model is not None:
        model = drafter.model if isinstance(drafter, HybridDrafter) else run_as(drafter.model)
        draft_step = measure_forward_cost(model, input_ids, sizes=[1], repeats=repeats)["median_s"][0]
    else:
        draft_step = 0.0
    return costs_from_curve(curve, draft_step, ks)


# --------------------------------------------------------------------------- command line


# Two more prompts for presets without their own: one prose, one where text repeats (prompt lookup).
EXTRA_PROMPTS = [
    "Explain in a few sentences how a hash table works.",
    "List the days of the week, then list them again in reverse order.",
]


def preset_prompts(preset: str) -> list[str]:
    """Two prompts beyond PA3's three (the toy's corpus-like ones for `toy`): five by default."""
    if preset == "toy":
        return list(TOY_PROMPTS[:2])
    return list(EXTRA_PROMPTS)


def parse_prompts(values) -> list[str]:
    prompts = []
    for value in values:
        if value.startswith("@"):
            prompts += [line.strip() for line in Path(value[1:]).read_text().splitlines() if line.strip()]
        else:
            prompts.append(value)
    return prompts


def load_cases(args) -> list[Case]:
    """One Case per preset x draft; the target is loaded once per preset."""
    cases = []
    for preset in args.preset.split(","):
        pair = pairs.load_pair(preset.strip(), device=args.device)
        prompts = parse_prompts(args.prompts) if args.prompts else PA3_PROMPTS + preset_prompts(pair.preset)
        prompts = prompts[: getattr(args, "max_prompts", None) or len(prompts)]
        if not prompts:
            raise ValueError("no prompts: give --prompts TEXT ... or @file with one prompt a line")
        encode = getattr(pair, "encode", None) or (
            lambda text, pair=pair: pair.tokenizer(text, return_tensors="pt").input_ids.to(pair.device)
        )
        encoded = [(p, encode(p)) for p in prompts]
        for spec in (args.draft or "default").split(","):
            spec = spec.strip()
            draft = pair.draft if spec == "default" else pair.with_draft(spec, progress=True).draft  # may train once
            cases.append(
                Case(
                    preset=pair.preset or preset,
                    drafter=draft_label(draft),
                    target=pair.target,
                    draft=draft,
                    prompts=encoded,
                    eos_token_id=None,
                    extra=dict(device=str(pair.device), dtype=str(pair.dtype)),
                )
            )
    return cases
