"""argparse types and checks shared by the commands: counts, devices, output folders, threads."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch


def at_least(minimum: int):
    """argparse type: a whole number >= ``minimum`` (a count of tokens, runs, threads)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value

    return parse


positive_int, whole_number = at_least(1), at_least(0)


def positive_ints(text: str) -> list[int]:
    """argparse type: comma-separated whole numbers >= 1, e.g. '1,2,4'."""
    if values := [positive_int(part.strip()) for part in text.split(",") if part.strip()]:
        return values
    raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1, e.g. 1,2,4; got {text!r}")


def preset_names(text: str) -> str:
    """argparse type: one or more preset names, comma-separated. An empty one (``--preset ''``, ``--preset toy,``)
    is refused with the names, rather than read as the default; an unknown one is refused where it is loaded."""
    from specdec_helpers.models.presets import PRESETS

    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r} holds an empty preset name; choose from: {', '.join(PRESETS)}")
    return ",".join(names)


def check_device_and_out(parser, args) -> None:
    """Refuse at once a device this machine lacks and an --out that is a file."""
    if (args.device or "").startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA GPU here (torch {torch.__version__}); use --device cpu")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a file; give a folder")


def set_threads(requested: int | None, presets: str) -> None:
    """--threads, else 1 for the toy alone, else the cores other processes leave free (load average): a
    thread waiting for a busy core made runs 6-10x slower (SmolLM2: 62 s instead of 10 s for 64 tokens)."""
    toy = {p.strip().lower() for p in presets.split(",")} == {"toy"}
    free = (os.cpu_count() or 1) - (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0)
    torch.set_num_threads(requested or (1 if toy else max(1, min(torch.get_num_threads(), round(free)))))
