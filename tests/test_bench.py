"""The benchmark harness, figures, tables and report, on a tiny in-memory pair (no timings asserted)."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import pytest
import torch

from tiny_models import perturbed_copy, tiny_model
from specdec_helpers.measure import bench
from specdec_helpers.measure.methods import draft_label
from specdec_helpers.measure.methods import MethodOutput
from specdec_helpers import cli
from specdec_helpers.core import timing
from specdec_helpers.measure import theory
from specdec_helpers.present import report, tables
from specdec_helpers.core.decode import Step
from specdec_helpers.core.drafters import Drafter, HybridDrafter, PromptLookupDrafter

PROMPT = torch.tensor([[1, 2, 3, 4, 5, 6]])


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("gpt_neox")
    return SimpleNamespace(target=target, draft=perturbed_copy(target, scale=0.1))


@pytest.fixture(scope="module")
def sweep(pair, tmp_path_factory):
    """One run of the bench CLI on the tiny pair (load_pair patched), writing into a temp folder."""
    out = tmp_path_factory.mktemp("bench")
    fake = SimpleNamespace(
        target=pair.target,
        draft=pair.draft,
        preset="tiny",
        device=torch.device("cpu"),
        dtype=torch.float32,
        encode=lambda text: torch.tensor([[len(text) % 60 + 1, 2, 3, 4]]),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("specdec_helpers.models.pairs.load_pair", lambda *args, **kwargs: fake)
        code = cli.bench(
            [
                "--full",
                "--preset",
                "tiny",
                "--ks",
                "1,2",
                "--max-new-tokens",
                "8",
                "--repeats",
                "2",
                "--prompts",
                "one",
                "prompt two",
                "--out",
                str(out),
            ]
        )
    assert code == 0
    return out, json.loads((out / "results" / "bench_tiny.json").read_text())


# --------------------------------------------------------------------------- primitives


def test_tokens_are_counted_from_ids():
    sequences = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    assert bench.count_new_tokens(sequences, prompt_length=3) == 4


def test_round_robin_order():
    assert timing.interleaved_order(["a", "b", "c"], 2) == ["a", "b", "c", "a", "b", "c"]


def test_spread_is_median_with_quartiles():
    s = timing.spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median"], s["q1"], s["q3"], s["min"], s["max"]) == (3.0, 2.0, 4.0, 1.0, 5.0)


def test_theory_against_hand_computed_values():
    assert theory.expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25
    assert theory.expected_speedup(0.5, 2, 0.1) == pytest.approx(1.75 / 1.2)
    assert theory.refined_speedup(0.5, 2, 0.1, 1.5) == pytest.approx(1.75 / 1.7)
    assert theory.expected_tokens_per_step(1.0, 4) == 5.0  # every draft token accepted, plus the bonus
    assert theory.expected_speedup(1.0, 4, 0.25) == pytest.approx(2.5)
    assert theory.expected_tokens_per_step(1 - 1e-9, 4) == pytest.approx(5.0)  # continuous at a = 1
    assert theory.expected_tokens_per_step(0.0, 8) == 1.0  # nothing accepted: one target token a step
    assert theory.expected_speedup(0.0, 8, 0.5) == pytest.approx(1 / 5)


def test_alpha_and_acceptance_by_position():
    steps = [Step([1, 2, 3], 3, []), Step([1, 2, 3], 1, []), Step([4, 5], 0, [])]
    by_position = bench.acceptance_by_position(steps)
    assert by_position == dict(proposed=[3, 3, 2], accepted=[2, 1, 1])
    # 4 accepted tokens, 2 rejections (the fully accepted round ended without one).
    assert theory.estimate_alpha([3, 1, 0], [3, 3, 2]) == pytest.approx(4 / 6)
    assert theory.estimate_alpha([], []) == 0.0


# --------------------------------------------------------------------------- benchmark()


def test_benchmark_interleaves_checks_identity_and_counts_tokens(pair):
    reference = pair.target.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), do_sample=False, max_new_tokens=5)
    calls = []

    def method(name, output):
        def run(ids, n):
            calls.append(name)
            return MethodOutput(output)

        return run

    def broken(ids, n):
        raise RuntimeError("cannot run")

    wrong = reference.clone()
    wrong[0, -1] = (wrong[0, -1] + 1) % 64
    methods = {"a": method("a", reference), "b": method("b", wrong), "c": broken}
    with pytest.warns(UserWarning, match="c failed and is skipped"):
        result = bench.benchmark(
            pair.target, pair.draft, PROMPT, max_new_tokens=5, repeats=3, warmup=1, methods=methods
        )
    assert calls == ["a", "b"] + ["a", "b"] * 3  # warm-up round, then round-robin timed rounds
    assert result["order"] == ["a", "b"] * 3
    assert result["methods"]["a"]["identical"] and not result["methods"]["b"]["identical"]
    assert result["methods"]["a"]["new_tokens"] == [5, 5, 5]
    assert "cannot run" in result["methods"]["c"]["skipped"]
    assert len(result["methods"]["a"]["times"]) == 3


def test_hf_assisted_is_skipped_for_custom_drafters(pair):
    class Custom(Drafter):  # declares no model: HF cannot run it
        def propose(self, input_ids, k, sampler=None): ...
        def update(self, n_kept, target_features=None): ...

    methods = bench.build_methods(pair.target, Custom(), 2)
    assert isinstance(methods["hf_assisted"], bench.Skip)
    assert callable(bench.build_methods(pair.target, PromptLookupDrafter(), 2)["hf_assisted"])
    # HF's lookup always falls back to single tokens and proposes k: neither variant is the same draft.
    two = PromptLookupDrafter(min_ngram=2)
    growing = PromptLookupDrafter(min_ngram=2, grow_with_match=True)
    for other in (two, growing, PromptLookupDrafter(grow_with_match=True)):
        assert "single-token" in bench.build_methods(pair.target, other, 2)["hf_assisted"]
    assert draft_label(growing) == "prompt-lookup:2" and draft_label(PromptLookupDrafter()) == "prompt-lookup"
    assert draft_label(two) == "prompt-lookup (min_ngram=2)"


# --------------------------------------------------------------------------- the sweep and its files


def test_sweep_results_shape(sweep):
    _, results = sweep
    assert {"config", "runs", "costs", "summary", "theory", "env"} <= set(results)
    assert results["env"]["torch"] == torch.__version__ and results["env"]["preset"] == "tiny"
    assert len(results["runs"]) == 2 * 2  # ks x prompts
    run = results["runs"][0]
    # PA3's benchmark() keys, then ours.
    for key in ("times", "tokens_per_second", "avg_time", "avg_tokens_per_second"):
        assert len(run["speculative"]["times"]) == 2 and key in run["speculative"] and key in run["baseline"]
    assert {"speedup", "latency_reduction", "acceptance_rate", "mean_accepted_length", "alpha"} <= set(run)
    assert set(run["methods"]) == set(bench.METHODS)
    # All k of a prompt share one schedule; baselines run once a round; every round in the same order.
    order = run["order"]
    assert order.count("hf_greedy") == 2 and order.count("spec_cached@k=1") == order.count("spec_cached@k=2") == 2
    assert order[: len(order) // 2] == order[len(order) // 2 :]
    for name, entry in run["methods"].items():
        assert entry["identical"], name  # every method reproduces HF greedy
        assert entry["new_tokens"] == [8, 8]
        assert entry["q1_time"] <= entry["median_time"] <= entry["q3_time"]
    stats = run["methods"]["spec_cached"]["stats"]
    assert sum(stats["by_position"]["proposed"]) == stats["proposed"]
    assert len(results["theory"]) == 2
    row = results["theory"][0]
    assert row["predicted_speedup"] == pytest.approx(theory.expected_speedup(row["alpha"], row["k"], row["c"]))
    curve = results["costs"]["tiny/" + run["drafter"]]["target_forward"]
    assert curve["sizes"][:3] == [1, 2, 3] and len(curve["median_s"]) == len(curve["sizes"])


def test_sweep_writes_figures_and_tables(sweep):
    out, _ = sweep
    for name in (
        "speedup_vs_k",
        "acceptance_vs_k",
        "acceptance_by_position",
        "accepted_length_hist",
        "tokens_per_s",
        "forward_cost",
        "theory_vs_measured",
    ):
        for ext in ("png", "pdf"):
            assert (out / "figures" / f"{name}.{ext}").stat().st_size > 1000, (name, ext)
    for name in ("sweep", "methods", "theory", "prompts"):
        md = (out / "tables" / f"{name}.md").read_text()
        assert md.startswith("| preset | drafter | k |")
        assert (out / "tables" / f"{name}.csv").read_text().startswith("preset,drafter,k,")
        assert "\\toprule" in (out / "tables" / f"{name}.tex").read_text()


def test_report_builds_from_results_dir(sweep, tmp_path):
    out, _ = sweep
    paths = report.build_report(out / "results", tmp_path / "build", pdf=False)
    markdown = paths["md"].read_text()
    assert "{{" not in markdown and "(missing:" not in markdown
    assert "| preset | drafter | k | acceptance |" in markdown
    page = paths["html"].read_text()
    assert page.count("<table>") >= 4 and "<th>speedup of ours (KV cache) vs HF generate (greedy)</th>" in page
    assert page.count('src="data:image/png;base64,') >= 7  # every figure embedded: one self-contained file
    assert "TODO" in page and "<!--" not in markdown


# --------------------------------------------------------------------------- text helpers


def test_table_renderers():
    columns, rows, formats = ["name", "x"], [["a_b & c", 0.5], ["d", None]], ["", ".1%"]
    assert tables.to_markdown(columns, rows, formats).splitlines()[2] == "| a_b & c | 50.0% |"
    assert "a\\_b \\& c & 50.0\\% \\\\" in tables.to_latex(columns, rows, formats)
    assert tables.to_csv(columns, rows, formats).splitlines() == ["name,x", "a_b & c,0.5", "d,"]


def test_markdown_to_html_subset():
    page = report.markdown_to_html(
        "# Title\n\nSome **bold** `x<y`.\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    assert "<h1>Title</h1>" in page and "<strong>bold</strong>" in page and "<code>x&lt;y</code>" in page
    assert re.search(r"<ul>\s*<li>one</li>\s*<li>two</li>\s*</ul>", page)
    assert "<th>a</th>" in page and "<td>2</td>" in page


def test_missing_placeholder_stays_visible():
    results = dict(config=dict(ks=[1], max_new_tokens=1, repeats=1, warmup=0), summary=[], runs=[], theory=[])
    assert report.fill_template("{{ figure.nope }}", results, {}) == "*(missing: figure.nope)*"
    assert report.fill_template("{{ nope }}", results, {}) == "*(missing: nope)*"
    with pytest.raises(ValueError, match=r"placeholders read \{\{ table.sweep \}\}"):
        report.fill_template("{{table:sweep}}", results, {})
    assert not math.isnan(theory.expected_speedup(0.3, 1, 0.0))


# --------------------------------------------------------------------------- same constant k as HF, and the perf report


def _count_forwards(model):
    calls = []
    handle = model.register_forward_hook(lambda *args: calls.append(1))
    return calls, handle


def test_hf_assisted_drafts_k_tokens_every_round_and_restores_the_threshold(pair):
    target = pair.target
    unsure = tiny_model("gpt_neox", seed=7)  # unrelated: its top probabilities sit far below HF's 0.4
    unsure.generation_config.assistant_confidence_threshold = 0.7
    kwargs = dict(attention_mask=torch.ones_like(PROMPT), do_sample=False, max_new_tokens=12, pad_token_id=0)
    calls, handle = _count_forwards(unsure)
    try:
        with torch.no_grad():
            target.generate(
                PROMPT,
                assistant_model=unsure,
                num_assistant_tokens=4,
                num_assistant_tokens_schedule="constant",
                **kwargs,
            )
        early_stopped = len(calls)
        calls.clear()
        out = bench.build_methods(target, unsure, 4, names=["hf_assisted"])["hf_assisted"](PROMPT, 12)
    finally:
        handle.remove()
    assert len(calls) > early_stopped  # HF's own early stop is off: every round drafts k tokens
    assert unsure.generation_config.assistant_confidence_threshold == 0.7
    assert unsure.generation_config.num_assistant_tokens is None  # restored
    assert torch.equal(out.sequences, bench._reference(target, PROMPT, 12, None))


@pytest.mark.parametrize("k", [1, 3, 5])
def test_hf_assisted_and_ours_feed_the_target_alike(pair, k):
    """The same constant k on both sides: round by round, HF's target is fed as many tokens as ours
    (k drafts + 1, fewer only where max_new_tokens leaves less room)."""
    fed = []
    handle = pair.target.register_forward_hook(
        lambda m, args, kwargs, out: fed.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    methods = bench.build_methods(pair.target, pair.draft, k, names=["hf_assisted", "spec_cached"])
    try:
        methods["hf_assisted"](PROMPT, 20)
        theirs = list(fed)
        fed.clear()
        methods["spec_cached"](PROMPT, 20)
    finally:
        handle.remove()
    assert theirs == fed and max(fed[1:]) == k + 1


def test_perf_ratios_and_geometric_means(sweep):
    from specdec_helpers.measure import perf

    _, results = sweep
    rows = perf.ratio_rows(results)
    prompts = [r for r in rows if not r["prompt"].startswith("geometric mean")]
    means = [r for r in rows if r["prompt"].startswith("geometric mean")]
    assert len(prompts) == 4 and len(means) == 2  # 2 prompts x k in {1, 2}
    run = results["runs"][0]
    first = next(r for r in prompts if r["prompt"] == run["prompt"] and r["k"] == run["k"])
    times = {m: run["methods"][m]["median_time"] for m in ("spec_cached", "hf_assisted", "greedy")}
    assert first["vs_hf_assisted"] == pytest.approx(times["hf_assisted"] / times["spec_cached"])
    assert first["of_bound"] == pytest.approx(first["vs_greedy"] / first["bound"])
    for mean in means:
        group = [r["vs_greedy"] for r in prompts if r["k"] == mean["k"]]
        assert mean["vs_greedy"] == pytest.approx(math.exp(sum(map(math.log, group)) / len(group)))


def test_perf_compiled_rows_compare_the_compiled_runs(sweep, pair):
    import copy

    from specdec_helpers.measure import perf

    _, results = sweep
    results = copy.deepcopy(results)
    for run in results["runs"]:  # pretend the compiled runs took half (spec) and a third (greedy) of the time
        methods = run["methods"]
        methods["spec_compiled"] = dict(methods["spec_cached"], median_time=methods["spec_cached"]["median_time"] / 2)
        methods["greedy_compiled"] = dict(methods["greedy"], median_time=methods["greedy"]["median_time"] / 3)
    with pytest.MonkeyPatch.context() as patch:  # a compiled curve twice as fast, without compiling anything
        patch.setattr(perf, "compiled_forward", lambda target: target)
        patch.setattr(
            perf,
            "measure_forward_cost",
            lambda model, ids, sizes, warmup: dict(sizes=sizes, median_s=[n / 2000 for n in sizes]),
        )
        results["costs"].update(perf.compiled_costs(results["costs"], pair.target, PROMPT))
    name = next(iter(results["costs"]))
    compiled = results["costs"][f"{name} compiled"]
    assert compiled["target_step_s"] == 0.0005 and compiled["verify_cost"][1] == pytest.approx(2.0)
    rows = [r for r in perf.ratio_rows(results) if not r["prompt"].startswith("geometric mean")]
    eager = [r for r in rows if not r["drafter"].endswith(" compiled")]
    assert len(rows) == 2 * len(eager)
    for row in eager:
        twin = next(
            r
            for r in rows
            if r["drafter"] == row["drafter"] + " compiled" and r["prompt"] == row["prompt"] and r["k"] == row["k"]
        )
        assert twin["vs_hf_assisted"] == pytest.approx(2 * row["vs_hf_assisted"])
        assert twin["vs_greedy"] == pytest.approx(row["vs_greedy"] * 2 / 3)


def test_profile_splits_the_round_into_phases(pair):
    from specdec_helpers.measure import perf

    profile = perf.profile_decode(pair.target, pair.draft, PROMPT, k=3, max_new_tokens=12)
    phases = profile["ms_per_round"]
    assert set(phases) == {*perf.PHASES, "rest"}
    assert all(v >= 0 for v in phases.values()) and phases["target_forward"] > 0 and phases["draft"] > 0
    assert sum(phases.values()) == pytest.approx(profile["wall_ms_per_round"], rel=0.05)
    assert profile["tokens_per_round"] >= 1


def test_perf_command_prints_every_ratio(pair, tmp_path, capsys):

    drafts = {"hybrid": HybridDrafter(pair.draft), "prompt-lookup": PromptLookupDrafter()}
    fake = SimpleNamespace(
        target=pair.target,
        draft=pair.draft,
        preset="tiny",
        device=torch.device("cpu"),
        dtype=torch.float32,
        encode=lambda text: torch.tensor([[len(text) % 60 + 1, 2, 3, 4]]),
        with_draft=lambda spec, progress=False: SimpleNamespace(draft=drafts[spec]),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("specdec_helpers.models.pairs.load_pair", lambda *args, **kwargs: fake)
        assert (
            cli.perf(
                [
                    "--preset",
                    "tiny",
                    "--k",
                    "2",
                    "--max-new-tokens",
                    "6",
                    "--repeats",
                    "1",
                    "--prompts",
                    "one",
                    "two",
                    "--out",
                    str(tmp_path),
                ]
            )
            == 0
        )
    printed = capsys.readouterr().out
    for header in ("vs HF assisted", "vs greedy", "of bound", "geometric mean (2 prompts)", "target_forward", "c = "):
        assert header in printed
    saved = json.loads((tmp_path / "results" / "perf.json").read_text())
    # The hybrid default, the model inside it (which HF assisted can run too), and prompt lookup.
    drafters = [r["drafter"] for r in saved["ratios"] if r["prompt"].startswith("geometric mean")]
    assert drafters == ["hybrid", draft_label(pair.draft), "prompt-lookup"]
    hybrid, model = (next(r for r in saved["ratios"] if r["drafter"] == d) for d in drafters[:2])
    assert hybrid["vs_hf_assisted"] is None and model["vs_hf_assisted"] > 0
    assert len(saved["profiles"]) == 3


def test_bound_for_rounds_is_the_refined_bound_for_constant_k_and_counts_short_rounds():
    from specdec_helpers.measure import perf

    curve = dict(sizes=[1, 2, 3, 4, 5], median_s=[0.010, 0.011, 0.012, 0.013, 0.014])
    constant = perf.bound_for_rounds(0.6, [4] * 10, 40, 0.1, curve)
    assert constant == pytest.approx(theory.refined_speedup(0.6, 4, 0.1, 1.4))
    # Rounds that proposed nothing yield one token for one step: they pull the bound towards 1.
    mixed = perf.bound_for_rounds(0.6, [4] * 10 + [0] * 10, 40, 0.1, curve)
    tokens = 10 * theory.expected_tokens_per_step(0.6, 4) + 10
    assert mixed == pytest.approx(tokens / (10 * (0.4 + 1.4) + 10 * 1.0))
    assert 1 < mixed < constant
    # Proposals that cost no draft step (n-gram lookup) raise it.
    assert perf.bound_for_rounds(0.6, [4] * 10, 0, 0.1, curve) > constant
