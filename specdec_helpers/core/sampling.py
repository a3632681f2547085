"""How a token is chosen from logits: greedy, or sampling warped by temperature, top-k and top-p.

Draft and target must be warped *identically* for speculative sampling to be lossless, so both go
through one `Sampler`, which uses transformers' own logits warpers in the order `generate` applies
them (temperature, then top-k, then top-p).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Real

import torch
from transformers import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


@dataclass(frozen=True)
class Sampler:
    """Token choice rule. ``temperature == 0`` is greedy (argmax); ``> 0`` samples."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    generator: torch.Generator | None = None
    _warpers: LogitsProcessorList = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        t, k, p = self.temperature, self.top_k, self.top_p
        if isinstance(t, bool) or not isinstance(t, Real) or t != t or t < 0:
            raise ValueError(f"temperature must be a number >= 0 (0 means greedy), got {t!r}")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise ValueError(f"top_k must be an int >= 0 (0 or None disables it), got {k!r}")
        if p is not None and (isinstance(p, bool) or not isinstance(p, Real) or not 0 < p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (1 or None disables it), got {p!r}")
        if self.generator is not None and not isinstance(self.generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(self.generator).__name__}")
        warpers = LogitsProcessorList()
        if t > 0:
            if t != 1.0:
                # float32 rounds a divisor below ~1e-38 to 0 (0 / 0 = NaN); at 1e-30 the result is one-hot already.
                warpers.append(TemperatureLogitsWarper(max(float(t), 1e-30)))
            if k:
                warpers.append(TopKLogitsWarper(top_k=k))
            if p is not None and p < 1.0:
                warpers.append(TopPLogitsWarper(top_p=float(p)))
        object.__setattr__(self, "_warpers", warpers)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Warped probabilities, one row per position (rows are independent, like a batch)."""
        scores = logits.float()
        # Shift each row so its top logit is 0 before the temperature divides it: a tiny temperature then
        # sends the other logits to -inf, never the top ones to +inf (inf - inf = NaN in softmax).
        # Softmax, top-k and top-p do not change under a shift.
        scores = scores - scores.amax(-1, keepdim=True)
        for warp in self._warpers:  # called one by one: LogitsProcessorList runs inspect.signature every call
            scores = warp(None, scores)
        return torch.softmax(scores, dim=-1)

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        """One token per row of ``probs``."""
        gen = self.generator
        if gen is not None and gen.device != probs.device:  # e.g. a CPU generator with a model on a GPU
            # One uniform per row from the generator (a few bytes cross), the draw on the probabilities' device:
            # copying each distribution to the generator's device would cost a host copy per draft token.
            u = torch.rand(probs.shape[:-1], generator=gen, device=gen.device).to(probs.device)
            return inverse_cdf(probs, u)
        return torch.multinomial(probs, 1, generator=gen).squeeze(-1)

    def choose(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Tokens for each row of ``logits`` and the distribution they came from (None if greedy)."""
        if self.greedy:
            return logits.argmax(-1), None
        probs = self.probs(logits)
        return self.sample(probs), probs

    def uniform(self, n: int, device) -> torch.Tensor:
        """``n`` draws from U[0, 1) on ``device`` using this sampler's generator."""
        gen_device = self.generator.device if self.generator is not None else device
        return torch.rand(n, generator=self.generator, device=gen_device).to(device)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token each row's distribution gives the uniform draw ``u`` (one per row): the first index whose cumulative
    probability exceeds ``u`` times the row's total, so a token is drawn with exactly its probability."""
    cumulative = probs.float().cumsum(-1)
    index = (cumulative <= u[..., None] * cumulative[..., -1:]).sum(-1)
    return index.clamp_max(probs.shape[-1] - 1)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``norm(max(p - q, 0))``: what the target still owes after a draft token drawn from ``q`` was rejected.

    Rejection sampling's second half (Leviathan et al. 2023; SpecInfer applies it once per rejected
    sibling). Its total is 0 only when ``p == q`` up to rounding, where a rejection has ~zero chance
    anyway: then ``p`` itself is returned rather than a NaN.
    """
    residual = (p - q).clamp_min(0)
    total = residual.sum(-1, keepdim=True)
    return torch.where(total > 0, residual / total.clamp_min(torch.finfo(residual.dtype).tiny), p)
