"""Tree speculation with sampling is lossless: its tokens follow the target's own (warped) distribution.

Two levels, both with fixed seeds and the chi-square + total-variation check of `test_sampling`:

- one tree node (`accept_at_node` on drawn children, thousands of times, microseconds each): the token
  it emits must follow ``p``, for both rules, 1-4 children, with an n-gram (one-hot) draft mixed in;
- whole `tree_speculative_decode` runs on a tiny random model with a 6-token vocabulary: the JOINT
  distribution of the first new tokens against the exact one enumerated from the target's warped
  probabilities, for several tree shapes, settings and drafts (model, hybrid, feature draft).

Deliberately wrong rules must FAIL the very same checks: accepting with ``p`` instead of ``p / q``, a
residual left unnormalised, children drawn without replacement but verified as if drawn with
(``q`` never updated), and the reverse.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from test_sampling import V, assert_fits, exact_joint, fit, random_table
from tiny_models import hf_greedy, perturbed_copy, tiny_model

from specdec_helpers.core import tree as tree_module
from specdec_helpers.core import tree_sampling
from specdec_helpers.core.drafters import HybridDrafter, ModelDrafter
from specdec_helpers.core.sampling import Sampler, residual_distribution
from specdec_helpers.core.tree import tree_speculative_decode
from specdec_helpers.core.tree_sampling import accept_at_node, draw_children


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- wrong rules (controls)


def accept_with_p(p, draws, tokens, rule, sampler, residual=residual_distribution):
    """WRONG: accept a child with probability p(x) instead of min(1, p(x) / q(x))."""
    for node, q in draws:
        x = tokens[node]
        if q is None:
            q = torch.nn.functional.one_hot(torch.tensor(x), p.shape[-1]).to(p.dtype)
        if float(sampler.uniform(1, p.device)) < float(p[x]):
            return node, x
        p = residual(p, q)
    return -1, int(sampler.sample(p.unsqueeze(0)))


def unnormalised(p, q):
    """WRONG: the residual max(p - q, 0) without dividing by its total (kept from reaching all zeros)."""
    residual = (p - q).clamp_min(0)
    return residual if residual.sum() > 0 else p


def node_run(
    draw_rule,
    verify_rule,
    children,
    setting,
    runs=3000,
    seed=0,
    draft="far",
    lookup=None,
    accept=accept_at_node,
    residual=residual_distribution,
):
    """Distribution of the token one tree node emits: ``children`` drawn from ``q`` by ``draw_rule``
    (after a deterministic n-gram child ``lookup``, if given), verified by ``verify_rule``."""
    temperature, top_k, top_p = setting
    sampler = Sampler(temperature, top_k, top_p, generator=torch.Generator().manual_seed(seed))
    target_logits = random_table(seed + 1)[0]
    if draft == "close":
        draft_logits = target_logits + random_table(seed + 2)[0] / 2
    elif draft == "peaked":  # a confident draft: removing its first draw changes q most
        draft_logits = random_table(seed + 3)[0] * 3
    else:
        draft_logits = random_table(seed + 3)[0]
    p, q = sampler.probs(target_logits[None])[0], sampler.probs(draft_logits[None])[0]
    counts = np.zeros(V)
    for _ in range(runs):
        tokens, draws = [], []
        if lookup is not None:
            tokens.append(lookup)
            draws.append((0, None))
        for x in draw_children(q, children, draw_rule, sampler):
            tokens.append(x)
            draws.append((len(tokens) - 1, q))
        counts[accept(p, draws, tokens, verify_rule, sampler, residual)[1]] += 1
    return fit(counts, p.numpy())


slow = pytest.mark.slow
NODE_CASES = [  # rule, children, (temperature, top_k, top_p), draft, n-gram child
    pytest.param("specinfer", 1, (1.0, None, None), "far", None, marks=slow),
    pytest.param("specinfer", 2, (1.0, None, None), "peaked", None, marks=slow),
    pytest.param("specinfer", 3, (0.7, 4, None), "close", None, marks=slow),
    ("specinfer", 4, (1.3, None, 0.9), "far", 2),
    pytest.param("sequoia", 1, (1.0, None, None), "far", None, marks=slow),
    pytest.param("sequoia", 3, (1.0, None, None), "peaked", None, marks=slow),
    pytest.param("sequoia", 3, (0.7, 4, None), "close", None, marks=slow),
    ("sequoia", 4, (1.3, None, 0.9), "far", 2),
    pytest.param("sequoia", 5, (1.0, 3, None), "far", None, marks=slow),  # more asked than top-k leaves: 3 drawn
]


@pytest.mark.parametrize("rule,children,setting,draft,lookup", NODE_CASES)
def test_one_node_emits_the_target_distribution(rule, children, setting, draft, lookup):
    result = node_run(rule, rule, children, setting, runs=2000, draft=draft, lookup=lookup)
    assert_fits(result, f"{rule} {children} {setting}")


@pytest.mark.parametrize(
    "label,draw_rule,verify_rule,kwargs",
    [
        ("accept with p, not p/q", "specinfer", "specinfer", dict(accept=accept_with_p)),
        pytest.param("accept with p, not p/q", "sequoia", "sequoia", dict(accept=accept_with_p), marks=slow),
        pytest.param("residual not renormalised", "specinfer", "specinfer", dict(residual=unnormalised), marks=slow),
        ("residual not renormalised", "sequoia", "sequoia", dict(residual=unnormalised)),
        # A confident draft: without replacement its second and third draws differ most from q.
        ("drawn without replacement, q not updated", "sequoia", "specinfer", dict(seed=2, draft="peaked")),
        ("drawn with replacement, q updated", "specinfer", "sequoia", dict(seed=2, draft="peaked")),
    ],
)
def test_wrong_node_rules_fail_the_same_check(label, draw_rule, verify_rule, kwargs):
    wrong = node_run(draw_rule, verify_rule, 3, (1.0, None, None), runs=2000, **kwargs)
    assert wrong["pvalue"] < 1e-6 and wrong["tv"] > wrong["tv_bound"], (label, wrong)


def test_residual_distribution():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.2, 0.6, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]])
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([[1.0, 0, 0, 0], [0.25, 0.25, 0.25, 0.25]]))


def test_sequoia_draws_never_repeat_and_specinfer_may():
    sampler = Sampler(1.0, generator=torch.Generator().manual_seed(0))
    q = torch.tensor([0.7, 0.2, 0.1, 0.0])
    for _ in range(50):
        drawn = draw_children(q, 4, "sequoia", sampler)
        assert sorted(drawn) == [0, 1, 2]  # the whole support, each once: a 0-probability token never
    assert any(len(set(draw_children(q, 3, "specinfer", sampler))) < 3 for _ in range(50))


# ----------------------------------------------------------------------------- whole decodes: joint of the first tokens

_MODELS = {}


def models():
    """Target and two drafts over a 6-token vocabulary (1 layer: each pass is cheap)."""
    if not _MODELS:
        target = tiny_model("llama", vocab=V, layers=1).requires_grad_(False)
        _MODELS.update(
            target=target, close=perturbed_copy(target, scale=0.5), far=tiny_model("llama", seed=3, vocab=V, layers=1)
        )
    return _MODELS


def feature_drafter(target):
    from specdec_helpers.models.drafts import eagle

    draft = eagle.FeatureDraft(target, torch.arange(V))
    torch.manual_seed(1)
    with torch.no_grad():  # an untrained draft that reads the features: what it drafts depends on them
        draft.fc.weight[:, : draft.fc.in_features // 2].normal_(std=0.3)
    return eagle.FeatureDrafter(draft)


def make_draft(kind):
    m = models()
    if kind in ("close", "far"):
        return m[kind]
    if kind == "hybrid":
        return HybridDrafter(ModelDrafter(m["far"]), min_ngram=1)
    if kind == "feature":
        return feature_drafter(m["target"])
    if kind == "hybrid-feature":
        return HybridDrafter(feature_drafter(m["target"]), min_ngram=1)
    raise ValueError(kind)


PROMPT = [1, 2, 3, 1, 2]  # "3" follows "1 2" earlier: the n-gram lookup has something to propose


@functools.cache
def target_joint(setting, steps):
    """The exact joint of the target's first ``steps`` tokens after `PROMPT` (`exact_joint`: every sequence, about
    0.4 s), once per setting: eight of the decode checks below share (1.0, None, None)."""
    return exact_joint(models()["target"], PROMPT, Sampler(*setting), steps)


def decode_run(rule, shape, setting, draft_kind, runs, steps=3, seed=0):
    """Counts of the first ``steps`` new tokens over ``runs`` decodes, and the exact joint."""
    temperature, top_k, top_p = setting
    target, draft = models()["target"], make_draft(draft_kind)
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros((V,) * steps)
    accepted = 0
    for _ in range(runs):
        out = tree_speculative_decode(
            target,
            draft,
            torch.tensor([PROMPT]),
            max_new_tokens=steps,
            tree=shape,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            generator=g,
            tree_sampling=rule,
        )
        counts[tuple(out.new_tokens.tolist())] += 1
        accepted += out.stats.accepted
    return fit(counts.ravel(), target_joint(setting, steps).ravel()), accepted


@pytest.mark.parametrize("rule", [pytest.param("specinfer", marks=slow), "sequoia"])
def test_first_two_tokens_follow_target(rule):
    result, accepted = decode_run(rule, (3, 2), (1.0, None, None), "close", runs=300, steps=2)
    assert_fits(result, rule)
    assert accepted > 0  # the draft's children were really tried, and some kept


DECODE_CASES = [  # rule, tree, (temperature, top_k, top_p), draft
    ("specinfer", (3, 2, 1), (1.0, None, None), "far"),
    ("sequoia", (3, 2, 1), (1.0, None, None), "far"),
    ("specinfer", (2, 2), (0.7, 3, None), "close"),
    ("sequoia", (2, 4, 2), (1.3, None, 0.9), "close"),
    ("specinfer", (1, 1, 1), (1.0, None, 0.8), "far"),  # a chain is a tree too
    ("sequoia", (4,), (0.8, 4, 0.95), "far"),
    ("specinfer", (3, 2, 1), (1.0, None, None), "hybrid"),
    ("sequoia", (2, 2, 1), (0.9, None, None), "hybrid"),
    ("specinfer", (3, 1, 1), (1.0, None, None), "feature"),
    ("sequoia", (3, 1, 1), (1.2, 4, None), "feature"),
    ("specinfer", (2, 1), (1.0, None, None), "hybrid-feature"),
]


@pytest.mark.slow
@pytest.mark.parametrize("rule,shape,setting,draft_kind", DECODE_CASES)
def test_first_three_tokens_follow_target(rule, shape, setting, draft_kind):
    result, accepted = decode_run(rule, shape, setting, draft_kind, runs=800)
    assert_fits(result, f"{rule} {shape} {setting} {draft_kind}")
    assert accepted > 0


def _force_rule(rule):
    real = tree_sampling.sampled_walk
    return lambda sampled, logits, _rule, sampler: real(sampled, logits, rule, sampler)


@pytest.mark.slow
@pytest.mark.parametrize(
    "label,rule,patch,runs",
    [
        # 1500 decodes: at 800 these two were rejected (p < 1e-4) for 5 of 8 seeds, at 600 for 1 or 2
        ("accept with p, not p/q", "specinfer", ("accept_at_node", accept_with_p), 1500),
        ("residual not renormalised", "sequoia", ("residual_distribution", unnormalised), 1500),
        # 400 decodes: p = 1e-18 here (4e-84 at 1500), at most 4e-16 over seeds 0-15, TV above its bound too
        ("drawn without replacement, q not updated", "sequoia", ("sampled_walk", _force_rule("specinfer")), 400),
    ],
)
def test_wrong_rules_fail_the_joint_check(monkeypatch, label, rule, patch, runs):
    name, wrong = patch
    if name == "sampled_walk":
        monkeypatch.setattr(tree_module, name, wrong)
    elif name == "residual_distribution":
        real = tree_sampling.accept_at_node
        monkeypatch.setattr(tree_sampling, "accept_at_node", lambda *args: real(*args, residual=wrong))
    else:
        monkeypatch.setattr(tree_sampling, name, wrong)
    result, _ = decode_run(rule, (3, 2, 1), (1.0, None, None), "far", runs=runs)
    assert result["pvalue"] < 1e-4, (label, result)


# ----------------------------------------------------------------------------- greedy, seeds, errors


@pytest.mark.parametrize(
    "family,rule",
    [
        ("gpt_neox", "specinfer"),
        ("llama", "sequoia"),
        pytest.param("gpt2", "sequoia", marks=slow),
        pytest.param("opt", "specinfer", marks=slow),
    ],
)
def test_tiny_temperature_equals_greedy(family, rule):
    target = tiny_model(family)
    draft = perturbed_copy(target, scale=0.3)
    ids = torch.tensor([[3, 17, 42, 5]])
    out = tree_speculative_decode(
        target,
        draft,
        ids,
        max_new_tokens=16,
        tree=(3, 2, 1),
        temperature=1e-6,
        tree_sampling=rule,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(out.sequences, hf_greedy(target, ids, 16)), family


@pytest.mark.parametrize("kind", ["feature", "hybrid-feature"])
def test_feature_drafts_in_trees_keep_greedy_output(kind):
    target = models()["target"]
    draft = make_draft(kind)
    ids = torch.tensor([PROMPT])
    out = tree_speculative_decode(target, draft, ids, max_new_tokens=20, tree=(2, 2, 1))
    assert torch.equal(out.sequences, hf_greedy(target, ids, 20))
    assert out.stats.proposed > 0


def test_same_seed_same_output_and_stats_add_up():
    target, draft = models()["target"], models()["close"]

    def run(seed, rule="sequoia"):
        return tree_speculative_decode(
            target,
            draft,
            torch.tensor([PROMPT]),
            max_new_tokens=30,
            tree=(3, 2, 1),
            temperature=1.0,
            tree_sampling=rule,
            generator=torch.Generator().manual_seed(seed),
        )

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a.sequences, b.sequences) and a.stats.accepted_per_step == b.stats.accepted_per_step
    assert not torch.equal(a.sequences, c.sequences)
    for out in (a, run(1, "specinfer")):
        assert out.stats.new_tokens == 30 == sum(len(s.emitted) for s in out.steps)
        assert out.stats.accepted == sum(s.accepted for s in out.steps) <= out.stats.proposed
        for step in out.steps:  # the kept branch is a branch of the round's tree
            assert step.emitted[: step.accepted] == step.draft[: step.accepted]


# ----------------------------------------------------------------------------- notebook 07's exercise check


def swapped(p, q):
    """WRONG: what q has and p lacks."""
    r = (q - p).clamp_min(0)
    return r / r.sum()


def unclamped(p, q):
    """WRONG: p - q without clamping: negative 'probabilities'."""
    return (p - q) / (p - q).sum()


@pytest.mark.parametrize(
    "wrong",
    [
        unnormalised,
        pytest.param(swapped, marks=slow),
        pytest.param(unclamped, marks=slow),
        pytest.param(lambda p, q: p, marks=slow),
    ],
)
def test_notebook_check_fails_a_wrong_residual(wrong):
    from specdec_helpers.present.tree_lesson import check_tree_residual

    ok, message = check_tree_residual(wrong)
    assert not ok and "p = " in message, message


@pytest.mark.slow
def test_notebook_check_passes_the_right_residual_and_says_unfinished():
    from specdec_helpers.present import notebook_help
    from specdec_helpers.present.tree_lesson import check_tree_residual

    ok, message = check_tree_residual(residual_distribution)
    assert ok, message

    def unfinished(p, q):
        raise NotImplementedError

    with pytest.raises(notebook_help.CheckFailed, match="Not done yet"):
        notebook_help.check(lambda: check_tree_residual(unfinished)[0], "fine")


def test_sampling_benchmark_rows(capsys):
    from specdec_helpers.measure.tree_vs_chain import compare_tree_chain_sampling

    target, draft = models()["target"], models()["close"]
    rows = compare_tree_chain_sampling(target, draft, [torch.tensor([PROMPT])], tree=(2, 1), max_new_tokens=12)
    assert [r["method"] for r in rows] == ["chain k=2", "chain k=3", "tree [2, 1] specinfer", "tree [2, 1] sequoia"]
    assert rows[0]["ratio"] == 1.0 and all(1.0 <= r["tokens_per_target_call"] <= 3.0 for r in rows)
    assert "ratio" in capsys.readouterr().out
    with pytest.raises(ValueError, match="ModelPair"):
        compare_tree_chain_sampling(target, draft, ["text"])


@pytest.mark.parametrize("draft_vocab", [12, 20])
def test_draft_vocab_narrower_or_wider_than_target(draft_vocab):
    """Hot sampling reaches the ids only one model has: the draft reads the target's extra ids as 0."""
    target = tiny_model("gpt_neox", vocab=16)
    draft = tiny_model("gpt_neox", seed=4, vocab=draft_vocab)
    ids = torch.tensor([[1, 2, 3]])
    seen = set()
    for seed, rule in enumerate(["specinfer", "sequoia"] * 2):
        out = tree_speculative_decode(
            target,
            draft,
            ids,
            max_new_tokens=30,
            temperature=3.0,
            tree_sampling=rule,
            generator=torch.Generator().manual_seed(seed),
        )
        seen |= set(out.sequences[0].tolist())
    assert max(seen) < 16 and (draft_vocab > 16 or max(seen) >= draft_vocab)  # the target's extra ids did occur
    out = tree_speculative_decode(target, draft, ids, max_new_tokens=20, tree=(2, 2))
    assert torch.equal(out.sequences, hf_greedy(target, ids, 20))
