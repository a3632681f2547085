"""The harness on a decoder object (PA3's interface, as students write it): rounds observed from the outside,
the sweep, tables and token explorer on it, and near-tie-aware greedy checks (no timings asserted)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tiny_models import hf_greedy, perturbed_copy, tiny_model
from specdec_helpers.core.cache import crop_cache, new_cache
from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.core.verify import accept_greedy, score_draft
from specdec_helpers.measure import bench
from specdec_helpers.measure.observed import check_decoder, observed_decode
from specdec_helpers.present import benchmarking, tables

PROMPT = torch.tensor([[1, 2, 3, 4, 5, 6]])


class PA3Decoder:
    """A correct PA3-style decoder written here (not the kit's loop), with knobs for the tests:
    ``skip_last_draft`` verifies an empty draft without a draft call when there is room for one token;
    ``lie`` reports made-up counters; ``drop_last`` cuts the last new token (a wrong decoder)."""

    def __init__(self, target, draft, skip_last_draft=False, lie=False, drop_last=False):
        self.target_model, self.draft_model = target, draft
        self.skip_last_draft, self.lie, self.drop_last = skip_last_draft, lie, drop_last
        self.eos_token_id, self.stats = None, {}
        self.reset()

    def reset(self):
        self.target_cache = None

    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids, attention_mask=None, num_speculative_tokens=5):
        ids = input_ids
        for _ in range(num_speculative_tokens):
            ids = torch.cat([ids, self.draft_model(ids).logits[:, -1:].argmax(-1)], dim=1)
        return ids[:, input_ids.shape[1] :]

    @torch.inference_mode()
    def verify_tokens_vectorized(self, input_ids, draft_tokens, attention_mask=None):
        result = accept_greedy(score_draft(self.target_model, input_ids, draft_tokens), draft_tokens.reshape(-1))
        return result.tokens.tolist(), result.num_accepted

    @torch.inference_mode()
    def verify_tokens_cached(self, input_ids, draft_tokens, attention_mask=None):
        if self.target_cache is None:
            self.target_cache = new_cache(self.target_model)
        logits = score_draft(self.target_model, input_ids, draft_tokens, self.target_cache)
        result = accept_greedy(logits, draft_tokens.reshape(-1))
        crop_cache(self.target_cache, input_ids.shape[1] + result.num_accepted)
        return result.tokens.tolist(), result.num_accepted

    def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
        self.reset()
        start = input_ids.shape[1]
        verify = self.verify_tokens_cached if use_cache else self.verify_tokens_vectorized
        while input_ids.shape[1] - start < max_tokens:
            room = max_tokens - (input_ids.shape[1] - start) - 1
            k = min(num_speculative_tokens, room)
            draft = (
                input_ids.new_empty(1, 0)
                if (k == 0 and self.skip_last_draft)
                else self.generate_draft_tokens(input_ids, None, k)
            )
            tokens, _ = verify(input_ids, draft)
            input_ids = torch.cat([input_ids, torch.tensor([tokens], dtype=input_ids.dtype)], dim=1)
        self.stats = {"proposed": 10**6, "accepted": 10**6} if self.lie else {}
        return input_ids[:, :-1] if self.drop_last else input_ids


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("gpt_neox")
    return SimpleNamespace(
        target=target,
        draft=perturbed_copy(target, scale=0.1),
        preset="tiny",
        device=torch.device("cpu"),
        dtype=torch.float32,
        num_speculative_tokens=3,
    )


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("skip_last_draft", [False, True])
def test_observed_rounds_add_up_to_the_output(pair, use_cache, skip_last_draft):
    decoder = PA3Decoder(pair.target, pair.draft, skip_last_draft=skip_last_draft, lie=True)
    out = observed_decode(decoder, PROMPT, 12, 3, use_cache)
    assert torch.equal(out.sequences, hf_greedy(pair.target, PROMPT, 12))
    new = out.sequences[0, PROMPT.shape[1] :].tolist()
    assert sum((s.emitted for s in out.steps), []) == new  # every new token comes from one observed round
    assert out.stats.new_tokens == 12 and out.stats.target_calls == len(out.steps)
    assert out.stats.proposed == sum(len(s.draft) for s in out.steps) < 10**6  # not the decoder's own (lying) counters
    assert out.stats.accepted == sum(s.accepted for s in out.steps) <= out.stats.proposed
    assert all(s.emitted[: s.accepted] == s.draft[: s.accepted] for s in out.steps)
    assert out.stats.draft_calls == out.stats.proposed  # one draft pass per drafted token, as the kit's loop counts
    # the wrappers are gone afterwards: the decoder's own methods again
    assert "verify_tokens_cached" not in vars(decoder) and "generate_draft_tokens" not in vars(decoder)


def test_observed_decode_rejects_what_is_not_a_decoder(pair):
    with pytest.raises(TypeError, match="generate_ids.*SpeculativeDecoder instance"):
        check_decoder(pair.target)
    with pytest.raises(TypeError, match="not the class"):
        observed_decode(PA3Decoder, PROMPT, 4, 2)


def test_benchmark_times_the_decoder_and_checks_its_output(pair):
    good = benchmark = bench.benchmark(
        pair.target,
        pair.draft,
        PROMPT,
        num_speculative_tokens=3,
        max_new_tokens=8,
        repeats=1,
        methods=("hf_greedy", "spec_cached", "spec_vectorized", "spec_compiled"),
        decoder=PA3Decoder(pair.target, pair.draft),
    )
    assert benchmark["methods"]["spec_cached"]["identical"] and benchmark["methods"]["spec_cached"]["matches_greedy"]
    assert "kit's" in benchmark["methods"]["spec_compiled"]["skipped"]
    assert good["acceptance_rate"] == good["methods"]["spec_cached"]["stats"]["acceptance_rate"]
    wrong = bench.benchmark(
        pair.target,
        pair.draft,
        PROMPT,
        num_speculative_tokens=3,
        max_new_tokens=8,
        repeats=1,
        methods=("hf_greedy", "spec_cached"),
        decoder=PA3Decoder(pair.target, pair.draft, drop_last=True),
    )
    m = wrong["methods"]["spec_cached"]
    assert not m["identical"] and not m["matches_greedy"] and "greedy decoding gives" in m["greedy_note"]
    assert not benchmarking.all_match_greedy(wrong) and benchmarking.all_match_greedy(good)


def test_a_near_tie_is_not_a_mismatch(pair, monkeypatch):
    """Output that differs from HF greedy only at a near-tie matches greedy (what fp16 on a GPU gives);
    the check is `checks.greedy_divergence`, as in notebooks 03 and 04."""
    reference = hf_greedy(pair.target, PROMPT, 6)
    other = reference.clone()
    other[0, -1] = (other[0, -1] + 1) % 50
    calls = []

    def fake(target, prompt, new_tokens, want=None, **kwargs):
        calls.append(list(new_tokens.tolist()))
        return True, "new token 5: a near-tie"

    monkeypatch.setattr(bench.checks, "greedy_divergence", fake)
    assert bench._greedy_check(pair.target, PROMPT, reference, reference) == (True, True, "")
    assert bench._greedy_check(pair.target, PROMPT, reference, other) == (False, True, "new token 5: a near-tie")
    assert calls == [other[0, PROMPT.shape[1] :].tolist()]
    assert bench._greedy_check(pair.target, PROMPT, reference, other[:, 2:])[1] is False  # prompt not kept


def test_sweep_on_a_decoder_fills_tables_and_says_whose(pair, tmp_path):
    results = benchmarking.sweep(
        pair,
        PA3Decoder(pair.target, pair.draft),
        [("p", PROMPT)],
        ks=(1, 2),
        max_new_tokens=6,
        repeats=1,
        methods=("hf_greedy", "greedy", "spec_cached"),
        cost_repeats=1,
    )
    assert results["config"]["decoder"] == "PA3Decoder (notebooks 01-04)"
    columns, rows, _ = tables.sweep_table(results)
    assert columns[-1] == "matches greedy" and [r[-1] for r in rows] == [True, True]
    # the method in front of "vs", the baseline after it (not "HF generate greedy (KV cache)": whose cache?)
    assert columns[6] == "speedup of ours (KV cache) vs HF generate (greedy)"
    # the theory table's baseline is our greedy loop run eagerly, as the decoder runs (`build_methods`), and says so
    theory = benchmarking.theory_markdown(results, lambda alpha, k: 1.0)
    assert "measured vs ours greedy (eager, as your decoder) |" in theory and "no CUDA graphs" in theory
    assert results["theory"] and theory.count("\n| ") == len(results["theory"])
    assert all(
        r["stats"]["by_position"]["proposed"] for r in (run["methods"]["spec_cached"] for run in results["runs"])
    )
    paths = benchmarking.export(results, tmp_path, "notebook05_tiny")
    assert paths["json"].is_file() and paths["figures"] and paths["tables"]


def test_token_explorer_runs_the_decoder(pair):
    from specdec_helpers.present.widgets import TokenExplorer  # ipywidgets is a hard dependency: no skip

    tok = SimpleNamespace(decode=lambda ids, **kw: "".join(f"<{i}>" for i in ids))
    shown = SimpleNamespace(
        target=pair.target, draft=pair.draft, tokenizer=tok, encode=lambda text: PROMPT, num_speculative_tokens=3
    )
    explorer = TokenExplorer(shown, ["x"], max_new_tokens=6, decoder=PA3Decoder(pair.target, pair.draft))
    assert explorer.temperature.value == 0 and explorer.drafter.value == "draft model"  # the decoder's settings
    html = explorer.run()
    assert "sd-accepted" in html or "sd-correction" in html
    assert torch.equal(explorer.last.sequences, hf_greedy(pair.target, PROMPT, 6))


def test_an_unfinished_part_stops_the_benchmark_with_its_message(pair):
    """A decoder whose part is missing (the student edition's placeholder raises NotImplementedError naming
    its notebook) is not silently dropped from the sweep: the message reaches the reader."""

    class Unfinished(PA3Decoder):
        def verify_tokens_cached(self, *args, **kwargs):
            raise NotImplementedError("finish notebook 04's `verify_tokens_cached` first")

    with pytest.raises(NotImplementedError, match="notebook 04's `verify_tokens_cached`"):
        bench.benchmark(
            pair.target,
            pair.draft,
            PROMPT,
            num_speculative_tokens=2,
            max_new_tokens=4,
            repeats=1,
            methods=("hf_greedy", "spec_cached"),
            decoder=Unfinished(pair.target, pair.draft),
        )


def test_a_student_edition_placeholder_names_its_notebook(pair):
    """The student edition fills a part the student has not written with a placeholder that raises
    `PartMissing` (a NotImplementedError) naming its notebook: benchmarking such a decoder says so."""
    from specdec_helpers.assignment.parts.decoder import PartMissing, missing_part

    class Half(PA3Decoder):
        generate_ids = missing_part("generate_ids")

    with pytest.raises(PartMissing, match="finish notebook 04's `generate_ids` first"):
        bench.benchmark(
            pair.target,
            pair.draft,
            PROMPT,
            num_speculative_tokens=2,
            max_new_tokens=4,
            repeats=1,
            methods=("hf_greedy", "spec_cached"),
            decoder=Half(pair.target, pair.draft),
        )


def test_compare_tree_chain_runs_the_chains_on_the_decoder(pair):
    """Notebooks 07/08 pass the student's decoder: its chain rows count what the kit's chains count (both greedy
    with the same draft), and a wrong decoder shows in the ``same`` column."""
    from specdec_helpers.measure.tree_vs_chain import compare_tree_chain

    kit = compare_tree_chain(pair.target, pair.draft, [PROMPT], tree=(2, 1), max_new_tokens=10, show=False)
    mine = compare_tree_chain(
        pair.target,
        pair.draft,
        [PROMPT],
        tree=(2, 1),
        max_new_tokens=10,
        show=False,
        decoder=PA3Decoder(pair.target, pair.draft),
    )
    assert (
        [r["method"] for r in mine] == [r["method"] for r in kit] == ["greedy", "chain k=2", "chain k=3", "tree [2, 1]"]
    )
    for a, b in zip(kit, mine):
        assert b["same"] and (a["tokens_per_target_call"], a["nodes_per_target_call"], a["draft_calls"]) == (
            b["tokens_per_target_call"],
            b["nodes_per_target_call"],
            b["draft_calls"],
        ), (a, b)
    wrong = compare_tree_chain(
        pair.target,
        pair.draft,
        [PROMPT],
        tree=(2, 1),
        max_new_tokens=10,
        show=False,
        decoder=PA3Decoder(pair.target, pair.draft, drop_last=True),
    )
    assert [r["same"] for r in wrong] == [True, False, False, True]
    with pytest.raises(TypeError, match="SpeculativeDecoder instance"):
        compare_tree_chain(pair.target, pair.draft, [PROMPT], tree=(2, 1), decoder=pair.target)


def test_the_notebooks_trace_is_observed_decode_and_your_drafter_follows_the_protocol(pair):
    """`nb.traced` (notebooks 04, 06) records rounds and counts draft passes by the one rule of
    `observed_decode`; `nb.YourDrafter` runs the student's draft method in the kit's loop."""
    from specdec_helpers.assignment.student import notebook as nb

    decoder = PA3Decoder(pair.target, pair.draft)
    traced, observed = nb.traced(decoder, PROMPT, 12, 3), observed_decode(decoder, PROMPT, 12, 3)
    assert torch.equal(traced.sequences, observed.sequences) and traced.steps == observed.steps
    assert traced.stats.as_dict() | {"wall_time_s": 0, "tokens_per_s": 0} == observed.stats.as_dict() | {
        "wall_time_s": 0,
        "tokens_per_s": 0,
    }
    drafter = nb.YourDrafter(decoder)
    decoder.draft_cache = "stale"
    out = speculative_decode(pair.target, drafter, PROMPT, max_new_tokens=12, num_speculative_tokens=3)
    assert decoder.draft_cache is None  # update(0): a new text
    assert torch.equal(out.sequences, hf_greedy(pair.target, PROMPT, 12)) and out.stats.accepted > 0


class RowsDecoder(PA3Decoder):
    """PA3's shape of verification: ``verify_tokens_vectorized`` hands its rows of logits to ``accept_draft``."""

    def accept_draft(self, target_logits, draft_tokens):
        result = accept_greedy(target_logits, draft_tokens.reshape(-1))
        return result.tokens.tolist(), result.num_accepted

    @torch.inference_mode()
    def verify_tokens_vectorized(self, input_ids, draft_tokens, attention_mask=None):
        return self.accept_draft(score_draft(self.target_model, input_ids, draft_tokens), draft_tokens)


def test_sampling_on_a_decoders_scoring_pass_is_the_kits_sampling(pair):
    """`speculative_decode(score=decoder_scoring(decoder))` (notebook 06 on the student's scoring from 03) samples
    exactly what the kit's own scoring pass samples; a verify that hands accept_draft no rows is named."""
    import specdec_helpers as sd
    from specdec_helpers.measure.observed import decoder_scoring

    ids = torch.tensor([[1, 2, 3, 4, 5]])
    kw = dict(max_new_tokens=12, num_speculative_tokens=3, temperature=1.0, use_cache=False)
    score = decoder_scoring(RowsDecoder(pair.target, pair.draft))
    kit = sd.speculative_decode(pair.target, pair.draft, ids, generator=torch.Generator().manual_seed(0), **kw)
    ours = sd.speculative_decode(
        pair.target, pair.draft, ids, generator=torch.Generator().manual_seed(0), score=score, **kw
    )
    assert torch.equal(kit.sequences, ours.sequences) and kit.stats.accepted == ours.stats.accepted
    with pytest.raises(ValueError, match=r"k \+ 1 = 4 rows of logits.*0 calls"):
        decoder_scoring(PA3Decoder(pair.target, pair.draft))(pair.target, ids, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="one prompt"):
        sd.speculative_decode(pair.target, pair.draft, [ids[0], ids[0]], score=score, **kw)


def test_the_kits_stand_ins_are_observed_round_by_round(pair):
    """Notebook 05 opened alone (no notebooks 01-04 next to it) benchmarks the kit's stand-ins: the harness must
    see their rounds, or the sweep has no acceptance to report (it divided by 0 target passes)."""
    from specdec_helpers.assignment.parts.decoder import build_decoder

    decoder = build_decoder().from_pair(SimpleNamespace(**vars(pair), tokenizer=None))
    assert decoder.parts_from_kit  # every part is the kit's
    for use_cache in (True, False):
        out = observed_decode(decoder, PROMPT, 12, 3, use_cache)
        assert torch.equal(out.sequences, hf_greedy(pair.target, PROMPT, 12))
        assert out.stats.target_calls == len(out.steps) == decoder.stats["rounds"] > 0
        assert sum((s.emitted for s in out.steps), []) == out.sequences[0, PROMPT.shape[1] :].tolist()
        assert out.stats.proposed == decoder.stats["proposed"] and out.stats.accepted == decoder.stats["accepted"]


def test_a_loop_that_verifies_out_of_sight_is_named_not_divided_by_zero(pair):
    """A ``generate_ids`` that never calls its verify methods leaves no round to read: the harness says so."""

    class Unseen(PA3Decoder):
        def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
            return speculative_decode(
                self.target_model, self.draft_model, input_ids, max_new_tokens=max_tokens
            ).sequences

    with pytest.raises(RuntimeError, match="without calling verify_tokens_cached .*rounds were not observed"):
        observed_decode(Unseen(pair.target, pair.draft), PROMPT, 6, 2)
    assert observed_decode(Unseen(pair.target, pair.draft), PROMPT, 0, 2).stats.target_calls == 0  # nothing to read
