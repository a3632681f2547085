"""Input validation: bad input gets a ValueError/TypeError that names the problem and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Integral

import torch


def vocab_size(model) -> int:
    """Width of the model's output layer (may exceed the tokenizer's size: padded embeddings)."""
    head = model.get_output_embeddings()
    # nn.Linear and torch's dynamically quantized Linear (whose ``weight`` is a method) both say it here.
    width = getattr(head, "out_features", None)
    return int(width if width is not None else model.config.vocab_size)


def context_length(model) -> int | None:
    """Maximum number of positions the model supports, if its config says."""
    cfg = model.config
    for name in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_model(model, role: str) -> None:
    if not (isinstance(model, torch.nn.Module) and hasattr(model, "get_output_embeddings")):
        raise TypeError(
            f"{role} must be a Hugging Face causal LM (e.g. AutoModelForCausalLM.from_pretrained(...)), "
            f"got {type(model).__name__}"
        )
    if role == "target" and model.training:
        raise ValueError("the target is in training mode (dropout makes its output random); call target.eval() first")


def check_positive_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_input_ids(target, input_ids) -> torch.Tensor:
    """A ``[1, L]`` LongTensor on the target's device, with every id inside its vocabulary."""
    if isinstance(input_ids, (list, tuple)):
        if not input_ids or all(isinstance(row, (list, tuple)) and not row for row in input_ids):
            raise ValueError("the prompt is empty; give at least one token (e.g. the tokenizer's BOS token)")
        input_ids = torch.tensor(input_ids)
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(
            f"input_ids must be a torch tensor of token ids, got {type(input_ids).__name__}; "
            "use tokenizer(prompt, return_tensors='pt').input_ids"
        )
    if input_ids.dtype.is_floating_point or input_ids.dtype in (torch.bool, torch.complex64, torch.complex128):
        raise TypeError(
            f"input_ids must hold integer token ids, got dtype {input_ids.dtype}; "
            "use tokenizer(prompt, return_tensors='pt').input_ids"
        )
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape [1, prompt_length], got {tuple(input_ids.shape)}")
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"batch size 1 is supported, got a batch of {input_ids.shape[0]}; decode the prompts one at a time"
        )
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty; give at least one token (e.g. the tokenizer's BOS token)")
    vocab = vocab_size(target)
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise ValueError(
            f"token id {bad} is outside the target's vocabulary [0, {vocab}); "
            "encode the prompt with the target's own tokenizer"
        )
    return input_ids.to(device=target.device, dtype=torch.long)


def check_fits_context(model, role: str, needed: int, prompt_length: int, max_new_tokens: int) -> None:
    limit = context_length(model)
    if limit is not None and needed > limit:
        raise ValueError(
            f"the prompt ({prompt_length} tokens) plus max_new_tokens ({max_new_tokens}) needs {needed} positions, "
            f"more than the {role}'s context of {limit}; shorten the prompt or lower max_new_tokens"
        )


def check_draft_vocab(draft_model, input_ids: torch.Tensor) -> None:
    """The draft must be able to read every token of the text it continues."""
    vocab = vocab_size(draft_model)
    high = int(input_ids.max())
    if high >= vocab:
        raise ValueError(
            f"the prompt holds token id {high} but the draft's vocabulary has only {vocab} entries: "
            "the draft cannot represent the target's tokens; use a draft trained with the target's tokenizer"
        )


def eos_ids(target, eos_token_id) -> list[int]:
    """EOS ids as a list; ``None`` means the target's ``generation_config.eos_token_id`` (as HF generate)."""
    if eos_token_id is None:
        eos_token_id = getattr(getattr(target, "generation_config", None), "eos_token_id", None)
        if eos_token_id is None:
            return []
    if isinstance(eos_token_id, torch.Tensor):
        eos_token_id = eos_token_id.tolist()
    ids = [eos_token_id] if isinstance(eos_token_id, Integral) else eos_token_id
    if not isinstance(ids, (list, tuple, set)) or not all(
        isinstance(i, Integral) and not isinstance(i, bool) for i in ids
    ):
        raise TypeError(f"eos_token_id must be an int or a list of ints, got {eos_token_id!r}")
    return [int(i) for i in ids]


def check_compilable(use_cache: bool, drafter, what: str = "compile=True") -> None:
    """``compile=True`` and ``graphs=True`` run the target's cached forward over a static cache; neither can serve
    the uncached or feature-reading paths."""
    off = what.replace("True", "False")
    if not use_cache:
        raise ValueError(f"{what} needs use_cache=True (it runs the forward over a static KV cache)")
    if drafter.needs_target_features:
        raise ValueError(
            f"a draft that reads the target's hidden states (eagle) cannot run with {what}: "
            f"the static-cache forward returns logits only; use {off}"
        )


def decode_args(target, input_ids, max_new_tokens, eos_token_id) -> tuple[torch.Tensor, int, list[int]]:
    """The checks every decode loop starts with: ``(input_ids, max_new_tokens, eos ids)``, checked."""
    check_model(target, "target")
    input_ids = check_input_ids(target, input_ids)
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens", 0)
    eos = eos_ids(target, eos_token_id)
    prompt_length = input_ids.shape[1]
    check_fits_context(target, "target", prompt_length + max_new_tokens, prompt_length, max_new_tokens)
    return input_ids, max_new_tokens, eos


def check_draft_model(draft_model, input_ids: torch.Tensor, max_new_tokens: int) -> None:
    """A draft model (None: a model-free draft) must read the prompt's ids and hold the whole text."""
    if draft_model is None:
        return
    check_draft_vocab(draft_model, input_ids)
    prompt_length = input_ids.shape[1]
    check_fits_context(draft_model, "draft", prompt_length + max_new_tokens, prompt_length, max_new_tokens)


def check_tree_shape(tree) -> tuple[int, ...]:
    """``tree`` = widths per depth, e.g. ``(3, 2, 2, 1, 1)``: depth ``d`` keeps at most ``tree[d-1]`` nodes."""
    if not isinstance(tree, Iterable) or isinstance(tree, (str, bytes)):
        raise TypeError(
            f"tree must be a sequence of widths per depth, e.g. (3, 2, 2, 1, 1), got {tree!r}; "
            "a chain of k tokens is (1,) * k"
        )
    widths = tuple(tree)
    if not widths:
        raise ValueError("tree must have at least one depth, e.g. (3, 2, 2, 1, 1)")
    for w in widths:
        check_positive_int(w, "each tree width", 1)
    return widths


#: Largest top-2 logit gap of the target that still counts as a numerical near-tie, per dtype: in
#: half precision verifying k tokens in one pass and decoding them one by one round differently.
NEAR_TIE = {torch.float32: 1e-4, torch.float16: 0.05, torch.bfloat16: 0.4}


@torch.inference_mode()
def greedy_divergence(
    target, prompt_ids: torch.Tensor, new_tokens, want=None, tolerance: float | None = None, max_ties: int = 8
) -> tuple[bool, str]:
    """Is ``new_tokens`` the target's greedy continuation of ``prompt_ids``, up to numerical near-ties?

    Token for token equality, except where the target's top-2 logits are within ``tolerance`` (default
    per dtype, `NEAR_TIE`; about 0 in fp32): there either token is a correct greedy choice, and the
    check goes on from the token chosen. ``want`` is the reference continuation (default: the target's
    ``generate``). Returns ``(ok, message)``; the message shows each near-tie's gap, or the mistake.
    """
    got = [int(t) for t in (new_tokens.reshape(-1).tolist() if isinstance(new_tokens, torch.Tensor) else new_tokens)]
    prompt = prompt_ids.reshape(1, -1)
    dtype = next(target.parameters()).dtype
    tolerance = NEAR_TIE.get(dtype, NEAR_TIE[torch.float16]) if tolerance is None else tolerance

    def greedy(prefix: list[int], n: int) -> list[int]:
        if n <= 0:
            return []
        ids = torch.cat([prompt, torch.tensor([prefix], dtype=prompt.dtype, device=prompt.device)], dim=1)
        out = target.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
            eos_token_id=None,
            pad_token_id=0,
        )
        return out[0, ids.shape[1] :].tolist()

    want = list(want) if want is not None else greedy([], len(got))
    notes = []
    for _ in range(max_ties + 1):
        i = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
        if i is None:
            if len(got) != len(want):
                return False, f"{len(got)} new tokens where greedy decoding gives {len(want)}"
            return True, "; ".join(notes) or "identical to greedy decoding"
        ids = torch.cat([prompt, torch.tensor([got[:i]], dtype=prompt.dtype, device=prompt.device)], dim=1)
        logits = target(input_ids=ids).logits[0, -1].float()
        top = logits.topk(2)
        gap = float(top.values[0] - top.values[1])
        if got[i] not in top.indices.tolist() or gap > tolerance:
            return False, (
                f"differs from greedy decoding at new token {i} (got {got[i]}, expected {want[i]}); the "
                f"target's top-2 logit gap there is {gap:.3g}, not a near-tie (<= {tolerance:g})"
            )
        notes.append(f"new token {i}: a near-tie (top-2 logit gap {gap:.3g} <= {tolerance:g}), either token is greedy")
        want = got[: i + 1] + greedy(got[: i + 1], len(got) - i - 1)
    return False, f"more than {max_ties} near-ties: " + "; ".join(notes)


def is_batch(input_ids, attention_mask=None) -> bool:
    """Whether `speculative_decode` should take the batched loop: several rows, a list of prompts, or a mask."""
    if attention_mask is not None:
        return True
    if isinstance(input_ids, torch.Tensor):
        return input_ids.dim() == 2 and input_ids.shape[0] > 1
    return isinstance(input_ids, (list, tuple)) and bool(input_ids) and not isinstance(input_ids[0], Integral)


#: The student edition samples no closer to greedy than this (near-greedy sampling is greedy decoding).
STUDENT_MIN_TEMPERATURE = 0.3


class StudentEditionError(ValueError):
    """Raised in the student edition (``release``) where the instructor edition runs the kit's own
    implementation of a graded part: the student kit holds none, and the message says whose code to use."""


def student_edition(what: str, notebook: str, method: str) -> StudentEditionError:
    """The error for ``what`` (a kit feature) in the student edition: ``method`` is graded in ``notebook``."""
    return StudentEditionError(
        f"{what} is not in the student edition of the kit: it is what you write in notebook {notebook} "
        f"(`{method}`). Use your own SpeculativeDecoder from notebooks 02-04 instead: in a notebook next to "
        'them, `decoder = nb.your_decoder("05", pair)` (nb: specdec_helpers.assignment.student.notebook), '
        "then `decoder.generate_ids(input_ids, max_tokens, k)`."
    )
