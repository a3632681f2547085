"""oneDNN packed Linear layers: same numbers as nn.Linear, same state, lossless decoding, clean undo."""

import copy

import pytest
import torch
from tiny_models import VOCAB, hf_greedy, tiny_model

from specdec_helpers.core import cpu_kernels
from specdec_helpers.core.cpu_kernels import (
    OneDNNLinear,
    onednn_available,
    use_onednn_linears,
    use_plain_linears,
    uses_onednn,
)
from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.models.drafts.int8 import int8_copy

# CI's CPU build of torch has oneDNN; if a build lacked it, every test below would fail loudly, not skip.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_this_torch_has_the_operators():
    assert onednn_available()


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_matches_nn_linear(rows, bias):
    torch.manual_seed(0)
    linear = torch.nn.Linear(24, 40, bias=bias)
    packed = OneDNNLinear(linear)
    x = torch.randn(2, rows, 24)
    with torch.no_grad():
        torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)
    assert packed.weight is linear.weight and packed.bias is linear.bias


def test_swap_keeps_state_dict_tied_head_and_outputs(family):
    model = tiny_model(family)
    reference = copy.deepcopy(model)
    keys = list(model.state_dict())
    use_onednn_linears(model)
    assert uses_onednn(model) and not any(type(m) is torch.nn.Linear for m in model.modules())
    assert list(model.state_dict()) == keys  # the packed copy is not saved
    head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    if reference.get_output_embeddings().weight is reference.get_input_embeddings().weight:
        assert head.weight is embeddings.weight  # tied stays tied
    ids = torch.randint(0, VOCAB, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=1e-4, atol=1e-4)
    use_plain_linears(model)
    assert not uses_onednn(model) and type(model.get_output_embeddings()) is torch.nn.Linear


@pytest.mark.parametrize("k", [1, 3, 6])
def test_packed_target_and_draft_stay_lossless(family, k):
    target = use_onednn_linears(tiny_model(family, seed=0))
    draft = use_onednn_linears(tiny_model(family, seed=1, layers=1))
    ids = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(k))
    out = speculative_decode(target, draft, ids, max_new_tokens=17, num_speculative_tokens=k)
    assert torch.equal(out.sequences, hf_greedy(target, ids, 17))


def test_no_operators_means_no_change(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "onednn_available", lambda: False)
    model = tiny_model("llama")
    use_onednn_linears(model)
    assert not uses_onednn(model)


def test_other_dtypes_are_left_alone():
    model = tiny_model("gpt2").to(torch.bfloat16)
    use_onednn_linears(model)
    assert not uses_onednn(model)


def test_int8_copy_of_a_packed_model_quantizes_every_linear():
    model = use_onednn_linears(tiny_model("llama"))
    quantized = int8_copy(model)
    assert not uses_onednn(quantized)
    assert not any(type(m) is torch.nn.Linear for m in quantized.modules())
    assert uses_onednn(model)  # the original is untouched


@pytest.mark.parametrize(
    "move",
    [
        lambda m: m.half(),
        lambda m: m.to(torch.bfloat16),
        lambda m: m.to("meta"),
    ],
)
def test_packed_models_survive_dtype_and_device_moves(move):
    """These raised NotImplementedError 'MkldnnCPU' on a model from load_pair (the packed buffer moved)."""
    from specdec_helpers.models.pairs import load_pair

    pair = load_pair("toy", progress=False)
    assert uses_onednn(pair.target)
    plain = use_plain_linears(copy.deepcopy(pair.target))
    moved, expected = move(pair.target), move(plain)
    dtype = next(moved.parameters()).dtype
    assert dtype != torch.float32 or next(moved.parameters()).is_meta
    ids = torch.tensor([[5, 6, 7, 8]], device=next(moved.parameters()).device)
    with torch.no_grad():
        out, ref = moved(ids).logits, expected(ids).logits
    assert out.shape == ref.shape and out.dtype == ref.dtype
    if not out.is_meta:
        assert torch.equal(out, ref)  # no packed copy off CPU fp32: exactly nn.Linear
    tied = lambda m: m.get_output_embeddings().weight is m.get_input_embeddings().weight
    assert tied(moved) == tied(expected)  # tied as plain PyTorch leaves it (a move to meta unties both)


def test_back_to_fp32_packs_again():
    model = use_onednn_linears(tiny_model("llama"))
    plain = use_plain_linears(copy.deepcopy(model)).half().float()
    ids = torch.tensor([[1, 2, 3]])
    model.half().float()
    assert all(m.packed_weight is not None for m in model.modules() if isinstance(m, OneDNNLinear))
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, plain(ids).logits, atol=1e-4)  # oneDNN: the last bits only
