"""What the assignment's tests are made of: a test as data (`TestCase`), the remote decoder a test
drives (`Remote`: the student's decoder living in a child process), forward-pass counting
(`Counted`), the context a test gets (`Ctx`) and the comparisons every test shares.

Tests are listed, not registered: `suite.TESTS` and `suite_decode.TESTS` are plain tuples of
`TestCase`, and the grader reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from specdec_helpers.assignment.testing.wire import encode
from specdec_helpers.assignment.testing.wire import StudentError
from specdec_helpers.assignment.testing.world import Mistake, World, world

EXERCISES = ("init", "draft", "verify", "decode")


@dataclass(frozen=True)
class TestCase:
    """One test of ``part``: ``body(ctx)`` raises `Mistake` (feedback) or returns (passed); it earns
    ``weight`` shares of the part's points (0: feedback, flagged in the gradebook when it fails). Hidden ones
    are shown after the due date and are left out of the student kit (they sit inside the hidden-test markers)."""

    part: str
    name: str
    weight: int
    body: Callable
    hidden: bool = False

    @property
    def id(self) -> str:
        return f"{self.part}.{self.body.__name__}"


class Remote:
    """A decoder living in the child: calling a method sends a request; forward passes are counted
    there (hooks on the models) and summed here in ``counters``."""

    def __init__(self, child, handle: int, timeout: float):
        self._child, self._handle, self._timeout = child, handle, timeout
        self.counters = {"target_calls": 0, "target_positions": 0, "draft_positions": 0, "draft_calls": 0}

    def call(self, method: str, *args, **kwargs):
        try:
            answer = self._child.request(
                "call",
                timeout=self._timeout,
                handle=self._handle,
                method=method,
                args=encode(list(args)),
                kwargs=encode(kwargs),
                probe=True,
            )
        except StudentError as error:
            if error.kind == "NotImplementedError":
                raise NotImplementedError(method) from None
            if error.kind == "Mistake":
                raise Mistake(error.message) from None
            raise
        for key in self.counters:
            self.counters[key] += answer[key]
        return answer["result"]

    def watched(self, method: str, *args, **kwargs) -> tuple[object, list[str]]:
        """``(result, faults)``: the call run with a simulated GPU (`devices.DeviceWatch`)."""
        answer = self._child.request(
            "call",
            timeout=self._timeout,
            handle=self._handle,
            method=method,
            args=encode(list(args)),
            kwargs=encode(kwargs),
            watch=True,
        )
        return answer["result"], answer["device_faults"]

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
    """What a test gets: the child running the student's code and the tiny world (``seed``). ``hidden``: the grader's
    run, which also runs the hidden parts of visible tests; a check cell's (False) runs what the student kit holds,
    where release stripped them."""

    def __init__(self, child, seed: int = 0, timeout: float = 60, hidden: bool = True):
        self.child, self.seed, self.timeout, self.hidden = child, seed, timeout, hidden
        self.world: World = world(seed)

    def decoder(self, draft: str = "draft", eos=None) -> Remote:
        handle = self.child.request("new", timeout=self.timeout, world=self.seed, draft=draft, eos=eos)
        return Remote(self.child, handle, self.timeout)

    def decode(self, decoder: Remote, ids, max_tokens, k=4, use_cache=True) -> list[int]:
        """New tokens of ``decoder.generate_ids`` as a list."""
        out = decoder.generate_ids(ids.clone(), max_tokens, k, use_cache=use_cache)
        if not isinstance(out, torch.Tensor) or out.dim() != 2:
            raise Mistake(
                f"generate_ids must return the token ids [1, prompt + new] as a tensor, got "
                f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))}"
            )
        if not torch.equal(out[:, : ids.shape[1]].cpu(), ids):
            raise Mistake("generate_ids must return the prompt followed by the new tokens; the prompt part changed")
        return out[0, ids.shape[1] :].tolist()


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def expect_greedy(got: list[int], want: list[int], what: str) -> None:
    if got != want:
        i = first_difference(got, want)
        raise Mistake(
            f"{what}: the output differs from the target's own greedy decoding at new token {i} "
            f"(got {got[i : i + 4]}, expected {want[i : i + 4]}; {len(got)} vs {len(want)} new tokens). "
            "Speculative decoding must reproduce the target's greedy output exactly."
        )


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
        raise Mistake(
            f"{where} must return (accepted_tokens, accepted_position), got {type(result).__name__}"
        ) from None


def logits_for(rows: list[int], seed: int, vocab: int) -> torch.Tensor:
    """Synthetic logits ``[len(rows), vocab]`` whose argmax in row ``j`` is ``rows[j]``."""
    logits = torch.randn(len(rows), vocab, generator=torch.Generator().manual_seed(seed))
    logits[torch.arange(len(rows)), rows] = 10.0
    return logits
