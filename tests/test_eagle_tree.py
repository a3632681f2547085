"""The feature draft's greedy tree (EAGLE-2 style, `FeatureDrafter.propose_tree`): the tree it grows equals one
grown by plain chain passes of the same draft, and tree decoding with it (alone or behind the n-gram lookup) stays
equal to the target's greedy decoding, EOS and budgets included."""

from __future__ import annotations

import pytest
import torch
from tiny_models import hf_greedy, tiny_model

from specdec_helpers.core.cache import crop_cache, new_cache
from specdec_helpers.core.drafters import HybridDrafter, PromptLookupDrafter
from specdec_helpers.core.tree import tree_speculative_decode
from specdec_helpers.models.drafts import eagle
from specdec_helpers.models.drafts.feature_data import target_features

EOS = 3


def tiny_target(seed=0):
    return tiny_model("llama", seed=seed, layers=3, eos_token_id=EOS)


def drafter_for(target, seed=1, subset=None):
    """An untrained feature drafter that reads the features (random feature weights), so a wrong feature, position
    or mask changes what it drafts. ``subset``: the head's token ids (default: the whole vocabulary)."""
    ids = torch.arange(target.config.vocab_size) if subset is None else torch.tensor(subset)
    draft = eagle.FeatureDraft(target, ids)
    torch.manual_seed(seed)
    with torch.no_grad():
        draft.fc.weight[:, : draft.fc.in_features // 2].normal_(std=0.3)
    return eagle.FeatureDrafter(draft)


def primed(target, drafter, ids):
    """The drafter as the decode loop leaves it after the prompt's pass: the target's features of the prompt."""
    drafter.update(0)
    drafter.update(ids.shape[1], target_features(target, ids)[1])
    return drafter


def reference_tree(drafter, ids, widths):
    """The tree grown by brute force: every node's draft logits from a plain chain pass along its branch (its own
    cache, no tree mask), the ``widths[d]`` best paths by total log-probability kept at each depth."""
    draft, length = drafter.draft, ids.shape[1]
    cache = new_cache(draft.body)
    out = draft(drafter.features[:, : length - 1], ids[:, 1:], cache)[:, -1:]
    level = [((), 0.0, out)]  # (branch tokens, score, the draft's output feature at the branch's end)
    found = []
    for width in widths:
        candidates = []
        for branch, score, feature in level:
            logp = torch.log_softmax(draft.lm_head(feature[0, -1]).float(), -1)
            top = logp.topk(min(width, logp.numel()))
            candidates += [
                (branch + (int(t),), score + float(v), feature)
                for v, t in zip(top.values, top.indices)
                if v > float("-inf")
            ]
        candidates.sort(key=lambda c: -c[1])
        level = []
        for branch, score, _ in candidates[:width]:
            found.append(branch)
            crop_cache(cache, length - 1)  # a chain along the branch, from the text's cache
            feature = out
            for token in branch:
                feature = draft(feature[:, -1:], torch.tensor([[token]]), cache)
            level.append((branch, score, feature))
    return found


def branches(tree):
    def branch(i):
        return (branch(tree.parents[i]) if tree.parents[i] >= 0 else ()) + (tree.tokens[i],)

    return [branch(i) for i in range(len(tree))]


@pytest.mark.parametrize("widths", [(1, 1, 1), (3,), (3, 2), (2, 3, 2, 1), (4, 4, 4)])
@pytest.mark.parametrize("seed, prompt", [(1, [5, 9, 14, 2, 30, 7, 11]), (0, [8, 1, 40, 22, 17])])
def test_the_tree_is_the_one_chain_passes_would_grow(widths, seed, prompt):
    target = tiny_target()
    ids = torch.tensor([prompt])
    drafter = primed(target, drafter_for(target, seed), ids)
    with torch.inference_mode():
        tree, passes = drafter.propose_tree(ids, widths)
        want = reference_tree(drafter, ids, widths)
    assert branches(tree) == want
    if (
        widths == (4, 4, 4) and seed == 0
    ):  # nodes of depth 2 under different parents: each reads its own parent's feature
        assert len({tree.parents[i] for i in range(len(tree)) if tree.depths[i] == 2}) > 1
    assert [tree.depths.count(d + 1) for d in range(len(widths))] == list(widths)  # the shape asked for
    assert passes == len(widths)  # the text, then one masked pass per level but the last


def test_a_chain_shaped_tree_is_the_greedy_proposal_and_the_next_round_starts_clean():
    target = tiny_target()
    ids = torch.tensor([[5, 9, 14, 2, 30, 7, 11]])
    drafter = primed(target, drafter_for(target), ids)
    chain = drafter.propose(ids, 4).tokens.tolist()
    drafter.update(ids.shape[1] - 1)  # back to before the last token, so it is fed again
    tree, _ = drafter.propose_tree(ids, (1, 1, 1, 1))
    assert tree.tokens == chain and tree.parents == [-1, 0, 1, 2]
    drafter.update(ids.shape[1] - 1)  # the tree's nodes sat in the draft's cache: the next proposal must not see them
    assert drafter.propose(ids, 4).tokens.tolist() == chain


def test_a_narrow_head_never_proposes_tokens_outside_it():
    target = tiny_target()
    ids = torch.tensor([[5, 9, 14, 2, 30, 7, 11]])
    drafter = primed(target, drafter_for(target, subset=[4, 8]), ids)
    tree, _ = drafter.propose_tree(ids, (3, 5))
    assert set(tree.tokens) <= {4, 8} and tree.depths.count(1) == 2 and tree.depths.count(2) == 4


def test_nothing_is_proposed_before_the_target_has_spoken():
    target = tiny_target()
    drafter = drafter_for(target)
    drafter.update(0)
    tree, passes = drafter.propose_tree(torch.tensor([[5, 9, 14]]), (3, 2))
    assert len(tree) == 0 and passes == 0


@pytest.mark.parametrize("shape", [(1,), (3, 1, 1), (4, 2, 2, 1), (2, 2, 2, 2, 2, 2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("hybrid", [False, True])
def test_tree_decoding_equals_target_greedy(shape, seed, hybrid):
    target = tiny_target()
    ids = torch.randint(4, 60, (1, 8), generator=torch.Generator().manual_seed(seed))
    ids = torch.cat([ids, ids[:, :3]], dim=1)  # a repeat: the lookup has something to propose
    drafter = drafter_for(target, seed=seed)
    draft = HybridDrafter(drafter, min_ngram=1) if hybrid else drafter
    out = tree_speculative_decode(target, draft, ids, max_new_tokens=30, tree=shape, lookup_tokens=5)
    assert torch.equal(out.sequences, hf_greedy(target, ids, 30))
    assert out.stats.proposed > 0 and out.stats.draft_calls > 0


def test_the_lookup_branch_joins_the_feature_tree():
    target = tiny_target()
    ids = torch.tensor([[5, 9, 14, 2, 30, 7, 5, 9]])  # "5 9" was followed by "14 2 30"
    drafter = drafter_for(target)
    out = tree_speculative_decode(
        target, HybridDrafter(drafter, min_ngram=2), ids, max_new_tokens=12, tree=(2, 1), lookup_tokens=3
    )
    assert torch.equal(out.sequences, hf_greedy(target, ids, 12))
    first = out.steps[0].tree  # round 1: no features yet, so the lookup's branch alone
    assert first.tokens == [14, 2, 30] and first.parents == [-1, 0, 1]
    for step in out.steps[1:]:  # later rounds: the feature tree (3 nodes) plus any lookup branch
        context = torch.cat([ids, torch.tensor([sum((s.emitted for s in out.steps[: out.steps.index(step)]), [])])], 1)
        lookup = PromptLookupDrafter(3, 2, grow_with_match=True).propose(context, 3).tokens.tolist()
        assert step.tree.depths.count(1) >= min(2, len(step.tree))
        if lookup:
            assert tuple(lookup) in branches(step.tree)


def test_eos_ends_the_text_inside_a_tree():
    target = tiny_target()
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    reference = hf_greedy(target, ids, 40)
    new = reference[0, ids.shape[1] :].tolist()
    eos = new[len(new) // 2]  # a token the target really writes mid-way: decoding must stop right after it
    out = tree_speculative_decode(target, drafter_for(target), ids, max_new_tokens=40, tree=(3, 2, 1), eos_token_id=eos)
    want = new[: new.index(eos) + 1]
    assert out.sequences[0, ids.shape[1] :].tolist() == want


def test_sampling_with_a_tree_drafter_still_drafts_chains():
    target = tiny_target()
    ids = torch.tensor([[5, 9, 14, 2, 30, 7]])
    out = tree_speculative_decode(
        target,
        drafter_for(target),
        ids,
        max_new_tokens=10,
        tree=(3, 2),
        temperature=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert out.sequences.shape[1] == ids.shape[1] + 10 and out.stats.proposed > 0


def test_perf_prints_tree_rows_beside_the_chains(tmp_path, capsys):
    import json
    from types import SimpleNamespace

    from specdec_helpers import cli
    from specdec_helpers.measure import perf

    target = tiny_target()
    drafts = {
        "eagle": lambda: drafter_for(target),
        "hybrid:eagle": lambda: HybridDrafter(drafter_for(target)),
        "prompt-lookup": PromptLookupDrafter,
    }
    fake = SimpleNamespace(
        target=target,
        draft=PromptLookupDrafter(2, 2, grow_with_match=True),
        preset="tiny",
        device=torch.device("cpu"),
        dtype=torch.float32,
        encode=lambda text: torch.tensor([[len(text) % 60 + 4, 9, 14, 2, 9, 14]]),
        with_draft=lambda spec, progress=False: SimpleNamespace(draft=drafts[spec]()),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("specdec_helpers.models.pairs.load_pair", lambda *args, **kwargs: fake)
        assert (
            cli.perf(
                [
                    "--preset",
                    "tiny",
                    "--k",
                    "3",
                    "--max-new-tokens",
                    "8",
                    "--repeats",
                    "1",
                    "--warmup",
                    "0",
                    "--draft",
                    "default,tree:eagle,tree:2x1:hybrid:eagle",
                    "--prompts",
                    "one",
                    "two",
                    "--out",
                    str(tmp_path),
                ]
            )
            == 0
        )
    printed = capsys.readouterr().out
    shape = "x".join(map(str, perf.FEATURE_TREE))
    for label in (f"tree:{shape}:eagle", "tree:2x1:hybrid:eagle", "vs best HF"):
        assert label in printed
    saved = json.loads((tmp_path / "results" / "perf.json").read_text())
    means = {r["drafter"]: r for r in saved["ratios"] if r["prompt"].startswith("geometric mean")}
    assert list(means) == ["prompt-lookup:2", f"tree:{shape}:eagle", "tree:2x1:hybrid:eagle"]
    for row in means.values():
        assert row["identical"] and row["vs_greedy"] > 0 and row["vs_best_hf"] > 0
    trees = [r for r in saved["runs"] if r["drafter"].startswith("tree:")]
    assert all(r["methods"]["spec_cached"]["stats"]["proposed"] > 0 for r in trees)
    assert all("skipped" in r["methods"]["hf_assisted"] for r in trees)  # HF cannot decode trees
    assert len(saved["profiles"]) == 1  # the chain's; the profile reads the chain loop's phases


def test_tree_specs_name_a_shape_and_a_draft():
    from specdec_helpers.measure import perf

    assert perf.tree_spec("tree:eagle") == (perf.FEATURE_TREE, "eagle")
    assert perf.tree_spec("tree:4x2x1:hybrid:eagle") == ((4, 2, 1), "hybrid:eagle")
    assert perf.tree_spec("hybrid:eagle") == (None, "hybrid:eagle")
    with pytest.raises(ValueError, match="names no draft"):
        perf.tree_spec("tree:3x1")
