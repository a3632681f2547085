"""Report export: a report built from a template and the benchmark results.

``python -m specdec_helpers report`` fills ``report/REPORT_TEMPLATE.md``, a Jinja2 template, from the
results: ``{{ table.NAME }}``, ``{{ figure.NAME }}``, ``{{ value.NAME }}`` and ``{{ env }}``. It writes
``report.md`` (figures as files beside it), a self-contained ``report.html`` (markdown-it-py's
CommonMark with tables; figures embedded as base64 PNG, so one file can be handed in), and
``report.pdf`` when a Chromium is installed.
"""

from __future__ import annotations

import base64
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
from markdown_it import MarkdownIt

from specdec_helpers.measure.results import BASELINE, SPECULATIVE, load_results
from specdec_helpers.present.headline import reported_speedup
from specdec_helpers.present.plots import make_figures, save_figure
from specdec_helpers.measure.speedup import in_words
from specdec_helpers.present.tables import TABLES, summary_row, to_markdown

TEMPLATE = Path("report") / "REPORT_TEMPLATE.md"
#: The course's template as shipped inside the package (``data/report`` links to the repository's
#: ``report/REPORT_TEMPLATE.md``; a wheel or a release holds a copy): used where there is no ./report/
#: template, e.g. on Colab with the kit pip-installed.
PACKAGED_TEMPLATE = Path(__file__).resolve().parents[1] / "data" / "report" / "REPORT_TEMPLATE.md"


# --------------------------------------------------------------------------- template filling


def env_markdown(results: dict) -> str:
    envs = results.get("envs") or [results.get("env") or {}]
    keys = [
        "preset",
        "device",
        "dtype",
        "torch",
        "transformers",
        "python",
        "cpu_count",
        "cpus_available",
        "torch_threads",
        "gpu",
        "git_commit",
        "date",
    ]
    rows = [
        [key] + [str(env.get(key)) for env in envs] for key in keys if any(env.get(key) is not None for env in envs)
    ]
    cfg = results.get("config", {})
    rows.append(
        ["runs"]
        + [
            f"{cfg.get('repeats')} timed (+{cfg.get('warmup')} warm-up) per method, interleaved; "
            f"{cfg.get('max_new_tokens')} new tokens"
        ]
        * len(envs)
    )
    return to_markdown(["", *(["value"] if len(envs) == 1 else [e.get("preset", "") for e in envs])], rows)


def report_values(results: dict) -> dict[str, str]:
    """Headline numbers for ``{{value:NAME}}``: the best cached speculative setting, the row notebook 05 says
    to report (`headline.reported_speedup`)."""
    rows = [r for r in results["summary"] if r["method"] == SPECULATIVE and r.get("speedup")]
    if not rows:
        return {}
    best = reported_speedup(results)["row"]
    baseline = summary_row(results, best["preset"], best["drafter"], best["k"], BASELINE)
    rounds = best.get("speedup_rounds_words") or f"over {best.get('speedup_rounds')} interleaved rounds"
    spread = f", ±{best['speedup_spread_pct']:.0f}% {rounds}" if "speedup_spread_pct" in best else ""
    warnings = "".join(f"\n\n**Measurement warning:** {w}." for w in best.get("speedup_warnings", []))
    return dict(
        preset=best["preset"],
        drafter=best["drafter"],
        best_k=str(best["k"]),
        best_speedup=f"{best['speedup']:.2f}x",
        latency_reduction=f"{best['latency_reduction']:.1f}%",
        speedup=f"{in_words(best['speedup'])}{spread}",
        speedup_warnings=warnings,
        acceptance_rate=f"{best['acceptance_rate']:.1%}",
        alpha=f"{best.get('alpha', float('nan')):.2f}",
        tokens_per_step=f"{best['mean_accepted_length']:.2f}",
        tokens_per_s=f"{best['tokens_per_second']:.1f}",
        baseline_tokens_per_s=f"{baseline.get('tokens_per_second', float('nan')):.1f}",
        max_new_tokens=str(results["config"]["max_new_tokens"]),
        decoder=results["config"].get("decoder", "the kit's loop"),
        greedy_check=_greedy_words(rows),
    )


def _greedy_words(rows: list[dict]) -> str:
    """How the timed outputs compare with greedy decoding, over every speculative row: the report says what
    was checked instead of claiming it (near-ties: see `bench._greedy_check`)."""
    if all(r.get("identical") for r in rows):
        return "output identical to greedy decoding, token for token"
    if all(r.get("matches_greedy", r.get("identical")) for r in rows):
        return "output equal to greedy decoding up to numerical near-ties (either token is a greedy choice there)"
    return "**output DIFFERS from greedy decoding in some runs: these timings do not compare like with like**"


class _Names:
    """``{{ kind.NAME }}`` in the template; a name the results cannot fill stays visible in the report."""

    def __init__(self, kind: str, makers: dict):
        self._kind, self._makers = kind, makers

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        make = self._makers.get(name)
        return make() if make else f"*(missing: {self._kind}.{name})*"


class _Missing(jinja2.Undefined):
    def __str__(self) -> str:
        return f"*(missing: {self._undefined_name})*"


def fill_template(template: str, results: dict, figures: dict[str, str]) -> str:
    """Render the Jinja2 ``template``; ``figures`` maps a figure name to its path relative to the report.
    An unknown or unavailable name is left visible as *(missing: ...)*, not an error."""
    values = report_values(results)
    names = dict(
        table=_Names("table", {name: (lambda make=make: to_markdown(*make(results))) for name, make in TABLES.items()}),
        figure=_Names(
            "figure",
            {
                name: (lambda name=name, path=path: f"![{name.replace('_', ' ')}]({path})")
                for name, path in figures.items()
            },
        ),
        value=_Names("value", {name: (lambda text=text: text) for name, text in values.items()}),
        env=env_markdown(results),
    )
    environment = jinja2.Environment(undefined=_Missing, keep_trailing_newline=True, trim_blocks=True, autoescape=False)
    try:
        return environment.from_string(template).render(names)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(
            f"the report template has a syntax error on line {error.lineno}: {error.message}; "
            "placeholders read {{ table.sweep }}, {{ figure.speedup_vs_k }}, {{ value.best_k }}, "
            "{{ env }}"
        ) from None


_MARKDOWN = MarkdownIt("commonmark").enable("table")


def markdown_to_html(text: str) -> str:
    return _MARKDOWN.render(text)


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:52rem;margin:2rem auto;
padding:0 1rem;line-height:1.45;color:#222;font-size:11pt}h1{font-size:1.6rem}h2{font-size:1.25rem;
border-bottom:1px solid #ddd;padding-bottom:.2rem}table{border-collapse:collapse;margin:.6rem 0;font-size:9pt}
th,td{border:1px solid #ccc;padding:.2rem .45rem;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
p>img{display:inline-block;width:49%;margin:.4rem 0;vertical-align:top}
img{max-width:100%}code{background:#f4f4f4;padding:0 .2rem}
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
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


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
        print(
            "PDF skipped: no Chromium found (tried chromium, chromium-browser, google-chrome). Open report.html in "
            "a browser and print to PDF, or install one: apt-get install -y chromium",
            file=sys.stderr,
        )
        return None
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-pdf-header-footer",
        f"--print-to-pdf={Path(pdf_path).resolve()}",
        Path(html_path).resolve().as_uri(),
    ]
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


def template_path(template=None) -> Path:
    """The template a report is filled from: ``template`` if given; else ./report/REPORT_TEMPLATE.md (yours,
    in a checkout); else the course's, shipped in the package. FileNotFoundError naming what was tried."""
    if template is not None:
        if not Path(template).is_file():
            raise FileNotFoundError(f"no report template at {template}; give --template PATH to a Markdown file")
        return Path(template)
    for path in (TEMPLATE, PACKAGED_TEMPLATE):
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"no report template: neither {TEMPLATE.resolve()} nor the packaged {PACKAGED_TEMPLATE} "
        "exists (a broken install: reinstall the kit), or give --template PATH"
    )


def build_report(results_dir="report/results", out_dir="report/build", template=None, pdf: bool = True) -> dict:
    """Fill the template from the results; write report.md, report.html (self-contained), report.pdf.

    Returns ``{"md", "html", "pdf", "template"}`` paths (``pdf`` None without Chromium; ``template``: the
    one used, see `template_path`).
    """
    results = load_results(results_dir)
    out_dir = Path(out_dir)
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    figures = {}
    for name, fig in make_figures(results).items():
        save_figure(fig, name, out_dir / "figures", formats=("png",))  # HTML embeds PNG; PDFs come from bench
        figures[name] = f"figures/{name}.png"
    template = template_path(template)
    text = template.read_text()
    markdown = fill_template(text, results, figures)
    md_path, html_path = out_dir / "report.md", out_dir / "report.html"
    md_path.write_text(markdown)
    html_path.write_text(to_html(markdown, out_dir))
    pdf_path = html_to_pdf(html_path, out_dir / "report.pdf") if pdf else None
    return dict(md=md_path, html=html_path, pdf=pdf_path, template=template)
