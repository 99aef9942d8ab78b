"""Every option of every `benchmaker` command says what it does in `--help` (the
help showed only names and types, because the docstrings' parameter sections were in a
form cyclopts does not parse), in one vocabulary: --concurrency for what is in flight,
--rate for open-loop arrivals, --workers N|auto, no --empty-* and no --no-* but for the
switches that are on by default; the old spellings still work, hidden."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmaker.recipes.app import app
from benchmaker.recipes.cli import main  # registers every command on the app


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
    # the panels in the order of GROUPS (the main job first), --help and --version last
    titles = re.findall(r"^╭─ (.+?) ─", text, re.M)
    assert titles == [*GROUPS, "Options"], text
    assert re.findall(r"^│ (-[-\w]+)", text.split("─ Options ─", 1)[1], re.M) == ["--help", "--version"]
    for title, names in GROUPS.items():
        block = text.split(f"─ {title} ─", 1)[1].split("╰", 1)[0]
        assert sorted(re.findall(r"^│ ([a-z-]+)\s", block, re.M)) == sorted(names), title


# --- one vocabulary ----------------------------------------------------------------------------

# the switches that are on by default (or on a terminal): only they have a --no- form
ON_BY_DEFAULT = {"--no-stream", "--no-progress"}
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"


def _options(command: tuple[str, ...], capsys) -> dict[str, str]:
    """The options of `benchmaker COMMAND --help`: each name (a --no- form too) -> its
    type as the help shows it ("" for a switch)."""
    out: dict[str, str] = {}
    for line in _help_text(command, capsys).splitlines():
        m = re.match(r"^│\s*\*?\s*(--[\w-]+(?: -?-[\w-]+)*)(?:\s+([A-Z][A-Z.\[\]|]*))?", line)
        if m:
            for name in m.group(1).split():
                out[name] = m.group(2) or ""
    return out


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_has_no_empty_or_needless_no_flags(command, capsys):
    names = set(_options(command, capsys))
    assert {n for n in names if n.startswith("--empty-")} == set()
    assert {n for n in names if n.startswith("--no-")} <= ON_BY_DEFAULT
    assert names & {"--concurrency-sweep", "--rate-sweep", "--loads"} == set()  # hidden old spellings


def test_concurrency_rate_and_workers_are_named_and_typed_alike_on_every_command(capsys):
    options = {" ".join(c): _options(c, capsys) for c in COMMANDS}
    # requests, commands or episodes in flight: --concurrency (a list of points on a sweep)
    assert {c for c, o in options.items() if "--concurrency" in o} == {
        "llm",
        "http",
        "sglang",
        "sandbox",
        "calibrate",
        "trajectory-replay",
        "swebench",
        "llm-sweep",
        "swebench-replay",
    }
    assert options["llm"]["--concurrency"] == options["http"]["--concurrency"] == "INT"
    assert options["llm-sweep"]["--concurrency"] == options["swebench-replay"]["--concurrency"] == "STR"
    # open-loop arrivals: --rate SPEC (repeatable on a sweep)
    assert {c for c, o in options.items() if "--rate" in o} == {
        "llm",
        "http",
        "sglang",
        "sandbox",
        "llm-sweep",
        "swebench-replay",
    }
    assert options["llm-sweep"]["--rate"] == options["swebench-replay"]["--rate"] == "STR..."
    # worker processes: N or auto on every command that has them
    workers = {c: o["--workers"] for c, o in options.items() if "--workers" in o}
    assert set(workers) == {"llm", "http", "sglang", "run", "swebench-replay"}
    assert set(workers.values()) == {"STR"}
    # how long load is sent: --duration with a unit (10s, 2m) or a number of seconds
    durations = {c: o["--duration"] for c, o in options.items() if "--duration" in o}
    assert set(durations) == {
        "llm",
        "http",
        "sglang",
        "sandbox",
        "trajectory-replay",
        "llm-sweep",
        "swebench-replay",
        "calibrate",
    }
    assert set(durations.values()) == {"STR"}


def test_the_synthetic_prompt_length_is_input_words_on_llm_and_llm_sweep(capsys):
    options = {c: _options((c,), capsys) for c in ("llm", "llm-sweep")}
    assert options["llm"]["--input-words"] == "INT..." and options["llm-sweep"]["--input-words"] == "INT"
    assert all("--prompt-words" not in o for o in options.values())  # the old spelling: hidden
    base = ["llm-sweep", "--base-url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1"]
    for flag in ("--input-words", "--prompt-words"):  # refused before Prefect starts, named once
        assert main([*base, flag, "0"]) == 2
        assert capsys.readouterr().err == "benchmaker: error: --input-words: expected 1..10000000 (got 0)\n"


def test_a_sweep_duration_takes_a_unit_and_an_error_names_the_flag_once(capsys):
    # refused before Prefect starts: the parsed seconds reach the range check (0 s), a
    # text that is no duration is named with the flag
    base = ["llm-sweep", "--base-url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1"]
    assert main([*base, "--duration", "0s"]) == main([*base, "--duration", "soon"]) == 2
    replay = ["swebench-replay", "--logs", str(EXAMPLE), "--dry-run", "--duration", "soon"]
    assert main(replay) == 2
    assert capsys.readouterr().err.splitlines() == [
        "benchmaker: error: --duration: expected seconds in (0, 2592000] (got 0)",
        *["benchmaker: error: --duration: expected a duration like 500ms, 10s, 2m (got 'soon')"] * 2,
    ]


def _plan(capsys, tmp_path: Path, *flags: str) -> tuple[int, str]:
    argv = ["swebench-replay", "--logs", str(EXAMPLE), *flags, "--dry-run", "--out-dir", str(tmp_path / "a")]
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_old_spellings_still_work_hidden(tmp_path, capsys):
    new = _plan(capsys, tmp_path, "--concurrency", "1,4", "--workers", "auto")
    assert new[0] == 0 and new[1].startswith("plan: 2 sweep point(s) x 1 trajectory(ies)"), new
    assert _plan(capsys, tmp_path, "--concurrency-sweep", "1,4", "--workers", "auto") == new
    assert _plan(capsys, tmp_path, "--concurrency", "1", "--concurrency-sweep", "4") == (
        2,
        "benchmaker: error: --concurrency and --concurrency-sweep: give one (--concurrency-sweep is its old name)\n",
    )
    assert _plan(capsys, tmp_path, "--workers", "two") == (
        2,
        "benchmaker: error: --workers: expected a whole number >= 1 or 'auto' (got 'two')\n",
    )
    # llm-sweep: --loads is --rate, --concurrency-sweep is --concurrency (refused here before Prefect starts)
    base = ["llm-sweep", "--base-url", "http://127.0.0.1:9", "--model", "m"]
    assert main([*base, "--loads", "posson:1"]) == main([*base, "--rate", "posson:1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == err[1] and err[0].startswith("benchmaker: error: --rate: unknown load model 'posson'"), err
    assert main([*base, "--concurrency-sweep", "0"]) == main([*base, "--concurrency", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["benchmaker: error: --concurrency: expected integers >= 1 (got 0)"] * 2


@pytest.mark.parametrize("command", [(), *COMMANDS], ids=lambda c: " ".join(c) or "root")
def test_help_names_no_module_or_source_file(command, capsys):
    # a user reads docs/ pages, not our modules: no `benchmaker.x.y`, no `.py` or `.sql` file
    text = " ".join(_help_text(command, capsys).replace("│", " ").split())
    assert re.findall(r"benchmaker\.[a-z_]+\.\w+|[\w/]+\.(?:py|sql)\b", text) == [], text


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_keeps_the_angle_bracket_placeholders_of_the_docstring(command, capsys):
    # the help is markdown: a bare `DIR/<table>/` lost `<table>` as an HTML tag
    # ("under DIR//date=YYYY-MM-DD/run_id=/"), so such a placeholder goes in backticks
    target = app
    for name in command:
        target = target[name]
    doc = target.default_command.__doc__ or ""
    text = " ".join(_help_text(command, capsys).replace("│", " ").split())
    missing = [p for p in re.findall(r"<[A-Za-z][^<>\n]*>", doc) if " ".join(p.split()) not in text]
    assert missing == [], f"benchmaker {' '.join(command)} --help lost {missing}"
