"""Benchmark harness: fair timings of decoding methods, sweeps over k and drafters, and the theory.

Fair means: every method is warmed up first; the device is synchronized around each timing (GPU
kernels run asynchronously); methods run interleaved, round-robin (A, B, C, A, B, C, ...) so slow
drift of the machine (other jobs, thermal state) hits them all alike; we report medians with their
spread, not a single run; and new tokens are counted from token ids, never by re-tokenizing text
(decode -> encode does not round-trip, which skewed PA3's tokens/s).

Every method's output is checked against HF ``generate(do_sample=False)``: a speedup that changes
the text is no speedup.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from . import checks
from .decode import greedy_decode, speculative_decode, sync_device
from .drafters import HybridDrafter, ModelDrafter, PromptLookupDrafter

PA3_PROMPTS = [
    "The future of Artificial Intelligence is",
    "Write a short story about a robot learning to feel emotions:",
    "Write the lyrics to the song 'Happy Birthday'.",
]
DEFAULT_KS = (1, 2, 4, 8, 16)
METHODS = ("hf_greedy", "greedy", "spec_vectorized", "spec_cached", "hf_assisted")
METHOD_LABELS = {
    "hf_greedy": "HF generate (greedy)",
    "greedy": "ours greedy",
    "spec_vectorized": "ours speculative, no cache",
    "spec_cached": "ours speculative, KV cache",
    "hf_assisted": "HF assisted generation",
    "greedy_compiled": "ours greedy, compiled",
    "spec_compiled": "ours speculative, compiled",
}
# Opt-in (minutes of compiling first, see `compiled`): the target's forward compiled over a static cache.
COMPILED_METHODS = ("greedy_compiled", "spec_compiled")
SPECULATIVE_METHODS = ("spec_vectorized", "spec_cached", "hf_assisted", "spec_compiled")  # the ones that depend on k
BASELINE, SPECULATIVE = "hf_greedy", "spec_cached"  # what PA3's "baseline"/"speculative" keys mean here


# --------------------------------------------------------------------------- timing primitives


def timed(fn: Callable, device) -> tuple[object, float]:
    """``(fn(), seconds)`` with the device synchronized before and after."""
    sync_device(device)
    start = time.perf_counter()
    result = fn()
    sync_device(device)
    return result, time.perf_counter() - start


def spread(values: list[float]) -> dict:
    """Median, quartiles, min and max: robust summaries for a handful of noisy timings."""
    values = sorted(values)
    if not values:
        return dict(median=float("nan"), q1=float("nan"), q3=float("nan"), min=float("nan"), max=float("nan"))
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return dict(median=statistics.median(values), q1=q1, q3=q3, min=values[0], max=values[-1])


def count_new_tokens(sequences: torch.Tensor, prompt_length: int) -> int:
    """New tokens = output ids minus prompt ids (batch of one). Never decode and re-encode text."""
    return int(sequences.shape[-1]) - int(prompt_length)


def interleaved_order(names: list[str], repeats: int) -> list[str]:
    """Round-robin schedule: every method once per round, ``repeats`` rounds (A B C A B C ...)."""
    return [name for _ in range(repeats) for name in names]


# --------------------------------------------------------------------------- methods


@dataclass
class MethodOutput:
    sequences: torch.Tensor
    stats: dict | None = None  # DecodeStats.as_dict() for our methods
    steps: list | None = None  # per-round Step trace for our speculative methods


class Skip(str):
    """A method that cannot run for this draft (the string says why)."""


def _model_of(draft):
    """The HF model behind a draft, or None for model-free drafters."""
    if isinstance(draft, torch.nn.Module):
        return draft
    if isinstance(draft, ModelDrafter):
        return draft.model
    return None


def draft_label(draft) -> str:
    """A short name for tables: 'prompt-lookup', 'int8', or the draft model's name."""
    if isinstance(draft, PromptLookupDrafter):  # "prompt-lookup" and "prompt-lookup:N" as `pairs.load_pair` names them
        if draft.grow_with_match:
            return f"prompt-lookup:{draft.min_ngram}"
        return "prompt-lookup" if draft.min_ngram == 1 else f"prompt-lookup (min_ngram={draft.min_ngram})"
    if isinstance(draft, HybridDrafter):
        return "hybrid"
    if hasattr(draft, "observe_target"):
        return "eagle"
    model = _model_of(draft)
    if model is None:
        return type(draft).__name__
    if any("quantized" in type(m).__module__ for m in model.modules()):
        return "int8"
    if hasattr(model, "distill_meta"):
        return "distilled"
    # Hub ids name themselves ("pythia-160m-deduped"); a local folder named just "draft" (the toy's) does not.
    name = Path(getattr(model.config, "_name_or_path", "") or "").name
    if name and name != "draft":
        return name
    return f"{model.config.model_type}-{sum(p.numel() for p in model.parameters()) // 1000}k"


def _generate_kwargs(target, input_ids, max_new_tokens, eos_token_id):
    kwargs = dict(attention_mask=torch.ones_like(input_ids), do_sample=False, max_new_tokens=max_new_tokens)
    if eos_token_id is not None:
        kwargs["eos_token_id"] = eos_token_id
    if target.generation_config.pad_token_id is None:  # quiets generate()'s per-call warning (batch of one: unused)
        eos = checks.eos_ids(target, eos_token_id)
        kwargs["pad_token_id"] = eos[0] if eos else 0
    return kwargs


def build_methods(target, draft, k: int, names=METHODS, eos_token_id=None) -> dict:
    """``{name: fn(input_ids, max_new_tokens) -> MethodOutput}``, or a `Skip` note where a method
    cannot express this draft (e.g. HF assisted generation with a custom Drafter)."""
    methods = {}

    def hf_greedy(ids, n):
        return MethodOutput(target.generate(ids, **_generate_kwargs(target, ids, n, eos_token_id)))

    def greedy(compile):
        def run(ids, n):
            out = greedy_decode(target, ids, max_new_tokens=n, eos_token_id=eos_token_id, compile=compile)
            return MethodOutput(out.sequences, out.stats.as_dict())
        return run

    def speculative(use_cache, compile=False):
        def run(ids, n):
            out = speculative_decode(target, draft, ids, max_new_tokens=n, num_speculative_tokens=k,
                                     eos_token_id=eos_token_id, use_cache=use_cache, compile=compile)
            return MethodOutput(out.sequences, out.stats.as_dict(), out.steps)
        return run

    def assisted(ids, n):
        kwargs = _generate_kwargs(target, ids, n, eos_token_id)
        if isinstance(draft, PromptLookupDrafter):
            kwargs.update(prompt_lookup_num_tokens=k, max_matching_ngram_size=draft.max_ngram)
            return MethodOutput(target.generate(ids, **kwargs))
        assistant = _model_of(draft)
        with _constant_k(assistant, k):
            return MethodOutput(target.generate(ids, assistant_model=assistant, **kwargs))

    available = {"hf_greedy": hf_greedy, "greedy": greedy(False), "spec_vectorized": speculative(False),
                 "spec_cached": speculative(True), "hf_assisted": assisted,
                 "greedy_compiled": greedy(True), "spec_compiled": speculative(True, compile=True)}
    for name in names:
        if name not in available:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS + COMPILED_METHODS)}")
        if name == "hf_assisted" and not (isinstance(draft, PromptLookupDrafter) or _model_of(draft) is not None):
            methods[name] = Skip(f"HF assisted generation cannot express a {type(draft).__name__}")
        elif name == "hf_assisted" and isinstance(draft, PromptLookupDrafter) and (draft.min_ngram > 1 or draft.grow_with_match):
            methods[name] = Skip("HF's prompt lookup always falls back to single-token matches and proposes k tokens")
        else:
            methods[name] = available[name]
    return methods


@contextlib.contextmanager
def _constant_k(assistant, k: int):
    """Make HF assisted generation draft exactly ``k`` tokens every round, for one call.

    transformers 5.x reads the draft length from the *assistant's* generation config, not from the
    ``num_assistant_tokens=`` given to ``generate`` (unset, it drafts 20), and it stops drafting early
    when the assistant's top probability falls below ``assistant_confidence_threshold`` (0.4 by
    default). Both sides then draft k tokens a round, and the comparison measures the loops, not
    two drafting policies. The assistant's config is restored afterwards."""
    config = assistant.generation_config
    wanted = dict(num_assistant_tokens=k, num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)
    saved = {name: getattr(config, name, None) for name in wanted}
    for name, value in wanted.items():
        setattr(config, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


@contextlib.contextmanager
def _quiet_transformers():
    """HF generate warns on every assisted call (deprecations); keep benchmark output readable."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


# --------------------------------------------------------------------------- one prompt


def acceptance_by_position(steps) -> dict:
    """Per draft position j: how often it was proposed and accepted (P(accepted | proposed)).

    Position j is accepted only if positions 0..j-1 were, so this falls with j even for a draft
    whose per-token agreement is constant; the conditional rate is what the theory's alpha means.
    """
    width = max((len(s.draft) for s in steps), default=0)
    proposed, accepted = [0] * width, [0] * width
    for step in steps:
        for j in range(len(step.draft)):
            proposed[j] += 1
            accepted[j] += j < step.accepted
    return dict(proposed=proposed, accepted=accepted)


def estimate_alpha(accepted_per_step, draft_lengths) -> float:
    """Per-token acceptance probability alpha (Leviathan et al.'s), from the trace.

    Each round is a run of successes ended by one failure unless the whole draft passed, so the
    maximum-likelihood estimate is accepted / (accepted + rejections). PA3's acceptance rate
    (accepted / proposed) is lower: it also counts the draft tokens after a rejection, never tried.
    """
    accepted = sum(accepted_per_step)
    rejections = sum(1 for a, m in zip(accepted_per_step, draft_lengths) if a < m)
    return accepted / (accepted + rejections) if accepted + rejections else 0.0


def _method_summary(times, new_tokens, baseline_median=None) -> dict:
    tps = [n / t if t > 0 else 0.0 for n, t in zip(new_tokens, times)]
    s = spread(times)
    summary = dict(
        times=times, new_tokens=new_tokens, tokens_per_second=tps,
        avg_time=statistics.fmean(times), avg_tokens_per_second=statistics.fmean(tps),
        median_time=s["median"], q1_time=s["q1"], q3_time=s["q3"], min_time=s["min"], max_time=s["max"],
        median_tokens_per_second=statistics.median(tps),
    )
    if baseline_median:
        summary["speedup"] = baseline_median / s["median"]
        summary["latency_reduction"] = (1 - s["median"] / baseline_median) * 100
    return summary


def _run_interleaved(fns: dict, input_ids, max_new_tokens: int, repeats: int, warmup: int, tick=None) -> dict:
    """Warm up, then time every job round-robin. A job that raises is dropped with a warning (HF
    assisted generation may refuse some drafts) and reported, instead of sinking the whole sweep."""
    outputs, errors = {}, {}
    times = {key: [] for key in fns}
    tokens = {key: [] for key in fns}

    def attempt(key, timed_run):
        try:
            if timed_run:
                outputs[key], seconds = timed(lambda: fns[key](input_ids, max_new_tokens), input_ids.device)
                times[key].append(seconds)
                tokens[key].append(count_new_tokens(outputs[key].sequences, input_ids.shape[1]))
            else:
                outputs[key] = fns[key](input_ids, max_new_tokens)
        except Exception as error:
            errors[key] = f"{type(error).__name__}: {error}"
            warnings.warn(f"benchmark: {key} failed and is skipped: {errors[key]}", stacklevel=3)
        if tick:
            tick()

    for key in interleaved_order(list(fns), warmup):
        if key not in errors:
            attempt(key, timed_run=False)
    order = interleaved_order([key for key in fns if key not in errors], repeats)
    for key in order:
        if key not in errors:
            attempt(key, timed_run=True)
    return dict(outputs=outputs, times=times, tokens=tokens, errors=errors, order=order)


def _assemble(run: dict, keys: dict, skipped: dict, reference, meta: dict) -> dict:
    """One PA3-shaped result from the jobs ``keys`` (method name -> job key) of an interleaved run."""
    ok = {name: key for name, key in keys.items() if key not in run["errors"]}
    baseline = next((name for name in (BASELINE, "greedy") if name in ok), None)
    baseline_median = spread(run["times"][ok[baseline]])["median"] if baseline else None
    results = dict(meta, reference_new_tokens=count_new_tokens(reference, meta["prompt_length"]), methods={})
    for name, key in ok.items():
        out = run["outputs"][key]
        summary = _method_summary(run["times"][key], run["tokens"][key], baseline_median)
        summary["identical"] = bool(out.sequences.shape == reference.shape
                                    and torch.equal(out.sequences.cpu(), reference.cpu()))
        if out.stats is not None:
            summary["stats"] = {k: out.stats[k] for k in ("new_tokens", "proposed", "accepted", "acceptance_rate",
                                                          "mean_accepted_length", "target_calls", "draft_calls",
                                                          "accepted_per_step")}
        if out.steps is not None:
            lengths = [len(step.draft) for step in out.steps]
            summary["stats"]["draft_lengths"] = lengths
            summary["stats"]["alpha"] = estimate_alpha(out.stats["accepted_per_step"], lengths)
            summary["stats"]["by_position"] = acceptance_by_position(out.steps)
        results["methods"][name] = summary
    for name, key in keys.items():
        if key in run["errors"]:
            results["methods"][name] = dict(skipped=run["errors"][key])
    for name, note in skipped.items():
        results["methods"][name] = dict(skipped=note)
    _add_pa3_keys(results, baseline)
    return results


def _reference(target, input_ids, max_new_tokens, eos_token_id):
    """HF greedy output every method must reproduce (also the target's first warm-up)."""
    return target.generate(input_ids, **_generate_kwargs(target, input_ids, max_new_tokens, eos_token_id))


@torch.inference_mode()
def benchmark(target, draft, input_ids, *, num_speculative_tokens: int = 5, max_new_tokens: int = 100,
              repeats: int = 3, warmup: int = 1, methods=METHODS, eos_token_id=None, verbose: bool = False) -> dict:
    """Time several decoding methods on one prompt, interleaved, and check each against HF greedy.

    ``methods``: names from `METHODS`, or a dict ``{name: fn(input_ids, max_new_tokens) -> MethodOutput}``.
    Returns PA3's ``benchmark()`` keys (``speculative``/``baseline`` with ``times``,
    ``tokens_per_second``, ``avg_time``, ``avg_tokens_per_second``; ``speedup``, ``latency_reduction``
    in %) plus ``methods`` (per method: medians, quartiles, min/max, ``identical``, ``speedup``) and the
    acceptance statistics. ``speedup`` is a ratio of *medians* (PA3 used means; one slow run skews those).
    """
    checks.check_positive_int(repeats, "repeats", 1)
    checks.check_positive_int(warmup, "warmup", 0)
    fns = dict(methods) if isinstance(methods, dict) else build_methods(
        target, draft, num_speculative_tokens, methods, eos_token_id)
    skipped = {name: str(fn) for name, fn in fns.items() if isinstance(fn, Skip)}
    runnable = {name: fn for name, fn in fns.items() if name not in skipped}
    with _quiet_transformers():
        reference = _reference(target, input_ids, max_new_tokens, eos_token_id)
        run = _run_interleaved(runnable, input_ids, max_new_tokens, repeats, warmup)
    meta = dict(prompt_length=input_ids.shape[1], num_speculative_tokens=num_speculative_tokens,
                max_new_tokens=max_new_tokens, repeats=repeats, warmup=warmup, order=run["order"])
    results = _assemble(run, {name: name for name in runnable}, skipped, reference, meta)
    if verbose:
        print_pa3(results)
    return results


@torch.inference_mode()
def benchmark_ks(target, draft, input_ids, ks, *, max_new_tokens: int = 100, repeats: int = 3, warmup: int = 1,
                 methods=METHODS, eos_token_id=None, progress: bool = False) -> dict[int, dict]:
    """`benchmark` for several k at once: ``{k: result}``.

    The k-independent baselines run once per round, interleaved with every (method, k) job, so all
    k are compared with the same baseline timings and a sweep costs about a third less.
    """
    checks.check_positive_int(repeats, "repeats", 1)
    checks.check_positive_int(warmup, "warmup", 0)
    jobs, keys, skipped = {}, {}, {}
    for k in ks:
        keys[k], skipped[k] = {}, {}
        for name, fn in build_methods(target, draft, k, methods, eos_token_id).items():
            key = name if name not in SPECULATIVE_METHODS else f"{name}@k={k}"
            if isinstance(fn, Skip):
                skipped[k][name] = str(fn)
                continue
            jobs.setdefault(key, fn)
            keys[k][name] = key
    from tqdm.auto import tqdm

    with _quiet_transformers(), tqdm(total=len(jobs) * (warmup + repeats), desc="runs", unit="run", leave=False,
                                     disable=not progress) as bar:
        reference = _reference(target, input_ids, max_new_tokens, eos_token_id)
        run = _run_interleaved(jobs, input_ids, max_new_tokens, repeats, warmup, tick=bar.update)
    meta = dict(prompt_length=input_ids.shape[1], max_new_tokens=max_new_tokens, repeats=repeats, warmup=warmup,
                order=run["order"])
    return {k: _assemble(run, keys[k], skipped[k], reference, dict(meta, num_speculative_tokens=k)) for k in ks}


def _add_pa3_keys(results: dict, baseline: str | None) -> None:
    """PA3's result shape: results['speculative'|'baseline'] and the headline numbers."""
    keys = ("times", "tokens_per_second", "avg_time", "avg_tokens_per_second", "median_time")
    methods = results["methods"]
    speculative = next((m for m in (SPECULATIVE, "spec_vectorized") if "times" in methods.get(m, {})), None)
    results["speculative"] = {key: methods[speculative][key] for key in keys} if speculative else None
    results["baseline"] = {key: methods[baseline][key] for key in keys} if baseline else None
    results["speculative_method"], results["baseline_method"] = speculative, baseline
    if speculative and baseline:
        results["speedup"] = methods[speculative]["speedup"]
        results["latency_reduction"] = methods[speculative]["latency_reduction"]
    stats = methods.get(speculative, {}).get("stats") if speculative else None
    if stats:
        results["acceptance_rate"] = stats["acceptance_rate"]
        results["mean_accepted_length"] = stats["mean_accepted_length"]
        results["alpha"] = stats["alpha"]


def print_pa3(results: dict, file=None) -> None:
    """The lines PA3's notebook printed, so students can compare with their own."""
    say = lambda text: print(text, file=file or sys.stdout)  # noqa: E731
    if results.get("speculative"):
        spec = results["speculative"]
        say(f"Average speculative decoding time: {spec['avg_time']:.2f} seconds")
        say(f"Average speculative tokens per second: {spec['avg_tokens_per_second']:.2f}")
    if results.get("baseline"):
        base = results["baseline"]
        say(f"Average baseline decoding time: {base['avg_time']:.2f} seconds")
        say(f"Average baseline tokens per second: {base['avg_tokens_per_second']:.2f}")
    if "speedup" in results:
        say(f"Speedup: {results['speedup']:.2f}x")
        say(f"Latency reduction: {results['latency_reduction']:.2f}%")
    if "acceptance_rate" in results:
        say(f"Draft token acceptance rate: {results['acceptance_rate']:.2%}")


# --------------------------------------------------------------------------- costs and theory


def _random_prefix(model, length: int = 16, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    vocab = model.get_input_embeddings().num_embeddings
    return torch.randint(0, vocab, (1, length), generator=generator).to(model.device)


@torch.inference_mode()
def measure_forward_cost(model, input_ids: torch.Tensor | None = None, sizes=range(1, 33), repeats: int = 5,
                         warmup: int = 2) -> dict:
    """Time of ONE forward pass over ``n`` new tokens on top of a cached prefix, for each ``n``.

    This is the curve speculative decoding lives on: on a GPU (and often a CPU) scoring k + 1
    tokens costs little more than 1, so verifying a draft is nearly free. Sizes run interleaved.
    Returns ``{"sizes", "median_s", "q1_s", "q3_s"}``.
    """
    from .cache import crop_cache, new_cache

    prefix = _random_prefix(model) if input_ids is None else input_ids.to(model.device)
    prefix_length = prefix.shape[1]
    sizes = [int(n) for n in sizes]
    # A `compiled.CompiledForward` brings its own (static) cache.
    cache = model.new_cache(prefix_length + max(sizes)) if hasattr(model, "new_cache") else new_cache(model)
    model(input_ids=prefix, past_key_values=cache, use_cache=True)
    filler = _random_prefix(model, max(sizes), seed=1)

    def run(n):
        model(input_ids=filler[:, :n], past_key_values=cache, use_cache=True, logits_to_keep=n)
        crop_cache(cache, prefix_length)

    for _ in range(warmup):
        for n in sizes:
            run(n)
    times = {n: [] for n in sizes}
    for n in interleaved_order(sizes, repeats):
        times[n].append(timed(lambda: run(n), model.device)[1])
    spreads = [spread(times[n]) for n in sizes]
    return dict(sizes=sizes, median_s=[s["median"] for s in spreads], q1_s=[s["q1"] for s in spreads],
                q3_s=[s["q3"] for s in spreads], prefix_length=prefix_length)


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


def measure_costs(target, draft, input_ids, ks, repeats: int = 5, target_curve: dict | None = None) -> dict:
    """Target forward-cost curve (1..max(32, k+1) tokens) and the draft/target step-cost ratio c.

    Pass ``target_curve`` to reuse one already measured for the same target (several drafts)."""
    # Dense where the curve bends (small n), sparse beyond; always every k + 1 the sweep verifies.
    sizes = sorted({*range(1, 9), 12, 16, 24, 32, *(k + 1 for k in ks)})
    curve = target_curve or measure_forward_cost(target, input_ids, sizes=sizes, repeats=repeats, warmup=1)
    model = _model_of(draft) or getattr(draft, "model", None)  # also the model inside a hybrid drafter
    from .eagle import feature_drafter_in, measure_draft_step

    features = feature_drafter_in(draft)  # a drafter reading the target's features, alone or in a hybrid
    if features is not None:
        draft_step = measure_draft_step(target, features, input_ids, repeats)
    elif model is not None:
        draft_step = measure_forward_cost(model, input_ids, sizes=[1], repeats=repeats)["median_s"][0]
    else:
        draft_step = 0.0
    return costs_from_curve(curve, draft_step, ks)


def costs_from_curve(curve: dict, draft_step_s: float, ks) -> dict:
    """Step cost, c and the verify cost v at each k, from a target forward-cost curve and a draft step time."""
    step = curve["median_s"][curve["sizes"].index(1)]
    return dict(target_forward=curve, target_step_s=step, draft_step_s=draft_step_s, c=draft_step_s / step,
                verify_cost={int(k): curve["median_s"][curve["sizes"].index(int(k) + 1)] / step for k in ks})


# --------------------------------------------------------------------------- sweeps


def environment(device=None, dtype=None, preset=None) -> dict:
    """What produced a result file: versions, hardware, commit, date."""
    import transformers

    env = dict(
        python=platform.python_version(), torch=torch.__version__, transformers=transformers.__version__,
        platform=platform.platform(), processor=platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(), torch_threads=torch.get_num_threads(),
        device=str(device) if device is not None else None, dtype=str(dtype).replace("torch.", "") if dtype else None,
        preset=preset, git_commit=_git_commit(), date=datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
    )
    if hasattr(os, "sched_getaffinity"):
        env["cpus_available"] = len(os.sched_getaffinity(0))
    if device is not None and torch.device(device).type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def _git_commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, timeout=5)
        if commit.returncode:
            return None
        return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


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


def run_sweep(cases: list[Case], ks=DEFAULT_KS, *, max_new_tokens: int = 100, repeats: int = 3, warmup: int = 1,
              methods=METHODS, cost_repeats: int = 5, progress: bool = True) -> dict:
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
        cost = measure_costs(case.target, case.draft, case.prompts[0][1], ks, cost_repeats, curves.get(id(case.target)))
        curves[id(case.target)] = cost["target_forward"]
        costs[f"{case.preset}/{case.drafter}"] = cost
    cells = [(case, i) for case in cases for i in range(len(case.prompts))]
    runs = []
    bar = tqdm(cells, desc="benchmark", disable=not progress, unit="prompt")
    for case, i in bar:
        text, ids = case.prompts[i]
        bar.set_postfix_str(f"{case.preset}/{case.drafter} prompt {i + 1}")
        by_k = benchmark_ks(case.target, case.draft, ids, ks, max_new_tokens=max_new_tokens, repeats=repeats,
                            warmup=warmup, methods=methods, eos_token_id=case.eos_token_id, progress=progress)
        for k, result in by_k.items():
            result.update(preset=case.preset, drafter=case.drafter, k=k, prompt_index=i, prompt=text)
            runs.append(result)
    results = dict(config=dict(ks=ks, max_new_tokens=max_new_tokens, repeats=repeats, warmup=warmup,
                               methods=list(methods), cost_repeats=cost_repeats),
                   runs=runs, costs=costs)
    results["summary"] = summarize(runs)
    results["theory"] = theory_rows(results)
    return results


def summarize(runs: list[dict]) -> list[dict]:
    """Pool prompts per (preset, drafter, k, method): total median time, speedup vs HF greedy and
    vs our greedy (ratios of summed medians), tokens/s, and acceptance from summed counts."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["preset"], run["drafter"], run["k"]), []).append(run)
    rows = []
    for (preset, drafter, k), group in groups.items():
        names = list(dict.fromkeys(name for run in group for name in run["methods"]))
        totals = {name: _pooled(group, name) for name in names}
        for name in names:
            row = dict(preset=preset, drafter=drafter, k=k, method=name, **totals[name])
            for base, key in ((BASELINE, "speedup"), ("greedy", "speedup_vs_greedy")):
                if totals.get(base, {}).get("time") and row.get("time"):
                    row[key] = totals[base]["time"] / row["time"]
            if row.get("speedup"):
                row["latency_reduction"] = (1 - 1 / row["speedup"]) * 100
            rows.append(row)
    return rows


def _pooled(group: list[dict], name: str) -> dict:
    entries = [run["methods"].get(name, {}) for run in group]
    if any("median_time" not in e for e in entries):
        note = next((e.get("skipped") for e in entries if e.get("skipped")), "did not run")
        return dict(skipped=note)
    time_ = sum(e["median_time"] for e in entries)
    tokens = sum(statistics.median(e["new_tokens"]) for e in entries)
    row = dict(time=time_, q1_time=sum(e["q1_time"] for e in entries), q3_time=sum(e["q3_time"] for e in entries),
               new_tokens=tokens, tokens_per_second=tokens / time_ if time_ else 0.0,
               identical=all(e["identical"] for e in entries))
    stats = [e["stats"] for e in entries if "stats" in e]
    if stats and len(stats) == len(entries):
        proposed = sum(s["proposed"] for s in stats)
        accepted = sum(s["accepted"] for s in stats)
        row["acceptance_rate"] = accepted / proposed if proposed else 0.0
        row["mean_accepted_length"] = sum(s["new_tokens"] for s in stats) / sum(s["target_calls"] for s in stats)
        if all("alpha" in s for s in stats):
            per_step = [a for s in stats for a in s["accepted_per_step"]]
            lengths = [m for s in stats for m in s["draft_lengths"]]
            row["alpha"] = estimate_alpha(per_step, lengths)
    return row


def theory_rows(results: dict) -> list[dict]:
    """Predicted vs measured, per (preset, drafter, k), from the cached speculative runs."""
    rows = []
    for row in results["summary"]:
        if row["method"] != SPECULATIVE or "alpha" not in row:
            continue
        cost = results["costs"].get(f"{row['preset']}/{row['drafter']}")
        if cost is None:
            continue
        k, alpha, c = row["k"], row["alpha"], cost["c"]
        v = cost["verify_cost"].get(k) or cost["verify_cost"].get(str(k))  # JSON turns int keys into strings
        rows.append(dict(
            preset=row["preset"], drafter=row["drafter"], k=k, alpha=alpha, c=c, v=v,
            expected_tokens_per_step=expected_tokens_per_step(alpha, k),
            measured_tokens_per_step=row["mean_accepted_length"],
            predicted_speedup=expected_speedup(alpha, k, c), refined_speedup=refined_speedup(alpha, k, c, v),
            measured_speedup_vs_greedy=row.get("speedup_vs_greedy"), measured_speedup=row.get("speedup"),
        ))
    return rows


def best_k(results: dict, preset=None, drafter=None) -> int | None:
    """The k with the highest measured speedup of the cached speculative decoder."""
    rows = [r for r in results["summary"] if r["method"] == SPECULATIVE and r.get("speedup")
            and (preset is None or r["preset"] == preset) and (drafter is None or r["drafter"] == drafter)]
    return max(rows, key=lambda r: r["speedup"])["k"] if rows else None


def save_results(results: dict, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=_json_default))
    return path


def load_results(path) -> dict:
    """One results JSON, or every ``*.json`` in a folder merged (runs, summary, theory, costs pooled)."""
    path = Path(path)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"no results JSON in {path}; run `python -m specdec_helpers bench` first")
    loaded = [json.loads(f.read_text()) for f in files]
    if len(loaded) == 1:
        return loaded[0]
    merged = dict(config=loaded[0]["config"], envs=[r["env"] for r in loaded if "env" in r], env=loaded[0].get("env"),
                  runs=[], summary=[], theory=[], costs={})
    for r in loaded:
        merged["runs"] += r["runs"]
        merged["summary"] += r["summary"]
        merged["theory"] += r["theory"]
        merged["costs"].update(r["costs"])
    return merged


def _json_default(obj):
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, (torch.dtype, torch.device, Path)):
        return str(obj)
    raise TypeError(f"cannot store {type(obj).__name__} in JSON")


# --------------------------------------------------------------------------- command line


# Two more prompts for presets without their own: one prose, one where text repeats (prompt lookup).
EXTRA_PROMPTS = [
    "Explain in a few sentences how a hash table works.",
    "List the days of the week, then list them again in reverse order.",
]


def _preset_prompts(preset: str) -> list[str]:
    """Two prompts beyond PA3's three (the toy's corpus-like ones for `toy`): five by default."""
    if preset == "toy":
        from .toy import TOY_PROMPTS

        return list(TOY_PROMPTS[:2])
    return list(EXTRA_PROMPTS)


def _parse_prompts(values) -> list[str]:
    prompts = []
    for value in values:
        if value.startswith("@"):
            prompts += [line.strip() for line in Path(value[1:]).read_text().splitlines() if line.strip()]
        else:
            prompts.append(value)
    return prompts


def _load_cases(args) -> list[Case]:
    """One Case per preset x draft; the target is loaded once per preset."""
    from . import pairs

    cases = []
    for preset in args.preset.split(","):
        pair = pairs.load_pair(preset.strip(), device=args.device)
        prompts = _parse_prompts(args.prompts) if args.prompts else PA3_PROMPTS + _preset_prompts(pair.preset)
        encode = getattr(pair, "encode", None) or (
            lambda text: pair.tokenizer(text, return_tensors="pt").input_ids.to(pair.device))
        encoded = [(p, encode(p)) for p in prompts]
        for spec in (args.draft or "default").split(","):
            spec = spec.strip()
            draft = pair.draft if spec == "default" else pair.with_draft(spec, progress=True).draft  # may train once
            cases.append(Case(preset=pair.preset or preset, drafter=draft_label(draft), target=pair.target,
                              draft=draft, prompts=encoded, eos_token_id=None,
                              extra=dict(device=str(pair.device), dtype=str(pair.dtype))))
    return cases


def print_summary(results: dict, file=None) -> None:
    """One PA3-style block per (preset, drafter, k), then the sweep table."""
    from .report import sweep_table, to_markdown

    out = file or sys.stdout
    for row in results["summary"]:
        if row["method"] == SPECULATIVE and row.get("speedup"):
            print(f"{row['preset']}/{row['drafter']} k={row['k']}: Speedup: {row['speedup']:.2f}x  "
                  f"Latency reduction: {row['latency_reduction']:.2f}%  "
                  f"Draft token acceptance rate: {row['acceptance_rate']:.2%}", file=out)
    print("\n" + to_markdown(*sweep_table(results)), file=out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers bench",
                                     description="Benchmark speculative decoding against greedy baselines (sweep over k).")
    parser.add_argument("--preset", default="toy", help="preset name(s), comma-separated (default: toy)")
    parser.add_argument("--draft", default=None,
                        help="draft(s), comma-separated: default, or a drafter name as in load_pair (prompt-lookup, "
                             "prompt-lookup:2, int8, distilled, eagle, hybrid:<name>), or a hub id (default: the preset's)")
    parser.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)), help="draft lengths k (default: 1,2,4,8,16)")
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method (interleaved)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per method first")
    parser.add_argument("--prompts", nargs="+", default=None,
                        help="prompt strings, or @file with one prompt a line (default: the 3 PA3 prompts + 2 more: five)")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default="report", help="folder for results/, figures/, tables/ (default: report)")
    parser.add_argument("--no-figures", action="store_true", help="skip figures and tables")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",") if k.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    cases = _load_cases(args)
    results = run_sweep(cases, ks, max_new_tokens=args.max_new_tokens, repeats=args.repeats, warmup=args.warmup,
                        methods=methods)
    first = cases[0]
    results["env"] = environment(first.extra.get("device"), first.extra.get("dtype"),
                                 ",".join(dict.fromkeys(c.preset for c in cases)))
    out = Path(args.out)
    name = "bench_" + "_".join(dict.fromkeys(c.preset for c in cases)).replace("/", "-")
    path = save_results(results, out / "results" / f"{name}.json")
    print(f"results: {path}", file=sys.stderr)
    if not args.no_figures:
        from .plots import save_all_figures
        from .report import write_tables

        figures = save_all_figures(results, out / "figures")
        tables = write_tables(results, out / "tables")
        print(f"figures: {len(figures)} files in {out / 'figures'}; tables: {len(tables)} files in {out / 'tables'}",
              file=sys.stderr)
    print_summary(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
