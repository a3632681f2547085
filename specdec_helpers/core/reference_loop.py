"""The kit's own answer to notebook 04 (greedy speculative decoding with a cached target), as the decode loops use
it: the target's cache for the rounds (`target_cache`) and its rollback (`keep_target_cache`), the greedy baseline
(`greedy_decode`), and the checks that let greedy speculative decoding run (`check_decoding`, `check_tree`,
`check_batch`).

The student edition replaces this module whole (``grading/editions.SWAPS``: `release`, the grader's view and the
student kit's `check` all swap in ``assignment/student/edition_loop.py``): there greedy speculative decoding of
one prompt is refused (it is the students' work), the target re-reads the text every round (no cache), and the
greedy baseline is Hugging Face's ``generate``. Nothing else in ``core/`` differs between the editions.
"""
from __future__ import annotations

import contextlib

from specdec_helpers.core.cache import new_cache, rollback
from specdec_helpers.core.compiled import compiled_forward
from specdec_helpers.core.graphs import static_pair
from specdec_helpers.core.lean import lean_drafter, lean_forward

__all__ = ["check_batch", "check_decoding", "check_tree", "greedy_decode", "keep_target_cache", "target_cache"]


def check_decoding(temperature, top_k) -> None:
    """`speculative_decode` runs at any temperature here (the student edition refuses greedy and near-greedy)."""


def check_tree(sampler, model, widths) -> None:
    """`tree_speculative_decode` runs any tree here (the student edition refuses a greedy chain)."""


def check_batch(draft, prompts, samplers) -> None:
    """`batch_speculative_decode` runs one greedy prompt here (the student edition refuses it)."""


@contextlib.contextmanager
def target_cache(target, drafter, input_ids, max_new_tokens: int, use_cache: bool, compile: bool, graphs: bool,
                 score=None):
    """``(target, cache, drafter)`` for the rounds: with ``graphs`` both models over static caches (CUDA graphs on
    a GPU, see `graphs`); with ``compile`` the target's compiled forward over a static cache; else, for a Llama on a
    CPU, its lean forward over a static cache (`lean`: bitwise the model's logits; a Llama draft model drafts
    through its own); else a dynamic cache, or none
    (``use_cache=False``, or a caller's ``score=``, which reads no cache)."""
    if graphs:
        cuda = target.device.type == "cuda"
        with static_pair(target, drafter, input_ids.shape[1] + max_new_tokens, cuda) as trio:
            yield trio
        return
    if compile:
        target = compiled_forward(target)
        yield target, target.new_cache(input_ids.shape[1] + max_new_tokens), drafter
        return
    lean = lean_forward(target) if use_cache and score is None else None
    if lean is not None:
        length = input_ids.shape[1] + max_new_tokens
        yield lean, lean.new_cache(length), lean_drafter(drafter, length)
        return
    yield target, new_cache(target) if use_cache and score is None else None, drafter


def keep_target_cache(cache, n_kept: int) -> None:
    """Roll the target's cache back to the kept text (the rejected draft tokens go; the new last token is fed
    next round)."""
    rollback(cache, n_kept)


def greedy_decode(decode, no_draft, target, input_ids, **options):
    """Plain greedy decoding: ``decode`` (the kit's `speculative_decode`) with ``no_draft``, a drafter that proposes
    nothing (one target pass per token, the same loop)."""
    return decode(target, no_draft, input_ids, **options)
