"""Correctness and speed checks of the kit on one device and dtype, for `selfcheck` (an instructor's
pre-course check on the course's own hardware).

Each check returns `Row`s. Greedy outputs must equal the target's greedy decoding; in fp16/bf16 a
difference passes only at a numerical near-tie of the target (`core.checks.greedy_divergence`), and
says so ("near-tie"): a bug shows as a difference where the target was sure. Sampling is checked with a
chi-square test against the target's own distribution, with a control the test must reject.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from specdec_helpers.core.backends import decode_forward
from specdec_helpers.core.checks import greedy_divergence
from specdec_helpers.core.decode import greedy_decode, speculative_decode
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.timing import sync_device
from specdec_helpers.core.tree import DEFAULT_TREE, TreeUnsupportedError, tree_speculative_decode
from specdec_helpers.core.verify import accept_sampled
from specdec_helpers.measure.methods import Skip, build_methods
from specdec_helpers.measure.theory import expected_speedup, measure_forward_cost

PASS, PASS_NEAR_TIE, FAIL, SKIP = "pass", "pass (near-tie)", "FAIL", "skipped"
#: Chi-square p-value under which a sample is taken NOT to follow the target's distribution.
ALPHA = 1e-3


@dataclass
class Row:
    section: str
    check: str
    status: str  # PASS, PASS_NEAR_TIE, FAIL or SKIP
    detail: str = ""
    seconds: float = 0.0
    values: dict = field(default_factory=dict)  # numbers a RESULTS.md row can cite

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def as_dict(self) -> dict:
        return asdict(self)


def _new(out, prompt) -> list[int]:
    return out[0, prompt.shape[1] :].tolist()


def _verdict(target, prompt, got: list[int], want: list[int]) -> tuple[str, str]:
    """PASS when equal; PASS_NEAR_TIE when the difference is at a near-tie of the target; else FAIL, saying where."""
    if got == want:
        return PASS, "identical to HF greedy"
    ok, message = greedy_divergence(target, prompt, got, want=want)
    return (PASS_NEAR_TIE if ok else FAIL), message


def _hf_greedy(target, prompt, n: int) -> list[int]:
    out = target.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=n,
        min_new_tokens=n,
        eos_token_id=None,
        pad_token_id=0,
    )
    return _new(out, prompt)


def _timed_row(section, check, fn) -> Row:
    start = time.perf_counter()
    row = fn()
    row.section, row.check, row.seconds = section, check, round(time.perf_counter() - start, 3)
    return row


# --------------------------------------------------------------------------- greedy, tree


@torch.inference_mode()
def greedy_rows(pair, prompts, max_new_tokens: int = 32, ks=(1, 4, 8)) -> list[Row]:
    """Ours (cached and uncached, several k; plain greedy) against HF greedy, on every prompt."""
    ids = [pair.encode(p) for p in prompts]
    wants = [_hf_greedy(pair.target, x, max_new_tokens) for x in ids]
    variants = {
        "greedy_decode": lambda x: greedy_decode(pair.target, x, max_new_tokens=max_new_tokens, eos_token_id=[])
    }
    for k in ks:
        for cache in (True, False):
            variants[f"speculative k={k}{'' if cache else ' no cache'}"] = lambda x, k=k, cache=cache: (
                speculative_decode(
                    pair.target,
                    pair.draft,
                    x,
                    max_new_tokens=max_new_tokens,
                    num_speculative_tokens=k,
                    use_cache=cache,
                    eos_token_id=[],
                )
            )
    rows = []
    for name, run in variants.items():

        def check(run=run):
            statuses, notes, accepted, proposed, calls = [], [], 0, 0, [0, 0]
            for x, want in zip(ids, wants):
                out = run(x)
                accepted, proposed = accepted + out.stats.accepted, proposed + out.stats.proposed
                calls = [calls[0] + out.stats.target_calls, calls[1] + out.stats.draft_calls]
                status, message = _verdict(pair.target, x, _new(out.sequences, x), want)
                statuses.append(status)
                if status != PASS:
                    notes.append(message)
            status = FAIL if FAIL in statuses else PASS_NEAR_TIE if PASS_NEAR_TIE in statuses else PASS
            return Row(
                "",
                "",
                status,
                "; ".join(notes) or f"{len(ids)} prompts identical to HF greedy",
                values=dict(
                    prompts=len(ids),
                    acceptance=round(accepted / proposed, 4) if proposed else None,
                    target_calls=calls[0],
                    draft_calls=calls[1],
                ),
            )

        rows.append(_timed_row("greedy", name, check))
    return rows


@torch.inference_mode()
def tree_rows(pair, prompts, max_new_tokens: int = 32, tree=DEFAULT_TREE) -> list[Row]:
    """Tree speculation against HF greedy (a model draft grows the tree); skipped where the model cannot."""

    def check():
        statuses, notes = [], []
        for prompt in prompts:
            x = pair.encode(prompt)
            try:
                out = tree_speculative_decode(
                    pair.target, pair.draft, x, max_new_tokens=max_new_tokens, tree=tree, eos_token_id=[]
                )
            except TreeUnsupportedError as error:
                return Row("", "", SKIP, str(error))
            status, message = _verdict(
                pair.target, x, _new(out.sequences, x), _hf_greedy(pair.target, x, max_new_tokens)
            )
            statuses.append(status)
            if status != PASS:
                notes.append(message)
        status = FAIL if FAIL in statuses else PASS_NEAR_TIE if PASS_NEAR_TIE in statuses else PASS
        return Row(
            "",
            "",
            status,
            "; ".join(notes) or f"{len(prompts)} prompts identical to HF greedy",
            values=dict(tree=list(tree)),
        )

    return [_timed_row("tree", f"tree {list(tree)}", check)]


# --------------------------------------------------------------------------- sampling


def chi_square_pvalue(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """Pearson's chi-square goodness of fit of ``counts`` to ``probs`` (cells expected below
    ``min_expected`` pooled); 0.0 when a token of probability 0 was drawn."""
    counts, probs = counts.double().cpu(), probs.double().cpu()
    if counts[probs == 0].sum() > 0:
        return 0.0
    n = counts.sum()
    expected = n * probs / probs.sum()
    big = expected >= min_expected
    obs = torch.cat([counts[big], counts[~big].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    dof = obs.numel() - 1
    if dof < 1:
        return 1.0
    stat = ((obs - exp) ** 2 / exp).sum()
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.double), stat / 2))


def _first_token_probs(model, ids, sampler) -> torch.Tensor:
    return sampler.probs(model(input_ids=ids).logits[0, -1:].float())[0]


@torch.inference_mode()
def sampling_rows(
    pair,
    prompt: str,
    samples: int = 4000,
    decodes: int = 300,
    temperature: float = 1.0,
    top_k: int | None = 8,
    seed: int = 0,
) -> list[Row]:
    """The first sampled token's distribution against the target's own (chi-square), three ways:

    - rejection sampling (`accept_sampled`) on this device and dtype, ``samples`` times, draft token
      drawn from the draft's distribution: must fit;
    - the control, a rule that keeps every draft token (it emits the draft's distribution): must be
      rejected, or the test has no power on this pair and says so;
    - ``decodes`` whole `speculative_decode` calls (2 new tokens, k = the pair's): must fit.
    """
    x = pair.encode(prompt)
    device = x.device
    generator = torch.Generator(device=device).manual_seed(seed)
    sampler = Sampler(temperature, top_k, None, generator)
    p = _first_token_probs(pair.target, x, sampler)
    draft = pair.draft if isinstance(pair.draft, torch.nn.Module) else getattr(pair.draft, "model", None)
    rows = []

    def draw(dist, n):
        return torch.multinomial(dist, n, replacement=True, generator=generator)

    def rejection():
        if draft is None:
            return Row("", "", SKIP, "the pair's draft is model-free: no draft distribution to sample from")
        q = _first_token_probs(draft, x, sampler)[: p.numel()]
        q = q / q.sum()
        logits = pair.target(input_ids=x).logits[0, -1:].float().expand(2, -1)  # rows: p_0, and a bonus row
        counts = torch.zeros(p.numel(), dtype=torch.long)  # on the host: each result is read there anyway
        for token in draw(q, samples):
            result = accept_sampled(logits, token.view(1), q.view(1, -1), sampler)
            counts[result.token_list[0] if result.token_list is not None else int(result.tokens[0])] += 1
        pvalue = chi_square_pvalue(counts, p)
        control = chi_square_pvalue(torch.bincount(draw(q, samples), minlength=p.numel()), p)
        rows.append(
            Row(
                "sampling",
                "control: keep every draft token",
                PASS if control < ALPHA else FAIL,
                f"p = {control:.2g}: "
                + (
                    "rejected, as it must be"
                    if control < ALPHA
                    else "NOT rejected: draft and target too close for this test; raise --samples"
                ),
                values=dict(pvalue=control, samples=samples),
            )
        )
        return Row(
            "",
            "",
            PASS if pvalue >= ALPHA else FAIL,
            f"chi-square p = {pvalue:.3g} ({samples} draws, T={temperature}, top_k={top_k})",
            values=dict(pvalue=pvalue, samples=samples),
        )

    def end_to_end():
        counts = torch.zeros(p.numel(), dtype=torch.long)
        for _ in range(decodes):
            out = speculative_decode(
                pair.target,
                pair.draft,
                x,
                max_new_tokens=2,
                temperature=temperature,
                top_k=top_k,
                num_speculative_tokens=pair.num_speculative_tokens,
                generator=generator,
                eos_token_id=[],
            )
            counts[int(out.sequences[0, x.shape[1]])] += 1
        pvalue = chi_square_pvalue(counts, p)
        return Row(
            "",
            "",
            PASS if pvalue >= ALPHA else FAIL,
            f"chi-square p = {pvalue:.3g} ({decodes} decodes)",
            values=dict(pvalue=pvalue, decodes=decodes),
        )

    first = _timed_row("sampling", "rejection sampling, first token", rejection)
    return [first, *rows, _timed_row("sampling", "speculative_decode sampling, first token", end_to_end)]


# --------------------------------------------------------------------------- ours vs HF


def _median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else 0.0


@torch.inference_mode()
def hf_rows(pair, prompts, max_new_tokens: int = 64, repeats: int = 3) -> list[Row]:
    """Ours vs HF greedy and HF assisted generation (same draft, same constant k), and Leviathan's bound.

    Outputs must agree (near-ties allowed in half precision); times are medians of ``repeats`` interleaved
    runs after a warm-up, one machine, one run: ratios to read, not to assert.
    """
    k = pair.num_speculative_tokens
    methods = build_methods(
        pair.target, pair.draft, k, names=("hf_greedy", "greedy", "spec_cached", "hf_assisted"), eos_token_id=[]
    )
    ids = [pair.encode(p) for p in prompts]
    times = {name: [] for name, fn in methods.items() if not isinstance(fn, Skip)}
    outputs, stats = {name: [] for name in times}, []
    for name in times:
        methods[name](ids[0], 4)  # warm-up
    for _ in range(repeats):
        for x in ids:
            for name in times:
                _sync(x.device)
                start = time.perf_counter()
                out = methods[name](x, max_new_tokens)
                _sync(x.device)
                times[name].append(time.perf_counter() - start)
                outputs[name].append(_new(out.sequences, x))
                if name == "spec_cached":
                    stats.append(out.stats)
    rows = []
    labels = {"greedy": "ours greedy", "spec_cached": f"ours speculative k={k}", "hf_assisted": f"HF assisted k={k}"}
    for name in ("greedy", "spec_cached", "hf_assisted"):
        if name not in times:
            rows.append(Row("ours vs HF", labels[name], SKIP, str(methods[name])))
            continue
        statuses, notes = [], []
        for x, got, want in zip(ids * repeats, outputs[name], outputs["hf_greedy"]):
            status, message = _verdict(pair.target, x, got, want)
            statuses.append(status)
            notes += [message] if status != PASS else []
        status = FAIL if FAIL in statuses else PASS_NEAR_TIE if PASS_NEAR_TIE in statuses else PASS
        ratio = _median(times["hf_greedy"]) / _median(times[name]) if _median(times[name]) else 0.0
        rows.append(
            Row(
                "ours vs HF",
                labels[name],
                status,
                f"{ratio:.2f}x HF greedy; " + ("; ".join(notes[:2]) or "same tokens"),
                seconds=round(sum(times[name]), 3),
                values=dict(speedup_vs_hf_greedy=round(ratio, 3), median_s=round(_median(times[name]), 4)),
            )
        )
    if "hf_assisted" in times:
        ours_vs = _median(times["hf_assisted"]) / _median(times["spec_cached"])
        rows.append(
            Row(
                "ours vs HF",
                "ours / HF assisted",
                PASS,
                f"ours {ours_vs:.2f}x HF assisted's speed (same draft, k)",
                values=dict(ours_over_hf_assisted=round(ours_vs, 3)),
            )
        )
    rows.append(_bound_row(pair, ids[0], stats, k, _median(times["spec_cached"]), _median(times["greedy"])))
    return rows


def _bound_row(pair, x, stats, k, spec_s, greedy_s) -> Row:
    """Leviathan et al.'s speedup for the measured acceptance and cost ratio c, next to what ours got."""
    accepted, proposed = sum(s["accepted"] for s in stats), sum(s["proposed"] for s in stats)
    alpha = accepted / proposed if proposed else 0.0
    draft = pair.draft if isinstance(pair.draft, torch.nn.Module) else getattr(pair.draft, "model", None)
    if draft is None:
        return Row("ours vs HF", "Leviathan bound", SKIP, "model-free draft: no cost ratio c")
    c = _step_time(draft, x) / _step_time(pair.target, x)
    bound = expected_speedup(alpha, k, c)
    got = greedy_s / spec_s if spec_s else 0.0
    return Row(
        "ours vs HF",
        "Leviathan bound",
        PASS,
        f"alpha {alpha:.2f}, c {c:.2f}: bound {bound:.2f}x, ours {got:.2f}x over our greedy",
        values=dict(alpha=round(alpha, 4), c=round(c, 4), k=k, bound=round(bound, 3), ours=round(got, 3)),
    )


def _step_time(model, x, repeats: int = 5) -> float:
    """Median time of one decode step after a prefill of the prompt, through the forward a decode runs the model by
    (graphed on a GPU, lean on a CPU Llama: `backends.decode_forward`), so that c prices what the decode pays."""
    curve = measure_forward_cost(decode_forward(model), x[:, :-1], sizes=[1], repeats=repeats, warmup=1)
    return curve["median_s"][0]


_sync = sync_device
