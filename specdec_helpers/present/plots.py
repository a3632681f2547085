"""Figures from benchmark results (the dict `sweep.run_sweep` returns, or its JSON loaded back).

Each function takes results and returns a matplotlib Figure, so notebooks show it inline and the
report saves it; `save_figure` writes PNG (for HTML/markdown) and PDF (for LaTeX). One series per
preset/drafter, so sweeps over several drafts read on one axis.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib loads when a figure is drawn: a grading process (~1 s of imports) never draws one
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

from specdec_helpers.measure.results import BASELINE, METHOD_LABELS, SPECULATIVE, best_k

FIGURES_DIR = Path("report") / "figures"
SPEC_STYLES = {"spec_cached": "o-", "spec_vectorized": "s--", "hf_assisted": "^:"}
#: One per line where several lines share an axis (cycled), so no line hides another.
LINE_STYLES = ["-", "--", "-.", ":"]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def _figure(width: float = 5.0, height: float = 3.4) -> tuple[Figure, Axes]:
    # Figure() directly, not plt.figure(): no pyplot backend is involved, so this works headless
    # (saving renders with Agg) and a sweep of plots does not pile up open pyplot figures.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _series(results: dict) -> list[tuple[str, str]]:
    """(preset, drafter) pairs in first-seen order."""
    return list(dict.fromkeys((r["preset"], r["drafter"]) for r in results["summary"]))


def _label(preset: str, drafter: str, results: dict) -> str:
    return f"{preset} / {drafter}" if len(_series(results)) > 1 else drafter


def _rows(results: dict, preset: str, drafter: str, method: str) -> list[dict]:
    rows = [r for r in results["summary"] if (r["preset"], r["drafter"], r["method"]) == (preset, drafter, method)]
    return sorted(rows, key=lambda r: r["k"])


def _log2_k_axis(ax, ks) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("draft length k")


def _yerr(rows: list[dict]) -> list[list[float]]:
    """Each point's distance to the ends of its spread (`speedup_low`/`speedup_high`: the interleaved rounds'
    ratios). Clipped at 0: the plotted ratio (of summed medians) can sit just outside the rounds' range."""
    return [
        [max(0.0, r["speedup"] - r.get("speedup_low", r["speedup"])) for r in rows],
        [max(0.0, r.get("speedup_high", r["speedup"]) - r["speedup"]) for r in rows],
    ]


def _spread_words(rows: list[dict]) -> str:
    words = next((r["speedup_rounds_words"] for r in rows if r.get("speedup_rounds_words")), None)
    return f"bars: {words}" if words else "no spread recorded"


def plot_speedup_vs_k(results: dict) -> Figure:
    """Speedup over HF greedy generate for each speculative method, per k, with the spread over the
    interleaved rounds as error bars (methods nudged apart along k so their bars do not cover each other)."""
    fig, ax = _figure(5.4, 3.6)
    ks = results["config"]["ks"]
    drawn = []
    for preset, drafter in _series(results):
        for m, (method, style) in enumerate(SPEC_STYLES.items()):
            rows = [r for r in _rows(results, preset, drafter, method) if r.get("speedup")]
            if rows:
                nudge = 2 ** (0.06 * (m - 1) + 0.02 * len(drawn))
                ax.errorbar(
                    [r["k"] * nudge for r in rows],
                    [r["speedup"] for r in rows],
                    yerr=_yerr(rows),
                    fmt=style,
                    capsize=3,
                    label=f"{METHOD_LABELS[method]} ({_label(preset, drafter, results)})",
                )
                drawn += rows
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    _log2_k_axis(ax, ks)
    ax.set_ylabel(f"speedup vs {METHOD_LABELS[BASELINE]}")
    ax.set_title("Speedup vs draft length (prompts pooled)")
    ax.legend(fontsize=8, title=_spread_words(drawn), title_fontsize=8)
    return fig


def plot_acceptance_vs_k(results: dict) -> Figure:
    """PA3's acceptance rate (accepted/proposed) and the per-token alpha, per k."""
    fig, ax = _figure()
    for preset, drafter in _series(results):
        rows = _rows(results, preset, drafter, SPECULATIVE)
        label = _label(preset, drafter, results)
        ax.plot([r["k"] for r in rows], [r["acceptance_rate"] for r in rows], "o-", label=f"acceptance rate ({label})")
        ax.plot(
            [r["k"] for r in rows],
            [r.get("alpha", float("nan")) for r in rows],
            "s--",
            label=f"alpha, per-token ({label})",
        )
    _log2_k_axis(ax, results["config"]["ks"])
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("fraction of draft tokens accepted")
    ax.set_title("Acceptance vs draft length")
    ax.legend(fontsize=8)
    return fig


def _pooled_runs(results, preset, drafter, k):
    return [
        r["methods"][SPECULATIVE]["stats"]
        for r in results["runs"]
        if (r["preset"], r["drafter"], r["k"]) == (preset, drafter, k) and "stats" in r["methods"].get(SPECULATIVE, {})
    ]


#: Below this many proposals a position's bar is labelled with its count: a rate from a handful is a guess.
FEW_SAMPLES = 20


def acceptance_by_position(results: dict, preset: str, drafter: str, k: int) -> tuple[list[int], list[int]]:
    """(proposed, accepted) per draft position j = 0, 1, ... (notebook 03's numbering), prompts pooled."""
    stats = _pooled_runs(results, preset, drafter, k)
    width = max((len(s["by_position"]["proposed"]) for s in stats), default=0)
    proposed, accepted = [0] * width, [0] * width
    for s in stats:
        for j, (p, a) in enumerate(zip(s["by_position"]["proposed"], s["by_position"]["accepted"])):
            proposed[j] += p
            accepted[j] += a
    return proposed, accepted


def plot_acceptance_by_position(results: dict, preset: str | None = None, drafter: str | None = None) -> Figure:
    """P(draft token j accepted | proposed) as bars, one colour per k side by side at each j (so a long
    block's bars never hide a short one's); a bar resting on fewer than `FEW_SAMPLES` proposals carries
    its count."""
    preset, drafter = (preset, drafter) if preset else _series(results)[0]
    counts = {k: acceptance_by_position(results, preset, drafter, k) for k in results["config"]["ks"]}
    counts = {k: c for k, c in counts.items() if any(c[0])}
    width = max((len(p) for p, _ in counts.values()), default=1)
    fig, ax = _figure(max(5.0, 2.0 + 0.4 * width), 3.6)
    bar = 0.8 / max(len(counts), 1)
    for i, (k, (proposed, accepted)) in enumerate(counts.items()):
        js = [j for j in range(len(proposed)) if proposed[j]]
        xs = [j + (i - (len(counts) - 1) / 2) * bar for j in js]
        rates = [accepted[j] / proposed[j] for j in js]
        ax.bar(xs, rates, bar, color=f"C{i}", label=f"k={k}")
        for x, rate, j in zip(xs, rates, js):
            if proposed[j] < FEW_SAMPLES:
                ax.text(x, rate + 0.02, str(proposed[j]), rotation=90, ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(width))
    ax.set_xlabel("draft token j (0 = the first drafted token, as in notebook 03)")
    ax.set_ylabel("P(accepted | proposed)")
    ax.set_ylim(0, 1.18)
    ax.set_title(f"Acceptance by position ({drafter}); small numbers: times proposed, where under {FEW_SAMPLES}")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8, ncol=len(counts), loc="upper right")
    return fig


def plot_accepted_length_hist(
    results: dict, k: int | None = None, preset: str | None = None, drafter: str | None = None
) -> Figure:
    """How many draft tokens each round kept (0..k), at the best k unless given."""
    fig, ax = _figure()
    preset, drafter = (preset, drafter) if preset else _series(results)[0]
    k = k or best_k(results, preset, drafter) or results["config"]["ks"][0]
    counts = [0] * (k + 1)
    for s in _pooled_runs(results, preset, drafter, k):
        for a in s["accepted_per_step"]:
            counts[a] += 1
    total = sum(counts) or 1
    ax.bar(range(k + 1), [c / total for c in counts], color="tab:blue")
    ax.set_xticks(range(k + 1))
    ax.set_xlabel("accepted draft tokens in a round")
    ax.set_ylabel("fraction of rounds")
    ax.set_title(f"Accepted lengths ({drafter}, k={k}, {sum(counts)} rounds)")
    return fig


def plot_tokens_per_second(
    results: dict, k: int | None = None, preset: str | None = None, drafter: str | None = None
) -> Figure:
    """Tokens/s of every method at one k (best k by default); error bars from the quartiles."""
    fig, ax = _figure(6.0, 3.4)
    preset, drafter = (preset, drafter) if preset else _series(results)[0]
    k = k or best_k(results, preset, drafter) or results["config"]["ks"][0]
    rows = [
        r for r in results["summary"] if (r["preset"], r["drafter"], r["k"]) == (preset, drafter, k) and r.get("time")
    ]
    tps = [r["tokens_per_second"] for r in rows]
    # Quartiles of summed medians, turned into tokens/s (slow quartile -> low rate).
    low = [r["tokens_per_second"] - r["new_tokens"] / r["q3_time"] for r in rows]
    high = [r["new_tokens"] / r["q1_time"] - r["tokens_per_second"] for r in rows]
    colors = ["tab:gray" if r["method"] in (BASELINE, "greedy") else "tab:green" for r in rows]
    ax.bar(range(len(rows)), tps, yerr=[low, high], color=colors, capsize=3)
    ax.set_xticks(
        range(len(rows)),
        [METHOD_LABELS.get(r["method"], r["method"]) for r in rows],
        rotation=20,
        ha="right",
        fontsize=7,
    )
    for i, r in enumerate(rows):
        if not r.get("matches_greedy", r.get("identical", True)):
            ax.annotate("output differs!", (i, tps[i]), ha="center", va="bottom", color="red", fontsize=7)
    ax.set_ylabel("new tokens / s")
    ax.set_title(f"Throughput per method ({drafter}, k={k}; bars: quartiles)")
    return fig


def plot_forward_cost(results_or_cost: dict, preset: str | None = None, drafter: str | None = None) -> Figure:
    """Target forward time vs tokens in one pass: flat means verifying k+1 tokens is nearly free.

    Takes sweep results (uses their ``costs``) or one `theory.measure_forward_cost` dict.
    """
    fig, ax = _figure()
    if "sizes" in results_or_cost:
        curves = {"target": results_or_cost}
    else:
        curves = {
            key: c["target_forward"]
            for key, c in results_or_cost["costs"].items()
            if preset is None or key.split("/")[0] == preset
        }
        curves = {key.split("/")[0]: c for key, c in curves.items()}  # one curve per preset (same target)
    for name, curve in curves.items():
        ms = [t * 1e3 for t in curve["median_s"]]
        ax.plot(curve["sizes"], ms, "o-", ms=3, label=name)
        if curve.get("q1_s"):
            ax.fill_between(
                curve["sizes"], [t * 1e3 for t in curve["q1_s"]], [t * 1e3 for t in curve["q3_s"]], alpha=0.2
            )
    ax.set_xlabel("tokens in one forward pass (with a KV cache)")
    ax.set_ylabel("time (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title(
        "Forward cost vs tokens per pass"
        # One timed pass per size (a quick run) has no spread: then no band is drawn, and none is named.
        + (" (band: quartiles)" if any(c.get("q1_s") != c.get("q3_s") for c in curves.values()) else "")
    )
    if len(curves) > 1:
        ax.legend(fontsize=7)
    return fig


#: The four series of `plot_theory_vs_measured`: theory row key, label, colour, marker, line.
THEORY_SERIES = [
    ("predicted_speedup", "theory, verify = 1 step", "tab:blue", "v", ":"),
    ("refined_speedup", "theory, measured verify v", "tab:purple", "^", "--"),
    ("measured_speedup_vs_greedy", "measured vs ours greedy", "tab:green", "o", "-"),
    ("measured_speedup", f"measured vs {METHOD_LABELS[BASELINE]}", "tab:orange", "s", "-"),
]


def plot_theory_vs_measured(results: dict) -> Figure:
    """Leviathan et al.'s predicted speedup (and the one with measured verify cost) vs measured: each kind of
    series its own colour and marker, the measured one vs HF greedy with its spread; the legend sits below
    the axes, where it covers no curve. Several presets/drafters: hollow markers and other dashes tell them apart."""
    fig, ax = _figure(5.6, 4.8)
    series = list(dict.fromkeys((r["preset"], r["drafter"]) for r in results["theory"]))
    for i, (preset, drafter) in enumerate(series):
        rows = sorted(
            [r for r in results["theory"] if (r["preset"], r["drafter"]) == (preset, drafter)], key=lambda r: r["k"]
        )
        ks = [r["k"] for r in rows]
        suffix = f" ({_label(preset, drafter, results)})" if len(series) > 1 else ""
        for key, label, color, marker, line in THEORY_SERIES:
            values = [r[key] or float("nan") for r in rows]
            style = dict(color=color, marker=marker, ls=LINE_STYLES[i % len(LINE_STYLES)] if i else line)
            style.update(mfc="none" if i % 2 else color, label=label + suffix)
            if key == "measured_speedup":
                spec = {r["k"]: r for r in _rows(results, preset, drafter, SPECULATIVE) if r.get("speedup")}
                if all(k in spec for k in ks):
                    ax.errorbar(ks, values, yerr=_yerr([spec[k] for k in ks]), capsize=3, **style)
                    continue
            ax.plot(ks, values, **style)
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    _log2_k_axis(ax, results["config"]["ks"])
    ax.set_ylabel("speedup")
    ax.set_title("Theory vs measurement (prompts pooled)")
    fig.legend(loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    return fig


FIGURES = {
    "speedup_vs_k": plot_speedup_vs_k,
    "acceptance_vs_k": plot_acceptance_vs_k,
    "acceptance_by_position": plot_acceptance_by_position,
    "accepted_length_hist": plot_accepted_length_hist,
    "tokens_per_s": plot_tokens_per_second,
    "forward_cost": plot_forward_cost,
    "theory_vs_measured": plot_theory_vs_measured,
}


def save_figure(fig: Figure, name: str, out_dir=FIGURES_DIR, formats=("png", "pdf")) -> list[Path]:
    """Write ``name.png`` (150 dpi, for HTML/markdown) and ``name.pdf`` (vector, for LaTeX) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{ext}" for ext in formats]
    for path in paths:
        fig.savefig(path, dpi=150)
    return paths


def make_figures(results: dict) -> dict[str, Figure]:
    """Every figure the results can support, by name (as the report's ``{{ figure.NAME }}``)."""
    figures = {}
    for name, plot in FIGURES.items():
        if name == "theory_vs_measured" and not results.get("theory"):
            continue
        if name == "forward_cost" and not results.get("costs"):
            continue
        figures[name] = plot(results)
    return figures


def save_all_figures(results: dict, out_dir=FIGURES_DIR) -> list[Path]:
    return [path for name, fig in make_figures(results).items() for path in save_figure(fig, name, out_dir)]
