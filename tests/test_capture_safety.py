"""A capture never hurts the process (`core/graphs.py`), shown on the CPU with emulated graphs: a family that reads the
host runs eagerly by rule, a failed capture or a replay that differs leaves the model eager and the next model
unharmed, counters are reset after a pass that raised, every step is made before the timed rounds, and a caller that
keeps an output across passes is caught as a real graph would catch it."""

from __future__ import annotations

import warnings

import pytest
import torch
from tiny_models import hf_greedy, perturbed_copy, tiny_model

import specdec_helpers as sd
from specdec_helpers.core import decode, graphs
from specdec_helpers.core.graphs import CaptureRefused, StaticForward, static_forward


def prompt(length, seed=3):
    return torch.randint(1, 64, (1, length), generator=torch.Generator().manual_seed(seed))


def decode_both(model, k=3, max_new=20):
    """Greedy and speculative decoding with graphs, each checked against HF's greedy."""
    ids, draft = prompt(5), perturbed_copy(model, scale=0.15)
    expected = hf_greedy(model, ids, max_new)
    out = sd.speculative_decode(model, draft, ids, max_new_tokens=max_new, num_speculative_tokens=k, graphs=True)
    assert torch.equal(out.sequences, expected)
    assert torch.equal(sd.greedy_decode(model, ids, max_new_tokens=max_new, graphs=True).sequences, expected)
    return out


@torch.inference_mode()
def test_opt_runs_eagerly_by_rule_and_the_next_model_still_captures():
    opt = tiny_model("opt", seed=21)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a rule, not a surprise: no warning
        out = decode_both(opt)
    forward = static_forward(opt)
    assert not forward.graphs and "opt's step reads the device on the host" in forward.eager_reason
    assert forward.captured == 0 and "steps eager" in out.backend
    neox = tiny_model("gpt_neox", seed=22)
    decode_both(neox)
    assert static_forward(neox).graphs and static_forward(neox).captured == 4  # k + 1 = 4 pass sizes


@torch.inference_mode()
def test_a_failed_capture_leaves_that_model_eager_and_the_next_one_unharmed(monkeypatch):
    llama, neox = tiny_model("llama", seed=23), tiny_model("gpt_neox", seed=24)
    real = graphs._Emulated

    def failing(run):
        raise CaptureRefused("simulated: operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "_Emulated", failing)
    with pytest.warns(UserWarning, match="CUDA graphs are off for .*simulated"):
        decode_both(llama)
    forward = static_forward(llama)
    assert not forward.graphs and forward.captured == 0
    assert all(kv.pool is None for kv in forward.caches)
    monkeypatch.setattr(graphs, "_Emulated", real)
    decode_both(neox)  # another model after the failure captures and decodes as before
    assert static_forward(neox).graphs and static_forward(neox).captured == 4  # k + 1 = 4 pass sizes
    decode_both(llama)  # and the failed one keeps decoding, eagerly
    assert not static_forward(llama).graphs


@torch.inference_mode()
def test_a_replay_that_differs_from_the_eager_pass_turns_graphs_off_with_a_warning(monkeypatch):
    model = tiny_model("gpt2", seed=25)
    replay = graphs._Emulated.replay

    def off_by_a_little(self):
        replay(self)
        self.output.add_(1e-3)

    monkeypatch.setattr(graphs._Emulated, "replay", off_by_a_little)
    with pytest.warns(UserWarning, match=r"CUDA graphs are off for .*replay differs from the same pass run eagerly"):
        decode_both(model)
    assert not static_forward(model).graphs


@torch.inference_mode()
def test_counters_are_reset_after_a_pass_that_raised_and_by_new_cache():
    model = tiny_model("gpt_neox", seed=26)
    forward = StaticForward(model, graphs=True)
    kv = forward.new_cache(40)
    forward.prepare(kv, range(1, 5))
    ids = prompt(6)
    forward(input_ids=ids, cache=kv)

    def boom(*args):
        raise KeyboardInterrupt  # Ctrl-C in a notebook, mid-pass, after layer 0 counted the tokens

    handle = model.gpt_neox.layers[1].register_forward_pre_hook(boom)
    for tokens in (prompt(3, seed=4), prompt(20, seed=5)):  # a step, and an eager pass longer than any step
        with pytest.raises(KeyboardInterrupt):
            forward(input_ids=tokens, cache=kv)
        assert kv.position == 6 and kv.lengths.tolist() == [6] * len(kv.lengths)
    handle.remove()
    kv.lengths[0] = 99  # however the counters drifted, a new cache starts from nothing
    forward.release(kv)
    assert forward.new_cache(40) is kv and kv.position == 0 and kv.lengths.tolist() == [0] * len(kv.lengths)
    forward.release(kv)
    decode_both(model)  # the reused cache decodes what greedy decoding gives


@torch.inference_mode()
@pytest.mark.parametrize("k", [4, "auto"])
def test_no_step_is_made_inside_the_timed_rounds(monkeypatch, k):
    model = tiny_model("llama", seed=27 if k == 4 else 28)
    timed, made = [], []
    rounds, make = decode._rounds, StaticForward._make_step

    def timed_rounds(*args, **kwargs):
        timed.append(True)
        try:
            return rounds(*args, **kwargs)
        finally:
            timed.pop()

    def recorded(self, kv, n):
        made.append((n, bool(timed)))
        return make(self, kv, n)

    monkeypatch.setattr(decode, "_rounds", timed_rounds)
    monkeypatch.setattr(StaticForward, "_make_step", recorded)
    out = decode_both(model, k=k, max_new=60)
    assert made and not any(inside for _, inside in made), made
    largest = 4 if k == 4 else graphs.MAX_K
    assert sorted({n for n, _ in made}) == list(range(1, largest + 2)) and max(out.stats.accepted_per_step) <= largest


@torch.inference_mode()
def test_k_is_capped_while_graphs_are_on():
    model = tiny_model("gpt_neox", seed=29)
    ids = prompt(4)
    out = sd.speculative_decode(model, model, ids, max_new_tokens=60, num_speculative_tokens=40, graphs=True)
    assert torch.equal(out.sequences, hf_greedy(model, ids, 60))
    assert max(len(step.draft) for step in out.steps) == graphs.MAX_K


@torch.inference_mode()
def test_an_emulated_graph_catches_a_caller_that_keeps_an_output_across_passes():
    """A replay writes into its capture's buffers: an output kept from one pass changes at the next pass of that size.
    The control is a stale caller: it gets the second pass's logits back under graphs, as on a GPU, but not eagerly."""
    model = tiny_model("llama", seed=30)

    def stale_caller(forward):
        kv = forward.new_cache(20)
        forward.prepare(kv, [1])
        forward(input_ids=prompt(4), cache=kv)
        kept = forward(input_ids=torch.tensor([[7]]), cache=kv).logits  # kept, not cloned
        first = kept.clone()
        forward(input_ids=torch.tensor([[9]]), cache=kv)
        forward.release(kv)
        return torch.equal(kept, first)

    assert stale_caller(StaticForward(model, graphs=False))  # eager passes hand out fresh tensors
    assert not stale_caller(StaticForward(model, graphs=True))  # the replay overwrote what the caller kept


@torch.inference_mode()
@pytest.mark.parametrize("cast", ["half", "bfloat16", "weights moved"])
def test_a_cast_or_moved_weights_between_decodes_get_fresh_caches_or_steps(cast):
    """A student who decodes, then casts the model (or reloads its weights), decodes again: a kept cache of the old
    dtype is not handed out, and steps recorded over weights that moved are recorded again (a graph would replay
    the old addresses)."""
    model, draft = tiny_model("llama", seed=31), None
    ids = prompt(5)
    sd.greedy_decode(model, ids, max_new_tokens=10, graphs=True)
    forward = static_forward(model)
    (kv,) = forward.caches
    if cast == "weights moved":
        model.half().float()  # the same dtype, the weights somewhere else
    else:
        model.to(torch.float16 if cast == "half" else torch.bfloat16)
    draft = perturbed_copy(model, scale=0.15)
    out = sd.speculative_decode(model, draft, ids, max_new_tokens=20, num_speculative_tokens=3, graphs=True)
    assert torch.equal(out.sequences, hf_greedy(model, ids, 20))
    (now,) = forward.caches
    assert (now is kv) == (cast == "weights moved") and now.kind == (model.dtype, model.device)
    assert now.weights == graphs._addresses(model)


def test_a_drafter_that_proposes_more_than_k_is_refused_before_its_step_is_made():
    class Eager(sd.PromptLookupDrafter):
        def propose(self, input_ids, k, sampler=None):
            return sd.Proposal(torch.arange(6) + 1)

    model = tiny_model("gpt_neox", seed=32)
    with pytest.raises(ValueError, match="returned 6 tokens when asked for at most 2"):
        sd.speculative_decode(model, Eager(), prompt(5), max_new_tokens=20, num_speculative_tokens=2, graphs=True)
    with pytest.raises(ValueError, match="graphs=True decodes one prompt at a time"):
        sd.speculative_decode(model, model, [prompt(3)[0], prompt(4)[0]], max_new_tokens=4, graphs=True)


def test_rehearsals_in_threads_put_the_capture_answer_back():
    import threading

    answer = torch.cuda.is_current_stream_capturing
    models = [tiny_model(family, seed=40 + i) for i, family in enumerate(["llama", "gpt_neox", "gpt2", "llama"])]

    def decode_one(model):
        with torch.inference_mode():
            sd.greedy_decode(model, prompt(4), max_new_tokens=6, graphs=True)

    threads = [threading.Thread(target=decode_one, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert torch.cuda.is_current_stream_capturing is answer
