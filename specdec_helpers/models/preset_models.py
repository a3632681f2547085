"""A preset's target and draft as plain Hugging Face models, on a device and in a dtype: what `pairs.load_pair`
starts from, and all the graded child needs to load the pair it is timed on (`load_preset_models`).

Apart from `pairs` because of what it does not import: no Drafter, no trained draft, no decode loop. The graded
child's view of the kit holds only the modules its graded parts and test worlds import
(``assignment/grading/isolation.py``), so the kit's own algorithms are absent there, not merely guarded.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_helpers.core.cpu_kernels import use_onednn_linears
from specdec_helpers.models.hub import load_model, load_tokenizer
from specdec_helpers.models.presets import Preset, get_preset
from specdec_helpers.models.smollm2 import load_smollm2
from specdec_helpers.models.toy import load_toy
from specdec_helpers.models.vocab import check_compatible


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device) -> torch.dtype:
    """``$SPECDEC_DTYPE`` if set (`env_dtype`), else fp16 on a GPU (half the memory, tensor cores) and fp32 on
    CPU, where fp16 matmuls are slow."""
    return env_dtype() or (torch.float16 if torch.device(device).type == "cuda" else torch.float32)


#: ``$SPECDEC_DTYPE`` spellings -> dtypes.
DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
}


def env_dtype() -> torch.dtype | None:
    """The dtype ``$SPECDEC_DTYPE`` asks `load_pair` for (``fp32``, ``fp16``, ``bf16``), ``None`` when unset: e.g.
    ``SPECDEC_DTYPE=fp16`` runs the notebooks in half precision on a CPU, as a GPU would (tests/test_notebooks_fp16.py)."""
    name = os.environ.get("SPECDEC_DTYPE", "").strip().lower()
    if not name:
        return None
    if name not in DTYPES:
        raise ValueError(
            f"SPECDEC_DTYPE={name!r} is not a dtype the kit knows: use one of fp32, fp16, bf16 "
            "(or unset it for the device's default)"
        )
    return DTYPES[name]


def say(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


def load_target(row: Preset, device, dtype, progress: bool = True):
    """``(target, tokenizer, the preset's draft)`` for preset ``row``; the draft is a model (``toy``) or a name
    (a hub id or folder, or a draft name of `drafts.registry` that `pairs` resolves)."""
    if row.name == "toy":
        model, default_draft, tokenizer = load_toy(device=device, dtype=dtype, progress=progress)
    elif row.name == "smollm2-135m":
        model, tokenizer = load_smollm2(device, dtype, progress)
        default_draft = row.draft
    else:
        say(progress, f"loading target {row.target} on {device} ({dtype}) ...")
        tokenizer = load_tokenizer(row.target, row.gated)
        model = load_model(row.target, device, dtype, row.gated)
        check_compatible(tokenizer, model)
        default_draft = row.draft
    if model.generation_config.pad_token_id is None:  # quiets generate()'s warning
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer, default_draft


def load_draft_model(name: str, tokenizer, device, dtype, gated: bool = False, progress: bool = True):
    """The draft model at hub id or folder ``name``, checked to share the target's ``tokenizer``."""
    say(progress, f"loading draft {name} ...")
    check_compatible(tokenizer, load_tokenizer(name, gated))
    draft = load_model(name, device, dtype, gated)
    check_compatible(tokenizer, draft)
    return draft


@dataclass
class PresetModels:
    """A target, its draft model and their tokenizer (what `DecoderBase.from_pair` reads)."""

    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    preset: str


def load_preset_models(preset: str = "toy", device=None, dtype=None, progress: bool = True) -> PresetModels:
    """Preset ``preset``'s target and draft model as `load_pair` loads them with the preset's own draft (same
    device, dtype and CPU kernels): the pair the grader times the student's decoder and the reference on. A
    preset that drafts without a model (``smollm2-135m``'s n-gram lookup) is refused: its draft is no model."""
    row = get_preset(preset)
    if row.name != "toy" and "/" not in row.draft and not Path(row.draft).is_dir():  # a hub id has its owner's name
        raise ValueError(
            f"preset {preset!r} drafts with {row.draft!r}, not a draft model: choose a preset whose draft is a model "
            "(e.g. 'toy' or a Pythia pair)"
        )
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)
    target, tokenizer, draft = load_target(row, device, dtype, progress)
    if isinstance(draft, str):
        draft = load_draft_model(draft, tokenizer, device, dtype, row.gated, progress)
    else:
        check_compatible(tokenizer, draft)
    use_onednn_linears(target)  # as load_pair's fast_cpu_linears (its default): no effect on a GPU
    use_onednn_linears(draft)
    return PresetModels(target, draft, tokenizer, device, dtype, row.name)
