"""Known-mistake catalog: each mistake students made (PA3 reports, office hours, reading the reference
as a student would) as a variant of the reference's graded cell source, with the test that must catch
it and a phrase of the feedback it must give. ``tests/test_assignment.py`` grades every mutation and
checks both, so a change to the grader that stops naming a mistake fails CI. ``mistakes`` grades them
in a child, as a submission; the tests and ``benchmarks/grading_worlds.py`` answer in this process
(``in_process``), and a test keeps the two reports equal for a mutation of each kind of part.

    python -m specdec_helpers mistakes     # grade every mutation, print the catalog
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec_helpers.assignment.grading.grader import load_config, run_suite
from specdec_helpers.assignment.grading.scoring import Report
from specdec_helpers.assignment.grading.sandbox import InProcess
from specdec_helpers.assignment.parts.cells import load_functions
from specdec_helpers.assignment.grading.submission import reference_sources


@dataclass(frozen=True)
class Mutation:
    name: str
    mistake: str
    part: str
    edits: tuple  # ((old, new), ...) applied to the reference cell of ``part``
    test_id: str  # the suite test that must fail
    phrase: str  # ... with feedback containing this

    def sources(self, reference: dict | None = None) -> dict:
        sources = dict(reference or reference_sources())
        source = sources[self.part]
        for old, new in self.edits:
            if old not in source:
                raise ValueError(f"mutation {self.name}: {old!r} is not in the reference's {self.part} cell")
            source = source.replace(old, new)
        sources[self.part] = source
        return sources


_ROWS = "rows = logits[start - 1 : start + k]"
_ACCEPT = "accepted_tokens, accepted_position = choices[: n + 1].tolist(), n"
_CROP = "crop_cache(cache, start + accepted_position)"
_VERIFY = "accepted_tokens, accepted_position = verify(input_ids, draft)"
_EOS_CUT = "if eos in accepted_tokens:  # keep the EOS, drop what follows it"
_EOS_STOP = "if accepted_tokens[-1] == eos:"
_PICK = "verify = self.verify_tokens_cached if use_cache else self.verify_tokens_vectorized"
_COUNT = (
    '        stats["proposed"] += draft.shape[1]\n        stats["accepted"] += accepted_position\n'
    '        stats["rounds"] += 1\n'
)
_NEW = "new = torch.tensor([accepted_tokens], dtype=input_ids.dtype, device=input_ids.device)"
_LOAD = "model = AutoModelForCausalLM.from_pretrained(model_name, dtype=dtype).to(self.device).eval()"

CATALOG = [
    Mutation(
        "logits_offset",
        "draft token j compared with the logits at position L + j instead of L - 1 + j",
        "verify",
        ((_ROWS, "rows = torch.cat([logits[start : start + k], logits[-1:]])"),),
        "verify.verify_vectorized",
        "off by one",
    ),
    Mutation(
        "no_bonus_token",
        "all k accepted: returns the k draft tokens without the target's bonus token",
        "verify",
        ((_ACCEPT, "accepted_tokens, accepted_position = (choices[:n] if n == k else choices[: n + 1]).tolist(), n"),),
        "verify.accept_all",
        "bonus token",
    ),
    Mutation(
        "no_correction_token",
        "rejection: returns only the accepted prefix, not the target's correction",
        "verify",
        ((_ACCEPT, "accepted_tokens, accepted_position = (choices[:n] if n < k else choices[: n + 1]).tolist(), n"),),
        "verify.accept_mismatch",
        "correction",
    ),
    Mutation(
        "no_cache_rollback",
        "verify_tokens_cached leaves the rejected draft positions in the target's KV cache",
        "decode",
        ((_CROP, "pass"),),
        "decode.verify_cached",
        "roll them back",
    ),
    Mutation(
        "cache_cropped_too_far",
        "the target cache is cropped one position too far (drops kept text)",
        "decode",
        ((_CROP, "crop_cache(cache, start + accepted_position - 1)"),),
        "decode.verify_cached",
        "cut too much",
    ),
    Mutation(
        "target_cache_not_reused",
        "the target cache is passed around but the target re-reads the whole text",
        "decode",
        (
            (
                "fed = torch.cat([input_ids[:, cache_length(cache):], draft_tokens], dim=1)",
                "crop_cache(cache, 0)\n    fed = torch.cat([input_ids, draft_tokens], dim=1)",
            ),
        ),
        "decode.decode_cache_reused",
        "never reused",
    ),
    Mutation(
        "sampling_draft",
        "the draft samples its tokens, which are then verified by exact match",
        "draft",
        (("fed = logits[:, -1].argmax(-1, keepdim=True)", "fed = torch.multinomial(logits[:, -1].softmax(-1), 1)"),),
        "draft.draft_greedy",
        "it samples",
    ),
    Mutation(
        "draft_from_scratch",
        "the draft re-reads the whole text every round",
        "draft",
        (("fed = input_ids[:, cache_length(cache):]", "crop_cache(cache, 0)\n    fed = input_ids"),),
        "draft.draft_cache_reuse",
        "re-reads the whole text",
    ),
    Mutation(
        "draft_cache_stale",
        "the draft's KV cache is not cropped, so it still holds rejected draft tokens",
        "draft",
        (
            (
                "crop_cache(cache, min(cache_length(cache), input_ids.shape[1] - 1))",
                "kept = min(cache_length(cache), input_ids.shape[1] - 1)",
            ),
            ("fed = input_ids[:, cache_length(cache):]", "fed = input_ids[:, kept:]"),
        ),
        "draft.draft_rounds",
        "still holds rejected draft tokens",
    ),
    Mutation(
        "draft_k_minus_1",
        "the draft proposes k - 1 tokens",
        "draft",
        (("for _ in range(k):", "for _ in range(k - 1):"),),
        "draft.draft_k",
        "one token too few",
    ),
    Mutation(
        "extra_target_pass",
        "after a rejection the target runs again to get the next token (PA3's loop)",
        "decode",
        (
            (
                _VERIFY,
                _VERIFY + "\n        if accepted_position < draft.shape[1]:\n            self.target_model("
                "input_ids=torch.cat([input_ids, draft[:, :accepted_position]], dim=1))",
            ),
        ),
        "decode.decode_one_pass",
        "exactly ONE target pass",
    ),
    Mutation(
        "eos_in_prompt",
        "EOS is searched in the whole text, so an EOS id in the prompt stops decoding",
        "decode",
        ((_EOS_STOP, "if eos in input_ids[0].tolist():"),),
        "decode.decode_eos_in_prompt",
        "the prompt contains the EOS id",
    ),
    Mutation(
        "tokens_after_eos",
        "tokens accepted after a generated EOS are kept",
        "decode",
        ((_EOS_CUT, "if False:"), (_EOS_STOP, "if eos in accepted_tokens:")),
        "decode.decode_eos",
        "more tokens after it",
    ),
    Mutation(
        "eos_only_among_draft_tokens",
        "an EOS arriving as the target's correction or bonus token does not stop",
        "decode",
        (
            (_EOS_CUT, "if eos in accepted_tokens[:accepted_position]:"),
            (_EOS_STOP, "if eos in accepted_tokens[:accepted_position]:"),
        ),
        "decode.decode_eos",
        "correction/bonus token included",
    ),
    Mutation(
        "overshoot_max_tokens",
        "the last round drafts a full k, so up to k extra tokens pass max_tokens",
        "decode",
        (("min(num_speculative_tokens, budget - 1)", "num_speculative_tokens"),),
        "decode.decode_max_tokens",
        "new tokens for max_tokens",
    ),
    Mutation(
        "bonus_counted_as_accepted",
        "acceptance counts the target's correction/bonus token as accepted",
        "decode",
        (('stats["accepted"] += accepted_position', 'stats["accepted"] += len(accepted_tokens)'),),
        "decode.decode_stats",
        "counts the target's correction/bonus tokens as accepted",
    ),
    Mutation(
        "draft_cache_cropped_short",
        "the draft cache is cropped to L - 2, so each round re-reads a position",
        "draft",
        (("min(cache_length(cache), input_ids.shape[1] - 1)", "min(cache_length(cache), input_ids.shape[1] - 2)"),),
        "draft.draft_cache_reuse",
        "cropped one position short",
    ),
    Mutation(
        "always_k_minus_1",
        "the loop always drafts k - 1 tokens",
        "decode",
        (("min(num_speculative_tokens, budget - 1)", "min(num_speculative_tokens - 1, budget - 1)"),),
        "decode.decode_rounds",
        "draft num_speculative_tokens tokens each round",
    ),
    Mutation(
        "use_cache_ignored",
        "generate_ids verifies with the cache whatever use_cache says",
        "decode",
        ((_PICK, "verify = self.verify_tokens_cached"),),
        "decode.decode_vectorized",
        "use_cache is ignored",
    ),
    Mutation(
        "stats_skip_eos_round",
        "the counters are updated after the EOS check, so the last round is not counted",
        "decode",
        ((_COUNT, ""), (_EOS_STOP + "\n            break", _EOS_STOP + "\n            break\n" + _COUNT.rstrip())),
        "decode.decode_stats",
        "miss the round that ended at EOS",
    ),
    Mutation(
        "tokens_to_cpu",
        "the text is moved to the CPU every round (and back)",
        "decode",
        (
            (
                "input_ids = torch.cat([input_ids, new], dim=1)",
                "input_ids = torch.cat([input_ids.cpu(), new.cpu()], dim=1).to(self.device)",
            ),
        ),
        "decode.decode_rounds",
        "to the CPU every round",
    ),
    Mutation(
        "new_tokens_on_cpu",
        "the new tokens are built without the input's device (crashes on a GPU only)",
        "decode",
        ((_NEW, _NEW.replace(", device=input_ids.device", "")),),
        "decode.decode_device",
        "(the models are on cuda, the new tensor on the cpu)",
    ),
    Mutation(
        "eos_count_after_cut",
        "a round cut at EOS counts the tokens it kept, not its accepted draft tokens",
        "decode",
        (
            ('        stats["accepted"] += accepted_position\n', ""),
            (_NEW, 'stats["accepted"] += len(accepted_tokens) - 1\n        ' + _NEW),
        ),
        "decode.decode_stats",
        "tokens kept after the cut at EOS",
    ),
    Mutation(
        "models_not_moved",
        "the models are never moved to the decoder's device",
        "init",
        ((_LOAD, _LOAD.replace(".to(self.device)", "")),),
        "init.init_device",
        "never moved",
    ),
    Mutation(
        "no_pad_token",
        "the tokenizer's missing pad token is not set",
        "init",
        (("    if tokenizer.pad_token is None:\n        tokenizer.pad_token = tokenizer.eos_token\n", ""),),
        "init.init_target",
        "no pad token",
    ),
    Mutation(
        "fp16_on_cpu",
        "half precision on a CPU",
        "init",
        (('dtype = torch.float16 if self.device.type == "cuda" else torch.float32', "dtype = torch.float16"),),
        "init.init_target",
        "half precision is slow",
    ),
]


def grade_mutation(
    m: Mutation,
    reference: dict | None = None,
    seed: int | None = None,
    in_process: bool = False,
    ids: set[str] | None = None,
) -> Report:
    """The implementation tests of the mutated part, run in a child like a submission's (``ids``: just these, e.g.
    the test that must catch it, which then holds the part's points; the others' checks of cost are most of a
    part's grading time). ``in_process``:
    answered here instead (the catalog is the instructor's own code): the same `child.Server` and JSON
    round trip without a child's start (~8 s of imports each), which tests/test_assignment.py keeps equal.
    In process nothing times out and a cell that fails to load raises here: fine for the instructor's own
    catalog, never for a hand-in."""
    config = load_config()
    sources = m.sources(reference)
    factory = (lambda: InProcess(load_functions(sources))) if in_process else None
    return Report(
        run_suite(sources, config["points"], only=[m.part], seed=seed, child_factory=factory, ids=ids), source=m.name
    )


def grade_all(hidden: bool = True) -> list[tuple[Mutation, Report]]:
    """Grade every mutation: ``[(mutation, report)]``."""
    reference = reference_sources()
    return [(m, grade_mutation(m, reference)) for m in CATALOG]
