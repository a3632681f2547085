"""What a round decides (`VerifyResult`), what the loops keep of it (`Step`, the counters of `DecodeStats`) and what a
decode returns (`DecodeOutput`); `cut_at_eos`, the rule every loop ends a text by. The text a chain or tree loop grows
is `decode.Text`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class VerifyResult:
    """What one verification pass decided.

    ``tokens`` = the ``num_accepted`` accepted draft tokens followed by one token from the target:
    the *correction* at the first mismatch, or the *bonus* token when every draft token passed.
    """

    tokens: torch.Tensor  # LongTensor [num_accepted + 1]
    num_accepted: int
    num_proposed: int
    token_list: list[int] | None = field(
        default=None, repr=False, compare=False
    )  # ``tokens`` on the host, when already read

    # PA3 returned (accepted_tokens, accepted_position); keep that spelling available.
    @property
    def accepted_tokens(self) -> torch.Tensor:
        return self.tokens[: self.num_accepted]

    @property
    def accepted_position(self) -> int:
        return self.num_accepted


@dataclass
class Step:
    """One round: what the draft proposed, how many the target accepted, what was appended."""

    # A device tensor while the loop runs (no read per round); `Text.finish` makes it a list.
    draft: torch.Tensor | list[int]
    accepted: int
    emitted: list[int]  # tokens appended this round (accepted draft + correction/bonus, cut at EOS/limit)

    @property
    def rejected(self) -> list[int]:
        return self.draft[self.accepted :]

    @property
    def target_token_kind(self) -> str:
        """'bonus' (all k accepted), 'correction' (first mismatch) or 'target' (nothing was drafted)."""
        if not self.draft:
            return "target"
        return "bonus" if self.accepted == len(self.draft) else "correction"


@dataclass
class DecodeStats:
    """Counters of one decode call.

    - ``new_tokens``: tokens appended after the prompt.
    - ``proposed`` / ``accepted``: draft tokens proposed / accepted by verification, summed over rounds
      (correction and bonus tokens come from the target and are never counted as accepted).
    - ``acceptance_rate`` = accepted / proposed (0 when nothing was proposed).
    - ``mean_accepted_length`` = new tokens per target call (1.0 for plain greedy decoding).
    - ``target_calls`` = rounds (one target pass each, prefill included); ``draft_calls`` = draft passes.
    - ``accepted_per_step``: accepted draft tokens in each round.
    - ``wall_time_s`` / ``tokens_per_s``: time of the rounds (device synced; the prefill is round 1's target pass,
      the argument checks and the backend's set-up are not timed) and new_tokens / time.
    """

    new_tokens: int = 0
    proposed: int = 0
    accepted: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    accepted_per_step: list[int] = field(default_factory=list)
    wall_time_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def record_round(self, proposed: int, accepted: int, draft_calls: int) -> None:
        """Count one round: one target pass that judged ``proposed`` draft tokens."""
        self.target_calls += 1
        self.draft_calls += draft_calls
        self.proposed += proposed
        self.accepted += accepted
        self.accepted_per_step.append(accepted)

    def as_dict(self) -> dict:
        names = [
            "new_tokens",
            "proposed",
            "accepted",
            "acceptance_rate",
            "mean_accepted_length",
            "target_calls",
            "draft_calls",
            "accepted_per_step",
            "wall_time_s",
            "tokens_per_s",
        ]
        return {name: getattr(self, name) for name in names}


@dataclass
class DecodeOutput:
    sequences: torch.Tensor  # [1, prompt + new], as target.generate(do_sample=False) returns
    stats: DecodeStats
    steps: list[Step]  # per-round trace, for explaining and colouring the output
    backend: str = ""  # what ran the models, and why (`backends.choose`)

    @property
    def new_tokens(self) -> torch.Tensor:
        return self.sequences[0, self.sequences.shape[1] - self.stats.new_tokens :]


def cut_at_eos(tokens: list[int], eos: set[int]) -> list[int]:
    """``tokens`` up to and including the first EOS (an EOS inside an accepted block ends the text)."""
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[: i + 1]
    return tokens
