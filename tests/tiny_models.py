"""Tiny random models built in memory (seconds), for the core tests.

A plain module, not conftest.py: notebooks/ has a conftest of its own, and `from conftest import`
would pick whichever pytest imported first."""

from __future__ import annotations

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

from specdec_helpers.assignment.testing.world import perturbed_copy  # noqa: F401 - the grading world's drafts, the tests' too

# Tiny models gain nothing from threads, and CI machines have 2 cores: avoid oversubscription.
torch.set_num_threads(1)

VOCAB = 64
FAMILIES = ["gpt_neox", "gpt2", "llama", "opt"]


def tiny_model(family: str, seed: int = 0, vocab: int = VOCAB, layers: int = 2, eos_token_id: int | None = None):
    """A random causal LM with a large init range, so logits are well separated (no argmax ties)."""
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, initializer_range=0.5, eos_token_id=eos_token_id, bos_token_id=0, pad_token_id=None)
    if family == "gpt_neox":
        cfg = GPTNeoXConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=256,
            **common,
        )
        model = GPTNeoXForCausalLM(cfg)
    elif family == "gpt2":
        cfg = GPT2Config(n_embd=32, n_layer=layers, n_head=4, n_positions=256, **common)
        model = GPT2LMHeadModel(cfg)
    elif family == "llama":
        cfg = LlamaConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            max_position_embeddings=256,
            **common,
        )
        model = LlamaForCausalLM(cfg)
    elif family == "opt":
        cfg = OPTConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            ffn_dim=64,
            word_embed_proj_dim=32,
            max_position_embeddings=256,
            **common,
        )
        model = OPTForCausalLM(cfg)
    else:
        raise ValueError(family)
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = eos_token_id if eos_token_id is not None else 0
    return model.eval()


def hf_greedy(target, input_ids, max_new_tokens, eos_token_id=None):
    kwargs = {} if eos_token_id is None else {"eos_token_id": eos_token_id}
    with torch.no_grad():
        return target.generate(
            input_ids,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            attention_mask=torch.ones_like(input_ids),
            **kwargs,
        )
