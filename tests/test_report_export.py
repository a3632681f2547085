"""Where the report's template comes from and where notebook 05 exports, in a checkout and outside one
(a pip-installed kit on Colab), and the report's greedy-check wording."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec_helpers.present import benchmarking, report

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_ships_the_course_template():
    """The packaged template is the repository's report/REPORT_TEMPLATE.md (a link in the checkout; a wheel
    and a release copy the file), so a pip-installed kit fills the real template, not a stand-in."""
    assert report.PACKAGED_TEMPLATE.is_file()
    assert report.PACKAGED_TEMPLATE.read_text() == (ROOT / "report" / "REPORT_TEMPLATE.md").read_text()
    text = (ROOT / "pyproject.toml").read_text()
    assert '"data/*/*"' in text  # package-data that takes data/report/REPORT_TEMPLATE.md into a wheel


def test_template_outside_a_checkout_is_the_packaged_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # e.g. /content on Colab: no ./report/
    assert report.template_path() == report.PACKAGED_TEMPLATE
    mine = tmp_path / "report" / "REPORT_TEMPLATE.md"
    mine.parent.mkdir()
    mine.write_text("# mine\n")
    assert report.template_path().resolve() == mine  # the student's own, edited template wins
    with pytest.raises(FileNotFoundError, match="--template"):
        report.template_path(tmp_path / "nope.md")


def test_no_template_at_all_is_an_error_not_a_silent_stand_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(report, "PACKAGED_TEMPLATE", tmp_path / "missing.md")
    with pytest.raises(FileNotFoundError, match="reinstall the kit"):
        report.template_path()


def test_export_dir_finds_the_checkout_from_its_notebooks_folder(tmp_path, monkeypatch):
    """Run from notebooks/ of a checkout (installed editable or not): the checkout's report/, never
    notebooks/report/; outside a checkout: ./report; $SPECDEC_EXPORT_DIR wins."""
    monkeypatch.delenv("SPECDEC_EXPORT_DIR", raising=False)
    checkout = tmp_path / "kit"
    for folder in ("notebooks", "report"):
        (checkout / folder).mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(checkout / "notebooks")
    assert benchmarking.export_dir() == checkout.resolve() / "report"
    elsewhere = tmp_path / "content"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert benchmarking.export_dir() == elsewhere.resolve() / "report"
    monkeypatch.setenv("SPECDEC_EXPORT_DIR", str(tmp_path / "x"))
    assert benchmarking.export_dir() == (tmp_path / "x").resolve()


@pytest.mark.parametrize(
    "rows, words",
    [
        ([{"identical": True, "matches_greedy": True}], "identical to greedy decoding"),
        ([{"identical": True}, {"identical": False, "matches_greedy": True}], "up to numerical near-ties"),
        ([{"identical": False, "matches_greedy": False}], "DIFFERS"),
    ],
)
def test_report_says_how_outputs_compared_with_greedy(rows, words):
    assert words in report._greedy_words(rows)
