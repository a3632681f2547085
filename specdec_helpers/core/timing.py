"""Timing primitives shared by everything that measures: device sync, one timed call, a robust spread."""

from __future__ import annotations

import os
import statistics
import time
from contextlib import contextmanager
from typing import Callable

import torch


def child_thread_count() -> int:
    """Torch threads of a graded child (``$SPECDEC_THREADS``, default 1)."""
    return int(os.environ.get("SPECDEC_THREADS", "1"))


@contextmanager
def child_threads():
    """Torch threads as in a graded child for the block, then back: the grader's own timings and a kernel's answers
    in process run on the child's count, so their CPU times compare (two threads spin 1.6-1.9x the CPU of one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(child_thread_count())
    try:
        yield
    finally:
        torch.set_num_threads(threads)


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
