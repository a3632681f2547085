"""Tree vs chain speculation measured on real prompts (a benchmark, so it lives here, not in `core.tree`)."""

from __future__ import annotations

import torch

from specdec_helpers.core.checks import StudentEditionError, check_tree_shape
from specdec_helpers.core.decode import greedy_decode, speculative_decode
from specdec_helpers.core.tree import DEFAULT_TREE, tree_speculative_decode
from specdec_helpers.measure.observed import check_decoder, observed_decode
from specdec_helpers.measure.speedup import ratio_words


def compare_tree_chain(
    target,
    draft=None,
    prompts=(),
    *,
    tree=DEFAULT_TREE,
    max_new_tokens: int = 64,
    eos_token_id=None,
    repeats: int = 1,
    show: bool = True,
    decoder=None,
) -> list[dict]:
    """Tree vs chain on real prompts: tokens per target call, time, speedup over plain greedy.

    The chains compared: one as deep as the tree (same draft passes per round) and one with the
    tree's node budget (same tokens fed to the target per round). ``target`` may be a `ModelPair`
    (then ``draft`` defaults to its draft and string prompts go through ``pair.encode``). Times are
    summed over ``repeats`` interleaved runs after one warm-up; one machine, one run: read ratios.
    Every method's output is checked against greedy (column ``same``).

    ``decoder``: a decoder with PA3's interface (``nb.your_decoder("07", pair)``, see `observed`) decodes
    the chain rows instead of the kit's `speculative_decode` (it stops at its own tokenizer's EOS). Without
    one, a row the kit refuses (the student edition holds no greedy chain decoder) is left out, with a note.
    """
    target, draft, ids, widths = _inputs(target, draft, prompts, tree)
    depth, budget = len(widths), sum(widths)
    kwargs = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    if decoder is not None:
        check_decoder(decoder)
    methods = {
        "greedy": lambda x, **kw: greedy_decode(target, x, **kw),
        f"chain k={depth}": _chain(target, draft, decoder, depth),
        f"chain k={budget}": _chain(target, draft, decoder, budget),
        f"tree {list(widths)}": lambda x, **kw: tree_speculative_decode(target, draft, x, tree=widths, **kw),
    }
    for name, run in list(methods.items()):  # warm-up (and the tree's one-off model check)
        try:
            run(ids[0], max_new_tokens=min(8, max_new_tokens), eos_token_id=eos_token_id)
        except StudentEditionError:
            del methods[name]
            print(
                f"{name} left out: the student edition of the kit has no greedy chain decoder (that is your "
                'decoder from notebooks 02-04); pass decoder=nb.your_decoder("07", pair) to run it on yours.'
            )
    totals = {
        name: dict(new=0, target_calls=0, draft_calls=0, proposed=0, time=0.0, same=True, rounds=[]) for name in methods
    }
    for _ in range(repeats):
        for t in totals.values():
            t["rounds"].append(0.0)  # this repeat's time, all prompts: one round of the interleaved comparison
        for x in ids:
            reference = None
            for name, run in methods.items():
                out = run(x, **kwargs)
                reference = out.sequences if reference is None else reference
                t = totals[name]
                t["new"] += out.stats.new_tokens
                t["target_calls"] += out.stats.target_calls
                t["draft_calls"] += out.stats.draft_calls
                t["proposed"] += out.stats.proposed
                t["time"] += out.stats.wall_time_s
                t["rounds"][-1] += out.stats.wall_time_s
                t["same"] &= torch.equal(out.sequences, reference)
    base = totals["greedy"]["time"]
    rows = []
    for name, t in totals.items():
        calls = t["target_calls"]
        rows.append(
            dict(
                method=name,
                tokens_per_target_call=t["new"] / calls if calls else 0.0,
                nodes_per_target_call=t["proposed"] / calls if calls else 0.0,
                draft_calls=t["draft_calls"],
                time_s=t["time"],
                speedup=base / t["time"] if t["time"] else 0.0,
                same=t["same"],
                speedup_words=ratio_words(totals["greedy"]["rounds"], t["rounds"], base / t["time"])
                if t["time"] and name != "greedy"
                else "",
            )
        )
    if show:
        print(f"{'method':<22}{'tok/call':>9}{'nodes/call':>11}{'draft calls':>12}{'time s':>8}{'speedup':>8}  same")
        for r in rows:
            print(
                f"{r['method']:<22}{r['tokens_per_target_call']:>9.2f}{r['nodes_per_target_call']:>11.2f}"
                f"{r['draft_calls']:>12}{r['time_s']:>8.2f}{r['speedup']:>7.2f}x  {r['same']}"
            )
        # tokens per call are counts; times are one machine's, and say here whether they are noise
        for r in rows[1:]:
            print(f"speedup of {r['method']}: {r['speedup_words']}")
    return rows


def _chain(target, draft, decoder, k: int):
    """The chain row's ``fn(x, max_new_tokens=, eos_token_id=)``: the kit's `speculative_decode`, or ``decoder``
    observed from outside (`observed_decode` counts one draft pass per drafted token, as the kit does)."""
    if decoder is None:
        return lambda x, **kw: speculative_decode(target, draft, x, num_speculative_tokens=k, **kw)
    return lambda x, max_new_tokens, eos_token_id=None: observed_decode(decoder, x, max_new_tokens, k)


def compare_tree_chain_sampling(
    target,
    draft=None,
    prompts=(),
    *,
    tree=DEFAULT_TREE,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    seed: int = 0,
    show: bool = True,
    score=None,
) -> list[dict]:
    """Sampling: chains vs trees (both rules of `core.tree_sampling`), in tokens per target call.

    The same chains as `compare_tree_chain` (as deep as the tree; with its node budget), each run once per
    prompt with its own seeded generator. Every method samples the target's own distribution, so the
    texts differ; what is compared is how many tokens a target pass yields. ``ratio`` is tokens per
    call over the depth-matched chain's. Read it from one run: sampling makes it noisy on few prompts.
    ``score``: the chains' scoring pass (`speculative_decode`'s ``score=``; the student edition has none of its own:
    ``nb.your_scoring(decoder)``). Without one, a chain the kit refuses is left out, with a note.
    """
    target, draft, ids, widths = _inputs(target, draft, prompts, tree)
    depth, budget = len(widths), sum(widths)
    warp = dict(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens)
    methods = {
        f"chain k={depth}": lambda x, g: speculative_decode(
            target, draft, x, num_speculative_tokens=depth, generator=g, score=score, **warp
        ),
        f"chain k={budget}": lambda x, g: speculative_decode(
            target, draft, x, num_speculative_tokens=budget, generator=g, score=score, **warp
        ),
    }
    for rule in ("specinfer", "sequoia"):
        methods[f"tree {list(widths)} {rule}"] = lambda x, g, rule=rule: tree_speculative_decode(
            target, draft, x, tree=widths, tree_sampling=rule, generator=g, **warp
        )
    rows = []
    for name, run in methods.items():
        new = calls = accepted = proposed = 0
        try:
            for i, x in enumerate(ids):
                stats = run(x, torch.Generator(device=x.device).manual_seed(seed + i)).stats
                new, calls = new + stats.new_tokens, calls + stats.target_calls
                accepted, proposed = accepted + stats.accepted, proposed + stats.proposed
        except StudentEditionError:
            print(
                f"{name} left out: the student edition of the kit has no scoring pass of its own (that is your "
                "notebook 03); pass score=nb.your_scoring(decoder) to run the chains on yours."
            )
            continue
        rows.append(
            dict(
                method=name,
                tokens_per_target_call=new / calls if calls else 0.0,
                nodes_per_target_call=proposed / calls if calls else 0.0,
                accepted_per_target_call=accepted / calls if calls else 0.0,
            )
        )
    base = rows[0]["tokens_per_target_call"] or 1.0
    for row in rows:
        row["ratio"] = row["tokens_per_target_call"] / base
    if show:
        print(
            f"{'method (sampling, T=' + format(temperature, 'g') + ')':<34}{'tok/call':>9}{'nodes/call':>11}{'ratio':>7}"
        )
        for r in rows:
            print(
                f"{r['method']:<34}{r['tokens_per_target_call']:>9.2f}{r['nodes_per_target_call']:>11.2f}"
                f"{r['ratio']:>6.2f}x"
            )
    return rows


def _inputs(target, draft, prompts, tree):
    """(target, draft, prompt ids, widths): ``target`` may be a `ModelPair` (then ``draft`` defaults to its
    draft and string prompts go through ``pair.encode``); prompts must end up as token-id tensors."""
    encode = None
    if hasattr(target, "encode") and hasattr(target, "target"):  # a ModelPair
        encode, draft, target = target.encode, (target.draft if draft is None else draft), target.target
    widths = check_tree_shape(tree)
    ids = [encode(p) if isinstance(p, str) and encode else p for p in prompts]
    if not ids or any(isinstance(p, str) for p in ids):
        raise ValueError("give prompts as token-id tensors, or strings together with a ModelPair as target")
    return target, draft, ids, widths
