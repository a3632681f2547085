"""Whether a target and a draft can share one token sequence: same vocabulary, enough embedding rows.

Speculative decoding compares token ids, so a draft from another tokenizer would be compared with the
target token for token and silently disagree; this check turns that into an error that names the fix.
"""

from __future__ import annotations

import torch


def _is_model(obj) -> bool:
    return isinstance(obj, torch.nn.Module)


def _embedding_rows(model) -> int:
    """Token ids the model can read (input embedding rows; these may be padded past the tokenizer)."""
    return int(model.get_input_embeddings().num_embeddings)


def check_compatible(*tokenizers_or_models) -> None:
    """Raise ValueError unless target and draft can share one token sequence.

    Pass tokenizers and/or models, e.g. ``check_compatible(target_tok, draft_tok)`` or
    ``check_compatible(tokenizer, target, draft)``. All tokenizers must map the same tokens to the
    same ids (PA3 asserted ``tok_a.vocab == tok_b.vocab``). Models are only checked for covering every
    id the tokenizer can produce: embedding sizes may differ when they are padded (Pythia's config
    says 50304 or 50432 for a 50277-token tokenizer), and that is fine.
    """
    tokenizers = [x for x in tokenizers_or_models if not _is_model(x)]
    models = [x for x in tokenizers_or_models if _is_model(x)]
    for tok in tokenizers:
        if not hasattr(tok, "get_vocab"):
            raise TypeError(f"expected a tokenizer or a model, got {type(tok).__name__}")
    if not tokenizers:
        raise ValueError("pass the tokenizer too: models alone cannot tell a padded embedding from another vocabulary")
    reference = tokenizers[0].get_vocab()
    for other in tokenizers[1:]:
        vocab = other.get_vocab()
        if vocab != reference:
            raise ValueError(_vocab_difference(reference, vocab))
    highest = max(reference.values())
    for model in models:
        rows = _embedding_rows(model)
        if rows <= highest:
            name = getattr(model.config, "_name_or_path", "") or type(model).__name__
            raise ValueError(
                f"model {name!r} has {rows} embedding rows but the tokenizer produces ids up to {highest}: "
                "it was trained with another tokenizer. Use a draft from the target's model family, "
                "or a model-free drafter: draft='prompt-lookup'."
            )


def _vocab_difference(a: dict, b: dict, show: int = 5) -> str:
    diffs = [f"{t!r}: id {a[t]} vs {b[t]}" for t in a if t in b and a[t] != b[t]]
    diffs += [f"{t!r} only in the target's" for t in a if t not in b]
    diffs += [f"{t!r} only in the draft's" for t in b if t not in a]
    return (
        f"target and draft tokenizers differ ({len(a)} vs {len(b)} tokens; {len(diffs)} differences, e.g. "
        f"{'; '.join(diffs[:show])}). Speculative decoding compares token ids, so both must use one vocabulary: "
        "pick a draft from the target's model family (e.g. pythia-160m-deduped for pythia-1.4b-deduped), "
        "or a model-free drafter: draft='prompt-lookup'."
    )
