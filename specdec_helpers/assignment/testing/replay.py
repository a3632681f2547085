"""The rounds of one decode, as the grader observes and replays them (the tests and the timed runs alike).

The grader judges acceptance on rounds it checks itself, never on the decoder's own statistics. The
rule a decoder must follow so that its rounds can be observed (stated in notebook 04):

    ROUND_RULE

Anything else about a round's structure is free: an empty draft or no draft call at all in the last
round, fewer draft tokens when fewer new tokens remain, a draft loop inside or outside
``generate_draft_tokens``. The target may run only once per observed round, so the observed rounds are
the rounds of speculative decoding with ``k`` draft tokens.

Those rounds are recorded in the student's process, which can rewrite them, so they are only ever a
consistency check that names a mistake (`check_rounds`: each round's draft, result and position against
the text the grader checked, ``off_greedy`` drafts counted). The acceptance the grader scores is its own
(`grader_rounds`): for greedy decoding, the rounds of every correct decoder with the draft model follow
from the prompt, the target's greedy text and the draft model's greedy proposals, so the grader computes
them in its own process. A decoder whose draft cache drifts (one mistake) is scored as any correct
decoder: the drafting tests take those points, not these.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec_helpers.core.checks import greedy_divergence

ROUND_RULE = (
    "each round, verify the draft with ONE call of self.verify_tokens_cached (or self.verify_tokens_vectorized "
    "when use_cache=False) on the text so far, and append exactly the tokens it returns (cut right after a "
    "generated EOS); draft num_speculative_tokens tokens each round, fewer only when fewer than "
    "num_speculative_tokens + 1 new tokens remain (an empty draft, or no draft call, in the last round is fine); "
    "the target runs only inside those verification calls"
)
__doc__ = __doc__.replace("ROUND_RULE", ROUND_RULE)


@dataclass
class Rounds:
    accepted: int = 0
    proposed: int = 0
    rounds: int = 0
    problem: str = ""  # empty when the rounds hold
    off_greedy: int = 0  # rounds whose draft was not the draft model's greedy proposal
    greedy_accepted: int = 0  # what the draft model's own greedy proposals would have had accepted

    @property
    def speculates(self) -> bool:
        """The rounds hold and their drafts earned something: a draft of arbitrary tokens (no draft model run)
        makes every round cost k + 1 positions for one token, which is not speculative decoding."""
        return not self.problem and self.proposed > 0 and 4 * self.accepted >= self.greedy_accepted

    def why_not(self) -> str:
        """Why the rounds are not speculative decoding ('' when they are)."""
        if self.speculates:
            return ""
        if self.problem:
            return self.problem
        if not self.proposed:
            return "no draft token was ever verified: the decoder does not speculate"
        return (
            f"its drafts had {self.accepted} tokens accepted where the draft model's own greedy proposals would "
            f"have had {self.greedy_accepted}: the drafts do not come from the draft model, so the rounds are not "
            "speculative decoding"
        )

    @property
    def note(self) -> str:
        if not self.off_greedy:
            return ""
        return (
            f"in {self.off_greedy} of {self.rounds} rounds the verified draft was not the draft model's greedy "
            "proposal: the draft cache still holds rejected draft tokens, or the draft is not the draft model's "
            "argmax (the drafting tests name it)"
        )


def _result(entry) -> tuple[list[int], int] | None:
    try:
        tokens, n = entry[3]
        tokens = tokens.reshape(-1).tolist() if isinstance(tokens, torch.Tensor) else [int(t) for t in tokens]
        return tokens, int(n)
    except (TypeError, ValueError, IndexError):
        return None


def check_rounds(
    draft_model, prompt: torch.Tensor, output: list[int], log: list, k: int, max_tokens: int, use_cache: bool = True
) -> Rounds:
    """Replay the rounds ``log`` (`world.recording`) of one ``generate_ids(prompt, max_tokens, k)`` whose
    new tokens ``output`` the caller already found right: the counts and the first broken rule."""
    text = prompt[0].tolist() + list(output)
    start = position = prompt.shape[1]
    verifies = [entry for entry in log if entry[0] == "verify"]
    passes = next((entry[1] for entry in log if entry[0] == "generate"), None)
    done = Rounds(rounds=len(verifies))
    if not verifies:
        done.problem = (
            "no verification was observed: generate_ids never called self.verify_tokens_cached / "
            "self.verify_tokens_vectorized, so the grader cannot follow its rounds (the rule: "
            f"{ROUND_RULE})"
        )
        return done
    wanted = "verify_tokens_cached" if use_cache else "verify_tokens_vectorized"
    device = next(draft_model.parameters()).device
    for r, entry in enumerate(verifies):
        length, proposed, method, draft = entry[1], entry[2], entry[4], list(entry[5])
        result = _result(entry)
        where = f"round {r + 1} (new token {position - start})"
        if method != wanted:
            done.problem = (
                f"{where}: generate_ids(use_cache={use_cache}) verified with {method}: use_cache is "
                f"ignored; verify with self.{wanted} when use_cache is {use_cache}"
            )
        elif length != position:
            done.problem = (
                f"{where} verified the text up to position {length}, expected {position}: each round must "
                "verify the text so far and append exactly the tokens verification returned"
            )
        elif result is None:
            done.problem = f"{where}: verification did not return (accepted_tokens, accepted_position)"
        elif len(draft) != proposed or not 0 <= result[1] <= proposed:
            done.problem = (
                f"{where} verified a draft of {len(draft)} token(s) reported as {proposed}, with "
                f"{result[1]} accepted: the rounds reported are not rounds a verification call can return"
            )
        elif result[0][: len(text) - position] != text[position : position + result[1] + 1]:
            done.problem = (
                f"{where} returned tokens {result[0]} where the text has "
                f"{text[position : position + result[1] + 1]}: append exactly the tokens verification returns"
            )
        budget = max_tokens - (position - start)
        if not done.problem and budget - 1 >= k and proposed != k:
            done.problem = (
                f"{where} drafted {proposed} token(s) with num_speculative_tokens={k} and {budget} new "
                f"tokens still to go: draft num_speculative_tokens tokens each round (fewer only when "
                f"fewer than num_speculative_tokens + 1 new tokens remain)"
            )
        if done.problem:
            return done
        tokens, n = result
        matched = _matched(draft, text, position)
        if n != matched:
            done.problem = f"{where} reported {n} accepted draft tokens where {matched} matched the target"
            return done
        # Checked by plain computation (`generate`), never the kit's drafting, which the student kit leaves out.
        prefix = torch.tensor([text[:position]], device=device)
        greedy = matched
        if not greedy_divergence(draft_model, prefix, draft)[0]:
            done.off_greedy += 1
            greedy = _matched(_greedy(draft_model, prefix, proposed), text, position)
        done.accepted += min(n, greedy)
        done.greedy_accepted += greedy
        done.proposed += proposed
        position += n + 1
    if position < len(text):
        done.problem = (
            f"new tokens {position - start}..{len(text) - start - 1} came from no observed verification "
            f"(the rule: {ROUND_RULE})"
        )
    elif passes is not None and passes != len(verifies):
        done.problem = (
            f"the target ran {passes} times in {len(verifies)} observed rounds: it ran outside "
            "self.verify_tokens_cached / self.verify_tokens_vectorized (the rule: one target pass per "
            "round, inside the verification call)"
        )
    return done


def grader_rounds(draft_model, prompt: torch.Tensor, output: list[int], k: int, max_tokens: int) -> tuple[int, int]:
    """``(accepted, proposed)`` of the rounds every correct greedy decoder with ``draft_model`` runs to produce
    ``output`` (the new tokens, already checked against greedy decoding) after ``prompt``, computed here, in the
    grader's process: round by round ``min(k, tokens left - 1)`` drafted, the leading ones that match the text
    accepted, one more token kept. The draft's greedy proposal after a prefix of the text matches the text as
    far as its argmax under teacher forcing does, so one draft pass over the text gives every round."""
    text = prompt[0].tolist() + list(output)
    start = position = prompt.shape[1]
    device = next(draft_model.parameters()).device
    with torch.inference_mode():
        guess = draft_model(input_ids=torch.tensor([text], device=device)).logits[0].argmax(-1).tolist()
    accepted = proposed = 0
    while position < len(text):
        size = max(0, min(k, max_tokens - (position - start) - 1))
        n = next(
            (j for j in range(size) if position + j >= len(text) or guess[position - 1 + j] != text[position + j]), size
        )
        accepted, proposed = accepted + n, proposed + size
        position += n + 1
    return accepted, proposed


def _matched(draft: list[int], text: list[int], position: int) -> int:
    """How many leading tokens of ``draft`` equal the text from ``position`` on."""
    return next((j for j, t in enumerate(draft) if position + j >= len(text) or text[position + j] != t), len(draft))


def _greedy(model, prefix: torch.Tensor, n: int) -> list[int]:
    if n <= 0:
        return []
    out = model.generate(
        prefix,
        attention_mask=torch.ones_like(prefix),
        do_sample=False,
        max_new_tokens=n,
        min_new_tokens=n,
        eos_token_id=None,
        pad_token_id=0,
    )
    return out[0, prefix.shape[1] :].tolist()
