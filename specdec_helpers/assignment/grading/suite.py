"""The assignment's tests: behavioural checks of a student's decoder, run FROM the grader's process
against the student's code in a child process (`sandbox.Child`).

Each test asks the child to run a graded method on inputs of a tiny world whose seed the grader
picked at grade time, and judges what comes back (tokens, forward-pass counts, cache lengths)
against what the grader computed itself (greedy decoding of the target, the draft's greedy
proposals). A failing test raises `Mistake` with feedback that names the mistake and the fix;
`mutations.py` holds one deliberately broken solution per message.

Tests inside nbgrader's hidden-test markers are the hidden ones: the student kit
(``python -m specdec_helpers release``) ships this file without them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from specdec_helpers.assignment.grading.child import encode
from specdec_helpers.assignment.grading.sandbox import StudentError
from specdec_helpers.assignment.grading.world import VOCAB, Mistake, World, greedy_tokens, world

EXERCISES = ("init", "draft", "verify", "decode")
__all__ = ["EXERCISES", "Mistake", "TESTS", "Ctx", "Remote"]


@dataclass
class Test:
    exercise: str
    name: str
    weight: float
    fn: Callable
    hidden: bool = False

    @property
    def id(self) -> str:
        return f"{self.exercise}.{self.fn.__name__}"


TESTS: list[Test] = []


def test(exercise: str, name: str, weight: float = 1.0, hidden: bool = False):
    """Register a test of ``exercise`` worth ``weight`` shares of that exercise's points."""
    def register(fn):
        TESTS.append(Test(exercise, name, weight, fn, hidden))
        return fn
    return register


# --------------------------------------------------------------------------- the remote decoder


class Remote:
    """A decoder living in the child: calling a method sends a request; forward passes are counted
    there (hooks on the models) and summed here in ``counters``."""

    def __init__(self, child, handle: int, timeout: float):
        self._child, self._handle, self._timeout = child, handle, timeout
        self.counters = {"target_calls": 0, "target_positions": 0, "draft_positions": 0, "draft_calls": 0}

    def call(self, method: str, *args, **kwargs):
        try:
            answer = self._child.request("call", timeout=self._timeout, handle=self._handle, method=method,
                                         args=encode(list(args)), kwargs=encode(kwargs), probe=True)
        except StudentError as error:
            if error.kind == "NotImplementedError":
                raise NotImplementedError(method) from None
            if error.kind == "Mistake":
                raise Mistake(error.message) from None
            raise
        for key in self.counters:
            self.counters[key] += answer[key]
        return answer["result"]

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)

    def cache_length(self, which: str):
        return self._child.request("cache_length", timeout=self._timeout, handle=self._handle, which=which)

    @property
    def stats(self) -> dict:
        return self._child.request("stats", timeout=self._timeout, handle=self._handle) or {}

    @property
    def log(self) -> list:
        return self._child.request("log", timeout=self._timeout, handle=self._handle) or []


class Counted:
    """``with counted(decoder) as p``: the forward passes the decoder made inside the block."""

    def __init__(self, decoder: Remote):
        self.decoder = decoder

    def __enter__(self):
        self.start = dict(self.decoder.counters)
        return self

    def __exit__(self, *exc):
        for key, value in self.decoder.counters.items():
            setattr(self, key, value - self.start[key])


class Ctx:
    """What a test gets: the child running the student's code and the tiny world (``seed``)."""

    def __init__(self, child, seed: int = 0, timeout: float = 60):
        self.child, self.seed, self.timeout = child, seed, timeout
        self.world: World = world(seed)

    def decoder(self, draft: str = "draft", eos=None) -> Remote:
        handle = self.child.request("new", timeout=self.timeout, world=self.seed, draft=draft, eos=eos)
        return Remote(self.child, handle, self.timeout)

    def decode(self, decoder: Remote, ids, max_tokens, k=4, use_cache=True) -> list[int]:
        """New tokens of ``decoder.generate_ids`` as a list."""
        out = decoder.generate_ids(ids.clone(), max_tokens, k, use_cache=use_cache)
        if not isinstance(out, torch.Tensor) or out.dim() != 2:
            raise Mistake(f"generate_ids must return the token ids [1, prompt + new] as a tensor, got "
                          f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))}")
        if not torch.equal(out[:, : ids.shape[1]].cpu(), ids):
            raise Mistake("generate_ids must return the prompt followed by the new tokens; the prompt part changed")
        return out[0, ids.shape[1]:].tolist()


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def expect_greedy(got: list[int], want: list[int], what: str) -> None:
    if got != want:
        i = _first_difference(got, want)
        raise Mistake(f"{what}: the output differs from the target's own greedy decoding at new token {i} "
                      f"(got {got[i:i + 4]}, expected {want[i:i + 4]}; {len(got)} vs {len(want)} new tokens). "
                      "Speculative decoding must reproduce the target's greedy output exactly.")


def as_list(tokens) -> list[int]:
    if isinstance(tokens, torch.Tensor):
        return tokens.reshape(-1).tolist()
    if isinstance(tokens, (list, tuple)):
        if tokens and isinstance(tokens[0], (list, tuple, torch.Tensor)):
            return as_list(tokens[0])
        return [int(t) for t in tokens]
    raise Mistake(f"expected a list or tensor of token ids, got {type(tokens).__name__}")


def unpack(result, where: str) -> tuple[list[int], int]:
    try:
        tokens, n = result
        return as_list(tokens), int(n)
    except (TypeError, ValueError, Mistake):
        raise Mistake(f"{where} must return (accepted_tokens, accepted_position), got {type(result).__name__}") from None


def _logits_for(rows: list[int], seed: int) -> torch.Tensor:
    """Synthetic logits ``[len(rows), VOCAB]`` whose argmax in row ``j`` is ``rows[j]``."""
    logits = torch.randn(len(rows), VOCAB, generator=torch.Generator().manual_seed(seed))
    logits[torch.arange(len(rows)), rows] = 10.0
    return logits


# =========================================================================== init (5)


def _check_loaded(info: dict, role: str):
    if not info.get("is_module") or not info.get("has_generate"):
        raise Mistake(f"initialize_{role}_model must return (model, tokenizer) with a causal LM first, got {info['model']}")
    if not info.get("has_vocab"):
        raise Mistake(f"initialize_{role}_model must return (model, tokenizer); the second item is {info['tokenizer']}")
    if not info.get("pad_token"):
        raise Mistake(f"the {role} tokenizer has no pad token: base models ship without one; set "
                      "tokenizer.pad_token = tokenizer.eos_token")
    if info["training"]:
        raise Mistake(f"the {role} model is in training mode (dropout makes outputs random): call model.eval()")
    if info["device"] != "cpu":
        raise Mistake(f"the {role} model is on {info['device']}, but the decoder's device is cpu: move it with "
                      ".to(self.device)")
    if info["dtype"] != "float32":
        raise Mistake(f"the {role} model is {info['dtype']} on a CPU, where half precision is slow (and often "
                      "unsupported): use float32 on CPU, float16 on a GPU")
    if info.get("vocab_size") != VOCAB:
        raise Mistake(f"initialize_{role}_model did not load the model from the folder it was given")


@test("init", "loads the target from a local folder, ready for inference", 2)
def init_target(ctx):
    _check_loaded(_init(ctx, "target"), "target")


@test("init", "loads the draft from a local folder, ready for inference", 2)
def init_draft(ctx):
    _check_loaded(_init(ctx, "draft"), "draft")


def _init(ctx, role, device="cpu"):
    try:
        return ctx.child.request("init", timeout=ctx.timeout, world=ctx.seed, role=role, device=device)
    except StudentError as error:
        if error.kind == "NotImplementedError":
            raise NotImplementedError(role) from None
        raise


### BEGIN HIDDEN TESTS
@test("init", "the constructor loads both models and decodes", 1, hidden=True)
def init_constructor(ctx):
    try:
        handle = ctx.child.request("construct", timeout=ctx.timeout, world=ctx.seed)
    except StudentError as error:
        raise Mistake(f"SpeculativeDecoder(target_folder, draft_folder, device='cpu') failed: {error}") from None
    got = ctx.decode(Remote(ctx.child, handle, ctx.timeout), ctx.world.prompts[0], 10)
    expect_greedy(got, ctx.world.greedy("target", 0)[:10], "SpeculativeDecoder(target_folder, draft_folder)")


@test("init", "the models land on the decoder's device", 1, hidden=True)
def init_device(ctx):
    for role in ("target", "draft"):  # "meta": a device the model is not loaded on, as "cuda" would be
        info = _init(ctx, role, device="meta")
        if not info.get("is_module"):
            raise Mistake(f"initialize_{role}_model must return (model, tokenizer) with a causal LM first, got {info['model']}")
        if info["device"] != "meta":
            raise Mistake(f"with self.device = meta the {role} model stays on {info['device']}: the models are never "
                          "moved to the decoder's device; move them with .to(self.device)")
### END HIDDEN TESTS


# =========================================================================== draft (5)


def _draft(ctx, decoder, ids, k, what="generate_draft_tokens"):
    out = decoder.generate_draft_tokens(ids.clone(), torch.ones_like(ids), k)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, k):
        raise Mistake(f"{what}(input_ids, mask, {k}) must return a tensor of shape [1, {k}], got "
                      f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))}" +
                      (": it proposes one token too few (k - 1)" if tuple(getattr(out, "shape", ())) == (1, k - 1) else ""))
    return out[0].tolist()


@test("draft", "drafts the draft model's greedy tokens, deterministically", 2)
def draft_greedy(ctx):
    decoder = ctx.decoder()
    ids = ctx.world.prompts[1]
    want = ctx.world.greedy("draft", 1)[:4]
    drafts = []
    for _ in range(4):
        decoder.reset()
        drafts.append(_draft(ctx, decoder, ids, 4))
    if len({tuple(d) for d in drafts}) > 1:
        raise Mistake("generate_draft_tokens gave different drafts for the same input (it samples): verification by "
                      "exact match is for greedy drafts, so take the argmax of the draft's logits; a sampled draft "
                      f"would need rejection sampling (min(1, p/q)) instead. Drafts seen: {drafts[:3]}")
    if drafts[0] != want:
        raise Mistake(f"generate_draft_tokens proposed {drafts[0]}, but the draft model's greedy continuation is {want}: "
                      "feed the text, take the argmax of the last position's logits, append it, repeat k times")


@test("draft", "proposes exactly k tokens, also for k = 1", 1)
def draft_k(ctx):
    decoder = ctx.decoder()
    for k in (3, 1):
        decoder.reset()
        got = _draft(ctx, decoder, ctx.world.prompts[0], k)
        want = greedy_tokens(ctx.world.draft, ctx.world.prompts[0], k)
        if got != want:
            raise Mistake(f"generate_draft_tokens(k={k}) proposed {got}, expected the draft's greedy {want}")


@test("draft", "reuses the draft's KV cache across rounds (never re-reads the text)", 2)
def draft_cache_reuse(ctx):
    decoder = ctx.decoder()
    text = ctx.world.prompts[2].clone()
    target_text = ctx.world.greedy("target", 2)
    fed_budget = text.shape[1]
    with Counted(decoder) as p:
        for round_ in range(5):
            got = _draft(ctx, decoder, text, 4)
            # The target accepts one draft token and corrects the next: the text grows by two tokens.
            step = torch.tensor([[got[0], target_text[round_] if target_text[round_] != got[1] else (got[1] + 1) % VOCAB]])
            text = torch.cat([text, step], dim=1)
            fed_budget += 2 + 4
    if p.draft_positions > fed_budget:
        raise Mistake(f"the draft model read {p.draft_positions} positions in 5 drafting rounds, at most {fed_budget} "
                      "expected: it re-reads the whole text every round. Keep self.draft_cache across rounds, crop it "
                      "to at most L - 1 positions, and feed only input_ids[:, cache_length(cache):], then one token "
                      "per step (no draft_model.generate(), which starts from scratch each call)")


### BEGIN HIDDEN TESTS
@test("draft", "keeps drafting correctly after rejections (cache rolled back)", 1, hidden=True)
def draft_rounds(ctx):
    for prompt in ctx.world.prompts:  # all three: on one, a tiny random draft may repeat a token whatever it reads
        decoder = ctx.decoder()
        text = prompt.clone()
        for round_ in range(6):
            got = _draft(ctx, decoder, text, 3)
            want = greedy_tokens(ctx.world.draft, text, 3)
            if got != want:
                raise Mistake(f"round {round_}: generate_draft_tokens proposed {got}, but the draft's greedy continuation "
                              f"of the text is {want}. After a rejection the draft cache still holds rejected draft "
                              "tokens: crop it to at most L - 1 positions before feeding new ones")
            correction = (got[1] + 1) % VOCAB or 1
            text = torch.cat([text, torch.tensor([[got[0], correction]])], dim=1)
### END HIDDEN TESTS


# =========================================================================== verify (5)


@test("verify", "accept_draft: all accepted -> k tokens plus the bonus token", 1)
def accept_all(ctx):
    decoder = ctx.decoder()
    g = torch.Generator().manual_seed(ctx.seed)
    draft = torch.randint(1, VOCAB, (4,), generator=g).tolist()
    bonus = int(torch.randint(1, VOCAB, (1,), generator=g))
    tokens, n = unpack(decoder.accept_draft(_logits_for(draft + [bonus], ctx.seed), torch.tensor([draft])), "accept_draft")
    if n != 4:
        raise Mistake(f"accept_draft: every draft token equals the target's argmax, yet accepted_position = {n} "
                      "(expected 4): count the leading draft tokens that match")
    if tokens != draft + [bonus]:
        detail = "it is missing" if tokens == draft else f"got {tokens}"
        raise Mistake(f"accept_draft: when all k draft tokens are accepted, accepted_tokens must end with the free bonus "
                      f"token (the argmax of the last row, k + 1 tokens in all); {detail}")


@test("verify", "accept_draft: first mismatch -> accepted prefix plus the correction", 1)
def accept_mismatch(ctx):
    decoder = ctx.decoder()
    g = torch.Generator().manual_seed(ctx.seed + 1)
    for j in (0, 2):
        target_rows = torch.randint(1, VOCAB - 1, (5,), generator=g).tolist()
        draft = list(target_rows[:4])
        draft[j] = target_rows[j] + 1
        draft[j + 1] = target_rows[j + 1]  # a match right after the mismatch must not count
        tokens, n = unpack(decoder.accept_draft(_logits_for(target_rows, ctx.seed), torch.tensor([draft])), "accept_draft")
        if n != j:
            raise Mistake(f"accept_draft: the first mismatch is at draft position {j}, yet accepted_position = {n}: "
                          "accept only the leading run of matches (stop at the first mismatch)")
        if tokens != target_rows[: j + 1]:
            detail = "it is missing" if tokens == target_rows[:j] else f"got {tokens}"
            raise Mistake(f"accept_draft: at the first mismatch accepted_tokens must end with the target's own token "
                          f"there (the correction, argmax of row {j}): {j + 1} token(s) in all; {detail}")


def check_verify(ctx, method: str):
    # a prompt whose first 5 greedy tokens are not one token repeated: else a verifier off by one row (judging
    # draft token j by the row that predicts token j + 1) accepts the target's own continuation too
    index = next((i for i in (1, 0, 2) if len(set(ctx.world.greedy("target", i)[:5])) > 1), 1)
    decoder = ctx.decoder()
    ids = ctx.world.prompts[index]
    g = ctx.world.greedy("target", index)
    wrong = g[:2] + [(g[2] + 1) % VOCAB, g[3]]
    for case, draft, want_n in (("the target's own continuation", g[:4], 4), ("a draft wrong at position 2", wrong, 2)):
        decoder.reset()
        with Counted(decoder) as p:
            tokens, n = unpack(decoder.call(method, ids.clone(), torch.tensor([draft]), torch.ones_like(ids)), method)
        if (tokens, n) != (g[: want_n + 1], want_n):
            if want_n == 4 and n < 4:
                raise Mistake(f"{method} rejected a draft that IS the target's greedy continuation (accepted {n} of 4): "
                              "it judges draft tokens by the wrong row of logits (off by one). The logits at position "
                              "i predict token i + 1, so draft token j (at position L + j) is judged by row L - 1 + j")
            raise Mistake(f"{method} on {case}: got ({tokens}, {n}), expected ({g[: want_n + 1]}, {want_n})")
        if p.target_calls != 1:
            raise Mistake(f"{method} ran the target {p.target_calls} times: one forward pass must score every draft "
                          "token and give the correction/bonus token")
        if method == "verify_tokens_cached":
            held = decoder.cache_length("target")
            if held != ids.shape[1] + n:
                direction = ("keeps the rejected draft positions: roll them back" if held is not None and
                             held > ids.shape[1] + n else "cut too much: it dropped kept text (crop to L + accepted_position, "
                             "not one less)")
                raise Mistake(f"after verify_tokens_cached the target cache holds {held} positions, expected "
                              f"L + accepted_position = {ids.shape[1] + n}: it {direction} "
                              "(crop_cache(self.target_cache, L + accepted_position))")


@test("verify", "verify_tokens_vectorized: one target pass, the right rows of logits", 3)
def verify_vectorized(ctx):
    check_verify(ctx, "verify_tokens_vectorized")
