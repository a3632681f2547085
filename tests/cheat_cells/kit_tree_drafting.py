# CHEAT (the red team's): the kit's own cached greedy drafting (a width-1 tree) reached through a module table the
# static check cannot read; the grader's guard on every core function refuses it.
import torch
from specdec_helpers.core.cache import new_cache

_tree = getattr(getattr(torch, "s" + "ys"), "mod" + "ules")["specdec_helpers.core.tree"]   # draft_tree: cached greedy drafting with its rollback


@torch.inference_mode()
def generate_draft_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                          num_speculative_tokens: int = 5) -> torch.Tensor:
    k = num_speculative_tokens
    if self.draft_cache is None:
        self.draft_cache = new_cache(self.draft_model)
    if k <= 0:
        return input_ids.new_empty(1, 0)
    chain, _, _ = _tree.draft_tree(self.draft_model, self.draft_cache, input_ids, (1,) * k)
    return torch.tensor([chain.tokens], dtype=input_ids.dtype, device=input_ids.device)
