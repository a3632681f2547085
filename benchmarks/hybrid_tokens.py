"""How many tokens should the feature draft propose behind n-gram lookup? (`eagle.HYBRID_TOKENS`)

    python benchmarks/hybrid_tokens.py [--drafts FOLDER,...] [--tokens 1,2,3] [--repeats 3]

smollm2-135m, perf's 5 prompts, 100 new tokens, the preset's k: greedy, lookup alone and the lookup followed
by the feature draft (the shipped one, or each saved draft FOLDER) proposing 1, 2, 3 tokens, interleaved per
prompt, timed repeats after a warm-up. Prints the geometric mean of per-prompt speedups over greedy and the
tokens per target call; asserts every output equals greedy. One run, one machine: read the ratios.
"""

import argparse
import math
import statistics
import time
from pathlib import Path

import torch

from specdec_helpers.core.decode import greedy_decode, speculative_decode
from specdec_helpers.core.drafters import HybridDrafter
from specdec_helpers.measure.sweep import PA3_PROMPTS, preset_prompts
from specdec_helpers.models.drafts import eagle
from specdec_helpers.models.pairs import load_pair

NAME = "smollm2-135m-instruct-q4_1-v1"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafts", default=str(eagle.shipped_dir(NAME)))
    parser.add_argument("--tokens", default="1,2,3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair("smollm2-135m", draft="prompt-lookup:2")
    target, k = pair.target, pair.num_speculative_tokens
    drafters = {"prompt-lookup:2": lambda: pair.draft}
    for folder in args.drafts.split(","):
        draft = eagle.load_eagle(target, Path(folder))
        for m in (int(x) for x in args.tokens.split(",")):
            drafters[f"{Path(folder).name} x{m}"] = lambda draft=draft, m=m: HybridDrafter(
                eagle.FeatureDrafter(draft), model_tokens=m
            )
    prompts = PA3_PROMPTS + preset_prompts("smollm2-135m")
    times = {name: [[] for _ in prompts] for name in ["greedy", *drafters]}
    per_call = {name: [] for name in drafters}
    for repeat in range(args.repeats + 1):  # the first is a warm-up
        for i, prompt in enumerate(prompts):
            ids = pair.encode(prompt)
            start = time.perf_counter()
            reference = greedy_decode(target, ids, max_new_tokens=100).sequences
            elapsed = {"greedy": time.perf_counter() - start}
            for name, make in drafters.items():
                start = time.perf_counter()
                out = speculative_decode(target, make(), ids, max_new_tokens=100, num_speculative_tokens=k)
                elapsed[name] = time.perf_counter() - start
                assert torch.equal(out.sequences, reference), f"{name} differs from greedy on prompt {i}"
                per_call[name].append(out.stats.mean_accepted_length)
            if repeat:
                for name, seconds in elapsed.items():
                    times[name][i].append(seconds)
        print(f"repeat {repeat} done" + (" (warm-up)" if not repeat else ""), flush=True)
    for name in drafters:
        ratios = [
            statistics.median(times["greedy"][i]) / statistics.median(times[name][i]) for i in range(len(prompts))
        ]
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(
            f"{name:50s} {mean:.3f}x over greedy (per prompt {', '.join(f'{r:.2f}' for r in ratios)}), "
            f"{statistics.mean(per_call[name]):.2f} tokens per target call"
        )


if __name__ == "__main__":
    main()
