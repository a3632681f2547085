# CHEAT (issue 43, attack 1): the kit's cached greedy drafting (`core.tree.draft_tree`: a width-1 tree is a chain),
# named from the one kit import a graded cell may take, loaded by pkgutil, then taken out of the grader's guard:
# the guard is a closure over the real function. Nothing here is a name the static check reads.
import pkgutil

import torch
from specdec_helpers.core.cache import crop_cache, new_cache


def _inside(guarded):
    """The function a wrapper closes over, when there is one of the same name."""
    for cell in getattr(guarded, "__clo" + "sure__", None) or ():
        held = getattr(cell, "cell_" + "contents")
        if callable(held) and getattr(held, "__name__", None) == guarded.__name__:
            return held
    return guarded


@torch.inference_mode()
def generate_draft_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                          num_speculative_tokens: int = 5) -> torch.Tensor:
    k = num_speculative_tokens
    if k <= 0:
        return input_ids.new_empty(1, 0)
    if self.draft_cache is None:
        self.draft_cache = new_cache(self.draft_model)
    where = crop_cache.__module__.rpartition(".")[0] + ".tr" + "ee:draft_" + "tree"
    drafting = _inside(pkgutil.resolve_name(where))
    chain, _, _ = drafting(self.draft_model, self.draft_cache, input_ids, (1,) * k)
    return torch.tensor([chain.tokens], dtype=input_ids.dtype, device=input_ids.device)
