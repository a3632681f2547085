"""Static KV caches, and CUDA graphs replayed over them (gpt-fast's recipe, with no compiler).

Why: in eager mode a GPU waits on Python. A one-token step of a 24-layer model launches hundreds of
small kernels, and each launch costs more than the kernel runs on a modern GPU, so a step costs about
the same for a 160m draft as for a 1.4b target (c near 1: speculation cannot pay). A CUDA graph
records those launches once and replays them with one call; that needs fixed shapes and fixed
addresses, which is what a static cache gives. Rollback then moves a position: nothing is copied.

Three small pieces:

- `StaticKV`: transformers' ``StaticCache`` whose layers count their length in ONE device tensor
  (``lengths``; every layer writes at its own entry), plus the host's copy of it (``position``). Rolling
  back is one ``fill_`` of that tensor; the rows beyond stay in memory, hidden by the causal mask,
  and are overwritten by the next pass. It answers `cache.cache_length` and `cache.rollback`.
- `StaticForward`: calls like the model (``input_ids``, ``cache``, ``logits_to_keep``) over a `StaticKV`.
  A pass of ``n <= GRAPH_TOKENS`` tokens after the prefill runs a *step* of its own size: the tokens
  go into the step's static input buffer, then the step runs. The prefill (and longer passes) run
  eagerly on the same cache.
- The step: on CUDA (``graphs=True``) a ``torch.cuda.CUDAGraph`` captured on first use, then replayed;
  anywhere else (``graphs=False``, e.g. on a CPU) "replay" calls the same eager forward on the same static
  buffers. So the positions, the rollback and the bookkeeping are the same code on a CPU, where the tests run.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from types import SimpleNamespace

import torch

from specdec_helpers.core.cache import cache_kwargs, new_static_cache
from specdec_helpers.core.drafters import ModelDrafter

GRAPH_TOKENS = 16  # passes up to this many tokens run as (captured) steps; longer ones (prefills) eagerly
BLOCK = 256  # cache capacities are multiples of this, so texts of different lengths share one cache
_FORWARDS: "weakref.WeakKeyDictionary[torch.nn.Module, StaticForward]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class StaticKV:
    """A ``StaticCache`` of ``capacity`` positions whose length is one host int and one device tensor."""

    def __init__(self, model, capacity: int):
        from transformers.cache_utils import StaticLayer

        self.cache = new_static_cache(model, capacity)
        if any(type(layer) is not StaticLayer for layer in self.cache.layers):
            raise NotImplementedError(f"{type(model).__name__} has sliding-window or recurrent cache layers: a "
                                      "static cache here rolls back plain full-attention layers only; use graphs=False")
        self.capacity, self.position, self.in_use = capacity, 0, False
        # One counter per layer, all views of one tensor: a rollback is a single fill, with no host read.
        self.lengths = torch.zeros(len(self.cache.layers), dtype=torch.long, device=model.device)
        for i, layer in enumerate(self.cache.layers):
            layer.cumulative_length = self.lengths[i]
        self.steps: dict[int, SimpleNamespace] = {}  # tokens per pass -> its step (input buffer, logits, run)
        self.pool = None  # the CUDA graphs' shared memory pool

    def get_seq_length(self) -> int:
        """Positions held (the host's count: reading it never waits for the device)."""
        return self.position

    def rollback(self, n_kept: int) -> None:
        """Keep the first ``n_kept`` positions: move the position back (the rows beyond are overwritten later)."""
        if not 0 <= n_kept <= self.position:
            raise ValueError(f"cannot roll a static cache of {self.position} positions back to {n_kept}")
        if n_kept != self.position:
            self.lengths.fill_(n_kept)
            self.position = n_kept

    def crop(self, tokens_to_remove: int) -> None:
        """`cache.rollback` speaks to caches in transformers 5.x's words: a negative count drops that many."""
        self.rollback(self.position + min(int(tokens_to_remove), 0))


class StaticForward:
    """The model's forward over a `StaticKV`, in fixed-size steps (CUDA graphs with ``graphs=True``).

    Built once per model and mode by `static_forward`. It keeps the caches it made (and their graphs)
    for the next decode: `new_cache` hands out a free one, `release` takes it back.
    """

    def __init__(self, model, graphs: bool):
        if graphs and model.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a model on a CUDA device, not {model.device}; use graphs=False")
        # A weak reference: `_FORWARDS` keeps this as long as the model lives, and must not keep the model alive.
        self._model = weakref.ref(model)
        self.config, self.device, self.graphs = model.config, model.device, graphs
        self.caches: list[StaticKV] = []
        self.captured = 0  # graphs captured so far (the benchmark reports it)

    @property
    def model(self):
        return self._model()

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def new_cache(self, max_length: int) -> StaticKV:
        """An empty cache of at least ``max_length`` positions: a free one made before (graphs and all), else new."""
        capacity = -(-max(int(max_length), 1) // BLOCK) * BLOCK
        with _LOCK:
            free = [kv for kv in self.caches if not kv.in_use and kv.capacity >= capacity]
            if free:
                kv = min(free, key=lambda kv: kv.capacity)
            else:  # drop the smaller free caches (their memory), keep those in use
                self.caches = [kv for kv in self.caches if kv.in_use or kv.capacity > capacity]
                kv = StaticKV(self.model, capacity)
                self.caches.append(kv)
            kv.in_use = True
        kv.rollback(0)
        return kv

    def release(self, kv: StaticKV) -> None:
        kv.in_use = False

    def _eager(self, input_ids, kv: StaticKV):
        return self.model(input_ids=input_ids, **cache_kwargs(self.model, kv.cache), use_cache=True,
                          logits_to_keep=0).logits

    @torch.inference_mode()
    def __call__(self, input_ids, cache: StaticKV, use_cache: bool = True, logits_to_keep: int = 0,
                 output_hidden_states: bool = False):
        if output_hidden_states:
            raise ValueError("a static-cache forward returns logits only: drafts that read the target's features "
                             "(eagle) need graphs=False")
        n = input_ids.shape[1]
        if cache.position + n > cache.capacity:
            raise ValueError(f"{n} more tokens overflow a static cache of {cache.capacity} positions "
                             f"({cache.position} held); make it with new_cache(max_length) large enough")
        if cache.position == 0 or n > GRAPH_TOKENS:  # the prefill: once per text, any length
            logits = self._eager(input_ids, cache)
        else:
            step = cache.steps.get(n) or self._make_step(cache, n)
            step.tokens.copy_(input_ids)
            step.run()
            logits = step.logits
        cache.position += n
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)

    def _make_step(self, kv: StaticKV, n: int) -> SimpleNamespace:
        """The step for passes of ``n`` tokens over ``kv``: a captured graph on CUDA, the eager forward elsewhere."""
        step = SimpleNamespace(tokens=torch.zeros((1, n), dtype=torch.long, device=self.device), logits=None)

        def eager():
            step.logits = self._eager(step.tokens, kv)

        step.run = eager
        if self.graphs:
            try:
                step.run = self._capture(kv, step)
                self.captured += 1
            except RuntimeError as error:  # e.g. a model that reads the device during its forward
                warnings.warn(f"CUDA graph capture of a {n}-token step of {type(self.model).__name__} failed "
                              f"({error}); running it eagerly over the static cache instead", stacklevel=3)
                self.graphs = False
        kv.steps[n] = step
        return step

    def _capture(self, kv: StaticKV, step: SimpleNamespace):
        """Capture one pass over ``step.tokens`` at the cache's current position; returns its replay.

        The pass reads its position from ``kv.lengths`` and advances it on the device, so one graph serves every
        position. Warm-up passes (on a side stream, as CUDA graphs require) write rows beyond the position:
        those rows are masked and overwritten, like a rejected draft's.
        """
        held = kv.position
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._eager(step.tokens, kv)
                kv.lengths.fill_(held)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if kv.pool is None:
            kv.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=kv.pool):
            step.logits = self._eager(step.tokens, kv)
        kv.lengths.fill_(held)  # capture records the pass; it does not run it
        return graph.replay


class StaticModelDrafter(ModelDrafter):
    """A `ModelDrafter` whose passes run as steps over a static cache: its one-token step is the draft's graph.

    Made per decode by `static_pair` around the user's drafter (same model, vocabulary limit and threshold);
    its rollback is `StaticKV.rollback`, through the same `update` as every model drafter's.
    """

    def __init__(self, base: ModelDrafter, forward: StaticForward, kv: StaticKV):
        self.kv = kv
        super().__init__(base.model, base.vocab_limit, base.confidence_threshold)
        self.label, self.forward = base.label, forward

    def new_cache(self):
        self.kv.rollback(0)
        return self.kv


@contextlib.contextmanager
def static_pair(target, drafter, max_length: int, graphs: bool):
    """``(target forward, its cache, drafter)`` over static caches of ``max_length`` positions, given back after.

    A plain `ModelDrafter` drafts over a static cache of its own; other drafters (n-gram lookups, hybrids) come
    back as they are. The target and the draft may be one model: each gets its own cache (and graphs).
    """
    forward = static_forward(target, graphs)
    taken = [(forward, forward.new_cache(max_length))]
    try:
        if type(drafter) is ModelDrafter:
            draft_forward = static_forward(drafter.model, graphs)
            taken.append((draft_forward, draft_forward.new_cache(max_length)))
            drafter = StaticModelDrafter(drafter, draft_forward, taken[-1][1])
        yield forward, taken[0][1], drafter
    finally:
        for owner, kv in taken:
            owner.release(kv)


def static_forward(model, graphs: bool) -> StaticForward:
    """The model's `StaticForward` for ``graphs`` (made on first use, kept as long as the model lives)."""
    with _LOCK:
        forwards = _FORWARDS.setdefault(model, {})
        if graphs not in forwards:
            forwards[graphs] = StaticForward(model, graphs)
        return forwards[graphs]


def graphs_by_default(target, use_cache: bool, compile: bool, drafter) -> bool:
    """``graphs=None``: on where a step replays faster than it launches (a CUDA device), for the paths graphs serve."""
    return (target.device.type == "cuda" and use_cache and not compile and not drafter.needs_target_features
            and not getattr(target, "hf_device_map", None) and plain_static_layers(target)
            and (drafter.model is None or plain_static_layers(drafter.model)))


def plain_static_layers(model) -> bool:
    """Whether ``model``'s static cache has only plain full-attention layers (no sliding window, no recurrent state):
    the layers a position can roll back. (Building the cache allocates nothing: its layers allocate on first use.)"""
    from transformers.cache_utils import StaticLayer

    try:
        return all(type(layer) is StaticLayer for layer in new_static_cache(model, 1).layers)
    except Exception:  # a model transformers cannot give a static cache
        return False
