"""benchmaker.sweep.grade: integrity, usage coverage, task outcome and sweep-point grades."""

from __future__ import annotations

import json
from pathlib import Path

from benchmaker.agent.episodes import Episode, TurnRecord
from benchmaker.engine.records import Sample
from benchmaker.sweep.grade import GRADE_KEYS, grade_files


def _ep(eid: str, **kw) -> dict:
    base = Episode(
        run_id="r",
        sweep_point="c2",
        concurrency=2,
        episode_id=eid,
        trajectory_id="t",
        task_id="k",
        mode="execute",
        worker=0,
        started_ns=0,
        ended_ns=10,
        n_turns=2,
        n_requests=2,
        usage_complete=True,
        prompt_tokens=10,
        output_tokens=4,
    )
    d = base.to_dict()
    d.update(kw)
    return d


def _turn(eid: str, i: int, **kw) -> dict:
    d = TurnRecord(run_id="r", sweep_point="c2", episode_id=eid, turn_index=i, byte_equal=True).to_dict()
    d.update(kw)
    return d


def _call(eid: str, i: int, seq: int, **kw) -> dict:
    """The samples.jsonl line of turn i's model call (only what grading reads matters)."""
    d = Sample(
        run_id="r",
        seq=seq,
        sweep_point="c2",
        lane="agent",
        outcome="ok",
        usage_present=True,
        prompt_tokens=5,
        output_tokens=2,
        meta={"episode_id": eid, "turn_index": i},
    ).to_dict()
    d.update(kw)
    return d


def _files(tmp_path: Path, eps: list[dict], turns: list[dict], calls: list[dict] = ()) -> tuple[Path, Path]:
    e, t = tmp_path / "episodes.jsonl", tmp_path / "turns.jsonl"
    e.write_text("".join(json.dumps(x) + "\n" for x in eps))
    t.write_text("".join(json.dumps(x) + "\n" for x in turns))
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in calls))
    return e, t


def test_grades_per_episode_and_sweep_point(tmp_path: Path):
    eps = [
        _ep("good", resolved=True, reverified=True),
        _ep(
            "bad",
            outcome="error",
            error="turn 1: http_error 412",
            misses_diverged=1,
            divergences=1,
            usage_complete=False,
            prompt_tokens=None,
            output_tokens=None,
            resolved=None,
            reverified=False,
        ),
        _ep("carried", mode="recorded", resolved=False, reverified=False),
    ]
    turns = [
        _turn("good", 0),
        _turn("good", 1),
        _turn("bad", 0, byte_equal=False),
        _turn("bad", 1, miss_kind="diverged", byte_equal=None),
        _turn("carried", 0),
        _turn("carried", 1),
    ]
    calls = [
        _call("good", 0, 0),
        _call("good", 1, 1),
        _call("bad", 0, 2),
        _call(
            "bad",
            1,
            3,
            outcome="http_error",
            http_status=412,
            usage_present=False,
            prompt_tokens=None,
            output_tokens=None,
        ),
        _call("carried", 0, 4),
        _call("carried", 1, 5),
    ]
    e, t = _files(tmp_path, eps, turns, calls)
    (tmp_path / "server_stats.json").write_text(
        json.dumps(
            {
                "misses": {"unknown_key": 0, "beyond_turns": 0, "diverged": 1, "total": 1},
                "divergences": {"status": 0, "content": 1, "total": 1},
            }
        )
    )
    (tmp_path / "concurrency.json").write_text(
        json.dumps(
            {
                "concurrency": 2,
                "n_episodes": 3,
                "max_in_flight": 1,
                "all_started_before_first_finish": False,
                "valid": False,
                "reason": "max episodes in flight 1 < target 2",
            }
        )
    )
    grades = grade_files(
        e,
        t,
        tmp_path / "grades.jsonl",
        samples=[tmp_path / "samples.jsonl"],
        server_stats=tmp_path / "server_stats.json",
        concurrency=tmp_path / "concurrency.json",
    )
    got = {(g["episode_id"], g["grader"]): (g["verdict"], g["score"]) for g in grades}
    assert got == {
        ("good", "replay_integrity"): ("correct", 1.0),
        ("good", "usage_coverage"): ("correct", 1.0),
        ("good", "task_outcome"): ("resolved", 1.0),
        ("bad", "replay_integrity"): ("wrong", 0.0),
        ("bad", "usage_coverage"): ("wrong", 0.0),
        ("bad", "task_outcome"): ("error", None),
        ("carried", "replay_integrity"): ("correct", 1.0),
        ("carried", "usage_coverage"): ("correct", 1.0),
        ("carried", "task_outcome"): ("carried", 0.0),
        (None, "server_integrity"): ("wrong", 0.0),
        (None, "concurrency_proof"): ("wrong", 0.0),
    }
    bad = next(g for g in grades if g["episode_id"] == "bad" and g["grader"] == "replay_integrity")
    assert bad["detail"] == (
        "outcome error: turn 1: http_error 412; 1 diverged misses; 1 divergences; turns not byte-equal: [0]"
    )
    usage = next(g for g in grades if g["episode_id"] == "bad" and g["grader"] == "usage_coverage")
    assert usage["detail"] == "usage missing on 1 of 2 model calls; token totals null"
    lines = (tmp_path / "grades.jsonl").read_text().splitlines()
    assert len(lines) == 11 and all(tuple(json.loads(x)) == GRADE_KEYS for x in lines)


def test_a_point_where_no_episode_ran_grades_under_the_given_run(tmp_path: Path):
    e, t = _files(tmp_path, [], [])
    conc = tmp_path / "concurrency.json"
    conc.write_text(json.dumps({"valid": False, "reason": "no episode ran", "max_in_flight": 0, "concurrency": 4}))
    grades = grade_files(e, t, tmp_path / "grades.jsonl", concurrency=conc, run_id="r", sweep_point="c4")
    # without episodes the run and point come from the caller (the loader refuses a null run_id)
    assert grades == [
        {
            "run_id": "r",
            "sweep_point": "c4",
            "episode_id": None,
            "seq": None,
            "grader": "concurrency_proof",
            "verdict": "wrong",
            "score": 0.0,
            "detail": "no episode ran",
        }
    ]


def _bad_usage_detail(grades: list[dict]) -> str:
    return next(g["detail"] for g in grades if g["episode_id"] == "bad" and g["grader"] == "usage_coverage")


def test_usage_missing_is_counted_on_old_turn_lines_or_said_unknown(tmp_path: Path):
    # a bundle written before turns kept only turn fields: usage on the turn lines, no samples
    eps = [_ep("bad", usage_complete=False, prompt_tokens=None, output_tokens=None, n_requests=3)]
    old = [
        _turn("bad", i, sent_ns=0, end_ns=2, outcome="ok", prompt_tokens=5, output_tokens=o)
        for i, o in enumerate([2, None, None])
    ]
    e, t = _files(tmp_path, eps, old)
    assert (
        _bad_usage_detail(grade_files(e, t, tmp_path / "g.jsonl"))
        == "usage missing on 2 of 3 model calls; token totals null"
    )
    # new turn lines and no samples given: how many lacked usage is unknown, never 0
    e, t = _files(tmp_path, eps, [_turn("bad", i) for i in range(3)])
    assert (
        _bad_usage_detail(grade_files(e, t, tmp_path / "g.jsonl", samples=[tmp_path / "samples.jsonl"]))
        == "usage missing on an unknown number of 3 model calls; token totals null"
    )
