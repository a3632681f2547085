"""The token renderer, the explorer widget and the notebook helpers, on tiny in-memory models."""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace

import pytest
import torch

from tiny_models import perturbed_copy, tiny_model
from specdec_helpers.present import notebook_help
from specdec_helpers import speculative_decode
from specdec_helpers.core.decode import DecodeOutput, DecodeStats, Step
from specdec_helpers.present.widgets import TokenExplorer, render_html, token_spans


class LetterTokenizer:
    """Token i is the i-th character of ALPHABET (enough to decode tiny-model output as text)."""

    ALPHABET = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ<>&.,!?\n0123456789"

    def decode(self, ids, **kwargs):
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return "".join(self.ALPHABET[i % len(self.ALPHABET)] for i in ids)

    def encode(self, text):
        return [self.ALPHABET.index(c) for c in text]

    def __call__(self, text, return_tensors=None):
        return SimpleNamespace(input_ids=torch.tensor([self.encode(text)]))


@pytest.fixture(scope="module")
def models():
    target = tiny_model("gpt_neox", seed=0)
    return target, perturbed_copy(target, scale=0.3)


PROMPT = torch.tensor([[1, 5, 9, 2, 7]])


def run(target, draft, k=4, n=24, **kwargs):
    return speculative_decode(target, draft, PROMPT, max_new_tokens=n, num_speculative_tokens=k, **kwargs)


def kinds(spans):
    return [s.kind for s in spans]


def test_spans_rebuild_the_text(models):
    target, draft = models
    out = run(target, draft)
    spans = token_spans(out, LetterTokenizer(), PROMPT.shape[1])
    assert spans[0].kind == "prompt"
    kept = [s.token for s in spans[1:] if s.kind != "rejected"]
    assert kept == out.new_tokens.tolist()
    # Every rejected draft token of a round that ended in a correction is shown once.
    rejected = [s.token for s in spans if s.kind == "rejected"]
    assert rejected == [t for step in out.steps if step.target_token_kind == "correction" for t in step.rejected]
    assert sum(k == "accepted" for k in kinds(spans)) == out.stats.accepted


def test_imperfect_draft_shows_all_kinds(models):
    target, draft = models
    out = run(target, draft, k=3, n=40)
    found = set(kinds(token_spans(out, LetterTokenizer(), PROMPT.shape[1])))
    assert {"prompt", "accepted", "rejected", "correction"} <= found


def test_perfect_draft_gets_bonus_tokens(models):
    target, _ = models
    out = run(target, copy.deepcopy(target), k=4, n=20)
    found = kinds(token_spans(out, None, PROMPT.shape[1], show_prompt=False))
    assert "rejected" not in found and "correction" not in found
    assert found.count("bonus") == out.stats.target_calls  # every round ends with a bonus token


def test_html_has_coloured_spans_and_escapes(models):
    target, draft = models
    out = run(target, draft, k=3, n=30)
    page = render_html(out, LetterTokenizer(), PROMPT.shape[1], steps=True)
    for kind in ("prompt", "accepted", "rejected", "correction"):
        assert f'class="sd-tok sd-{kind}"' in page
    assert "line-through" in page  # rejected tokens are struck through
    assert '<table class="sd-steps"' in page and page.count("<tr>") == len(out.steps) + 1
    # Token text is escaped: '<', '>' and '&' never open tags.
    body = re.sub(r"<[^>]+>", "", page)
    assert "<" not in body and ">" not in body
    assert f"{out.stats.accepted}/{out.stats.proposed}" in page


def test_html_without_tokenizer_shows_ids(models):
    target, draft = models
    out = run(target, draft, n=5)
    page = render_html(out, None, PROMPT.shape[1], legend=False, stats=False)
    assert "⟨1⟩⟨5⟩⟨9⟩⟨2⟩⟨7⟩" in page and "sd-legend" not in page


def test_eos_cut_and_bad_prompt_length():
    # A hand-made trace: round 0 accepted 2 of 3 then a correction; round 1 stopped at EOS (id 3)
    # inside the accepted draft, so no target token was emitted.
    out = DecodeOutput(
        torch.tensor([[1, 2, 10, 11, 12, 13, 3]]),
        DecodeStats(new_tokens=5, target_calls=2),
        [Step([10, 11, 20], 2, [10, 11, 12]), Step([13, 3, 14], 3, [13, 3])],
    )
    spans = token_spans(out, None, 2)
    assert [(s.token, s.kind) for s in spans[1:]] == [
        (10, "accepted"),
        (11, "accepted"),
        (20, "rejected"),
        (12, "correction"),
        (13, "accepted"),
        (3, "accepted"),
    ]
    with pytest.raises(ValueError, match="prompt_length"):
        token_spans(out, None, 0)


def test_explorer_runs_with_both_drafters(models):
    target, draft = models
    pair = SimpleNamespace(target=target, draft=draft, tokenizer=LetterTokenizer(), num_speculative_tokens=3)
    explorer = TokenExplorer(pair, prompts=["abc abc abc", "hello"], max_new_tokens=12)
    page = explorer.run()
    assert 'class="sd-tok sd-accepted"' in page or 'class="sd-tok sd-correction"' in page
    assert explorer.last.stats.new_tokens == 12
    explorer.drafter.value = "prompt lookup"
    explorer.k.value = 5
    explorer.run()
    assert explorer.last.stats.new_tokens == 12
    explorer.examples.value = "hello"
    assert explorer.prompt.value == "hello"
    explorer.temperature.value = 0.8
    explorer.button.click()  # the Run button goes through the same path
    assert "target passes" in explorer.status.value


def test_explorer_reports_bad_input(models):
    target, draft = models
    pair = SimpleNamespace(target=target, draft=draft, tokenizer=LetterTokenizer())
    explorer = TokenExplorer(pair, prompts=["a"], max_new_tokens=300)  # longer than the context (256)
    explorer.max_new_tokens.max = 1000
    explorer.max_new_tokens.value = 300
    explorer.run()
    assert "context" in explorer.status.value and explorer.last is None


def test_check_verdicts(capsys):
    notebook_help.check(True, "fine", "fix it")
    assert "✅" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="fix it"):
        notebook_help.check(False, "fine", "fix it")

    def unfinished():
        raise NotImplementedError

    with pytest.raises(notebook_help.CheckFailed, match="NotImplementedError"):
        notebook_help.check(unfinished, "fine", "write the function")


def test_colab_badge_uses_the_one_repo_constant():
    badge = notebook_help.colab_badge("01_model_init.ipynb")
    assert notebook_help.github_path() in badge and badge.endswith("/notebooks/01_model_init.ipynb)")
    assert notebook_help.pip_install_spec().startswith("git+" + notebook_help.REPO_URL)
    assert notebook_help.in_colab() is False
