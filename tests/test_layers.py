"""The house rules that run: the import contract of docs/architecture.md, no import cycle
between packages or files, no package above a quarter of the source, the package sizes
docs/architecture.md states within 10%, one top-level package in the wheel.

The contract is read from the code's own import statements (every `import` and
`from ... import`, at module level or inside a function: a late import is still a
dependency). Layers, low to high; a module may import its own layer's package and any
lower layer, never a higher one, and never a sibling package of its layer:

    0  benchmaker.lazy_exports, benchmaker.progress
    1  benchmaker.engine
    2  benchmaker.apis
    3  benchmaker.testing (scripted local servers that speak the wire APIs)
    4  benchmaker.trajectories
    5  benchmaker.replay_server | benchmaker.agent   (siblings: neither imports the other)
    6  benchmaker.workloads
    7  benchmaker.sweep
    8  benchmaker.warehouse
    9  benchmaker.tasks
    10 benchmaker.flows
    11 benchmaker.recipes (the CLI)

The top-level `benchmaker/__init__.py` names its public names lazily (strings, not
imports), so it sits outside the layers.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "benchmaker"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("benchmaker.lazy_exports", "benchmaker.progress"),
    ("benchmaker.engine",),
    ("benchmaker.apis",),
    ("benchmaker.testing",),
    ("benchmaker.trajectories",),
    ("benchmaker.replay_server", "benchmaker.agent"),
    ("benchmaker.workloads",),
    ("benchmaker.sweep",),
    ("benchmaker.warehouse",),
    ("benchmaker.tasks",),
    ("benchmaker.flows",),
    ("benchmaker.recipes",),
)
# layers whose units may import each other (shared foundations, not stages)
_OPEN_LAYERS = {0}


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement's dependency: importer module -> imported module, at `line`
    of the importer's file."""

    importer: str
    imported: str
    line: int


def module_name(path: Path, root: Path = PACKAGE) -> str:
    """The dotted name of a source file under `root` (the `benchmaker` folder)."""
    parts = ["benchmaker", *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path = PACKAGE) -> dict[str, Path]:
    """{module name: file} of every module of the package, through the symlinked
    top-level folders (flows/, tasks/, ...)."""
    found = {}
    for folder, _dirs, files in os.walk(root, followlinks=True):
        for file in files:
            if file.endswith(".py"):
                path = Path(folder) / file
                found[module_name(path, root)] = path
    return dict(sorted(found.items()))


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> Iterator[Import]:
    """The benchmaker modules that `name` (its file `path`) imports. `from pkg import x`
    names the module `pkg.x` when that is a module, else `pkg`."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "benchmaker":
                    yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.split(".")[0] != "benchmaker":
                continue
            subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules]
            if len(subs) < len(node.names):  # some names are attributes of the module itself
                yield Import(name, module, node.lineno)
            for sub in subs:
                yield Import(name, sub, node.lineno)


def unit_of(module: str) -> tuple[str, int] | None:
    """(unit, layer index) of a module, None outside every layer (the package root)."""
    for index, units in enumerate(LAYERS):
        for unit in units:
            if module == unit or module.startswith(unit + "."):
                return unit, index
    return None


def contract_violations(modules: dict[str, Path], root: Path = PACKAGE) -> list[str]:
    """Every import that breaks the layers, as `file:line: importer -> imported (why)`,
    the file relative to the folder that holds `root`."""
    out = []
    for name, path in modules.items():
        own = unit_of(name)
        if own is None:
            continue
        for imp in imports_of(name, path, modules):
            target = unit_of(imp.imported)
            if target is None or target[0] == own[0]:
                continue
            where = f"{path.relative_to(root.parent)}:{imp.line}: {name} -> {imp.imported}"
            if target[1] > own[1]:
                out.append(f"{where} (imports a higher layer: {target[0]})")
            elif target[1] == own[1] and own[1] not in _OPEN_LAYERS:
                out.append(f"{where} (imports a sibling of its layer: {target[0]})")
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _graphs(modules: dict[str, Path]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    files: dict[str, set[str]] = {}
    units: dict[str, set[str]] = {}
    for name, path in modules.items():
        for imp in imports_of(name, path, modules):
            if imp.imported in modules and imp.imported != name:
                files.setdefault(name, set()).add(imp.imported)
            a, b = unit_of(name), unit_of(imp.imported)
            if a and b and a[0] != b[0]:
                units.setdefault(a[0], set()).add(b[0])
    return files, units


def test_every_import_keeps_the_layers() -> None:
    assert contract_violations(source_files()) == []


def test_the_contract_catches_an_import_that_breaks_a_layer(tmp_path: Path) -> None:
    root = tmp_path / "benchmaker"
    (root / "engine").mkdir(parents=True)
    (root / "sweep").mkdir()
    (root / "agent").mkdir()
    (root / "replay_server").mkdir()
    for pkg in ("engine", "sweep", "agent", "replay_server"):
        (root / pkg / "__init__.py").write_text("")
    (root / "sweep" / "plan.py").write_text("X = 1\n")
    (root / "engine" / "runner.py").write_text("import os\n\n\ndef f():\n    from benchmaker.sweep import plan\n")
    (root / "agent" / "harness.py").write_text("from benchmaker.replay_server import server\n")
    (root / "replay_server" / "server.py").write_text("from ..engine.runner import f\n")
    modules = source_files(root)
    found = [v.split(": ", 1)[1] for v in contract_violations(modules, root)]
    assert found == [
        "benchmaker.agent.harness -> benchmaker.replay_server.server (imports a sibling of its layer: benchmaker.replay_server)",
        "benchmaker.engine.runner -> benchmaker.sweep.plan (imports a higher layer: benchmaker.sweep)",
    ]


def test_no_import_cycle_between_packages_or_files() -> None:
    files, units = _graphs(source_files())
    assert cycles(units) == []
    assert cycles(files) == []


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def package_lines(modules: dict[str, Path]) -> dict[str, int]:
    """{package (`benchmaker.x`, a top-level module counts as one): lines of its .py files}."""
    lines: dict[str, int] = {}
    for name, path in modules.items():
        unit = ".".join(name.split(".")[:2])
        lines[unit] = lines.get(unit, 0) + len(path.read_text(encoding="utf-8").splitlines())
    return lines


def test_no_package_holds_more_than_a_quarter_of_the_source() -> None:
    lines = package_lines(source_files())
    total = sum(lines.values())
    assert {u: n for u, n in lines.items() if n > total / 4} == {}


_DOC_SIZE = re.compile(r"^\| `(benchmaker\.\w+)` \| ([\d,]+) \|", re.MULTILINE)
_DOC_TOTAL = re.compile(r"about ([\d,]+) in all")


def doc_size_errors(doc: str, lines: dict[str, int]) -> list[str]:
    """One line per size docs/architecture.md states (a package's row, the total) that is
    off by more than 10% of the real count `lines` gives, or that names no package."""
    stated = [(m[1], int(m[2].replace(",", ""))) for m in _DOC_SIZE.finditer(doc)]
    total = _DOC_TOTAL.search(doc)
    if total is not None:
        stated.append(("in all", int(total[1].replace(",", ""))))
    real = {**lines, "in all": sum(lines.values())}
    errors = []
    for unit, size in stated:
        if unit not in real:
            errors.append(f"{unit}: no such package (stated {size:,} lines)")
        elif abs(size - real[unit]) > real[unit] / 10:
            errors.append(f"{unit}: stated {size:,} lines, has {real[unit]:,}")
    return errors


def test_the_sizes_in_the_architecture_doc_are_within_ten_percent() -> None:
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    lines = package_lines(source_files())
    stated = {m[1] for m in _DOC_SIZE.finditer(doc)}
    assert stated == set(lines) - {"benchmaker", "benchmaker.lazy_exports"}  # every package has its row
    assert _DOC_TOTAL.search(doc) is not None
    assert doc_size_errors(doc, lines) == []


def test_a_size_off_by_more_than_ten_percent_is_an_error() -> None:
    doc = "| `benchmaker.engine` | 1,100 | x |\n| `benchmaker.apis` | 889 | y |\n| `benchmaker.gone` | 5 | z |\n"
    lines = {"benchmaker.engine": 1000, "benchmaker.apis": 1000}
    assert doc_size_errors(doc + "about 2,000 in all", lines) == [
        "benchmaker.apis: stated 889 lines, has 1,000",  # 111 off: more than 100
        "benchmaker.gone: no such package (stated 5 lines)",
    ]  # engine's 100 off is within 10%; the total is exact
    assert doc_size_errors("about 2,300 in all", lines) == ["in all: stated 2,300 lines, has 2,000"]


def test_tests_and_tools_import_the_one_package_only() -> None:
    old = ("replay", "flows", "tasks", "workloads", "recipes", "warehouse")
    found = []
    for folder in ("tests", "benchmarks", "conformance", "examples"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and not node.level
                    else []
                )
                found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in old]
    assert found == []


@pytest.mark.slow  # builds the wheel (~10-30 s)
def test_the_wheel_installs_exactly_one_top_level_package(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("benchmaker-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"benchmaker"}
    for member in (
        "benchmaker/flows/swebench_replay.py",
        "benchmaker/tasks/sweep.py",
        "benchmaker/recipes/cli.py",
        "benchmaker/warehouse/migrations/0001_init.sql",
        "benchmaker/engine/sql/summary.sql",
        "benchmaker/sweep/sql/sweep_summary.sql",
    ):
        assert member in names


def private_imports(modules: dict[str, Path]) -> list[str]:
    """Every `from benchmaker.x import _name` of a private function, class or constant
    (not a module) defined in another module, as `file:line: importer <- module._name`."""
    out = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("benchmaker"):
                out += [
                    f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name} <- {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                    and not a.name.startswith("__")
                    and f"{node.module}.{a.name}" not in modules
                ]
    return out


def test_no_private_name_is_imported_across_modules() -> None:
    assert private_imports(source_files()) == []


def test_no_comment_cites_a_map_outside_the_repository() -> None:
    """The code's map is docs/: no source, test, benchmark or SQL file cites the first
    architecture's sections, the style sheet's, a notes file or an issue tracker's
    numbers, none of which the repository holds."""
    pattern = re.compile(
        "|".join(["DESIGN " + "§", "STYLE " + "§", r"issues? #\d+", r"\(#\d+\)", "notes/" + "CONTRACTS"])
    )
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for top in (
            "benchmaker",
            "flows",
            "tasks",
            "workloads",
            "recipes",
            "warehouse",
            "benchmarks",
            "conformance",
            "tests",
        )
        for path in sorted((REPO / top).rglob("*"))
        if path.suffix in (".py", ".sql", ".sh") and "data" not in path.relative_to(REPO).parts[:2]
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
