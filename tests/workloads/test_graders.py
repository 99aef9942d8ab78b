"""Graders: answer extraction, each grader's verdict, the grading hook's outcomes, and the
LLM judge against a real judge server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket

import orjson
import pytest
from aiohttp import web
from pydantic import TypeAdapter

from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import RequestSpec, Sample
from benchmaker.workloads.graders import (
    ChoiceGrader,
    ContainsGrader,
    ExactGrader,
    GraderSpec,
    GradingHook,
    JsonSchemaGrader,
    LLMJudgeGrader,
    NumericGrader,
    RegexGrader,
    build_grader,
    extract_choice,
    extract_number,
    parse_grader_option,
)


def spec(reference=None, body=None, **meta) -> RequestSpec:
    if reference is not None:
        meta["reference"] = reference
    body = body if body is not None else {"messages": [{"role": "user", "content": "Capital of France?"}]}
    return RequestSpec("POST", "http://h", body=orjson.dumps(body), meta=meta)


async def grade(grader, text, reference=None, outcome="ok", lane="default", **kw) -> Sample:
    s = Sample(run_id="t", seq=0, lane=lane, outcome=outcome)
    await GradingHook(grader, **kw)(spec(reference), s, text)
    return s


# -- extraction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("Answer: (B)", "B"),
        ("the answer is b.", "B"),
        ("**C**", "C"),
        ("After thinking, **(D)** is right.", "D"),
        ("The answer is: **C**", "C"),
        ("(b)", "B"),
        ("c.", "C"),
        ("B) Paris\nbecause it is the capital", "B"),
        ("A cat sat on the mat, so C", "C"),  # "A cat": the article, not choice A
        ("It is a tricky one", None),  # lower-case "a" is never a bare choice
        ("the answer is a cat", None),  # "answer is a" + a word: the article
        ("A is correct", "A"),  # "A is": a choice
        ("Therefore, the answer is A.", "A"),
        ("I first thought A, but the answer is (C)", "C"),  # the answer phrase wins
        ("E", None),  # not among ABCD
    ],
)
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("3 + 4 = 7, then 8. #### 7", 7.0),  # GSM8K marker wins over the last number
        ("so \\boxed{42}. Check: 17", 42.0),
        ("The answer is $1,234.50 total, not 99", 1234.5),
        ("x = -3.5 then 2", 2.0),  # no marker: the last number
        ("minus five is −5", -5.0),  # U+2212 minus
        ("1e3 apples", 1000.0),
        ("no digits here", None),
    ],
)
def test_extract_number(text, number):
    assert extract_number(text) == number


# -- graders through the hook ------------------------------------------------------------------


async def test_exact_normalizes_whitespace_and_case_unless_case_sensitive():
    s = await grade(ExactGrader(), "  Paris \n", "paris")
    assert (s.outcome, s.grade, s.error) == ("ok", "correct", None)
    s = await grade(ExactGrader(case_sensitive=True), "Paris", "paris")
    assert (s.outcome, s.grade, s.error) == ("graded_wrong", "wrong", "exact: expected 'paris'")


async def test_contains():
    assert (await grade(ContainsGrader(), "It is  PARIS, France.", "paris")).grade == "correct"
    s = await grade(ContainsGrader(), "It is Lyon.", "Paris")
    assert (s.outcome, s.error) == ("graded_wrong", "contains: text does not contain 'Paris'")


async def test_regex_group_against_reference_and_plain_match():
    g = RegexGrader(r"Answer:\s*(\w+)")
    s = await grade(g, "Answer: Lyon. Wait. Answer: Paris", "Paris")  # the last match counts
    assert (s.grade, s.meta) == ("correct", {"answer": "Paris"})
    s = await grade(RegexGrader(r"\d{3}-\d{4}"), "call 555-1234")  # no reference needed
    assert (s.grade, s.meta) == ("correct", {"answer": "555-1234"})
    s = await grade(RegexGrader(), "color: blue", r"colou?r: (blue|navy)")  # the reference is the pattern
    assert s.grade == "correct"
    s = await grade(RegexGrader(), "x", "(unclosed")
    assert s.outcome == "grading_error" and s.error.startswith("regex: reference is not a regular expression")
    with pytest.raises(ConfigError, match=r"grader.pattern: bad regular expression"):
        RegexGrader("(")


async def test_numeric_exact_and_with_tolerance():
    s = await grade(NumericGrader(), "#### 1,000", "1000")
    assert (s.grade, s.meta) == ("correct", {"answer": "1000"})
    s = await grade(NumericGrader(), "The answer is 3.14", "3.1416")
    assert (s.outcome, s.error) == ("graded_wrong", "numeric: expected 3.1416 (got 3.14)")
    assert (await grade(NumericGrader(abs_tol=0.01), "The answer is 3.14", "3.1416")).grade == "correct"
    assert (await grade(NumericGrader(rel_tol=0.01), "99", "100")).grade == "correct"  # 1 % of 100
    s = await grade(NumericGrader(), "I do not know", "7")
    assert (s.outcome, s.grade, s.error) == ("graded_wrong", "wrong", "numeric: no number in the answer")
    s = await grade(NumericGrader(), "7", "seven")
    assert (s.outcome, s.grade) == ("grading_error", None)
    assert s.error == "numeric: reference holds no number (got 'seven')"


async def test_choice_grader_and_reference_shapes():
    s = await grade(ChoiceGrader(), "the answer is b.", "(B)")
    assert (s.grade, s.meta) == ("correct", {"answer": "B"})
    s = await grade(ChoiceGrader(), "A cat? No: **C**", "A")
    assert (s.outcome, s.error, s.meta) == ("graded_wrong", "choice: expected A (got C)", {"answer": "C"})
    s = await grade(ChoiceGrader(), "no idea", "A")
    assert (s.outcome, s.error) == ("graded_wrong", "choice: no choice among ABCD in the answer")
    s = await grade(ChoiceGrader("ABCDE"), "Answer: E", "E")
    assert s.grade == "correct"
    s = await grade(ChoiceGrader(), "Answer: B", "Paris")
    assert s.outcome == "grading_error" and s.error == "choice: reference is not one of the choices ABCD (got 'Paris')"


async def test_json_schema_grader():
    g = JsonSchemaGrader({"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}})
    assert (await grade(g, '```json\n{"city": "Paris"}\n```')).grade == "correct"
    s = await grade(g, '{"city": 7}')
    assert (s.outcome, s.error) == ("graded_wrong", "json_schema: city: 7 is not of type 'string'")
    s = await grade(g, "Paris")
    assert s.outcome == "graded_wrong" and s.error.startswith("json_schema: not JSON:")
    with pytest.raises(ConfigError, match="grader.schema: invalid JSON Schema"):
        JsonSchemaGrader({"type": "no-such-type"})


async def test_hook_skips_failed_samples_and_needs_a_reference():
    s = await grade(ExactGrader(), "Paris", "Paris", outcome="timeout")
    assert (s.outcome, s.grade) == ("timeout", None)  # failed requests are not graded
    s = await grade(ExactGrader(), "Paris")
    assert (s.outcome, s.grade) == ("grading_error", None)
    assert s.error == "exact: no 'reference' in the request's meta (dataset reference missing)"
    s = Sample(run_id="t", seq=0)
    await GradingHook(ExactGrader(), reference_key="answer")(spec(answer=42), s, "42")  # str() of a non-string
    assert s.grade == "correct"


async def test_hook_per_lane_grades_only_its_lanes():
    hook = {"qa": ExactGrader()}
    assert (await grade(hook, "x", "y", lane="chat")).grade is None
    assert (await grade(hook, "x", "y", lane="qa")).outcome == "graded_wrong"


def test_specs_build_graders_and_name_bad_input(tmp_path):
    ta = TypeAdapter(GraderSpec)
    g = build_grader(ta.validate_python({"type": "numeric", "abs_tol": 0.5}))
    assert isinstance(g, NumericGrader) and g.abs_tol == 0.5
    (tmp_path / "s.json").write_text('{"type": "array"}')
    g = build_grader(ta.validate_python({"type": "json_schema", "schema_file": "s.json"}), tmp_path)
    assert isinstance(g, JsonSchemaGrader) and g.schema == {"type": "array"}
    g = build_grader(ta.validate_python({"type": "json_schema", "schema": {"type": "object"}}))
    assert g.schema == {"type": "object"}
    g, key = parse_grader_option("choice")
    assert isinstance(g, ChoiceGrader) and key == "reference"
    g, key = parse_grader_option('{"type": "contains", "reference_key": "answer"}')
    assert isinstance(g, ContainsGrader) and key == "answer"
    with pytest.raises(ConfigError, match=r"--grader: \(top\): Input tag 'fuzzy' found using 'type' does not match"):
        parse_grader_option("fuzzy")
    with pytest.raises(ConfigError, match="give exactly one of schema or schema_file"):
        build_grader(ta.validate_python({"type": "json_schema"}))


# -- LLM judge over HTTP -----------------------------------------------------------------------


@pytest.fixture
async def judge():
    """A judge on 127.0.0.1: CORRECT when the graded answer mentions Paris; answers
    'BOOM' → HTTP 500, 'SHRUG' → no verdict, 'SLOW' → 2 s delay, 'HTML' → not JSON."""
    seen: list[dict] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({"body": body, "auth": request.headers.get("Authorization")})
        answer = body["messages"][0]["content"].split("Answer to grade:\n", 1)[-1]
        if "BOOM" in answer:
            return web.json_response({"error": {"message": "overloaded"}}, status=500)
        if "HTML" in answer:
            return web.Response(text="<html>", content_type="text/html")
        if "SLOW" in answer:
            await asyncio.sleep(2)
        reply = "I am not sure." if "SHRUG" in answer else ("CORRECT" if "Paris" in answer else "Incorrect.")
        return web.json_response({"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1/chat/completions", seen
    await runner.cleanup()


async def test_llm_judge_verdicts_and_the_prompt_it_sends(judge):
    url, seen = judge
    g = LLMJudgeGrader(url, "judge-m", api_key="sk-judge")
    s = await grade(g, "It is Paris.", "Paris")
    assert (s.outcome, s.grade, s.meta) == ("ok", "correct", {"answer": "CORRECT"})
    body = seen[0]["body"]
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("judge-m", 0, 16)
    prompt = body["messages"][0]["content"]
    # question from the request's last user message, the reference, then the answer
    assert "Question:\nCapital of France?\n\nReference answer:\nParis\n\nAnswer to grade:\nIt is Paris." in prompt
    assert seen[0]["auth"] == "Bearer sk-judge"
    s = await grade(g, "Lyon", "Paris")
    assert (s.outcome, s.grade, s.error) == ("graded_wrong", "wrong", "llm_judge: judge: INCORRECT")


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ("BOOM", 'llm_judge: judge: HTTP 500: {"error": {"message": "overloaded"}}'),  # aiohttp json_response
        ("SHRUG", "llm_judge: judge: reply has no CORRECT/INCORRECT verdict (got 'I am not sure.')"),
        ("HTML", "llm_judge: judge: not a chat completion (got '<html>')"),
        ("SLOW", "llm_judge: judge: no answer within 0.3 s"),
    ],
)
async def test_llm_judge_failures_are_grading_errors(judge, answer, error):
    url, _ = judge
    s = await grade(LLMJudgeGrader(url, "m", timeout_s=0.3), answer, "Paris")
    assert (s.outcome, s.grade, s.error) == ("grading_error", None, error)


async def test_unreachable_judge_is_a_grading_error():
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now
    s = await grade(LLMJudgeGrader(f"http://127.0.0.1:{port}/v1/chat/completions", "m"), "Paris", "Paris")
    assert s.outcome == "grading_error" and s.error.startswith("llm_judge: judge: ClientConnectorError")


async def test_custom_template_without_reference(judge):
    url, seen = judge
    g = LLMJudgeGrader(url, "m", template="Q={question} R={reference} A={answer} {keep}")
    s = Sample(run_id="t", seq=0)
    await GradingHook(g)(spec(body={"text": "What city?"}), s, "Paris")
    assert s.grade == "correct"
    assert seen[-1]["body"]["messages"][0]["content"] == "Q=What city? R=(none) A=Paris {keep}"
