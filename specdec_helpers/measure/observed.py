"""Benchmark a decoder object with PA3's ``SpeculativeDecoder`` interface (the one students write).

The harness times plain functions ``fn(input_ids, max_new_tokens) -> MethodOutput``. `observed_decode`
turns ``decoder.generate_ids`` into one, and reads the rounds from the outside: for the duration of
one call it wraps the instance's ``verify_tokens_cached`` / ``verify_tokens_vectorized`` (one call =
one round: the draft it judged, how many it accepted, the tokens it returned) and counts the tokens
``generate_draft_tokens`` returned: one draft pass each, as the kit's own loop counts ``draft_calls``.
Nothing of the decoder's own counters is trusted, and nothing here knows how the decoder is built (duck typing: this layer may not import the assignment layer).
"""

from __future__ import annotations

import copy
import time

import torch

from specdec_helpers.core.rounds import DecodeOutput, DecodeStats, Step
from specdec_helpers.core.timing import sync_device

#: What a decoder must have (PA3's method names).
REQUIRED = ("generate_ids", "generate_draft_tokens", "verify_tokens_cached", "verify_tokens_vectorized")


def check_decoder(decoder) -> None:
    """TypeError naming what is missing when ``decoder`` lacks PA3's interface."""
    missing = [name for name in REQUIRED if not callable(getattr(decoder, name, None))]
    if missing or isinstance(decoder, type):
        what = (
            f"the class {decoder.__name__}"
            if isinstance(decoder, type)
            else f"{type(decoder).__name__} has no {', '.join(missing)}"
        )
        raise TypeError(
            f"{what}: pass a SpeculativeDecoder instance (e.g. nb.your_decoder('05', pair)), not the class or a model"
        )


def _ids(tokens) -> list[int]:
    if isinstance(tokens, torch.Tensor):
        return [int(t) for t in tokens.reshape(-1).tolist()]
    return [int(t) for t in tokens]


def _count(tokens) -> int:
    """How many token ids ``tokens`` holds; 0 for anything else (the checks of the output say what is wrong)."""
    try:
        return len(_ids(tokens))
    except (TypeError, ValueError):
        return 0


class _Recorder:
    """Wraps a decoder's round methods on the instance for one call, restoring them afterwards."""

    def __init__(self, decoder):
        self.decoder, self.rounds, self.draft_calls = decoder, [], 0

    def __enter__(self):
        d = self.decoder

        def verify(method):
            def run(input_ids, draft_tokens, *args, **kwargs):
                tokens, accepted = method(input_ids, draft_tokens, *args, **kwargs)
                self.rounds.append((draft_tokens, tokens, accepted))
                return tokens, accepted

            return run

        def draft(*args, **kwargs):
            tokens = type(d).generate_draft_tokens(d, *args, **kwargs)
            self.draft_calls += _count(tokens)  # one pass per drafted token
            return tokens

        d.verify_tokens_cached = verify(getattr(type(d), "verify_tokens_cached").__get__(d))
        d.verify_tokens_vectorized = verify(getattr(type(d), "verify_tokens_vectorized").__get__(d))
        d.generate_draft_tokens = draft
        return self

    def __exit__(self, *exc):
        for name in ("verify_tokens_cached", "verify_tokens_vectorized", "generate_draft_tokens"):
            self.decoder.__dict__.pop(name, None)
        return False


def observed_decode(
    decoder, input_ids: torch.Tensor, max_new_tokens: int, num_speculative_tokens: int, use_cache: bool = True
) -> DecodeOutput:
    """Run ``decoder.generate_ids`` once and return a `DecodeOutput` whose stats and per-round steps
    come from observing its verify calls (the text is the decoder's output, as returned)."""
    check_decoder(decoder)
    start = time.perf_counter()
    with _Recorder(decoder) as seen:
        sequences = decoder.generate_ids(input_ids, max_new_tokens, num_speculative_tokens, use_cache)
    sync_device(input_ids.device)
    seconds = time.perf_counter() - start
    if not isinstance(sequences, torch.Tensor) or sequences.dim() != 2:
        raise TypeError(
            f"generate_ids returned {type(sequences).__name__}, expected a [1, length] tensor of token ids "
            "(notebook 04's exercise)"
        )
    prompt_length = input_ids.shape[1]
    new = sequences[0, prompt_length:].tolist()
    if new and not seen.rounds:  # no round to read: acceptance and tokens per pass would be 0/0
        raise RuntimeError(
            f"{type(decoder).__name__}.generate_ids made {len(new)} new tokens without calling "
            "verify_tokens_cached or verify_tokens_vectorized on itself, so its rounds were not observed; "
            "the harness counts one round per verify call (notebook 04's loop makes one each round)"
        )
    stats, steps, at = DecodeStats(new_tokens=len(new), draft_calls=seen.draft_calls, wall_time_s=seconds), [], 0
    for draft_tokens, tokens, accepted in seen.rounds:
        draft, accepted = _ids(draft_tokens), int(accepted)
        emitted = new[at : at + len(_ids(tokens))]  # what made it into the text (cut at EOS or the limit)
        at += len(emitted)
        steps.append(Step(draft=draft, accepted=accepted, emitted=emitted))
        stats.target_calls += 1
        stats.proposed += len(draft)
        stats.accepted += accepted
        stats.accepted_per_step.append(accepted)
    return DecodeOutput(sequences=sequences, stats=stats, steps=steps)


def decoder_method(decoder, num_speculative_tokens: int, use_cache: bool = True):
    """``fn(input_ids, max_new_tokens) -> DecodeOutput`` for the harness (`methods.build_methods`)."""
    check_decoder(decoder)

    def run(input_ids, max_new_tokens):
        return observed_decode(decoder, input_ids, max_new_tokens, num_speculative_tokens, use_cache)

    return run


def decoder_scoring(decoder):
    """The decoder's own scoring pass as ``score(target, input_ids [1, L], draft_tokens [k]) -> logits [k + 1, vocab]``,
    for ``speculative_decode(..., score=...)``: its ``verify_tokens_vectorized`` (PA3's, notebook 03) on a copy of
    the decoder whose ``accept_draft`` only records the rows of logits it is handed (and answers "none accepted":
    the caller's rule decides, e.g. rejection sampling). Nothing here selects a row: the rows are the decoder's."""
    check_decoder(decoder)

    def score(target, input_ids, draft_tokens):
        seen = []

        def record(target_logits, draft):
            seen.append(target_logits)
            return target_logits[:1].argmax(-1).tolist(), 0  # a well-formed answer, never used

        probe = copy.copy(decoder)
        probe.target_model, probe.accept_draft = target, record
        probe.verify_tokens_vectorized(input_ids, draft_tokens.reshape(1, -1))
        k = draft_tokens.numel()
        rows = seen[0] if len(seen) == 1 else None
        if not isinstance(rows, torch.Tensor) or rows.dim() != 2 or rows.shape[0] != k + 1:
            got = (
                f"{len(seen)} calls"
                if len(seen) != 1
                else f"a {type(rows).__name__} of shape {tuple(getattr(rows, 'shape', ()))}"
            )
            raise ValueError(
                f"verify_tokens_vectorized must hand accept_draft the k + 1 = {k + 1} rows of logits that "
                f"judge the draft, once per call; it gave {got} (notebook 03's exercise)"
            )
        return rows

    return score
