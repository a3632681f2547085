"""Programming exercise: speculative decoding behind PA3's ``SpeculativeDecoder`` class.

The method names and signatures are PA3's (``initialize_target_model``, ``initialize_draft_model``,
``generate_draft_tokens``, ``verify_tokens_vectorized``, ``speculative_decode``, ``benchmark``), plus
two steps this kit adds: ``accept_draft`` (the comparison itself) and ``verify_tokens_cached`` (the
same verification with a KV cache). Fill in every ``# YOUR CODE HERE``; the code around it is given.

Check your work at any time (unfinished parts say "not implemented yet", they do not crash the rest):

    python -m specdec_helpers check

Two differences from the PA3 skeleton, both to avoid its known pitfalls:

- ``accepted_tokens`` returned by verification ends with ONE token from the target: the correction
  at the first mismatch, or the bonus token when every draft token passed. So each round appends
  ``accepted_position + 1`` tokens and needs exactly one target forward pass (PA3 ran the target a
  second time after a rejection).
- The loop works on token ids (``generate_ids``); ``speculative_decode(prompt)`` wraps it with the
  tokenizer. Counting tokens from ids is exact; decoding and re-encoding text is not.

(The instructor's copy of this file holds the solutions inside nbgrader's solution markers;
``python -m specdec_helpers release`` turns each into the stub you see.)
"""
from __future__ import annotations

import statistics
import time

import torch

from specdec_helpers.core.cache import cache_length, crop_cache, new_cache
from specdec_helpers.core.timing import timed
from specdec_helpers.models.pairs import load_pair


class SpeculativeDecoder:
    """Greedy speculative decoding: a draft model proposes, the target model verifies.

    Attributes: ``target_model``, ``target_tokenizer``, ``draft_model``, ``draft_tokenizer``,
    ``device``, ``eos_token_id``, the two KV caches ``target_cache`` / ``draft_cache`` (``None`` until
    first used; `reset` empties them) and ``stats`` (counters of the last `generate_ids` call).
    """

    def __init__(self, target_model_name: str, draft_model_name: str, device: str | None = None):
        """Load both models by hub id or local folder (PA3's constructor)."""
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.target_model, self.target_tokenizer = self.initialize_target_model(target_model_name)
        self.draft_model, self.draft_tokenizer = self.initialize_draft_model(draft_model_name)
        # Speculative decoding compares token ids: both must use one vocabulary.
        assert self.target_tokenizer.get_vocab() == self.draft_tokenizer.get_vocab(), "tokenizers must be compatible"
        self._setup()

    @classmethod
    def from_pair(cls, pair) -> "SpeculativeDecoder":
        """Wrap already-loaded models (a `pairs.ModelPair`, or anything with ``.target``, ``.draft``,
        ``.tokenizer``, ``.device``): no hub access, so grading works offline."""
        if not isinstance(pair.draft, torch.nn.Module):
            raise TypeError(f"this exercise drafts with a model, but the pair's draft is a {type(pair.draft).__name__}; "
                            "use a pair with a draft model (e.g. 'toy' or a Pythia preset)")
        self = cls.__new__(cls)
        self.device = torch.device(pair.device)
        self.target_model, self.draft_model = pair.target, pair.draft
        self.target_tokenizer = self.draft_tokenizer = pair.tokenizer
        self._setup()
        return self

    @classmethod
    def from_preset(cls, preset: str = "toy", **kwargs) -> "SpeculativeDecoder":
        """``SpeculativeDecoder.from_preset("toy")``: load a kit pair by name (see `pairs.load_pair`)."""
        return cls.from_pair(load_pair(preset, **kwargs))

    def _setup(self) -> None:
        tokenizer = self.target_tokenizer
        eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
        if eos is None:
            eos = getattr(self.target_model.generation_config, "eos_token_id", None)
        self.eos_token_id = eos[0] if isinstance(eos, (list, tuple)) else eos
        self.stats: dict = {}
        self.reset()

    def reset(self) -> None:
        """Forget both KV caches: call before decoding a new, unrelated text."""
        self.target_cache = None
        self.draft_cache = None

    # ------------------------------------------------------------------ exercise 1: initialization (5)

    def initialize_target_model(self, model_name: str):
        """Return ``(model, tokenizer)`` for the target, ready for inference on ``self.device``.

        ``model_name`` is a hub id or a local folder (``AutoModelForCausalLM.from_pretrained`` reads
        both). Ready means: a pad token set (base models have none), the model on ``self.device`` in
        evaluation mode (no dropout), fp16 on a GPU and fp32 on a CPU (where fp16 is slow).
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        ### BEGIN SOLUTION
        tokenizer = AutoTokenizer.from_pretrained(model_name)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        dtype = torch.float16 if self.device.type == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_name, dtype=dtype).to(self.device).eval()
        ### END SOLUTION
        return model, tokenizer

    def initialize_draft_model(self, model_name: str):
        """Return ``(model, tokenizer)`` for the draft, prepared exactly like the target."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        ### BEGIN SOLUTION
        tokenizer = AutoTokenizer.from_pretrained(model_name)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        dtype = torch.float16 if self.device.type == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_name, dtype=dtype).to(self.device).eval()
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        ### END SOLUTION
        return model, tokenizer

    # ------------------------------------------------------------------ exercise 2: drafting (5)

    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                              num_speculative_tokens: int = 5) -> torch.Tensor:
        """The draft's ``k`` greedy next tokens after ``input_ids`` ``[1, L]``, as ``[1, k]``.

        Write the draft loop by hand, one token per draft forward pass, reusing ``self.draft_cache``
        across rounds: the draft must never re-read text it has already read. The decode loop only
        ever extends the text by accepted draft tokens plus one target token, so every cached position
        before ``L - 1`` is still valid: crop the cache to at most ``L - 1`` positions (`crop_cache`),
        feed the positions it does not hold (``input_ids[:, cache_length(cache):]``), then one token at
        a time. ``attention_mask`` is unused (batch of one, no padding); kept for PA3's signature.
        Useful: ``model(input_ids=..., past_key_values=cache, use_cache=True).logits``.
        """
        k = num_speculative_tokens
        if self.draft_cache is None:
            self.draft_cache = new_cache(self.draft_model)
        tokens: list[torch.Tensor] = []  # k tensors of shape [1, 1]
        if k <= 0:
            return input_ids.new_empty(1, 0)
        ### BEGIN SOLUTION
        cache = self.draft_cache
        crop_cache(cache, min(cache_length(cache), input_ids.shape[1] - 1))
        fed = input_ids[:, cache_length(cache):]
        for _ in range(k):
            logits = self.draft_model(input_ids=fed, past_key_values=cache, use_cache=True).logits
            fed = logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(fed)
        ### END SOLUTION
        return torch.cat(tokens, dim=1)

    # ------------------------------------------------------------------ exercise 3: verification (5)

    def accept_draft(self, target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[list[int], int]:
        """Greedy acceptance from the target's logits ``[k + 1, vocab]``, where row ``j`` is the target's
        prediction for draft position ``j`` and row ``k`` the prediction after the whole draft.

        Returns ``(accepted_tokens, accepted_position)``: ``accepted_position`` = number of leading
        draft tokens equal to the target's argmax (``k`` if all); ``accepted_tokens`` = those tokens
        followed by the target's own token at the first mismatch (correction) or after the whole draft
        (bonus), as a list of ``accepted_position + 1`` ints.
        """
        draft = draft_tokens.reshape(-1)
        ### BEGIN SOLUTION
        choices = target_logits.argmax(-1)
        k = draft.numel()
        matches = (choices[:k] == draft.to(choices.device)).int()
        n = int(matches.cumprod(0).sum()) if k else 0
        # draft[:n] == choices[:n], so accepted + correction/bonus is simply choices[: n + 1].
        accepted_tokens, accepted_position = choices[: n + 1].tolist(), n
        ### END SOLUTION
        return accepted_tokens, accepted_position

    @torch.inference_mode()
    def verify_tokens_vectorized(self, input_ids: torch.Tensor, draft_tokens: torch.Tensor,
                                 attention_mask: torch.Tensor | None = None) -> tuple[list[int], int]:
        """Verify ``draft_tokens`` ``[1, k]`` with ONE target pass over text + draft (no cache).

        Select the ``k + 1`` rows of logits that judge the draft (mind the off-by-one: the logits at
        position ``i`` predict token ``i + 1``) and hand them to `accept_draft`.
        """
        ### BEGIN SOLUTION
        start, k = input_ids.shape[1], draft_tokens.shape[1]
        logits = self.target_model(input_ids=torch.cat([input_ids, draft_tokens], dim=1)).logits[0]
        rows = logits[start - 1 : start + k]
        accepted_tokens, accepted_position = self.accept_draft(rows, draft_tokens)
        ### END SOLUTION
        return accepted_tokens, accepted_position

    @torch.inference_mode()
    def verify_tokens_cached(self, input_ids: torch.Tensor, draft_tokens: torch.Tensor,
                             attention_mask: torch.Tensor | None = None) -> tuple[list[int], int]:
        """Like `verify_tokens_vectorized`, but with ``self.target_cache``: feed only the positions the
        cache does not hold yet, plus the draft. Afterwards the cache must hold exactly the kept text,
        ``L + accepted_position`` positions: the rejected draft positions are rolled back (`crop_cache`).
        """
        if self.target_cache is None:
            self.target_cache = new_cache(self.target_model)
        ### BEGIN SOLUTION
        cache = self.target_cache
        start, k = input_ids.shape[1], draft_tokens.shape[1]
        fed = torch.cat([input_ids[:, cache_length(cache):], draft_tokens], dim=1)
        logits = self.target_model(input_ids=fed, past_key_values=cache, use_cache=True).logits[0]
        accepted_tokens, accepted_position = self.accept_draft(logits[-(k + 1):], draft_tokens)
        crop_cache(cache, start + accepted_position)
        ### END SOLUTION
        return accepted_tokens, accepted_position

    # ------------------------------------------------------------------ exercise 4: the decode loop (10)

    @torch.inference_mode()
    def generate_ids(self, input_ids: torch.Tensor, max_tokens: int = 100, num_speculative_tokens: int = 5,
                     use_cache: bool = True) -> torch.Tensor:
        """Speculative decoding on token ids: returns ``[1, L + new]``, exactly the target's greedy output.

        Each round: draft ``k`` tokens, verify them (cached or vectorized), append the accepted tokens and
        the target's token. Never produce more than ``max_tokens`` new tokens (draft fewer near the end),
        and stop right after an EOS token (``self.eos_token_id``) that was *generated*: the prompt may
        contain one too. Count ``stats["proposed"]`` (draft tokens verified) and ``stats["accepted"]``
        (draft tokens accepted; the target's own token is never an accepted draft token).
        """
        self.reset()
        prompt_length = input_ids.shape[1]
        stats = {"proposed": 0, "accepted": 0, "rounds": 0}
        verify = self.verify_tokens_cached if use_cache else self.verify_tokens_vectorized
        start_time = time.perf_counter()
        ### BEGIN SOLUTION
        eos = self.eos_token_id
        while input_ids.shape[1] - prompt_length < max_tokens:
            budget = max_tokens - (input_ids.shape[1] - prompt_length)
            draft = self.generate_draft_tokens(input_ids, None, min(num_speculative_tokens, budget - 1))
            accepted_tokens, accepted_position = verify(input_ids, draft)
            stats["proposed"] += draft.shape[1]
            stats["accepted"] += accepted_position
            stats["rounds"] += 1
            if eos in accepted_tokens:  # keep the EOS, drop what follows it
                accepted_tokens = accepted_tokens[: accepted_tokens.index(eos) + 1]
            new = torch.tensor([accepted_tokens], dtype=input_ids.dtype, device=input_ids.device)
            input_ids = torch.cat([input_ids, new], dim=1)
            if accepted_tokens[-1] == eos:
                break
        ### END SOLUTION
        elapsed = time.perf_counter() - start_time
        new_tokens = input_ids.shape[1] - prompt_length
        stats.update(new_tokens=new_tokens, wall_time_s=elapsed,
                     acceptance_rate=stats["accepted"] / stats["proposed"] if stats["proposed"] else 0.0,
                     tokens_per_s=new_tokens / elapsed if elapsed > 0 else 0.0)
        self.stats = stats
        return input_ids

    def encode(self, prompt: str) -> torch.Tensor:
        return self.target_tokenizer(prompt, return_tensors="pt").input_ids.to(self.device)

    def speculative_decode(self, prompt: str, max_tokens: int = 100, num_speculative_tokens: int = 5,
                           use_cache: bool = True, verbose: bool = True) -> str:
        """PA3's entry point: text in, text out (prompt + generated), statistics printed."""
        output_ids = self.generate_ids(self.encode(prompt), max_tokens, num_speculative_tokens, use_cache)
        s = self.stats
        if verbose:
            print(f"Generated {s['new_tokens']} tokens in {s['wall_time_s']:.2f} s ({s['tokens_per_s']:.1f} tokens/s), "
                  f"draft acceptance {s['acceptance_rate']:.1%}")
        return self.target_tokenizer.decode(output_ids[0], skip_special_tokens=True)

    # ------------------------------------------------------------------ benchmark (part of exercise 4)

    @torch.inference_mode()
    def greedy_ids(self, input_ids: torch.Tensor, max_tokens: int = 100) -> torch.Tensor:
        """The baseline: the target's own greedy decoding (HF ``generate``)."""
        return self.target_model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                          max_new_tokens=max_tokens, eos_token_id=self.eos_token_id,
                                          pad_token_id=self.eos_token_id if self.eos_token_id is not None else 0)

    def benchmark(self, prompt: str, max_tokens: int = 100, num_runs: int = 3, compare_baseline: bool = True,
                  num_speculative_tokens: int = 5) -> dict:
        """PA3's benchmark, done fairly: one warm-up run each, speculative and baseline runs interleaved
        (drift hits both alike), medians. Returns PA3's keys (``speculative``/``baseline`` with
        ``times``, ``tokens_per_second``, ``avg_time``, ``avg_tokens_per_second``; ``speedup``,
        ``latency_reduction``) plus ``new_tokens`` and ``acceptance_rate``.

        Count the new tokens of each run from the output ids: re-tokenizing decoded text does not give
        the same number of tokens back.
        """
        input_ids = self.encode(prompt)
        prompt_length = input_ids.shape[1]
        methods = {"speculative": lambda: self.generate_ids(input_ids, max_tokens, num_speculative_tokens)}
        if compare_baseline:
            methods["baseline"] = lambda: self.greedy_ids(input_ids, max_tokens)
        for run in methods.values():  # warm-up
            run()
        results = {name: {"times": [], "tokens_per_second": [], "new_tokens": []} for name in methods}
        for _ in range(num_runs):
            for name, run in methods.items():
                output_ids, seconds = timed(run, self.device)
                ### BEGIN SOLUTION
                new_tokens = output_ids.shape[1] - prompt_length
                ### END SOLUTION
                results[name]["times"].append(seconds)
                results[name]["new_tokens"].append(new_tokens)
                results[name]["tokens_per_second"].append(new_tokens / seconds)
        for summary in results.values():
            summary["avg_time"] = statistics.fmean(summary["times"])
            summary["median_time"] = statistics.median(summary["times"])
            summary["avg_tokens_per_second"] = statistics.fmean(summary["tokens_per_second"])
        results.setdefault("baseline", None)
        if compare_baseline:
            ratio = results["baseline"]["median_time"] / results["speculative"]["median_time"]
            results["speedup"] = ratio
            results["latency_reduction"] = (1 - 1 / ratio) * 100
        results["acceptance_rate"] = self.stats.get("acceptance_rate", 0.0)
        return results


