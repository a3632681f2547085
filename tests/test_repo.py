"""Repository conventions that users rely on."""
from __future__ import annotations

import re
from pathlib import Path

import specdec_helpers.__main__ as cli

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    setup = ROOT.joinpath("README.md").read_text().split("## Set-up")[1].split("\n## ")[0]
    return re.findall(r"```bash\n(.+?)\n```", setup)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    demo, tests = readme_commands()
    assert "specdec_helpers demo" in demo and "pytest" in tests
    ci_lines = ROOT.joinpath(".ci/run").read_text().splitlines()
    assert tests in ci_lines  # CI runs the README's test command, verbatim


def test_every_cli_command_module_has_main():
    import importlib

    for name, (module, _) in cli.COMMANDS.items():
        assert callable(importlib.import_module(module).main), name


def test_cli_help_lists_commands(capsys):
    assert cli.main([]) == 0
    assert cli.main(["no-such-command"]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)
