"""The feature draft (EAGLE): feature bookkeeping, losslessness, exact sampling, training and its cache."""
import json
import shutil

import numpy as np
import pytest
import torch
from test_distill import CharTokenizer
from test_sampling import assert_fits, fit
from tiny_models import VOCAB, hf_greedy, tiny_model

from specdec_helpers import bench, distill, eagle, perf
from specdec_helpers.decode import speculative_decode
from specdec_helpers.distill import DISTILL_PROMPTS, DistillRecipe
from specdec_helpers.drafters import HybridDrafter
from specdec_helpers.sampling import Sampler

EOS = 3
TEXT = DistillRecipe(max_new_tokens=12, generate_batch=4)
TINY = eagle.EagleRecipe(epochs=3, batch_size=4, lr=3e-3)


def tiny_target(seed=0, vocab=VOCAB):
    return tiny_model("llama", seed=seed, layers=3, vocab=vocab, eos_token_id=EOS)


def fresh_drafter(target, seed=1):
    torch.manual_seed(seed)
    return eagle.FeatureDrafter(eagle.FeatureDraft(target, torch.arange(target.config.vocab_size)))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    target = tiny_target()
    root = tmp_path_factory.mktemp("eagle")
    folder = eagle.train_eagle(target, CharTokenizer(), name="tiny", recipe=TINY, text_recipe=TEXT,
                               prompts=DISTILL_PROMPTS[:12], progress=False, folder=root / "draft")
    return target, folder


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("use_cache", [True, False])
def test_output_equals_target_greedy(k, use_cache):
    target = tiny_target()
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    out = speculative_decode(target, fresh_drafter(target), ids, max_new_tokens=25, num_speculative_tokens=k,
                             use_cache=use_cache)
    assert out.sequences.tolist() == hf_greedy(target, ids, 25).tolist()
    assert out.stats.proposed > 0


def test_eos_inside_a_draft_ends_the_text_like_generate():
    target = tiny_target()
    for start in range(4, 40, 5):
        ids = torch.tensor([[start, start + 1, start + 2]])
        expected = hf_greedy(target, ids, 40)
        # The untrained draft is the target's first layer under its head: it agrees now and then, EOS included.
        out = speculative_decode(target, fresh_drafter(target), ids, max_new_tokens=40, num_speculative_tokens=4)
        assert out.sequences.tolist() == expected.tolist()


def test_features_kept_are_the_targets_own_and_proposals_match_a_fresh_draft():
    """After decoding, the drafter holds exactly the target's features of the kept text, and its cached
    proposal equals one computed from scratch (no stale cache rows, no off-by-one)."""
    target = tiny_target()
    drafter = fresh_drafter(target)
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    out = speculative_decode(target, drafter, ids, max_new_tokens=20, num_speculative_tokens=3)
    text = out.sequences
    n = text.shape[1] - 1  # the last token was never fed to the target
    with torch.no_grad():
        _, features = eagle.target_features(target, text)
        torch.testing.assert_close(drafter.features[0, :n], features[0, :n], rtol=1e-4, atol=1e-4)
        proposal = drafter.propose(text, 3).tokens
        fresh = fresh_drafter(target)
        fresh.observe_target(features[:, :n], 0)
        assert torch.equal(fresh.propose(text, 3).tokens, proposal)
        # By hand: position n - 1 reads (f_{n-1}, last token) for the first draft token.
        predicted = drafter.draft(features[:, :n], text[:, 1:])[:, -1:]
        assert int(drafter.draft.lm_head(predicted).argmax(-1)) == int(proposal[0])


def test_confidence_threshold_stops_drafting_and_stays_lossless():
    target = tiny_target()
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    drafter = eagle.FeatureDrafter(fresh_drafter(target).draft, confidence_threshold=1.0)  # always unsure
    out = speculative_decode(target, drafter, ids, max_new_tokens=20, num_speculative_tokens=4)
    assert out.sequences.tolist() == hf_greedy(target, ids, 20).tolist()
    assert {len(step.draft) for step in out.steps[1:-1]} == {1}  # the last round may have no room left
    with pytest.raises(ValueError, match="confidence_threshold"):
        eagle.FeatureDrafter(drafter.draft, confidence_threshold=2)


def test_nothing_is_proposed_before_the_target_has_run():
    target = tiny_target()
    assert fresh_drafter(target).propose(torch.tensor([[5, 9, 14]]), 3).tokens.numel() == 0


def test_hybrid_passes_features_on_and_stays_lossless():
    target = tiny_target()
    inner = fresh_drafter(target)
    hybrid = HybridDrafter(inner)
    assert hybrid.model is None and hybrid.observe_target == inner.observe_target
    ids = torch.tensor([[5, 9, 14, 5, 9, 14, 5, 9]])  # repeats: the lookup answers some rounds
    out = speculative_decode(target, hybrid, ids, max_new_tokens=25, num_speculative_tokens=3)
    assert out.sequences.tolist() == hf_greedy(target, ids, 25).tolist()


def test_sampling_keeps_the_targets_distribution():
    """The first three sampled tokens (a 5-token vocabulary, so every triple is counted) against the exact
    joint. The first round has no features yet, so the draft proposes for tokens 2 and 3."""
    vocab = 5
    target = tiny_model("llama", seed=3, layers=2, vocab=vocab)
    drafter = fresh_drafter(target, seed=4)
    prompt = [1, 4, 2]
    sampler = Sampler(1.0)

    def probs(text):
        with torch.no_grad():
            return sampler.probs(target(torch.tensor([text])).logits[0, -1]).numpy()

    exact = np.zeros((vocab,) * 3)
    for a in range(vocab):
        for b in range(vocab):
            exact[a, b] = probs(prompt)[a] * probs(prompt + [a])[b] * probs(prompt + [a, b])
    counts = np.zeros((vocab,) * 3)
    g = torch.Generator().manual_seed(0)
    proposed = 0
    for _ in range(2000):
        out = speculative_decode(target, drafter, torch.tensor([prompt]), max_new_tokens=3, num_speculative_tokens=2,
                                 temperature=1.0, generator=g)
        counts[tuple(out.new_tokens.tolist())] += 1
        proposed += out.stats.proposed
    assert proposed > 0  # the feature draft really proposed
    assert_fits(fit(counts.ravel(), exact.ravel()), "feature draft, k=2")


def test_training_lowers_the_loss_and_the_draft_round_trips(trained, tmp_path):
    target, folder = trained
    meta = json.loads((folder / "draft.json").read_text())
    assert meta["epoch_losses"][-1] < meta["epoch_losses"][0]
    assert meta["text"]["key"]["prompts"] == 12
    draft = eagle.load_eagle(target, folder)
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    out = speculative_decode(target, eagle.FeatureDrafter(draft), ids, max_new_tokens=20, num_speculative_tokens=3)
    assert out.sequences.tolist() == hf_greedy(target, ids, 20).tolist()
    # The shared embeddings are the target's, not a copy, and are not saved.
    assert draft.embed[0] is target.get_input_embeddings()
    assert not any(name.startswith("embed") for name in draft.state_dict())


def test_same_recipe_same_draft_and_the_text_is_reused(trained, tmp_path, monkeypatch):
    target, folder = trained
    shutil.copytree(folder.with_name("draft-text"), tmp_path / "again-text")  # the text is kept beside the draft
    monkeypatch.setattr(distill, "_generate_data", lambda *a, **k: pytest.fail("the cached text was not reused"))
    again = eagle.train_eagle(target, CharTokenizer(), name="tiny", recipe=TINY, text_recipe=TEXT,
                              prompts=DISTILL_PROMPTS[:12], progress=False, folder=tmp_path / "again")
    first, second = eagle.load_eagle(target, folder).state_dict(), eagle.load_eagle(target, again).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_other_prompts_write_the_text_again(trained, tmp_path):
    target, folder = trained
    text = distill.target_text(target, CharTokenizer(), recipe=TEXT, prompts=DISTILL_PROMPTS[20:22],
                               folder=tmp_path / "text", progress=False)
    assert len(text) == 2
    assert distill.text_meta(tmp_path / "text")["key"]["prompts"] == 2


def test_load_refuses_a_draft_of_another_target(trained):
    _, folder = trained
    with pytest.raises(ValueError, match="another target"):
        eagle.load_eagle(tiny_target(seed=5), folder)


def test_needs_a_llama_style_target():
    with pytest.raises(TypeError, match="LLaMA-style"):
        eagle.FeatureDraft(tiny_model("gpt2"), torch.arange(VOCAB))


def test_bench_measures_its_step_labels_it_and_knows_hf_cannot_run_it():
    target = tiny_target()
    drafter = fresh_drafter(target)
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    costs = bench.measure_costs(target, HybridDrafter(drafter), ids, ks=[2], repeats=2)
    assert costs["draft_step_s"] > 0 and costs["c"] == costs["draft_step_s"] / costs["target_step_s"]
    assert bench.draft_label(drafter) == "eagle"
    assert isinstance(bench.build_methods(target, drafter, 2)["hf_assisted"], bench.Skip)
    case = bench.Case("tiny", "hybrid", target, HybridDrafter(drafter), [("p", ids)])
    inner = perf._with_inner_models([case])[1]
    assert inner.draft is drafter and inner.drafter == "eagle"
