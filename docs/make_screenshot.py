"""Regenerate docs/token_render.png: a real run on the offline toy pair, rendered by
`specdec_helpers.present.widgets.render_html` and photographed in headless Chromium.

    python docs/make_screenshot.py   # needs: apt-get install chromium; pip install playwright
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specdec_helpers.assignment.student import notebook as nb  # noqa: E402 - as the notebooks import it
from specdec_helpers import speculative_decode  # noqa: E402
from specdec_helpers.models.pairs import load_pair  # noqa: E402
from specdec_helpers.present.widgets import render_html  # noqa: E402

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


def main(out: Path = ROOT / "docs" / "token_render.png") -> Path:
    from playwright.sync_api import sync_playwright

    torch.set_grad_enabled(False)
    pair = load_pair("toy", progress=False)
    prompt = nb.prompts_for(pair)[0]
    ids = pair.encode(prompt)
    result = speculative_decode(pair.target, pair.draft, ids, max_new_tokens=48, num_speculative_tokens=4)
    html = render_html(result, pair.tokenizer, ids.shape[1], steps=True, max_rows=6)
    page_html = (
        "<!doctype html><html><head><meta charset='utf-8'></head>"
        f"<body style='margin:10px;width:760px;font-size:14px'>{html}</body></html>"
    )
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 800, "height": 600}, device_scale_factor=1)
        page.set_content(page_html)
        page.locator(".sd-render").screenshot(path=str(out))
        browser.close()
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")
    return out


if __name__ == "__main__":
    main()
