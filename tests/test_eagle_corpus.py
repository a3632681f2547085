"""The feature draft trained teacher-forced on existing text: the corpus, its split, the training batch,
the saved fp16 draft and its manifest, lossless decoding with it, and the copy the kit ships."""

import json
import shutil

import pytest
import torch
from tiny_models import VOCAB, hf_greedy, tiny_model

from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.models.drafts import corpus, eagle, eagle_train, feature_data
from specdec_helpers.models.drafts.distill import DistillRecipe
from specdec_helpers.models.drafts.training import subset_labels
from specdec_helpers.models.drafts.training_text import DISTILL_PROMPTS

EOS = 3
SMOLLM2 = "smollm2-135m-instruct-q4_1-v1"


class CorpusTokenizer:
    """Characters as ids, and a chat template that marks the turns: what the corpus asks of a tokenizer."""

    chat_template = "<turns>"
    all_special_ids = [EOS, 1]
    pad_token_id = 1

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [4 + ord(ch) % (VOCAB - 4) for ch in text]}

    def apply_chat_template(
        self, messages, tokenize=True, add_generation_prompt=False, return_tensors=None, return_dict=False
    ):
        text = "".join(f"<{m['role']}>{m['content']}</>" for m in messages) + ("<a>" if add_generation_prompt else "")
        # as text for the corpus; as a short prompt of ids for the target to answer (its own text)
        return text if not tokenize else {"input_ids": torch.tensor([self(text)["input_ids"][:12]])}


def tiny_target():
    return tiny_model("llama", seed=0, layers=3, eos_token_id=EOS)


def test_corpus_is_deterministic_and_its_split_disjoint():
    tokenizer = CorpusTokenizer()
    titles = [title for title, _ in corpus.passages()]
    assert titles == [title for title, _ in corpus.passages()] and len(set(titles)) == len(titles)
    held = [t for t in titles if corpus.is_held_out(t)]
    assert 0.05 < len(held) / len(titles) < 0.15
    train, held_out = corpus.corpus_texts(tokenizer), corpus.corpus_texts(tokenizer, held_out=True)
    assert train == corpus.corpus_texts(tokenizer) and not set(train) & set(held_out)
    chats = [t for t in train if t.startswith("<user>")]
    assert 0.2 < len(chats) / len(train) < 0.8  # partly chat samples, the passage as the assistant's turn
    assert all("</><assistant>" in t for t in chats)
    chunks = corpus.corpus_chunks(tokenizer, max_tokens=64, max_chunks=50)
    assert 40 <= len(chunks) <= 50 and all(8 <= len(c) <= 64 for c in chunks)


def test_training_batch_from_corpus_text_reads_the_targets_features_and_choices():
    target = tiny_target()
    data = feature_data.corpus_data(CorpusTokenizer(), max_chunks=3)
    features = feature_data._feature_data(target, data, 2, progress=False)
    draft = eagle.FeatureDraft(target, torch.arange(VOCAB))
    feats, tokens, mask, labels, true_next, has_next = feature_data.training_batch(
        data, features, [0, 1, 2], subset_labels(draft.lm_head), {EOS}
    )
    ids = data[1][0]
    with torch.no_grad():
        logits, hidden = eagle.target_features(target, ids[None])
    n = len(ids) - 1
    torch.testing.assert_close(feats[1, :n], hidden[0, :n])
    assert tokens[1, :n].tolist() == ids[1:].tolist() and mask[1, :n].all()
    assert labels[1, :n].tolist() == logits[0, 1:].argmax(-1).tolist()  # the target's choices, not the text's
    torch.testing.assert_close(true_next[1, :n], hidden[0, 1:])
    assert has_next[1, :n].all() and not mask[1, n:].any()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    target = tiny_target()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "SPECDEC_CACHE_DIR", str(tmp_path_factory.mktemp("cache"))
        )  # the target's features are cached there
        folder = eagle_train.train_eagle_corpus(
            target,
            CorpusTokenizer(),
            name="tiny",
            recipe=eagle.EagleRecipe(epochs=1, batch_size=4),
            vocab=40,
            max_chunks=8,
            text_recipe=DistillRecipe(max_new_tokens=10, generate_batch=4),
            prompts=DISTILL_PROMPTS[:20],
            progress=False,
            folder=tmp_path_factory.mktemp("c") / "d",
        )
    return target, folder


def test_the_targets_features_are_computed_once_and_read_back_equal(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    target, tokenizer = tiny_target(), CorpusTokenizer()
    data, features = feature_data.corpus_features(target, tokenizer, max_chunks=4, progress=False)
    monkeypatch.setattr(
        feature_data, "_feature_data", lambda *a, **k: pytest.fail("computed again instead of read back")
    )
    again_data, again = feature_data.corpus_features(target, tokenizer, max_chunks=4, progress=False)
    assert [ids.tolist() for ids, _ in again_data] == [ids.tolist() for ids, _ in data]
    for (f, c), (g, d) in zip(features, again):
        assert torch.equal(g, f)  # stored in fp16, and the first run already returns them rounded
        assert torch.equal(c, d)
    with pytest.raises(pytest.fail.Exception, match="computed again"):  # another target is not served the cached file
        feature_data.corpus_features(
            tiny_model("llama", seed=1, layers=3, eos_token_id=EOS), tokenizer, max_chunks=4, progress=False
        )


def test_corpus_draft_is_saved_in_fp16_with_a_manifest_and_its_held_out_agreement(trained):
    _, folder = trained
    from safetensors.torch import load_file

    state = load_file(folder / "draft.safetensors")
    assert "lm_head.linear.weight" not in state  # the target's rows: not saved
    assert {v.dtype for k, v in state.items() if k != "lm_head.token_ids"} == {torch.float16}
    meta = json.loads((folder / "draft.json").read_text())
    for split in ("held_out", "held_out_own_text"):  # documentation, and the target's own answers (2 of 20 prompts)
        assert meta[split]["positions"] > 0
    assert meta["own_text"]["tokens_written"] > 0
    rates = meta["held_out"]["step_rates"]
    assert len(rates) == 3 and all(0 <= r <= 1 for r in rates) and meta["held_out"]["positions"] > 0
    assert meta["held_out"]["accepted_k3"] == pytest.approx(
        rates[0] + rates[0] * rates[1] + rates[0] * rates[1] * rates[2], abs=1e-3
    )
    assert meta["corpus"]["sha256"] and meta["vocab_subset"] <= 40 + 2
    assert eagle.manifest_problems(folder) == []


def test_manifest_names_a_changed_file(trained, tmp_path):
    copy = shutil.copytree(trained[1], tmp_path / "copy")
    (copy / "draft.json").write_text("{}")
    assert eagle.manifest_problems(copy) == ["draft.json"]


@pytest.mark.parametrize("k", [1, 3])
def test_decoding_with_the_corpus_draft_equals_greedy(trained, k):
    target, folder = trained
    drafter = eagle.FeatureDrafter(eagle.load_eagle(target, folder))
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    out = speculative_decode(target, drafter, ids, max_new_tokens=25, num_speculative_tokens=k)
    assert out.sequences.tolist() == hf_greedy(target, ids, 25).tolist()
    assert out.stats.proposed > 0


def test_the_shipped_draft_matches_its_manifest():
    folder = eagle.shipped_dir(SMOLLM2)
    assert eagle_train.is_saved(folder), f"no shipped feature draft in {folder}"
    assert eagle.manifest_problems(folder) == []
    meta = json.loads((folder / "draft.json").read_text())
    assert meta["target"]["hidden_size"] == 576 and meta["held_out"]["positions"] > 0


@pytest.mark.slow  # loads SmolLM2
def test_smollm2_with_the_shipped_draft_equals_its_greedy():
    """At k = 1 and k = 3, one load of the pair and one greedy reference for both."""
    from specdec_helpers.models.pairs import load_pair

    pair = load_pair("smollm2-135m", draft="eagle")
    assert pair.draft.draft.meta["corpus"]  # the shipped draft, not one trained on first use
    ids = pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a haiku about rivers."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    want = hf_greedy(pair.target, ids, 40).tolist()
    for k in (1, 3):
        out = speculative_decode(pair.target, pair.draft, ids, max_new_tokens=40, num_speculative_tokens=k)
        assert out.sequences.tolist() == want, k
