"""The assignment's tiny world: small random models (seconds to build, CPU), built the same way from a
seed in the grader and in the child that runs student code, plus the child's instrumentation
(forward-pass counters, a recording subclass).

The grader picks the seed at grade time, so no test input can be known in advance.
"""
from __future__ import annotations

import copy
import functools
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

VOCAB = 64


class Mistake(AssertionError):
    """A test found wrong behaviour; the message is the feedback the student sees."""




def _tokenizer():
    """A 64-token word-level tokenizer, built offline. Ids 17..63 decode to TWO words ("t1 t2") that
    re-encode as two tokens, as BPE merges do: decode -> encode does not round-trip, on purpose."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<eos>": 0, **{f"t{i}": i for i in range(1, 17)}}
    pairs = [(a, b) for a in range(1, 17) for b in range(1, 17)]
    vocab.update({f"t{a} t{b}": j for j, (a, b) in enumerate(pairs[: VOCAB - 17], start=17)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>")  # no pad token, like Pythia


def _model(seed: int):
    """A random 2-layer GPT-NeoX (the toy pair's family) with well separated logits (no argmax ties)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=256, initializer_range=0.5,
                        bos_token_id=0, eos_token_id=None, pad_token_id=None)
    model = GPTNeoXForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def perturbed_copy(model, scale: float = 0.15, seed: int = 1):
    """A draft that agrees with the target often but not always (the tests use it too)."""
    torch.manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * scale * p.std().clamp_min(1e-3))
    return draft.eval()


@dataclass
class Pair:
    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    device: torch.device = torch.device("cpu")
    num_speculative_tokens: int = 4


class World:
    """Tiny models (seconds to build): a target, drafts that agree often / always / rarely, prompts."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.tokenizer = _tokenizer()
        self.target = _model(seed)
        self.draft = perturbed_copy(self.target, 0.15, seed + 1)  # agrees often, not always
        self.same = copy.deepcopy(self.target)  # agrees always: every round ends with a bonus token
        self.other = _model(seed + 7)  # unrelated: nearly every draft token is rejected
        g = torch.Generator().manual_seed(seed + 3)
        self.prompts = [torch.randint(1, VOCAB, (1, n), generator=g) for n in (6, 11, 32)]
        self._folders = None

    def variant(self, name: str):
        """A draft by name: ``draft`` (agrees often), ``same`` (always), ``other`` (rarely)."""
        if name not in ("draft", "same", "other"):
            raise ValueError(f"unknown draft {name!r}")
        return getattr(self, name)

    def pair(self, draft=None) -> Pair:
        return Pair(self.target, self.draft if draft is None else draft, self.tokenizer)

    def folders(self) -> tuple[str, str]:
        """Target and draft saved with the tokenizer, as local model folders for the init exercise."""
        if self._folders is None:
            root = Path(tempfile.mkdtemp(prefix="specdec-grade-"))
            for name, model in (("target", self.target), ("draft", self.draft)):
                model.save_pretrained(root / name)
                self.tokenizer.save_pretrained(root / name)
            self._folders = (str(root / "target"), str(root / "draft"))
        return self._folders

    @functools.lru_cache(maxsize=None)
    def greedy(self, which: str, prompt_index: int, n: int = 24) -> list[int]:
        """The ``n`` greedy tokens of model ``which`` after prompt ``prompt_index`` (no eos)."""
        model = getattr(self, which)
        ids = self.prompts[prompt_index]
        return greedy_tokens(model, ids, n)


def greedy_tokens(model, ids, n, eos=None) -> list[int]:
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                             eos_token_id=eos, pad_token_id=0 if eos is None else eos)
    return out[0, ids.shape[1]:].tolist()


@functools.lru_cache(maxsize=4)
def world(seed: int = 0) -> World:
    return World(seed)


# --------------------------------------------------------------------------- instrumentation


class Probe:
    """Counts what a decoder does: target passes, positions fed to the draft, draft and verify calls.

    The target's hook also stops a loop that makes no progress (``limit`` passes), so a broken
    decode loop fails its test instead of hanging the grader.
    """

    def __init__(self, target, draft, limit: int = 400):
        self.target_calls = 0
        self.target_positions = 0
        self.draft_positions = 0
        self.draft_calls = 0
        self.limit = limit
        self.handles = [target.register_forward_pre_hook(self._on_target, with_kwargs=True)]
        if isinstance(draft, torch.nn.Module):
            self.handles.append(draft.register_forward_pre_hook(self._on_draft, with_kwargs=True))

    def _on_target(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.target_calls += 1
        self.target_positions += 0 if ids is None else int(ids.shape[-1])
        if self.target_calls > self.limit:
            raise Mistake(f"no progress: the target ran {self.limit} times without the loop finishing; each round "
                          "must append at least one token (the target's correction/bonus token)")

    def _on_draft(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.draft_calls += 1
        self.draft_positions += 0 if ids is None else int(ids.shape[-1])

    def close(self):
        for handle in self.handles:
            handle.remove()


@contextmanager
def probe(decoder, limit: int = 400):
    p = Probe(decoder.target_model, decoder.draft_model, limit)
    try:
        yield p
    finally:
        p.close()


def recording(cls):
    """A subclass of the student's class that records every draft and verification (and its result)."""
    class Recorded(cls):
        def generate_draft_tokens(self, input_ids, attention_mask=None, num_speculative_tokens=5):
            out = super().generate_draft_tokens(input_ids, attention_mask, num_speculative_tokens)
            self.log.append(("draft", input_ids.shape[1], num_speculative_tokens, _as_list(out)))
            return out

        def verify_tokens_vectorized(self, input_ids, draft_tokens, attention_mask=None):
            out = super().verify_tokens_vectorized(input_ids, draft_tokens, attention_mask)
            self.log.append(("verify", input_ids.shape[1], draft_tokens.shape[-1], out))
            return out

        def verify_tokens_cached(self, input_ids, draft_tokens, attention_mask=None):
            out = super().verify_tokens_cached(input_ids, draft_tokens, attention_mask)
            self.log.append(("verify", input_ids.shape[1], draft_tokens.shape[-1], out))
            return out

    Recorded.__name__ = Recorded.__qualname__ = cls.__name__
    return Recorded


def _as_list(tokens) -> list[int]:
    if isinstance(tokens, torch.Tensor):
        return tokens.reshape(-1).tolist()
    return [int(t) for t in (tokens[0] if tokens and isinstance(tokens[0], (list, tuple)) else tokens)]


def make_decoder(cls, pair, eos=None, record=False):
    """The student's class around already-loaded models (``from_pair``; else PA3's attribute names)."""
    cls = recording(cls) if record else cls
    if hasattr(cls, "from_pair"):
        decoder = cls.from_pair(pair)
    else:  # a PA3-style class without from_pair: set its attributes the way its __init__ would
        decoder = cls.__new__(cls)
        decoder.device = pair.device
        decoder.target_model, decoder.draft_model = pair.target, pair.draft
        decoder.target_tokenizer = decoder.draft_tokenizer = pair.tokenizer
        decoder.target_cache = decoder.draft_cache = None
        decoder.stats = {}
    decoder.eos_token_id = eos
    decoder.log = []
    return decoder
