"""The feature draft (EAGLE): feature bookkeeping, losslessness, exact sampling, training and its cache."""

import functools
import itertools
import json
import shutil

import numpy as np
import pytest
import torch
from test_distill import CharTokenizer
from test_sampling import assert_fits, fit
from tiny_models import VOCAB, hf_greedy, tiny_model

from specdec_helpers.measure import methods, perf, sweep
from specdec_helpers.models.drafts import eagle, eagle_train, feature_data, training_text
from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.models.drafts.distill import DistillRecipe
from specdec_helpers.models.drafts.training_text import DISTILL_PROMPTS
from specdec_helpers.core.cache import cache_length
from specdec_helpers.core.drafters import HybridDrafter
from specdec_helpers.core.sampling import Sampler

EOS = 3
TEXT = DistillRecipe(max_new_tokens=12, generate_batch=4)
TINY = eagle.EagleRecipe(epochs=3, batch_size=4, lr=3e-3)


def tiny_target(seed=0, vocab=VOCAB):
    return tiny_model("llama", seed=seed, layers=3, vocab=vocab, eos_token_id=EOS)


def fresh_drafter(target, seed=1, read_features=True):
    """An untrained feature drafter. Its ``fc`` starts as [0 | I] (features ignored); ``read_features``
    mixes random feature weights in, so a feature from the wrong position changes what it drafts."""
    draft = eagle.FeatureDraft(target, torch.arange(target.config.vocab_size))
    if read_features:
        torch.manual_seed(seed)
        hidden = draft.fc.in_features // 2
        with torch.no_grad():
            draft.fc.weight[:, :hidden].normal_(std=0.3)
    return eagle.FeatureDrafter(draft)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    target = tiny_target()
    root = tmp_path_factory.mktemp("eagle")
    folder = eagle_train.train_eagle(
        target,
        CharTokenizer(),
        name="tiny",
        recipe=TINY,
        text_recipe=TEXT,
        prompts=DISTILL_PROMPTS[:12],
        progress=False,
        folder=root / "draft",
    )
    return target, folder


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("use_cache", [True, False])
def test_output_equals_target_greedy(k, use_cache):
    target = tiny_target()
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    out = speculative_decode(
        target, fresh_drafter(target), ids, max_new_tokens=25, num_speculative_tokens=k, use_cache=use_cache
    )
    assert out.sequences.tolist() == hf_greedy(target, ids, 25).tolist()
    assert out.stats.proposed > 0


def test_eos_inside_a_draft_ends_the_text_like_generate():
    target = tiny_target()
    drafted_eos = 0
    for start in range(4, 40, 5):
        ids = torch.tensor([[start, start + 1, start + 2]])
        expected = hf_greedy(target, ids, 40)
        # The untrained draft is the target's first layer under its head: it agrees now and then, EOS included.
        out = speculative_decode(
            target, fresh_drafter(target, read_features=False), ids, max_new_tokens=40, num_speculative_tokens=4
        )
        assert out.sequences.tolist() == expected.tolist()
        drafted_eos += any(EOS in step.draft[: step.accepted + 1] for step in out.steps)
    assert drafted_eos  # some EOS was drafted and judged, not only emitted by the target


def test_features_kept_are_the_targets_own_and_proposals_match_a_fresh_draft():
    """After decoding, the drafter holds exactly the target's features of the kept text, and every token
    of its cached proposal equals one computed from scratch (no stale cache rows, no off-by-one)."""
    target = tiny_target()
    drafter = fresh_drafter(target)
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    out = speculative_decode(target, drafter, ids, max_new_tokens=20, num_speculative_tokens=3)
    text = out.sequences
    n = text.shape[1] - 1  # the last token was never fed to the target
    with torch.no_grad():
        _, features = eagle.target_features(target, text)
        torch.testing.assert_close(drafter.features[0, :n], features[0, :n], rtol=1e-4, atol=1e-4)
        proposal = drafter.propose(text, 3).tokens.tolist()
        # By hand, no cache: position n - 1 reads (f_{n-1}, last token); each later position reads the
        # feature predicted one position before and the token drafted there.
        draft, feats, tokens, expected = drafter.draft, features[:, :n], text[:, 1:], []
        for _ in range(3):
            predicted = draft(feats, tokens)
            token = int(draft.lm_head(predicted[:, -1:]).argmax(-1))
            expected.append(token)
            feats = torch.cat([feats, predicted[:, -1:]], dim=1)
            tokens = torch.cat([tokens, torch.tensor([[token]])], dim=1)
        assert proposal == expected
        # The draft really reads the features: one position off gives another prediction (so the check
        # above would see a misalignment).
        shifted = draft(torch.cat([features[:, :1], features[:, : n - 1]], dim=1), text[:, 1:])
        assert not torch.allclose(shifted[:, -1], draft(features[:, :n], text[:, 1:])[:, -1], atol=1e-3)


def test_unrolled_steps_see_what_decoding_would_see():
    """`unrolled` (training-time test) gives, for every chain start j and step s, the feature a step-by-step
    pass computes from the true positions 0..j and the chain's own predicted features; a padded batch row
    gets the same as alone."""
    target = tiny_target()
    draft = fresh_drafter(target).draft
    texts = [torch.tensor([5, 9, 14, 2, 30, 7, 11, 4]), torch.tensor([8, 6, 21, 3, 9])]
    with torch.no_grad():
        feats = [eagle.target_features(target, t[None])[1][0] for t in texts]
        width = len(texts[0]) - 1
        batch_feats = torch.zeros(2, width, feats[0].shape[-1])
        batch_tokens = torch.zeros(2, width, dtype=torch.long)
        mask = torch.zeros(2, width, dtype=torch.long)
        for row, (t, f) in enumerate(zip(texts, feats)):
            n = len(t) - 1
            batch_feats[row, :n], batch_tokens[row, :n], mask[row, :n] = f[:n], t[1:], 1
        steps = eagle.unrolled(draft, batch_feats, batch_tokens, mask, 3)
        assert [p.shape[1] for p in steps] == [width, width - 1, width - 2]
        for row, (t, f) in enumerate(zip(texts, feats)):
            n = len(t) - 1
            for j in range(n - 2):
                chain_feats, chain_tokens = f[None, : j + 1], t[None, 1 : j + 2]
                for step in range(3):
                    out = draft(chain_feats, chain_tokens)[:, -1:]
                    torch.testing.assert_close(steps[step][row, j], out[0, 0], rtol=1e-4, atol=1e-4)
                    chain_feats = torch.cat([chain_feats, out], dim=1)
                    chain_tokens = torch.cat([chain_tokens, t[None, j + step + 2 : j + step + 3]], dim=1)


def test_bad_features_are_refused_clearly():
    target = tiny_target()
    drafter = fresh_drafter(target)
    with pytest.raises(ValueError, match="dimensions.*another target"):
        drafter.update(4, torch.zeros(1, 4, 7))
    drafter.update(4, torch.zeros(1, 4, target.config.hidden_size))
    with pytest.raises(ValueError, match="gap"):
        drafter.update(8, torch.zeros(1, 2, target.config.hidden_size))  # positions 6, 7: 4 and 5 missing


def test_feature_drafter_rolls_back_only_in_update():
    target = tiny_target()
    drafter = fresh_drafter(target)
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    drafter.update(5, feature_data.target_features(target, ids)[1][:, :5])
    first = drafter.propose(ids, 3)
    assert first.tokens.numel() == 3 and drafter.true_length == 5
    with pytest.raises(ValueError, match="without update.*update\\(n_kept"):
        drafter.propose(ids, 3)
    drafter.update(5)  # the same text again: the rows read from predicted features go, the proposal repeats
    assert drafter.true_length == 4 and torch.equal(drafter.propose(ids, 3).tokens, first.tokens)
    drafter.update(0)
    assert drafter.features.shape[1] == 0 and cache_length(drafter.cache) == 0


def test_half_precision_target_drafts_without_dtype_errors():
    target = tiny_target().to(torch.bfloat16)
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    out = speculative_decode(target, fresh_drafter(target), ids, max_new_tokens=10, num_speculative_tokens=3)
    assert out.sequences.tolist() == hf_greedy(target, ids, 10).tolist() and out.stats.proposed > 0


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


@pytest.mark.parametrize("model_tokens,k", [(None, 3), (1, 6)])
def test_hybrid_passes_features_on_and_stays_lossless(model_tokens, k):
    target = tiny_target()
    inner = fresh_drafter(target)
    hybrid = HybridDrafter(inner, model_tokens=model_tokens)
    assert hybrid.model is None and hybrid.needs_target_features
    asked = []  # what the feature drafter is asked for, and what it proposes
    propose = inner.propose

    def asking(ids, n, sampler=None):
        proposal = propose(ids, n)
        asked.append((n, proposal.tokens.numel()))
        return proposal

    inner.propose = asking
    ids = torch.tensor([[5, 9, 14, 5, 9, 14, 5, 9]])  # repeats: the lookup answers some rounds
    out = speculative_decode(target, hybrid, ids, max_new_tokens=25, num_speculative_tokens=k)
    assert out.sequences.tolist() == hf_greedy(target, ids, 25).tolist()
    assert asked and max(n for n, _ in asked) == (model_tokens or k) and any(m for _, m in asked)


def test_training_batch_aligns_features_tokens_and_labels():
    # Position j reads (f_j, token j + 1) and learns f_{j+1} and the target's choice at j + 1.
    feature = lambda n: torch.arange(n, dtype=torch.float32).view(n, 1).repeat(1, 2)  # f_j = [j, j]
    cut = torch.tensor([4, 5, 6, 7])  # cut at the length limit: its last label is kept
    ended = torch.tensor([4, 5, EOS])  # ends with EOS: nothing is learnt after it
    data = [(cut, 1), (ended, 1)]
    features = [(feature(4), torch.tensor([10, 11, 12, 13])), (feature(3), torch.tensor([20, 21, 22]))]
    to_subset = torch.arange(30)
    feats, tokens, mask, labels, true_next, has_next = feature_data.training_batch(
        data, features, [0, 1], to_subset, {EOS}
    )
    assert feats[0, :, 0].tolist() == [0, 1, 2] and tokens[0].tolist() == [5, 6, 7] and mask[0].tolist() == [1, 1, 1]
    assert labels[0].tolist() == [11, 12, 13] and true_next[0, :, 0].tolist() == [1, 2, 3]
    assert tokens[1].tolist() == [5, EOS, 0] and mask[1].tolist() == [1, 1, 0]
    assert labels[1].tolist() == [21, -100, -100] and true_next[1, :, 0].tolist() == [1, 2, 0]
    assert has_next[..., 0].tolist() == [[True, True, True], [True, True, False]]


@pytest.mark.slow  # 2000 sampled decodes: half a minute, a quarter of the fast tier's budget
def test_sampling_keeps_the_targets_distribution():
    """The first four sampled tokens (a 3-token vocabulary, so every sequence is counted) against the exact
    joint. The first round has no features yet; the second proposes two sampled tokens at once."""
    vocab = 3
    target = tiny_model("llama", seed=3, layers=2, vocab=vocab)
    drafter = fresh_drafter(target, seed=4)
    prompt = [1, 2, 0]
    sampler = Sampler(1.0)

    @functools.cache
    def probs(text):
        with torch.no_grad():
            return sampler.probs(target(torch.tensor([list(text)])).logits[0, -1]).numpy()

    exact = np.zeros((vocab,) * 4)
    for seq in itertools.product(range(vocab), repeat=4):
        exact[seq] = np.prod([probs(tuple(prompt) + seq[:i])[seq[i]] for i in range(4)])
    counts = np.zeros((vocab,) * 4)
    g = torch.Generator().manual_seed(0)
    two_token_proposals = 0
    for _ in range(2000):
        out = speculative_decode(
            target,
            drafter,
            torch.tensor([prompt]),
            max_new_tokens=4,
            num_speculative_tokens=2,
            temperature=1.0,
            generator=g,
        )
        counts[tuple(out.new_tokens.tolist())] += 1
        two_token_proposals += any(len(step.draft) == 2 for step in out.steps)
    assert two_token_proposals > 1000  # the feature draft really proposed (sampled) two tokens a round
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
    monkeypatch.setattr(training_text, "_generate_data", lambda *a, **k: pytest.fail("the cached text was not reused"))
    again = eagle_train.train_eagle(
        target,
        CharTokenizer(),
        name="tiny",
        recipe=TINY,
        text_recipe=TEXT,
        prompts=DISTILL_PROMPTS[:12],
        progress=False,
        folder=tmp_path / "again",
    )
    first, second = eagle.load_eagle(target, folder).state_dict(), eagle.load_eagle(target, again).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_other_prompts_write_the_text_again(trained, tmp_path):
    target, folder = trained
    text = tmp_path / "text"
    shutil.copytree(folder.with_name("draft-text"), text)
    assert (
        len(
            training_text.target_text(
                target, CharTokenizer(), recipe=TEXT, prompts=DISTILL_PROMPTS[:12], folder=text, progress=False
            )
        )
        == 12
    )  # the same prompts: read back
    again = training_text.target_text(
        target, CharTokenizer(), recipe=TEXT, prompts=DISTILL_PROMPTS[20:22], folder=text, progress=False
    )
    assert len(again) == 2 and training_text.text_meta(text)["key"]["prompts"] == 2


def test_eagle_by_name_loads_the_cached_draft_and_hybrid_wraps_it(trained, monkeypatch):
    from specdec_helpers.models.pairs import ModelPair

    target, folder = trained
    monkeypatch.setattr(eagle_train, "eagle_dir", lambda name: folder)
    pair = ModelPair(target, None, CharTokenizer(), torch.device("cpu"), torch.float32)
    drafter = pair.with_draft("eagle").draft
    assert isinstance(drafter, eagle.FeatureDrafter) and drafter.draft.meta["recipe"]["epochs"] == TINY.epochs
    hybrid = pair.with_draft("hybrid:eagle").draft
    assert isinstance(hybrid, HybridDrafter) and isinstance(hybrid.model_drafter, eagle.FeatureDrafter)
    assert hybrid.model_tokens == eagle.HYBRID_TOKENS  # behind the lookup it drafts what paid (see HYBRID_TOKENS)
    assert isinstance(
        pair.with_draft(hybrid).with_draft("hybrid").draft.model_drafter, eagle.FeatureDrafter
    )  # no nesting


def test_a_hybrid_needs_a_model_or_a_drafter_and_trees_take_feature_drafts():
    from specdec_helpers.core.tree import tree_speculative_decode

    target = tiny_target()
    with pytest.raises(TypeError, match="causal LM or a Drafter"):
        HybridDrafter("eagle")
    ids = torch.tensor(
        [[5, 9, 14]]
    )  # a tree of the feature draft's chains, fed the target's features of the kept branch
    out = tree_speculative_decode(target, HybridDrafter(fresh_drafter(target)), ids, max_new_tokens=12)
    assert torch.equal(out.sequences, hf_greedy(target, ids, 12))


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
    costs = sweep.measure_costs(target, HybridDrafter(drafter), ids, ks=[2], repeats=2)
    assert costs["draft_step_s"] > 0 and costs["c"] == costs["draft_step_s"] / costs["target_step_s"]
    assert methods.draft_label(drafter) == "eagle"
    assert isinstance(methods.build_methods(target, drafter, 2)["hf_assisted"], methods.Skip)
    case = sweep.Case("tiny", "hybrid", target, HybridDrafter(drafter), [("p", ids)])
    assert perf.with_inner_models([case]) == [case]  # no case alone: HF cannot run it either
