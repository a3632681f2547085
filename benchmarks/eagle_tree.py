"""Feature-draft trees (EAGLE-2 style) against the default chain, HF prompt lookup and greedy, on smollm2-135m.

    python benchmarks/eagle_tree.py [--shapes 2x2x2,3x3x3] [--repeats 2] [--max-new-tokens 100]

perf's 5 prompts, the preset's k. Per prompt, interleaved: our greedy, HF greedy and HF prompt lookup (the best HF method is the faster of the two, per prompt),
the default `prompt-lookup:2` chain, and `tree:SHAPE:hybrid:eagle` (the shipped feature draft's greedy tree plus
the 2-token lookup's branch, up to k long) for each shape, plus `tree:SHAPE:eagle` for the first shape. Timed
repeats after one warm-up; median per prompt; geometric means of per-prompt ratios. Every output must equal
greedy. `perf --draft default,tree:...` times the same trees (with HF greedy/assisted beside each); this script
interleaves all of them in one schedule, so their ratios to each other come from the same minutes.
One machine, one run: read the ratios, and the load (`uptime`) printed with them.
"""

import argparse
import math
import os
import statistics
import time

import torch

from specdec_helpers.core.decode import greedy_decode, speculative_decode
from specdec_helpers.core.tree import tree_speculative_decode
from specdec_helpers.measure.bench import PA3_PROMPTS, preset_prompts
from specdec_helpers.models.pairs import load_pair


def geometric_mean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="2x2x2,3x3x3,4x1x1")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=5, help="the first N of perf's 5 prompts")
    parser.add_argument("--alone", action="store_true", help="also the first shape over the feature draft alone")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair("smollm2-135m")  # the preset's default draft: prompt-lookup:2
    target, k, n = pair.target, pair.num_speculative_tokens, args.max_new_tokens
    hybrid, alone = pair.with_draft("hybrid:eagle").draft, pair.with_draft("eagle").draft
    shapes = [tuple(int(w) for w in s.split("x")) for s in args.shapes.split(",")]

    def tree(draft, shape):
        return lambda ids: tree_speculative_decode(target, draft, ids, max_new_tokens=n, tree=shape, lookup_tokens=k)

    def hf(**kwargs):
        return lambda ids: (
            target.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=n,
                pad_token_id=target.generation_config.eos_token_id,
                **kwargs,
            ),
            None,
        )

    methods = {
        "greedy": lambda ids: greedy_decode(target, ids, max_new_tokens=n),
        "hf greedy": hf(),
        "hf prompt lookup": hf(prompt_lookup_num_tokens=k),
        "prompt-lookup:2 (default)": lambda ids: speculative_decode(
            target, pair.draft, ids, max_new_tokens=n, num_speculative_tokens=k
        ),
        **{f"tree:{'x'.join(map(str, s))}:hybrid:eagle": tree(hybrid, s) for s in shapes},
    }
    if args.alone:
        methods[f"tree:{'x'.join(map(str, shapes[0]))}:eagle"] = tree(alone, shapes[0])
    prompts = (PA3_PROMPTS + preset_prompts("smollm2-135m"))[: args.prompts]
    times = {name: [[] for _ in prompts] for name in methods}
    per_call = {name: [] for name in methods}
    print(f"load before: {os.getloadavg()}", flush=True)
    for repeat in range(args.repeats + 1):  # the first is a warm-up, on the first prompt only
        for i, prompt in enumerate(prompts if repeat else prompts[:1]):
            ids = pair.encode(prompt)
            reference = None
            for name, run in methods.items():
                start = time.perf_counter()
                out = run(ids)
                seconds = time.perf_counter() - start
                sequences = out[0] if isinstance(out, tuple) else out.sequences
                reference = sequences if reference is None else reference
                assert torch.equal(sequences, reference), f"{name} differs from greedy on prompt {i}"
                if repeat:
                    times[name][i].append(seconds)
                    if not isinstance(out, tuple) and name != "greedy":
                        per_call[name].append(out.stats.mean_accepted_length)
        print(f"repeat {repeat} done{' (warm-up)' if not repeat else ''}; load {os.getloadavg()}", flush=True)
        if repeat:
            summary(methods, times, per_call)


def summary(methods, times, per_call):
    """Geometric means over prompts of the per-prompt medians so far."""
    median = {name: [statistics.median(t) for t in ts] for name, ts in times.items()}
    best_hf = [min(a, b) for a, b in zip(median["hf prompt lookup"], median["hf greedy"])]
    for name in methods:
        vs_greedy = [g / t for g, t in zip(median["greedy"], median[name])]
        vs_default = [d / t for d, t in zip(median["prompt-lookup:2 (default)"], median[name])]
        vs_hf = [h / t for h, t in zip(best_hf, median[name])]
        calls = f", {statistics.mean(per_call[name]):.2f} tokens/call" if per_call[name] else ""
        print(
            f"{name:32s} vs greedy {geometric_mean(vs_greedy):.3f}x ({', '.join(f'{r:.2f}' for r in vs_greedy)}); "
            f"vs default {geometric_mean(vs_default):.3f}x ({', '.join(f'{r:.2f}' for r in vs_default)}); "
            f"vs best HF {geometric_mean(vs_hf):.3f}x{calls}",
            flush=True,
        )


if __name__ == "__main__":
    main()
