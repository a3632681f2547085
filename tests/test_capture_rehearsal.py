"""The capture rehearsal: a CPU run of a step that names what a CUDA graph capture could not record.

Calibrated on an H200 (transformers 5.24): OPT's step failed to capture (its mask is sized by the cache's 0-d length
tensor, a host read), while GPT-NeoX, Llama and GPT-2 captured at every pass size. The sweep keeps
`HOST_READING_FAMILIES` true for the decoder families transformers builds tiny here."""

from __future__ import annotations

import warnings

import pytest
import torch
from tiny_models import tiny_model
from transformers import AutoConfig, AutoModelForCausalLM

from specdec_helpers.core import capture_rehearsal
from specdec_helpers.core.cache import plain_static_layers
from specdec_helpers.core.capture_rehearsal import (
    HOST_READING_FAMILIES,
    host_reads,
    rehearse_step,
)

SIZES = range(1, 17)  # graphs' pass sizes: 1 (a draft step) to 16 tokens
FAST_SIZE = 4


def _sizes():
    return [pytest.param(n, marks=() if n == FAST_SIZE else pytest.mark.slow) for n in SIZES]


X = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))

CAUGHT = {  # step -> what the finding must name
    ".item()": (lambda x: x.sum().item(), "host read: aten._local_scalar_dense"),
    "int(t)": (lambda x: int(x[0, 0]), "host read: aten._local_scalar_dense"),
    "bool(t)": (lambda x: bool(x[0, 0] > 0), "host read: aten._local_scalar_dense"),
    ".tolist()": (lambda x: x.tolist(), "host read: Tensor.tolist"),
    ".cpu()": (lambda x: x.cpu(), "host copy: Tensor.cpu"),
    "torch.equal": (lambda x: torch.equal(x, x), "host read: aten.equal"),
    "torch.nonzero": (lambda x: torch.nonzero(x > 0), "data-dependent shape: aten.nonzero"),
    "x[mask]": (lambda x: x[x > 0], "data-dependent shape: aten.index with a boolean mask"),
    "x[mask] = 0": (lambda x: x.clone().__setitem__(x > 0, 0.0), "data-dependent shape: aten.index_put_"),
    "torch.unique": (lambda x: torch.unique(x), "data-dependent shape: aten._unique2"),
    "repeat_interleave": (
        lambda x: x.repeat_interleave((x[0] > 0).long() + 1, dim=0),
        "data-dependent shape: aten.repeat_interleave",
    ),
    "ones(n) from a device int": (lambda x: torch.ones(2, (x[0, 0] > 0).long() + 3), "host read"),
    "a factory naming the device": (lambda x: torch.arange(4, device=x.device).sum().item(), "host read"),
}


@pytest.mark.parametrize("inference", [False, True], ids=["no_grad", "inference_mode"])
@pytest.mark.parametrize("name", CAUGHT)
def test_host_reads_catches(name, inference):
    """Each fault is named with its kind, its op and this file's line (the mode sees composites such as ``item``
    undecomposed under inference mode, their parts elsewhere: both are caught)."""
    step, expected = CAUGHT[name]
    with torch.inference_mode() if inference else torch.no_grad():
        found = host_reads(step, X)
    if inference:
        expected = expected.replace("aten._local_scalar_dense", "aten.")
    assert len(found) == 1 and found[0].startswith(expected), found
    assert "test_capture_rehearsal.py:" in found[0], found


CLEAN = {  # steps a capture records: device-side work, and host reads of tensors that live on the host on a GPU too
    "matmul and softmax": lambda x: (x @ x.T).softmax(-1) + x.max(-1, keepdim=True).values,
    "factories from Python ints": lambda x: x + torch.arange(4, device=x.device) + torch.ones(4, 4, device=x.device),
    "host-made tensors read": lambda x: x + torch.tensor([1.0, 2.0, 3.0, 4.0]).tolist()[int(torch.tensor(1))],
    "masked_fill and where(c, a, b)": lambda x: torch.where(x > 0, x, 0.0).masked_fill(x < -1, 0.0),
    "repeat_interleave with its size": lambda x: x.repeat_interleave((x[0] * 0).long() + 2, dim=0, output_size=8),
}


@pytest.mark.parametrize("name", CLEAN)
def test_host_reads_passes_device_work(name):
    with torch.inference_mode():
        assert host_reads(CLEAN[name], X) == []


def test_a_device_tensor_read_on_the_host_is_caught_through_its_history():
    """A tensor made from device data is device data, however many operations later."""
    found = host_reads(lambda x: float(((x * 2).exp()[1:, :2].sum(0) + torch.tensor(1.0))[0]), X)
    assert [f.split(" at ")[0] for f in found] == ["host read: aten._local_scalar_dense"]


@pytest.fixture(scope="module")
def controls():
    return {family: tiny_model(family) for family in ("opt", "gpt_neox", "llama", "gpt2")}


@pytest.mark.parametrize("n", _sizes())
def test_opt_step_reads_the_host(controls, n):
    """The H200's failure, found on the CPU: OPT sizes its position mask from the cache's length tensor."""
    found = rehearse_step(controls["opt"], n)
    assert any(f.startswith("host read: aten.") and "modeling_opt.py:" in f for f in found), found


@pytest.mark.parametrize("family", ["gpt_neox", "llama", "gpt2"])
@pytest.mark.parametrize("n", _sizes())
def test_captured_families_do_not_read_the_host(controls, family, n):
    """These captured on an H200 at every size; a rehearsal that flagged them would only teach people to ignore it."""
    assert rehearse_step(controls[family], n) == []


def test_the_rehearsal_takes_the_path_a_capture_takes(controls, monkeypatch):
    """transformers asks ``torch.cuda.is_current_stream_capturing()``: outside a capture, a multi-token step reads the
    cache's length on the host (``_ignore_causal_mask_sdpa``), inside one it does not. The rehearsal answers as a
    capture does; answering as eager code does would flag Llama, which captured fine."""
    original = torch.cuda.is_current_stream_capturing
    monkeypatch.setattr(capture_rehearsal, "_capturing", lambda: False)
    found = rehearse_step(controls["llama"], 2)
    assert [f.split(" at ")[0] for f in found] == ["host read: aten.is_nonzero"], found
    assert "masking_utils.py:" in found[0] and "_ignore_causal_mask_sdpa" in found[0], found
    assert torch.cuda.is_current_stream_capturing is original  # given back


# A few arguments make every family tiny; the rest are per family. Families whose static cache is not plain
# full-attention (sliding windows: gemma2, gemma3, cohere2, olmo3, ...) are out of the kit's capture path.
DROP = object()  # an argument of TINY that a family's config does not take
TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 256,
    "head_dim": 8,
    "pad_token_id": 0,
    "bos_token_id": 0,
    "eos_token_id": None,
    "num_experts": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
}
NO_WINDOW = {"sliding_window": None}  # their full-attention configuration (Mistral 7B v0.2 on), a plain static cache
ROTARY = {"rotary_dim": 4}  # within the tiny head
FAMILIES = {
    "biogpt": {},
    "bloom": {},
    "codegen": ROTARY,
    "cohere": {},
    "ernie4_5": {},
    "falcon": {"head_dim": DROP},
    "gemma": {},
    "glm": {},
    "glm4": {},
    "gpt2": {},
    "gpt_bigcode": {},
    "gpt_neox": {},
    "gptj": ROTARY,
    "granite": {},
    "granitemoe": {},
    "helium": {},
    "internlm3": {},
    "jetmoe": {},
    "llama": {},
    "mistral": NO_WINDOW,
    "mixtral": NO_WINDOW,
    "mpt": {},
    "nemotron": {},
    "olmo": {},
    "olmo2": {},
    "olmoe": {},
    "opt": {},
    "persimmon": {},
    "phi": {},
    "phi3": {},
    "phimoe": NO_WINDOW,
    "qwen2": {},
    "qwen2_moe": {},
    "qwen3": {},
    "qwen3_moe": {},
    "seed_oss": {},
    "smollm3": {},
    "stablelm": {},
    "starcoder2": NO_WINDOW,
    "xglm": {},
}


def tiny_family(family: str):
    kwargs = {k: v for k, v in {**TINY, **FAMILIES[family]}.items() if v is not DROP}
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(family, **kwargs)).eval()


@pytest.mark.slow
def test_host_reading_families_are_the_recorded_ones():
    """Every swept family, every pass size: those whose step reads the host are exactly `HOST_READING_FAMILIES`."""
    found = {}
    for family in FAMILIES:
        model = tiny_family(family)
        assert model.config.model_type == family and plain_static_layers(model), family
        assert sum(p.numel() for p in model.parameters()) < 2_000_000, f"{family} is not tiny"
        for n in SIZES:
            found[family] = found.get(family) or rehearse_step(model, n)
    flagged = {family for family, findings in found.items() if findings}
    assert flagged == HOST_READING_FAMILIES & set(FAMILIES), {f: found[f] for f in flagged ^ HOST_READING_FAMILIES}
