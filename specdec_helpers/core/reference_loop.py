"""The parts of the decode loops the student edition differs in, in the kit's edition: the checks that let greedy
speculative decoding run (`check_decoding`, `check_tree`, `check_batch`), the target cache's rollback hook
(`keep_target_cache`) and the greedy baseline's wrapper (`greedy_baseline`). Which forward and which cache: that is
`backends`.

The student edition replaces this module whole (``grading/editions.SWAPS``: `release`, the grader's view and the
student kit's `check` all swap in ``assignment/student/edition_loop.py``): there greedy speculative decoding of
one prompt is refused (it is the students' work), the target cache's hook does nothing (what is left to the kit's loop
there scores with the students' own pass, which reads no cache), and the greedy baseline is
Hugging Face's ``generate``.
"""

from __future__ import annotations

from specdec_helpers.core.cache import rollback

__all__ = ["check_batch", "check_decoding", "check_tree", "greedy_baseline", "keep_target_cache"]


def check_decoding(temperature, top_k) -> None:
    """`speculative_decode` runs at any temperature here (the student edition refuses greedy and near-greedy)."""


def check_tree(sampler, model, widths) -> None:
    """`tree_speculative_decode` runs any tree here (the student edition refuses a greedy chain)."""


def check_batch(draft, prompts, samplers) -> None:
    """`batch_speculative_decode` runs one greedy prompt here (the student edition refuses it)."""


def keep_target_cache(target_cache, n_kept: int) -> None:
    """Roll the target's cache back to the kept text (the rejected draft tokens go; the new last token is fed next
    round): notebook 04's rollback."""
    rollback(target_cache, n_kept)


def greedy_baseline(decode, no_draft, target, input_ids, **options):
    """Plain greedy decoding: ``decode`` (the kit's `speculative_decode`) with ``no_draft``, a drafter that proposes
    nothing (one target pass per token, the same loop, on the same backend)."""
    return decode(target, no_draft, input_ids, **options)
