"""benchmaker.agent.tools: pi bash/read/write/edit semantics and text actions, in a LocalSandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmaker.agent.sandbox import LocalSandbox
from benchmaker.agent.tools import parse_text_action, run_pi_tool, run_text_action


@pytest.fixture
async def sb(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("def f():\n    return 1\n")
    (repo / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (repo / "long.txt").write_text("\n".join(f"line{i}" for i in range(1, 2501)))
    s = await LocalSandbox.create(repo)
    yield s
    await s.close()


async def test_bash_success_error_and_empty_output(sb):
    ok = await run_pi_tool(sb, "bash", {"command": "echo hi"})
    assert (ok.content, ok.is_error, ok.exit_code) == ("hi\n", False, 0)
    empty = await run_pi_tool(sb, "bash", {"command": "true"})
    assert (empty.content, empty.is_error) == ("(no output)", False)
    # pi appends "\n\n" + status after the output, or just the status without output
    fail = await run_pi_tool(sb, "bash", {"command": "echo boom; exit 2"})
    assert (fail.content, fail.is_error, fail.exit_code) == ("boom\n\n\nCommand exited with code 2", True, 2)
    bare = await run_pi_tool(sb, "bash", {"command": "exit 1"})
    assert bare.content == "Command exited with code 1"


async def test_bash_timeout_message(sb):
    out = await run_pi_tool(sb, "bash", {"command": "sleep 5", "timeout": 0.3})
    assert (out.content, out.is_error, out.exit_code) == ("Command timed out after 0.3 seconds", True, None)


async def test_bash_keeps_last_2000_lines(sb):
    out = await run_pi_tool(sb, "bash", {"command": "seq 1 2500"})
    # "seq 1 2500\n" splits into 2501 lines (last one empty); the last 2000 are kept
    assert out.content.startswith("502\n")
    assert out.content.endswith("2500\n\n\n[Showing lines 502-2501 of 2501.]")


async def test_read_whole_offset_limit_and_truncation(sb):
    assert (await run_pi_tool(sb, "read", {"path": "a.py"})).content == "def f():\n    return 1\n"
    part = await run_pi_tool(sb, "read", {"path": "long.txt", "offset": 2, "limit": 2})
    assert part.content == "line2\nline3\n\n[2497 more lines in file. Use offset=4 to continue.]"
    big = await run_pi_tool(sb, "read", {"path": "long.txt"})
    assert big.content.endswith("line2000\n\n[Showing lines 1-2000 of 2500. Use offset=2001 to continue.]")
    missing = await run_pi_tool(sb, "read", {"path": "nope.py"})
    assert (missing.content, missing.is_error) == ("ENOENT: no such file or directory, access 'nope.py'", True)
    beyond = await run_pi_tool(sb, "read", {"path": "a.py", "offset": 10})
    assert beyond.content == "Offset 10 is beyond end of file (3 lines total)"


async def test_write_reports_js_string_length(sb):
    out = await run_pi_tool(sb, "write", {"path": "d/new.txt", "content": "h\u00e9\U0001f600"})
    # JS length: h (1) + é (1) + 😀 (2 UTF-16 code units) = 4, while UTF-8 has 7 bytes
    assert out.content == "Successfully wrote 4 bytes to d/new.txt"
    assert await sb.read_file("d/new.txt") == "h\u00e9\U0001f600".encode()


async def test_edit_exact_unique_and_errors(sb):
    ok = await run_pi_tool(sb, "edit", {"path": "a.py", "oldText": "return 1", "newText": "return 2"})
    assert (ok.content, ok.is_error) == ("Successfully replaced text in a.py.", False)
    assert await sb.read_file("a.py") == b"def f():\n    return 2\n"
    missing = await run_pi_tool(sb, "edit", {"path": "a.py", "oldText": "return 9", "newText": "x"})
    assert missing.is_error and missing.content.startswith("Could not find the exact text in a.py.")
    await run_pi_tool(sb, "write", {"path": "dup.txt", "content": "x\nx\n"})
    dup = await run_pi_tool(sb, "edit", {"path": "dup.txt", "oldText": "x", "newText": "y"})
    assert dup.content.startswith("Found 2 occurrences of the text in dup.txt.")
    nofile = await run_pi_tool(sb, "edit", {"path": "zz.py", "oldText": "a", "newText": "b"})
    assert nofile.content == "File not found: zz.py"


async def test_edit_keeps_crlf_line_endings(sb):
    out = await run_pi_tool(sb, "edit", {"path": "crlf.txt", "oldText": "one\ntwo", "newText": "1\n2"})
    assert not out.is_error
    assert await sb.read_file("crlf.txt") == b"1\r\n2\r\n"


async def test_unknown_tool_and_bad_arguments_are_error_results(sb):
    assert (await run_pi_tool(sb, "grep", {})).content == "Tool grep not found"
    bad = await run_pi_tool(sb, "bash", None)
    assert bad.is_error and "not a JSON object" in bad.content


def test_parse_text_actions():
    mini = "THOUGHT\n\n```mswea_bash_command\nls -la\n```"
    assert parse_text_action(mini, "mini-swe-agent") == "ls -la"
    assert parse_text_action("```bash\na\n```\n```bash\nb\n```", "mini-swe-agent") is None  # needs exactly one
    swe = "DISCUSSION\n```\nfind_file x\n```\nmore\n```\nls\n```"
    assert parse_text_action(swe, "swe-agent") == "ls"
    assert parse_text_action("no action", "swe-agent") is None


async def test_text_action_observation_formats(sb):
    mini = await run_text_action(sb, "```bash\necho hi; exit 3\n```", "mini-swe-agent")
    assert (mini.content, mini.exit_code) == ("<returncode>3</returncode>\n<output>\nhi\n</output>", 3)
    swe = await run_text_action(sb, "```\ntrue\n```", "swe-agent")
    assert swe.content == "Your command ran successfully and did not produce any output."
