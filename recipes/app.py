"""The `benchmaker` command-line app (cyclopts). Each recipe module defines its commands
with `@app.command`; `benchmaker.recipes.cli` registers them all LAZILY, by import path
("benchmaker.recipes.bench:llm"), so a command imports only its own module (and `benchmaker
--help` none): `benchmaker sql` never pays for Prefect, Dask or plotly.

A decorator `@app.command` on a function or App that `benchmaker.recipes.cli` already registered
lazily under that name is a no-op: importing the module to run the command must not
register it a second time. The one-line descriptions of the root help come from the
commands' docstrings, read from the source without importing it (`describe_lazy`).

A list option takes several values after one flag, as a shell glob gives them, and
repeats as well: `--logs a.traj b.traj` == `--logs a.traj --logs b.traj`. A switch is
off by default and its flag turns it on (`--dry-run`): no `--no-dry-run`, and no
`--empty-logs` for a list; only a switch that is on by default (or on a terminal) has
its `--no-NAME` form, by `ON_BY_DEFAULT` (`--no-stream`, `--no-progress`).
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable
from typing import Any

from cyclopts import App, Group, Parameter, validators
from cyclopts.command_spec import CommandSpec

__all__ = ["ON_BY_DEFAULT", "BenchmakerApp", "app", "describe_lazy", "source_help", "within"]

# `Annotated[bool, ON_BY_DEFAULT]`: a switch that is on by default (or on a terminal),
# so it has a `--no-NAME` form to turn it off (module docstring)
ON_BY_DEFAULT = Parameter(negative_bool="no-")


class BenchmakerApp(App):
    """cyclopts.App whose `command` skips a function/App already registered lazily
    under the same name (module docstring), and whose help page first fills in the
    descriptions of the lazy commands (`describe_lazy`)."""

    __slots__ = ()

    def command(self, obj: Any = None, name: None | str | Iterable[str] = None, **kwargs: Any) -> Any:
        if obj is not None and not isinstance(obj, str) and name != "*":
            names = (
                ((name,) if isinstance(name, str) else tuple(name))
                if name is not None
                else (obj.name[:1] if isinstance(obj, App) else (self.name_transform(obj.__name__),))
            )
            if names and isinstance(self._commands.get(names[0]), CommandSpec):
                return obj  # resolved from its import path by the lazy registration
        return super().command(obj, name=name, **kwargs)

    def help_print(self, tokens: Any = None, **kwargs: Any) -> None:
        describe_lazy(self)
        super().help_print(tokens, **kwargs)


def within(low: float | None = None, high: float | None = None, *, above: float | None = None) -> Parameter:
    """A cyclopts Parameter for a number flag that must lie in [low, high] (`above`: a
    strict lower bound instead of `low`); NaN is outside every range. Used as
    `port: Annotated[int, within(0, 65535)] = 0`; a value outside is refused by cyclopts
    before the command runs, in one line naming the flag (exit 2):
    `Invalid value "70000" for --port. Must be <= 65535.`"""
    return Parameter(validator=validators.Number(gte=low, lte=high, gt=above))


def source_help(import_path: str) -> str | None:
    """The help text of the command at `import_path` ("module:attr") read from the
    module's source without importing it: the function's docstring, as `__doc__` holds
    it, or the `help=` string of an `App(...)` assigned to `attr`. None when not found."""
    module, _, attr = import_path.partition(":")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    with open(spec.origin, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), spec.origin)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            return ast.get_docstring(node, clean=False)
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets)
            and isinstance(node.value, ast.Call)
        ):
            for kw in node.value.keywords:
                if kw.arg == "help" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    return kw.value.value
    return None


def describe_lazy(application: App) -> None:
    """Give every not yet imported lazy command of `application` its description
    (source_help), for the command list of a help page."""
    for spec in application._commands.values():
        if isinstance(spec, CommandSpec) and not spec.is_resolved and spec.help is None:
            spec.help = source_help(spec.import_path)


app = BenchmakerApp(
    name="benchmaker",
    help="Benchmark LLM/HTTP endpoints and replay coding-agent runs; results go to DuckDB.",
    version_flags=["--version"],
    default_parameter=Parameter(consume_multiple=True, negative_bool=(), negative_iterable=()),
)
# --help and --version under their own title, after the command groups (whose sort keys,
# benchmaker.recipes.cli.GROUPS, are their ranks from 0); a command group such as
# `server` keeps its own "Commands" title
_OPTIONS = Group("Options", sort_key=1_000)
for _flag in (*app.help_flags, *app.version_flags):
    app[_flag].group = (_OPTIONS,)
