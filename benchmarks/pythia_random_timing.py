"""Pythia-1.4b / 160m shaped models with RANDOM weights, built on the machine (no hub): timing only.

What it measures: one decode step of each model, the target's pass over k + 1 tokens (verification),
the cost ratio c = draft step / target step, and Leviathan's expected speedup at PA3's acceptance
(85-94%) with those costs. It also counts host-device synchronisations per speculative round on a GPU
(``torch.cuda.set_sync_debug_mode``): tests/test_sync_count.py says 1 on the CPU, this checks it on CUDA.
Random weights make acceptance meaningless (≈0): the decode timed here is the all-rejected worst case.

    python benchmarks/pythia_random_timing.py --device cuda --dtype fp16          # a T4/L4/A100
    python benchmarks/pythia_random_timing.py --device cpu --scale 0.125          # the same code, small, on a CPU
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.measure.results import environment
from specdec_helpers.measure.theory import expected_speedup, measure_forward_cost

# The published configs (hidden, layers, heads, intermediate); vocabulary 50304, rotary_pct 0.25.
SHAPES = {"pythia-1.4b": (2048, 24, 16, 8192), "pythia-160m": (768, 12, 12, 3072)}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def build(name: str, scale: float, device, dtype, seed: int, vocab: int = 50304) -> GPTNeoXForCausalLM:
    hidden, layers, heads, inter = SHAPES[name]
    if scale != 1:
        heads = max(1, round(heads * scale))
        hidden, layers, inter = heads * (hidden // SHAPES[name][2]), max(1, round(layers * scale)), round(inter * scale)
    config = GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=inter,
        rotary_pct=0.25,
        max_position_embeddings=2048,
        use_parallel_residual=True,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = GPTNeoXForCausalLM(config)
    return model.to(dtype).eval()


def syncs_per_round(target, draft, ids, k: int) -> float | None:
    """Synchronisations CUDA reports per round of a speculative decode (None on a CPU)."""
    if ids.device.type != "cuda":
        return None
    counts = []
    for n in (8, 40):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                out = speculative_decode(
                    target, draft, ids, max_new_tokens=n, num_speculative_tokens=k, eos_token_id=[]
                )
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts.append((sum("synchroniz" in str(w.message) for w in caught), out.stats.target_calls))
    (c1, r1), (c2, r2) = counts
    return (c2 - c1) / (r2 - r1) if r2 > r1 else None


def shape_parser(description: str, cpu_scale: str) -> argparse.ArgumentParser:
    """The options every Pythia-shape benchmark takes (device, dtype, scale, k, tokens, --json)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=list(DTYPES), default=None, help="default: fp16 on CUDA, fp32 on a CPU")
    parser.add_argument(
        "--scale", type=float, default=1.0, help=f"shrink widths and depths (e.g. {cpu_scale} on a CPU)"
    )
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--json", help="also write the numbers here")
    return parser


def device_and_dtype(args) -> tuple[torch.device, torch.dtype]:
    device = torch.device(args.device)
    return device, DTYPES[args.dtype or ("fp16" if device.type == "cuda" else "fp32")]


def main(argv=None) -> int:
    args = shape_parser(__doc__, "0.125").parse_args(argv)
    device, dtype = device_and_dtype(args)
    target = build("pythia-1.4b", args.scale, device, dtype, 0)
    draft = build("pythia-160m", args.scale, device, dtype, 1)
    ids = torch.randint(0, 50000, (1, 32), generator=torch.Generator().manual_seed(0)).to(device)
    sizes = [1, args.k + 1]
    t, d = measure_forward_cost(target, ids, sizes=sizes), measure_forward_cost(draft, ids, sizes=[1])
    step, verify, draft_step = t["median_s"][0], t["median_s"][1], d["median_s"][0]
    c = draft_step / step
    # A warm-up decode first: with graphs, the first decode of a cache captures every step it may use.
    speculative_decode(target, draft, ids, max_new_tokens=4, num_speculative_tokens=args.k, eos_token_id=[])
    start = time.perf_counter()
    out = speculative_decode(
        target, draft, ids, max_new_tokens=args.max_new_tokens, num_speculative_tokens=args.k, eos_token_id=[]
    )
    seconds = time.perf_counter() - start
    result = dict(
        environment=environment(device, dtype, "pythia-1.4b/160m random weights"),
        scale=args.scale,
        k=args.k,
        target_step_ms=round(step * 1e3, 3),
        target_verify_ms=round(verify * 1e3, 3),
        verify_over_step=round(verify / step, 3),
        draft_step_ms=round(draft_step * 1e3, 3),
        c=round(c, 4),
        bound_at_alpha={a: round(expected_speedup(a, args.k, c), 3) for a in (0.85, 0.9, 0.94)},
        all_rejected_decode_tokens_per_s=round(out.stats.new_tokens / seconds, 2),
        syncs_per_round=syncs_per_round(target, draft, ids, args.k),
    )
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
