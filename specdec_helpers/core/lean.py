"""A Llama model's forward on a CPU without transformers' per-layer Python (`LeanForward`), and the kit's one static
cache (`StaticKV`), which it, `graphs` and `compiled` run over.

Why: on 2 CPU cores a SmolLM2-135M step spends a fifth of its time outside the matrix products, in the
model's Python (module calls, mask and cache bookkeeping, argument checks): the CPU's counterpart of a
GPU's launch overhead, which `graphs` removes there. This forward calls the model's own modules (norms,
rotary embedding, Linear layers, activation) and runs the tensor operations between them in transformers'
order (attention as ``sdpa_attention_forward`` calls it), so its logits are bitwise the model's;
`backends.lean_forward` checks that once per model and dtype, and falls back to the model's own forward where they
differ (a newer transformers, another architecture). q/k/v and gate/up run as one packed product each
while their layers keep the weights they were packed from. On its cache a rollback moves a position
(`StaticKV.keep`), and attention reads only the rows before it.
"""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from transformers.cache_utils import StaticLayer

from specdec_helpers.core.cache import PositionCache, check_prefix, new_static_cache
from specdec_helpers.core.cpu_kernels import OneDNNLinear, pack_weight, packed_linear


def supported(model) -> str | None:
    """None when `LeanForward` can mirror ``model``; else why not."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "llama" or type(model).__name__ != "LlamaForCausalLM":
        return "not a LlamaForCausalLM"
    if model.device.type != "cpu" or getattr(model, "hf_device_map", None) or model.training:
        return "not an inference model on the CPU"
    rope = getattr(config, "rope_parameters", None) or {}
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if (
        config.hidden_act != "silu"
        or config.attention_bias
        or getattr(config, "mlp_bias", False)
        or rope.get("rope_type", "default") != "default"
        or getattr(config, "pretraining_tp", 1) > 1
        or config._attn_implementation != "sdpa"
        or head_dim > 256
    ):
        return "a Llama variant this forward does not mirror"
    if _hooked(model):
        return "hooks on its modules (they see the passes of its own forward)"
    return None


def _hooked(model) -> bool:
    """Whether a hook would miss passes: any forward hook but transformers' own output capturing (installed by the
    first ``output_hidden_states=True`` call, and idle outside such calls)."""
    from torch.nn.modules import module

    hooks = [*module._global_forward_hooks.values(), *module._global_forward_pre_hooks.values()]
    for m in model.modules():
        hooks += [*m._forward_hooks.values(), *m._forward_pre_hooks.values()]
    return any(getattr(hook, "__module__", "") != "transformers.utils.output_capturing" for hook in hooks)


class StaticKV(PositionCache):
    """The kit's one static cache: ``capacity`` preallocated positions per layer, of which the first ``position`` hold
    what was fed (between a verify pass and its rollback: the text and the draft). A rollback moves the position
    (gpt-fast's ``input_pos``): the rows beyond stay in memory, hidden from attention, and the next pass overwrites
    them. Nothing is copied.

    It holds transformers' ``StaticCache`` (``cache``), so the model's own forward writes into it, and the lean CPU
    forward writes the same layers' rows itself. Each layer counts its length in a device tensor (all layers: views of
    ``lengths``), which a CUDA graph reads; ``position`` is the host's copy, read without waiting for the device.
    ``position`` changes only through `move_to`; ``lengths`` also advance when the model's own forward writes through
    transformers' ``StaticLayer.update``, so the forwards that run it (compiled's, graphs') end every pass, even one
    that raised, with `move_to`, which sets both again.
    """

    def __init__(self, model, capacity: int):
        self.cache = new_static_cache(model, capacity)
        if any(type(layer) is not StaticLayer for layer in self.cache.layers):
            raise NotImplementedError(
                f"{type(model).__name__} has sliding-window or recurrent cache layers: a "
                "static cache rolls back plain full-attention layers only; use graphs=False"
            )
        self.capacity, self.position, self.in_use = capacity, 0, False
        self.lengths = torch.zeros(len(self.cache.layers), dtype=torch.long, device=model.device)
        for i, layer in enumerate(self.cache.layers):
            layer.cumulative_length = self.lengths[i]
        self.kind = (model.dtype, model.device)  # what its rows hold, and where
        self.steps: dict = {}  # `graphs`' steps over this cache: tokens per pass -> its (captured) step
        self.pool = None  # the memory pool of those steps' CUDA graphs
        self.weights = None  # where the model's weights were when those steps were recorded

    def get_seq_length(self) -> int:
        """Positions held (the host's count: reading it never waits for the device)."""
        return self.position

    def move_to(self, position: int) -> None:
        """Set the length, host and device alike: after a pass, a rollback, a reset, or a pass that raised."""
        self.position = position
        self.lengths.fill_(position)

    def keep(self, n_kept: int) -> None:
        """Keep the first ``n_kept`` positions: the rollback of a static cache (core/cache.py's `rollback` calls it).
        Scattered positions would need a copy: token trees and batches keep dynamic caches."""
        if not isinstance(n_kept, int):
            raise NotImplementedError(
                "a static cache keeps the first n positions only; token trees and batches roll back dynamic caches"
            )
        check_prefix(self.position, n_kept)
        self.move_to(n_kept)

    def layer(self, i: int, like: torch.Tensor) -> StaticLayer:
        """Layer ``i``, its rows allocated (shaped and typed after ``like``, ``[1, kv_heads, n, head_dim]``) if no
        pass has written it yet."""
        layer = self.cache.layers[i]
        if not layer.is_initialized:
            layer.lazy_initialization(like, like)
        return layer


class LeanForward:
    """The static backends' forward protocol over a `StaticKV`: called as ``fwd(input_ids=..., cache=kv)``
    (core/cache.py's `cache_kwargs` finds the ``cache`` keyword on ``__call__`` and passes the `StaticKV` itself;
    ``logits_to_keep`` and ``output_hidden_states`` as the model takes them; ``use_cache`` is accepted and ignored:
    every pass writes the cache), and ``new_cache(n)``."""

    def __init__(self, model, fuse: bool = True):
        # A weak reference (the check's table must not keep the model alive); its modules are read at each pass, so
        # Linear layers swapped later (`cpu_kernels`) are the ones used.
        self._model = weakref.ref(model)
        # transformers' own helpers, imported here rather than with the kit: modeling_llama brings modeling_utils,
        # dynamo and scipy along, about 2 CPU s in every process that imports the kit and never builds this.
        from transformers.models.llama.modeling_llama import repeat_kv, rotate_half

        self.repeat_kv, self.rotate_half = repeat_kv, rotate_half
        config = model.config
        self.config, self.device, self.dtype = config, model.device, model.dtype
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        # Per layer, q/k/v and gate/up as one product each where oneDNN packs them (fewer, larger products; the check
        # in `backends.lean_forward` says whether the results stay bitwise the same, and builds one without if not).
        self.fused = (
            [
                (_fused(layer.self_attn, "q_proj", "k_proj", "v_proj"), _fused(layer.mlp, "gate_proj", "up_proj"))
                for layer in model.model.layers
            ]
            if fuse
            else None
        )

    def get_input_embeddings(self):
        return self._model().get_input_embeddings()

    def new_cache(self, max_length: int) -> StaticKV:
        """An empty cache of ``max_length`` positions, allocated now (not in a timed pass)."""
        kv = StaticKV(self._model(), max(int(max_length), 1))
        like = torch.empty((1, self.kv_heads, 0, self.head_dim), dtype=self.dtype, device=self.device)
        for i in range(len(kv.cache.layers)):
            kv.layer(i, like)
        return kv

    @torch.inference_mode()
    def __call__(
        self,
        input_ids,
        cache: StaticKV,
        use_cache: bool = True,
        logits_to_keep: int = 0,
        output_hidden_states: bool = False,
    ):
        n, past = input_ids.shape[1], cache.position
        if input_ids.shape[0] != 1:
            raise ValueError(f"the lean forward decodes one text; got a batch of {input_ids.shape[0]}")
        if past + n > cache.capacity:
            raise ValueError(
                f"{n} more tokens overflow a cache of {cache.capacity} positions ({past} held); make it "
                "with new_cache(max_length) large enough"
            )
        model = self._model()
        body = model.model
        positions = torch.arange(past, past + n, device=input_ids.device)
        x = body.embed_tokens(input_ids)
        cos, sin = body.rotary_emb(x, positions[None])
        cos, sin = cos[:, None], sin[:, None]
        mask = None
        if n > 1 and past:  # transformers' boolean causal mask over the cached rows and these
            mask = (torch.arange(past + n, device=input_ids.device)[None, :] <= positions[:, None])[None, None]
        for i, layer in enumerate(body.layers):
            qkv, gate_up = self.fused[i] if self.fused else (None, None)
            x = x + self._attention(
                layer.self_attn,
                _current(qkv, layer.self_attn),
                layer.input_layernorm(x),
                cos,
                sin,
                cache,
                i,
                past,
                n,
                mask,
            )
            h, mlp = layer.post_attention_layernorm(x), layer.mlp
            gate_up = _current(gate_up, mlp)
            if gate_up is not None:
                gate, up = packed_linear(h, gate_up).chunk(2, dim=-1)
            else:
                gate, up = mlp.gate_proj(h), mlp.up_proj(h)
            x = x + mlp.down_proj(mlp.act_fn(gate) * up)
        hidden = body.norm(x)
        cache.move_to(past + n)
        keep = slice(-logits_to_keep, None) if logits_to_keep else slice(None)
        logits = model.lm_head(hidden[:, keep, :])
        return SimpleNamespace(logits=logits, hidden_states=(hidden,) if output_hidden_states else None)

    def _attention(self, attention, qkv, h, cos, sin, cache: StaticKV, i: int, past: int, n: int, mask):
        if qkv is not None:
            q, k, v = packed_linear(h, qkv).split(
                [self.heads * self.head_dim, *2 * [self.kv_heads * self.head_dim]], dim=-1
            )
        else:
            q, k, v = attention.q_proj(h), attention.k_proj(h), attention.v_proj(h)
        q = q.view(1, n, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin
        layer = cache.layer(i, k)
        layer.keys[:, :, past : past + n] = k
        layer.values[:, :, past : past + n] = v
        k, v = layer.keys[:, :, : past + n], layer.values[:, :, : past + n]
        groups = self.heads // self.kv_heads
        if mask is None:  # one query, or a prefill (causal): the kernel handles grouped heads itself
            options = {"enable_gqa": True} if groups > 1 else {}
            out = F.scaled_dot_product_attention(q, k, v, scale=attention.scaling, is_causal=n > 1, **options)
        else:  # several queries after cached rows: heads repeated, then the boolean mask (as transformers does)
            if groups > 1:
                k, v = self.repeat_kv(k, groups), self.repeat_kv(v, groups)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attention.scaling)
        return attention.o_proj(out.transpose(1, 2).contiguous().reshape(1, n, -1).contiguous())


def _fused(module, *names):
    """One oneDNN-packed weight for ``module``'s Linear layers ``names`` (they read the same input) and the packed
    weights it was made from, or None unless all of them are packed and have no bias."""
    linears = [getattr(module, name) for name in names]
    if not all(
        isinstance(linear, OneDNNLinear) and linear.packed_weight is not None and linear.bias is None
        for linear in linears
    ):
        return None
    with torch.no_grad():
        packed = pack_weight(torch.cat([linear.weight for linear in linears]))
    return SimpleNamespace(packed=packed, names=names, sources=[linear.packed_weight for linear in linears])


def _current(fused, module):
    """``fused``'s packed weight while the layers it was made from still hold the weights it packed (a layer swapped,
    or packed again after a cast or a load, makes its own copy: then the layers run one by one); else None."""
    if fused is None:
        return None
    for name, source in zip(fused.names, fused.sources):
        if getattr(getattr(module, name), "packed_weight", None) is not source:
            return None
    return fused.packed
