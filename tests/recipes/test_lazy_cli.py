"""The CLI registers its commands lazily (benchmaker.recipes.cli COMMANDS, cyclopts import paths):
a command imports only its own module, so the commands that run no flow never import
Prefect, Dask, plotly or the flows, and the console script skips the
interpreter's teardown once the command has returned (benchmaker.recipes.cli._fast_exit). Each
check runs in a fresh interpreter: this test process has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("prefect", "dask", "distributed", "plotly", "benchmaker.flows", "prefect_dask")


def _python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, COLUMNS="200"),
    )


def _imported_by(argv: list[str]) -> tuple[int, list[str], str]:
    """(exit code, top-level packages of HEAVY imported, stdout) of main(argv) in a fresh interpreter."""
    code = (
        "import json, sys\nfrom benchmaker.recipes.cli import main\nrc = main(json.loads(sys.argv[1]))\n"
        "print('\\nIMPORTED', json.dumps(sorted(h for h in json.loads(sys.argv[2]) if any(m == h or m.startswith(h + '.') for m in sys.modules))))\n"
        "print('RC', rc)"
    )
    proc = _python(code, json.dumps(argv), json.dumps(HEAVY))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    imported = json.loads(next(line for line in lines if line.startswith("IMPORTED "))[len("IMPORTED ") :])
    rc = int(next(line for line in lines if line.startswith("RC "))[3:])
    return rc, imported, proc.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["llm", "--help"],
        ["convert", "--help"],
        ["sql", "--help"],
        ["runs", "--help"],
        ["report", "--help"],
        ["http", "--help"],
        ["serve-replay", "--help"],
        ["swebench-replay", "--help"],
    ],
    ids=" ".join,
)
def test_commands_without_a_flow_import_no_prefect_nor_plotly(argv):
    rc, imported, out = _imported_by(argv)
    assert rc == 0
    assert "Usage: benchmaker" in out
    assert imported == []


def test_sql_runs_without_prefect(tmp_path):
    import duckdb

    db = tmp_path / "w.duckdb"
    duckdb.connect(str(db)).close()
    rc, imported, out = _imported_by(["sql", "--warehouse", str(db), "SELECT 41 + 1 AS answer"])
    assert rc == 0
    assert "42" in out
    assert imported == []


def test_convert_runs_without_prefect(tmp_path):
    out_file = tmp_path / "t.jsonl"
    rc, imported, _ = _imported_by(
        ["convert", str(REPO / "examples/recordings/tiny-task.pi.jsonl"), "-o", str(out_file)]
    )
    assert rc == 0
    assert imported == []
    assert len(out_file.read_text().splitlines()) == 1  # one trajectory


def test_every_command_is_registered_lazily_and_resolves():
    """After every recipe module is imported, each command is still the lazy spec of
    COMMANDS (a module registering a command missing from COMMANDS would show up as an
    eager App here), resolves to the attribute its import path names, and its root-help
    description read from the source equals what the resolved command shows."""
    code = r"""
import importlib, json, pkgutil
import recipes, benchmaker.recipes.cli
from cyclopts import App
from cyclopts.command_spec import CommandSpec
from benchmaker.recipes.app import app, source_help
for m in pkgutil.iter_modules(recipes.__path__):
    importlib.import_module(f"recipes.{m.name}")
eager = sorted(n for n, c in app._commands.items() if not n.startswith("-") and not isinstance(c, CommandSpec))
bad = []
for name, path in benchmaker.recipes.cli.COMMANDS.items():
    module, attr = path.split(":")
    target = getattr(importlib.import_module(module), attr)
    sub = app[name]
    if isinstance(target, App):
        ok = sub is target and source_help(path) == target.help
    else:
        ok = sub.default_command is target and source_help(path) == target.__doc__
    if not ok:
        bad.append(name)
print(json.dumps({"eager": eager, "bad": bad, "n": len(benchmaker.recipes.cli.COMMANDS)}))
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    from benchmaker.recipes.cli import COMMANDS

    assert result == {"eager": [], "bad": [], "n": len(COMMANDS)}


def test_root_help_describes_every_command_without_importing_them():
    code = (
        "import sys\nfrom benchmaker.recipes.cli import main\nmain(['--help'])\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith('recipes.') and m not in "
        "('benchmaker.recipes.cli', 'benchmaker.recipes.app')))"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    from benchmaker.recipes.cli import COMMANDS

    listed = {
        line.split()[1]
        for line in proc.stdout.splitlines()
        if line.startswith("│ ") and len(line.split()) > 2 and not line.split()[1].startswith("-")
    }
    assert set(COMMANDS) <= listed
    assert "Run one SQL query on a read-only connection to the warehouse" in proc.stdout  # sql's description
    assert proc.stdout.splitlines()[-1] == "LOADED []"


def test_console_script_exits_with_the_commands_code_and_complete_output(tmp_path):
    """main() without argv (the console script) ends the process through _fast_exit:
    the command's exit code and everything it printed, also when stdout is a pipe."""
    script = "import sys\nfrom benchmaker.recipes.cli import main\nsys.exit(main())"
    out_file = tmp_path / "t.jsonl"
    ok = _python(script, "convert", str(REPO / "examples/recordings/tiny-task.pi.jsonl"), "-o", str(out_file))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.rstrip().endswith("┘")  # the report table's last line reached the pipe
    assert len(out_file.read_text().splitlines()) == 1
    bad = _python(script, "sql")  # --query missing: exit 2, one error line
    assert bad.returncode == 2
    assert bad.stderr.startswith("benchmaker: error:")
    crash = _python(
        "import sys\nfrom benchmaker.recipes.cli import main\nimport benchmaker.recipes.cli\n"
        "benchmaker.recipes.cli._run = lambda argv: 1 / 0\nsys.exit(main())"
    )
    assert crash.returncode == 1  # no code returned: the usual teardown, with the traceback
    assert "ZeroDivisionError" in crash.stderr
    late = _python(
        "import atexit, sys\natexit.register(lambda: print('EARLIER HANDLER RAN'))\n"
        "from benchmaker.recipes.cli import main\nsys.exit(main())",
        "sql",
    )
    assert late.returncode == 2  # a handler registered before main() still runs: no fast exit then
    assert late.stdout.strip() == "EARLIER HANDLER RAN"
