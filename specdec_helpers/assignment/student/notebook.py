"""Everything notebooks 01-08 call, in one import: ``from specdec_helpers.assignment.student import notebook as nb``.

The set-up and verdict helpers of `present.notebook_help`, plus what the graded parts need: a pair whose
draft is a model (the exercises draft with one), the check cells of the graded parts, and the
student's own decoder assembled from their notebooks. Nothing here implements a graded part.
"""

from __future__ import annotations

import torch

from specdec_helpers.assignment.parts.cells import assemble, earlier_parts  # noqa: F401 - for the notebooks
from specdec_helpers.assignment.student.check import check_part  # noqa: F401
from specdec_helpers.assignment.parts.decoder import PartMissing  # noqa: F401
from specdec_helpers.core.checks import NEAR_TIE, greedy_divergence  # noqa: F401
from specdec_helpers.core.drafters import Drafter, Proposal
from specdec_helpers.core.timing import timed  # noqa: F401
from specdec_helpers.measure.observed import decoder_scoring, observed_decode
from specdec_helpers.measure import step_cost  # noqa: F401 - notebook 01 §6: what a step costs
from specdec_helpers.measure.speedup import ratio_words  # noqa: F401 - timed comparisons that say when they are noise
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.present import step_lesson  # noqa: F401 - notebook 01 §6: its verdicts
from specdec_helpers.present.notebook_help import *  # noqa: F403 - setup, check, prompts_for, ...
from specdec_helpers.present.widgets import render_html, token_explorer  # noqa: F401


def exercise_pair(preset: str = "auto"):
    """``load_pair(preset)``, but always a pair whose draft is a model: the exercises draft with one. When
    ``auto`` picks a model-free draft (``smollm2-135m`` drafts by lookup or an int8 copy on a CPU), the
    offline ``toy`` pair is used instead, and this says so."""
    pair = load_pair(preset)
    if not isinstance(pair.draft, torch.nn.Module):
        print(
            f"{pair.preset or preset}'s draft is not a model ({type(pair.draft).__name__}); the exercises need a "
            "draft model, so this notebook uses the offline 'toy' pair."
        )
        pair = load_pair("toy")
    return pair


def near_tie(logits: torch.Tensor, dtype=None) -> torch.Tensor:
    """Per row of ``logits``: is the top-2 gap a numerical near-tie (`core.checks.NEAR_TIE` for ``dtype``)?
    There either token is a correct greedy choice, and a one-pass and a token-by-token computation may differ."""
    tolerance = NEAR_TIE.get(dtype or logits.dtype, NEAR_TIE[torch.float16])
    top = logits.float().topk(2, dim=-1).values
    return (top[..., 0] - top[..., 1]) <= tolerance


class YourDrafter(Drafter):
    """Your ``generate_draft_tokens`` (notebook 02) as a drafter, for the practice loops of 03 and 04: it keeps
    its own draft cache (``decoder.draft_cache``) and crops it itself, so ``update`` only forgets it when a new
    text starts (``update(0)``)."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.model = decoder.draft_model

    def update(self, n_kept: int, target_features=None) -> None:
        if n_kept == 0:
            self.decoder.draft_cache = None

    def propose(self, input_ids, k, sampler=None) -> Proposal:
        if k <= 0:
            return Proposal(input_ids.new_empty(0))
        tokens = self.decoder.generate_draft_tokens(input_ids, None, k)
        return Proposal(tokens.reshape(-1), forward_calls=tokens.numel())


def your_decoder(notebook: str, pair, verbose: bool = True, **functions):
    """Your `SpeculativeDecoder` on ``pair``: this notebook's ``functions`` and your parts from the earlier
    notebooks next to this one (`cells.assemble`); a part you have not written raises `PartMissing`,
    which names the notebook to finish."""
    return assemble(notebook, verbose=verbose, **functions).from_pair(pair)


def your_scoring(decoder):
    """Your scoring pass from notebook 03 (``decoder.verify_tokens_vectorized``: one target pass, the k + 1 rows of
    logits that judge the draft), for ``sd.speculative_decode(..., score=nb.your_scoring(decoder))``: the kit's
    loop then samples with your rows (notebook 06). `measure.observed.decoder_scoring`."""
    return decoder_scoring(decoder)


def traced(decoder, input_ids, max_tokens: int = 40, num_speculative_tokens: int = 4, use_cache: bool = True):
    """Run your ``decoder.generate_ids`` and record its rounds (what each verification judged and kept) as a
    `DecodeOutput`, so `render_html` can colour your decoder's text: `measure.observed.observed_decode`, with
    notebook-sized defaults."""
    return observed_decode(decoder, input_ids, max_tokens, num_speculative_tokens, use_cache)


from specdec_helpers.core.cache import cache_length, crop_cache, new_cache  # noqa: E402,F401 - cache bookkeeping
from specdec_helpers.present.plots import plot_forward_cost  # noqa: E402,F401 - notebook 01's cost curve
