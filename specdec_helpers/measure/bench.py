"""Benchmark harness: fair timings of decoding methods on one prompt, for one k or several at once.

Fair means: every method is warmed up first; the device is synchronized around each timing (GPU
kernels run asynchronously); methods run interleaved, round-robin (A, B, C, A, B, C, ...) so slow
drift of the machine (other jobs, thermal state) hits them all alike; we report medians with their
spread, not a single run; and new tokens are counted from token ids, never by re-tokenizing text
(decode -> encode does not round-trip, which skewed PA3's tokens/s).

Every method's output is checked against HF ``generate(do_sample=False)``: a speedup that changes
the text is no speedup. ``identical`` is token-for-token equality; ``matches_greedy`` also accepts a
numerical near-tie (top-2 logits within `checks.NEAR_TIE` of each other, where fp16/bf16 kernels may
pick either token), as the notebooks' greedy checks do (`checks.greedy_divergence`).

A ``decoder`` argument (an object with PA3's ``SpeculativeDecoder`` interface: the one a student
wrote) makes the speculative methods time that decoder instead of the kit's loop (`observed`).

Sweeps over presets, drafts and prompts, with forward costs for the theory, are `sweep`.
"""

from __future__ import annotations

import statistics
import sys
import warnings

import torch

from specdec_helpers.core import checks
from specdec_helpers.core.timing import interleaved_order, spread, timed
from specdec_helpers.measure.methods import (
    METHODS,
    Skip,
    _generate_kwargs,
    _quiet_transformers,
    build_methods,
)
from specdec_helpers.measure.results import (
    BASELINE,
    SPECULATIVE,
    SPECULATIVE_METHODS,
)
from specdec_helpers.measure.speedup import ratio_words
from specdec_helpers.measure.theory import estimate_alpha


def count_new_tokens(sequences: torch.Tensor, prompt_length: int) -> int:
    """New tokens = output ids minus prompt ids (batch of one). Never decode and re-encode text."""
    return int(sequences.shape[-1]) - int(prompt_length)


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


def _method_summary(times, new_tokens, baseline=None) -> dict:
    """One method's timings. Its rate, ``median_tokens_per_second``, is the median new tokens over the median
    time; ``speedup`` is this rate over ``baseline``'s (a `_method_summary` too): one definition of tokens per
    second for every method, and the speedup computed from those same numbers (PA3's ``avg_*``, means of
    per-run values, stay for comparison, but a mean of rates can disagree with a ratio of medians under load)."""
    tps = [n / t if t > 0 else 0.0 for n, t in zip(new_tokens, times)]
    s = spread(times)
    summary = dict(
        times=times,
        new_tokens=new_tokens,
        tokens_per_second=tps,
        avg_time=statistics.fmean(times),
        avg_tokens_per_second=statistics.fmean(tps),
        median_time=s["median"],
        q1_time=s["q1"],
        q3_time=s["q3"],
        min_time=s["min"],
        max_time=s["max"],
        median_tokens_per_second=statistics.median(new_tokens) / s["median"] if s["median"] > 0 else 0.0,
    )
    if baseline and baseline["median_tokens_per_second"]:
        summary["speedup"] = summary["median_tokens_per_second"] / baseline["median_tokens_per_second"]
        summary["latency_reduction"] = (1 - s["median"] / baseline["median_time"]) * 100
    return summary


def _run_interleaved(fns: dict, input_ids, max_new_tokens: int, repeats: int, warmup: int, tick=None) -> dict:
    """Warm up, then time every job round-robin. A job that raises is dropped with a warning (HF
    assisted generation may refuse some drafts) and reported, instead of sinking the whole sweep; but
    a NotImplementedError (unfinished work: a stub, or a decoder's missing part naming its notebook)
    is raised, so the reader sees what to finish instead of a sweep without that method."""
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
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - a method that fails is named and skipped; the rest run
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


def _greedy_check(target, prompt, reference, sequences) -> tuple[bool, bool, str]:
    """(identical, matches_greedy, note): exact equality, else `checks.greedy_divergence` (near-ties)."""
    if sequences.shape == reference.shape and torch.equal(sequences.cpu(), reference.cpu()):
        return True, True, ""
    start = prompt.shape[1]
    if sequences.shape[1] < start or not torch.equal(sequences[0, :start].cpu(), prompt[0].cpu()):
        return False, False, "the output does not start with the prompt"
    ok, note = checks.greedy_divergence(target, prompt, sequences[0, start:], want=reference[0, start:].tolist())
    return False, ok, note


def _assemble(run: dict, keys: dict, skipped: dict, reference, meta: dict, target=None, prompt=None) -> dict:
    """One PA3-shaped result from the jobs ``keys`` (method name -> job key) of an interleaved run."""
    ok = {name: key for name, key in keys.items() if key not in run["errors"]}
    baseline = next((name for name in (BASELINE, "greedy") if name in ok), None)
    base = _method_summary(run["times"][ok[baseline]], run["tokens"][ok[baseline]]) if baseline else None
    results = dict(meta, reference_new_tokens=count_new_tokens(reference, meta["prompt_length"]), methods={})
    for name, key in ok.items():
        out = run["outputs"][key]
        summary = _method_summary(run["times"][key], run["tokens"][key], base)
        if target is None:
            summary["identical"] = summary["matches_greedy"] = bool(
                out.sequences.shape == reference.shape and torch.equal(out.sequences.cpu(), reference.cpu())
            )
        else:
            summary["identical"], summary["matches_greedy"], note = _greedy_check(
                target, prompt, reference, out.sequences
            )
            if note:
                summary["greedy_note"] = note
        if out.stats is not None:
            summary["stats"] = {
                k: out.stats[k]
                for k in (
                    "new_tokens",
                    "proposed",
                    "accepted",
                    "acceptance_rate",
                    "mean_accepted_length",
                    "target_calls",
                    "draft_calls",
                    "accepted_per_step",
                )
            }
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
def benchmark(
    target,
    draft,
    input_ids,
    *,
    num_speculative_tokens: int = 5,
    max_new_tokens: int = 100,
    repeats: int = 3,
    warmup: int = 1,
    methods=METHODS,
    eos_token_id=None,
    verbose: bool = False,
    decoder=None,
) -> dict:
    """Time several decoding methods on one prompt, interleaved, and check each against HF greedy.

    ``methods``: names from `METHODS`, or a dict ``{name: fn(input_ids, max_new_tokens) -> MethodOutput}``;
    ``decoder``: time this PA3-style decoder as the speculative methods (see the module docstring).
    Returns PA3's ``benchmark()`` keys (``speculative``/``baseline`` with ``times``,
    ``tokens_per_second``, ``avg_time``, ``avg_tokens_per_second``; ``speedup``, ``latency_reduction``
    in %) plus ``methods`` (per method: medians, quartiles, min/max, ``identical``, ``speedup``) and the
    acceptance statistics. ``speedup`` is a ratio of *medians* (PA3 used means; one slow run skews those).
    """
    checks.check_positive_int(repeats, "repeats", 1)
    checks.check_positive_int(warmup, "warmup", 0)
    fns = (
        dict(methods)
        if isinstance(methods, dict)
        else build_methods(target, draft, num_speculative_tokens, methods, eos_token_id, decoder)
    )
    skipped = {name: str(fn) for name, fn in fns.items() if isinstance(fn, Skip)}
    runnable = {name: fn for name, fn in fns.items() if name not in skipped}
    with _quiet_transformers():
        reference = _reference(target, input_ids, max_new_tokens, eos_token_id)
        run = _run_interleaved(runnable, input_ids, max_new_tokens, repeats, warmup)
    meta = dict(
        prompt_length=input_ids.shape[1],
        num_speculative_tokens=num_speculative_tokens,
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        warmup=warmup,
        order=run["order"],
    )
    results = _assemble(run, {name: name for name in runnable}, skipped, reference, meta, target, input_ids)
    if verbose:
        print_pa3(results)
    return results


@torch.inference_mode()
def benchmark_ks(
    target,
    draft,
    input_ids,
    ks,
    *,
    max_new_tokens: int = 100,
    repeats: int = 3,
    warmup: int = 1,
    methods=METHODS,
    eos_token_id=None,
    progress: bool = False,
    tick=None,
    decoder=None,
) -> dict[int, dict]:
    """`benchmark` for several k at once: ``{k: result}``. ``tick()`` is called after every run (a
    caller's progress bar over a whole sweep); without it, ``progress`` shows a bar of its own.

    The k-independent baselines run once per round, interleaved with every (method, k) job, so all
    k are compared with the same baseline timings and a sweep costs about a third less.
    """
    checks.check_positive_int(repeats, "repeats", 1)
    checks.check_positive_int(warmup, "warmup", 0)
    jobs, keys, skipped = {}, {}, {}
    for k in ks:
        keys[k], skipped[k] = {}, {}
        for name, fn in build_methods(target, draft, k, methods, eos_token_id, decoder).items():
            key = name if name not in SPECULATIVE_METHODS else f"{name}@k={k}"
            if isinstance(fn, Skip):
                skipped[k][name] = str(fn)
                continue
            jobs.setdefault(key, fn)
            keys[k][name] = key
    from tqdm.auto import tqdm

    with (
        _quiet_transformers(),
        tqdm(
            total=len(jobs) * (warmup + repeats),
            desc="runs",
            unit="run",
            leave=False,
            disable=not progress or tick is not None,
        ) as bar,
    ):
        reference = _reference(target, input_ids, max_new_tokens, eos_token_id)
        run = _run_interleaved(jobs, input_ids, max_new_tokens, repeats, warmup, tick=tick or bar.update)
    meta = dict(
        prompt_length=input_ids.shape[1],
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        warmup=warmup,
        order=run["order"],
    )
    return {
        k: _assemble(run, keys[k], skipped[k], reference, dict(meta, num_speculative_tokens=k), target, input_ids)
        for k in ks
    }


def _add_pa3_keys(results: dict, baseline: str | None) -> None:
    """PA3's result shape: results['speculative'|'baseline'] and the headline numbers."""
    keys = (
        "times",
        "tokens_per_second",
        "avg_time",
        "avg_tokens_per_second",
        "median_time",
        "median_tokens_per_second",
        "new_tokens",
    )
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
    """PA3's headline lines, with one definition of tokens per second for both decoders (the median new tokens
    over the median time of the timed runs) and the speedup as the ratio of those two printed rates."""
    say = lambda text: print(text, file=file or sys.stdout)
    rates = {}
    for role in ("speculative", "baseline"):
        m = results.get(role)
        if m:
            rates[role] = m["median_tokens_per_second"]
            say(
                # Four significant digits: enough to recompute the printed speedup from the printed times.
                f"{role.capitalize()} decoding: median time {m['median_time']:#.4g} seconds over {len(m['times'])} runs, "
                f"{rates[role]:.2f} tokens per second (new tokens / median time)"
            )
    if "speedup" in results and len(rates) == 2:
        say(
            f"Speedup: {rates['speculative']:.2f} / {rates['baseline']:.2f} tokens per second = {results['speedup']:.2f}x; "
            + ratio_words(results["baseline"]["times"], results["speculative"]["times"], results["speedup"])
        )
        say(f"Latency reduction: {results['latency_reduction']:.2f}%")
    if "acceptance_rate" in results:
        say(f"Draft token acceptance rate: {results['acceptance_rate']:.2%}")
