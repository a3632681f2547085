"""Grading fair to every honest decoder, closed to the last cheats (issue 34), and GPU-only mistakes caught
on a CPU (issue 33): a stale draft cache costs the drafting points only, the EOS count and device mistakes
are named, a patched position counter and forged rounds earn nothing, aliases of sys/importlib and reaches
through the package name are seen.

Student code runs in a child process here, as in grading; timings are never asserted (the speed item is
scored from a `Measurement` the test builds, or only checked for what blocks it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specdec_helpers.assignment.authoring import mutations
from specdec_helpers.assignment.grading import child, grader, speed, submission
from specdec_helpers.assignment.testing.devices import DeviceWatch
from specdec_helpers.assignment.grading.sandbox import InProcess
from specdec_helpers.assignment.parts import cells
from specdec_helpers.assignment.student import check
from specdec_helpers.assignment.parts.cells import load_functions

POINTS = grader.load_config()["points"]
STALE = next(m for m in mutations.CATALOG if m.name == "draft_cache_stale")


@pytest.fixture(scope="module")
def reference():
    return submission.reference_sources()


@pytest.mark.slow
def test_a_stale_draft_cache_loses_the_drafting_points_only(reference):
    sources = STALE.sources(reference)
    results = grader.run_suite(sources, POINTS, only=["draft", "decode"], seed=0)
    lost = [r for r in results if not r.passed]
    assert lost and all(r.item == "draft" and "draft cache" in r.feedback for r in lost), lost
    assert grader.exact_sum([r.score for r in results if r.item == "decode"]) == POINTS["decode"]
    perf = dict(grader.load_config()["performance"], repeats=2, max_new_tokens=32, warmup=0)
    m = speed.measure(sources, reference, perf, seed=0)
    # its rounds are speculative decoding; the acceptance scored is the grader's own, a correct decoder's (issue 43)
    assert m.identical and m.speculates and not m.error, m.detail
    assert 0 < m.acceptance == m.reference_acceptance and "draft cache" in m.detail["note"]
    # its drafting failed its tests, so its off-greedy timed drafts are that mistake, not a second loss
    acceptance = grader.performance_results(m, grader.load_config(), drafts_right=False)[1]
    assert acceptance.item == "acceptance" and acceptance.passed, acceptance
    # so its measured numbers decide, as for any decoder: passing numbers earn the points
    passing = speed.Measurement(0.76, 0.48, reference_acceptance=0.5, detail=m.detail)
    scores = {r.item: r.score for r in grader.performance_results(passing, grader.load_config())}
    assert scores["speedup"] == POINTS["speedup"] and scores["acceptance"] == POINTS["acceptance"]


def test_drafts_not_from_the_draft_model_earn_no_more_acceptance_than_it():
    """A draft taken from the target itself (all accepted) counts as what the draft model would have had
    accepted; arbitrary drafts (no draft model run) are not speculative decoding."""
    from specdec_helpers.assignment.testing.replay import check_rounds
    from specdec_helpers.assignment.testing.world import greedy_tokens, world

    w = world(0)
    prompt, k, n = w.prompts[1], 4, 12
    text = greedy_tokens(w.target, prompt, n)

    def log_for(draft_of):
        log, position = [], 0
        while position < n:
            draft = draft_of(position)[: max(0, min(k, n - position - 1))]
            m = next((j for j, t in enumerate(draft) if text[position + j] != t), len(draft))
            log.append(
                (
                    "verify",
                    prompt.shape[1] + position,
                    len(draft),
                    (text[position : position + m + 1], m),
                    "verify_tokens_cached",
                    draft,
                )
            )
            position += m + 1
        return log + [("generate", len(log), 0, 0)]

    honest = check_rounds(
        w.draft,
        prompt,
        text,
        log_for(lambda p: greedy_tokens(w.draft, torch.tensor([prompt[0].tolist() + text[:p]]), k)),
        k,
        n,
    )
    oracle = check_rounds(w.draft, prompt, text, log_for(lambda p: text[p : p + k]), k, n)
    junk = check_rounds(
        w.draft,
        prompt,
        text,
        log_for(lambda p: [(text[p + j] + 1) % w.vocab for j in range(k)] if p + k < n else []),
        k,
        n,
    )
    assert honest.speculates and honest.off_greedy == 0 and not honest.note
    assert oracle.off_greedy > 0 and oracle.accepted <= oracle.greedy_accepted
    assert oracle.accepted < oracle.proposed  # the target's own drafts: all accepted, but not counted so
    assert junk.greedy_accepted > 0 and junk.accepted == 0
    assert not junk.speculates and "do not come from the draft model" in junk.why_not()


def test_the_eos_count_mistake_is_named(reference):
    """The device mistake (``new_tokens_on_cpu``) is held to the same in tests/test_assignment.py's catalog test,
    which grades its whole part for its flag."""
    m = next(m for m in mutations.CATALOG if m.name == "eos_count_after_cut")
    report = mutations.grade_mutation(m, reference, seed=0, in_process=True)
    lost = [r for r in report.results if not r.passed]
    assert [r.test_id for r in lost] == [m.test_id] and "tokens kept after the cut at EOS" in lost[0].feedback, lost
    assert not lost[0].hidden  # the visible check in notebook 04 catches it too


def test_the_simulated_gpu_sees_what_cuda_refuses_and_nothing_else():
    model = torch.nn.Linear(4, 4)
    ids = torch.ones(1, 3, dtype=torch.long)
    cases = {
        "cat with a host tensor": (lambda: torch.cat([ids, torch.tensor([[2]])], dim=1), True),
        "cat with the input's device": (lambda: torch.cat([ids, torch.tensor([[2]], device=ids.device)], 1), False),
        "moved with .to(ids.device)": (lambda: torch.cat([ids, torch.tensor([[2]]).to(ids.device)], 1), False),
        "new_tensor keeps the device": (lambda: torch.cat([ids, ids.new_tensor([[2]])], 1), False),
        "0-dim host scalar": (lambda: ids + torch.tensor(1), False),
        "indexing with a host index": (lambda: ids[0, torch.tensor([0, 1])], False),
        "moved to cpu, then mixed": (lambda: ids.cpu() + ids, True),
        "a weight times a host input": (lambda: model(torch.ones(2, 4)), True),
    }
    for name, (run, faulty) in cases.items():
        with DeviceWatch([model], [ids]) as watch:
            run()
        assert bool(watch.faults) == faulty, (name, watch.faults)


def test_the_simulated_gpu_reads_the_graded_line_for_cpu_and_sees_legacy_constructors():
    """On the CPU ``str(ids.device)`` and ``"cpu"`` are the same string: the graded line's text tells them apart.
    ``torch.LongTensor(...)`` bypasses TorchFunctionMode: its tensor carries no device mark, so it is on the host
    (every constructor: tests/test_device_watch.py)."""
    ids = torch.ones(1, 3, dtype=torch.long)
    cases = {
        "device=str(ids.device)": ("torch.cat([ids, torch.tensor([[2]], device=str(ids.device))], 1)", False),
        "device='cpu'": ("torch.cat([ids, torch.tensor([[2]], device='cpu')], 1)", True),
        ".to('cpu')": ("ids.to('cpu') + ids", True),
        ".to(str(ids.device))": ("ids.to(str(ids.device)) + ids", False),
        "torch.LongTensor": ("torch.cat([ids, torch.LongTensor([[2]])], 1)", True),
        "torch.asarray": ("torch.cat([ids, torch.asarray([[2]])], 1)", True),
        "a 'cpu' held in a name": ("HOST = 'cpu'\n    torch.cat([ids, torch.tensor([[2]], device=HOST)], 1)", True),
        "a device string held in a name": (
            "dev = str(ids.device)\n    torch.cat([ids, torch.ones(1, 1, dtype=torch.long, device=dev)], 1)",
            False,
        ),
        "isinstance still works": ("assert isinstance(ids, torch.LongTensor)", False),
    }
    for name, (line, faulty) in cases.items():
        code = cells.compile_graded(f"def run(ids):\n    {line}\n", f"<graded cell {name}>")
        namespace = {"torch": torch}
        exec(code, namespace)
        with DeviceWatch([], [ids]) as watch:
            namespace["run"](ids)
        assert bool(watch.faults) == faulty, (name, watch.faults)


@pytest.mark.slow
def test_forged_rounds_are_caught_by_the_cpu_time_measured_outside(reference):
    """The cheat of the red team: plain greedy decoding (the hooks counting passes removed for the call), a
    forged log of rounds with the draft model's greedy acceptance, one embedding call per forged round, written to
    agree with every in-process check; the child's CPU time with a target that costs many drafts (`World.deep`)
    does not (the same at k = 1 as at k = 8), so the cached decode test fails and performance is never measured.
    Graded by that test alone: the part's other tests, and their checks of cost, decide nothing asserted here (a
    cheat they also failed would earn no more). The control, the reference's own decode loop passing the same test in
    a child in world 0, is the stale draft cache test's full decode points above (its decode part graded again here
    cost 10 CPU s)."""
    loop = reference["decode"].index("@torch.inference_mode()\ndef generate_ids")
    forged = reference["decode"][:loop] + (Path(__file__).parent / "cheat_cells" / "forged_rounds.py").read_text()
    sources = dict(reference, decode=forged)
    (cached,) = grader.run_suite(sources, POINTS, only=["decode"], seed=0, ids={"decode.decode_cached"})
    assert not cached.passed, cached
    assert "measured outside your process" in cached.feedback and "once per token whatever k is" in cached.feedback


@pytest.mark.slow
def test_other_kit_code_reached_dynamically_is_refused(reference):
    """The student edition still ships the tree loop, tree drafting and sampled acceptance (notebooks 05-08), and a
    width-1 tree is a chain: a cell that reaches them through a module table the static check cannot read
    (`tests/cheat_cells/kit_tree_drafting.py`) earns no drafting points. In the sandboxed child the module is not
    there (`isolation.least_code`: the table has no such key); where the child runs with the grader's whole kit
    (no sandbox), the guard on every ``core`` function refuses it (`child._poison_the_algorithm`)."""
    cheat = (Path(__file__).parent / "cheat_cells" / "kit_tree_drafting.py").read_text()
    assert cells.kit_references(cheat) == []  # not seen statically: the guard does it
    results = grader.run_suite(dict(reference, draft=cheat), POINTS, only=["draft"], seed=0)
    assert results and all(r.score == 0 for r in results), [(r.test_id, r.score) for r in results]
    assert all("specdec_helpers.core.tree" in r.feedback for r in results), [r.feedback for r in results]
    introspect = "f = g.__closure__[0].cell_contents\nm = torch.sys.modules\nh = getattr(g, '__wrapped__')\n"
    assert cells.kit_references(introspect) == ["cell_contents", "sys.modules", "__wrapped__", "__closure__"]


def test_kit_reaches_through_the_package_name_are_seen():
    """``import specdec_helpers.core.cache`` binds ``specdec_helpers``: the rest of the kit is an attribute away."""
    reach = "import specdec_helpers.core.cache\nspecdec_helpers.assignment.testing.devices.FROM_DATA.clear()\n"
    assert cells.kit_references(reach) == ["specdec_helpers.assignment.testing.devices.FROM_DATA.clear"]
    assert cells.kit_references("import specdec_helpers.core.cache\ngetattr(specdec_helpers, 'core')\n")
    allowed = "import specdec_helpers.core.cache\nc = specdec_helpers.core.cache.new_cache(m)\n"
    assert cells.kit_references(allowed) == []


def test_a_kit_function_handed_to_a_helper_is_still_a_delegation():
    """The poison walks up past helpers that are neither graded nor the kit's (``functools``, ``map``...)."""
    import functools

    poisoned = child._poisoned("score_draft", lambda *a: "real")
    code = cells.compile_graded("def run(f):\n    return list(map(lambda x: f(x), [1]))\n", "<graded cell t>")
    namespace = {"__name__": "__graded__"}
    exec(code, namespace)
    with pytest.raises(child.KitDelegation):
        namespace["run"](functools.partial(poisoned))
    assert child.DELEGATED.pop() == "score_draft"
    assert poisoned(1) == "real"  # called from here (neither graded nor kit): passes


def test_aliases_of_sys_and_importlib_are_seen():
    for source in (
        "import importlib as _loader\nf = _loader.import_module('specdec_helpers.core.verify')\n",
        "import sys as _system\nf = _system.modules['specdec_helpers.core.verify']\n",
        "from importlib import import_module\nf = import_module('specdec_helpers.core.verify')\n",
    ):
        assert cells.kit_references(source), source
    assert cells.kit_references("import torch\nimport math as m\nx = m.sqrt(2)\n") == []


def test_notebook_04s_check_names_a_stale_draft_cache_from_notebook_02(reference):
    functions = load_functions(STALE.sources(reference))
    with pytest.raises(check.CheckFailed, match=r"drafting part \(notebook 02\).*draft cache"):
        check._check_drafting(InProcess(functions))
    check._check_drafting(InProcess(load_functions(reference)))  # a right one passes silently
