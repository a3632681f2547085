"""Hints appear only after a failed check: none is written in a check cell, every one named exists."""

import ast
import json
from pathlib import Path

import pytest

from specdec_helpers.assignment.student.check import CAUSE_HINTS, CRASH_HINTS, CheckFailed, check_part
from specdec_helpers.assignment.parts.decoder import PARTS
from specdec_helpers.present import notebook_help
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
    graded = set(PARTS) | set(CRASH_HINTS.values()) | set(CAUSE_HINTS.values())  # shown by `check_part`
    assert len(calls) >= len(set(HINTS) - graded)
    named = set()
    for name, exercise, call in calls:
        inline = call.args[2].value if len(call.args) > 2 and isinstance(call.args[2], ast.Constant) else ""
        assert not inline, f"{name} {exercise}: a hint written in the check cell is read before trying: {inline!r}"
        hints = [k.value.value for k in call.keywords if k.arg == "hint"]
        if hints:
            assert hints == [exercise] and exercise in HINTS, (name, exercise, hints)
            named.add(exercise)
    assert named | graded == set(HINTS), f"hints no notebook uses: {sorted(set(HINTS) - named - graded)}"


def test_a_hint_shows_only_after_a_failure_and_grows_on_the_second(capsys):
    _failures.pop("ex2_cache_lengths", None)
    notebook_help.check(lambda: True, "fine.", hint="ex2_cache_lengths")
    assert "Hint" not in capsys.readouterr().out
    nudge, fuller = HINTS["ex2_cache_lengths"]
    with pytest.raises(notebook_help.CheckFailed) as first:
        notebook_help.check(lambda: False, "fine.", hint="ex2_cache_lengths")
    assert nudge in str(first.value) and fuller not in str(first.value)
    with pytest.raises(notebook_help.CheckFailed) as second:
        notebook_help.check(False, "fine.", hint="ex2_cache_lengths")
    assert fuller in str(second.value)


def test_unfinished_work_gets_no_hint_yet():
    def stub():
        raise NotImplementedError

    with pytest.raises(notebook_help.CheckFailed, match="Not done yet") as failed:
        notebook_help.check(stub, "fine.", hint="ex2_cache_lengths")
    assert "Hint" not in str(failed.value)


def test_an_unknown_hint_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match="no hint 'ex9_nothing'; known hints: .*ex2_cache_lengths"):
        notebook_help.check(True, "fine.", hint="ex9_nothing")


@pytest.mark.slow
def test_a_graded_check_names_a_stale_draft_cache_and_its_hint_grows():
    """Rejected draft tokens left in the draft cache: the crash text alone ("cannot reshape tensor of 0
    elements") says nothing; the check cell's hint names the mistake, and more on the second failure."""
    import torch

    from specdec_helpers.core.cache import cache_length, new_cache

    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids, attention_mask=None, num_speculative_tokens=5):
        if self.draft_cache is None:
            self.draft_cache = new_cache(self.draft_model)
        cache, tokens = self.draft_cache, []
        fed = input_ids[:, cache_length(cache) :]  # never cropped: the last round's rejected tokens stay
        for _ in range(num_speculative_tokens):
            fed = self.draft_model(input_ids=fed, cache=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(fed)
        return torch.cat(tokens, dim=1)

    _failures.pop("draft_stale_cache", None)
    nudge, fuller = HINTS["draft_stale_cache"]
    with pytest.raises(CheckFailed) as first:
        check_part("draft", generate_draft_tokens=generate_draft_tokens)
    assert nudge in str(first.value) and fuller not in str(first.value)
    with pytest.raises(CheckFailed) as second:
        check_part("draft", generate_draft_tokens=generate_draft_tokens)
    assert fuller in str(second.value)
