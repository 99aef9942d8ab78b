"""README.md and docs/ say what the code does.

- The Quick start is exactly two commands, `make demo` and `make test`, and `make test`
  is what CI runs (.ci/run).
- Every link from README.md into docs/, and every link between docs/ pages, names a
  page that exists (or one of PENDING_PAGES, written on another branch).
- Every `benchmaker` command of a ```sh block in README.md or docs/*.md names a real
  command and only flags that command has (its --help).
- Every `benchmaker` command in README.md's ```sh blocks that uses only bundled files
  runs as written, in README order, in a fresh directory holding the checkout's
  `examples/` (as a clone would), with `.venv/bin` first on PATH and the shell
  expanding globs.

- Every `benchmaker` command in README.md's ```sh blocks aimed at the endpoint
  http://127.0.0.1:8000 runs as written against the bundled scripted server
  (benchmaker.testing.scenario_server), started by the test on a free port that takes
  the place of 8000.

A command is run when it starts with `benchmaker` and has no placeholder (an upper-case
word such as PORT or RUN_ID, `...`), no URL, no absolute or `../` path, every file it
reads is bundled, and it is not a long-running server (`serve-replay`, `record`) or the
local Prefect server's manager (`server`: tests/recipes/test_prefect_server.py). The
others are listed by `test_readme_commands_are_classified` so a new one is seen."""

from __future__ import annotations

import functools
import io
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# docs/ pages other branches write: a link to one may come before the page
PENDING_PAGES = frozenset(
    {
        "api-openai-responses.md",
        "api-anthropic-messages.md",
        "api-gemini.md",
        "log-formats.md",
        "stream-rules.md",
        "shared-host.md",
        "execute-mode-sandbox.md",
        "reading-results.md",
    }
)
_PLACEHOLDER = re.compile(r"(?<![\w-])[A-Z][A-Z0-9_]{1,}(?![\w-])|\.\.\.")
_SKIP_COMMANDS = {"serve-replay", "record", "server"}


def _strip_comment(line: str) -> str:
    """`line` without its shell comment: from a `#` that starts a word outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def readme_commands(text: str) -> list[str]:
    """The shell commands of the ```sh blocks of `text`, in order: backslash
    continuations joined, `# comments` dropped (outside quotes), blank lines skipped."""
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = _strip_comment(line).strip()
            if line:
                out.append(line)
    return out


_OUTPUT_FLAGS = {"-o", "--output", "--out-dir", "--warehouse", "--parquet"}
# the endpoint of the README's `benchmaker llm` commands: the bundled scripted server
# takes its place in test_readme_endpoint_commands_run_on_the_bundled_scripted_server
ENDPOINT = "http://127.0.0.1:8000"


def skip_reason(
    cmd: str, produced: frozenset[str] = frozenset({"trajectories.jsonl"}), *, endpoint: bool = False
) -> str | None:
    """Why `cmd` is not run here (module docstring), or None to run it. `produced`: the
    files an earlier README command writes (the convert step's output). `endpoint`: a
    command whose every URL is on ENDPOINT runs (against the bundled scripted server)."""
    words = cmd.split()
    if words[0] != "benchmaker":
        return "not a benchmaker command"
    if len(words) > 1 and words[1] in _SKIP_COMMANDS:
        return f"`{words[1]}` runs a server or manages the local Prefect server"
    urls = re.findall(r"\w+://\S+", cmd)
    if urls and not (endpoint and all(u.startswith(ENDPOINT + "/") for u in urls)):
        return "needs an endpoint (URL)"
    cmd = cmd.replace(ENDPOINT, "")
    if _PLACEHOLDER.search(re.sub(r"\"[^\"]*\"", "", cmd)):
        return "has a placeholder"
    if "$" in cmd:
        return "needs environment values"
    for prev, w in zip(words[1:], words[2:], strict=False):
        if w.startswith("-") or prev in _OUTPUT_FLAGS:
            continue
        if re.search(r"\.(jsonl?|traj|yaml|yml)$", w) and not w.startswith("examples/") and w not in produced:
            return f"reads a file no bundled file or earlier command provides ({w})"
        if w.startswith(("/", "../")):
            return f"reads a file outside the checkout ({w})"
        if w.startswith("examples/") and "*" not in w:
            path = REPO / w
            if not path.exists():
                return f"missing bundled file {w}"
            if path.suffix in (".yaml", ".yml") and "${" in path.read_text():
                return f"{w} needs environment values (an endpoint)"
    return None


def test_readme_commands_are_classified() -> None:
    cmds = readme_commands((REPO / "README.md").read_text())
    runnable = [c for c in cmds if skip_reason(c) is None]
    # what runs here covers the bundled-file path: convert, replay sweep, plan, SQL, export
    assert {"convert", "swebench-replay", "runs", "sql", "export"} <= {c.split()[1] for c in runnable}, runnable
    assert any("--dry-run" in c for c in runnable) and any("--logs examples/recordings/*" in c for c in runnable)
    for cmd in cmds:
        if cmd.startswith("benchmaker") and skip_reason(cmd) is not None:
            assert any(
                m in skip_reason(cmd) for m in ("placeholder", "URL", "server", "outside", "environment", "provides")
            ), cmd


@pytest.mark.slow  # a 3-point replay sweep of 25 episodes each, with a temporary Prefect server
@pytest.mark.prefect
def test_readme_commands_on_bundled_files_run_as_written(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("PREFECT_API_URL", None)
    ran = []
    for cmd in readme_commands((REPO / "README.md").read_text()):
        if skip_reason(cmd) is not None:
            continue
        proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        # exit 1 = the run finished and was loaded but a point was judged invalid (e.g. the
        # engine's event-loop lag check on this busy 2-core host); 2 = refused input
        ok = (0, 1) if cmd.split()[1] == "swebench-replay" and "--dry-run" not in cmd else (0,)
        assert proc.returncode in ok, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        ran.append(cmd)
    assert len(ran) >= 6
    assert (tmp_path / "trajectories.jsonl").is_file() and (tmp_path / "warehouse.duckdb").is_file()
    assert any((tmp_path / "exports").rglob("*.parquet"))


@pytest.mark.slow  # 20 s of poisson:200, then 200 requests at concurrency 8
def test_readme_endpoint_commands_run_on_the_bundled_scripted_server(tmp_path: Path) -> None:
    cmds = [c for c in readme_commands((REPO / "README.md").read_text()) if skip_reason(c) is not None]
    cmds = [c for c in cmds if skip_reason(c, endpoint=True) is None]
    assert [c.split()[:2] for c in cmds] == [["benchmaker", "llm"]] * 2, cmds
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmaker.testing.scenario_server", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        runs = tmp_path / "runs"
        for i, cmd in enumerate(cmds, start=1):
            proc = subprocess.run(
                ["bash", "-c", cmd.replace(ENDPOINT, url)],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            # exit 1 = the run finished but its verdict is invalid (a busy host's loop lag)
            assert proc.returncode in (0, 1), f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            assert len(list(runs.iterdir())) == i
    finally:
        server.terminate()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()
    summaries = {}
    for bundle in runs.iterdir():
        manifest = json.loads((bundle / "manifest.json").read_text())
        summaries[manifest["config"]["load"]] = json.loads((bundle / "summary.json").read_text())["run"]
    assert set(summaries) == {"poisson:200", "closed:8"}
    assert summaries["closed:8"]["n_ok"] == summaries["closed:8"]["n_samples"] == 200  # --max-requests 200
    assert summaries["poisson:200"]["n_ok"] == summaries["poisson:200"]["n_samples"] > 0


def _markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def test_quick_start_is_make_demo_and_make_test() -> None:
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, flags=re.DOTALL | re.MULTILINE)
    assert section is not None, "README.md has no `## Quick start` section"
    blocks = re.findall(r"```sh\n(.*?)```", section.group(1), flags=re.DOTALL)
    assert len(blocks) == 1, blocks
    assert readme_commands(f"```sh\n{blocks[0]}```") == ["make demo", "make test"]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert "make test || status=$?" in ci and ci[-1] == "exit $status"  # CI runs the README's command
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo: ", makefile, flags=re.MULTILINE) and re.search(r"^test: ", makefile, flags=re.MULTILINE)


def doc_links(text: str) -> list[str]:
    """The targets of the relative markdown links of `text`, `#anchor` kept (links with a
    scheme, and pure anchors, are left out)."""
    return [
        t
        for t in re.findall(r"\]\(([^)\s]+)\)", text)
        if not t.startswith("#") and "://" not in t and not t.startswith("mailto:")
    ]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of markdown `text` (outside fenced blocks):
    lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    out = set()
    for block_or_line in re.split(r"^```.*?^```", text, flags=re.DOTALL | re.MULTILINE):
        for heading in re.findall(r"^#{1,6} +(.+?) *$", block_or_line, flags=re.MULTILINE):
            out.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return out


def test_doc_links_resolve() -> None:
    readme_links = [t for t in doc_links((REPO / "README.md").read_text()) if t.startswith("docs/")]
    assert len(readme_links) >= 8, readme_links
    for md in _markdown_files():
        for link in doc_links(md.read_text()):
            target, _, anchor = link.partition("#")
            path = (md.parent / target).resolve()
            pending = path.parent == DOCS and path.name in PENDING_PAGES
            assert path.exists() or pending, f"{md.relative_to(REPO)}: link to {link}: no such file"
            if anchor and path.exists():
                assert anchor in anchors(path.read_text()), f"{md.relative_to(REPO)}: link to {link}: no such heading"


def test_doc_links_and_anchors_are_read() -> None:
    assert doc_links("[a](docs/x.md) [b](https://e.org/y.md) [c](#top) [d](metrics.md#ttft)") == [
        "docs/x.md",
        "metrics.md#ttft",
    ]
    text = "# Run nightly\n## 2. A real agent, end to end\n```sh\n# not a heading\n```\n### `make demo` (x)\n"
    assert anchors(text) == {"run-nightly", "2-a-real-agent-end-to-end", "make-demo-x"}


@functools.cache
def _help_text(words: tuple[str, ...]) -> str:
    """The --help text of the command `words` (("llm",), ("server", "status"))."""
    from rich.console import Console

    from benchmaker.recipes.cli import app

    buf = io.StringIO()
    app.help_print(list(words), console=Console(file=buf, width=400, color_system=None))
    return buf.getvalue()


def documented_commands() -> list[tuple[str, str]]:
    """(file name, command) of every `benchmaker` command in the ```sh blocks of README.md
    and docs/*.md."""
    return [
        (md.name, cmd)
        for md in _markdown_files()
        for cmd in readme_commands(md.read_text())
        if cmd.startswith("benchmaker ")
    ]


def command_problems(cmd: str) -> list[str]:
    """What in the `benchmaker` command `cmd` the CLI does not have: an unknown command,
    or a flag (`--name`, `-o`) missing from that command's --help."""
    from benchmaker.recipes.cli import COMMANDS, app

    words = shlex.split(cmd)
    if words[1] not in COMMANDS:
        return [f"no command {words[1]!r}"]
    path = words[1:2]
    if len(words) > 2 and not words[2].startswith("-") and words[2] in app[words[1]]:
        path.append(words[2])  # a command group's subcommand: `server status`
    help_text = _help_text(tuple(path))
    problems = []
    for w in words[len(path) + 1 :]:
        flag = w.split("=", 1)[0]
        if re.fullmatch(r"--?[a-z][a-z0-9-]*", flag) and not re.search(
            rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text
        ):
            problems.append(f"`benchmaker {' '.join(path)}` has no flag {flag}")
    return problems


def test_command_problems_finds_what_the_cli_lacks() -> None:
    assert command_problems("benchmaker llm --url U --model m --rate poisson:5 -o x") == [
        "`benchmaker llm` has no flag -o"
    ]
    assert command_problems("benchmaker lmm --url U") == ["no command 'lmm'"]
    assert command_problems("benchmaker server status --no-such-flag") == [
        "`benchmaker server status` has no flag --no-such-flag"
    ]
    assert command_problems("benchmaker convert a.jsonl -o t.jsonl --lenient") == []


def test_documented_commands_name_real_commands_and_flags() -> None:
    cmds = documented_commands()
    assert len(cmds) >= 20
    for where, cmd in cmds:
        assert command_problems(cmd) == [], f"{where}: {cmd}"


def test_documented_local_endpoints_are_the_bundled_scripted_servers() -> None:
    # a command aimed at this host names the port README.md tells the bundled scripted
    # server to take (ENDPOINT), or a placeholder port (PORT, MODEL_PORT) that another
    # command prints; docs/benchmark-an-endpoint.md once sent `http` to 8080, where
    # nothing of ours listens
    readme = (REPO / "README.md").read_text()
    assert ".venv/bin/python -m benchmaker.testing.scenario_server --port 8000 &" in readme
    paths = set()
    for where, cmd in documented_commands():
        for port, path in re.findall(r"http://127\.0\.0\.1:(\w+)(/[^\s\"']*)?", cmd):
            assert port == ENDPOINT.rsplit(":", 1)[1] or re.fullmatch(r"[A-Z_]+", port), f"{where}: {cmd}"
            if port.isdigit():
                paths.add(path or "/")
    assert {"/v1/chat/completions", "/v1/messages", "/health"} <= paths, paths
    # and the scripted server has every one of those paths (a wrong method is 405, not 404)
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmaker.testing.scenario_server", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        missing = []
        for path in sorted(paths - {"/"}):
            try:
                with urllib.request.urlopen(url + path, timeout=30) as resp:
                    status = resp.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            if status == 404:
                missing.append(path)
        assert missing == [], f"the bundled scripted server has no {missing}"
    finally:
        server.terminate()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()
