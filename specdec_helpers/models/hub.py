"""Loading from the Hugging Face hub: a local folder, the local cache, or the network, in that order.

Its own module because what can go wrong here (no network, a gated repository, a missing token) is
unlike the rest of loading a pair: each failure gets an error that says what to do instead of a stack
of HTTP errors, and names the offline presets that need no network.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from specdec_helpers.models.presets import OFFLINE_PRESETS


class HubUnreachableError(OSError):
    """The Hugging Face hub cannot be reached and the model is not in the local cache."""


class GatedModelError(PermissionError):
    """The repository is gated: it needs an access token and an accepted licence."""


def _offline_hint() -> str:
    return (
        f"Offline presets that need no network: {', '.join(repr(n) for n in OFFLINE_PRESETS)}, e.g. load_pair('toy')."
    )


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the hub answers a TCP connect within ``timeout`` s; False at once when offline mode is set.

    Runs in a daemon thread so that even a hanging DNS lookup cannot block the caller.
    """
    if any(
        os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    ):
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


def load_model(name: str, device, dtype, gated: bool = False):
    """A causal LM by hub id or folder (see `_from_hub`), in ``dtype`` on ``device``, in eval mode."""
    from transformers import AutoModelForCausalLM

    # transformers >= 4.56 takes `dtype=`; older versions called it `torch_dtype=`.
    model = _from_hub(AutoModelForCausalLM, name, gated=gated, dtype=dtype)
    return model.to(device).eval()


def load_tokenizer(name: str, gated: bool = False):
    """A tokenizer by hub id or folder, with a pad token (its EOS) when it has none."""
    from transformers import AutoTokenizer

    tokenizer = _from_hub(AutoTokenizer, name, gated=gated)
    if tokenizer.pad_token is None:  # base models have none; generate() warns without one
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
