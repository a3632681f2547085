"""The tests of the init, draft and verify parts: behavioural checks of a student's decoder, run FROM
the grader's process against the student's code in a child process (`sandbox.Child`).

Each test asks the child to run a graded method on inputs of a world whose seed the grader picked at
grade time, and judges what comes back (tokens, forward-pass counts, cache lengths) against what the
grader computed itself (greedy decoding of the target, the draft's greedy proposals). A failing test
raises `Mistake` with feedback that names the mistake and the fix; `mutations.py` holds one
deliberately broken solution per message. The tests are data: `TESTS` at the end lists them.

Tests inside nbgrader's hidden-test markers are the hidden ones: the student kit
(``python -m specdec_helpers release``) ships this file without them.
"""

from __future__ import annotations

import torch

from specdec_helpers.assignment.testing.cases import (  # noqa: F401 - EXERCISES, Ctx, Remote: the suite's API
    EXERCISES,
    Counted,
    Ctx,
    Remote,
    TestCase,
    expect_greedy,
    logits_for,
    unpack,
)
from specdec_helpers.assignment.testing import outside
from specdec_helpers.assignment.testing.wire import StudentError
from specdec_helpers.assignment.testing.world import Mistake, greedy_tokens

# =========================================================================== init (5)


def _check_loaded(info: dict, role: str, vocab: int):
    if not info.get("is_module") or not info.get("has_generate"):
        raise Mistake(
            f"initialize_{role}_model must return (model, tokenizer) with a causal LM first, got {info['model']}"
        )
    if not info.get("has_vocab"):
        raise Mistake(f"initialize_{role}_model must return (model, tokenizer); the second item is {info['tokenizer']}")
    if not info.get("pad_token"):
        raise Mistake(
            f"the {role} tokenizer has no pad token: base models ship without one; set "
            "tokenizer.pad_token = tokenizer.eos_token"
        )
    if info["training"]:
        raise Mistake(f"the {role} model is in training mode (dropout makes outputs random): call model.eval()")
    if info["device"] != "cpu":
        raise Mistake(
            f"the {role} model is on {info['device']}, but the decoder's device is cpu: move it with .to(self.device)"
        )
    if info["dtype"] != "float32":
        raise Mistake(
            f"the {role} model is {info['dtype']} on a CPU, where half precision is slow (and often "
            "unsupported): use float32 on CPU, float16 on a GPU"
        )
    if info.get("vocab_size") != vocab:
        raise Mistake(f"initialize_{role}_model did not load the model from the folder it was given")


def init_target(ctx):
    _check_loaded(_init(ctx, "target"), "target", ctx.world.vocab)


def init_draft(ctx):
    _check_loaded(_init(ctx, "draft"), "draft", ctx.world.vocab)


def _init(ctx, role, device="cpu"):
    try:
        return ctx.child.request("init", timeout=ctx.timeout, world=ctx.seed, role=role, device=device)
    except StudentError as error:
        if error.kind == "NotImplementedError":
            raise NotImplementedError(role) from None
        raise


### BEGIN HIDDEN TESTS
def init_constructor(ctx):
    try:
        handle = ctx.child.request("construct", timeout=ctx.timeout, world=ctx.seed)
    except StudentError as error:
        raise Mistake(f"SpeculativeDecoder(target_folder, draft_folder, device='cpu') failed: {error}") from None
    got = ctx.decode(Remote(ctx.child, handle, ctx.timeout), ctx.world.prompts[0], 10)
    expect_greedy(got, ctx.world.greedy("target", 0)[:10], "SpeculativeDecoder(target_folder, draft_folder)")


def init_device(ctx):
    for role in ("target", "draft"):  # "meta": a device the model is not loaded on, as "cuda" would be
        info = _init(ctx, role, device="meta")
        if not info.get("is_module"):
            raise Mistake(
                f"initialize_{role}_model must return (model, tokenizer) with a causal LM first, got {info['model']}"
            )
        if info["device"] != "meta":
            raise Mistake(
                f"with self.device = meta the {role} model stays on {info['device']}: the models are never "
                "moved to the decoder's device; move them with .to(self.device)"
            )


### END HIDDEN TESTS


# =========================================================================== draft (5)


def _draft(ctx, decoder, ids, k, what="generate_draft_tokens"):
    out = decoder.generate_draft_tokens(ids.clone(), torch.ones_like(ids), k)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, k):
        raise Mistake(
            f"{what}(input_ids, mask, {k}) must return a tensor of shape [1, {k}], got "
            f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))}"
            + (": it proposes one token too few (k - 1)" if tuple(getattr(out, "shape", ())) == (1, k - 1) else "")
        )
    return out[0].tolist()


def draft_greedy(ctx):
    decoder = ctx.decoder()
    ids = ctx.world.prompts[1]
    want = ctx.world.greedy("draft", 1)[:4]
    drafts = []
    for _ in range(4):
        decoder.reset()
        drafts.append(_draft(ctx, decoder, ids, 4))
    if len({tuple(d) for d in drafts}) > 1:
        raise Mistake(
            "generate_draft_tokens gave different drafts for the same input (it samples): verification by "
            "exact match is for greedy drafts, so take the argmax of the draft's logits; a sampled draft "
            f"would need rejection sampling (min(1, p/q)) instead. Drafts seen: {drafts[:3]}"
        )
    if drafts[0] != want:
        raise Mistake(
            f"generate_draft_tokens proposed {drafts[0]}, but the draft model's greedy continuation is {want}: "
            "feed the text, take the argmax of the last position's logits, append it, repeat k times"
        )


def draft_k(ctx):
    decoder = ctx.decoder()
    for k in (3, 1):
        decoder.reset()
        got = _draft(ctx, decoder, ctx.world.prompts[0], k)
        want = greedy_tokens(ctx.world.draft, ctx.world.prompts[0], k)
        if got != want:
            raise Mistake(f"generate_draft_tokens(k={k}) proposed {got}, expected the draft's greedy {want}")


def draft_cache_reuse(ctx):
    decoder = ctx.decoder()
    text = ctx.world.prompts[2].clone()
    target_text = ctx.world.greedy("target", 2)
    for round_ in range(5):
        with Counted(decoder) as p:
            got = _draft(ctx, decoder, text, 4)
        # Its first pass must feed only what the cache lacks: nothing of the prompt is cached in round 0; later
        # the cache holds the text up to its last token, which is fed again for its logits (4 passes, 4 positions).
        reread = p.draft_positions - p.draft_calls - (text.shape[1] - 1 if round_ == 0 else 0)
        if reread > 0 and reread >= text.shape[1] - 2:
            raise Mistake(
                f"in drafting round {round_ + 1} the draft model read {p.draft_positions} positions for 4 "
                "tokens: it re-reads the whole text every round. Keep self.draft_cache across rounds, crop "
                "it to at most L - 1 positions, and feed only input_ids[:, cache_length(cache):], then one "
                "token per step (no draft_model.generate(), which starts from scratch each call)"
            )
        if reread > 0:
            short = "one position" if reread == 1 else f"{reread} positions"
            raise Mistake(
                f"in drafting round {round_ + 1} the draft model re-read {short} its cache already held: "
                f"the draft cache is cropped {short} short. Crop it to min(cache_length, L - 1) (keep every "
                "position but the last, whose logits give the first draft token), not fewer"
            )
        # The target accepts one draft token and corrects the next: the text grows by two tokens.
        fix = target_text[round_] if target_text[round_] != got[1] else (got[1] + 1) % ctx.world.vocab
        text = torch.cat([text, torch.tensor([[got[0], fix]])], dim=1)
    ### BEGIN HIDDEN TESTS
    if ctx.hidden:  # the grader's run (a check cell runs the student kit's tests, stripped of this)
        _draft_cache_reused_outside(ctx)
    ### END HIDDEN TESTS


### BEGIN HIDDEN TESTS
def _draft_cache_reused_outside(ctx, length: int = 900, rounds: int = 8, margin: float = 4.0):
    """The position counter above runs in the student's process, where code can hide passes from it (a model
    called with ``inputs_embeds``). So the kernel is asked too: the child's CPU time (`sandbox.Child.cpu_seconds`,
    read from outside) for ``rounds`` more drafting rounds after a long prompt, against its own first round, which
    must read the prompt once. A draft that re-reads the text pays that first round's cost every round."""
    g = torch.Generator().manual_seed(ctx.seed + 13)
    text = torch.randint(3, ctx.world.vocab, (1, length), generator=g)
    first = float("inf")
    for _ in range(3):  # the cheapest of three fresh decoders' first rounds: the prompt read once
        decoder = ctx.decoder(draft="same")
        before = ctx.child.cpu_seconds()
        got = _draft(ctx, decoder, text, 4)
        first = min(first, ctx.child.cpu_seconds() - before)
    before = ctx.child.cpu_seconds()
    for _ in range(rounds):  # one draft token accepted, the next rejected: the text grows by two
        text = torch.cat([text, torch.tensor([[got[0], (got[1] + 1) % ctx.world.vocab]])], dim=1)
        got = _draft(ctx, decoder, text, 4)
    later = ctx.child.cpu_seconds() - before
    if later > margin * first + 0.1:
        raise Mistake(
            f"{rounds} drafting rounds after a {length}-token prompt took {later:.2f} s of CPU time where the "
            f"first, which reads the prompt, took {first:.2f} s (measured outside your process): the draft "
            "model re-reads the whole text every round. Keep self.draft_cache across rounds, crop it to at "
            "most L - 1 positions, and feed only input_ids[:, cache_length(cache):]"
        )


### END HIDDEN TESTS


def draft_rounds(ctx):
    for prompt in ctx.world.prompts:  # all three: on one, a tiny random draft may repeat a token whatever it reads
        decoder = ctx.decoder()
        text = prompt.clone()
        for round_ in range(6):
            got = _draft(ctx, decoder, text, 3)
            want = greedy_tokens(ctx.world.draft, text, 3)
            if got != want:
                raise Mistake(
                    f"round {round_}: generate_draft_tokens proposed {got}, but the draft's greedy continuation "
                    f"of the text is {want}. After a rejection the draft cache still holds rejected draft "
                    "tokens: crop it to at most L - 1 positions before feeding new ones"
                )
            correction = (got[1] + 1) % ctx.world.vocab or 1
            text = torch.cat([text, torch.tensor([[got[0], correction]])], dim=1)


# =========================================================================== verify (5)


def accept_all(ctx):
    decoder = ctx.decoder()
    g = torch.Generator().manual_seed(ctx.seed)
    draft = torch.randint(1, ctx.world.vocab, (4,), generator=g).tolist()
    bonus = int(torch.randint(1, ctx.world.vocab, (1,), generator=g))
    tokens, n = unpack(
        decoder.accept_draft(logits_for(draft + [bonus], ctx.seed, ctx.world.vocab), torch.tensor([draft])),
        "accept_draft",
    )
    if n != 4:
        raise Mistake(
            f"accept_draft: every draft token equals the target's argmax, yet accepted_position = {n} "
            "(expected 4): count the leading draft tokens that match"
        )
    if tokens != draft + [bonus]:
        detail = "it is missing" if tokens == draft else f"got {tokens}"
        raise Mistake(
            f"accept_draft: when all k draft tokens are accepted, accepted_tokens must end with the free bonus "
            f"token (the argmax of the last row, k + 1 tokens in all); {detail}"
        )


def accept_mismatch(ctx):
    decoder = ctx.decoder()
    g = torch.Generator().manual_seed(ctx.seed + 1)
    for j in (0, 2):
        target_rows = torch.randint(1, ctx.world.vocab - 1, (5,), generator=g).tolist()
        draft = list(target_rows[:4])
        draft[j] = target_rows[j] + 1
        draft[j + 1] = target_rows[j + 1]  # a match right after the mismatch must not count
        tokens, n = unpack(
            decoder.accept_draft(logits_for(target_rows, ctx.seed, ctx.world.vocab), torch.tensor([draft])),
            "accept_draft",
        )
        if n != j:
            raise Mistake(
                f"accept_draft: the first mismatch is at draft position {j}, yet accepted_position = {n}: "
                "accept only the leading run of matches (stop at the first mismatch)"
            )
        if tokens != target_rows[: j + 1]:
            detail = "it is missing" if tokens == target_rows[:j] else f"got {tokens}"
            raise Mistake(
                f"accept_draft: at the first mismatch accepted_tokens must end with the target's own token "
                f"there (the correction, argmax of row {j}): {j + 1} token(s) in all; {detail}"
            )


def check_verify(ctx, method: str):
    # a prompt whose first 5 greedy tokens are not one token repeated: else a verifier off by one row (judging
    # draft token j by the row that predicts token j + 1) accepts the target's own continuation too
    index = next((i for i in (1, 0, 2) if len(set(ctx.world.greedy("target", i)[:5])) > 1), 1)
    decoder = ctx.decoder()
    ids = ctx.world.prompts[index]
    g = ctx.world.greedy("target", index)
    wrong = g[:2] + [(g[2] + 1) % ctx.world.vocab, g[3]]
    for case, draft, want_n in (("the target's own continuation", g[:4], 4), ("a draft wrong at position 2", wrong, 2)):
        decoder.reset()
        with Counted(decoder) as p:
            tokens, n = unpack(decoder.call(method, ids.clone(), torch.tensor([draft]), torch.ones_like(ids)), method)
        if (tokens, n) != (g[: want_n + 1], want_n):
            if want_n == 4 and n < 4:
                raise Mistake(
                    f"{method} rejected a draft that IS the target's greedy continuation (accepted {n} of 4): "
                    "it judges draft tokens by the wrong row of logits (off by one). The logits at position "
                    "i predict token i + 1, so draft token j (at position L + j) is judged by row L - 1 + j"
                )
            raise Mistake(f"{method} on {case}: got ({tokens}, {n}), expected ({g[: want_n + 1]}, {want_n})")
        if p.target_calls != 1:
            raise Mistake(
                f"{method} ran the target {p.target_calls} times: one forward pass must score every draft "
                "token and give the correction/bonus token"
            )
        if method == "verify_tokens_cached":
            held = decoder.cache_length("target")
            if held != ids.shape[1] + n:
                direction = (
                    "keeps the rejected draft positions: roll them back"
                    if held is not None and held > ids.shape[1] + n
                    else "cut too much: it dropped kept text (crop to L + accepted_position, not one less)"
                )
                raise Mistake(
                    f"after verify_tokens_cached the target cache holds {held} positions, expected "
                    f"L + accepted_position = {ids.shape[1] + n}: it {direction} "
                    "(crop_cache(self.target_cache, L + accepted_position))"
                )
    ### BEGIN HIDDEN TESTS
    if ctx.hidden:  # the grader's run (a check cell runs the student kit's tests, stripped of this)
        _one_pass_outside(ctx, method)
    ### END HIDDEN TESTS


### BEGIN HIDDEN TESTS
def _one_pass_outside(ctx, method: str, length: int = 384, margin: float = 1.5):
    """The pass count above is the child's, from a counter its code can patch. So the kernel is asked too: the
    child's CPU time (read from outside) for one call on a long text with a target that costs many passes of its
    own (`World.live`, no layer of it adds zero), against the grader's own single pass over the same positions. A
    second pass costs about as much again; the call's bookkeeping, next to nothing. What the call returns must be
    what that pass verifies: no layer can be skipped to save the time (`outside.same_pass`). Each try has its text."""

    texts, own = outside.random_texts(ctx.world.vocab, length), {}  # own: the grader's drafts and logits, per try

    def case(attempt: int) -> tuple[torch.Tensor, torch.Tensor]:  # a random text, the target's own 4 tokens after it
        if ("draft", attempt) not in own:
            own["draft", attempt] = greedy_tokens(ctx.world.live, texts(attempt), 4)
        return texts(attempt), torch.tensor([own["draft", attempt]])

    (ids, draft), warm = case(0), ctx.decoder(draft="live-other")  # untimed: the first passes of deep cost more
    warm.call(method, ids[:, :8].clone(), draft, torch.ones(1, 8, dtype=torch.long))
    results = []

    def child_seconds(attempt: int) -> float:
        ids, draft = case(attempt)
        decoder, before = ctx.decoder(draft="live-other"), ctx.child.cpu_seconds()  # in this order
        results.append((attempt, unpack(decoder.call(method, ids.clone(), draft, torch.ones_like(ids)), method)))
        return ctx.child.cpu_seconds() - before

    def own_seconds(attempt: int) -> float:  # one pass of the target over the text and draft; its logits are kept
        text = torch.cat(case(attempt), dim=1)
        return outside.own_seconds_keeping(own, attempt, lambda: ctx.world.live(input_ids=text).logits)

    ok, used, own_used = outside.within(child_seconds, outside.stopped(ctx.child, own_seconds), margin, 0.025)
    if not ok:
        raise Mistake(
            f"{method} on a {length}-token text took {used:.2f} s of CPU time, where one target pass over it takes "
            f"about {own_used:.2f} s (measured outside your process): it runs the target more than once. One forward "
            "pass must score every draft token and give the correction/bonus token"
        )
    for attempt, got in results:
        same, want = outside.same_pass(own[attempt], own["draft", attempt], got)
        if not same:
            raise Mistake(f"{method} on a {length}-token text: got {got}, where one pass of the target gives {want}")


### END HIDDEN TESTS


def verify_vectorized(ctx):
    check_verify(ctx, "verify_tokens_vectorized")


TESTS = (
    TestCase("init", "loads the target from a local folder, ready for inference", 2, init_target),
    TestCase("init", "loads the draft from a local folder, ready for inference", 2, init_draft),
    ### BEGIN HIDDEN TESTS
    TestCase("init", "the constructor loads both models and decodes", 1, init_constructor, hidden=True),
    TestCase("init", "the models land on the decoder's device", 1, init_device, hidden=True),
    ### END HIDDEN TESTS
    TestCase("draft", "drafts the draft model's greedy tokens, deterministically", 2, draft_greedy),
    TestCase("draft", "proposes exactly k tokens, also for k = 1", 1, draft_k),
    TestCase("draft", "reuses the draft's KV cache across rounds (never re-reads the text)", 2, draft_cache_reuse),
    TestCase("draft", "keeps drafting correctly after rejections (draft cache rolled back)", 1, draft_rounds),
    TestCase("verify", "accept_draft: all accepted -> k tokens plus the bonus token", 1, accept_all),
    TestCase("verify", "accept_draft: first mismatch -> accepted prefix plus the correction", 1, accept_mismatch),
    TestCase("verify", "verify_tokens_vectorized: one target pass, the right rows of logits", 3, verify_vectorized),
)
