"""Static caches with replayed steps (`core/graphs.py`, ``graphs=True``): the same tokens as greedy decoding,
rollback by moving a position, one step per pass size, caches and steps kept for the next decode.

On a CPU a step replays an emulated graph (the eager pass, written into the first run's buffers), so everything
here but the CUDA capture itself runs without CUDA (benchmarks/graphs_goals.py runs the captured graphs on a GPU);
tests/test_capture_safety.py has the capture's failure paths."""

from __future__ import annotations

import pytest
import torch
from tiny_models import hf_greedy, perturbed_copy, tiny_model

import specdec_helpers as sd
from specdec_helpers.core import backends, graphs
from specdec_helpers.core.cache import BLOCK, cache_kwargs, cache_length, crop_cache, plain_static_layers
from specdec_helpers.core.lean import StaticKV
from specdec_helpers.core.graphs import GRAPH_TOKENS, StaticForward, static_forward


def prompt(length, seed=3):
    return torch.randint(1, 64, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=["gpt_neox", "llama", "gpt2", "opt"])
def target(request):
    return tiny_model(request.param)


@torch.inference_mode()
def test_static_steps_equal_hf_greedy(target):
    draft = perturbed_copy(target, scale=0.15)
    lookup = sd.PromptLookupDrafter()
    # A 1-token prompt, a short one, and one longer than GRAPH_TOKENS (its prefill runs eagerly).
    for ids, max_new in [(prompt(1), 23), (prompt(6, seed=5), 17), (prompt(GRAPH_TOKENS + 4, seed=6), 12)]:
        expected = hf_greedy(target, ids, max_new)
        assert torch.equal(sd.greedy_decode(target, ids, max_new_tokens=max_new, graphs=True).sequences, expected)
        for k in (1, 3, 6):
            for drafter in (draft, lookup, target):  # rejections, lookups (often none), all accepted
                out = sd.speculative_decode(
                    target, drafter, ids, max_new_tokens=max_new, num_speculative_tokens=k, graphs=True
                )
                assert torch.equal(out.sequences, expected), (k, type(drafter).__name__)
    out = sd.speculative_decode(target, draft, prompt(4), max_new_tokens=30, num_speculative_tokens=4, graphs=True)
    assert 0 < out.stats.acceptance_rate < 1  # rollbacks after rejections did happen
    out = sd.speculative_decode(target, target, prompt(4), max_new_tokens=30, num_speculative_tokens=4, graphs=True)
    assert out.stats.acceptance_rate == 1.0


@torch.inference_mode()
def test_static_steps_stop_at_eos_and_budget():
    target = tiny_model("gpt_neox")
    ids = prompt(5)
    eos = hf_greedy(target, ids, 30)[0, ids.shape[1] + 4].item()
    expected = hf_greedy(target, ids, 30, eos_token_id=eos)
    for k in (1, 5):
        out = sd.speculative_decode(
            target, target, ids, max_new_tokens=30, num_speculative_tokens=k, eos_token_id=eos, graphs=True
        )
        assert torch.equal(out.sequences, expected) and out.sequences[0, -1] == eos
    for max_new in (1, 2, 7):
        out = sd.speculative_decode(target, target, ids, max_new_tokens=max_new, num_speculative_tokens=5, graphs=True)
        assert torch.equal(out.sequences, hf_greedy(target, ids, max_new))


@torch.inference_mode()
def test_sampling_over_static_steps_draws_what_the_eager_loop_draws():
    target = tiny_model("llama")
    draft = perturbed_copy(target, scale=0.15)
    runs = [
        sd.speculative_decode(
            target,
            draft,
            prompt(4),
            max_new_tokens=25,
            num_speculative_tokens=3,
            temperature=0.8,
            generator=torch.Generator().manual_seed(7),
            graphs=flag,
        )
        for flag in (False, True)
    ]
    assert torch.equal(runs[0].sequences, runs[1].sequences)
    assert runs[0].stats.accepted_per_step == runs[1].stats.accepted_per_step


@torch.inference_mode()
def test_rollback_moves_a_position_and_the_rows_beyond_are_never_read():
    model = tiny_model("llama")
    forward = StaticForward(model, graphs=False)
    kv = forward.new_cache(20)
    assert kv.capacity == BLOCK and cache_length(kv) == 0
    first, second = prompt(10), prompt(10, seed=4)
    forward(input_ids=first, **cache_kwargs(forward, kv))  # the prefill: eager
    keys = [layer.keys.data_ptr() for layer in kv.cache.layers]
    crop_cache(kv, 6)  # drop 4 positions: only the counters move
    assert cache_length(kv) == 6 and kv.lengths.tolist() == [6] * len(kv.cache.layers)
    assert all(int(layer.get_seq_length()) == 6 for layer in kv.cache.layers)
    rolled = forward(input_ids=second[:, 6:8], **cache_kwargs(forward, kv)).logits  # a 2-token step
    assert cache_length(kv) == 8 and kv.lengths.tolist() == [8] * len(kv.cache.layers)
    assert [layer.keys.data_ptr() for layer in kv.cache.layers] == keys  # nothing was copied or reallocated
    fresh = model(input_ids=torch.cat([first[:, :6], second[:, 6:8]], dim=1), use_cache=False).logits[:, 6:]
    torch.testing.assert_close(rolled, fresh, rtol=1e-4, atol=1e-4)
    assert sorted(kv.steps) == [2]
    with pytest.raises(ValueError, match="cannot crop a cache of 8 positions to 9"):
        crop_cache(kv, 9)
    with pytest.raises(ValueError, match="overflow"):
        forward(input_ids=prompt(BLOCK), **cache_kwargs(forward, kv))


@torch.inference_mode()
def test_one_step_per_pass_size_and_caches_kept_for_the_next_decode():
    target = tiny_model("gpt_neox", seed=11)
    draft = perturbed_copy(target, scale=0.15)
    sd.speculative_decode(target, draft, prompt(5), max_new_tokens=40, num_speculative_tokens=3, graphs=True)
    (target_kv,), (draft_kv,) = static_forward(target).caches, static_forward(draft).caches
    assert set(target_kv.steps) == {1, 2, 3, 4}  # every verify of 0 .. k = 3 draft tokens, made before the rounds
    assert set(draft_kv.steps) == {1, 2}  # the draft's one-token step (2: after a bonus)
    buffers = {n: step.tokens.data_ptr() for n, step in target_kv.steps.items()}
    assert not target_kv.in_use and not draft_kv.in_use  # given back after the decode
    sd.speculative_decode(target, draft, prompt(7, seed=8), max_new_tokens=40, num_speculative_tokens=3, graphs=True)
    assert static_forward(target).caches == [target_kv]  # the same cache, its steps reused
    assert {n: target_kv.steps[n].tokens.data_ptr() for n in buffers} == buffers
    # A draft that is the target itself: two caches of one model, one per role.
    sd.speculative_decode(target, target, prompt(5), max_new_tokens=20, num_speculative_tokens=3, graphs=True)
    assert len(static_forward(target).caches) == 2
    # A longer text needs a larger cache: it replaces the free smaller ones.
    forward = static_forward(target)
    kv = forward.new_cache(BLOCK + 1)
    assert [kv.capacity for kv in forward.caches] == [2 * BLOCK] and kv.in_use
    forward.release(kv)


@torch.inference_mode()
def test_graphs_default_off_on_a_cpu_and_refused_where_they_cannot_serve():
    target = tiny_model("gpt_neox", seed=12)
    sd.speculative_decode(target, sd.PromptLookupDrafter(), prompt(5), max_new_tokens=10)
    assert target not in graphs._FORWARDS  # the eager loop, with its dynamic cache
    with pytest.raises(ValueError, match="graphs=True needs use_cache=True"):
        sd.speculative_decode(target, target, prompt(5), max_new_tokens=5, graphs=True, use_cache=False)
    with pytest.raises(ValueError, match="choose one"):
        sd.speculative_decode(target, target, prompt(5), max_new_tokens=5, graphs=True, compile=True)

    class Reader(sd.PromptLookupDrafter):
        needs_target_features = True

    with pytest.raises(ValueError, match="use graphs=False"):
        sd.speculative_decode(target, Reader(), prompt(5), max_new_tokens=5, graphs=True)
    assert isinstance(StaticKV(target, 8), StaticKV)


def test_by_default_only_where_a_position_can_roll_the_cache_back(monkeypatch):
    from transformers import MistralConfig, MistralForCausalLM

    plain = tiny_model("llama")
    sliding = MistralForCausalLM(
        MistralConfig(
            vocab_size=64,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            sliding_window=8,
        )
    ).eval()
    assert plain_static_layers(plain) and not plain_static_layers(sliding)
    lookup = sd.PromptLookupDrafter()

    def chosen(model, use_cache=True, compile=False):
        return backends.choose(model, lookup, use_cache, compile, None)[0]

    assert chosen(plain) == "lean"  # a CPU model: no graphs by default
    monkeypatch.setattr(type(plain), "device", property(lambda self: torch.device("cuda")))
    assert chosen(plain) == "graphs" and backends.graphs_unfit(plain, lookup) is None
    assert chosen(plain, use_cache=False) == "uncached" and chosen(plain, compile=True) == "compiled"
    monkeypatch.setattr(type(sliding), "device", property(lambda self: torch.device("cuda")))
    assert chosen(sliding) == "dynamic" and "sliding-window" in backends.graphs_unfit(sliding, lookup)
    with pytest.raises(NotImplementedError, match="sliding-window"):
        StaticKV(sliding, 16)


@torch.inference_mode()
def test_kept_caches_do_not_keep_the_model_alive():
    import gc
    import weakref

    model = tiny_model("gpt_neox", seed=13)
    sd.speculative_decode(model, model, prompt(4), max_new_tokens=6, num_speculative_tokens=2, graphs=True)
    assert model in graphs._FORWARDS
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


def test_the_gpu_goals_benchmark_runs_on_a_cpu(tmp_path, capsys):
    """benchmarks/graphs_goals.py at a tiny scale: it runs, prints the five goals, and every method's tokens equal
    our eager greedy's (fp32). Its timings are not checked (a benchmark, not a test)."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import graphs_goals

    result = graphs_goals.main(
        [
            "--device",
            "cpu",
            "--scale",
            "0.0625",
            "--vocab",
            "256",
            "--max-new-tokens",
            "6",
            "--repeats",
            "1",
            "--json",
            str(tmp_path / "goals.json"),
        ]
    )
    assert set(result["goals"]) == set(graphs_goals.GOALS) and all(result["identical_to_greedy"].values())
    assert json.loads((tmp_path / "goals.json").read_text())["goals"].keys() == result["goals"].keys()
    assert "all_accepted_vs_eager_greedy" in capsys.readouterr().out
