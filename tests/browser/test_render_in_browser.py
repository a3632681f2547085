"""The coloured token rendering, opened in a real headless Chromium.

Skips (only) when Playwright or a Chromium binary is missing, unless SPECDEC_REQUIRE_BROWSER=1 (CI),
which turns a missing browser into a failure. CI installs them with:
    apt-get install -y chromium          # Debian's browser, /usr/bin/chromium
    pip install playwright               # the Python driver; never `playwright install`
Set SPECDEC_CHROMIUM to use a browser binary elsewhere.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading

import pytest
import torch

from tiny_models import perturbed_copy, tiny_model

pytestmark = pytest.mark.slow  # drives a real browser

REQUIRED = os.environ.get("SPECDEC_REQUIRE_BROWSER", "") not in ("", "0")  # CI: missing browser = failure
try:
    from playwright import sync_api as playwright_api
except ImportError:
    if REQUIRED:
        raise ImportError("SPECDEC_REQUIRE_BROWSER is set but playwright is missing: pip install playwright") from None
    pytest.skip("playwright is not installed (pip install playwright)", allow_module_level=True)
CHROMIUM = os.environ.get("SPECDEC_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    if REQUIRED:
        raise FileNotFoundError("SPECDEC_REQUIRE_BROWSER is set but no chromium binary: apt-get install -y chromium")
    pytest.skip("no chromium binary (apt-get install -y chromium)", allow_module_level=True)

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Computed colours the page must show (from widgets.STYLES).
BACKGROUNDS = {
    "accepted": "rgb(200, 247, 197)",
    "rejected": "rgb(255, 210, 210)",
    "correction": "rgb(255, 216, 155)",
    "bonus": "rgb(201, 226, 255)",
}


def page_html(body: str, title: str = "render") -> str:
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>{body}</body></html>"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A localhost http.server over a temporary folder; yields (folder, base_url)."""
    root = tmp_path_factory.mktemp("site")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def kinds_on_page(page) -> dict:
    return page.eval_on_selector_all(
        ".sd-tok", "els => els.reduce((n, e) => (n[e.dataset.kind] = (n[e.dataset.kind] || 0) + 1, n), {})"
    )


def test_rendered_run_shows_coloured_tokens(served, browser):
    from specdec_helpers import speculative_decode
    from specdec_helpers.present.widgets import render_html

    target = tiny_model("gpt_neox", seed=0)
    prompt = torch.tensor([[1, 5, 9, 2, 7]])
    imperfect = speculative_decode(
        target, perturbed_copy(target, 0.3), prompt, max_new_tokens=30, num_speculative_tokens=3
    )
    perfect = speculative_decode(
        target, perturbed_copy(target, 0.0), prompt, max_new_tokens=12, num_speculative_tokens=4
    )
    root, base = served
    body = render_html(imperfect, None, 5, steps=True) + render_html(perfect, None, 5, legend=False)
    (root / "render.html").write_text(page_html(body), encoding="utf-8")

    page = browser.new_page()
    page.goto(f"{base}/render.html")
    counts = kinds_on_page(page)
    for kind in ("accepted", "rejected", "correction", "bonus"):
        assert counts.get(kind, 0) > 1, counts  # the legend holds one of each; the text holds more
        colour = page.eval_on_selector(f".sd-text .sd-{kind}", "e => getComputedStyle(e).backgroundColor")
        assert colour == BACKGROUNDS[kind], (kind, colour)
    decoration = page.eval_on_selector(".sd-text .sd-rejected", "e => getComputedStyle(e).textDecorationLine")
    assert decoration == "line-through"
    assert page.locator("table.sd-steps tr").count() == len(imperfect.steps) + 1
    page.close()


def test_exported_notebook_keeps_the_colours(served, browser, tmp_path):
    """An executed notebook's token rendering survives nbconvert's HTML export (what students put in their
    report, and what nbviewer shows). The course notebooks keep no saved outputs (`notebook_sync`), so the
    notebook here is one as a run of 04's explorer saves it: the rendering as a display_data output."""
    import nbconvert
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from specdec_helpers import speculative_decode
    from specdec_helpers.present.widgets import render_html

    target = tiny_model("llama", seed=1)
    out = speculative_decode(
        target, perturbed_copy(target, 0.3), torch.tensor([[3, 8, 1, 6]]), max_new_tokens=20, num_speculative_tokens=3
    )
    cell = new_code_cell(
        "nb.render_html(out, tokenizer, prompt_length)",
        outputs=[new_output("display_data", data={"text/html": render_html(out, None, 4)})],
    )
    path = tmp_path / "executed.ipynb"
    nbformat.write(new_notebook(cells=[cell]), str(path))
    body, _ = nbconvert.HTMLExporter().from_filename(str(path))
    root, base = served
    (root / "executed.html").write_text(body, encoding="utf-8")
    page = browser.new_page()
    page.goto(f"{base}/executed.html")
    counts = kinds_on_page(page)
    assert counts.get("accepted", 0) > 1 and counts.get("prompt", 0) >= 1, counts
    colour = page.eval_on_selector(".sd-text .sd-accepted", "e => getComputedStyle(e).backgroundColor")
    assert colour == BACKGROUNDS["accepted"]
    page.close()
