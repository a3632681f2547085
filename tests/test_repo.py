"""Repository conventions that users rely on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specdec_helpers import cli

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    setup = ROOT.joinpath("README.md").read_text().split("## Set-up")[1].split("\n## ")[0]
    return re.findall(r"```bash\n(.+?)\n```", setup)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    demo, tests = readme_commands()
    assert "specdec_helpers demo" in demo and "pytest" in tests
    ci_lines = ROOT.joinpath(".ci/run").read_text().splitlines()
    assert tests in ci_lines  # CI runs the README's test command, verbatim


def test_the_files_run_first_exist():
    from longest_first import LONGEST_FIRST

    names = {p.name for folder in ("tests", "notebooks") for p in ROOT.joinpath(folder).iterdir()}
    assert set(LONGEST_FIRST) <= names, set(LONGEST_FIRST) - names


def test_every_cli_command_is_callable_with_help(capsys):
    for name, (command, _) in cli.COMMANDS.items():
        with pytest.raises(SystemExit) as exit_:
            command(["--help"])
        assert exit_.value.code == 0, name
        assert f"python -m specdec_helpers {name}" in capsys.readouterr().out


def test_cli_help_lists_commands(capsys):
    assert cli.main([]) == 0
    assert cli.main(["no-such-command"]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)


def test_ci_formats_and_lints_with_the_ruff_a_developer_installs():
    """.ci/run installs ruff on a line of its own (it lints before the README's install line); a minor version's
    formatting can differ, so it must be the range the test extra and requirements-dev.txt give a developer."""
    import tomllib

    extra = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    (spec,) = [s for s in extra if s.startswith("ruff")]
    assert f'pip install -q "{spec}" && ruff format --check . && ruff check .' in ROOT.joinpath(".ci/run").read_text()
    assert spec in ROOT.joinpath("requirements-dev.txt").read_text().splitlines()
