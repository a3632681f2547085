"""The one speedup a report quotes, chosen once, so notebook 05 and the report's headline say the same number.

Notebook 05 prints several speedups, each for its own sample: one prompt (§2), the sweep (§3), the theory table
(§4), PA3's three prompts one at a time. The one to report is the sweep's: every prompt pooled (their median
times summed, so no single easy or hard prompt decides it), with the spread of the interleaved rounds' ratios,
against HF greedy `generate` (PA3's baseline), at the k with the highest measured speedup (the report's
``best_k``). Picking the best of several noisy k flatters it a little: the spread says by how much at most.
"""

from __future__ import annotations

from specdec_helpers.measure.results import BASELINE, METHOD_LABELS, SPECULATIVE
from specdec_helpers.measure.speedup import in_words


def reported_speedup(results: dict, k: int | None = None) -> dict | None:
    """The sweep's summary row to report (the KV-cache decoder at ``k``, default the best measured k) with the
    per-prompt range beside it: ``row``, ``k``, ``prompts`` (how many), ``prompt_low``/``prompt_high``."""
    rows = [r for r in results["summary"] if r["method"] == SPECULATIVE and r.get("speedup")]
    if k is not None:
        rows = [r for r in rows if r["k"] == k]
    if not rows:
        return None
    row = max(rows, key=lambda r: r["speedup"])
    runs = [
        run["speedup"]
        for run in results["runs"]
        if (run["preset"], run["drafter"], run["k"]) == (row["preset"], row["drafter"], row["k"]) and run.get("speedup")
    ]
    return dict(
        row=row,
        k=row["k"],
        prompts=len(runs),
        prompt_low=min(runs, default=None),
        prompt_high=max(runs, default=None),
    )


def spread_words(row: dict) -> str:
    """'spread 1.30-1.52x (middle half of 5 interleaved rounds)', or why there is none."""
    if "speedup_low" not in row:
        return "no spread recorded"
    return f"spread {row['speedup_low']:.2f}-{row['speedup_high']:.2f}x ({row.get('speedup_rounds_words', 'rounds')})"


def speedup_to_report(results: dict, k: int | None = None) -> str:
    """The reported speedup as one Markdown paragraph: the number, its baseline, its sample, its spread."""
    chosen = reported_speedup(results, k)
    if chosen is None:
        return "No speedup to report: the sweep timed no KV-cache speculative run against HF greedy."
    row, n = chosen["row"], chosen["prompts"]
    how = "the k you chose" if k is not None else f"the best of the {len(results['config']['ks'])} k measured"
    sample = f"{n} prompts pooled" if n > 1 else "1 prompt"
    prompts = (
        f"; one prompt at a time they ranged {chosen['prompt_low']:.2f}-{chosen['prompt_high']:.2f}x"
        if n > 1
        else "; a single prompt speaks for one text only: time several for a figure to hand in"
    )
    warnings = "".join(f"\n\n**Measurement warning:** {w}." for w in row.get("speedup_warnings", []))
    return (
        f"**Speedup to report: {in_words(row['speedup'])}**, {METHOD_LABELS[SPECULATIVE]} at k = {row['k']} "
        f"({how}) against {METHOD_LABELS[BASELINE]}, {sample} ({row.get('new_tokens', 0):.0f} new tokens), "
        f"{spread_words(row)}{prompts}.{warnings}"
    )
