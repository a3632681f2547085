"""Host-device synchronisations per decoding round, counted on the CPU (issue 26, item 4).

On a GPU every read of a device value by Python (``.item()``, ``int(t)``, ``bool(t)``, ``.tolist()``,
``.cpu()``, ``torch.cuda.synchronize``) makes the CPU wait until the GPU has finished everything queued:
the next round's kernels cannot be launched ahead while it waits. The loop pays one such wait per round,
the one it cannot avoid: how many draft tokens were accepted decides what happens next (gpt-fast's
`speculative_decode` has about one as well). These tests patch those methods to count calls, and take the
per-round count as the difference between two decodes with different numbers of rounds (so the call's
own set-up checks, outside the loop, cancel out).

Not counted: implicit synchronisations of data-dependent shapes (boolean-mask indexing, ``nonzero``); the
round uses none. On a GPU, ``torch.cuda.set_sync_debug_mode("warn")`` reports every kind
(benchmarks/pythia_random_timing.py, a part of benchmarks/gpu/run.sh, runs it).
"""

from __future__ import annotations

import contextlib

import torch

import specdec_helpers as sd
from tiny_models import perturbed_copy, tiny_model

READS = ("item", "tolist", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__")


@contextlib.contextmanager
def counting(monkeypatch):
    counts = {"n": 0}

    def wrap(original):
        def counted(self, *args, **kwargs):
            counts["n"] += 1
            return original(self, *args, **kwargs)

        return counted

    with monkeypatch.context() as m:
        for name in READS:
            m.setattr(torch.Tensor, name, wrap(getattr(torch.Tensor, name)))
        original_to = torch.Tensor.to

        def to(self, *args, **kwargs):  # an explicit copy to the host ("cpu") is a read too; `.to(x.device)`
            target = kwargs.get("device", args[0] if args else None)  # stays on the device: not counted
            if isinstance(target, str) and torch.device(target).type == "cpu":
                counts["n"] += 1
            return original_to(self, *args, **kwargs)

        m.setattr(torch.Tensor, "to", to)
        m.setattr(torch.cuda, "synchronize", lambda *a, **k: counts.__setitem__("n", counts["n"] + 1))
        yield counts


def _pair():
    target = tiny_model("gpt_neox", seed=0)
    return target, perturbed_copy(target, 0.15, 1).eval()


def per_round(monkeypatch, decode) -> float:
    """Reads per round: (reads, rounds) of a short and a long decode, differenced."""
    measured = []
    for n in (8, 40):
        with counting(monkeypatch) as counts:
            out = decode(n)
        measured.append((counts["n"], out.stats.target_calls))
    (c1, r1), (c2, r2) = measured
    assert r2 > r1 + 5, measured
    return (c2 - c1) / (r2 - r1)


def test_greedy_speculative_round_reads_the_device_once(monkeypatch):
    """ONE read per round: accepted count and the target's tokens come back to the host in a single
    ``.tolist()`` (`verify.accept_greedy`); the round's trace keeps the draft tokens on the device until the
    loop ends (`Text.finish` reads them all at once). Before this, a round read three times:
    the accepted count, the appended tokens, the drafted tokens."""
    target, draft = _pair()
    prompt = torch.arange(1, 9).view(1, -1)
    reads = per_round(
        monkeypatch,
        lambda n: sd.speculative_decode(
            target, draft, prompt, max_new_tokens=n, num_speculative_tokens=4, eos_token_id=[]
        ),
    )
    assert reads == 1, reads


def test_greedy_decode_reads_the_device_once_per_token(monkeypatch):
    """Plain greedy decoding (the k = 0 round) also reads once per token: the token, which EOS checking needs
    (HF greedy reads at least once per token too: its stopping criteria)."""
    target, _ = _pair()
    prompt = torch.arange(1, 9).view(1, -1)
    reads = per_round(monkeypatch, lambda n: sd.greedy_decode(target, prompt, max_new_tokens=n, eos_token_id=[]))
    assert reads == 1, reads


def test_sampled_round_reads_the_device_once(monkeypatch):
    """Sampling too: `verify.accept_sampled` picks the residual (or bonus) row on the device and reads the
    accepted count, the draft tokens and the target's token back together. Before: three reads a round."""
    target, draft = _pair()
    prompt = torch.arange(1, 9).view(1, -1)
    g = torch.Generator().manual_seed(0)
    reads = per_round(
        monkeypatch,
        lambda n: sd.speculative_decode(
            target,
            draft,
            prompt,
            max_new_tokens=n,
            num_speculative_tokens=4,
            eos_token_id=[],
            temperature=1.0,
            generator=g,
        ),
    )
    assert reads == 1, reads
