"""Hints appear only after a failed check: none is written in a check cell, every one named exists."""
import ast
import json
from pathlib import Path

import pytest

from specdec_helpers.present import notebook as nb
from specdec_helpers.present.hints import HINTS, _failures

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("0*.ipynb"))


def _exercise_checks():
    """(notebook, exercise id, nb.check call) for every check call in an exercise's check cell."""
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
            if cell["cell_type"] == "code" and grade_id.startswith("ex") and grade_id.endswith("_check"):
                for node in ast.walk(ast.parse("".join(cell["source"]))):
                    if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "check":
                        yield path.name, grade_id.removesuffix("_check"), node


def test_no_check_cell_writes_its_hint_and_every_hint_it_names_exists():
    calls = list(_exercise_checks())
    assert len(calls) >= len(HINTS)
    named = set()
    for name, exercise, call in calls:
        inline = call.args[2].value if len(call.args) > 2 and isinstance(call.args[2], ast.Constant) else ""
        assert not inline, f"{name} {exercise}: a hint written in the check cell is read before trying: {inline!r}"
        hints = [k.value.value for k in call.keywords if k.arg == "hint"]
        if hints:
            assert hints == [exercise] and exercise in HINTS, (name, exercise, hints)
            named.add(exercise)
    assert named == set(HINTS), f"hints no notebook uses: {sorted(set(HINTS) - named)}"


def test_a_hint_shows_only_after_a_failure_and_grows_on_the_second(capsys):
    _failures.pop("ex2_rollback", None)
    nb.check(lambda: True, "fine.", hint="ex2_rollback")
    assert "Hint" not in capsys.readouterr().out
    nudge, fuller = HINTS["ex2_rollback"]
    with pytest.raises(nb.CheckFailed) as first:
        nb.check(lambda: False, "fine.", hint="ex2_rollback")
    assert nudge in str(first.value) and fuller not in str(first.value)
    with pytest.raises(nb.CheckFailed) as second:
        nb.check(False, "fine.", hint="ex2_rollback")
    assert fuller in str(second.value)


def test_unfinished_work_gets_no_hint_yet():
    def stub():
        raise NotImplementedError
    with pytest.raises(nb.CheckFailed, match="Not done yet") as failed:
        nb.check(stub, "fine.", hint="ex2_rollback")
    assert "Hint" not in str(failed.value)


def test_an_unknown_hint_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match="no hint 'ex9_nothing'; known hints: .*ex2_rollback"):
        nb.check(True, "fine.", hint="ex9_nothing")
