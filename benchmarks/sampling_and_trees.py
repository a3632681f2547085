"""Acceptance vs temperature (speculative sampling) and tree vs chain (greedy and sampling), per preset.

    python benchmarks/sampling_and_trees.py --presets toy,smollm2-135m

One run, one machine: read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse

import torch

import specdec_helpers as sd
from specdec_helpers.measure.sweep import PA3_PROMPTS
from specdec_helpers.measure.tree_vs_chain import compare_tree_chain_sampling


def acceptance_vs_temperature(pair, prompts, temperatures, k, max_new_tokens, seed=0):
    print(f"\n{pair.preset}: acceptance vs temperature (k={k}, {max_new_tokens} new tokens, {len(prompts)} prompts)")
    print(f"{'T':>5} {'acceptance':>11} {'tokens/target call':>19}")
    for temperature in temperatures:
        accepted = proposed = new = calls = 0
        for i, prompt in enumerate(prompts):
            out = sd.speculative_decode(
                pair.target,
                pair.draft,
                pair.encode(prompt),
                max_new_tokens=max_new_tokens,
                num_speculative_tokens=k,
                temperature=temperature,
                generator=torch.Generator().manual_seed(seed + i),
            )
            s = out.stats
            accepted, proposed, new, calls = (
                accepted + s.accepted,
                proposed + s.proposed,
                new + s.new_tokens,
                calls + s.target_calls,
            )
        print(f"{temperature:>5} {accepted / max(proposed, 1):>11.1%} {new / calls:>19.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="toy,smollm2-135m")
    parser.add_argument("--temperatures", default="0,0.3,0.7,1.0,1.5")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--tree", default="3,2,2,1,1", help="nodes kept per depth")
    parser.add_argument("--tree-temperature", type=float, default=0.8, help="for tree vs chain when sampling")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    temperatures = [float(t) for t in args.temperatures.split(",")]
    for preset in args.presets.split(","):
        pair = sd.load_pair(preset)
        prompts = PA3_PROMPTS
        acceptance_vs_temperature(pair, prompts, temperatures, pair.num_speculative_tokens, args.max_new_tokens)
        print(f"\n{preset}: tree vs chain")
        tree = tuple(int(w) for w in args.tree.split(","))
        sd.compare_tree_chain(pair, None, prompts, tree=tree, max_new_tokens=args.max_new_tokens)
        print(f"\n{preset}: tree vs chain, sampling (multi-draft rejection sampling, both rules)")
        compare_tree_chain_sampling(
            pair, None, prompts, tree=tree, temperature=args.tree_temperature, max_new_tokens=args.max_new_tokens
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
