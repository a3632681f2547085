"""Graphs vs eager vs HF greedy on tiny random models of each family the presets use (a part of run.sh).

On CUDA the kit decodes over static caches replayed from CUDA graphs by default (`graphs=None`); this checks,
per family, that the default path, our eager path (`graphs=False`) and HF's `generate` give the same greedy
tokens (greedy decoding, self-draft speculative decoding at k = 1, 3 and auto), that sampling with a generator
on the model's device runs on both paths, and that each family leaves the process usable for the next: the
default stream is current again and a device random call works (a failed capture once broke both, issue #42).
The first family runs again last, after every other. fp32: tokens must be identical. A benchmark: it prints
one line per family, writes a JSON with --json, and exits 1 when a family disagrees or breaks the process.

    python benchmarks/gpu/graphs_agree.py                        # CUDA when there is a GPU
    python benchmarks/gpu/graphs_agree.py --device cpu --tokens 8  # the same code on a CPU (graphs stay off)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    OPTConfig,
    OPTForCausalLM,
)

from specdec_helpers.core.decode import greedy_decode, speculative_decode

FAMILIES = ("gpt_neox", "llama", "gpt2", "opt")


def tiny(family: str, device, dtype, vocab: int = 96):
    """A random two-layer model; a large init range keeps logits apart (no argmax near-ties)."""
    torch.manual_seed(0)
    common = dict(vocab_size=vocab, initializer_range=0.5, bos_token_id=0, eos_token_id=None, pad_token_id=None)
    if family == "gpt_neox":
        model = GPTNeoXForCausalLM(
            GPTNeoXConfig(
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=128,
                max_position_embeddings=256,
                **common,
            )
        )
    elif family == "llama":
        model = LlamaForCausalLM(
            LlamaConfig(
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=128,
                max_position_embeddings=256,
                **common,
            )
        )
    elif family == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=256, **common))
    else:
        model = OPTForCausalLM(
            OPTConfig(
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                ffn_dim=128,
                word_embed_proj_dim=64,
                max_position_embeddings=256,
                **common,
            )
        )
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.to(device=device, dtype=dtype).eval()


def check_family(family: str, device, dtype, tokens: int) -> dict:
    model = tiny(family, device, dtype)
    ids = torch.randint(1, 96, (1, 12), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.inference_mode():
        hf = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=tokens)
    runs = {"greedy": lambda graphs: greedy_decode(model, ids, max_new_tokens=tokens, eos_token_id=[], graphs=graphs)}
    for k in (1, 3, "auto"):
        runs[f"self-draft k={k}"] = lambda graphs, k=k: speculative_decode(
            model, model, ids, max_new_tokens=tokens, num_speculative_tokens=k, eos_token_id=[], graphs=graphs
        )
    mismatches, errors = [], []
    for name, run in runs.items():
        for graphs, label in ((None, "default"), (False, "eager")):
            try:
                if not torch.equal(run(graphs).sequences, hf):
                    mismatches.append(f"{name} {label}")
            except Exception as error:  # noqa: BLE001 - a benchmark reports, and goes on to the next family
                errors.append(f"{name} {label}: {type(error).__name__}: {error}"[:300])
    sampled = {}
    for graphs, label in ((None, "default"), (False, "eager")):
        try:
            generator = torch.Generator(device).manual_seed(0)
            sampled[label] = speculative_decode(
                model,
                model,
                ids,
                max_new_tokens=tokens,
                num_speculative_tokens=3,
                temperature=1.0,
                eos_token_id=[],
                generator=generator,
                graphs=graphs,
            ).sequences
        except Exception as error:  # noqa: BLE001 - reported in the summary, the next run goes on
            errors.append(f"sampling {label}: {type(error).__name__}: {error}"[:300])
    usable = process_usable(device)
    if usable is not True:
        errors.append(usable)
    return dict(
        family=family,
        identical=not mismatches and not errors,
        mismatches=mismatches,
        errors=errors,
        sampling_same_as_eager=(torch.equal(sampled["default"], sampled["eager"]) if len(sampled) == 2 else None),
    )


def process_usable(device) -> bool | str:
    """True when the default stream is current and a random call on the device works, else what broke."""
    try:
        if device.type == "cuda" and torch.cuda.current_stream(device) != torch.cuda.default_stream(device):
            return "the current stream is not the default stream after this family"
        torch.rand(4, device=device)
        return True
    except Exception as error:  # noqa: BLE001 - any error here is the finding
        return f"a random call on {device} fails after this family: {type(error).__name__}: {error}"[:300]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="fp32")
    parser.add_argument("--tokens", type=int, default=24, help="new tokens per decode")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    start, rows = time.perf_counter(), []
    for family in (*FAMILIES, FAMILIES[0]):
        row = check_family(family, device, dtype, args.tokens)
        rows.append(row)
        detail = "; ".join(row["mismatches"] + row["errors"]) or "identical"
        print(f"{family:9s} {'pass' if row['identical'] else 'FAIL'}  {detail}", flush=True)
    result = dict(
        device=str(device),
        dtype=args.dtype,
        tokens=args.tokens,
        families=rows,
        passed=all(row["identical"] for row in rows),
        seconds=round(time.perf_counter() - start, 1),
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"graphs vs eager vs HF: {'all identical' if result['passed'] else 'FAILED'} on {device} ({args.dtype})")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
