"""Tables from results: one Table shape, written as Markdown, CSV or LaTeX; the printed perf tables."""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from specdec_helpers.measure.perf import PHASES
from specdec_helpers.measure.results import BASELINE, METHOD_LABELS, SPECULATIVE, best_k
from specdec_helpers.measure.speedup import in_words


@dataclass
class Table:
    """Columns, raw rows (numbers stay numbers for CSV) and one format spec per column for text."""

    columns: list[str]
    rows: list[list]
    formats: list[str]

    def __iter__(self):  # `to_markdown(*table)` reads naturally
        return iter((self.columns, self.rows, self.formats))


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if spec and isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def to_markdown(columns, rows, formats=None) -> str:
    text = [[_fmt(v, f) for v, f in zip(row, formats or [""] * len(row))] for row in rows]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in text]
    return "\n".join(lines)


def to_csv(columns, rows, formats=None) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return buffer.getvalue()


_LATEX_SPECIAL = {
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(columns, rows, formats=None) -> str:
    """A booktabs tabular (needs ``\\usepackage{booktabs}``)."""
    text = [[_fmt(v, f) for v, f in zip(row, formats or [""] * len(row))] for row in rows]
    align = "".join("r" if f else "l" for f in (formats or [""] * len(columns)))
    lines = [
        f"\\begin{{tabular}}{{{align}}}",
        "\\toprule",
        " & ".join(map(_latex_escape, columns)) + " \\\\",
        "\\midrule",
    ]
    lines += [" & ".join(map(_latex_escape, row)) + " \\\\" for row in text]
    lines += ["\\bottomrule", "\\end{tabular}", ""]
    return "\n".join(lines)


def summary_row(results, preset, drafter, k, method) -> dict:
    return next(
        (
            r
            for r in results["summary"]
            if (r["preset"], r["drafter"], r["k"], r["method"]) == (preset, drafter, k, method)
        ),
        {},
    )


def _series(results) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r["preset"], r["drafter"]) for r in results["summary"]))


def _matches(row: dict) -> bool:
    """Equal to greedy decoding, near-ties allowed (`bench._greedy_check`); older results: token-for-token."""
    return row.get("matches_greedy", row.get("identical", True))


def _spread(row: dict) -> str | None:
    """'1.30-1.52x (middle half of 5 interleaved rounds)': the per-round ratios behind a pooled speedup."""
    if "speedup_low" not in row:
        return None
    return f"{row['speedup_low']:.2f}-{row['speedup_high']:.2f}x ({row.get('speedup_rounds_words', 'rounds')})"


def sweep_table(results: dict) -> Table:
    """One row per preset/drafter/k: acceptance and the speedup of each speculative method against HF greedy
    `generate` (the prompts pooled: their median times summed), the KV-cache one with its rounds' spread."""
    base = METHOD_LABELS[BASELINE]  # "HF generate (greedy)": the method in front of "vs", the baseline after it
    columns = [
        "preset",
        "drafter",
        "k",
        "acceptance",
        "alpha",
        "tokens/step",
        f"speedup of ours (KV cache) vs {base}",
        "its spread",
        f"speedup of ours (no cache) vs {base}",
        f"speedup of HF assisted vs {base}",
        "matches greedy",
    ]
    rows = []
    for preset, drafter in _series(results):
        for k in results["config"]["ks"]:
            spec = summary_row(results, preset, drafter, k, SPECULATIVE)
            if not spec:
                continue
            group = [r for r in results["summary"] if (r["preset"], r["drafter"], r["k"]) == (preset, drafter, k)]
            rows.append(
                [
                    preset,
                    drafter,
                    k,
                    spec.get("acceptance_rate"),
                    spec.get("alpha"),
                    spec.get("mean_accepted_length"),
                    spec.get("speedup"),
                    _spread(spec),
                    summary_row(results, preset, drafter, k, "spec_vectorized").get("speedup"),
                    summary_row(results, preset, drafter, k, "hf_assisted").get("speedup"),
                    all(_matches(r) for r in group),
                ]
            )
    return Table(columns, rows, ["", "", "d", ".1%", ".2f", ".2f", ".2f", "", ".2f", ".2f", ""])


def methods_table(results: dict, k: int | None = None) -> Table:
    """Every method side by side at one k (best k per preset/drafter unless given)."""
    columns = [
        "preset",
        "drafter",
        "k",
        "method",
        "time (s)",
        "IQR (s)",
        "tokens/s",
        "speedup",
        "latency reduction",
        "matches greedy",
    ]
    rows = []
    for preset, drafter in _series(results):
        kk = k or best_k(results, preset, drafter) or results["config"]["ks"][0]
        for r in results["summary"]:
            if (r["preset"], r["drafter"], r["k"]) != (preset, drafter, kk):
                continue
            label = METHOD_LABELS.get(r["method"], r["method"])
            if "time" not in r:
                rows.append(
                    [preset, drafter, kk, label, None, f"skipped: {r.get('skipped', '')}"[:60], None, None, None, None]
                )
                continue
            rows.append(
                [
                    preset,
                    drafter,
                    kk,
                    label,
                    r["time"],
                    f"{r['q1_time']:.3f}-{r['q3_time']:.3f}",
                    r["tokens_per_second"],
                    r.get("speedup"),
                    None if r.get("latency_reduction") is None else r["latency_reduction"] / 100,
                    _matches(r),
                ]
            )
    return Table(columns, rows, ["", "", "d", "", ".3f", "", ".1f", ".2f", ".1%", ""])


def theory_table(results: dict) -> Table:
    columns = [
        "preset",
        "drafter",
        "k",
        "alpha",
        "c",
        "v_k",
        "E[tokens/step]",
        "measured tokens/step",
        "predicted speedup",
        "refined (measured v_k)",
        "measured vs ours greedy (same backend)",
        "measured vs HF greedy",
    ]
    keys = [
        "preset",
        "drafter",
        "k",
        "alpha",
        "c",
        "v",
        "expected_tokens_per_step",
        "measured_tokens_per_step",
        "predicted_speedup",
        "refined_speedup",
        "measured_speedup_vs_greedy",
        "measured_speedup",
    ]
    rows = [[r.get(key) for key in keys] for r in results.get("theory", [])]
    return Table(columns, rows, ["", "", "d", ".2f", ".3f", ".2f", ".2f", ".2f", ".2f", ".2f", ".2f", ".2f"])


def prompts_table(results: dict, k: int | None = None) -> Table:
    """PA3's per-prompt table: acceptance, speculative and baseline time and tokens/s, speedup."""
    columns = [
        "preset",
        "drafter",
        "k",
        "prompt",
        "acceptance",
        "spec. time (s)",
        "spec. tokens/s",
        "baseline time (s)",
        "baseline tokens/s",
        "speedup",
        "latency reduction",
    ]
    rows = []
    for preset, drafter in _series(results):
        kk = k or best_k(results, preset, drafter) or results["config"]["ks"][0]
        for run in results["runs"]:
            if (run["preset"], run["drafter"], run["k"]) != (preset, drafter, kk) or not run.get("speculative"):
                continue
            spec, base = run["speculative"], run.get("baseline") or {}
            prompt = run["prompt"] if len(run["prompt"]) <= 40 else run["prompt"][:37] + "..."
            rows.append(
                [
                    preset,
                    drafter,
                    kk,
                    prompt,
                    run.get("acceptance_rate"),
                    spec.get("median_time"),
                    run["methods"][run["speculative_method"]]["median_tokens_per_second"],
                    base.get("median_time"),
                    run["methods"][run["baseline_method"]]["median_tokens_per_second"] if base else None,
                    run.get("speedup"),
                    None if run.get("latency_reduction") is None else run["latency_reduction"] / 100,
                ]
            )
    return Table(columns, rows, ["", "", "d", "", ".1%", ".3f", ".1f", ".3f", ".1f", ".2f", ".1%"])


TABLES = {"sweep": sweep_table, "methods": methods_table, "theory": theory_table, "prompts": prompts_table}


def write_tables(results: dict, out_dir) -> list[Path]:
    """Every table as ``NAME.md``, ``NAME.csv`` and ``NAME.tex`` in ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in TABLES.items():
        table = make(results)
        for ext, render in (("md", to_markdown), ("csv", to_csv), ("tex", to_latex)):
            path = out_dir / f"{name}.{ext}"
            path.write_text(render(*table) + ("\n" if ext == "md" else ""))
            paths.append(path)
    return paths


def print_ratios(rows: list[dict], file=None) -> None:
    columns = [
        "preset",
        "draft",
        "k",
        "prompt",
        "acceptance",
        "tokens/call",
        "vs HF assisted (x)",
        "vs greedy (x)",
        "vs HF greedy (x)",
        "vs best HF (x)",
        "bound (x)",
        "of bound",
        "identical",
    ]
    keys = [
        "preset",
        "drafter",
        "k",
        "prompt",
        "acceptance",
        "tokens_per_call",
        "vs_hf_assisted",
        "vs_greedy",
        "vs_hf_greedy",
        "vs_best_hf",
        "bound",
        "of_bound",
        "identical",
    ]
    table = [
        [r.get(key) if key != "prompt" or len(r[key]) <= 40 else r[key][:37] + "..." for key in keys] for r in rows
    ]
    formats = ["", "", "d", "", ".1%", ".2f", ".2f", ".2f", ".2f", ".2f", ".2f", ".0%", ""]
    print(to_markdown(columns, table, formats), file=file or sys.stdout)


def print_profile(profiles: dict, file=None) -> None:
    columns = ["preset", "ms/round", *PHASES, "rest", "draft calls/round", "tokens/round"]
    table = [
        [
            name,
            p["wall_ms_per_round"],
            *(
                f"{p['ms_per_round'][ph]:.1f} ({p['ms_per_round'][ph] / p['wall_ms_per_round']:.0%})"
                for ph in (*PHASES, "rest")
            ),
            p["draft_calls_per_round"],
            p["tokens_per_round"],
        ]
        for name, p in profiles.items()
    ]
    print(to_markdown(columns, table, ["", ".1f", *[""] * (len(PHASES) + 1), ".2f", ".2f"]), file=file or sys.stdout)


def print_summary(results: dict, file=None) -> None:
    """One PA3-style block per (preset, drafter, k), then the sweep table."""
    out = file or sys.stdout
    for row in results["summary"]:
        if row["method"] == SPECULATIVE and row.get("speedup"):
            rounds = row.get("speedup_rounds_words") or f"over {row.get('speedup_rounds')} rounds"
            spread = (
                f" ±{row['speedup_spread_pct']:.0f}% ({row['speedup_low']:.2f}-{row['speedup_high']:.2f}x {rounds})"
                if "speedup_spread_pct" in row
                else ""
            )
            print(
                f"{row['preset']}/{row['drafter']} k={row['k']}: Speedup: {in_words(row['speedup'])}{spread}  "
                f"Draft token acceptance rate: {row['acceptance_rate']:.2%}",
                file=out,
            )
            for warning in row.get("speedup_warnings", []):
                print(f"  warning: {warning}", file=out)
    print("\n" + to_markdown(*sweep_table(results)), file=out)
