"""The four goals of issue #36, from ONE run: CUDA graphs over static caches at Pythia-1.4b/160m shapes.

Random weights (built here, no hub; `pythia_random_timing.build`), fp16 on a GPU. It prints:

1. the target's one-token step over a static cache, replayed from a CUDA graph (goal: <= 2.5 ms);
2. c = the 160m draft's graphed step / the target's (goal: <= 0.3);
3. speculative decoding with an all-accepting draft (a copy of the target: every token accepted) against
   our eager greedy decoding (goal: >= 2x);
4. ours against HF assisted generation with the same draft and k, all accepted (the copy) and all rejected
   (the random 160m: acceptance ~0) (goal: >= 1.15x each).

Also: the eager step costs beside the graphed ones, the time of the first graphed call (captures included),
whether every method's tokens equal our eager greedy's (fp16: a near-tie may differ; fp32 must not), and
each timing's spread (median of interleaved repeats, [q1, q3]). A benchmark, not a test: nothing asserts.

    python benchmarks/graphs_goals.py                              # a GPU: fp16, full size
    python benchmarks/graphs_goals.py --device cpu --scale 0.0625  # the same code on a CPU in seconds (no graphs:
                                                                   # "ours" runs the same static-cache steps eagerly)
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pythia_random_timing import build, device_and_dtype, shape_parser

from specdec_helpers.core.decode import greedy_decode, speculative_decode
from specdec_helpers.core.graphs import static_forward
from specdec_helpers.core.timing import interleaved_order, spread, timed
from specdec_helpers.measure.methods import _constant_k, _quiet_transformers
from specdec_helpers.measure.results import environment
from specdec_helpers.measure.theory import measure_forward_cost

GOALS = {
    "target_step_ms": ("<=", 2.5),
    "c": ("<=", 0.3),
    "all_accepted_vs_eager_greedy": (">=", 2.0),
    "vs_hf_assisted_all_accepted": (">=", 1.15),
    "vs_hf_assisted_all_rejected": (">=", 1.15),
}


def reached(name: str, value: float) -> bool:
    op, goal = GOALS[name]
    return value <= goal if op == "<=" else value >= goal


def main(argv=None) -> int:
    parser = shape_parser(__doc__, "0.0625")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats of each decode")
    parser.add_argument("--vocab", type=int, default=50304, help="vocabulary size (smaller: a quick smoke run)")
    args = parser.parse_args(argv)
    device, dtype = device_and_dtype(args)
    cuda = device.type == "cuda"
    target = build("pythia-1.4b", args.scale, device, dtype, 0, args.vocab)
    draft = build("pythia-160m", args.scale, device, dtype, 1, args.vocab)
    accepting = copy.deepcopy(target)  # drafts exactly what the target would say: every token accepted
    for model in (target, draft, accepting):
        model.generation_config.eos_token_id = None  # random weights: never stop early
        model.generation_config.pad_token_id = 0
    ids = torch.randint(0, min(args.vocab, 50000), (1, 32), generator=torch.Generator().manual_seed(0)).to(device)
    k, n = args.k, args.max_new_tokens

    # The first graphed call captures its graphs (one per pass size): its time bounds the capture cost.
    _, first_call_s = timed(
        lambda: speculative_decode(
            target, draft, ids, max_new_tokens=n, num_speculative_tokens=k, eos_token_id=[], graphs=True
        ),
        device,
    )

    # Step costs, eager and over static caches (graphed on CUDA).
    sizes = [1, k + 1]
    eager_t = measure_forward_cost(target, ids, sizes=sizes, repeats=9)
    eager_d = measure_forward_cost(draft, ids, sizes=[1], repeats=9)
    graph_t = measure_forward_cost(static_forward(target, cuda), ids, sizes=sizes, repeats=9)
    graph_d = measure_forward_cost(static_forward(draft, cuda), ids, sizes=[1], repeats=9)
    step, verify, draft_step = graph_t["median_s"][0], graph_t["median_s"][1], graph_d["median_s"][0]

    def ours(drafter, graphs):
        return lambda: (
            speculative_decode(
                target, drafter, ids, max_new_tokens=n, num_speculative_tokens=k, eos_token_id=[], graphs=graphs
            ).sequences
        )

    def hf(assistant):
        kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, pad_token_id=0)
        if assistant is None:
            return lambda: target.generate(ids, **kwargs)

        def run():
            with _constant_k(assistant, k):
                return target.generate(ids, assistant_model=assistant, **kwargs)

        return run

    methods = {
        "greedy_eager": lambda: greedy_decode(target, ids, max_new_tokens=n, eos_token_id=[], graphs=False).sequences,
        "greedy_graphs": lambda: greedy_decode(target, ids, max_new_tokens=n, eos_token_id=[], graphs=True).sequences,
        "ours_all_accepted": ours(accepting, True),
        "ours_all_rejected": ours(draft, True),
        "ours_all_accepted_eager": ours(accepting, False),
        "ours_all_rejected_eager": ours(draft, False),
        "hf_greedy": hf(None),
        "hf_all_accepted": hf(accepting),
        "hf_all_rejected": hf(draft),
    }
    times, outputs = {name: [] for name in methods}, {}
    with _quiet_transformers(), torch.inference_mode():
        for name, fn in methods.items():  # warm-up (and each method's tokens)
            outputs[name] = fn()
        for name in interleaved_order(list(methods), args.repeats):
            times[name].append(timed(methods[name], device)[1])
    med = {name: spread(values) for name, values in times.items()}
    expected = outputs["greedy_eager"]

    def ratio(slow, fast):
        return med[slow]["median"] / med[fast]["median"]

    goals = {
        "target_step_ms": step * 1e3,
        "c": draft_step / step,
        "all_accepted_vs_eager_greedy": ratio("greedy_eager", "ours_all_accepted"),
        "vs_hf_assisted_all_accepted": ratio("hf_all_accepted", "ours_all_accepted"),
        "vs_hf_assisted_all_rejected": ratio("hf_all_rejected", "ours_all_rejected"),
    }
    result = dict(
        environment=environment(device, dtype, "pythia-1.4b/160m random weights"),
        scale=args.scale,
        k=k,
        max_new_tokens=n,
        cuda_graphs=cuda,
        first_graphed_call_s=round(first_call_s, 3),
        graphs_captured=static_forward(target, cuda).captured + static_forward(draft, cuda).captured,
        steps_ms=dict(
            target_eager=eager_t["median_s"][0] * 1e3,
            target_graphed=step * 1e3,
            verify_eager=eager_t["median_s"][1] * 1e3,
            verify_graphed=verify * 1e3,
            draft_eager=eager_d["median_s"][0] * 1e3,
            draft_graphed=draft_step * 1e3,
        ),
        c_eager=eager_d["median_s"][0] / eager_t["median_s"][0],
        decode_s={
            name: {key: round(value, 4) for key, value in s.items() if key in ("median", "q1", "q3")}
            for name, s in med.items()
        },
        graphs_vs_eager_greedy=ratio("greedy_eager", "greedy_graphs"),
        ours_greedy_vs_hf_greedy=ratio("hf_greedy", "greedy_eager"),
        identical_to_greedy={name: bool(torch.equal(out, expected)) for name, out in outputs.items()},
        goals={
            name: dict(value=round(value, 3), goal=" ".join(map(str, GOALS[name])), reached=reached(name, value))
            for name, value in goals.items()
        },
    )
    result["steps_ms"] = {key: round(value, 3) for key, value in result["steps_ms"].items()}
    print(json.dumps(result, indent=1))
    print(f"\ngoals ({result['environment'].get('device', device)}, {dtype}, scale {args.scale}, k={k}):")
    for name, row in result["goals"].items():
        print(
            f"  {name:32s} {row['value']:8.3f}  goal {row['goal']:8s} {'reached' if row['reached'] else 'NOT reached'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
