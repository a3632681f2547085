"""Notebook 05's helpers (reached as ``nb.benchmarking``): benchmark a decoder, sweep k, export.

The notebook benchmarks the ``SpeculativeDecoder`` the student wrote (``nb.your_decoder("05", pair)``):
with a ``decoder``, the harness's speculative methods run its ``generate_ids`` and read its rounds
from the outside (`measure.observed`); without one, the kit's own loop (the instructor's ``bench``).
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

from specdec_helpers.core import timing
from specdec_helpers.measure import bench
from specdec_helpers.measure import results as results_io
from specdec_helpers.measure.methods import draft_label
from specdec_helpers.measure.sweep import Case, run_sweep
from specdec_helpers.present import headline, plots, tables

METHOD_LABELS = results_io.METHOD_LABELS
best_k = results_io.best_k
speedup_to_report = headline.speedup_to_report  # the one speedup notebook 05 says to report


def export_dir(default: str = "report") -> Path:
    """Where notebook 05 writes results, figures and tables (an absolute path):

    - ``$SPECDEC_EXPORT_DIR`` if set (the notebook tests point it at a temporary folder);
    - else ``report/`` of the course checkout the notebook runs in: the nearest folder, from the working
      directory up, that holds ``pyproject.toml``, ``notebooks/`` and ``report/`` (so a notebook run in
      ``notebooks/`` writes to the checkout's ``report/`` whether the kit is installed editable or not);
    - else ``./report`` (on Colab: /content/report, where ``python -m specdec_helpers report`` looks).
    """
    if os.environ.get("SPECDEC_EXPORT_DIR"):
        return Path(os.environ["SPECDEC_EXPORT_DIR"]).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "notebooks").is_dir() and (folder / default).is_dir():
            return folder / default
    return here / default


def show_harness(methods=("hf_greedy", "greedy", "spec_cached"), repeats: int = 2) -> None:
    """Print the harness's two timing rules as code, and the interleaved order they give."""
    print(inspect.getsource(timing.timed))
    print(inspect.getsource(timing.interleaved_order))
    print(timing.interleaved_order(list(methods), repeats))


def benchmark(pair, decoder=None, prompt_ids=None, **kwargs) -> dict:
    """`bench.benchmark` on ``pair``'s models, the speculative methods running ``decoder`` when given."""
    kwargs.setdefault("num_speculative_tokens", pair.num_speculative_tokens)
    return bench.benchmark(pair.target, pair.draft, prompt_ids, decoder=decoder, **kwargs)


def print_methods(result: dict) -> None:
    """PA3's printout, then one line per method: median time (four significant digits, enough to recompute the
    speedup), speed-up against HF greedy, and whether it matches greedy; the sample named first."""
    timed_runs = next((len(m["times"]) for m in result["methods"].values() if "times" in m), 0)
    print(
        f"One prompt, {timed_runs} interleaved timed runs per method (medians; not the figure to report: that is the sweep's, below)"
    )
    bench.print_pa3(result)
    base = METHOD_LABELS[results_io.BASELINE]
    for name, m in result["methods"].items():
        if "median_time" not in m:
            continue
        same = "identical" if m["identical"] else "equal up to near-ties" if m.get("matches_greedy") else "DIFFERS"
        print(
            f"{METHOD_LABELS[name]:28s} median {m['median_time'] * 1e3:#8.4g} ms  "
            f"speedup vs {base} {m.get('speedup', float('nan')):5.2f}x  output vs HF greedy: {same}"
        )


def matches_greedy(target, prompt_ids, sequences, reference) -> tuple[bool, str]:
    """Is ``sequences`` the target's greedy output ``reference`` (both ``[1, prompt + new]``), token for token
    or up to numerical near-ties (`core.checks.greedy_divergence`, as the checks of 03 and 04)? ``(ok, note)``."""
    _, ok, note = bench._greedy_check(target, prompt_ids, reference, sequences)
    return ok, note or "identical to greedy decoding"


def all_match_greedy(result: dict) -> bool:
    """Every method's output is the target's greedy output (numerical near-ties allowed, as in 03/04)."""
    return all(m.get("matches_greedy", m["identical"]) for m in result["methods"].values() if "identical" in m)


def sweep(pair, decoder=None, prompts=None, ks=(2, 4, 8, 16), *, preset: str | None = None, **kwargs) -> dict:
    """`sweep.run_sweep` over ``ks`` on ``prompts`` (``[(text, input_ids), ...]``) for one pair, with the
    environment recorded and ``config["decoder"]`` saying whose speculative decoder was timed."""
    case = Case(
        preset=pair.preset or preset or "custom",
        drafter=draft_label(pair.draft),
        target=pair.target,
        draft=pair.draft,
        prompts=list(prompts),
        decoder=decoder,
    )
    kwargs.setdefault("progress", False)
    results = run_sweep([case], ks, **kwargs)
    results["config"]["decoder"] = _whose(decoder)
    results["env"] = results_io.environment(pair.device, pair.dtype, pair.preset)
    return results


def _whose(decoder) -> str:
    if decoder is None:
        return "the kit's loop"
    return f"{type(decoder).__name__} (notebooks 01-04)"


def theory_markdown(results: dict, expected_tokens) -> str:
    """The theory-vs-measurement table, with ``expected_tokens(alpha, k)`` (the student's) as E[tokens], and a note
    naming its baseline: our greedy loop run as the measured decoder runs (`methods.build_methods`), not HF's."""
    eager = results["config"].get("decoder", "the kit's loop") != "the kit's loop"
    how = "eager, as your decoder" if eager else "same backend"
    rows = [
        f"| k | α | c | v | E[tokens] | measured tokens/pass | predicted | refined | measured vs ours greedy ({how}) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["theory"]:
        rows.append(
            f"| {r['k']} | {r['alpha']:.2f} | {r['c']:.2f} | {r['v']:.2f} "
            f"| {expected_tokens(r['alpha'], r['k']):.2f} | {r['measured_tokens_per_step']:.2f} "
            f"| {r['predicted_speedup']:.2f}x | {r['refined_speedup']:.2f}x "
            f"| {r['measured_speedup_vs_greedy'] or float('nan'):.2f}x |"
        )
    baseline = (
        "the model itself over transformers' cache, no CUDA graphs, as your decoder runs"
        if eager
        else "the kit's greedy loop, run with the same backend as its speculative loop"
    )
    note = (
        f"\n\n*Measured* is the speedup over **our greedy loop** ({baseline}), every prompt pooled; "
        "the sweep's table above measures against HF generate (greedy) instead."
    )
    return "\n".join(rows) + note


def export(results: dict, folder, name: str) -> dict:
    """Write the results JSON, every figure (PNG and PDF) and every table (Markdown, CSV, LaTeX) under
    ``folder``; returns ``{"json": path, "figures": [...], "tables": [...]}``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    json_path = results_io.save_results(results, folder / "results" / f"{name.replace('/', '-')}.json")
    return dict(
        json=json_path,
        figures=plots.save_all_figures(results, folder / "figures"),
        tables=tables.write_tables(results, folder / "tables"),
    )
