"""Every option of every `benchmaker` command says what it does in `--help` (the
help showed only names and types, because the docstrings' parameter sections were in a
form cyclopts does not parse)."""

from __future__ import annotations

import re

import pytest

import benchmaker.recipes.cli  # noqa: F401 - registers every command on the app
from benchmaker.recipes.app import app


def _leaf_commands(application, prefix=()):
    for name, _sub in application._commands.items() if hasattr(application, "_commands") else []:
        if name.startswith("-"):
            continue
        sub_app = application[name]
        if sub_app.default_command is not None:
            yield (*prefix, name)
        yield from _leaf_commands(sub_app, (*prefix, name))


COMMANDS = sorted(set(_leaf_commands(app)))


def _help_text(command: tuple[str, ...], capsys) -> str:
    from rich.console import Console

    console = Console(width=400, force_terminal=False, color_system=None)
    app([*command, "--help"], console=console, exit_on_error=False, print_error=False, result_action="return_value")
    return capsys.readouterr().out


def test_there_are_commands_to_check():
    assert {("llm",), ("swebench-replay",), ("convert",), ("sql",)} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_option_has_a_description(command, capsys):
    text = _help_text(command, capsys)
    undescribed = []
    for line in text.splitlines():
        m = re.match(r"^│\s*\*?\s*(--[\w-]+(?: --[\w-]+)*)(?:\s+[A-Z][A-Z.\[\]|]*)?\s*(.*?)\s*│?$", line)
        if not m:
            continue
        described = re.sub(r"\[(default|required|env var)[^\]]*\]", "", m.group(2)).strip()
        if not described:
            undescribed.append(m.group(1))
    assert undescribed == [], f"benchmaker {' '.join(command)} --help: no description for {undescribed}"


def test_the_root_help_lists_the_commands_by_job(capsys):
    from benchmaker.recipes.cli import COMMANDS as REGISTERED
    from benchmaker.recipes.cli import GROUPS

    assert sorted(n for names in GROUPS.values() for n in names) == sorted(REGISTERED)  # each in one group
    text = _help_text((), capsys)
    titles = [t for t in GROUPS if f"─ {t} ─" in text]
    assert titles == list(GROUPS), text
    for title, names in GROUPS.items():
        block = text.split(f"─ {title} ─", 1)[1].split("╰", 1)[0]
        assert sorted(re.findall(r"^│ ([a-z-]+)\s", block, re.M)) == sorted(names), title
