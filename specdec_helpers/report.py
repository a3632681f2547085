"""Report export: tables (Markdown, CSV, LaTeX) and a report built from a template.

``python -m specdec_helpers report`` fills ``report/REPORT_TEMPLATE.md`` from the benchmark results:
``{{table:NAME}}``, ``{{figure:NAME}}``, ``{{value:NAME}}`` and ``{{env}}`` placeholders. It writes
``report.md`` (figures as files beside it), a self-contained ``report.html`` (figures embedded as
base64 PNG, so one file can be handed in), and ``report.pdf`` when a Chromium is installed.
No dependency beyond the kit's: the small Markdown subset a report needs is converted here.
"""
from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .bench import BASELINE, METHOD_LABELS, SPECULATIVE, best_k, load_results

TEMPLATE = Path("report") / "REPORT_TEMPLATE.md"
# The repository's own template, for runs started from another folder.
_REPO_TEMPLATE = Path(__file__).resolve().parents[1] / "report" / "REPORT_TEMPLATE.md"


# --------------------------------------------------------------------------- tables


@dataclass
class Table:
    """Columns, raw rows (numbers stay numbers for CSV) and one format spec per column for text."""

    columns: list[str]
    rows: list[list]
    formats: list[str]

    def __iter__(self):  # `to_markdown(*table)` reads naturally
        return iter((self.columns, self.rows, self.formats))

    def text_rows(self) -> list[list[str]]:
        return [[_fmt(v, f) for v, f in zip(row, self.formats)] for row in self.rows]


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


_LATEX_SPECIAL = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
                  "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(columns, rows, formats=None) -> str:
    """A booktabs tabular (needs ``\\usepackage{booktabs}``)."""
    text = [[_fmt(v, f) for v, f in zip(row, formats or [""] * len(row))] for row in rows]
    align = "".join("r" if f else "l" for f in (formats or [""] * len(columns)))
    lines = [f"\\begin{{tabular}}{{{align}}}", "\\toprule", " & ".join(map(_latex_escape, columns)) + " \\\\",
             "\\midrule"]
    lines += [" & ".join(map(_latex_escape, row)) + " \\\\" for row in text]
    lines += ["\\bottomrule", "\\end{tabular}", ""]
    return "\n".join(lines)


def _summary(results, preset, drafter, k, method) -> dict:
    return next((r for r in results["summary"]
                 if (r["preset"], r["drafter"], r["k"], r["method"]) == (preset, drafter, k, method)), {})


def _series(results) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r["preset"], r["drafter"]) for r in results["summary"]))


def sweep_table(results: dict) -> Table:
    """One row per preset/drafter/k: acceptance and the speedup of each speculative method."""
    columns = ["preset", "drafter", "k", "acceptance", "alpha", "tokens/step", "speedup (KV cache)",
               "speedup (no cache)", "speedup (HF assisted)", "identical"]
    rows = []
    for preset, drafter in _series(results):
        for k in results["config"]["ks"]:
            spec = _summary(results, preset, drafter, k, SPECULATIVE)
            if not spec:
                continue
            group = [r for r in results["summary"] if (r["preset"], r["drafter"], r["k"]) == (preset, drafter, k)]
            rows.append([preset, drafter, k, spec.get("acceptance_rate"), spec.get("alpha"),
                         spec.get("mean_accepted_length"), spec.get("speedup"),
                         _summary(results, preset, drafter, k, "spec_vectorized").get("speedup"),
                         _summary(results, preset, drafter, k, "hf_assisted").get("speedup"),
                         all(r.get("identical", True) for r in group)])
    return Table(columns, rows, ["", "", "d", ".1%", ".2f", ".2f", ".2f", ".2f", ".2f", ""])


def methods_table(results: dict, k: int | None = None) -> Table:
    """Every method side by side at one k (best k per preset/drafter unless given)."""
    columns = ["preset", "drafter", "k", "method", "time (s)", "IQR (s)", "tokens/s", "speedup", "latency reduction",
               "identical"]
    rows = []
    for preset, drafter in _series(results):
        kk = k or best_k(results, preset, drafter) or results["config"]["ks"][0]
        for r in results["summary"]:
            if (r["preset"], r["drafter"], r["k"]) != (preset, drafter, kk):
                continue
            label = METHOD_LABELS.get(r["method"], r["method"])
            if "time" not in r:
                rows.append([preset, drafter, kk, label, None, f"skipped: {r.get('skipped', '')}"[:60], None, None,
                             None, None])
                continue
            rows.append([preset, drafter, kk, label, r["time"], f"{r['q1_time']:.3f}-{r['q3_time']:.3f}",
                         r["tokens_per_second"], r.get("speedup"),
                         None if r.get("latency_reduction") is None else r["latency_reduction"] / 100, r["identical"]])
    return Table(columns, rows, ["", "", "d", "", ".3f", "", ".1f", ".2f", ".1%", ""])


def theory_table(results: dict) -> Table:
    columns = ["preset", "drafter", "k", "alpha", "c", "v_k", "E[tokens/step]", "measured tokens/step",
               "predicted speedup", "refined (measured v_k)", "measured vs our greedy", "measured vs HF greedy"]
    keys = ["preset", "drafter", "k", "alpha", "c", "v", "expected_tokens_per_step", "measured_tokens_per_step",
            "predicted_speedup", "refined_speedup", "measured_speedup_vs_greedy", "measured_speedup"]
    rows = [[r.get(key) for key in keys] for r in results.get("theory", [])]
    return Table(columns, rows, ["", "", "d", ".2f", ".3f", ".2f", ".2f", ".2f", ".2f", ".2f", ".2f", ".2f"])


def prompts_table(results: dict, k: int | None = None) -> Table:
    """PA3's per-prompt table: acceptance, speculative and baseline time and tokens/s, speedup."""
    columns = ["preset", "drafter", "k", "prompt", "acceptance", "spec. time (s)", "spec. tokens/s",
               "baseline time (s)", "baseline tokens/s", "speedup", "latency reduction"]
    rows = []
    for preset, drafter in _series(results):
        kk = k or best_k(results, preset, drafter) or results["config"]["ks"][0]
        for run in results["runs"]:
            if (run["preset"], run["drafter"], run["k"]) != (preset, drafter, kk) or not run.get("speculative"):
                continue
            spec, base = run["speculative"], run.get("baseline") or {}
            prompt = run["prompt"] if len(run["prompt"]) <= 40 else run["prompt"][:37] + "..."
            rows.append([preset, drafter, kk, prompt, run.get("acceptance_rate"), spec.get("median_time"),
                         run["methods"][run["speculative_method"]]["median_tokens_per_second"],
                         base.get("median_time"),
                         run["methods"][run["baseline_method"]]["median_tokens_per_second"] if base else None,
                         run.get("speedup"),
                         None if run.get("latency_reduction") is None else run["latency_reduction"] / 100])
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


# --------------------------------------------------------------------------- template filling


def env_markdown(results: dict) -> str:
    envs = results.get("envs") or [results.get("env") or {}]
    keys = ["preset", "device", "dtype", "torch", "transformers", "python", "cpu_count", "cpus_available",
            "torch_threads", "gpu", "git_commit", "date"]
    rows = [[key] + [str(env.get(key)) for env in envs] for key in keys if any(env.get(key) is not None for env in envs)]
    cfg = results.get("config", {})
    rows.append(["runs"] + [f"{cfg.get('repeats')} timed (+{cfg.get('warmup')} warm-up) per method, interleaved; "
                            f"{cfg.get('max_new_tokens')} new tokens"] * len(envs))
    return to_markdown(["", *(["value"] if len(envs) == 1 else [e.get("preset", "") for e in envs])], rows)


def report_values(results: dict) -> dict[str, str]:
    """Headline numbers for ``{{value:NAME}}``: the best cached speculative setting."""
    rows = [r for r in results["summary"] if r["method"] == SPECULATIVE and r.get("speedup")]
    if not rows:
        return {}
    best = max(rows, key=lambda r: r["speedup"])
    baseline = _summary(results, best["preset"], best["drafter"], best["k"], BASELINE)
    return dict(preset=best["preset"], drafter=best["drafter"], best_k=str(best["k"]),
                best_speedup=f"{best['speedup']:.2f}x", latency_reduction=f"{best['latency_reduction']:.1f}%",
                acceptance_rate=f"{best['acceptance_rate']:.1%}", alpha=f"{best.get('alpha', float('nan')):.2f}",
                tokens_per_step=f"{best['mean_accepted_length']:.2f}",
                tokens_per_s=f"{best['tokens_per_second']:.1f}",
                baseline_tokens_per_s=f"{baseline.get('tokens_per_second', float('nan')):.1f}",
                max_new_tokens=str(results["config"]["max_new_tokens"]))


_PLACEHOLDER = re.compile(r"\{\{\s*(table|figure|value|env)\s*(?::\s*([\w-]+))?\s*\}\}")


def fill_template(template: str, results: dict, figures: dict[str, str]) -> str:
    """Drop HTML comments, replace placeholders; ``figures`` maps a figure name to its path relative
    to the report. An unknown or unavailable name is left visible as *(missing: ...)*, not an error."""
    values = report_values(results)
    template = re.sub(r"<!--.*?-->\n?", "", template, flags=re.S)  # guidance for whoever edits the template

    def replace(match):
        kind, name = match.group(1), match.group(2)
        if kind == "env":
            return env_markdown(results)
        if kind == "table" and name in TABLES:
            return to_markdown(*TABLES[name](results))
        if kind == "figure" and name in figures:
            return f"![{name.replace('_', ' ')}]({figures[name]})"
        if kind == "value" and name in values:
            return values[name]
        return f"*(missing: {kind}:{name})*"

    return _PLACEHOLDER.sub(replace, template)


# --------------------------------------------------------------------------- markdown -> HTML


def _inline(text: str) -> str:
    """Escape HTML, then code spans, images, links, bold and italics."""
    parts = re.split(r"(`[^`]+`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", r'<img alt="\1" src="\2">', part)
        part = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', part)
        part = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", part)
        part = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", part)
        out.append(part)
    return "".join(out)


def _table_html(lines: list[str]) -> str:
    def cells(line):
        return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]

    head, body = cells(lines[0]), [cells(line) for line in lines[2:]]
    rows = ["<tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"]
    rows += ["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in body]
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def markdown_to_html(text: str) -> str:
    """The subset a report needs: headings, paragraphs, lists, tables, code blocks, quotes, images."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)  # template guidance for the author only
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            i += 1
        elif stripped.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            blocks.append("<pre><code>" + html.escape("\n".join(lines[i + 1 : j])) + "</code></pre>")
            i = j + 1
        elif m := re.match(r"(#{1,6})\s+(.*)", stripped):
            level = len(m.group(1))
            blocks.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
            i += 1
        elif re.fullmatch(r"(-{3,}|\*{3,})", stripped):
            blocks.append("<hr>")
            i += 1
        elif stripped.startswith("|") and i + 1 < len(lines) and re.match(r"^\|?\s*:?-{3,}", lines[i + 1].strip()):
            j = i
            while j < len(lines) and lines[j].strip().startswith("|"):
                j += 1
            blocks.append(_table_html(lines[i:j]))
            i = j
        elif m := re.fullmatch(r"!\[([^\]]*)\]\(([^)\s]+)\)", stripped):
            blocks.append(f'<figure><img alt="{html.escape(m.group(1))}" src="{html.escape(m.group(2))}">'
                          f"<figcaption>{html.escape(m.group(1))}</figcaption></figure>")
            i += 1
        elif re.match(r"([-*]|\d+\.)\s+", stripped):
            ordered = bool(re.match(r"\d+\.", stripped))
            items = []
            while i < len(lines) and lines[i].strip():
                item = re.match(r"\s*(?:[-*]|\d+\.)\s+(.*)", lines[i])
                if item:
                    items.append(item.group(1))
                else:  # continuation line of the previous item
                    items[-1] += " " + lines[i].strip()
                i += 1
            tag = "ol" if ordered else "ul"
            blocks.append(f"<{tag}>" + "".join(f"<li>{_inline(it)}</li>" for it in items) + f"</{tag}>")
        elif stripped.startswith(">"):
            quote = []
            while i < len(lines) and lines[i].strip().startswith(">"):
                quote.append(lines[i].strip()[1:].strip())
                i += 1
            blocks.append(f"<blockquote><p>{_inline(' '.join(quote))}</p></blockquote>")
        else:
            paragraph = []
            while i < len(lines) and lines[i].strip() and not _starts_block(lines, i):
                paragraph.append(lines[i].strip())
                i += 1
            if not paragraph:  # a line that looks like a block start but is not one: keep it as text
                paragraph, i = [stripped], i + 1
            blocks.append(f"<p>{_inline(' '.join(paragraph))}</p>")
    return "\n".join(blocks)


def _starts_block(lines, i) -> bool:
    s = lines[i].strip()
    return bool(re.match(r"(#{1,6}\s|```|\||>|[-*]\s|\d+\.\s|!\[)", s)) or bool(re.fullmatch(r"-{3,}", s))


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:52rem;margin:2rem auto;
padding:0 1rem;line-height:1.45;color:#222;font-size:11pt}h1{font-size:1.6rem}h2{font-size:1.25rem;
border-bottom:1px solid #ddd;padding-bottom:.2rem}table{border-collapse:collapse;margin:.6rem 0;font-size:9pt}
th,td{border:1px solid #ccc;padding:.2rem .45rem;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
figure{display:inline-block;width:49%;margin:.4rem 0;text-align:center;vertical-align:top}
img{max-width:100%}figcaption{font-size:9pt;color:#555}code{background:#f4f4f4;padding:0 .2rem}
pre{background:#f4f4f4;padding:.6rem;overflow-x:auto}blockquote{color:#555;border-left:3px solid #ccc;
margin-left:0;padding-left:1rem}@media print{body{margin:0;max-width:none}}"""


def _embed_images(body: str, base: Path) -> str:
    """Inline every local PNG as a data URI, so the HTML is one self-contained file."""
    def embed(match):
        src = match.group(1)
        path = (base / src) if not Path(src).is_absolute() else Path(src)
        if src.startswith("data:") or not path.is_file():
            return match.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'src="data:image/png;base64,{data}"'

    return re.sub(r'src="([^"]+\.png)"', embed, body)


def to_html(markdown: str, base: Path, title: str = "Speculative decoding report") -> str:
    body = _embed_images(markdown_to_html(markdown), base)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


# --------------------------------------------------------------------------- PDF


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def html_to_pdf(html_path: Path, pdf_path: Path, timeout: float = 120) -> Path | None:
    """Print the HTML to PDF with headless Chromium; None (and a hint on stderr) when there is none."""
    browser = find_chromium()
    if browser is None:
        print("PDF skipped: no Chromium found (tried chromium, chromium-browser, google-chrome). Open report.html in "
              "a browser and print to PDF, or install one: apt-get install -y chromium", file=sys.stderr)
        return None
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
               f"--print-to-pdf={Path(pdf_path).resolve()}", Path(html_path).resolve().as_uri()]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        print(f"PDF skipped: {browser} failed ({error})", file=sys.stderr)
        return None
    if done.returncode or not Path(pdf_path).is_file():
        print(f"PDF skipped: {browser} exited with {done.returncode}: {done.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    return Path(pdf_path)


# --------------------------------------------------------------------------- build


_FALLBACK_TEMPLATE = """# Speculative decoding: results

{{env}}

## Results
{{table:sweep}}

{{figure:speedup_vs_k}}

{{table:methods}}

## Theory vs measurement
{{table:theory}}

{{figure:theory_vs_measured}}
"""


def _read_template(template=None) -> str:
    """The given template; else ./report/REPORT_TEMPLATE.md, the repository's, or a minimal built-in one."""
    if template is not None:
        return Path(template).read_text()
    for path in (TEMPLATE, _REPO_TEMPLATE):
        if path.is_file():
            return path.read_text()
    return _FALLBACK_TEMPLATE


def build_report(results_dir="report/results", out_dir="report/build", template=None, pdf: bool = True) -> dict:
    """Fill the template from the results; write report.md, report.html (self-contained), report.pdf.

    Returns ``{"md", "html", "pdf"}`` paths (``pdf`` None without Chromium).
    """
    from .plots import make_figures, save_figure

    results = load_results(results_dir)
    out_dir = Path(out_dir)
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    figures = {}
    for name, fig in make_figures(results).items():
        save_figure(fig, name, out_dir / "figures", formats=("png",))  # HTML embeds PNG; PDFs come from bench
        figures[name] = f"figures/{name}.png"
    text = _read_template(template)
    markdown = fill_template(text, results, figures)
    md_path, html_path = out_dir / "report.md", out_dir / "report.html"
    md_path.write_text(markdown)
    html_path.write_text(to_html(markdown, out_dir))
    pdf_path = html_to_pdf(html_path, out_dir / "report.pdf") if pdf else None
    return dict(md=md_path, html=html_path, pdf=pdf_path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers report",
                                     description="Build report.md, a self-contained report.html and (with Chromium) "
                                                 "report.pdf from benchmark results.")
    parser.add_argument("--results", default="report/results", help="results JSON file or folder (default: report/results)")
    parser.add_argument("--out", default="report/build", help="output folder (default: report/build)")
    parser.add_argument("--template", default=None, help=f"Markdown template (default: {TEMPLATE})")
    parser.add_argument("--no-pdf", action="store_true")
    args = parser.parse_args(argv)
    try:
        paths = build_report(args.results, args.out, args.template, pdf=not args.no_pdf)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for kind, path in paths.items():
        if path is not None:
            print(f"{kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
