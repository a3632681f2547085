"""What crosses between the grader and the student's child: answers as JSON (never pickle: the grader must not
run what student code returned), and the error the child reports when student code raised."""

from __future__ import annotations

import torch

MAX_DEPTH = 6


class StudentError(Exception):
    """Student code raised (the child reported it): ``kind`` is the exception's type name."""

    def __init__(self, kind: str, message: str, where: str = ""):
        super().__init__(f"{kind}: {message}{where}")
        self.kind, self.message, self.where = kind, message, where


def encode(value, depth: int = 0):
    """JSON-safe form of what student code returned (never pickle: the grader must not run it)."""
    if depth > MAX_DEPTH:
        return {"object": "too deep"}
    if isinstance(value, torch.Tensor):
        return {"tensor": value.detach().cpu().tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, bool) or value is None or isinstance(value, (int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [encode(v, depth + 1) for v in list(value)[:100_000]]
    if isinstance(value, dict):
        return {"dict": [[str(k), encode(v, depth + 1)] for k, v in list(value.items())[:1000]]}
    if hasattr(value, "__index__"):
        return int(value)
    return {"object": type(value).__name__}


def decode(value):
    """Inverse of `encode` (also used by the grader)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "tensor" in value:
            return torch.tensor(value["tensor"], dtype=getattr(torch, value["dtype"]))
        if "dict" in value:
            return {k: decode(v) for k, v in value["dict"]}
        if "object" in value:
            return value
        return {k: decode(v) for k, v in value.items()}  # the protocol's own envelopes
    return value
