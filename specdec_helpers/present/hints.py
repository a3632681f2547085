"""Hints for the notebooks' exercises, shown only after a failed check.

A hint in the check cell's source is read before the student has tried, and the precise ones give the
answer away. So the check cells name their hint by the exercise's id (``nb.check(..., hint="ex2_cache_lengths")``)
and `present.notebook_help.check` prints it when the check fails: first the nudge (what to think about), and
from the second failure of the same check in a kernel the fuller hint as well. Instructors read or edit
every hint here, in one table.
"""

from __future__ import annotations

# exercise id (the nbgrader grade_id of the exercise cell) -> (nudge, fuller hint)
HINTS: dict[str, tuple[str, str]] = {
    # 01 · models
    "ex1_same_vocabulary": (
        "two tokenizers agree when every token string maps to the same id in both.",
        "compare the two token -> id dicts from get_vocab(); one extra token must make them differ.",
    ),
    "ex2_count_parameters": (
        "every parameter tensor counts: its number of elements, and the bytes each takes.",
        "sum p.numel() over model.parameters(); for memory multiply by p.element_size() and divide by 1e6.",
    ),
    "ex3_verify_cost": (
        "the cost of verifying k tokens is a pass over k + 1 tokens, in units of a 1-token pass.",
        "look up the median time at size k + 1 and divide by the one at size 1.",
    ),
    # 02 · drafting
    "ex1_draft_with_generate": (
        "look at what generate() returns: more than the new tokens.",
        "generate() returns prompt + new tokens: keep only the part after input_ids.shape[1], as a 1-D tensor.",
    ),
    "ex2_agreement": (
        "mind the off-by-one: which row of logits predicts the token at position p?",
        "use rows start-1 .. L-2 of each model's logits (row i predicts token i+1) and compare the argmaxes.",
    ),
    "ex3_lookup": (
        "the latest earlier occurrence wins, and the current one (at the very end) does not count.",
        "scan from the right for the latest earlier match of the last n tokens; return what followed it.",
    ),
    # 03 · verification
    "ex1_judge_rows": (
        "the target's logits at position i predict the token at i + 1: which row judges draft token 0?",
        "the row that judges draft token j is start - 1 + j; take k + 1 rows starting at start - 1.",
    ),
    "ex2_plan_rounds": (
        "a round asks for at most the tokens still wanted minus one, and appends its accepted draft "
        "tokens plus the target's own.",
        "drafted = min(k, max_new_tokens - written - 1); added = min(accepted[i], drafted) + 1; stop "
        "once written reaches max_new_tokens.",
    ),
    # 04 · KV cache
    "ex1_cache_bytes": (
        "every layer holds a key and a value tensor; each knows its size and its bytes per number.",
        "sum numel() * element_size() over layer.keys and layer.values for every layer in cache.layers.",
    ),
    "ex2_cache_lengths": (
        "a pass caches all it feeds; the rollback keeps the text before the round plus the accepted draft tokens.",
        "with text = the text's length before the round: after_pass = text + drafted, after_rollback "
        "= text + accepted_position; then text grows by accepted_position + 1.",
    ),
    # graded parts (PA3's SpeculativeDecoder), by their grade_id: the check cells `check_part` runs
    "init": (
        "load with AutoModelForCausalLM / AutoTokenizer from the name, put the model on self.device, eval mode.",
        "return (model, tokenizer); self.device is a torch.device; give the tokenizer a pad token if it has none.",
    ),
    "draft": (
        "the draft cache must hold only text that is in input_ids, and every draft pass feeds what it lacks.",
        "crop self.draft_cache to at most L - 1 positions, feed input_ids[:, cache length:], then one token per "
        "pass: the argmax of the last row, fed back as the next input.",
    ),
    "draft_stale_cache": (
        "your draft cache still holds rejected draft tokens from the last round, so there was "
        "nothing left to feed (an empty input: 'cannot reshape tensor of 0 elements').",
        "before feeding, crop self.draft_cache so that it holds at most L - 1 positions of "
        "input_ids (crop_cache(cache, n)); then the last token of input_ids is always fed.",
    ),
    "draft_cache": (
        "the draft cache (notebook 02's generate_draft_tokens) still holds rejected draft tokens after a "
        "round, so the next draft continues a text that is not input_ids.",
        "at the start of generate_draft_tokens crop self.draft_cache to min(cache_length, L - 1) positions, "
        "then feed input_ids[:, cache_length(cache):]; the target cache is a separate matter "
        "(verify_tokens_cached).",
    ),
    "verify": (
        "row j of the k + 1 judging rows is the target's prediction at position L - 1 + j.",
        "one target pass over input_ids + draft; logits[0, L - 1 : L + k] are the judging rows; accepted_position "
        "counts leading matches, and accepted_tokens adds the argmax of row accepted_position.",
    ),
    "decode": (
        "after each verification the target cache holds exactly the kept text; each round drafts at most "
        "the room left minus one.",
        "verify_tokens_cached crops self.target_cache to L + accepted_position; generate_ids loops: draft "
        "min(k, room - 1) tokens, verify, append accepted_tokens, count proposed/accepted, stop at EOS or "
        "max_tokens.",
    ),
    # 05 · benchmarking
    "ex1_expected_tokens": (
        "a round yields its i-th token only if the i - 1 before it were accepted: a geometric sum.",
        "(1 - alpha**(k+1)) / (1 - alpha), and k + 1 when alpha == 1.",
    ),
    "ex2_best_k": (
        "only the speculative rows have a speedup worth comparing.",
        "filter results['summary'] to the spec_cached rows and take the k of the row with the largest 'speedup'.",
    ),
    # 06 · sampling
    "ex1_acceptance_probability": (
        "a draft token is kept with probability min(1, p / q); beware q = 0.",
        "divide p by q elementwise and clip at 1; torch.where(q > 0, ..., 1) avoids dividing by zero.",
    ),
    "ex2_residual": (
        "after a rejection, sample from what p has and q lacks, made a distribution again.",
        "clamp p - q at 0 (clamp_min(0)), then divide by its sum.",
    ),
    # 07 · trees
    "ex1_ancestor_mask": (
        "a node attends to itself and to every ancestor; parents come before children.",
        "start row i from its parent's row (parents come first), then set the diagonal.",
    ),
    "ex2_tree_residual": (
        "after a rejected child, the target still owes what p has and q lacks, as a distribution.",
        "clamp p - q at 0 (clamp_min(0)) and divide by its sum; if the sum is 0 (p == q), return p.",
    ),
    # 08 · serving
    "ex1_position_ids": (
        "a row's first real token gets position 0, wherever its padding put it.",
        "a cumulative sum of the mask counts each row's real tokens; subtract one and clamp the pads at 0.",
    ),
    "ex2_predict_batch": (
        "tokens gained per round over the cost of a round, both in units of one greedy step.",
        "tau = (1 - alpha^(k+1)) / (1 - alpha) (k + 1 at alpha = 1); speedup = tau * target_step_s / "
        "(verify_s + k * draft_step_s); return the first cost row below 1, else None.",
    ),
}

_failures: dict[str, int] = {}


def hint_text(hint: str) -> str:
    """The hint to show after a failed check of ``hint``: the nudge, and the fuller hint from the second
    failure on in this kernel."""
    if hint not in HINTS:
        raise ValueError(
            f"no hint {hint!r}; known hints: {', '.join(sorted(HINTS))} (specdec_helpers/present/hints.py)"
        )
    _failures[hint] = _failures.get(hint, 0) + 1
    nudge, fuller = HINTS[hint]
    if _failures[hint] == 1:
        return f"Hint: {nudge} (Fix the cell and run this check again; if it fails again, a fuller hint follows.)"
    return f"Hint: {nudge} More precisely: {fuller}"
