"""The distilled draft: subset head, truncated copy, training, cache round trip, and losslessness."""

import json

import pytest
import torch
from tiny_models import VOCAB, hf_greedy, tiny_model

from specdec_helpers.models.drafts import distill
from specdec_helpers.measure.sweep import EXTRA_PROMPTS, PA3_PROMPTS
from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.models.drafts.distill import DistillRecipe, truncated_copy
from specdec_helpers.models.drafts.training import VocabSubsetHead
from specdec_helpers.models.drafts.training_text import DISTILL_PROMPTS

EOS = 3


class CharTokenizer:
    """Just what distillation asks of a tokenizer: a chat template, special ids, a pad id."""

    pad_token_id = 1
    all_special_ids = [EOS, 1]

    def apply_chat_template(self, messages, add_generation_prompt, return_tensors, return_dict):
        text = messages[0]["content"]
        ids = [2] + [4 + ord(ch) % (VOCAB - 4) for ch in text[:12]]
        return {"input_ids": torch.tensor([ids])}


def tiny_target(seed=0):
    return tiny_model("llama", seed=seed, layers=3, eos_token_id=EOS)


TINY = DistillRecipe(layers=(0,), max_new_tokens=10, generate_batch=4, epochs=3, batch_size=4, lr=3e-3)


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    target = tiny_target()
    folder = distill.distill_draft(
        target,
        CharTokenizer(),
        name="tiny",
        recipe=TINY,
        prompts=DISTILL_PROMPTS[:12],
        progress=False,
        folder=tmp_path_factory.mktemp("d") / "draft",
    )
    return target, folder


def test_subset_head_gives_full_width_logits_and_never_other_tokens():
    weight = torch.randn(VOCAB, 8)
    head = VocabSubsetHead(weight, torch.tensor([5, 9, 30]), VOCAB)
    hidden = torch.randn(2, 4, 8)
    logits = head(hidden)
    assert logits.shape == (2, 4, VOCAB)
    assert set(logits.argmax(-1).flatten().tolist()) <= {5, 9, 30}
    torch.testing.assert_close(logits[..., [5, 9, 30]], hidden @ weight[[5, 9, 30]].T)
    assert torch.isneginf(logits[..., 0]).all()


@pytest.mark.parametrize("ids", [[], [VOCAB], [-1], [[1, 2]]])
def test_subset_head_rejects_bad_ids(ids):
    with pytest.raises(ValueError, match="token_ids"):
        VocabSubsetHead(torch.randn(VOCAB, 8), torch.tensor(ids, dtype=torch.long), VOCAB)


def test_truncated_copy_shares_embeddings_and_copies_chosen_layers():
    target = tiny_target()
    draft = truncated_copy(target, (0, 2), torch.arange(VOCAB))
    assert draft.model.embed_tokens is target.model.embed_tokens
    assert len(draft.model.layers) == 2
    for mine, theirs in zip(draft.model.layers, (target.model.layers[0], target.model.layers[2])):
        for (name, a), (_, b) in zip(mine.state_dict().items(), theirs.state_dict().items()):
            assert torch.equal(a, b), name
        assert mine.mlp.up_proj.weight.data_ptr() != theirs.mlp.up_proj.weight.data_ptr()  # copies, not shared


def test_truncated_copy_explains_what_it_needs():
    with pytest.raises(TypeError, match="LLaMA-style"):
        truncated_copy(tiny_model("gpt2"), (0,), torch.arange(VOCAB))
    with pytest.raises(ValueError, match="layers must be indices"):
        truncated_copy(tiny_target(), (5,), torch.arange(VOCAB))


def test_training_lowers_the_loss_and_saves_what_it_did(distilled):
    _, folder = distilled
    meta = json.loads((folder / "draft.json").read_text())
    losses = meta["epoch_losses"]
    assert len(losses) == TINY.epochs and losses[-1] < losses[0]
    assert meta["prompts"] == 12 and meta["tokens_written"] > 0 and meta["vocab_subset"] <= VOCAB


def test_reloaded_draft_is_lossless_and_proposes_only_its_subset(distilled):
    target, folder = distilled
    draft = distill.load_distilled(target, folder)
    subset = set(draft.lm_head.token_ids.tolist())
    for seed in range(3):
        ids = torch.randint(4, VOCAB, (1, 6), generator=torch.Generator().manual_seed(seed))
        out = speculative_decode(target, draft, ids, max_new_tokens=15, num_speculative_tokens=3)
        assert torch.equal(out.sequences, hf_greedy(target, ids, 15))
        assert all(set(step.draft) <= subset for step in out.steps)


def test_same_recipe_same_draft(distilled, tmp_path):
    target, folder = distilled
    again = distill.distill_draft(
        target,
        CharTokenizer(),
        name="tiny",
        recipe=TINY,
        prompts=DISTILL_PROMPTS[:12],
        progress=False,
        folder=tmp_path / "again",
    )
    first = distill.load_distilled(target, folder).state_dict()
    second = distill.load_distilled(target, again).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_load_refuses_a_draft_of_another_target(distilled):
    _, folder = distilled
    for other in (tiny_model("llama", layers=3, vocab=VOCAB * 2), tiny_target(seed=1)):
        with pytest.raises(ValueError, match="distilled draft .* trained from another target.*--force"):
            distill.load_distilled(other, folder)


def test_training_prompts_are_not_the_benchmark_prompts():
    benchmark = [p.lower() for p in PA3_PROMPTS + EXTRA_PROMPTS]
    assert len(set(DISTILL_PROMPTS)) == len(DISTILL_PROMPTS) >= 600
    for prompt in DISTILL_PROMPTS:
        assert prompt.lower() not in benchmark
    for subject in ("robot", "emotion", "artificial intelligence", "birthday", "hash table", "days of the week"):
        assert not any(subject in p.lower() for p in DISTILL_PROMPTS), subject
