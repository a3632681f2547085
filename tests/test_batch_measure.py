"""measure/batching.py: the sweep's bookkeeping and the cost formula (no timing is asserted)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import perturbed_copy, tiny_model

import specdec_helpers as sd


def test_sweep_rows_check_outputs_and_estimate_alpha():
    target = tiny_model("llama", seed=2)
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([4, 5])]
    rows = sd.batch_sweep(
        target,
        perturbed_copy(target, scale=0.05),
        prompts,
        batch_sizes=(1, 3),
        repeats=1,
        warmup=0,
        max_new_tokens=8,
        num_speculative_tokens=3,
        show=False,
    )
    assert [r["batch"] for r in rows] == [1, 3]
    assert all(r["same"] and r["greedy_tok_s"] > 0 and r["ratio_min"] <= r["ratio"] <= r["ratio_max"] for r in rows)
    assert all(0.5 < r["alpha"] <= 1 for r in rows), rows  # a near copy of the target: most drafts pass
    bad = sd.batch_sweep(
        target,
        tiny_model("llama", seed=9),
        prompts,
        batch_sizes=(2,),
        repeats=1,
        warmup=0,
        max_new_tokens=8,
        show=False,
    )
    assert bad[0]["same"] and bad[0]["alpha"] < rows[0]["alpha"]


def test_costs_and_the_predicted_speedup():
    target = tiny_model("gpt2", seed=1)
    costs = sd.batch_costs(
        target, perturbed_copy(target), batch_sizes=(1, 2), num_speculative_tokens=3, repeats=1, warmup=0
    )
    assert [c["batch"] for c in costs] == [1, 2] and all(c["verify_s"] > 0 and c["draft_step_s"] > 0 for c in costs)
    fake = dict(batch=8, k=3, target_step_s=0.010, verify_s=0.016, draft_step_s=0.001)
    tau = (1 - 0.7**4) / 0.3
    assert sd.predicted_batch_speedup(fake, 0.7) == pytest.approx(tau * 0.010 / 0.019)
    assert sd.predicted_batch_speedup(fake, 1.0) == pytest.approx(4 * 0.010 / 0.019)
