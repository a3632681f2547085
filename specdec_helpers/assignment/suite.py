"""The assignment's tests: behavioural checks of a student's ``SpeculativeDecoder`` on tiny models.

Every test runs the student's code and watches what it does (target forward passes counted with
hooks, positions fed to the draft, cache lengths, outputs compared with the target's own greedy
decoding, token counts), never its source text. A failing test raises `Mistake` with feedback that
names the mistake and the fix; `mutations.py` holds one deliberately broken solution per message.

Tests inside nbgrader's hidden-test markers are the hidden ones: the student kit
(``python -m specdec_helpers release``) ships this file without them.
"""
from __future__ import annotations

import copy
import functools
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from specdec_helpers.core.cache import cache_length

EXERCISES = ("init", "draft", "verify", "decode")
VOCAB = 64


class Mistake(AssertionError):
    """A test found wrong behaviour; the message is the feedback the student sees."""


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


# --------------------------------------------------------------------------- the tiny world


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

    def __init__(self):
        self.tokenizer = _tokenizer()
        self.target = _model(0)
        self.draft = perturbed_copy(self.target, 0.15, 1)  # agrees often, not always
        self.same = copy.deepcopy(self.target)  # agrees always: every round ends with a bonus token
        self.other = _model(7)  # unrelated: nearly every draft token is rejected
        g = torch.Generator().manual_seed(3)
        self.prompts = [torch.randint(1, VOCAB, (1, n), generator=g) for n in (6, 11, 32)]
        self._folders = None

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


@functools.lru_cache(maxsize=1)
def world() -> World:
    return World()


# --------------------------------------------------------------------------- instrumentation


class Probe:
    """Counts what a decoder does: target passes, positions fed to the draft, draft and verify calls.

    The target's hook also stops a loop that makes no progress (``limit`` passes), so a broken
    decode loop fails its test instead of hanging the grader.
    """

    def __init__(self, target, draft, limit: int = 400):
        self.target_calls = 0
        self.draft_positions = 0
        self.draft_calls = 0
        self.limit = limit
        self.handles = [target.register_forward_pre_hook(self._on_target, with_kwargs=True)]
        if isinstance(draft, torch.nn.Module):
            self.handles.append(draft.register_forward_pre_hook(self._on_draft, with_kwargs=True))

    def _on_target(self, module, args, kwargs):
        self.target_calls += 1
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


class Ctx:
    """What a test gets: the student's class and the tiny world."""

    def __init__(self, cls):
        self.cls = cls
        self.world = world()

    def decoder(self, draft=None, eos=None, record=False):
        return make_decoder(self.cls, self.world.pair(draft), eos, record)

    def decode(self, decoder, ids, max_tokens, k=4, use_cache=True) -> list[int]:
        """New tokens of ``decoder.generate_ids`` as a list."""
        with torch.inference_mode():
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


def _unpack(result, where: str) -> tuple[list[int], int]:
    try:
        tokens, n = result
    except (TypeError, ValueError):
        raise Mistake(f"{where} must return (accepted_tokens, accepted_position), got {type(result).__name__}") from None
    return _as_list(tokens), int(n)


def _logits_for(rows: list[int], vocab: int = VOCAB) -> torch.Tensor:
    """Synthetic logits ``[len(rows), vocab]`` whose argmax in row ``j`` is ``rows[j]``."""
    logits = torch.randn(len(rows), vocab, generator=torch.Generator().manual_seed(0))
    logits[torch.arange(len(rows)), rows] = 10.0
    return logits


# =========================================================================== init (5)


def _check_loaded(ctx, model, tokenizer, role):
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "generate"):
        raise Mistake(f"initialize_{role}_model must return (model, tokenizer) with a causal LM first, got "
                      f"{type(model).__name__}")
    if not hasattr(tokenizer, "get_vocab"):
        raise Mistake(f"initialize_{role}_model must return (model, tokenizer); the second item is "
                      f"{type(tokenizer).__name__}")
    if tokenizer.pad_token is None:
        raise Mistake(f"the {role} tokenizer has no pad token: base models ship without one; set "
                      "tokenizer.pad_token = tokenizer.eos_token")
    if model.training:
        raise Mistake(f"the {role} model is in training mode (dropout makes outputs random): call model.eval()")
    p = next(model.parameters())
    if p.device.type != "cpu":
        raise Mistake(f"the {role} model is on {p.device}, but the decoder's device is cpu: move it with .to(self.device)")
    if p.dtype != torch.float32:
        raise Mistake(f"the {role} model is {p.dtype} on a CPU, where half precision is slow (and often "
                      "unsupported): use float32 on CPU, float16 on a GPU")
    if getattr(model.config, "vocab_size", None) != VOCAB:
        raise Mistake(f"initialize_{role}_model did not load the model from the folder it was given")


def _blank(ctx):
    decoder = ctx.cls.__new__(ctx.cls)
    decoder.device = torch.device("cpu")
    return decoder


@test("init", "loads the target from a local folder, ready for inference", 2)
def init_target(ctx):
    target_dir, _ = ctx.world.folders()
    model, tokenizer = _blank(ctx).initialize_target_model(target_dir)
    _check_loaded(ctx, model, tokenizer, "target")


@test("init", "loads the draft from a local folder, ready for inference", 2)
def init_draft(ctx):
    _, draft_dir = ctx.world.folders()
    model, tokenizer = _blank(ctx).initialize_draft_model(draft_dir)
    _check_loaded(ctx, model, tokenizer, "draft")


### BEGIN HIDDEN TESTS
@test("init", "the constructor loads both models and decodes", 1, hidden=True)
def init_constructor(ctx):
    target_dir, draft_dir = ctx.world.folders()
    decoder = ctx.cls(target_dir, draft_dir, device="cpu")
    decoder.eos_token_id = None
    got = ctx.decode(decoder, ctx.world.prompts[0], 10)
    expect_greedy(got, ctx.world.greedy("target", 0)[:10], "SpeculativeDecoder(target_folder, draft_folder)")
### END HIDDEN TESTS


# =========================================================================== draft (5)


@test("draft", "drafts the draft model's greedy tokens, deterministically", 2)
def draft_greedy(ctx):
    decoder = ctx.decoder()
    ids = ctx.world.prompts[1]
    want = ctx.world.greedy("draft", 1)[:4]
    drafts = []
    for _ in range(6):
        decoder.reset()
        with torch.inference_mode():
            out = decoder.generate_draft_tokens(ids.clone(), torch.ones_like(ids), 4)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, 4):
            raise Mistake(f"generate_draft_tokens(input_ids, mask, 4) must return a tensor of shape [1, 4], got "
                          f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))}")
        drafts.append(out[0].tolist())
    if len({tuple(d) for d in drafts}) > 1:
        raise Mistake("generate_draft_tokens gave different drafts for the same input (it samples): verification by "
                      "exact match is for greedy drafts, so take the argmax of the draft's logits; a sampled draft "
                      f"would need rejection sampling (min(1, p/q)) instead. Drafts seen: {drafts[:3]}")
    if drafts[0] != want:
        raise Mistake(f"generate_draft_tokens proposed {drafts[0]}, but the draft model's greedy continuation is {want}: "
                      "feed the text, take the argmax of the last position's logits, append it, repeat k times")


@test("draft", "reuses the draft's KV cache across rounds (never re-reads the text)", 2)
def draft_cache_reuse(ctx):
    decoder = ctx.decoder(record=True)
    ids = ctx.world.prompts[2]
    with probe(decoder) as p:
        new = len(ctx.decode(decoder, ids, 24))
    rounds = sum(1 for entry in decoder.log if entry[0] == "verify")
    drafts = sum(1 for entry in decoder.log if entry[0] == "draft")
    if not drafts:
        raise Mistake("generate_ids never called self.generate_draft_tokens; draft each round through it")
    # With a cache each round feeds the tokens appended since the last round, then one token per draft step.
    budget = ids.shape[1] + new + rounds * (4 + 1)
    if p.draft_positions > budget:
        raise Mistake(f"the draft model read {p.draft_positions} positions in {drafts} drafting calls, at most {budget} "
                      "expected: it re-reads the whole text every round. Keep self.draft_cache across rounds, crop it "
                      "to at most L - 1 positions, and feed only input_ids[:, cache_length(cache):], then one token "
                      "per step (no draft_model.generate(), which starts from scratch each call)")


### BEGIN HIDDEN TESTS
@test("draft", "keeps drafting correctly after rejections (cache rolled back)", 1, hidden=True)
def draft_rounds(ctx):
    decoder = ctx.decoder()
    text = ctx.world.prompts[0].clone()
    for round_ in range(6):
        with torch.inference_mode():
            got = decoder.generate_draft_tokens(text.clone(), None, 3)[0].tolist()
        want = greedy_tokens(ctx.world.draft, text, 3)
        if got != want:
            raise Mistake(f"round {round_}: generate_draft_tokens proposed {got}, but the draft's greedy continuation of "
                          f"the text is {want}. After a rejection the draft cache still holds rejected draft tokens: "
                          "crop it to at most L - 1 positions before feeding new ones")
        # The next text: the first draft token accepted, then a token the draft did not propose (a correction).
        correction = (got[1] + 1) % VOCAB or 1
        text = torch.cat([text, torch.tensor([[got[0], correction]])], dim=1)
### END HIDDEN TESTS


# =========================================================================== verify (5)


@test("verify", "accept_draft: all accepted -> k tokens plus the bonus token", 1)
def accept_all(ctx):
    decoder = ctx.decoder()
    draft = [5, 9, 14, 2]
    tokens, n = _unpack(decoder.accept_draft(_logits_for(draft + [33]), torch.tensor([draft])), "accept_draft")
    if n != 4:
        raise Mistake(f"accept_draft: every draft token equals the target's argmax, yet accepted_position = {n} "
                      "(expected 4): count the leading draft tokens that match")
    if tokens != draft + [33]:
        detail = "it is missing" if tokens == draft else f"got {tokens}"
        raise Mistake(f"accept_draft: when all k draft tokens are accepted, accepted_tokens must end with the free bonus "
                      f"token (the argmax of the last row, k + 1 tokens in all); {detail}")


@test("verify", "accept_draft: first mismatch -> accepted prefix plus the correction", 1)
def accept_mismatch(ctx):
    decoder = ctx.decoder()
    for j in (0, 2):
        target_rows = [5, 9, 14, 2, 33]
        draft = list(target_rows[:4])
        draft[j] = 50
        draft[j + 1] = target_rows[j + 1]  # a match right after the mismatch must not count
        tokens, n = _unpack(decoder.accept_draft(_logits_for(target_rows), torch.tensor([draft])), "accept_draft")
        if n != j:
            raise Mistake(f"accept_draft: the first mismatch is at draft position {j}, yet accepted_position = {n}: "
                          "accept only the leading run of matches (stop at the first mismatch)")
        if tokens != target_rows[: j + 1]:
            detail = "it is missing" if tokens == target_rows[:j] else f"got {tokens}"
            raise Mistake(f"accept_draft: at the first mismatch accepted_tokens must end with the target's own token "
                          f"there (the correction, argmax of row {j}): {j + 1} token(s) in all; {detail}")


def _check_verify(ctx, method: str):
    decoder = ctx.decoder()
    ids = ctx.world.prompts[1]
    g = ctx.world.greedy("target", 1)
    fn = getattr(decoder, method)
    for case, draft in (("the target's own continuation", g[:4]), ("a draft wrong at position 2", g[:2] + [(g[2] + 1) % VOCAB, g[3]])):
        decoder.reset()
        with probe(decoder) as p, torch.inference_mode():
            tokens, n = _unpack(fn(ids.clone(), torch.tensor([draft]), torch.ones_like(ids)),
                                method)
        want_n = 4 if draft == g[:4] else 2
        if (tokens, n) != (g[: want_n + 1], want_n):
            if draft == g[:4] and n < 4:
                raise Mistake(f"{method} rejected a draft that IS the target's greedy continuation (accepted {n} of 4): "
                              "it judges draft tokens by the wrong row of logits (off by one). The logits at position "
                              "i predict token i + 1, so draft token j (at position L + j) is judged by row L - 1 + j")
            raise Mistake(f"{method} on {case}: got ({tokens}, {n}), expected ({g[: want_n + 1]}, {want_n})")
        if p.target_calls != 1:
            raise Mistake(f"{method} ran the target {p.target_calls} times: one forward pass must score every draft "
                          "token and give the correction/bonus token")
        if method == "verify_tokens_cached":
            held = cache_length(decoder.target_cache)
            if held != ids.shape[1] + n:
                raise Mistake(f"after verify_tokens_cached the target cache holds {held} positions, expected "
                              f"L + accepted_position = {ids.shape[1] + n}: roll back the rejected draft positions "
                              "(crop_cache(self.target_cache, L + accepted_position)); the next round would otherwise "
                              "attend to tokens that are not in the text")


@test("verify", "verify_tokens_vectorized: one target pass, the right rows of logits", 1.5)
def verify_vectorized(ctx):
    _check_verify(ctx, "verify_tokens_vectorized")


@test("verify", "verify_tokens_cached: one pass, cache rolled back to the kept text", 1.5)
def verify_cached(ctx):
    _check_verify(ctx, "verify_tokens_cached")


# =========================================================================== decode (10)


@test("decode", "equals the target's greedy output (KV cache)", 2)
def decode_cached(ctx):
    for i in (0, 1):
        got = ctx.decode(ctx.decoder(), ctx.world.prompts[i], 20)
        expect_greedy(got, ctx.world.greedy("target", i)[:20], f"generate_ids(prompt {i}, use_cache=True)")


@test("decode", "equals the target's greedy output (no cache)", 1)
def decode_vectorized(ctx):
    got = ctx.decode(ctx.decoder(), ctx.world.prompts[1], 20, use_cache=False)
    expect_greedy(got, ctx.world.greedy("target", 1)[:20], "generate_ids(use_cache=False)")


@test("decode", "never exceeds max_tokens", 1)
def decode_max_tokens(ctx):
    for max_tokens in (1, 6, 13):
        got = ctx.decode(ctx.decoder(draft=ctx.world.same), ctx.world.prompts[0], max_tokens)
        if len(got) != max_tokens:
            raise Mistake(f"generate_ids produced {len(got)} new tokens for max_tokens={max_tokens}: draft at most "
                          "max_tokens - generated - 1 tokens near the end (the target adds one), so the last round "
                          "lands exactly on the limit")


@test("decode", "stops right after a generated EOS token", 1)
def decode_eos(ctx):
    g = ctx.world.greedy("target", 1)
    prompt = ctx.world.prompts[1]
    i = next(i for i in range(5, len(g)) if g[i] not in g[:i] and g[i] not in prompt[0].tolist())
    got = ctx.decode(ctx.decoder(draft=ctx.world.same, eos=g[i]), prompt, 20)
    if got != g[: i + 1]:
        if got[: i + 1] == g[: i + 1]:
            raise Mistake(f"the target generated EOS as new token {i}, but generate_ids kept {len(got) - i - 1} more "
                          "tokens after it: cut the round's tokens right after the EOS and stop")
        expect_greedy(got, g[: i + 1], f"generate_ids with eos_token_id={g[i]}")


@test("decode", "one target pass per round", 1)
def decode_one_pass(ctx):
    for use_cache in (True, False):
        decoder = ctx.decoder(record=True)
        with probe(decoder) as p:
            ctx.decode(decoder, ctx.world.prompts[1], 20, use_cache=use_cache)
        rounds = sum(1 for entry in decoder.log if entry[0] == "verify")
        if not rounds:
            raise Mistake("generate_ids never called self.verify_tokens_cached / verify_tokens_vectorized; verify "
                          "each round through them")
        if p.target_calls != rounds:
            raise Mistake(f"generate_ids ran the target {p.target_calls} times in {rounds} rounds (use_cache="
                          f"{use_cache}): each round needs exactly ONE target pass. Verification already returns the "
                          "correction or bonus token; do not run the target again after a rejection (PA3 did)")


@test("decode", "counts proposed and accepted draft tokens correctly", 1)
def decode_stats(ctx):
    decoder = ctx.decoder(record=True)
    ctx.decode(decoder, ctx.world.prompts[1], 20)
    proposed = sum(entry[2] for entry in decoder.log if entry[0] == "verify")
    accepted = sum(_unpack(entry[3], "verify")[1] for entry in decoder.log if entry[0] == "verify")
    stats = getattr(decoder, "stats", {}) or {}
    if stats.get("accepted") != accepted:
        extra = " (it counts the target's correction/bonus tokens as accepted draft tokens)" if \
            stats.get("accepted") == accepted + sum(1 for e in decoder.log if e[0] == "verify") else ""
        raise Mistake(f"stats['accepted'] = {stats.get('accepted')} but verification accepted {accepted} draft tokens"
                      f"{extra}: only draft tokens that matched count; the token the target adds each round is not a "
                      "draft token, and counting it inflates the acceptance rate")
    if stats.get("proposed") != proposed:
        raise Mistake(f"stats['proposed'] = {stats.get('proposed')} but {proposed} draft tokens were verified")


### BEGIN HIDDEN TESTS
@test("decode", "equals greedy with drafts that always / never agree, k = 1 and 8", 1, hidden=True)
def decode_edges(ctx):
    g = ctx.world.greedy("target", 2)
    for name, draft, k in (("always agreeing", ctx.world.same, 4), ("unrelated", ctx.world.other, 4),
                           ("k = 1", None, 1), ("k = 8", None, 8)):
        got = ctx.decode(ctx.decoder(draft=draft), ctx.world.prompts[2], 17, k=k)
        expect_greedy(got, g[:17], f"generate_ids with a {name} draft" if draft is not None else f"generate_ids, {name}")


@test("decode", "an EOS id inside the prompt does not stop decoding", 1, hidden=True)
def decode_eos_in_prompt(ctx):
    base = ctx.world.prompts[0]
    for eos in range(1, VOCAB):
        prompt = torch.cat([base, torch.tensor([[eos, 3]])], dim=1)
        want = greedy_tokens(ctx.world.target, prompt, 16)
        if eos not in want:
            break
    got = ctx.decode(ctx.decoder(eos=eos), prompt, 16)
    if len(got) < 16 and eos not in got:
        raise Mistake(f"generate_ids stopped after {len(got)} of 16 new tokens although the target never generated "
                      f"EOS: the prompt contains the EOS id ({eos}); look for EOS only among the new tokens")
    expect_greedy(got, want, "generate_ids with an EOS id in the prompt")


@test("decode", "benchmark counts new tokens from ids", 1, hidden=True)
def decode_benchmark_tokens(ctx):
    decoder = ctx.decoder()
    prompt = "t1 t2 t3 t4 t5 t6"
    with torch.inference_mode():
        produced = decoder.generate_ids(decoder.encode(prompt), 12, 4).shape[1] - 6
        result = decoder.benchmark(prompt, max_tokens=12, num_runs=1, compare_baseline=False)
    spec = result["speculative"]
    counted = [round(t * s) for t, s in zip(spec["tokens_per_second"], spec["times"])]
    if counted != [produced]:
        raise Mistake(f"benchmark counted {counted[0] if counted else None} new tokens in a run that produced "
                      f"{produced}: count them from the output ids (output length - prompt length); decoding and "
                      "re-encoding the text does not give the same tokens back")
### END HIDDEN TESTS
