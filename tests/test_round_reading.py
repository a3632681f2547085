"""One round of the default CPU demo stays readable in one sitting: the README's reading path names what it runs
(the lean backend), and a trace of the round counts the kit's files and lines it executes, so the round cannot
quietly spread again (issue #41: it once spanned 11 files and ~490 lines; the issue asks for at most 4 and 250)."""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_model

import specdec_helpers as sd
from specdec_helpers.core import decode

ROOT = Path(__file__).resolve().parents[1]
#: The files a reader opens to explain the round: the loop and its text, the forward and its cache, the graded
#: scoring and acceptance, the drafter.
SUBSTANCE = {"core/decode.py", "core/lean.py", "core/reference_parts.py", "core/drafters.py"}
#: Everything else the round runs: calls named by what they do, which a reader takes at their word.
NAMED_CALLS = {
    "core/timing.py": {"sync_device"},
    "core/adaptive.py": {"KSchedule.update"},
    "core/verify.py": {"accept"},  # greedy or sampled, as the sampler says
    "core/sampling.py": {"Sampler.greedy"},
    "core/reference_loop.py": {"keep_target_cache"},  # the edition's rollback hook: `rollback`
    "core/cache.py": {"cache_kwargs", "cache_length", "rollback", "check_prefix"},
    "core/rounds.py": {"cut_at_eos", "DecodeStats.record_round"},
}


def traced_round_lines() -> tuple[dict[str, set[int]], dict[str, set[str]]]:
    """Kit lines, and the functions they belong to, executed inside `_rounds` for a greedy decode on the demo's backend
    (a Llama with prompt lookup on the CPU: the lean forward), after a warm-up."""
    target = tiny_model("llama")
    ids = torch.tensor([[3, 4, 5, 3, 4, 5, 3, 4]])
    sd.speculative_decode(target, sd.PromptLookupDrafter(), ids, max_new_tokens=12, num_speculative_tokens=4)
    lines, functions, rounds = collections.defaultdict(set), collections.defaultdict(set), decode._rounds
    backend = []

    def tracer(frame, event, arg):
        name = frame.f_code.co_filename
        if event == "line" and "specdec_helpers" + "/" in name:
            lines[name.split("specdec_helpers/")[1]].add(frame.f_lineno)
            functions[name.split("specdec_helpers/")[1]].add(frame.f_code.co_qualname)
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
    return lines, functions


def test_a_round_on_the_demo_backend_reads_in_four_files_and_few_lines():
    lines, functions = traced_round_lines()
    assert set(lines) >= SUBSTANCE, SUBSTANCE - set(lines)  # the trace sees the round (the check is not vacuous)
    named = {f: sorted(functions[f] - NAMED_CALLS.get(f, set())) for f in set(lines) - SUBSTANCE}
    assert not any(named.values()), f"the round runs more than named calls outside {sorted(SUBSTANCE)}: {named}"
    assert all(len(lines[f]) <= 8 for f in set(lines) - SUBSTANCE), {f: len(lines[f]) for f in lines}  # each short
    assert sum(len(v) for v in lines.values()) <= 180, {f: len(v) for f, v in lines.items()}


def test_the_trace_sees_a_round_that_spreads(monkeypatch):
    """The check is not vacuous: a round whose acceptance runs through one more helper function fails it."""
    from specdec_helpers.core import verify

    accept = verify.accept

    def accept_elsewhere(*args):
        return accept(*args)

    accept_elsewhere.__code__ = accept_elsewhere.__code__.replace(co_filename=verify.__file__, co_qualname="spread")
    monkeypatch.setattr(verify, "accept", accept_elsewhere)
    with pytest.raises(AssertionError, match="'core/verify.py': \\['spread'\\]"):
        test_a_round_on_the_demo_backend_reads_in_four_files_and_few_lines()


def test_the_reading_path_names_the_demo_backend_and_its_files():
    readme = (ROOT / "README.md").read_text()
    path = readme[readme.index("## Reading path") : readme.index("## Layout")]
    assert re.search(r"\*\*lean\*\*\s+backend", path) and "core/backends.py" in path
    for rel in SUBSTANCE:
        assert rel.split("/")[1] in path, rel
