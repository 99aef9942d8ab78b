"""The `benchmaker` command-line app (cyclopts). Recipe modules register their commands
on `app` with `@app.command`; `recipes.cli` imports them all and runs the app."""

from __future__ import annotations

from cyclopts import App

app = App(
    name="benchmaker",
    help="Benchmark LLM/HTTP endpoints and replay coding-agent runs; results go to DuckDB.",
    version_flags=["--version"],
)
