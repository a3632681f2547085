"""Tests for the offline toy pair.

The recipe's tests (slow) train for a handful of steps; the others load the shipped pair (under a second).
"""

import json
from importlib import resources

import pytest
import torch
from safetensors.torch import load_file

from specdec_helpers.models import store, toy

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


def test_cache_root_respects_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "c"))
    assert store.cache_root() == tmp_path / "c"
    monkeypatch.delenv("SPECDEC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert store.cache_root() == tmp_path / "x" / "specdec_helpers"


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


def test_ship_toy_writes_fp16_weights_one_tokenizer_and_a_manifest(tmp_path):
    out = toy.ship_toy(toy.train_toy(tmp_path / "trained", progress=False, steps=2), tmp_path / "shipped")
    assert sorted(p.name for p in out.iterdir()) == ["draft", "manifest.json", "target", "tokenizer", "toy.json"]
    assert {t.dtype for t in load_file(out / "target" / "model.safetensors").values()} == {torch.float16}
    assert store.folder_problem(out) is None
    (out / "tokenizer" / "tokenizer_config.json").unlink()
    assert "tokenizer_config.json is missing" in store.folder_problem(out)


@pytest.fixture(scope="session")
def toy_pair():
    """The toy pair shipped in the package (no training, no cache)."""
    target, draft, tok = toy.load_toy(progress=False)
    yield target, draft, tok


def test_shipped_toy_is_the_one_in_its_manifest():
    """The package's files are the recorded ones (sha256), so every machine loads the same pair."""
    with resources.as_file(toy.shipped_toy()) as folder:
        sums = json.loads((folder / "manifest.json").read_text())
        assert {
            "target/model.safetensors",
            "draft/model.safetensors",
            "tokenizer/tokenizer.json",
            "tokenizer/tokenizer_config.json",
            "toy.json",
        } <= set(sums)
        assert store.folder_problem(folder) is None
        info = json.loads((folder / "toy.json").read_text())
    assert info["version"] == toy.TOY_VERSION and info["steps"] == toy.TRAIN_STEPS and info["seed"] == 0


def test_shipped_toy_loads_as_fp32_and_decodes_deterministically(toy_pair):
    target, draft, tok = toy_pair
    assert not target.training and not draft.training
    assert {p.dtype for p in target.parameters()} == {torch.float32}
    assert target.config.vocab_size == draft.config.vocab_size == len(tok) == toy.VOCAB_SIZE
    assert target.config.num_hidden_layers > draft.config.num_hidden_layers
    for model in (target, draft):
        assert model.generation_config.eos_token_id == tok.eos_token_id
        assert model.generation_config.pad_token_id == tok.pad_token_id
    ids = tok(toy.TOY_PROMPTS[0], return_tensors="pt").input_ids
    runs = [target.generate(ids, max_new_tokens=24, do_sample=False) for _ in range(2)]
    t2, _, _ = toy.load_toy(progress=False)  # a second load gives the same model and the same tokens
    runs.append(t2.generate(ids, max_new_tokens=24, do_sample=False))
    assert all(torch.equal(runs[0], r) for r in runs[1:])
    assert runs[0].shape[1] == ids.shape[1] + 24


@pytest.mark.parametrize(
    "rel, problem",
    [
        ("target/model.safetensors", "is damaged"),  # truncated
        ("tokenizer/tokenizer_config.json", "is missing"),  # once reported as "trained with another tokenizer"
    ],
)
def test_broken_shipped_toy_names_the_file_and_the_fix(tmp_path, monkeypatch, rel, problem):
    import shutil

    with resources.as_file(toy.shipped_toy()) as folder:
        copy = shutil.copytree(folder, tmp_path / "toy")
    path = copy / rel
    if problem == "is missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:1000])
    monkeypatch.setattr(toy, "shipped_toy", lambda: copy)
    with pytest.raises(RuntimeError, match=rf"{rel} {problem}.*[Rr]einstall"):
        toy.load_toy(progress=False)


@pytest.mark.slow
def test_toy_draft_agrees_with_target(toy_pair):
    target, draft, tok = toy_pair
    rates = [greedy_agreement(target, draft, tok(p, return_tensors="pt").input_ids) for p in toy.TOY_PROMPTS]
    assert sum(rates) / len(rates) > 0.3, rates
