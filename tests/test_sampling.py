"""Speculative *sampling* is lossless: its tokens follow the target's own (warped) distribution.

The models here are tiny lookup tables (`TableLM`): the next-token logits are a fixed random table
indexed by the last one or two tokens, so the target's exact distribution is known and every forward
pass costs microseconds. Three kinds of statistical check, all with fixed seeds (deterministic):

- one verification step (`accept_sampled` called directly, thousands of times): the first emitted
  token must follow ``p``;
- many short `speculative_decode` runs: the joint distribution of the first 3 new tokens;
- one long `speculative_decode` run: every transition (state -> next token) must follow ``p(.|state)``.
  Given the past, the next token of a correct sampler is a fresh draw from ``p(.|state)``, so the
  tokens that follow each state are i.i.d. and the pooled chi-square test is valid. Rounds start at
  random places of a long run, so every in-block position (accepted, correction, bonus) is exercised.

Each check runs Pearson's chi-square goodness of fit (expected counts below 5 merged) and bounds the
total variation distance by its expectation plus a McDiarmid deviation term (failure chance 1e-3).
A lossy rule (sampled draft checked against the target's argmax) must FAIL the very same check.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tiny_models import FAMILIES, hf_greedy, perturbed_copy, tiny_model
from transformers import GenerationConfig, PretrainedConfig

from specdec_helpers import ModelDrafter, PromptLookupDrafter, Sampler, VerifyResult, speculative_decode
from specdec_helpers.core.adaptive import KSchedule, as_schedule
from specdec_helpers.core.verify import accept_sampled

V = 6  # vocabulary of the table models
ALPHA = 1e-3  # significance level of the chi-square tests
DELTA = 1e-3  # failure probability allowed to each total-variation bound
# The fast tier keeps one or a few cases of each check (and every wrong-rule control); the rest of the
# cases, thousands of decodes each, run in the slow tier (CI runs both).
slow = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Thousands of tiny ops: with threads on a shared 2-core machine each op waits for the pool."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- table "models"


class TableLM(torch.nn.Module):
    """A causal LM whose next-token logits are ``table[last token]`` (order 1) or
    ``table[previous token, last token]`` (order 2). Works with the kit's DynamicCache helpers: the
    token ids themselves are what it caches, so cache length, crop and rollback behave as for an HF model.
    """

    def __init__(self, table: torch.Tensor, eos_token_id=None):
        super().__init__()
        vocab = table.shape[-1]
        self.order = table.dim() - 1
        self.register_buffer("table", table.float())
        self.embed = torch.nn.Embedding(table.shape[0], 1)  # rows = ids it can read
        self.head = torch.nn.Linear(1, vocab, bias=False)  # rows = ids it can emit
        self.config = PretrainedConfig(vocab_size=vocab, max_position_embeddings=1 << 20, num_hidden_layers=1)
        self.generation_config = GenerationConfig(eos_token_id=eos_token_id)
        self.eval()

    @property
    def device(self):
        return self.table.device

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, past_key_values=None, use_cache=False, logits_to_keep=0, **kwargs):
        ids = input_ids[0]
        keep = logits_to_keep or ids.numel()
        if past_key_values is not None:
            kv = ids.view(1, 1, -1, 1).float()
            ids = past_key_values.update(kv, kv, 0)[0].view(-1)[-keep - 1 :].long()  # all we need of the text
        if self.order == 1:
            logits = self.table[ids[-keep:]]
        else:
            prev = torch.cat([ids.new_zeros(1), ids[:-1]])
            logits = self.table[prev[-keep:], ids[-keep:]]
        return SimpleNamespace(logits=logits.unsqueeze(0))


def random_table(seed: int, order: int = 1, vocab: int = V, scale: float = 1.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((vocab,) * (order + 1), generator=g) * scale


def make_draft(kind: str, target: TableLM, seed: int = 7):
    """Draft of a given quality for an order-1 target: the draft is order 2 (it sees more context)."""
    table = target.table
    if kind == "equal":  # q == p exactly: every draft token must be accepted
        return TableLM(table.clone())
    if kind == "close":
        return TableLM(table.expand(V, V, V) + random_table(seed, order=2, scale=0.5))
    if kind == "far":
        return TableLM(random_table(seed, order=2))
    if kind == "narrow":  # the draft cannot read or write the target's last two ids (padding rows)
        return TableLM(table[: V - 2, : V - 2] + random_table(seed, order=1, vocab=V - 2, scale=0.5))
    if kind == "wide":  # the draft has two extra ids (its padding rows) that it likes a lot
        wide = torch.cat([table, torch.full((V, 2), 3.0)], dim=1)
        return TableLM(torch.cat([wide, torch.zeros(2, V + 2)]) + random_table(seed, order=1, vocab=V + 2, scale=0.5))
    if kind == "lookup":
        return PromptLookupDrafter(max_ngram=2)
    raise ValueError(kind)


# ----------------------------------------------------------------------------- statistics


def chisquare_pvalue(observed, expected, dof: int | None = None) -> float:
    """Pearson's chi-square p-value of ``observed`` against ``expected`` counts, ``dof`` degrees of freedom (cells
    - 1 by default): the regularised upper gamma, torch's. Not scipy: the test extra leaves scipy out, because
    transformers imports scipy.optimize, when installed, into every process that loads a model (0.2 CPU s each,
    hundreds of processes in CI)."""
    observed, expected = np.asarray(observed, float), np.asarray(expected, float)
    statistic = float(((observed - expected) ** 2 / expected).sum())
    dof = len(observed) - 1 if dof is None else dof
    return float(
        torch.special.gammaincc(
            torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(statistic / 2, dtype=torch.float64)
        )
    )


def fit(counts, probs) -> dict:
    """Chi-square p-value and total variation of observed ``counts`` against ``probs``.

    Both are ``[S, C]``: one row per conditioning state (a single row for a plain distribution). The
    TV is the state-frequency-weighted mean of the per-state TVs; ``tv_bound`` is the same mean of
    ``E[TV_s] + sqrt(ln(S / DELTA) / (2 n_s))``, with ``E[TV_s] <= 1/2 sum_c sqrt(p(1 - p) / n_s)``
    (Jensen) and the deviation from McDiarmid (one sample moves TV_s by at most 1 / n_s).
    """
    counts, probs = np.atleast_2d(np.asarray(counts, float)), np.atleast_2d(np.asarray(probs, float))
    impossible = counts[probs == 0].sum()
    obs, exp, dof = [], [], 0
    tv = bound = 0.0
    total = counts.sum()
    states = max(1, int((counts.sum(1) > 0).sum()))
    for row_c, row_p in zip(counts, probs):
        n = row_c.sum()
        if n == 0:
            continue
        row_p = row_p / row_p.sum()
        tv += n / total * 0.5 * np.abs(row_c / n - row_p).sum()
        expected_tv = 0.5 * np.sqrt(row_p * (1 - row_p) / n).sum()
        bound += n / total * (expected_tv + math.sqrt(math.log(states / DELTA) / (2 * n)))
        e = n * row_p
        big = e >= 5
        o_cells, e_cells = list(row_c[big]), list(e[big])
        if (~big).any() and e[~big].sum() > 0:
            if e[~big].sum() >= 5 or not e_cells:
                o_cells.append(row_c[~big].sum())
                e_cells.append(e[~big].sum())
            else:  # too rare even together: fold into the smallest large cell
                i = int(np.argmin(e_cells))
                o_cells[i] += row_c[~big].sum()
                e_cells[i] += e[~big].sum()
        if len(o_cells) >= 2:
            obs += o_cells
            exp += e_cells
            dof += len(o_cells) - 1
    if impossible:  # tokens the target never emits: no chi-square needed
        pvalue = 0.0
    else:
        pvalue = chisquare_pvalue(obs, exp, dof) if dof else 1.0
    return dict(pvalue=pvalue, tv=float(tv), tv_bound=float(bound), impossible=int(impossible), n=int(total))


def assert_fits(result: dict, label: str = "") -> None:
    assert result["impossible"] == 0, f"{label}: {result['impossible']} tokens the target can never emit"
    assert result["pvalue"] > ALPHA, f"{label}: chi-square rejects the target distribution: {result}"
    assert result["tv"] < result["tv_bound"], f"{label}: total variation above its bound: {result}"


# ----------------------------------------------------------------------------- 1. one verification step

SETTINGS = [  # (temperature, top_k, top_p)
    (1.0, None, None),
    (0.5, None, None),
    (1.5, None, None),
    (1.0, 3, None),
    (1.0, None, 0.8),
    (0.7, 4, 0.9),
]


def lossy_argmax(logits, draft_tokens, draft_probs, sampler):
    """WRONG: keep sampled draft tokens while they equal the target's argmax; then sample from p."""
    p = sampler.probs(logits)
    k = draft_tokens.numel()
    n = int((p[:k].argmax(-1) == draft_tokens).int().cumprod(0).sum())
    last = sampler.sample(p[n : n + 1])
    return VerifyResult(torch.cat([draft_tokens[:n], last]), n, k)


def lossy_resample(logits, draft_tokens, draft_probs, sampler):
    """WRONG: keep draft tokens while they equal a sample y ~ p; at a mismatch draw a *fresh* sample.
    (Emitting that same y at the mismatch instead would be exact, only wasteful.)"""
    p = sampler.probs(logits)
    k = draft_tokens.numel()
    y = sampler.sample(p[:k])
    n = int((y == draft_tokens).int().cumprod(0).sum())
    last = sampler.sample(p[n : n + 1])
    return VerifyResult(torch.cat([draft_tokens[:n], last]), n, k)


def one_step(rule, draft_kind: str, k: int, setting, runs: int, seed: int = 0):
    """Distribution of the first token one verification step emits, against the target's ``p_0``."""
    temperature, top_k, top_p = setting
    g = torch.Generator().manual_seed(seed)
    sampler = Sampler(temperature, top_k, top_p, generator=g)
    target_logits = random_table(seed + 1, order=1)[: k + 1]  # rows: target logits at draft positions 0..k
    if draft_kind == "equal":
        draft_logits = target_logits[:k].clone()
    elif draft_kind == "close":
        draft_logits = target_logits[:k] + random_table(seed + 2, order=1)[:k] / 3
    else:  # far
        draft_logits = random_table(seed + 3, order=1)[:k]
    q = sampler.probs(draft_logits)
    counts = np.zeros(V)
    for _ in range(runs):
        if draft_kind == "onehot":  # a deterministic drafter always proposing the same tokens
            draft, q_arg = torch.arange(k) % V, None
        else:
            draft, q_arg = sampler.sample(q), q
        result = rule(target_logits, draft, q_arg, sampler)
        counts[int(result.tokens[0])] += 1
    return fit(counts, sampler.probs(target_logits[:1]).numpy())


@pytest.mark.parametrize(
    "draft_kind,k,setting",
    [
        pytest.param("equal", 1, SETTINGS[0], marks=slow),
        pytest.param("close", 2, SETTINGS[1], marks=slow),
        pytest.param("far", 4, SETTINGS[2], marks=slow),
        ("far", 2, SETTINGS[3]),  # the lossy rules below fail exactly this case
        pytest.param("close", 4, SETTINGS[4], marks=slow),
        pytest.param("far", 2, SETTINGS[5], marks=slow),
        pytest.param("far", 1, SETTINGS[0], marks=slow),
        pytest.param("onehot", 2, SETTINGS[0], marks=slow),
        ("onehot", 1, SETTINGS[3]),
    ],
)
def test_accept_sampled_first_token_follows_target(draft_kind, k, setting):
    assert_fits(one_step(accept_sampled, draft_kind, k, setting, runs=2000), f"{draft_kind} k={k} {setting}")


@pytest.mark.parametrize("rule", [lossy_argmax, lossy_resample])
def test_lossy_rules_fail_the_same_check(rule):
    lossy = one_step(rule, "far", 2, SETTINGS[3], runs=2000)
    assert lossy["pvalue"] < 1e-6, lossy
    assert lossy["tv"] > lossy["tv_bound"], lossy


# ----------------------------------------------------------------------------- 2. short runs: first 3 tokens


def exact_joint(target: TableLM, prompt: list[int], sampler: Sampler, steps: int) -> np.ndarray:
    """P(first ``steps`` new tokens), by enumerating the target's warped distributions."""
    joint = np.zeros((V,) * steps)
    for seq in np.ndindex(*joint.shape):
        text, prob = list(prompt), 1.0
        for token in seq:
            logits = target(torch.tensor([text])).logits[0, -1:]
            prob *= float(sampler.probs(logits)[0, token])
            text.append(token)
            if prob == 0:
                break
        joint[seq] = prob
    return joint


@pytest.mark.parametrize(
    "draft_kind,k,setting",
    [("close", 2, (1.0, None, None)), pytest.param("lookup", 2, (0.8, 4, 0.9), marks=slow)],
)
def test_first_three_tokens_follow_target(draft_kind, k, setting):
    target = TableLM(random_table(11, order=2))
    draft = make_draft(draft_kind, TableLM(random_table(11, order=1)))
    prompt = [1, 2, 3, 1, 2]  # the lookup drafter proposes "3 1" first
    temperature, top_k, top_p = setting
    g = torch.Generator().manual_seed(0)
    counts = np.zeros((V,) * 3)
    for _ in range(1000):
        out = speculative_decode(
            target,
            draft,
            torch.tensor([prompt]),
            max_new_tokens=3,
            num_speculative_tokens=k,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            generator=g,
        )
        counts[tuple(out.new_tokens.tolist())] += 1
    exact = exact_joint(target, prompt, Sampler(temperature, top_k, top_p), 3)
    assert_fits(fit(counts.ravel(), exact.ravel()), f"{draft_kind} k={k} {setting}")


# ----------------------------------------------------------------------------- 3. one long run: all transitions


def long_run(draft_kind, k, setting, new_tokens=2000, seed=0, confidence=None):
    temperature, top_k, top_p = setting
    target = TableLM(random_table(21, order=1))
    draft = make_draft(draft_kind, target)
    if confidence is not None:
        draft = ModelDrafter(draft, confidence_threshold=confidence)
    out = speculative_decode(
        target,
        draft,
        torch.tensor([[0, 1]]),
        max_new_tokens=new_tokens,
        num_speculative_tokens=k,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        generator=torch.Generator().manual_seed(seed),
    )
    seq = out.sequences[0].tolist()
    counts = np.zeros((V, V))
    for a, b in zip(seq[1:-1], seq[2:]):
        counts[a, b] += 1
    return fit(counts, Sampler(temperature, top_k, top_p).probs(target.table).numpy()), out.stats


LONG_CASES = [  # draft, k, (temperature, top_k, top_p), confidence threshold
    ("close", 2, (1.0, None, None), None),
    pytest.param("far", 4, (0.5, None, None), None, marks=slow),
    pytest.param("close", 1, (1.5, None, None), None, marks=slow),
    pytest.param("close", 4, (1.0, 3, None), None, marks=slow),
    pytest.param("far", 2, (1.0, None, 0.8), None, marks=slow),
    pytest.param("close", 4, (0.7, 4, 0.9), None, marks=slow),
    ("equal", 4, (1.0, None, None), None),
    ("lookup", 3, (1.0, None, None), None),
    pytest.param("narrow", 2, (1.2, None, None), None, marks=slow),
    pytest.param("wide", 2, (1.0, None, None), None, marks=slow),
    pytest.param("close", "auto", (0.8, None, 0.9), 0.5, marks=slow),
]


@pytest.mark.parametrize("draft_kind,k,setting,confidence", LONG_CASES)
def test_long_run_transitions_follow_target(draft_kind, k, setting, confidence):
    result, stats = long_run(draft_kind, k, setting, confidence=confidence)
    assert_fits(result, f"{draft_kind} k={k} {setting} confidence={confidence}")
    if draft_kind == "equal":  # p == q exactly: u * q < p always holds
        assert stats.accepted == stats.proposed > 0


# ----------------------------------------------------------------------------- numerics and reproducibility


def test_sampler_matches_a_direct_implementation():
    logits = torch.randn(5, 9, generator=torch.Generator().manual_seed(3)) * 2
    for temperature, top_k, top_p in [(0.7, None, None), (1.3, 3, None), (1.0, None, 0.6), (0.5, 4, 0.8)]:
        scaled = logits / temperature
        if top_k:
            kth = scaled.topk(top_k, dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth, -math.inf)
        if top_p is not None:
            # Keep the smallest set of top tokens whose mass reaches top_p (HF's rule).
            probs, order = scaled.softmax(-1).sort(-1, descending=True)
            drop = probs.cumsum(-1) - probs >= top_p
            scaled = scaled.masked_fill(drop.scatter(-1, order, drop), -math.inf)
        torch.testing.assert_close(Sampler(temperature, top_k, top_p).probs(logits), scaled.softmax(-1))


@pytest.mark.parametrize("temperature", [1e-4, 1e-8, 1e-30, 1e-300])
def test_tiny_temperature_is_one_hot_not_nan(temperature):
    logits = torch.tensor([[1.0, 3.0, 2.0, -1e4], [50.0, 50.5, -50.0, 0.0]])
    probs = Sampler(temperature).probs(logits)
    assert torch.isfinite(probs).all()
    torch.testing.assert_close(probs, torch.nn.functional.one_hot(logits.argmax(-1), 4).float())


@pytest.mark.parametrize("family", [pytest.param(f, marks=[] if f == "llama" else slow) for f in FAMILIES])
def test_tiny_temperature_equals_greedy(family):
    target = tiny_model(family)
    draft = perturbed_copy(target)
    ids = torch.tensor([[3, 17, 42, 5]])
    expected = hf_greedy(target, ids, 20)
    for k in (1, 4, "auto"):
        out = speculative_decode(
            target,
            draft,
            ids,
            max_new_tokens=20,
            num_speculative_tokens=k,
            temperature=1e-6,
            generator=torch.Generator().manual_seed(0),
        )
        assert torch.equal(out.sequences, expected), (family, k)


def test_same_seed_same_output():
    target = tiny_model("gpt_neox", vocab=16)
    draft = perturbed_copy(target, scale=0.5)
    ids = torch.tensor([[1, 2, 3]])

    def run(seed, drafter=draft):
        return speculative_decode(
            target,
            drafter,
            ids,
            max_new_tokens=30,
            num_speculative_tokens=3,
            temperature=1.0,
            top_p=0.95,
            generator=torch.Generator().manual_seed(seed),
        )

    a, b, c = run(123), run(123), run(124)
    assert torch.equal(a.sequences, b.sequences)
    assert a.stats.accepted_per_step == b.stats.accepted_per_step
    assert not torch.equal(a.sequences, c.sequences)
    lookup = PromptLookupDrafter()
    assert torch.equal(run(5, lookup).sequences, run(5, lookup).sequences)
    # Without a generator the global RNG is used: torch.manual_seed reproduces it.
    runs = []
    for _ in range(2):
        torch.manual_seed(9)
        runs.append(speculative_decode(target, draft, ids, max_new_tokens=30, temperature=1.0).sequences)
    assert torch.equal(*runs)


def test_equal_and_disjoint_supports_give_no_nan():
    p_logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -2.0, -3.0]] * 3)
    sampler = Sampler(1.0, top_k=2, generator=torch.Generator().manual_seed(0))
    q_same = sampler.probs(p_logits[:2])
    q_disjoint = sampler.probs(-p_logits[:2])  # top-2 of the draft = the target's two *least* likely
    for _ in range(200):
        same = accept_sampled(p_logits, sampler.sample(q_same), q_same, sampler)
        assert same.num_accepted == 2 and int(same.tokens[-1]) in (0, 1)
        disjoint = accept_sampled(p_logits, sampler.sample(q_disjoint), q_disjoint, sampler)
        assert disjoint.num_accepted == 0 and int(disjoint.tokens[0]) in (0, 1)
    # Whole loop: a draft equal to the target is always accepted; a disjoint one never is.
    target = TableLM(random_table(5))
    for draft, rate in [(TableLM(target.table.clone()), 1.0), (TableLM(-target.table), 0.0)]:
        out = speculative_decode(
            target,
            draft,
            torch.tensor([[0]]),
            max_new_tokens=40,
            num_speculative_tokens=3,
            temperature=1.0,
            top_k=2,
            generator=torch.Generator().manual_seed(0),
        )
        assert out.stats.acceptance_rate == rate


@pytest.mark.parametrize("draft_vocab", [12, 20])
def test_draft_vocab_narrower_or_wider_than_target_under_sampling(draft_vocab):
    target = tiny_model("gpt_neox", vocab=16)
    draft = tiny_model("gpt_neox", seed=4, vocab=draft_vocab)
    ids = torch.tensor([[1, 2, 3]])
    for seed in range(5):  # hot sampling reaches the ids only one model has
        out = speculative_decode(
            target, draft, ids, max_new_tokens=30, temperature=3.0, generator=torch.Generator().manual_seed(seed)
        )
        assert int(out.sequences.max()) < 16
    assert torch.equal(speculative_decode(target, draft, ids, max_new_tokens=20).sequences, hf_greedy(target, ids, 20))


@pytest.mark.parametrize(
    "kwargs,error",
    [
        (dict(temperature=-0.5), ValueError),
        (dict(temperature=float("nan")), ValueError),
        (dict(temperature="hot"), ValueError),
        (dict(temperature=True), ValueError),
        (dict(temperature=1.0, top_k=-1), ValueError),
        (dict(temperature=1.0, top_k=2.5), ValueError),
        (dict(temperature=1.0, top_p=0.0), ValueError),
        (dict(temperature=1.0, top_p=1.5), ValueError),
        (dict(temperature=1.0, generator=123), TypeError),
        (dict(num_speculative_tokens="fast"), TypeError),
        (dict(num_speculative_tokens=0), ValueError),
    ],
)
def test_bad_sampling_arguments_are_rejected(kwargs, error):
    target = TableLM(random_table(0))
    with pytest.raises(error):
        speculative_decode(target, PromptLookupDrafter(), torch.tensor([[0, 1]]), max_new_tokens=3, **kwargs)


# ----------------------------------------------------------------------------- adaptive k


def test_k_schedule_follows_hf_heuristic():
    schedule = as_schedule("auto")
    assert schedule.current == 5
    trace = []
    for accepted, proposed in [(5, 5), (7, 7), (3, 9), (0, 8), (0, 0), (0, 7), (6, 6)]:
        schedule.update(accepted, proposed)
        trace.append(schedule.current)
    assert trace == [7, 9, 8, 7, 7, 6, 8]  # +2 when all accepted, -1 otherwise, unchanged if none proposed
    for _ in range(20):
        schedule.update(0, 3)
    assert schedule.current == 1
    capped = KSchedule(2, max_k=4)
    for _ in range(3):
        capped.update(2, 2)
    assert capped.current == 4
    constant = as_schedule(3)
    constant.update(3, 3)
    assert constant.current == 3 and not constant.adaptive
    assert as_schedule(capped) is capped


@pytest.mark.parametrize("family", [pytest.param(f, marks=[] if f == "gpt2" else slow) for f in FAMILIES])
def test_adaptive_k_and_confidence_keep_greedy_output(family):
    eos_target = tiny_model(family)
    draft = perturbed_copy(eos_target)
    ids = torch.tensor([[3, 17, 42, 5]])
    free_run = hf_greedy(eos_target, ids, 30)[0, ids.shape[1] :].tolist()
    eos = free_run[9]  # a token the target really emits: generation must stop there
    for max_new, eos_id in [(1, None), (2, None), (7, None), (30, None), (30, eos)]:
        expected = hf_greedy(eos_target, ids, max_new, eos_token_id=eos_id)
        drafters = (draft, ModelDrafter(draft, confidence_threshold=0.3), ModelDrafter(draft, confidence_threshold=1.0))
        for drafter in drafters:
            out = speculative_decode(
                eos_target, drafter, ids, max_new_tokens=max_new, num_speculative_tokens="auto", eos_token_id=eos_id
            )
            assert torch.equal(out.sequences, expected), (family, max_new, eos_id)


def test_confidence_threshold_stops_drafting_early():
    target = tiny_model("llama")
    ids = torch.tensor([[3, 17, 42, 5]])
    always_stop = speculative_decode(
        target,
        ModelDrafter(perturbed_copy(target), confidence_threshold=1.0),
        ids,
        max_new_tokens=20,
        num_speculative_tokens=4,
    )
    assert all(len(step.draft) == 1 for step in always_stop.steps[:-1])
    assert always_stop.stats.draft_calls == always_stop.stats.proposed
    with pytest.raises(ValueError, match="confidence_threshold"):
        ModelDrafter(target, confidence_threshold=1.5)


def test_adaptive_k_grows_for_a_perfect_draft_and_shrinks_for_a_bad_one():
    target = tiny_model("gpt2")
    ids = torch.tensor([[3, 17, 42, 5]])

    def calls(draft, k):
        stats = speculative_decode(target, draft, ids, max_new_tokens=60, num_speculative_tokens=k).stats
        return stats.target_calls, stats.draft_calls

    perfect, bad = perturbed_copy(target, scale=0.0), tiny_model("gpt2", seed=5)
    assert calls(perfect, "auto")[0] < calls(perfect, 5)[0]  # k grows 5, 7, 9, ...: fewer target passes
    assert calls(bad, "auto")[1] < calls(bad, 5)[1]  # k shrinks towards 1: fewer wasted draft passes


def test_inverse_cdf_draws_each_token_with_its_probability_and_a_shifted_rule_fails():
    """The draw a CPU generator makes for a model on another device (`sampling.inverse_cdf`: a uniform from the
    generator, the token picked where the probabilities are): chi-square against the distribution, and the control,
    the same rule one index off, rejected."""
    from specdec_helpers.core.sampling import inverse_cdf

    probs = torch.tensor([[0.05, 0.4, 0.0, 0.25, 0.3]]).expand(20000, -1)
    u = torch.rand(20000, generator=torch.Generator().manual_seed(0))
    for shift, follows in ((0, True), (1, False)):
        tokens = (inverse_cdf(probs, u) + shift) % probs.shape[1]
        observed = torch.bincount(tokens, minlength=5).double()
        support = probs[0] > 0
        expected = probs[0][support].double() / probs[0][support].double().sum() * observed[support].sum()
        if follows:
            assert observed[~support].sum() == 0  # a token of probability 0 is never drawn
            assert chisquare_pvalue(observed[support], expected) > 1e-3
        else:
            assert observed[~support].sum() > 0 or chisquare_pvalue(observed[support], expected) < 1e-3
    assert inverse_cdf(torch.tensor([[0.0, 1.0]]), torch.tensor([0.999999])).item() == 1
