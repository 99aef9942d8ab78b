"""Tool execution for `execute` mode: pi's bash/read/write/edit, and text actions
(SWE-agent style fenced commands, mini-swe-agent fenced bash) run in a Sandbox.

    out = await run_pi_tool(sandbox, "edit", {"path": "a.py", "oldText": "x", "newText": "y"})
    out.content   # "Successfully replaced text in a.py."   (what pi sends the model)
    out.is_error  # False

pi semantics follow badlogic/pi-mono packages/coding-agent/src/core/tools/*.ts
(bash.ts, read.ts @ 9a127ce, write.ts @ 4321040, edit.ts @ 19e9059): a tool that
throws becomes a tool result with `is_error` and the error message as its text.

  bash  {command, timeout?(s, default 180)}: stdout+stderr; "(no output)" when empty;
        a non-zero exit appends "\\n\\nCommand exited with code N" (just the status when
        there was no output) and is an error; a timeout gives "Command timed out after
        T seconds". Output keeps the last 2000 lines / 50 KB with a "[Showing lines
        A-B of N.]" notice (pi also names a temp file holding the full output).
  read  {path, offset?(1-based line), limit?}: the text, first 2000 lines / 50 KB,
        with pi's continuation notices; a missing file is an error.
  write {path, content}: creates parents; "Successfully wrote N bytes to PATH" (N is
        the JS string length, i.e. UTF-16 code units, as pi reports it).
  edit  {path, oldText, newText}: exact, unique match after CRLF→LF normalisation,
        line endings and BOM restored; pi's error texts for missing / ambiguous /
        no-op edits; "Successfully replaced text in PATH."

Text actions: mini-swe-agent takes the one ```bash (or ```mswea_bash_command) block of
the response and answers "<returncode>N</returncode>\\n<output>\\n...</output>";
SWE-agent style takes the last fenced block, runs it with bash and answers the raw
output ("Your command ran successfully and did not produce any output." when empty).
SWE-agent's own commands (open, edit, create, submit...) are not emulated: they run
as bash and fail, and the divergence is counted.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Literal

from benchmaker.agent.sandbox import Sandbox, SandboxError

DEFAULT_MAX_LINES = 2000
DEFAULT_MAX_BYTES = 50 * 1024
DEFAULT_BASH_TIMEOUT_S = 180.0

TextActionStyle = Literal["mini-swe-agent", "swe-agent"]

_MINI_ACTION = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)
_FENCE = re.compile(r"```[^\n`]*\n(.*?)\n?```", re.DOTALL)


@dataclass(slots=True)
class ToolOutcome:
    """What a tool returned: `content` is the text the agent sends the model,
    `is_error` the tool-result error flag, `exit_code` for commands (None otherwise or
    when killed).

    `duration_ns` is the tool time of the call as the episode sees it, in ns:
    perf_counter_ns from the start of run_pi_tool / run_text_action (the arguments
    parsed) to the result formatted, on the episode's event loop. It holds every sandbox
    call the tool makes: for a command the spawn, the command's run, the output capture
    and the kill of its process group (with a started LocalSandboxFactory also two pipe
    messages to its helper process, ~0.1-0.3 ms, benchmaker.agent.sandbox.spawner); for
    read/write/edit the file I/O in a thread. It also holds any time the episode's loop
    was busy elsewhere before resuming the tool (the loop lag of that moment). A turn's
    tool time (benchmaker.agent.harness) is the sum over its tool calls, which run one by one."""

    content: str
    is_error: bool = False
    exit_code: int | None = None
    duration_ns: int = 0


class _ToolError(Exception):
    pass


def format_size(n: int) -> str:
    """pi's formatSize: bytes below 1 KB as "NB", below 1 MB as "X.YKB", else "X.YMB"."""
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f}KB"
    return f"{n / (1024 * 1024):.1f}MB"


def _truncate_head(text: str, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES):
    """Keep whole lines from the start while within both limits; returns
    (content, truncated, truncated_by, output_lines, first_line_exceeds)."""
    lines = text.split("\n")
    if len(lines) <= max_lines and len(text.encode()) <= max_bytes:
        return text, False, None, len(lines), False
    if len(lines[0].encode()) > max_bytes:
        return "", True, "bytes", 0, True
    out: list[str] = []
    size = 0
    by = "lines"
    for i, line in enumerate(lines):
        if i >= max_lines:
            by = "lines"
            break
        add = len(line.encode()) + (1 if i else 0)
        if size + add > max_bytes:
            by = "bytes"
            break
        out.append(line)
        size += add
    return "\n".join(out), True, by, len(out), False


def _truncate_tail(text: str, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES):
    """Keep whole lines from the end while within both limits; returns
    (content, truncated, total_lines, output_lines)."""
    lines = text.split("\n")
    if len(lines) <= max_lines and len(text.encode()) <= max_bytes:
        return text, False, len(lines), len(lines)
    out: list[str] = []
    size = 0
    for i, line in enumerate(reversed(lines)):
        add = len(line.encode()) + (1 if i else 0)
        if i >= max_lines or size + add > max_bytes:
            break
        out.append(line)
        size += add
    out.reverse()
    return "\n".join(out), True, len(lines), len(out)


def _js_length(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


async def _bash(sb: Sandbox, args: dict[str, Any]) -> ToolOutcome:
    command = args.get("command")
    if not isinstance(command, str):
        raise _ToolError('Validation failed for tool "bash": command must be a string')
    timeout = args.get("timeout")
    timeout_s = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else DEFAULT_BASH_TIMEOUT_S
    res = await sb.exec(command, timeout_s=timeout_s)
    text, truncated, total, kept = _truncate_tail(res.output)
    if truncated:
        text += f"\n\n[Showing lines {total - kept + 1}-{total} of {total}.]"

    def status(t: str, s: str) -> str:
        return f"{t}\n\n{s}" if t else s

    if res.timed_out:
        t = f"{timeout:g}" if isinstance(timeout, int | float) else f"{timeout_s:g}"
        return ToolOutcome(status(text, f"Command timed out after {t} seconds"), True, None)
    if res.exit_code not in (0, None):
        return ToolOutcome(status(text, f"Command exited with code {res.exit_code}"), True, res.exit_code)
    return ToolOutcome(text or "(no output)", False, res.exit_code)


async def _read_text(sb: Sandbox, path: str) -> str:
    try:
        data = await sb.read_file(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise _ToolError(f"ENOENT: no such file or directory, access '{path}'") from exc
    return data.decode("utf-8", "replace")


async def _read(sb: Sandbox, args: dict[str, Any]) -> ToolOutcome:
    path = args.get("path")
    if not isinstance(path, str):
        raise _ToolError('Validation failed for tool "read": path must be a string')
    text = await _read_text(sb, path)
    lines = text.split("\n")
    offset, limit = args.get("offset"), args.get("limit")
    start = max(0, int(offset) - 1) if offset else 0
    if start >= len(lines):
        raise _ToolError(f"Offset {offset} is beyond end of file ({len(lines)} lines total)")
    if limit is not None:
        end = min(start + int(limit), len(lines))
        selected = "\n".join(lines[start:end])
        user_lines: int | None = end - start
    else:
        selected = "\n".join(lines[start:])
        user_lines = None
    content, truncated, by, out_lines, first_too_big = _truncate_head(selected)
    first = start + 1
    if first_too_big:
        size = format_size(len(lines[start].encode()))
        out = (
            f"[Line {first} is {size}, exceeds {format_size(DEFAULT_MAX_BYTES)} limit. "
            f"Use bash: sed -n '{first}p' {path} | head -c {DEFAULT_MAX_BYTES}]"
        )
    elif truncated:
        last = first + out_lines - 1
        limit_note = "" if by == "lines" else f" ({format_size(DEFAULT_MAX_BYTES)} limit)"
        out = (
            content
            + f"\n\n[Showing lines {first}-{last} of {len(lines)}{limit_note}. Use offset={last + 1} to continue.]"
        )
    elif user_lines is not None and start + user_lines < len(lines):
        remaining = len(lines) - (start + user_lines)
        out = content + f"\n\n[{remaining} more lines in file. Use offset={start + user_lines + 1} to continue.]"
    else:
        out = content
    return ToolOutcome(out)


async def _write(sb: Sandbox, args: dict[str, Any]) -> ToolOutcome:
    path, content = args.get("path"), args.get("content")
    if not isinstance(path, str) or not isinstance(content, str):
        raise _ToolError('Validation failed for tool "write": path and content must be strings')
    await sb.write_file(path, content.encode("utf-8"))
    return ToolOutcome(f"Successfully wrote {_js_length(content)} bytes to {path}")


def _normalize(s: str) -> str:
    return s.replace("\r\n", "\n").replace("\r", "\n")


async def _edit(sb: Sandbox, args: dict[str, Any]) -> ToolOutcome:
    path, old, new = args.get("path"), args.get("oldText"), args.get("newText")
    if not (isinstance(path, str) and isinstance(old, str) and isinstance(new, str)):
        raise _ToolError('Validation failed for tool "edit": path, oldText, newText must be strings')
    try:
        raw = (await sb.read_file(path)).decode("utf-8", "replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise _ToolError(f"File not found: {path}") from exc
    bom = "\ufeff" if raw.startswith("\ufeff") else ""
    text = raw[len(bom) :]
    m = re.search(r"\r\n|\n|\r", text)
    ending = "\r\n" if m and m.group(0) == "\r\n" else "\n"
    content, old_n, new_n = _normalize(text), _normalize(old), _normalize(new)
    count = content.count(old_n) if old_n else 0
    if count == 0:
        raise _ToolError(
            f"Could not find the exact text in {path}. The old text must match exactly including all whitespace and newlines."
        )
    if count > 1:
        raise _ToolError(
            f"Found {count} occurrences of the text in {path}. The text must be unique. Please provide more context to make it unique."
        )
    i = content.index(old_n)
    updated = content[:i] + new_n + content[i + len(old_n) :]
    if updated == content:
        raise _ToolError(
            f"No changes made to {path}. The replacement produced identical content. This might indicate an issue with special characters or the text not existing as expected."
        )
    final = bom + (updated.replace("\n", "\r\n") if ending == "\r\n" else updated)
    await sb.write_file(path, final.encode("utf-8"))
    return ToolOutcome(f"Successfully replaced text in {path}.")


_PI = {"bash": _bash, "read": _read, "write": _write, "edit": _edit}


async def run_pi_tool(sandbox: Sandbox, name: str, arguments: dict[str, Any] | None) -> ToolOutcome:
    """Run pi tool `name` with parsed `arguments` in `sandbox` (module docstring).
    A tool failure (bad arguments, missing file, failing command) is an outcome with
    `is_error`, never an exception; SandboxError (the sandbox broke) propagates."""
    t0 = time.perf_counter_ns()
    fn = _PI.get(name)
    try:
        if fn is None:
            out = ToolOutcome(f"Tool {name} not found", True)
        elif arguments is None:
            out = ToolOutcome(f'Validation failed for tool "{name}": arguments are not a JSON object', True)
        else:
            out = await fn(sandbox, arguments)
    except _ToolError as exc:
        out = ToolOutcome(str(exc), True)
    except SandboxError as exc:
        if "outside the workspace" not in str(exc):
            raise
        out = ToolOutcome(str(exc), True)
    out.duration_ns = time.perf_counter_ns() - t0
    return out


def parse_text_action(content: str | None, style: TextActionStyle) -> str | None:
    """The command of a text-action response: mini-swe-agent's single ```bash block
    (None unless exactly one), or SWE-agent's last fenced block (None when none)."""
    text = content or ""
    if style == "mini-swe-agent":
        found = _MINI_ACTION.findall(text)
        return found[0].strip() if len(found) == 1 else None
    found = _FENCE.findall(text)
    return found[-1].strip() if found else None


async def run_text_action(
    sandbox: Sandbox, content: str | None, style: TextActionStyle, *, timeout_s: float = DEFAULT_BASH_TIMEOUT_S
) -> ToolOutcome | None:
    """Run the action of a text-action response and format the observation like the
    agent would; None when the response holds no action (the agent would answer with a
    format error, which is not emulated)."""
    command = parse_text_action(content, style)
    if command is None:
        return None
    t0 = time.perf_counter_ns()
    res = await sandbox.exec(command, timeout_s=timeout_s)
    if style == "mini-swe-agent":
        if res.timed_out:
            text = (
                f"The last command <command>{command}</command> timed out and has been killed.\n"
                f"The output of the command was:\n <output>\n{res.output}\n</output>"
            )
        else:
            text = f"<returncode>{res.exit_code}</returncode>\n<output>\n{res.output}</output>"
    else:
        text = res.output if res.output.strip() else "Your command ran successfully and did not produce any output."
    return ToolOutcome(text, bool(res.timed_out or res.exit_code), res.exit_code, time.perf_counter_ns() - t0)
