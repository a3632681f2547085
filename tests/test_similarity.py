"""Copied graded cells are flagged (copydetect): disguised copies of the reference, a copy between two
classmates, a paste of the kit's own code; independently written correct solutions and the released
stubs are not. Nothing here runs student code or grades: seconds."""

from __future__ import annotations

import json

import pytest

import classroom_handins as handins
from specdec_helpers.assignment.grading import similarity
from specdec_helpers.assignment.grading.submission import reference_sources

COMPARED = set(similarity.PARTS)


@pytest.fixture(scope="module")
def detector():
    return similarity.Detector(reference_sources())


def flags(matches) -> set:
    return {(m.part, m.student, m.other) for m in matches}


@pytest.mark.parametrize("how", handins.COPY_KINDS)
def test_a_disguised_copy_of_the_reference_is_flagged_in_every_part(detector, how):
    copy = handins.copied_sources(how)
    assert copy != reference_sources()  # really disguised
    matches = detector.compare({"copier": copy})
    assert flags(matches) == {(part, "copier", "reference") for part in COMPARED}
    assert all(m.similarity >= similarity.PAIR_THRESHOLD for m in matches)


def test_independent_correct_solutions_are_not_flagged(detector):
    students = {f"ind_{a}": handins.independent_sources(a) for a in "ABC"}
    assert detector.compare(students) == []
    for part in COMPARED:  # and the margin is real, not a hair below the threshold
        cells = [reference_sources()[part]] + [s[part] for s in students.values()]
        shares = [
            max(similarity.similarity(a, b, part, reference_sources()))
            for i, a in enumerate(cells)
            for b in cells[i + 1 :]
        ]
        assert max(shares) < similarity.PAIR_THRESHOLD - 0.1, (part, shares)


def test_a_copy_between_classmates_is_flagged_for_both_and_only_for_the_copied_part(detector):
    students = {
        "ana": handins.independent_sources("A"),
        "ben": handins.independent_sources("B"),
        "ana_friend": handins.disguise(handins.INDEPENDENT["A"], "renamed+reordered"),
        "ben_friend": handins.disguise({"verify": handins.INDEPENDENT["B"]["verify"]}, "renamed"),
    }
    got = flags(detector.compare(students))
    assert got == {(part, "ana", "ana_friend") for part in COMPARED} | {("verify", "ben", "ben_friend")}


def test_kit_code_pasted_into_the_cells_is_flagged_against_the_kit(detector):
    matches = detector.compare({"paster": handins.kit_copy_sources()})
    assert flags(matches) == {(part, "paster", "kit") for part in COMPARED}
    verify = next(m for m in matches if m.part == "verify")
    assert "core/reference_parts.py" in verify.other_label and "<mark>" in verify.student_html


def test_the_reference_itself_is_not_a_copy_of_the_kit(detector):
    assert {m.other for m in detector.compare({"ref": reference_sources()})} == {"reference"}


def test_stubs_and_missing_parts_match_nothing(detector):
    stub = {part: handins.strip(source) for part, source in reference_sources().items()}
    assert detector.compare({"s1": stub, "s2": dict(stub), "empty": {}, "one": {"draft": stub["draft"]}}) == []


def test_a_short_shared_snippet_is_not_a_copy(detector):
    hang = "import time\nwhile True:\n    time.sleep(1)\n"
    students = {
        "a": {"draft": handins.answer("draft", [hang])},
        "b": {"draft": handins.answer("draft", [hang + "x = 1\n"])},
    }
    assert detector.compare(students) == []


def test_the_report_shows_each_pair_side_by_side(detector, tmp_path):
    matches = detector.compare({"copier": handins.copied_sources("renamed"), "paster": handins.kit_copy_sources()})
    path = similarity.write_report(matches, tmp_path / "similarity.html", note="test")
    html = path.read_text()
    assert html.count("<section") == len(matches) > 0
    assert html.count('<div class="pair">') == len(matches) and "<mark>" in html
    assert "copier" in html and "paster" in html and "core/reference_parts.py" in html
    assert "no points were taken" in html
    assert json.dumps([m.brief() for m in matches])  # the JSON summary serializes


def test_kit_functions_are_found_in_the_kit_modules():
    names = [name for name, _ in similarity.functions_of(similarity.PACKAGE / "core" / "drafters.py")]
    assert "ModelDrafter.propose" in names
