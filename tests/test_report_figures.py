"""The report's figures and its one headline speedup, on a hand-made sweep (no models, no timings measured):
error bars where there is spread, series told apart, positions numbered from 0 with their sample counts, the
speedup to report naming its baseline and sample, and notebook 05 showing every figure the export writes."""

from __future__ import annotations

import io
import json
import re
import statistics
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from matplotlib.container import ErrorbarContainer

from specdec_helpers.measure import bench
from specdec_helpers.measure.results import summarize, theory_rows
from specdec_helpers.present import benchmarking, headline, plots, report

KS = [2, 8]
ROOT = Path(__file__).resolve().parents[1]


def _entry(times, stats=None):
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    entry = dict(
        times=times,
        median_time=statistics.median(times),
        q1_time=q1,
        q3_time=q3,
        new_tokens=[16] * len(times),
        identical=True,
        matches_greedy=True,
    )
    return dict(entry, stats=stats) if stats else entry


def _stats(k, proposed):
    """Every round proposes k tokens; position j accepted in rounds where j < kept (kept = 1 in each round)."""
    accepted = [proposed if j == 0 else 0 for j in range(k)]
    return dict(
        proposed=proposed * k,
        accepted=proposed,
        new_tokens=2 * proposed,
        target_calls=proposed,
        accepted_per_step=[1] * proposed,
        draft_lengths=[k] * proposed,
        alpha=0.5,
        by_position=dict(proposed=[proposed] * k, accepted=accepted),
    )


@pytest.fixture(scope="module")
def results():
    """Two prompts x k in {2, 8}; k=2 is faster (1.25x and 1.6x by prompt), k=8 proposes only 5 times."""
    runs = []
    for i, scale in enumerate((1.0, 1.3)):
        for k, spec, rounds in ((2, [0.80, 0.78, 0.82, 0.79, 0.90], 30), (8, [1.1, 1.0, 1.2, 1.05, 1.1], 5)):
            base = [1.0, 1.02, 0.98, 1.0, 1.05]
            spec = [t / scale for t in spec]
            methods = dict(hf_greedy=_entry(base), greedy=_entry(base), spec_cached=_entry(spec, _stats(k, rounds)))
            speedup = methods["hf_greedy"]["median_time"] / methods["spec_cached"]["median_time"]
            runs.append(dict(preset="tiny", drafter="d", k=k, prompt_index=i, prompt=f"p{i}", methods=methods))
            runs[-1]["speedup"] = speedup
    out = dict(config=dict(ks=KS, max_new_tokens=16, repeats=5, warmup=1), runs=runs)
    out["costs"] = {"tiny/d": dict(c=0.1, verify_cost={2: 1.1, 8: 1.3})}
    out["summary"] = summarize(runs)
    out["theory"] = theory_rows(out)
    return json.loads(json.dumps(out))  # as read back from the exported JSON (int keys become strings)


def _spec_row(results, k):
    return next(r for r in results["summary"] if r["method"] == "spec_cached" and r["k"] == k)


def _bar_ends(container: ErrorbarContainer) -> list[tuple[float, float]]:
    segments = container.lines[2][0].get_segments()
    return [(round(s[0][1], 6), round(s[1][1], 6)) for s in segments]


def test_speedup_vs_k_draws_the_rounds_spread_as_error_bars(results):
    (container,) = [c for c in plots.plot_speedup_vs_k(results).axes[0].containers if isinstance(c, ErrorbarContainer)]
    rows = [_spec_row(results, k) for k in KS]
    expected = [
        (round(min(r["speedup_low"], r["speedup"]), 6), round(max(r["speedup_high"], r["speedup"]), 6)) for r in rows
    ]
    assert _bar_ends(container) == expected
    assert all(high - low > 0.01 for low, high in expected)  # there is spread to show: the bars are not empty


def test_theory_vs_measured_tells_its_series_apart(results):
    fig = plots.plot_theory_vs_measured(results)
    ax = fig.axes[0]
    handles, labels = ax.get_legend_handles_labels()
    lines = [h.lines[0] if isinstance(h, ErrorbarContainer) else h for h in handles]  # an errorbar's data line
    looks = {(label, line.get_color(), line.get_marker()) for label, line in zip(labels, lines)}
    assert len({label for label, _, _ in looks}) == 4
    assert len({color for _, color, _ in looks}) == 4 and len({marker for _, _, marker in looks}) == 4
    assert any(isinstance(c, ErrorbarContainer) for c in ax.containers)  # the measured series with its spread
    (legend,) = fig.legends
    assert min(text.get_fontsize() for text in legend.get_texts()) >= 8


def test_acceptance_by_position_numbers_from_zero_side_by_side_with_counts(results):
    ax = plots.plot_acceptance_by_position(results).axes[0]
    bars = {k: [(p.get_x(), p.get_x() + p.get_width(), p.get_height()) for p in c] for k, c in zip(KS, ax.containers)}
    assert [round((a + b) / 2) for a, b, _ in bars[8]] == list(range(8))  # draft token 0 first, as notebook 03
    assert [h for *_, h in bars[2]] == [1.0, 0.0]
    # At j = 0 and 1 both k have a bar: side by side, neither covers the other.
    for j in (0, 1):
        (a0, a1, _), (b0, b1, _) = bars[2][j], bars[8][j]
        assert a1 <= b0 + 1e-9 or b1 <= a0 + 1e-9
    # k = 8 rests on 2 x 5 proposals per position (< FEW_SAMPLES): every bar carries its count; k = 2's 60 do not.
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["10"] * 8


def test_the_speedup_to_report_names_its_baseline_and_sample(results):
    row = _spec_row(results, 2)
    text = benchmarking.speedup_to_report(results)  # as notebook 05 calls it (`bm`)
    assert text.startswith(f"**Speedup to report: {row['speedup']:.2f}x")
    assert "at k = 2 (the best of the 2 k measured)" in text and "against HF generate (greedy)" in text
    assert "2 prompts pooled" in text and f"spread {row['speedup_low']:.2f}-{row['speedup_high']:.2f}x" in text
    per_prompt = sorted(run["speedup"] for run in results["runs"] if run["k"] == 2)
    assert f"ranged {per_prompt[0]:.2f}-{per_prompt[1]:.2f}x" in text
    assert "at k = 8 (the k you chose)" in headline.speedup_to_report(results, k=8)
    # The report's headline is the same row.
    assert report.report_values(results)["best_speedup"] == f"{row['speedup']:.2f}x"


def test_one_prompt_printout_lets_the_speedup_be_recomputed_from_the_printed_times():
    base = bench._method_summary([0.0858, 0.0860, 0.0855], [32, 32, 32])
    spec = bench._method_summary([0.0703, 0.0700, 0.0710], [32, 32, 32], base)
    result = dict(methods=dict(hf_greedy=dict(base, identical=True), spec_cached=dict(spec, identical=True)))
    bench._add_pa3_keys(result, "hf_greedy")
    out = io.StringIO()
    with redirect_stdout(out):
        benchmarking.print_methods(result)
    text = out.getvalue()
    assert text.startswith("One prompt, 3 interleaved timed runs per method")
    spec_s, base_s = (float(t) for t in re.findall(r"median time ([\d.]+) seconds", text))
    printed = float(re.search(r"= ([\d.]+)x", text).group(1))
    assert round(base_s / spec_s, 2) == printed  # two decimals would print 0.07 and 0.09: 1.29x, not 1.22x
    assert "speedup vs HF generate (greedy)" in text


def test_notebook_05_shows_every_figure_the_export_writes():
    cells = json.loads((ROOT / "notebooks" / "05_benchmarking.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert [name for name, plot in plots.FIGURES.items() if f"plots.{plot.__name__}(" not in code] == []
    assert "speedup_to_report(results" in code
