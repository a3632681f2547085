"""Tests for the offline toy pair.

The fast tests check the corpus, tokenizer and cache folder. The ``slow`` ones train (a handful of
steps, twice) or load the real toy pair, which is trained once into the cache when it is missing
(about a minute and a half on 2 CPU cores).
"""

import json

import pytest
import torch
from safetensors.torch import load_file

from specdec_helpers.models import toy

COURSE_PROMPTS = [
    "The future of Artificial Intelligence is",
    "Write a short story about a robot learning to feel emotions:",
    "Write the lyrics to the song 'Happy Birthday'.",
]


@torch.no_grad()
def greedy_agreement(target, draft, input_ids, new_tokens=48):
    """Share of positions where the draft's greedy token equals the target's, teacher-forced
    along the target's own greedy continuation (plain forward passes, no cache)."""
    ids = input_ids
    for _ in range(new_tokens):
        nxt = target(ids).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
    start = input_ids.shape[1] - 1  # logits at position i predict token i + 1
    t = target(ids).logits[0, start:-1].argmax(-1)
    d = draft(ids).logits[0, start:-1].argmax(-1)
    assert torch.equal(t, ids[0, start + 1 :])  # the forward pass reproduces the continuation
    return (t == d).float().mean().item()


def test_corpus_is_shipped_and_split_into_documents():
    corpus = toy.toy_corpus()
    assert 300_000 < len(corpus) < 1_500_000
    docs = toy.toy_documents()
    assert len(docs) > 50 and all(toy.EOS_TOKEN not in d for d in docs)
    for prompt in toy.TOY_PROMPTS:  # the toy prompts open real passages of the corpus
        assert prompt in corpus


def test_tokenizer_round_trips_prompts():
    tok = toy.build_tokenizer()
    assert len(tok) == toy.VOCAB_SIZE
    assert tok.eos_token == toy.EOS_TOKEN and tok.pad_token == toy.PAD_TOKEN
    assert tok.eos_token_id != tok.pad_token_id
    for text in toy.TOY_PROMPTS + COURSE_PROMPTS + ["naïve café — ünïcode ✓"]:
        ids = tok(text).input_ids
        assert tok.decode(ids) == text


def test_cache_dir_respects_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "c"))
    assert toy.toy_cache_dir() == tmp_path / "c" / f"toy-v{toy.TOY_VERSION}"
    monkeypatch.delenv("SPECDEC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert toy.toy_cache_dir() == tmp_path / "x" / "specdec_helpers" / f"toy-v{toy.TOY_VERSION}"


@pytest.mark.slow
def test_training_is_deterministic(tmp_path):
    rng_before = torch.get_rng_state()
    a = toy.train_toy(tmp_path / "a", progress=False, steps=5)
    b = toy.train_toy(tmp_path / "b", progress=False, steps=5)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's RNG is left alone
    for name in ("target", "draft"):
        sa = load_file(a / name / "model.safetensors")
        sb = load_file(b / name / "model.safetensors")
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert (a / "target" / "tokenizer.json").read_text() == (b / "target" / "tokenizer.json").read_text()
    info = json.loads((a / "toy.json").read_text())
    assert info["version"] == toy.TOY_VERSION and info["steps"] == 5
    assert toy._is_complete(a)
    (a / "toy.json").unlink()
    assert not toy._is_complete(a)  # the marker is what makes a folder count as a cache


@pytest.fixture(scope="session")
def toy_pair():
    """The real toy pair from the package cache (CI points SPECDEC_CACHE_DIR at a fresh folder, so
    it is trained there once and the notebooks and other tests reuse it)."""
    target, draft, tok = toy.load_toy(progress=False)
    yield target, draft, tok, toy.cache_root()


@pytest.mark.slow
def test_toy_loads_from_cache(toy_pair):
    target, draft, tok, cache = toy_pair
    folder = cache / f"toy-v{toy.TOY_VERSION}"
    assert toy._is_complete(folder)
    assert not [p for p in cache.iterdir() if p.name.startswith(f".toy-v{toy.TOY_VERSION}")]  # no temp folder left
    assert not target.training and not draft.training
    assert target.config.vocab_size == draft.config.vocab_size == len(tok)
    assert target.config.num_hidden_layers > draft.config.num_hidden_layers
    for model in (target, draft):
        assert model.generation_config.eos_token_id == tok.eos_token_id
        assert model.generation_config.pad_token_id == tok.pad_token_id
    with pytest.MonkeyPatch.context() as mp:  # a second load reuses the folder, no training
        mp.setenv("SPECDEC_CACHE_DIR", str(cache))
        stamp = (folder / "toy.json").stat().st_mtime_ns
        t2, _, _ = toy.load_toy(progress=False)
        assert (folder / "toy.json").stat().st_mtime_ns == stamp
    sd1, sd2 = target.state_dict(), t2.state_dict()
    assert all(torch.equal(sd1[k], sd2[k]) for k in sd1)


@pytest.mark.slow
def test_toy_draft_agrees_with_target(toy_pair):
    target, draft, tok, _ = toy_pair
    rates = [greedy_agreement(target, draft, tok(p, return_tensors="pt").input_ids) for p in toy.TOY_PROMPTS]
    assert sum(rates) / len(rates) > 0.3, rates
