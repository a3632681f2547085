"""The decode part's tests (``verify_tokens_cached`` and ``generate_ids``), listed in `TESTS` at the end."""

from __future__ import annotations


import torch

from specdec_helpers.assignment.testing import outside
from specdec_helpers.assignment.testing.cases import Counted, TestCase, expect_greedy, unpack
from specdec_helpers.assignment.testing.devices import advice
from specdec_helpers.assignment.testing.replay import check_rounds
from specdec_helpers.assignment.testing.suite import check_verify
from specdec_helpers.assignment.testing.world import Mistake, greedy_tokens


def verify_cached(ctx):
    check_verify(ctx, "verify_tokens_cached")


# =========================================================================== decode (10)
EARLIER = " (if the verification or drafting tests fail too, fix those first: the loop calls them)"


def decode_cached(ctx):
    for i in (0, 1):
        decoder = ctx.decoder()
        got = ctx.decode(decoder, ctx.world.prompts[i], 20)
        expect_greedy(got, ctx.world.greedy("target", i)[:20], f"generate_ids(prompt {i}, use_cache=True)" + EARLIER)
        _verified_with(decoder, "verify_tokens_cached", True)
    ### BEGIN HIDDEN TESTS
    if ctx.hidden:  # the grader's run (a check cell runs the student kit's tests, stripped of this)
        _rounds_real_outside(ctx)
    ### END HIDDEN TESTS


def _verified_with(decoder, method: str, use_cache: bool):
    """Each round verified through ``method``: the one ``use_cache`` asks for."""
    used = sorted({entry[4] for entry in decoder.log if entry[0] == "verify"} - {method})
    if used:
        raise Mistake(
            f"generate_ids(use_cache={use_cache}) verified with {used[0]}: use_cache is ignored; verify "
            f"with self.{method} when use_cache is {use_cache}"
        )


def decode_vectorized(ctx):
    decoder = ctx.decoder()
    got = ctx.decode(decoder, ctx.world.prompts[1], 20, use_cache=False)
    expect_greedy(got, ctx.world.greedy("target", 1)[:20], "generate_ids(use_cache=False)" + EARLIER)
    _verified_with(decoder, "verify_tokens_vectorized", False)


def decode_cache_reused(ctx):
    decoder = ctx.decoder()
    ids = ctx.world.prompts[2]
    with Counted(decoder) as p:
        new = len(ctx.decode(decoder, ids, 24))
    budget = ids.shape[1] + new + p.target_calls * (4 + 1)
    if p.target_positions > budget:
        raise Mistake(
            f"the target read {p.target_positions} positions in {p.target_calls} passes, at most {budget} "
            "expected with a KV cache: the target cache is passed around but never reused, so the target "
            "re-reads the whole text every round. Keep self.target_cache across rounds and feed only "
            "input_ids[:, cache_length(cache):] plus the draft"
        )
    ### BEGIN HIDDEN TESTS
    if ctx.hidden:  # the grader's run (a check cell runs the student kit's tests, stripped of this)
        _cache_reused_outside(ctx)
    ### END HIDDEN TESTS


### BEGIN HIDDEN TESTS
def _rounds_real_outside(ctx, new: int = 32, ratio: float = 1.6):
    """The rounds the grader replays are recorded in the student's process, where code can forge them (plain
    greedy decoding reported as rounds of accepted drafts). So the kernel is asked too, and the decoder is
    measured against itself: with a target that costs many draft passes (`World.deep`, the same logits) and a
    draft that always agrees (so a draft cache left stale after a rejection changes nothing: that costs the
    drafting points only), k = 1 runs the target four times as often as k = 8, and costs over twice the CPU
    time. Plain greedy decoding runs the target once per token whatever k is: the same time for both."""
    prompt = ctx.world.prompts[2]
    ctx.decode(ctx.decoder(draft="deep"), prompt, 4, k=8)  # untimed: the child's first passes of deep cost more
    for _ in range(3):  # load moves CPU seconds (an honest decoder once showed 1.48x in CI): up to three tries
        used, texts = {}, {}
        for k in (8, 1):
            decoder = ctx.decoder(draft="deep")
            before = ctx.child.cpu_seconds()
            texts[k] = ctx.decode(decoder, prompt, new, k=k)
            used[k] = ctx.child.cpu_seconds() - before
        for k, tokens in texts.items():  # deep's logits are the target's, bit for bit
            expect_greedy(tokens, ctx.world.greedy("target", 2, new), f"generate_ids(k = {k})" + EARLIER)
        if used[1] >= ratio * used[8]:
            return
    raise Mistake(
        f"with a draft that always agrees, decoding {new} tokens took {used[1]:.2f} s of CPU time with "
        f"k = 1 and {used[8]:.2f} s with k = 8 (measured outside your process), where speculative "
        "decoding takes over twice as long with k = 1 (it runs the target four times as often): "
        "the target runs about once per token whatever k is. Each round must run the target once, in "
        "the verification call, on the whole draft; the rounds your decoder reports are not the ones it "
        "ran"
    )


def _cache_reused_outside(ctx, length: int = 384, new: int = 12, margin: float = 2.5):
    """The position counter above runs in the student's process, where code can patch it (`Probe`). So the verdict
    is the kernel's: the child's CPU time (read from outside) to decode ``new`` tokens after a long prompt, with a
    target that costs many draft passes (`World.live`) and a draft that is nearly always rejected
    (about a round a token), against the grader's own cached decoding of the same. A target that re-reads the text
    pays a deep prefill every round: several times the grader's time. A draft that re-reads it, even with no cache
    at all, adds less than one deep prefill over the whole decode, so it passes here whatever the counters say: the
    drafting tests take those points. On `World.live` the text must be the grader's: no layer can be skipped."""
    prompt = outside.random_texts(ctx.world.vocab, length)
    slow = (
        f"decoding {new} tokens after a {length}-token prompt took {{used:.2f}} s of CPU time, where a decoder that "
        "reuses its target cache takes about {own:.2f} s (measured outside your process): the target re-reads the "
        "whole text every round. Keep self.target_cache across rounds and feed only input_ids[:, "
        "cache_length(cache):] plus the draft"
    )
    _live_against_own(ctx, prompt, new, margin, 0.2, ctx.world.prompts[2], slow)


def _live_against_own(ctx, prompt, new: int, margin: float, slack: float, warm_prompt, mistake) -> None:
    """The child decodes ``new`` tokens after ``prompt(i)`` on try ``i`` with `live` and `other` (after an untimed
    warm-up on ``warm_prompt``: deep's first passes cost more) within ``margin`` times the grader's own CPU time plus
    ``slack`` (`outside.within`; else ``mistake`` with its ``{used}`` and ``{own}`` filled in), and every text it
    returned is the grader's own."""
    ctx.decode(ctx.decoder(draft="live-other"), warm_prompt, 3)
    texts, own = {}, {}  # per try: the child's texts, the grader's own
    ok, used, own_used = outside.within(
        lambda i: _child_seconds(ctx, prompt(i), new, texts.setdefault(i, [])),
        outside.stopped(ctx.child, lambda i: _own_cached_seconds(ctx.world, prompt(i), new, own, i)),
        margin,
        slack,
    )
    if not ok:
        raise Mistake(mistake.format(used=used, own=own_used))
    for i, got in texts.items():  # against the grader's own decoding's text
        outside.expect_own_texts(ctx.world.live, prompt(i), got, own[i], "generate_ids with the deep target" + EARLIER)


def _child_seconds(ctx, prompt, new: int, texts: list) -> float:
    """The child's CPU time, read from outside the student's process (the kernel's accounting), for a fresh decoder
    of `live` with `other` to decode ``new`` tokens after ``prompt``; its text goes to ``texts``."""
    decoder = ctx.decoder(draft="live-other")
    before = ctx.child.cpu_seconds()
    texts.append(ctx.decode(decoder, prompt, new))
    return ctx.child.cpu_seconds() - before


def _own_cached_seconds(world, prompt, new: int, store: dict, key) -> float:
    """The grader's CPU time for the kit's cached decoding of ``prompt`` on `live` with `other`, k = 4
    (`outside.own_seconds_keeping`); the first decoding's text is kept in ``store[key]``."""
    from specdec_helpers.core.decode import speculative_decode

    def run():
        out = speculative_decode(world.live, world.other, prompt, max_new_tokens=new, num_speculative_tokens=4)
        return out.new_tokens.tolist()

    return outside.own_seconds_keeping(store, key, run)


### END HIDDEN TESTS


def decode_max_tokens(ctx):
    for max_tokens in (1, 6, 13):
        got = ctx.decode(ctx.decoder(draft="same"), ctx.world.prompts[0], max_tokens)
        if len(got) != max_tokens:
            raise Mistake(
                f"generate_ids produced {len(got)} new tokens for max_tokens={max_tokens}: draft at most "
                "max_tokens - generated - 1 tokens near the end (the target adds one), so the last round "
                "lands exactly on the limit"
            )


def _eos_case(world, n: int):
    """``(prompt, greedy tokens, i)``: token ``i`` of the target's greedy text is the first of its kind, so it
    can serve as EOS, and 1 <= i < n - 2, so a round can carry it as a draft token with more after it, or as
    the bonus token. Preferred: from the 6th token on and not in the prompt (a decoder that searches the
    prompt fails `decode_eos_in_prompt`, not this test)."""
    for start, exclude_prompt in ((5, True), (1, False)):
        for index in (1, 0, 2):
            prompt, g = world.prompts[index], world.greedy("target", index, n)
            banned = prompt[0].tolist() if exclude_prompt else []
            i = next((i for i in range(start, n - 2) if g[i] not in g[:i] and g[i] not in banned), None)
            if i is not None:
                return prompt, g, i
    raise RuntimeError(f"grader: in world {world.seed} every prompt's greedy text repeats one token; grade again")


def decode_eos(ctx):
    n = 20  # the EOS comes within the n tokens decoded: else a correct decoder reaches max_tokens first
    prompt, g, i = _eos_case(ctx.world, n)
    # the drafts that always agree make the rounds certain: with k = i + 2 the first round drafts the EOS and
    # two tokens past it; with k = i the EOS is that round's bonus token. The unrelated draft mostly makes
    # it the target's correction.
    for draft, k, how in (
        ("same", i + 2, "as an accepted draft token"),
        ("same", i, "as the bonus token"),
        ("other", 4, "as the target's correction"),
    ):
        got = ctx.decode(ctx.decoder(draft=draft, eos=g[i]), prompt, n, k=k)
        if got != g[: i + 1]:
            if got[: i + 1] == g[: i + 1]:
                raise Mistake(
                    f"the target generated EOS as new token {i} ({how}), but generate_ids kept "
                    f"{len(got) - i - 1} more tokens after it: look for EOS among ALL the tokens a round "
                    "appends (the target's correction/bonus token included), cut right after it and stop"
                )
            expect_greedy(got, g[: i + 1], f"generate_ids with eos_token_id={g[i]}" + EARLIER)


def decode_one_pass(ctx):
    # the unrelated draft too: the usual one may agree with the target all the way, and never be rejected
    for use_cache, draft in ((True, "draft"), (False, "draft"), (True, "other")):
        decoder = ctx.decoder(draft=draft)
        with Counted(decoder) as p:
            ctx.decode(decoder, ctx.world.prompts[1], 20, use_cache=use_cache)
        rounds = sum(1 for entry in decoder.log if entry[0] == "verify")
        if not rounds:
            raise Mistake(
                "generate_ids never called self.verify_tokens_cached / verify_tokens_vectorized; verify "
                "each round through them"
            )
        if p.target_calls != rounds:
            raise Mistake(
                f"generate_ids ran the target {p.target_calls} times in {rounds} rounds (use_cache="
                f"{use_cache}): each round needs exactly ONE target pass. Verification already returns the "
                "correction or bonus token; do not run the target again after a rejection (PA3 did)"
            )
    ### BEGIN HIDDEN TESTS
    if ctx.hidden:  # the grader's run (a check cell runs the student kit's tests, stripped of this)
        _one_pass_outside(ctx)
    ### END HIDDEN TESTS


### BEGIN HIDDEN TESTS
def _one_pass_outside(ctx, new: int = 16, margin: float = 1.5):
    """The pass counter above runs in the student's process, where code can patch it. So the kernel is asked too:
    the child's CPU time (read from outside) to decode ``new`` tokens after a short prompt with the deep target (a
    pass costs many draft passes, `World.live`) and a draft that is nearly always rejected (a round, one target pass,
    a token, whatever k or the round structure), against the grader's own decoding of the same. A second pass after
    each rejection (PA3's) costs about twice as much; a target that re-reads the short text, little more (the cache
    test takes that)."""
    short = ctx.world.prompts[0]
    slow = (
        f"decoding {new} tokens with a draft that is nearly always rejected took {{used:.2f}} s of CPU time, where "
        "one target pass a round takes about {own:.2f} s (measured outside your process): the target runs again "
        "after a rejection. Verification already returns the correction token; each round needs exactly ONE target "
        "pass"
    )
    _live_against_own(ctx, outside.random_texts(ctx.world.vocab, short.shape[1]), new, margin, 0.05, short, slow)


### END HIDDEN TESTS


def decode_stats(ctx):
    prompt, g, i = _eos_case(ctx.world, 20)
    # the third: a draft that always agrees and k = i + 2, so the round that ends at EOS accepted draft tokens
    # past it: they were accepted by verification and count, though the text is cut after the EOS
    for eos, ids, what, draft, k in (
        (None, ctx.world.prompts[1], "", "draft", 4),
        (g[i], prompt, f" with eos_token_id={g[i]}", "draft", 4),
        (g[i], prompt, f" with eos_token_id={g[i]} inside the accepted draft", "same", i + 2),
    ):
        decoder = ctx.decoder(draft=draft, eos=eos)
        ctx.decode(decoder, ids, 20, k=k)
        log = [entry for entry in decoder.log if entry[0] == "verify"]
        proposed = sum(entry[2] for entry in log)
        accepted = sum(unpack(entry[3], "verify")[1] for entry in log)
        last = unpack(log[-1][3], "verify")[1] if log else 0
        stats = decoder.stats
        if (
            eos is not None
            and log
            and (stats.get("proposed"), stats.get("accepted")) == (proposed - log[-1][2], accepted - last)
        ):
            raise Mistake(
                f"stats{what} miss the round that ended at EOS: stats['proposed'] = {stats.get('proposed')}, "
                f"but {proposed} draft tokens were verified. Count each round's draft tokens right after "
                "verifying them, before stopping at EOS"
            )
        if stats.get("accepted") != accepted:
            extra = (
                " (it counts the target's correction/bonus tokens as accepted draft tokens)"
                if stats.get("accepted") == accepted + len(log)
                else ""
            )
            if draft == "same" and eos is not None and not extra:
                extra = (
                    " (it counts the tokens kept after the cut at EOS: the round's accepted draft tokens are its "
                    "accepted_position, whatever the cut keeps)"
                )
            raise Mistake(
                f"stats['accepted']{what} = {stats.get('accepted')} but verification accepted {accepted} "
                f"draft tokens{extra}: only draft tokens that matched count; the token the target adds each "
                "round is not a draft token, and counting it inflates the acceptance rate"
            )
        if stats.get("proposed") != proposed:
            raise Mistake(
                f"stats['proposed']{what} = {stats.get('proposed')} but {proposed} draft tokens were verified"
            )


def decode_rounds(ctx):
    """The rounds the grader observes (`replay.ROUND_RULE`), as in the timed runs: k tokens drafted, one
    verification and one target pass per round, new tokens kept on the decoder's device."""
    for draft, index, max_tokens, k in (("same", 0, 11, 4), ("draft", 1, 20, 4), ("other", 2, 13, 3)):
        decoder = ctx.decoder(draft=draft)
        got = ctx.decode(decoder, ctx.world.prompts[index], max_tokens, k=k)
        expect_greedy(got, ctx.world.greedy("target", index)[:max_tokens], "generate_ids" + EARLIER)
        log = decoder.log
        rounds = check_rounds(ctx.world.variant(draft), ctx.world.prompts[index], got, log, k, max_tokens)
        if rounds.problem:
            raise Mistake(
                f"the grader cannot follow this decoder's rounds ({draft} draft, k = {k}, max_tokens = "
                f"{max_tokens}): {rounds.problem}"
            )
        moves = next((entry[3] for entry in log if entry[0] == "generate"), 0)
        if rounds.rounds >= 2 and moves >= rounds.rounds:
            raise Mistake(
                f"generate_ids moved tensors to the CPU {moves} times in {rounds.rounds} rounds (.cpu(), "
                ".numpy() or .to('cpu')): it moves the new tokens to the CPU every round, and on a GPU each "
                "move waits for the device. Build the new tokens on input_ids.device and keep the text there"
            )


def decode_device(ctx):
    """Every tensor on the device of the tensors it meets, on a CPU with a simulated GPU (`devices`). No points: the
    watch runs in the student's process (`grading`'s trust model); the gradebook flags a failure instead."""
    prompt, g, i = _eos_case(ctx.world, 20)
    for draft, use_cache in (("other", True), ("draft", False)):
        decoder = ctx.decoder(draft=draft, eos=g[i])
        out, faults = decoder.watched("generate_ids", prompt.clone(), 20, 4, use_cache=use_cache)
        if faults:
            raise Mistake(f"generate_ids(use_cache={use_cache}) would crash on a GPU: {advice(faults)}")
        got = out[0, prompt.shape[1] :].tolist() if isinstance(out, torch.Tensor) and out.dim() == 2 else []
        expect_greedy(got, g[: i + 1], f"generate_ids(use_cache={use_cache}) with eos_token_id={g[i]}" + EARLIER)


### BEGIN HIDDEN TESTS
def decode_edges(ctx):
    g = ctx.world.greedy("target", 2)
    for name, draft, k in (
        ("always agreeing", "same", 4),
        ("unrelated", "other", 4),
        ("k = 1", "draft", 1),
        ("k = 8", "draft", 8),
    ):
        got = ctx.decode(ctx.decoder(draft=draft), ctx.world.prompts[2], 17, k=k)
        expect_greedy(got, g[:17], f"generate_ids with a {name} draft" if k == 4 else f"generate_ids, {name}")


def decode_eos_in_prompt(ctx):
    base = ctx.world.prompts[0]
    for eos in range(1, ctx.world.vocab):
        prompt = torch.cat([base, torch.tensor([[eos, 3]])], dim=1)
        want = greedy_tokens(ctx.world.target, prompt, 16)
        if eos not in want:
            break
    got = ctx.decode(ctx.decoder(eos=eos), prompt, 16)
    if len(got) < 16 and eos not in got:
        raise Mistake(
            f"generate_ids stopped after {len(got)} of 16 new tokens although the target never generated "
            f"EOS: the prompt contains the EOS id ({eos}); look for EOS only among the new tokens"
        )
    expect_greedy(got, want, "generate_ids with an EOS id in the prompt")


### END HIDDEN TESTS


TESTS = (
    TestCase("decode", "verify_tokens_cached: one pass, cache rolled back to the kept text", 2, verify_cached),
    TestCase("decode", "equals the target's greedy output (KV cache)", 2, decode_cached),
    TestCase("decode", "equals the target's greedy output (no cache)", 1, decode_vectorized),
    TestCase("decode", "the target's KV cache is reused across rounds", 1, decode_cache_reused),
    TestCase("decode", "never exceeds max_tokens", 1, decode_max_tokens),
    TestCase(
        "decode", "stops right after a generated EOS token, also when the target's own token is the EOS", 1, decode_eos
    ),
    TestCase("decode", "one target pass per round", 1, decode_one_pass),
    TestCase("decode", "counts proposed and accepted draft tokens correctly", 1, decode_stats),
    TestCase(
        "decode", "rounds the grader can follow: k drafted, verified once, tokens kept on the device", 1, decode_rounds
    ),
    TestCase("decode", "builds every tensor on the models' device (simulated GPU; no points)", 0, decode_device),
    ### BEGIN HIDDEN TESTS
    TestCase(
        "decode", "equals greedy with drafts that always / never agree, k = 1 and 8", 2, decode_edges, hidden=True
    ),
    TestCase("decode", "an EOS id inside the prompt does not stop decoding", 1, decode_eos_in_prompt, hidden=True),
    ### END HIDDEN TESTS
)
