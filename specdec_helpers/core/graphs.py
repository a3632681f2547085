"""Fixed-size steps over the kit's static cache, replayed from CUDA graphs (gpt-fast's recipe, with no compiler).

Why: in eager mode a GPU waits on Python. A one-token step of a 24-layer model launches hundreds of small kernels,
and each launch costs more than the kernel runs on a modern GPU, so a step costs about the same for a 160m draft as
for a 1.4b target (c near 1: speculation cannot pay). A CUDA graph records those launches once and replays them with
one call; that needs fixed shapes and fixed addresses, which the static cache (`lean.StaticKV`) gives.

`StaticForward` is the forward protocol (``forward(input_ids, cache)``, ``new_cache(n)``) over a `StaticKV`. A pass of
``n <= GRAPH_TOKENS`` tokens after the prefill runs n's *step*: the tokens go into the step's input buffer, the step
replays, and its output buffer holds the logits until the step's next replay. The prefill and longer passes run
eagerly on the same cache. On a CPU the steps replay an emulated graph (`_Emulated`: eager, written into the first
run's buffers), so the tests there run the same bookkeeping as a GPU.

A capture must never hurt the process (a failed capture once left the capture stream current, and every later CUDA
random call raised):
- a family whose step reads the device on the host (`capture_rehearsal.HOST_READING_FAMILIES`, found on the CPU) runs
  eagerly by rule, and every step's first warm-up runs under the same spy, on the real device, before it is captured;
- `prepare` captures every step a decode may use before its timing starts; nothing is captured during a pass;
- the first `prepare` per (dtype, device) replays each step against the same pass run eagerly, bitwise, else the
  model runs eagerly, with a warning that names it;
- a capture that fails anyway restores the stream and the random state and drops the graphs and their pool.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from types import SimpleNamespace

import torch

from specdec_helpers.core.cache import BLOCK, cache_kwargs
from specdec_helpers.core.lean import StaticKV
from specdec_helpers.core.capture_rehearsal import HOST_READING_FAMILIES, host_reads

GRAPH_TOKENS = 16  # passes up to this many tokens run as (captured) steps; longer ones (prefills) eagerly
MAX_K = GRAPH_TOKENS - 1  # draft tokens a round may verify while graphs are on (k + 1 tokens a pass)
CHECK_PREFILL = 9  # the self-check's prefill, before its passes
_FORWARDS: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class CaptureRefused(RuntimeError):
    """A step was not captured: it reads the device on the host, or its capture failed."""


class StaticForward:
    """The model's forward over a `StaticKV`, in fixed-size steps: CUDA graphs (``graphs=True`` on a GPU), emulated
    graphs (``graphs=True`` elsewhere), or the eager pass (``graphs=False``).

    Built once per model and mode by `static_forward`. It keeps the caches it made (and their steps) for the next
    decode: `new_cache` hands out a free one, reset; `release` takes it back.
    """

    def __init__(self, model, graphs: bool):
        # A weak reference: `_FORWARDS` keeps this as long as the model lives, and must not keep the model alive.
        self._model = weakref.ref(model)
        self.config, self.graphs = model.config, graphs
        self.caches: list[StaticKV] = []
        self.captured = 0  # steps captured so far (the benchmarks report it)
        self.checked: set = set()  # (dtype, device) whose replays matched the eager passes
        self.eager_reason = None  # why this model's steps run eagerly although graphs were asked for
        family = getattr(model.config, "model_type", None)
        if graphs and family in HOST_READING_FAMILIES:
            self._go_eager(
                f"{family}'s step reads the device on the host (capture_rehearsal.HOST_READING_FAMILIES), "
                "which a CUDA graph cannot record",
                warn=False,
            )

    @property
    def model(self):
        return self._model()

    @property
    def device(self):
        return self.model.device

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def new_cache(self, max_length: int) -> StaticKV:
        """An empty cache of at least ``max_length`` positions: a free one made before (steps and all), else new.

        A cache made for another dtype or device is dropped (the model was cast or moved since), and a cache whose
        steps were recorded over weights that have moved since (``model.half().float()``, ``load_state_dict(...,
        assign=True)``) keeps its rows but records its steps again: a graph replays the addresses it recorded."""
        model = self.model
        capacity = -(-max(int(max_length), 1) // BLOCK) * BLOCK
        kind = (model.dtype, model.device)
        with _LOCK:
            self.caches = [kv for kv in self.caches if kv.in_use or kv.kind == kind]
            free = [kv for kv in self.caches if not kv.in_use and kv.capacity >= capacity]
            if free:
                kv = min(free, key=lambda kv: kv.capacity)
            else:  # drop the smaller free caches (their memory), keep those in use
                self.caches = [kv for kv in self.caches if kv.in_use or kv.capacity > capacity]
                kv = StaticKV(model, capacity)
                self.caches.append(kv)
            kv.in_use = True
        weights = _addresses(model)
        if kv.weights != weights:
            kv.steps.clear()
            kv.pool, kv.weights = None, weights
        kv.move_to(0)  # always: a pass that was interrupted may have left the counters anywhere
        return kv

    def release(self, kv: StaticKV) -> None:
        kv.in_use = False

    def prepare(self, kv: StaticKV, sizes) -> None:
        """Make the steps of every pass size in ``sizes`` (up to `GRAPH_TOKENS`) over ``kv`` now, before any timing;
        the first time per dtype and device, check their replays against eager passes."""
        sizes = sorted({int(n) for n in sizes if 0 < n <= GRAPH_TOKENS})
        if any(n not in kv.steps for n in sizes):
            # Steps are made after a prefill, as in a decode (at position 0 a step takes the prefill's path).
            kv.move_to(0)
            self._eager(torch.zeros((1, CHECK_PREFILL), dtype=torch.long, device=self.device), kv)
            kv.move_to(CHECK_PREFILL)
            for n in sizes:
                if n not in kv.steps:
                    self._make_step(kv, n)
        key = (self.model.dtype, self.device)
        if self.graphs and key not in self.checked and sizes:
            self._self_check(kv, sizes)
            self.checked.add(key)
        kv.move_to(0)

    def _eager(self, input_ids, kv: StaticKV):
        return self.model(input_ids=input_ids, **cache_kwargs(self.model, kv), use_cache=True, logits_to_keep=0).logits

    @torch.inference_mode()
    def __call__(
        self,
        input_ids,
        cache: StaticKV,
        use_cache: bool = True,
        logits_to_keep: int = 0,
        output_hidden_states: bool = False,
    ):
        if output_hidden_states:
            raise ValueError(
                "a static-cache forward returns logits only: drafts that read the target's features "
                "(eagle) need graphs=False"
            )
        n, held = input_ids.shape[1], cache.position
        if held + n > cache.capacity:
            raise ValueError(
                f"{n} more tokens overflow a static cache of {cache.capacity} positions "
                f"({held} held); make it with new_cache(max_length) large enough"
            )
        try:
            if held == 0 or n > GRAPH_TOKENS:  # the prefill: once per text, any length
                logits = self._eager(input_ids, cache)
            else:
                step = cache.steps.get(n) or self._make_step(cache, n)  # made in `prepare` for a decode's sizes
                step.tokens.copy_(input_ids)
                step.replay()
                logits = step.logits
        except BaseException:
            cache.move_to(held)  # the layers may have counted part of the pass
            raise
        cache.move_to(held + n)
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)

    def _make_step(self, kv: StaticKV, n: int) -> SimpleNamespace:
        """The step for passes of ``n`` tokens over ``kv``: captured (or emulated) with graphs, else the eager pass."""
        step = SimpleNamespace(tokens=torch.zeros((1, n), dtype=torch.long, device=self.device), logits=None)

        def eager():
            step.logits = self._eager(step.tokens, kv)

        step.replay = eager
        if self.graphs:
            held = kv.position
            try:
                step.replay, step.logits = self._capture(kv, step.tokens)
                self.captured += 1
            except CaptureRefused as refused:
                self._go_eager(f"its {n}-token step was not captured ({refused})")
            finally:
                kv.move_to(held)
        kv.steps[n] = step
        return step

    def _capture(self, kv: StaticKV, tokens):
        """``(replay, logits buffer)`` of one pass over ``tokens`` at the cache's position, recorded once.

        The pass reads its position from ``kv.lengths`` and advances it on the device, so one recording serves every
        position. Warm-up passes write rows beyond the position: masked and overwritten later, like a rejected draft's.
        """
        held = kv.position

        def run():
            logits = self._eager(tokens, kv)
            kv.lengths.fill_(held)
            return logits

        found = host_reads(run)  # the first warm-up, on the real device, under the spy
        if found:
            raise CaptureRefused("it reads the device on the host: " + "; ".join(found[:3]))
        if self.device.type != "cuda":
            emulated = _Emulated(run)
            return emulated.replay, emulated.output
        return _cuda_capture(run, kv, self.device)

    def _self_check(self, kv: StaticKV, sizes) -> None:
        """Each step's replay against the same pass run eagerly, after a prefill, rolled back in between: bitwise
        equal, or the model runs eagerly (a warning names it)."""
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, self.config.vocab_size, (1, CHECK_PREFILL + max(sizes)), generator=generator)
        ids = ids.to(self.device)
        kv.move_to(0)
        self._eager(ids[:, :CHECK_PREFILL], kv)
        for n in sizes:
            chunk = ids[:, CHECK_PREFILL : CHECK_PREFILL + n]
            kv.move_to(CHECK_PREFILL)
            expected = self._eager(chunk, kv).clone()
            kv.move_to(CHECK_PREFILL)
            step = kv.steps[n]
            step.tokens.copy_(chunk)
            step.replay()
            if not torch.equal(step.logits, expected):
                self._go_eager(f"its {n}-token graph's replay differs from the same pass run eagerly")
                return

    def _go_eager(self, reason: str, warn: bool = True) -> None:
        """From now on every step of this model runs the eager pass (its graphs and their memory are dropped)."""
        self.graphs, self.eager_reason = False, reason
        for kv in self.caches:
            kv.steps.clear()
            kv.pool = None
        name = getattr(self.model, "name_or_path", None) or type(self.model).__name__
        if warn:
            warnings.warn(
                f"CUDA graphs are off for {name}: {reason}; it runs eagerly over its static cache", stacklevel=4
            )


def _addresses(model) -> tuple:
    """Where the model's weights and buffers live: what a recorded step reads."""
    return tuple(_address(t) for t in (*model.parameters(), *model.buffers()))


def _address(tensor) -> int:
    try:
        return tensor.data_ptr()
    except RuntimeError:  # a tensor without storage (oneDNN's packed weights on a CPU): its identity instead
        return id(tensor)


class _Emulated:
    """A CPU's stand-in for a CUDA graph: capture runs the pass once and keeps its output; each replay runs it again
    and writes into that output, as a real replay writes into its capture's memory (a caller holding an output
    across passes sees it change, here as on a GPU)."""

    def __init__(self, run):
        self.run = run
        self.output = run()

    def replay(self) -> None:
        self.output.copy_(self.run())


def _cuda_capture(run, kv: StaticKV, device):
    """Two warm-ups on a side stream, then one capture into the cache's pool. However the capture ends, the current
    stream is restored; if it fails, so is the random state, and the error says why."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            run()
    torch.cuda.current_stream(device).wait_stream(stream)
    if getattr(kv, "pool", None) is None:
        kv.pool = torch.cuda.graph_pool_handle()
    graph, rng = torch.cuda.CUDAGraph(), _rng_state(device)
    torch.cuda.synchronize(device)
    try:
        with torch.cuda.stream(stream):  # leaves the stream it entered on, whatever raises inside
            graph.capture_begin(pool=kv.pool)
            try:
                logits = run()
            finally:
                graph.capture_end()
    except BaseException as error:  # a failed capture, or Ctrl-C during one
        _restore_rng(device, rng)
        kv.pool = None
        if isinstance(error, RuntimeError):
            raise CaptureRefused(str(error).splitlines()[0]) from error
        raise
    return graph.replay, logits


def _rng_state(device):
    """The device's default generator's state, as a fresh generator (capture registers the default generator; a
    capture that fails leaves it mid-capture, and its next random call raises)."""
    generator = torch.Generator(device)
    generator.set_state(torch.cuda.get_rng_state(device))
    return generator


def _restore_rng(device, saved) -> None:
    """Put the saved state back into the device's default generator: a state object that is not mid-capture where
    torch can swap one in (``graphsafe_set_state``), else the saved seed and offset. Best effort: a restore that
    fails warns, and never hides the capture's own error."""
    default = torch.cuda.default_generators[torch.device(device).index or 0]
    try:
        if hasattr(default, "graphsafe_set_state"):
            default.graphsafe_set_state(saved.graphsafe_get_state())
        else:
            default.set_state(saved.get_state())
    except RuntimeError as error:
        warnings.warn(
            f"after a failed CUDA graph capture the random state could not be restored ({error}); "
            "restart the kernel if a random call raises",
            stacklevel=4,
        )


def static_forward(model, graphs: bool = True) -> StaticForward:
    """The model's `StaticForward` for ``graphs`` (made on first use, kept as long as the model lives)."""
    with _LOCK:
        forwards = _FORWARDS.setdefault(model, {})
        if graphs not in forwards:
            forwards[graphs] = StaticForward(model, graphs)
        return forwards[graphs]
