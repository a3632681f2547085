"""Throughput (tokens/s over the batch) against batch size, greedy vs speculative, with the predicted ratio.

    python benchmarks/batch_sweep.py --presets toy --batch-sizes 1,2,4,8,16

For each batch size: the measured speculative/greedy ratio (median of interleaved pairs, with its
spread), the costs of one target step, one verify pass of k + 1 tokens per row and one draft step over
the batch, and the ratio those costs predict (`measure.batching`'s docstring derives it). One run, one
machine: read the ratios, not the absolute times, and say the load (`uptime`) with them.
"""

from __future__ import annotations

import argparse

import torch

import specdec_helpers as sd
from specdec_helpers.measure.batching import batch_costs, batch_sweep, predicted_batch_speedup
from specdec_helpers.measure.sweep import PA3_PROMPTS, preset_prompts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="toy")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16")
    parser.add_argument("--k", type=int, default=None, help="draft tokens per round (default: the preset's)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    for preset in args.presets.split(","):
        pair = sd.load_pair(preset)
        k = args.k or pair.num_speculative_tokens
        prompts = [pair.encode(p) for p in PA3_PROMPTS + preset_prompts(pair.preset)]
        print(
            f"\n{preset}: k={k}, {args.max_new_tokens} new tokens a row, {len(prompts)} prompts cycled, "
            f"{torch.get_num_threads()} threads"
        )
        rows = batch_sweep(
            pair.target,
            pair.draft,
            prompts,
            batch_sizes=sizes,
            num_speculative_tokens=k,
            max_new_tokens=args.max_new_tokens,
            repeats=args.repeats,
        )
        model = getattr(pair.draft, "model", pair.draft)
        costs = batch_costs(
            pair.target,
            model if isinstance(model, torch.nn.Module) else None,
            batch_sizes=sizes,
            num_speculative_tokens=k,
        )
        print(
            f"\n{'batch':>5} {'step ms':>8} {'verify ms':>10} {'verify/step':>12} {'draft ms':>9} "
            f"{'predicted':>10} {'measured':>9}"
        )
        for r, c in zip(rows, costs):
            print(
                f"{c['batch']:>5} {1e3 * c['target_step_s']:>8.2f} {1e3 * c['verify_s']:>10.2f} "
                f"{c['verify_over_step']:>12.2f} {1e3 * c['draft_step_s']:>9.2f} "
                f"{predicted_batch_speedup(c, r['alpha']):>9.2f}x {r['ratio']:>8.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
