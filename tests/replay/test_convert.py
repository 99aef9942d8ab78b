"""benchmaker.trajectories.convert: convert_paths / read_trajectories / detect_format errors and the
`benchmaker convert` CLI. Fixtures: tests/replay/fixtures/ (written for these tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import benchmaker.recipes.convert  # noqa: F401  (registers `convert` on the app)
from benchmaker.recipes.app import app
from benchmaker.trajectories.convert import (
    CONVERTER_VERSION,
    convert_paths,
    detect_format,
    iter_trajectories,
    read_trajectories,
)
from benchmaker.trajectories.errors import ConvertError, EmptyInputError, TrajectoryFormatError, UnknownFormatError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FORMATS = (
    "aider-llm-history, atif, claude-code, codex-rollout, gemini-cli, harbor-jsonl, harbor-trial, mini-swe-agent, openai-messages, opencode,"
    " openhands,"
    " openhands-conversation,"
    " pi-events, pi-session, swe-agent"
)


def test_convert_directory_walks_files_and_trial_dirs(tmp_path):
    out = tmp_path / "out" / "trajectories.jsonl"
    report = convert_paths([FIXTURES], out)
    formats = {Path(f.path).name: f.format for f in report.files}
    assert formats == {
        "hb-1__abc": "harbor-trial/atif",
        "hb-2__def": "harbor-trial/openai-messages",
        "harbor_trial.jsonl": "harbor-jsonl",
        "result.json": None,  # the harbor job's own result.json: skipped, counted as a job file
        "pi_events.jsonl": "pi-events",
        "pi_v3_tree.jsonl": "pi-session",
        "swe_agent_fc.traj": "swe-agent",
        "swesmith_rows.jsonl": "openai-messages",
    }
    # 1 per file/trial + 2 SWE-smith rows; turns 2+1+2+2+4+2+(2+1)
    assert report.trajectories == 8
    assert report.turns == 16
    back = list(read_trajectories(out))
    assert len(back) == 8 and sum(len(t.turns) for t in back) == 16
    assert report.skipped["arguments_raw_synthesized"] == 3  # hb-1 (ATIF) + pi v3 + pi events
    assert report.skipped["harbor_job_file"] == 1 and "unrecognized_file" not in report.skipped
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert list(out.parent.iterdir()) == [out]  # no temp file left behind
    assert report.converter_version == CONVERTER_VERSION


def test_trajectory_ids_are_stable_across_runs(tmp_path):
    a = [t.trajectory_id for t in iter_trajectories(FIXTURES / "swesmith_rows.jsonl")]
    b = [t.trajectory_id for t in iter_trajectories(FIXTURES / "swesmith_rows.jsonl")]
    assert a == b and len(set(a)) == 2


def test_truncated_jsonl_is_an_error_and_writes_nothing(tmp_path):
    src = tmp_path / "s.jsonl"
    data = (FIXTURES / "pi_v3_tree.jsonl").read_bytes()
    src.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 40])  # cut the last line
    out = tmp_path / "t.jsonl"
    with pytest.raises(ConvertError) as exc:
        convert_paths([src], out)
    assert str(exc.value) == f"{src}:12: truncated JSONL: the last line is incomplete"
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]


def test_existing_output_is_left_untouched_on_error(tmp_path):
    out = tmp_path / "t.jsonl"
    out.write_text("previous\n")
    with pytest.raises(UnknownFormatError):
        convert_paths([FIXTURES / "harbor_job" / "result.json"], out)
    assert out.read_text() == "previous\n"


def test_non_utf8_bytes_name_the_line(tmp_path):
    src = tmp_path / "s.jsonl"
    lines = (FIXTURES / "pi_v3_tree.jsonl").read_bytes().split(b"\n")
    lines[5] = lines[5].replace(b"BRANCH", b"\xffBRANCH")  # e5, the abandoned branch
    src.write_bytes(b"\n".join(lines))
    with pytest.raises(ConvertError) as exc:
        convert_paths([src], tmp_path / "t.jsonl")
    assert str(exc.value) == f"{src}:6: invalid UTF-8 at byte 157 of the line"  # index of \xff in line 6
    # lenient: the line is skipped and counted; the active branch does not need it
    report = convert_paths([src], tmp_path / "t.jsonl", lenient=True)
    assert report.skipped["invalid_utf8_line"] == 1
    assert report.turns == 3


def test_non_utf8_json_document(tmp_path):
    src = tmp_path / "x.traj"
    src.write_bytes((FIXTURES / "swe_agent_fc.traj").read_bytes().replace(b"Let me look.", b"Let me \xfe look.", 1))
    with pytest.raises(ConvertError) as exc:
        list(iter_trajectories(src, "swe-agent"))
    assert str(exc.value).startswith(f"{src}:") and "invalid UTF-8 at byte offset" in str(exc.value)


def test_unknown_format_and_bad_format_name(tmp_path):
    src = tmp_path / "notes.json"
    src.write_text('{"hello": "world"}\n')
    with pytest.raises(UnknownFormatError) as exc:
        detect_format(src)
    assert str(exc.value) == f"{src}: unknown log format (expected one of {FORMATS}; pass --format to force one)"
    with pytest.raises(UnknownFormatError) as exc:
        convert_paths([FIXTURES / "pi_events.jsonl"], tmp_path / "t.jsonl", fmt="posson")
    assert (
        str(exc.value) == f'{tmp_path / "t.jsonl"}: format: unknown format (expected one of {FORMATS}) (got "posson")'
    )


def test_empty_directory_is_an_error(tmp_path):
    empty = tmp_path / "logs"
    empty.mkdir()
    (empty / "README.md").write_text("not a log")
    with pytest.raises(EmptyInputError) as exc:
        convert_paths([empty], tmp_path / "t.jsonl")
    assert str(exc.value) == f"{empty}: directory has no log files (.json, .jsonl, .traj or harbor trial dirs)"


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(ConvertError) as exc:
        convert_paths([tmp_path / "nope.jsonl"], tmp_path / "t.jsonl")
    assert str(exc.value) == f"{tmp_path / 'nope.jsonl'}: no such file or directory"


def test_a_pipe_is_refused_in_one_line_before_it_is_read(tmp_path):
    """A FIFO (what `--logs <(zcat x.gz)` gives) would be read twice, hashed then
    parsed: refused by name, without opening it (an open would block)."""
    import os

    fifo = tmp_path / "session.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ConvertError) as exc:
        convert_paths([fifo], tmp_path / "t.jsonl")
    assert str(exc.value) == f"{fifo}: not a regular file or directory (write a pipe's logs to a file first)"


def test_bad_field_names_line_and_field(tmp_path):
    src = tmp_path / "s.jsonl"
    src.write_text(
        (FIXTURES / "pi_v3_tree.jsonl").read_text().replace('"stopReason":"toolUse"', '"stopReason":"weird"')
    )
    with pytest.raises(ConvertError) as exc:
        list(iter_trajectories(src))
    assert str(exc.value) == f'{src}:4: message.stopReason: unknown stop reason (got "weird")'


def test_lenient_skips_bad_rows_and_zero_trajectories_is_an_error(tmp_path):
    src = tmp_path / "rows.jsonl"
    good = (FIXTURES / "swesmith_rows.jsonl").read_text().splitlines()[0]
    bad_row = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": 5}]}'
    src.write_text(good + "\n" + bad_row + "\n")
    with pytest.raises(ConvertError) as exc:
        convert_paths([src], tmp_path / "t.jsonl")
    assert str(exc.value) == f"{src}:2: messages[1].tool_calls: expected a list (got 5)"
    report = convert_paths([src], tmp_path / "t.jsonl", lenient=True)
    assert (report.trajectories, report.skipped) == (1, {"bad_row": 1})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(bad_row + "\n")
    with pytest.raises(EmptyInputError) as exc:
        convert_paths([bad], tmp_path / "u.jsonl", lenient=True)
    assert str(exc.value) == f"{bad}: no trajectories converted from 1 input(s)"
    assert not (tmp_path / "u.jsonl").exists()


def test_harbor_trial_without_agent_log(tmp_path):
    trial = tmp_path / "t1"
    shutil.copytree(FIXTURES / "harbor_job" / "hb-1__abc", trial)
    (trial / "agent" / "trajectory.json").unlink()
    with pytest.raises(ConvertError) as exc:
        list(iter_trajectories(trial))
    assert str(exc.value) == (
        f"{trial}: agent: no agent log found in agent/ "
        "(expected a pi, OpenHands, SWE-agent, mini-swe-agent or ATIF file)"
    )
    (trial / "agent" / "trajectory.json").write_text(
        (FIXTURES / "harbor_job" / "hb-1__abc" / "agent" / "trajectory.json").read_text()
    )
    (trial / "verifier" / "reward.txt").write_text("one\n")
    with pytest.raises(ConvertError) as exc:
        list(iter_trajectories(trial))
    assert str(exc.value) == f'{trial / "verifier" / "reward.txt"}:1: reward: expected a number (got "one")'


def test_read_trajectories_reports_path_line_field(tmp_path):
    out = tmp_path / "t.jsonl"
    convert_paths([FIXTURES / "pi_events.jsonl"], out)
    line = json.loads(out.read_text())
    line["turns"][0]["usage"]["completion_tokens"] = -1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(out.read_text() + json.dumps(line) + "\n")
    got = []
    with pytest.raises(TrajectoryFormatError) as exc:
        for t in read_trajectories(bad):
            got.append(t)
    assert len(got) == 1  # the good first line was yielded before the error
    assert str(exc.value) == (
        f"{bad}:2: turns[0].usage.completion_tokens: Input should be greater than or equal to 0 (got -1)"
    )


def test_cli_convert_prints_report_and_exits_0(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    rc = app(["convert", str(FIXTURES / "swesmith_rows.jsonl"), "-o", str(out)], result_action="return_value")
    assert rc == 0
    printed = capsys.readouterr().out
    assert "openai-messages" in printed and "total" in printed
    assert len(out.read_text().splitlines()) == 2


def test_cli_convert_bad_input_exits_2_with_one_line(tmp_path, capsys):
    src = tmp_path / "x.jsonl"
    src.write_text("hello\n")
    rc = app(
        ["convert", str(src), "-o", str(tmp_path / "t.jsonl"), "--format", "pi-session"], result_action="return_value"
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert err == f"benchmaker: error: {src}:1: invalid JSON: Expecting value\n"
    assert not (tmp_path / "t.jsonl").exists()


def _dir_with_bad_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    logs = tmp_path / "logs"
    (logs / "sub").mkdir(parents=True)
    shutil.copy(FIXTURES / "pi_events.jsonl", logs / "good.jsonl")
    (logs / "notes.json").write_text('{"hello": "world"}\n')  # matches no format
    (logs / "sub" / "cut.jsonl").write_bytes((FIXTURES / "pi_v3_tree.jsonl").read_bytes()[:-40])  # truncated
    return logs, (logs / "notes.json").absolute(), (logs / "sub" / "cut.jsonl").absolute()


def test_directory_names_every_unreadable_file_with_its_full_path(tmp_path, monkeypatch):
    logs, notes, cut = _dir_with_bad_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "t.jsonl"
    with pytest.raises(ConvertError) as exc:
        convert_paths([Path("logs")], out)  # a relative directory: files still named in full
    assert str(exc.value) == (
        "2 of 3 log inputs could not be converted (--lenient skips them):\n"
        f"  {notes}: content matches no log format\n"
        f"  {cut}:12: truncated JSONL: the last line is incomplete"
    )
    assert not out.exists()
    report = convert_paths([Path("logs")], out, lenient=True)
    assert report.trajectories == 2  # good.jsonl, and cut.jsonl without its cut last line
    assert report.skipped["unrecognized_file"] == 1 and report.skipped["truncated_last_line"] == 1


def test_check_only_writes_nothing(tmp_path):
    report = convert_paths([FIXTURES / "swesmith_rows.jsonl"], None)
    assert (report.trajectories, report.out) == (2, None)
    assert list(tmp_path.iterdir()) == []


def test_cli_convert_directory_with_bad_files_exits_2_unless_lenient(tmp_path, capsys):
    logs, notes, cut = _dir_with_bad_files(tmp_path)
    rc = app(["convert", str(logs), "-o", str(tmp_path / "t.jsonl")], result_action="return_value")
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("benchmaker: error: 2 of 3 log inputs could not be converted")
    assert f"  {notes}: " in err and f"  {cut}:12: " in err
    rc = app(["convert", str(logs), "-o", str(tmp_path / "t.jsonl"), "--lenient"], result_action="return_value")
    assert rc == 0 and (tmp_path / "t.jsonl").exists()


def test_files_agents_write_beside_their_logs_are_skipped_by_kind(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURES / "swe_agent_fc.traj", run / "django__django-1.traj")
    (run / "preds.json").write_text(
        json.dumps(
            {"django__django-1": {"model_name_or_path": "m", "instance_id": "django__django-1", "model_patch": "diff"}}
        )
    )
    (run / "all_preds.jsonl").write_text(
        json.dumps({"model_name_or_path": "m", "instance_id": "django__django-1", "model_patch": "diff"}) + "\n"
    )
    (run / "metadata.json").write_text(json.dumps({"agent_class": "CodeActAgent", "llm_config": {"model": "m"}}))
    (run / "report.json").write_text(json.dumps({"django__django-1": {"resolved": True}}))
    report = convert_paths([run], tmp_path / "t.jsonl")
    assert report.trajectories == 1
    assert report.skipped == {"eval_metadata": 1, "eval_report": 1, "predictions": 2}
    (run / "notes.json").write_text('{"todo": 1}')  # not a log nor a known companion
    with pytest.raises(ConvertError) as exc:
        convert_paths([run], tmp_path / "t.jsonl")
    assert str(exc.value) == f"{(run / 'notes.json').absolute()}: content matches no log format"
