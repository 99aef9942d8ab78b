"""The `benchmaker` command-line app (cyclopts). Recipe modules register their commands
on `app` with `@app.command`; `recipes.cli` imports them all and runs the app.

A list option takes several values after one flag, as a shell glob gives them, and
repeats as well: `--logs a.traj b.traj` == `--logs a.traj --logs b.traj`.
"""

from __future__ import annotations

from cyclopts import App, Parameter

app = App(
    name="benchmaker",
    help="Benchmark LLM/HTTP endpoints and replay coding-agent runs; results go to DuckDB.",
    version_flags=["--version"],
    default_parameter=Parameter(consume_multiple=True),
)
