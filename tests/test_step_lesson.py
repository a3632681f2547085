"""Notebook 01 §6's experiment (`measure/step_cost.py`, `present/step_lesson.py`): the shapes and what each cost model
predicts, the interleaved timing, the verdict on a student's prediction; and notebook 05's greedy baseline next to a
decoder of one's own, run the way that decoder runs (eagerly, no lean forward, no graphs). No timing is asserted."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model

from specdec_helpers.core import backends
from specdec_helpers.core.lean import LeanForward
from specdec_helpers.measure import methods, step_cost
from specdec_helpers.measure.observed import REQUIRED
from specdec_helpers.present import step_lesson


@pytest.fixture(scope="module")
def neox():
    return tiny_model("gpt_neox", layers=4)


@pytest.fixture(scope="module")
def measured(neox):
    """One measurement for several assertions (tiny models, a few rounds)."""
    plan = step_cost.width_depth_plan(neox)
    return step_cost.measure_plan(plan, repeats=3)


def test_step_bytes_counts_one_embedding_row_unless_the_head_shares_the_table():
    torch.manual_seed(0)
    untied = tiny_model("llama")
    table = untied.get_input_embeddings().weight
    total = sum(p.numel() * p.element_size() for p in untied.parameters())
    assert untied.get_output_embeddings().weight is not table
    assert step_cost.step_bytes(untied) == total - table.numel() * table.element_size()
    tied = tiny_model("gpt2")  # GPT-2 ties its head to the token table: read once, as the head
    assert tied.get_output_embeddings().weight is tied.get_input_embeddings().weight
    assert step_cost.step_bytes(tied) == sum(p.numel() * p.element_size() for p in tied.parameters())


def test_shaped_llamas_keep_the_head_size_and_run_lean_on_the_cpu(neox):
    wide = step_cost.shaped_llama(neox, 3, widen=2)
    config = wide.config
    assert type(wide).__name__ == "LlamaForCausalLM" and config.num_hidden_layers == 3
    assert config.hidden_size == 2 * neox.config.hidden_size
    assert config.head_dim == neox.config.hidden_size // neox.config.num_attention_heads
    assert config.intermediate_size == 2 * neox.config.intermediate_size
    assert wide.device == neox.device and wide.dtype == neox.dtype
    assert isinstance(backends.decode_forward(wide), LeanForward)  # what a CPU decode runs for a Llama


def test_the_plan_predicts_different_wide_ratios_for_calls_and_bytes(measured, neox):
    shapes, predicted = measured["shapes"], measured["predicted"]
    assert shapes["base"]["layers"] == neox.config.num_hidden_layers  # a quarter, at least 4, at most all
    assert shapes["deep"]["layers"] == 2 * shapes["base"]["layers"]
    assert shapes["wide"]["width"] == 2 * shapes["base"]["width"]
    assert predicted["calls"] == {"deep": 2.0, "wide": 1.0}
    assert 1.0 < predicted["bytes"]["deep"] < 2.0 and predicted["bytes"]["wide"] > 2.0
    text = step_lesson.describe_plan(measured)
    assert "deep 2.00x, wide 1.00x" in text and f"wide {predicted['bytes']['wide']:.2f}x" in text
    assert "lean forward" in measured["runs_as"]


def test_measurement_has_both_runs_with_spreads(measured):
    assert list(measured["ms"]) == ["eager", "decode"]  # a CPU Llama: the decode runs the lean forward
    for run in ("eager", "decode"):
        for name in ("base", "deep", "wide"):
            s = measured["ms"][run][name]
            assert 0 < s["q1"] <= s["median"] <= s["q3"]
        assert set(measured["ratios"][run]) == {"deep", "wide"}
    assert measured["threads"] == 1 and measured["repeats"] == 3  # a CPU times on one thread


def test_steps_are_timed_round_robin(neox):
    order = []
    models = {name: tiny_model("gpt_neox", seed=i) for i, name in enumerate("abc")}
    for name, model in models.items():
        model.register_forward_pre_hook(lambda module, args, name=name: order.append(name))
    times = step_cost.interleaved_steps(models, neox.device, repeats=2, warmup=1)
    prefills = ["a", "b", "c"]
    assert order == prefills + ["a", "b", "c"] + ["a", "b", "c"] * 2  # set-up, warm-up, then A B C A B C
    assert {name: len(t) for name, t in times.items()} == {"a": 2, "b": 2, "c": 2}


def test_ratios_are_taken_round_by_round():
    times = {"x": [2.0, 4.0, 9.0], "y": [1.0, 4.0, 3.0]}
    s = step_cost.ratio_spread(times, "x", "y")
    assert s["median"] == 2.0 and s["min"] == 1.0 and s["max"] == 3.0


def test_regime_by_thirds_on_a_log_scale():
    assert step_lesson.regime(1.1, 1.0, 4.0) == "calls"
    assert step_lesson.regime(2.0, 1.0, 4.0) == "between"
    assert step_lesson.regime(3.5, 1.0, 4.0) == "bytes"
    assert step_lesson.regime(0.25, 0.25, 0.13) == "calls" and step_lesson.regime(0.13, 0.25, 0.13) == "bytes"


def fake(wide, q=(0.98, 1.02), calls=1.0, bytes_=3.6):
    s = dict(median=wide, q1=wide * q[0], q3=wide * q[1], min=wide * q[0], max=wide * q[1])
    ms = {name: dict(median=1.0, q1=1.0, q3=1.0) for name in ("base", "deep", "wide")}
    return dict(
        shapes={name: dict(layers=4, width=64, mb=1.0) for name in ("base", "deep", "wide")},
        predicted={"calls": {"deep": 2.0, "wide": calls}, "bytes": {"deep": 1.8, "wide": bytes_}},
        ratios={"eager": {"deep": s, "wide": s}},
        ms={"eager": ms},
        runs_as="the model itself, eagerly",
        repeats=5,
        threads=1,
        device="cpu",
    )


def test_verdict_judges_a_prediction_against_the_measurement():
    calls_bound = fake(1.1)
    right, wrong = step_lesson.verdict(1.0, calls_bound), step_lesson.verdict(3.5, calls_bound)
    assert "✅" in right and "❌" not in right
    assert "❌" in wrong and "pays per kernel" in wrong and "✅" not in wrong
    bytes_bound = fake(3.3)
    assert "✅" in step_lesson.verdict(3.5, bytes_bound) and "❌" in step_lesson.verdict(1.0, bytes_bound)
    assert "within 25%" in step_lesson.verdict(2.0, fake(2.2))  # between the two, and close
    partly = step_lesson.verdict(2.5, fake(1.95))  # bytes against between: one regime over, neither right nor wrong
    assert (
        "Partly" in partly and "kernels more than you thought" in partly and "✅" not in partly and "❌" not in partly
    )
    assert "1 torch thread (the other cells keep" in right
    busy = dict(fake(1.1, q=(0.7, 1.3)), threads=2)
    assert "2 torch threads" in step_lesson.verdict(1.0, busy) and "torch.set_num_threads(1)" in step_lesson.verdict(
        1.0, busy
    )
    assert "Rerun" not in right and "Rerun" in step_lesson.verdict(1.0, fake(1.1, q=(0.7, 1.3)))
    inside = step_lesson.verdict(1.39, fake(1.1, q=(0.982, 1.273)))  # 26% off, inside steady quartiles 1.08-1.40
    assert "✅" in inside and "within the measurement's quartiles" in inside
    noisy = fake(1.1, q=(0.7, 1.6))  # quartiles 0.77-1.76: the rounds disagree, no verdict at all (cell 32 says so)
    for guess in (1.1, 1.7, 3.5):  # at the median, inside the quartiles, far outside
        unjudged = step_lesson.verdict(guess, noisy)
        assert "no verdict yet" in unjudged and "✅" not in unjudged and "❌" not in unjudged and "Rerun" in unjudged


@pytest.mark.parametrize("prediction", [None, "3", -1, float("nan"), True])
def test_verdict_names_an_unanswered_or_unusable_prediction(prediction):
    text = step_lesson.verdict(prediction, fake(1.1))
    assert "✅" not in text and "❌" not in text and "None" not in text.replace("my_prediction = None", "")
    assert "run it, then run this cell again" in text
    assert ("You left my_prediction = None" in text) == (prediction is None)


def test_pair_costs_say_what_the_decode_runs():
    target, draft = tiny_model("gpt_neox", layers=4), tiny_model("gpt_neox", seed=1, layers=1)
    costs = step_cost.pair_costs(target, draft, repeats=3)
    assert list(costs["c"]) == ["eager"] and costs["backend"] == "dynamic" and costs["layers"] == 0.25
    text = step_lesson.describe_pair_costs(costs)
    assert "dynamic" in text and "the eager c is the one that counts" in text
    llama, small = tiny_model("llama", layers=4), tiny_model("llama", seed=1, layers=1)
    costs = step_cost.pair_costs(llama, small, repeats=3)
    assert list(costs["c"]) == ["eager", "decode"] and costs["backend"] == "lean"
    assert "lean forward" in step_lesson.describe_pair_costs(costs)


@pytest.mark.parametrize("with_decoder", [False, True])
def test_our_greedy_runs_as_the_decoder_it_is_compared_with(monkeypatch, with_decoder):
    """Next to a decoder of one's own (eager, the model over transformers' cache) our greedy runs eagerly too; alone,
    it runs the kit's fastest backend (the lean forward for a CPU Llama). The control is the decoder-less run."""
    chosen = []
    real = backends.choose

    def spy(*args, **kwargs):
        chosen.append(real(*args, **kwargs))
        return chosen[-1]

    monkeypatch.setattr(backends, "choose", spy)
    target = tiny_model("llama")
    stub = type("Decoder", (), {name: lambda self, *a, **k: None for name in REQUIRED})
    decoder = stub() if with_decoder else None  # only the speculative methods would call it
    run = methods.build_methods(target, tiny_model("llama", seed=1), 2, names=("greedy",), decoder=decoder)["greedy"]
    out = run(torch.tensor([[1, 2, 3]]), 4)
    assert out.sequences.shape[1] == 7
    name, why = chosen[-1]
    assert (name, "lean=False" in why) == (("dynamic", True) if with_decoder else ("lean", False))


def test_the_gpu_path_runs_graphed_steps_emulated_on_the_cpu(monkeypatch, neox):
    """On a GPU the decode's forward is `graphs.StaticForward` (captured steps over a static cache): the same code,
    its graphs emulated here, prepared before the timing and its caches given back."""
    from specdec_helpers.core.graphs import static_forward

    monkeypatch.setattr(step_cost, "decode_forward", lambda model: static_forward(model, graphs=True))
    plan = step_cost.width_depth_plan(neox)
    assert plan["runs_as"] == "CUDA graphs over a static cache"
    measured = step_cost.measure_plan(plan, repeats=2)
    assert list(measured["ratios"]) == ["eager", "decode"]
    assert all(not kv.in_use for f in plan["forwards"].values() for kv in f.caches)  # released
    assert "as the decode runs it: CUDA graphs" in step_lesson.measured_table(measured)
    plan["forwards"]["wide"]._go_eager("a capture that failed", warn=False)  # what a failed capture leaves
    table = step_lesson.measured_table(step_cost.measure_plan(plan, repeats=2))
    assert "wide: a static cache, its steps eager (no CUDA graphs: a capture that failed)" in table
    assert "base: CUDA graphs over a static cache" in table  # the others still graphed: each reported as it ran
    import weakref

    old = [weakref.ref(plan["models"]["wide"]), weakref.ref(plan["forwards"]["wide"])]
    step_cost.width_depth_plan(neox)  # a rerun: the static caches and their graphs go with their models
    assert [ref() for ref in old] == [None, None]


@pytest.mark.parametrize("eager", [False, True])
def test_the_sweeps_costs_for_a_decoder_of_ones_own_are_eager(monkeypatch, eager):
    """05's theory table prices a student's decoder (eager) with eager c and v; the kit's loop with its own forwards
    (the lean forward for a CPU Llama: the control)."""
    from specdec_helpers.measure import sweep

    timed_models = []
    real = sweep.measure_forward_cost

    def spy(model, *args, **kwargs):
        timed_models.append(model)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(sweep, "measure_forward_cost", spy)
    target, draft = tiny_model("llama"), tiny_model("llama", seed=1)
    sweep.measure_costs(target, draft, torch.tensor([[1, 2, 3]]), ks=[2], repeats=1, eager=eager)
    assert [type(m) is LeanForward for m in timed_models] == [not eager, not eager]


def test_the_memory_estimate_matches_the_three_models_built(neox):
    plan = step_cost.width_depth_plan(neox)  # its own: a later plan frees the shared fixture's models
    built = sum(p.numel() * p.element_size() for m in plan["models"].values() for p in m.parameters())
    assert step_cost.three_models_bytes(neox, plan["shapes"]["base"]["layers"]) == built


def test_a_cpu_step_is_timed_in_cpu_time_and_the_output_says_so(measured, monkeypatch):
    """On a CPU the clock is the process's CPU time (other programs barely move it); on a GPU, synchronized wall
    time. A step that sleeps costs wall time and no CPU time: the control that the CPU clock is the one used."""
    import time

    assert step_cost.step_clock("cpu")[1] is time.thread_time
    assert step_cost.step_clock("cuda")[1] is time.perf_counter
    assert step_cost.timed_step(lambda: time.sleep(0.05), "cpu", time.thread_time) < 0.05
    assert step_cost.timed_step(lambda: time.sleep(0.05), "cpu", time.perf_counter) >= 0.05
    assert measured["clock"].startswith("CPU time")
    text = step_lesson.verdict(1.0, measured)
    assert "Clock: CPU time of the timing thread" in text and "MB/ms of weights" in text
    base, deep = (measured["ms"]["eager"][name]["median"] for name in ("base", "deep"))
    assert f"deep - base = {deep - base:.3f} ms" in text and f"2 base - deep = {2 * base - deep:.3f} ms" in text


def test_noise_is_flagged_in_every_ratio_not_only_the_judged_one():
    steady = fake(1.1)
    steady["ratios"]["decode"] = {
        "deep": dict(steady["ratios"]["eager"]["deep"]),
        "wide": fake(1.1, q=(0.6, 1.4))["ratios"]["eager"]["wide"],
    }
    steady["ms"]["decode"] = steady["ms"]["eager"]
    table = step_lesson.measured_table(steady)
    assert table.count("NOISY") == 1 and "wide / base" in table.split("NOISY")[0].splitlines()[-1]


def test_a_rerun_frees_the_last_plans_models(neox):
    import weakref

    first = step_cost.width_depth_plan(neox)
    held = dict(first, ms={})  # what `measured` keeps: the same dicts
    old = [weakref.ref(m) for m in first["models"].values()] + [weakref.ref(f) for f in first["forwards"].values()]
    second = step_cost.width_depth_plan(neox)
    assert first["models"] == {} and held["forwards"] == {} and len(second["models"]) == 3
    assert all(ref() is None for ref in old)  # nothing else (the lean forwards' registry) keeps them alive


def test_the_plan_refuses_models_that_would_not_fit(neox, monkeypatch):
    need = step_cost.three_models_bytes(neox, 1)
    monkeypatch.setattr(step_cost, "free_bytes", lambda device: need)  # half of it is the limit: not even 1 layer
    with pytest.raises(MemoryError, match="smaller"):
        step_cost.width_depth_plan(neox)
    monkeypatch.setattr(step_cost, "free_bytes", lambda device: 2 * step_cost.three_models_bytes(neox, 2) + 1)
    assert step_cost.width_depth_plan(neox)["shapes"]["base"]["layers"] == 2  # 4 asked, 2 fit
    assert step_cost.free_bytes("cpu") > 0


def test_building_the_models_leaves_the_callers_rng_alone(neox):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    step_cost.shaped_llama(neox, 1)
    assert torch.equal(torch.rand(3), expected)
    a, b = step_cost.shaped_llama(neox, 1), step_cost.shaped_llama(neox, 1)  # still seeded: the same weights
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_runs_as_reports_a_failed_capture():
    model = torch.nn.Linear(2, 2)
    graphed = type("F", (), {"graphs": True, "eager_reason": None})()
    failed = type("F", (), {"graphs": False, "eager_reason": "its 1-token graph's replay differs"})()
    assert step_cost.runs_as(graphed, model) == "CUDA graphs over a static cache"
    assert "eager" in step_cost.runs_as(failed, model) and "replay differs" in step_cost.runs_as(failed, model)
    assert "CUDA graphs over" not in step_cost.runs_as(failed, model)


def test_the_pairs_alpha_is_called_assumed():
    costs = dict(
        backend="dynamic",
        why="x",
        runs_as={"target": "t", "draft": "d"},
        layers=0.5,
        bytes=0.1,
        c={"eager": dict(median=0.5, q1=0.5, q3=0.5)},
        target_ms={"eager": dict(median=1.0)},
        threads=1,
        device="cpu",
        clock="CPU time of this process (time.process_time)",
    )
    text = step_lesson.describe_pair_costs(costs)
    assert "assumed acceptance alpha = 0.8" in text and "Clock: CPU time" in text


def test_free_memory_on_a_cpu_without_psutil_reads_meminfo(monkeypatch):
    import sys

    with_psutil = step_cost.free_bytes("cpu")
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil now raises ImportError
    without = step_cost.free_bytes("cpu")
    assert 0 < without < 1 << 62 and abs(without - with_psutil) < 0.5 * with_psutil  # the same memory, twice read


def test_a_cpu_times_its_steps_on_one_torch_thread_and_restores_the_count(neox):
    seen = []
    neox_hook = neox.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        step_cost.interleaved_steps({"a": neox}, neox.device, repeats=2, warmup=1)
        assert seen and set(seen) == {1} and torch.get_num_threads() == 2  # one thread while timed, two after
    finally:
        torch.set_num_threads(before)
        neox_hook.remove()


def test_the_set_up_line_counts_one_thread_in_the_singular(monkeypatch, capsys):
    from specdec_helpers.present import notebook_help

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(notebook_help, "in_colab", lambda: False)
    for hook in ("quiet", "_inline_figures", "_brief_errors"):  # no global side effects on the test process
        monkeypatch.setattr(notebook_help, hook, lambda: None)
    before = torch.get_num_threads()
    try:
        notebook_help.setup(threads=1)
        one = capsys.readouterr().out
        notebook_help.setup(threads=2)
        two = capsys.readouterr().out
    finally:
        torch.set_num_threads(before)
    assert "on the CPU (1 thread) " in one and "on the CPU (2 threads) " in two
