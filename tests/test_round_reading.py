"""One round of the default CPU demo stays readable in one sitting: the README's reading path names what it runs
(the lean backend), and a trace of the round counts the kit's files and lines it executes, so the round cannot
quietly spread again (issue #41: it once spanned 11 files and ~490 lines)."""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

import torch
from tiny_models import tiny_model

import specdec_helpers as sd
from specdec_helpers.core import decode

ROOT = Path(__file__).resolve().parents[1]
#: Files whose code a reader must follow to explain the round (the rest it touches are one-liners named by what they
#: do: the schedule's update, the device sync, the sampler's greedy flag, the backend's name, the acceptance switch).
SUBSTANCE = {
    "core/decode.py",
    "core/reference_parts.py",
    "core/drafters.py",
    "core/lean.py",
    "core/cache.py",
    "core/rounds.py",
}


def traced_round_lines() -> dict[str, set[int]]:
    """Kit lines executed inside `_rounds` for a greedy decode on the demo's backend (a Llama with prompt lookup on
    the CPU: the lean forward), after a warm-up."""
    target = tiny_model("llama")
    ids = torch.tensor([[3, 4, 5, 3, 4, 5, 3, 4]])
    sd.speculative_decode(target, sd.PromptLookupDrafter(), ids, max_new_tokens=12, num_speculative_tokens=4)
    lines, rounds = collections.defaultdict(set), decode._rounds
    backend = []

    def tracer(frame, event, arg):
        name = frame.f_code.co_filename
        if event == "line" and "specdec_helpers" + "/" in name:
            lines[name.split("specdec_helpers/")[1]].add(frame.f_lineno)
        return tracer

    def traced(run, *args, **kwargs):
        backend.append(run.name)
        sys.settrace(tracer)
        try:
            return rounds(run, *args, **kwargs)
        finally:
            sys.settrace(None)

    decode._rounds = traced
    try:
        sd.speculative_decode(target, sd.PromptLookupDrafter(), ids, max_new_tokens=12, num_speculative_tokens=4)
    finally:
        decode._rounds = rounds
    assert backend == ["lean"]
    return lines


def test_a_round_on_the_demo_backend_stays_in_few_files_and_lines():
    lines = traced_round_lines()
    files = set(lines)
    assert SUBSTANCE <= files, SUBSTANCE - files  # the trace sees the round (the check is not vacuous)
    assert len(files - SUBSTANCE) <= 6 and all(len(lines[f]) <= 6 for f in files - SUBSTANCE), {
        f: len(lines[f]) for f in files - SUBSTANCE
    }
    assert sum(len(v) for v in lines.values()) <= 185, {f: len(v) for f, v in lines.items()}


def test_the_reading_path_names_the_demo_backend_and_its_files():
    readme = (ROOT / "README.md").read_text()
    path = readme[readme.index("## Reading path") : readme.index("## Layout")]
    assert re.search(r"\*\*lean\*\*\s+backend", path) and "core/backends.py" in path
    for rel in SUBSTANCE:
        assert rel.split("/")[1] in path, rel
