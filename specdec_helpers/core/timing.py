"""Timing primitives shared by everything that measures: device sync, one timed call, a robust spread."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def sync_device(device) -> None:
    """Wait for queued GPU work, so a timer measures the work and not just its launch."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timed(fn: Callable, device) -> tuple[object, float]:
    """``(fn(), seconds)`` with the device synchronized before and after."""
    sync_device(device)
    start = time.perf_counter()
    result = fn()
    sync_device(device)
    return result, time.perf_counter() - start


def spread(values: list[float]) -> dict:
    """Median, quartiles, min and max: robust summaries for a handful of noisy timings."""
    values = sorted(values)
    if not values:
        return dict(median=float("nan"), q1=float("nan"), q3=float("nan"), min=float("nan"), max=float("nan"))
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return dict(median=statistics.median(values), q1=q1, q3=q3, min=values[0], max=values[-1])


def interleaved_order(names: list[str], repeats: int) -> list[str]:
    """Round-robin schedule: every method once per round, ``repeats`` rounds (A B C A B C ...)."""
    return [name for _ in range(repeats) for name in names]
