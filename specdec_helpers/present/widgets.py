"""See speculative decoding token by token: a static HTML rendering and an interactive explorer.

Colours (the same in the HTML, the explorer and the course slides):

- accepted draft token: green; the target agreed, it cost no target step of its own
- rejected draft token: red and struck through; proposed, then thrown away (not part of the text)
- correction: orange; the target's own token at the first mismatch
- bonus: blue; the target's free extra token when every draft token was accepted
- target: grey-blue; a round with nothing drafted (plain target step)

`render_html` returns self-contained HTML (inline styles, no scripts), so it shows the same in
Jupyter, Colab, VS Code and in exported notebooks (display it with ``IPython.display.HTML``).
`TokenExplorer` uses ipywidgets core widgets only, so it runs on Colab with no extension.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import torch

from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.core.drafters import PromptLookupDrafter
from specdec_helpers.measure.observed import check_decoder, decoder_scoring, observed_decode

KINDS = ("prompt", "accepted", "rejected", "correction", "bonus", "target")

#: Inline style of each token kind (background, text colour, decoration).
STYLES = {
    "prompt": "color:#555;",
    "accepted": "background:#c8f7c5;color:#0b4f06;",
    "rejected": "background:#ffd2d2;color:#8a0000;text-decoration:line-through;",
    "correction": "background:#ffd89b;color:#7a4100;",
    "bonus": "background:#c9e2ff;color:#0a3d7a;",
    "target": "background:#e4e7f0;color:#2b3550;",
}

LABELS = {
    "prompt": "prompt",
    "accepted": "accepted draft token",
    "rejected": "rejected draft token",
    "correction": "correction (target)",
    "bonus": "bonus (target)",
    "target": "target step (no draft)",
}


@dataclass
class TokenSpan:
    """One token of the rendering: its id, its text, its kind (see ``KINDS``) and its round."""

    token: int
    text: str
    kind: str
    step: int | None = None  # round number (None for the prompt)


def _decode(tokenizer, ids: list[int]) -> str:
    if tokenizer is None:
        return "".join(f"⟨{i}⟩" for i in ids)
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _piece(tokenizer, context: list[int], token: int, window: int = 6) -> str:
    """Text that ``token`` adds after ``context`` (decoding in context keeps leading spaces and
    multi-byte characters right, which decoding a lone token does not always do)."""
    if tokenizer is None:
        return f"⟨{token}⟩"
    before = context[-window:]
    head = _decode(tokenizer, before)
    full = _decode(tokenizer, before + [token])
    if full.startswith(head):
        return full[len(head) :]
    return _decode(tokenizer, [token])


def token_spans(out, tokenizer, prompt_length: int, show_prompt: bool = True) -> list[TokenSpan]:
    """The coloured spans of a `DecodeOutput`: prompt, then per round the accepted draft tokens, the
    rejected ones (struck through; not part of the text) and the target's correction or bonus."""
    ids = out.sequences[0].tolist()
    if not 0 < prompt_length <= len(ids):
        raise ValueError(f"prompt_length must be in 1..{len(ids)} (the sequence length), got {prompt_length}")
    spans: list[TokenSpan] = []
    text_ids = ids[:prompt_length]
    if show_prompt:
        # Decode the prompt as one piece: it is context, not something the loop produced.
        spans.append(TokenSpan(-1, _decode(tokenizer, text_ids), "prompt"))
    for number, step in enumerate(out.steps):
        emitted = list(step.emitted)
        accepted = emitted[: step.accepted]
        for token in accepted:
            spans.append(TokenSpan(token, _piece(tokenizer, text_ids, token), "accepted", number))
            text_ids.append(token)
        if len(emitted) > step.accepted:  # the target's own token made it into the text
            for i, token in enumerate(step.rejected):
                spans.append(
                    TokenSpan(token, _piece(tokenizer, text_ids + step.rejected[:i], token), "rejected", number)
                )
            token = emitted[step.accepted]
            spans.append(TokenSpan(token, _piece(tokenizer, text_ids, token), step.target_token_kind, number))
            text_ids.append(token)
    return spans


def _span_html(span: TokenSpan) -> str:
    # A newline shows as ↵; it also breaks the line, except in rejected tokens (they are not in the text).
    text = html.escape(span.text).replace("\n", "↵" if span.kind == "rejected" else "↵\n")
    if span.kind == "prompt":
        return f'<span class="sd-tok sd-prompt" data-kind="prompt" style="{STYLES["prompt"]}">{text}</span>'
    title = f"round {span.step}: {LABELS[span.kind]}, token id {span.token}"
    style = STYLES[span.kind] + "border-radius:3px;padding:0 1px;margin:0 1px 0 0;"
    return (
        f'<span class="sd-tok sd-{span.kind}" data-kind="{span.kind}" data-step="{span.step}" '
        f'title="{html.escape(title)}" style="{style}">{text}</span>'
    )


def legend_html() -> str:
    """One line explaining the colours."""
    items = [
        f'<span class="sd-tok sd-{k}" data-kind="{k}" style="{STYLES[k]}border-radius:3px;padding:0 4px;">'
        f"{LABELS[k]}</span>"
        for k in ("accepted", "rejected", "correction", "bonus")
    ]
    return '<div class="sd-legend" style="margin:4px 0;font-size:90%;">' + " ".join(items) + "</div>"


def stats_html(out) -> str:
    """The run's counters in one line."""
    s = out.stats
    return (
        '<div class="sd-stats" style="margin:4px 0;font-size:90%;">'
        f"{s.new_tokens} new tokens in {s.target_calls} target passes "
        f"({s.mean_accepted_length:.2f} tokens per pass); draft tokens accepted {s.accepted}/{s.proposed} "
        f"= {100 * s.acceptance_rate:.1f}%</div>"
    )


def steps_table_html(out, tokenizer=None, max_rows: int = 30) -> str:
    """A table with one row per round: drafted, accepted, the target's token and its kind."""
    rows = []
    for number, step in enumerate(out.steps[:max_rows]):
        drafted = html.escape(repr(_decode(tokenizer, step.draft))) if step.draft else "—"
        extra = step.emitted[step.accepted : step.accepted + 1]
        own = html.escape(repr(_decode(tokenizer, extra))) if extra else "— (stopped)"
        rows.append(
            f"<tr><td>{number}</td><td style='text-align:left'>{drafted}</td>"
            f"<td>{step.accepted}/{len(step.draft)}</td><td style='text-align:left'>{own}</td>"
            f"<td>{step.target_token_kind if extra else ''}</td><td>{len(step.emitted)}</td></tr>"
        )
    more = len(out.steps) - max_rows
    if more > 0:
        rows.append(f"<tr><td colspan='6'>… {more} more rounds</td></tr>")
    head = (
        "<tr><th>round</th><th>draft proposed</th><th>accepted</th><th>target's token</th>"
        "<th>kind</th><th>emitted</th></tr>"
    )
    return (
        '<table class="sd-steps" style="font-size:85%;border-collapse:separate;border-spacing:12px 1px;margin-left:-12px;">'
        + head
        + "".join(rows)
        + "</table>"
    )


def render_html(
    out,
    tokenizer,
    prompt_length: int,
    *,
    show_prompt: bool = True,
    legend: bool = True,
    stats: bool = True,
    steps: bool = False,
    max_rows: int = 30,
) -> str:
    """Self-contained HTML of a speculative decoding run, tokens coloured by how they were made.

    ``out`` is a `DecodeOutput` (``speculative_decode(...)``), ``prompt_length`` the number of prompt
    tokens at the start of ``out.sequences``; ``tokenizer=None`` shows token ids instead of text.
    ``steps=True`` adds the round-by-round table. Display with ``IPython.display.HTML(...)``.
    """
    spans = token_spans(out, tokenizer, prompt_length, show_prompt=show_prompt)
    body = "".join(_span_html(s) for s in spans)
    parts = ['<div class="sd-render" style="font-family:ui-monospace,Menlo,Consolas,monospace;line-height:1.7;">']
    if legend:
        parts.append(legend_html())
    parts.append(
        '<div class="sd-text" style="white-space:pre-wrap;word-wrap:break-word;border:1px solid #ddd;'
        f'padding:6px;border-radius:4px;">{body}</div>'
    )
    if stats:
        parts.append(stats_html(out))
    if steps:
        parts.append(steps_table_html(out, tokenizer, max_rows))
    parts.append("</div>")
    return "".join(parts)


def show(out, tokenizer, prompt_length: int, **kwargs):
    """Display `render_html` in a notebook (kept in the saved outputs and in HTML exports)."""
    from IPython.display import HTML, display

    display(HTML(render_html(out, tokenizer, prompt_length, **kwargs)))


# --------------------------------------------------------------------------- interactive explorer


class TokenExplorer:
    """Interactive token explorer: prompt, k, temperature, drafter, Run; tokens coloured as above.

    Built from ipywidgets core widgets only (works on Colab and in JupyterLab with no extension).
    ``pair`` is a `ModelPair` (or anything with ``target``, ``draft``, ``tokenizer`` and optionally
    ``encode``). Call `run` to decode with the current settings (the Run button does the same).

    ``decoder``: a ``SpeculativeDecoder`` (PA3's interface: the student's) that runs at temperature 0 with
    the draft model instead of the kit's loop, its rounds read from its verify calls (`measure.observed`), and its
    scoring pass (`measure.observed.decoder_scoring`) is the one the kit's loop samples with;
    ``decode(ids, k, max_new_tokens) -> DecodeOutput`` does the same for any callable. Other settings
    (sampling, prompt lookup) run the kit's loop, where the edition has it.
    """

    DRAFTERS = ("draft model", "prompt lookup")

    def __init__(
        self,
        pair,
        prompts=None,
        max_new_tokens: int = 40,
        k: int | None = None,
        seed: int = 0,
        decode=None,
        decoder=None,
    ):
        import ipywidgets as w

        self.pair = pair
        # decode(ids, k, max_new_tokens) -> DecodeOutput: a greedy decoder of your own (e.g. the student's,
        # recorded by `assignment.student.notebook.traced`) for the draft model at temperature 0.
        if decoder is not None:
            check_decoder(decoder)
            decode = decode or (lambda ids, k, n: observed_decode(decoder, ids, n, k))
        self.decode = decode
        self.score = decoder_scoring(decoder) if decoder is not None else None  # the student kit has no scoring pass
        prompts = list(prompts or ["The future of Artificial Intelligence is"])
        k = k or getattr(pair, "num_speculative_tokens", 5)
        has_model_draft = isinstance(pair.draft, torch.nn.Module)
        self.prompt = w.Textarea(value=prompts[0], description="prompt", layout=w.Layout(width="95%", height="4em"))
        self.examples = w.Dropdown(
            options=prompts, value=prompts[0], description="examples", layout=w.Layout(width="95%")
        )
        self.k = w.IntSlider(value=k, min=1, max=16, description="k (draft)")
        self.temperature = w.FloatSlider(value=0.0, min=0.0, max=1.5, step=0.05, description="temperature")
        self.max_new_tokens = w.IntSlider(value=max_new_tokens, min=1, max=200, description="new tokens")
        self.drafter = w.ToggleButtons(
            options=self.DRAFTERS if has_model_draft else self.DRAFTERS[1:], description="drafter"
        )
        self.seed = w.IntText(value=seed, description="seed", layout=w.Layout(width="12em"))
        self.button = w.Button(description="Run", button_style="primary", icon="play")
        self.status = w.HTML()
        self.html = w.HTML()
        self.examples.observe(lambda change: setattr(self.prompt, "value", change["new"]), names="value")
        self.button.on_click(self.run)
        self.widget = w.VBox(
            [
                self.examples,
                self.prompt,
                w.HBox([self.k, self.temperature]),
                w.HBox([self.max_new_tokens, self.seed]),
                w.HBox([self.drafter, self.button]),
                self.status,
                self.html,
            ]
        )
        self.last = None

    def _draft(self):
        if self.drafter.value == "prompt lookup":
            return PromptLookupDrafter()
        return self.pair.draft

    def _encode(self, prompt: str) -> torch.Tensor:
        if hasattr(self.pair, "encode"):
            return self.pair.encode(prompt)
        ids = self.pair.tokenizer(prompt, return_tensors="pt").input_ids
        return ids.to(self.pair.target.device)

    def run(self, _button=None) -> str:
        """Decode with the current settings, update the display, and return the HTML."""
        self.status.value = "<i>running…</i>"
        try:
            ids = self._encode(self.prompt.value)
            generator = None
            if self.temperature.value > 0:
                generator = torch.Generator(device=ids.device).manual_seed(int(self.seed.value))
            if self.decode is not None and self.temperature.value == 0 and self.drafter.value == "draft model":
                out = self.decode(ids, self.k.value, self.max_new_tokens.value)
            else:
                out = speculative_decode(
                    self.pair.target,
                    self._draft(),
                    ids,
                    max_new_tokens=self.max_new_tokens.value,
                    num_speculative_tokens=self.k.value,
                    temperature=self.temperature.value,
                    generator=generator,
                    score=self.score,
                )
        except (ValueError, TypeError) as error:  # bad settings: say so in the widget, do not crash the UI
            self.status.value = f'<span style="color:#a00">{html.escape(str(error))}</span>'
            return self.status.value
        self.last = out
        s = out.stats
        self.status.value = (
            f"{s.new_tokens} tokens in {s.wall_time_s * 1000:.0f} ms "
            f"({s.tokens_per_s:.0f} tokens/s), {s.target_calls} target passes"
        )
        self.html.value = render_html(out, self.pair.tokenizer, ids.shape[1], steps=True)
        return self.html.value

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)


def token_explorer(pair, prompts=None, run: bool = True, **kwargs) -> TokenExplorer:
    """Build a `TokenExplorer` for ``pair`` (and run it once, so there is something to look at)."""
    explorer = TokenExplorer(pair, prompts, **kwargs)
    if run:
        explorer.run()
    return explorer
