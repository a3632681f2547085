"""Known-mistake catalog: each mistake students made (PA3 reports, office hours) as a mutation of the
reference solution, a subclass overriding ONE method, with the test that must catch it and a phrase
of the feedback it must give. ``tests/test_assignment.py`` grades every mutation and checks both, so
a change to the grader that stops naming a mistake fails CI.

    python -m specdec_helpers.assignment.mutations     # grade every mutation, print the catalog
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec_helpers.assignment.exercises import SpeculativeDecoder as Reference
from specdec_helpers.assignment.grader import grade
from specdec_helpers.core.cache import cache_length, new_cache


@dataclass(frozen=True)
class Mutation:
    name: str
    mistake: str
    cls: type
    test_id: str  # the suite test that must fail
    phrase: str  # ... with feedback containing this


CATALOG: list[Mutation] = []


def mutation(name: str, mistake: str, test_id: str, phrase: str):
    def register(cls):
        cls.__name__ = cls.__qualname__ = "SpeculativeDecoder"
        CATALOG.append(Mutation(name, mistake, cls, test_id, phrase))
        return cls
    return register


def _decode_loop(self, input_ids, max_tokens, k, use_cache, *, overshoot=False, eos_anywhere=False,
                 extra_pass=False, count_bonus=False, keep_after_eos=False):
    """The reference loop with switches for the decode-loop mistakes (one switch per mutation)."""
    import time

    self.reset()
    prompt_length = input_ids.shape[1]
    stats = {"proposed": 0, "accepted": 0, "rounds": 0}
    verify = self.verify_tokens_cached if use_cache else self.verify_tokens_vectorized
    start = time.perf_counter()
    eos = self.eos_token_id
    while input_ids.shape[1] - prompt_length < max_tokens:
        budget = max_tokens - (input_ids.shape[1] - prompt_length)
        draft = self.generate_draft_tokens(input_ids, None, k if overshoot else min(k, budget - 1))
        tokens, n = verify(input_ids, draft)
        stats["proposed"] += draft.shape[1]
        stats["accepted"] += len(tokens) if count_bonus else n
        stats["rounds"] += 1
        if extra_pass and n < draft.shape[1]:  # PA3: append the accepted prefix, then ask the target again
            text = torch.cat([input_ids, draft[:, :n]], dim=1)
            tokens = tokens[:n] + [int(self.target_model(input_ids=text).logits[0, -1].argmax())]
            self.target_cache = None  # the cache no longer matches: start it again (as such code does)
        if eos in tokens and not keep_after_eos:
            tokens = tokens[: tokens.index(eos) + 1]
        input_ids = torch.cat([input_ids, torch.tensor([tokens])], dim=1)
        if eos_anywhere and eos in input_ids[0].tolist():
            break
        if not eos_anywhere and eos in tokens:
            break
    elapsed = time.perf_counter() - start
    new = input_ids.shape[1] - prompt_length
    stats.update(new_tokens=new, wall_time_s=elapsed, tokens_per_s=new / elapsed,
                 acceptance_rate=stats["accepted"] / stats["proposed"] if stats["proposed"] else 0.0)
    self.stats = stats
    return input_ids


# --------------------------------------------------------------------------- verification


@mutation("logits_offset", "draft token j compared with the logits at position L + j instead of L - 1 + j",
          "verify.verify_vectorized", "off by one")
class LogitsOffset(Reference):
    @torch.inference_mode()
    def verify_tokens_vectorized(self, input_ids, draft_tokens, attention_mask=None):
        start, k = input_ids.shape[1], draft_tokens.shape[1]
        logits = self.target_model(input_ids=torch.cat([input_ids, draft_tokens], dim=1)).logits[0]
        rows = torch.cat([logits[start:start + k], logits[-1:]])  # one row too late (PA3's first attempt)
        return self.accept_draft(rows, draft_tokens)


@mutation("no_bonus_token", "all k accepted: returns the k draft tokens without the target's bonus token",
          "verify.accept_all", "bonus token")
class NoBonusToken(Reference):
    def accept_draft(self, target_logits, draft_tokens):
        tokens, n = super().accept_draft(target_logits, draft_tokens)
        return (tokens[:n], n) if n == draft_tokens.numel() else (tokens, n)


@mutation("no_correction_token", "rejection: returns only the accepted prefix, not the target's correction",
          "verify.accept_mismatch", "correction")
class NoCorrectionToken(Reference):
    def accept_draft(self, target_logits, draft_tokens):
        tokens, n = super().accept_draft(target_logits, draft_tokens)
        return (tokens[:n], n) if n < draft_tokens.numel() else (tokens, n)


@mutation("no_cache_rollback", "verify_tokens_cached leaves the rejected draft positions in the target's KV cache",
          "verify.verify_cached", "roll back the rejected draft positions")
class NoCacheRollback(Reference):
    @torch.inference_mode()
    def verify_tokens_cached(self, input_ids, draft_tokens, attention_mask=None):
        if self.target_cache is None:
            self.target_cache = new_cache(self.target_model)
        k = draft_tokens.shape[1]
        fed = torch.cat([input_ids[:, cache_length(self.target_cache):], draft_tokens], dim=1)
        logits = self.target_model(input_ids=fed, past_key_values=self.target_cache, use_cache=True).logits[0]
        return self.accept_draft(logits[-(k + 1):], draft_tokens)


# --------------------------------------------------------------------------- drafting


@mutation("sampling_draft", "the draft samples its tokens, which are then verified by exact match",
          "draft.draft_greedy", "it samples")
class SamplingDraft(Reference):
    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids, attention_mask=None, num_speculative_tokens=5):
        out = self.draft_model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=True,
                                        max_new_tokens=num_speculative_tokens, pad_token_id=0)
        return out[:, input_ids.shape[1]:]


@mutation("draft_from_scratch", "the draft re-reads the whole text every round (generate() without a kept cache)",
          "draft.draft_cache_reuse", "re-reads the whole text")
class DraftFromScratch(Reference):
    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids, attention_mask=None, num_speculative_tokens=5):
        if num_speculative_tokens <= 0:
            return input_ids.new_empty(1, 0)
        out = self.draft_model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                        max_new_tokens=num_speculative_tokens, pad_token_id=0)
        return out[:, input_ids.shape[1]:]


@mutation("draft_cache_stale", "the draft's KV cache is not cropped, so it still holds rejected draft tokens",
          "draft.draft_rounds", "still holds rejected draft tokens")
class DraftCacheStale(Reference):
    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids, attention_mask=None, num_speculative_tokens=5):
        if self.draft_cache is None:
            self.draft_cache = new_cache(self.draft_model)
        if num_speculative_tokens <= 0:
            return input_ids.new_empty(1, 0)
        cache = self.draft_cache
        length = cache_length(cache)
        fed = input_ids[:, length:] if length < input_ids.shape[1] else input_ids[:, -1:]  # no crop
        tokens = []
        for _ in range(num_speculative_tokens):
            fed = self.draft_model(input_ids=fed, past_key_values=cache, use_cache=True).logits[:, -1].argmax(-1, True)
            tokens.append(fed)
        return torch.cat(tokens, dim=1)


# --------------------------------------------------------------------------- the decode loop


@mutation("extra_target_pass", "after a rejection the target runs again to get the next token (PA3's loop)",
          "decode.decode_one_pass", "exactly ONE target pass")
class ExtraTargetPass(Reference):
    def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
        with torch.inference_mode():
            return _decode_loop(self, input_ids, max_tokens, num_speculative_tokens, use_cache, extra_pass=True)


@mutation("eos_in_prompt", "EOS is searched in the whole text, so an EOS id in the prompt stops decoding",
          "decode.decode_eos_in_prompt", "the prompt contains the EOS id")
class EosInPrompt(Reference):
    def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
        with torch.inference_mode():
            return _decode_loop(self, input_ids, max_tokens, num_speculative_tokens, use_cache, eos_anywhere=True)


@mutation("tokens_after_eos", "tokens accepted after a generated EOS are kept",
          "decode.decode_eos", "more tokens after it")
class TokensAfterEos(Reference):
    def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
        with torch.inference_mode():
            return _decode_loop(self, input_ids, max_tokens, num_speculative_tokens, use_cache, keep_after_eos=True)


@mutation("overshoot_max_tokens", "the last round drafts a full k, so up to k extra tokens pass max_tokens",
          "decode.decode_max_tokens", "new tokens for max_tokens")
class OvershootMaxTokens(Reference):
    def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
        with torch.inference_mode():
            return _decode_loop(self, input_ids, max_tokens, num_speculative_tokens, use_cache, overshoot=True)


@mutation("bonus_counted_as_accepted", "acceptance counts the target's correction/bonus token as an accepted draft token",
          "decode.decode_stats", "counts the target's correction/bonus tokens as accepted")
class BonusCountedAsAccepted(Reference):
    def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
        with torch.inference_mode():
            return _decode_loop(self, input_ids, max_tokens, num_speculative_tokens, use_cache, count_bonus=True)


@mutation("retokenized_throughput", "tokens/s from re-tokenizing the decoded text instead of counting ids",
          "decode.decode_benchmark_tokens", "does not give the same tokens back")
class RetokenizedThroughput(Reference):
    def benchmark(self, prompt, max_tokens=100, num_runs=3, compare_baseline=True, num_speculative_tokens=5):
        import time

        results = {"speculative": {"times": [], "tokens_per_second": []}, "baseline": None}
        prompt_length = len(self.target_tokenizer(prompt)["input_ids"])
        for _ in range(num_runs):
            start = time.perf_counter()
            text = self.speculative_decode(prompt, max_tokens, num_speculative_tokens, verbose=False)
            seconds = time.perf_counter() - start
            new_tokens = len(self.target_tokenizer.encode(text)) - prompt_length  # PA3's count
            results["speculative"]["times"].append(seconds)
            results["speculative"]["tokens_per_second"].append(new_tokens / seconds)
        return results


def grade_all(hidden: bool = True) -> list[tuple[Mutation, object]]:
    """Grade every mutation (implementation tests only): ``[(mutation, report)]``."""
    return [(m, grade(m.cls, measure_fn=None, hidden=hidden)) for m in CATALOG]
