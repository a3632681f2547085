"""How much of a CPU step is transformers' Python? The model's own forward against its lean forward (`core/lean.py`).

    python benchmarks/lean_step.py [--preset smollm2-135m] [--sizes 1,2,5,11,16] [--repeats 15]

One pass of n new tokens over a cached 100-token text, for each n, the two forwards interleaved pass by pass
(the same tokens, the same packed Linear layers, bitwise the same logits: checked here too). Prints the median
milliseconds of each and their ratio with the quartiles of the per-pair ratios. One run, one machine: read the
ratios, not the milliseconds.
"""

import argparse
import statistics
import time

import torch

from specdec_helpers.core.cache import cache_kwargs, new_cache, rollback
from specdec_helpers.core.backends import lean_forward
from specdec_helpers.measure.sweep import PA3_PROMPTS
from specdec_helpers.models.pairs import load_pair


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--sizes", default="1,2,5,11,16")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(args.preset)
    model, lean = pair.target, lean_forward(pair.target)
    if lean is None:
        raise SystemExit(f"{args.preset}'s target has no lean forward (a Llama on the CPU only)")
    text = pair.encode(" ".join(PA3_PROMPTS * 4))[:, :100]
    theirs, ours = new_cache(model), lean.new_cache(200)
    with torch.inference_mode():
        model(input_ids=text, **cache_kwargs(model, theirs), use_cache=True)
        lean(text, ours)
    forwards = {"model": (model, theirs), "lean": (lean, ours)}

    @torch.inference_mode()
    def run(name, n):
        forward, cache = forwards[name]
        start = time.perf_counter()
        logits = forward(input_ids=text[:, :n], **cache_kwargs(forward, cache), use_cache=True).logits
        seconds = time.perf_counter() - start
        rollback(cache, 100)
        return logits, seconds

    print(f"{args.preset}, {args.threads} threads, one pass of n tokens after 100 cached, {args.repeats} pairs each")
    print(f"{'n':>3} {'model ms':>9} {'lean ms':>8} {'model/lean':>10} {'(q1-q3)':>12}")
    for n in (int(s) for s in args.sizes.split(",")):
        times, ratios = {"model": [], "lean": []}, []
        for repeat in range(args.repeats + 2):  # two warm-up pairs
            (a, ta), (b, tb) = run("model", n), run("lean", n)
            assert torch.equal(a, b), f"the lean forward's logits differ at n={n}"
            if repeat >= 2:
                times["model"].append(ta)
                times["lean"].append(tb)
                ratios.append(ta / tb)
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        print(
            f"{n:3d} {statistics.median(times['model']) * 1e3:9.1f} {statistics.median(times['lean']) * 1e3:8.1f} "
            f"{statistics.median(ratios):10.2f} {f'({q1:.2f}-{q3:.2f})':>12}"
        )


if __name__ == "__main__":
    main()
