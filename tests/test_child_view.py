"""Least privilege for code (issue 43): the graded child's view of the kit holds only the modules its graded parts
and test worlds import (`isolation.least_code`), so the kit's other algorithms (tree, tree sampling, batch,
sampling, eagle, lean, the decode loops) are absent there, not guarded: a closure, ``gc`` or ``sys.modules``
finds nothing to call. The cheat that read the real ``draft_tree`` out of the guard's closure earns nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specdec_helpers.assignment.grading import grader, isolation, submission
from specdec_helpers.assignment.parts import cells

POINTS = grader.load_config()["points"]
CHEATS = Path(__file__).parent / "cheat_cells"


def core_modules(package: Path) -> set[str]:
    return {p.stem for p in (package / "core").glob("*.py") if p.stem != "__init__"}


def test_the_childs_view_holds_no_core_module_its_graded_parts_do_not_import():
    package = isolation.view("child") / "specdec_helpers"
    assert core_modules(package) == set(isolation.CHILD_CORE)
    absent = ("core/tree.py", "core/tree_sampling.py", "core/batch.py", "core/sampling.py", "core/lean.py")
    absent += ("core/decode.py", "core/drafters.py", "core/verify.py", "core/reference_parts.py", "models/pairs.py")
    absent += ("models/drafts/eagle.py", "models/drafts/registry.py", "measure/bench.py", "present/notebook_help.py")
    assert not [rel for rel in absent if (package / rel).exists()]
    # every module left is one the child imports, read from the view itself (nothing kept by hand)
    left = set(package.rglob("*.py"))
    assert left == set(isolation.imported(isolation.ROOTS["child"], package).values())
    assert isolation.imported(["specdec_helpers"], package) == {"specdec_helpers": package / "__init__.py"}  # no API


def test_control_a_new_import_of_a_core_module_grows_the_view_and_is_caught(tmp_path):
    """The view is derived from the imports: a test world that started importing the tree loop would bring it
    (and what it imports) into the child's view, and the check above would fail."""
    package = tmp_path / "specdec_helpers"
    isolation.edition(package, "child")
    world = package / "assignment" / "testing" / "world.py"
    world.write_text(world.read_text() + "\n\ndef _later():\n    from specdec_helpers.core.tree import draft_tree\n")
    isolation.least_code(package)
    grown = core_modules(package) - set(isolation.CHILD_CORE)
    assert "tree" in grown, grown
    shutil.rmtree(package)


def test_the_child_loads_the_timed_pair_as_load_pair_does():
    """The child loads the timed pair without `pairs` (its drafters are not in the view): the same models, classes
    and kernels as `load_pair` gives the grader; a preset whose draft is no model is refused, naming it."""
    import torch

    from specdec_helpers.models.pairs import load_pair
    from specdec_helpers.models.preset_models import load_preset_models

    theirs, mine = load_pair("toy", progress=False), load_preset_models("toy", progress=False)
    for a, b in ((theirs.target, mine.target), (theirs.draft, mine.draft)):
        assert [type(m) for m in a.modules()] == [type(m) for m in b.modules()]
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert (mine.device, mine.dtype) == (theirs.device, theirs.dtype)
    with pytest.raises(ValueError, match="'prompt-lookup:2', not a draft model"):
        load_preset_models("smollm2-135m", progress=False)


@pytest.mark.slow
@pytest.mark.sandbox(bwrap=True)
def test_reading_the_real_function_out_of_the_guard_earns_nothing(monkeypatch):
    """Issue 43's first attack (`tests/cheat_cells/guard_closure.py`): ``core.tree``'s name built from the allowed
    import's ``__module__``, ``pkgutil.resolve_name``, then the guard's ``__closure__``. The static check sees none
    of it. In the graded child the module is absent: no drafting points. Control: where the child runs with the
    grader's whole kit (no sandbox), the guard alone lets the same cell through and it earns them."""
    cheat = (CHEATS / "guard_closure.py").read_text()
    assert cells.kit_references(cheat) == []
    reference = submission.reference_sources()
    results = grader.run_suite(dict(reference, draft=cheat), POINTS, only=["draft"], seed=0)
    assert results and all(r.score == 0 for r in results), [(r.test_id, r.score) for r in results]
    assert all("No module named 'specdec_helpers.core.tree'" in r.feedback for r in results), results[0].feedback
    monkeypatch.setenv("SPECDEC_SANDBOX", "none")
    control = grader.run_suite(dict(reference, draft=cheat), POINTS, only=["draft"], seed=0)
    assert grader.exact_sum([r.score for r in control]) == POINTS["draft"], [(r.test_id, r.feedback) for r in control]
