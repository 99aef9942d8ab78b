"""Answer graders, run as post-response hooks after a request ended (off its timed span).

    hook = GradingHook(NumericGrader(abs_tol=0.01))        # a PostResponseHook
    BenchRunner(cfg, workload=wl, post_hooks=[hook])
    BenchRunner(cfg, lanes=[...], post_hooks=[GradingHook({"qa": ChoiceGrader()})])  # per lane
    grader = build_grader(TypeAdapter(GraderSpec).validate_python({"type": "exact"}))

A grader compares the generated text of a request with its expected answer, the
`reference` in the request's meta (datasets put `Item.reference` there; `reference_key`
picks another key). Only samples whose outcome is `ok` are graded. The hook then sets:

    sample.grade    "correct" or "wrong" (None: not graded)
    sample.outcome  "graded_wrong" for a wrong answer; "grading_error" when the grader
                    itself failed (no reference, judge unreachable, bad judge reply), with
                    the reason in `sample.error`
    sample.meta     {"answer": the extracted answer} when the grader extracts one

Accuracy and goodput of correct answers: docs/metrics.md ("Accuracy"). One grader class
per YAML type (`grader: {type: ...}`: exact, contains, regex, numeric, choice,
json_schema, llm_judge), each stating its rule; the list for users:
docs/benchmark-an-endpoint.md ("Accuracy grading").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field

from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import Outcome, RequestSpec, Sample

__all__ = [
    "ChoiceGrader",
    "ContainsGrader",
    "ExactGrader",
    "GradeResult",
    "Grader",
    "GraderSpec",
    "GradingError",
    "GradingHook",
    "JsonSchemaGrader",
    "LLMJudgeGrader",
    "NumericGrader",
    "RegexGrader",
    "build_grader",
    "extract_choice",
    "extract_number",
    "parse_grader_option",
]

_OK = Outcome.OK.value


class GradingError(Exception):
    """The grader could not judge (no reference, judge failure); the sample's outcome
    becomes `grading_error` with this message."""


@dataclass(frozen=True, slots=True)
class GradeResult:
    """One verdict: `correct`, the `answer` the grader extracted (or None), and a short
    `detail` kept in sample.error for a wrong answer."""

    correct: bool
    answer: str | None = None
    detail: str | None = None


class Grader(Protocol):
    """Judges one answer. `needs_reference` says whether `grade` requires a reference."""

    name: str
    needs_reference: bool

    async def grade(self, text: str, reference: str | None, spec: RequestSpec) -> GradeResult: ...


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text) if len(text) <= limit else repr(text[:limit] + "...")


def _norm(text: str, case_sensitive: bool) -> str:
    text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


# ------------------------------------------------------------------------------ text graders


class ExactGrader:
    """Correct when the normalized text equals the normalized reference (whitespace
    stripped and collapsed; case folded unless `case_sensitive`)."""

    name = "exact"
    needs_reference = True

    def __init__(self, case_sensitive: bool = False) -> None:
        self.case_sensitive = case_sensitive

    async def grade(self, text: str, reference: str | None, spec: RequestSpec) -> GradeResult:
        got, want = _norm(text, self.case_sensitive), _norm(reference or "", self.case_sensitive)
        return GradeResult(got == want, None, None if got == want else f"expected {_short(reference)}")


class ContainsGrader(ExactGrader):
    """Correct when the normalized reference occurs in the normalized text."""

    name = "contains"

    async def grade(self, text: str, reference: str | None, spec: RequestSpec) -> GradeResult:
        ok = _norm(reference or "", self.case_sensitive) in _norm(text, self.case_sensitive)
        return GradeResult(ok, None, None if ok else f"text does not contain {_short(reference)}")


class RegexGrader:
    """Regex grading. With `pattern` given: with a capture group and a reference, the
    last match's group 1 (normalized) must equal the reference; else any match is
    correct. No pattern: the reference is the pattern (re.search). Raises ConfigError
    for a bad `pattern`; a reference that is not a valid pattern (no `pattern` given) is
    a GradingError."""

    name = "regex"

    def __init__(self, pattern: str | None = None, case_sensitive: bool = True) -> None:
        self.flags = 0 if case_sensitive else re.IGNORECASE
        self.case_sensitive = case_sensitive
        try:
            self.pattern = re.compile(pattern, self.flags) if pattern is not None else None
        except re.error as exc:
            raise ConfigError(f"grader.pattern: bad regular expression: {exc} (got {pattern!r})") from None
        self.needs_reference = self.pattern is None

    async def grade(self, text: str, reference: str | None, spec: RequestSpec) -> GradeResult:
        if self.pattern is None:
            try:
                pat = re.compile(reference or "", self.flags)
            except re.error as exc:
                raise GradingError(f"reference is not a regular expression: {exc} (got {_short(reference)})") from None
            ok = pat.search(text) is not None
            return GradeResult(ok, None, None if ok else f"no match for {_short(reference)}")
        matches = list(self.pattern.finditer(text))
        if not matches:
            return GradeResult(False, None, f"no match for {_short(self.pattern.pattern)}")
        last = matches[-1]
        if self.pattern.groups and reference is not None:
            answer = last.group(1) or ""
            ok = _norm(answer, self.case_sensitive) == _norm(reference, self.case_sensitive)
            return GradeResult(ok, answer, None if ok else f"expected {_short(reference)}")
        return GradeResult(True, last.group(0))


# ------------------------------------------------------------------------------ numbers

_NUMBER = re.compile(r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+−]?\.\d+(?:[eE][-+]?\d+)?")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_ANSWER_MARK = re.compile(r"answer\s*(?:is|:|=)", re.IGNORECASE)


def _to_float(token: str) -> float:
    return float(token.replace(",", "").replace("−", "-"))


def extract_number(text: str) -> float | None:
    """The answer number of a text, or None when it has none. Looks, in order: after the
    last `####` (GSM8K), inside the last `\\boxed{...}`, after the last "answer is" /
    "answer:" / "answer =", else the last number anywhere. Accepts signs (also U+2212),
    thousands commas (`1,234`), decimals and exponents.

        extract_number("so 3 + 4 = 7. #### 7")    # 7.0
        extract_number("The answer is $1,234.50") # 1234.5
    """
    spans: list[str] = []
    if "####" in text:
        spans.append(text.rsplit("####", 1)[1])
    boxed = _BOXED.findall(text)
    if boxed:
        spans.append(boxed[-1])
    marks = list(_ANSWER_MARK.finditer(text))
    if marks:
        spans.append(text[marks[-1].end() :])
    for span in spans:
        m = _NUMBER.search(span)
        if m:
            return _to_float(m.group(0))
    found = _NUMBER.findall(text)
    return _to_float(found[-1]) if found else None


class NumericGrader:
    """Correct when the answer number (extract_number) is within `abs_tol` or `rel_tol`
    of the reference number (math.isclose). The reference must hold a number
    (GradingError otherwise). Raises ConfigError on negative tolerances."""

    name = "numeric"
    needs_reference = True

    def __init__(self, abs_tol: float = 0.0, rel_tol: float = 0.0) -> None:
        if abs_tol < 0 or rel_tol < 0:
            raise ConfigError(f"grader: abs_tol and rel_tol must be >= 0 (got {abs_tol}, {rel_tol})")
        self.abs_tol = abs_tol
        self.rel_tol = rel_tol

    async def grade(self, text: str, reference: str | None, spec: RequestSpec) -> GradeResult:
        want = extract_number(str(reference))
        if want is None:
            raise GradingError(f"reference holds no number (got {_short(reference)})")
        got = extract_number(text)
        if got is None:
            return GradeResult(False, None, "no number in the answer")
        ok = math.isclose(got, want, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        shown = f"{got:g}"
        return GradeResult(ok, shown, None if ok else f"expected {want:g} (got {shown})")


# ------------------------------------------------------------------------------ multiple choice

# Words after which a lone "A" is still a choice, not the article ("A is correct").
_A_VERBS = frozenset("is was seems appears would should must can could best correct".split())


def extract_choice(text: str, choices: str = "ABCD") -> str | None:
    """The chosen letter (upper case) of a multiple-choice answer, or None.

    First match wins, each taking the LAST occurrence in the text:
      1. an answer phrase: "answer is (B)", "Answer: B", "the answer is b.", "answer: **C**"
         (lower case only when delimited: followed by `.`, `)`, `,`, `:`, `*` or the end,
         or in parentheses, so "the answer is a cat" picks nothing here);
      2. bold: "**C**", "**(C)**", "**C.**", "**C)**";
      3. the whole text is one letter: "B", "(b)", "c.";
      4. a line that starts with "B)" / "(B)" / "B." / "B:";
      5. a standalone upper-case letter (word boundaries), except an "A" followed by a
         lower-case word other than a verb like "is" (the article: "A cat" is not A).
    Source of the shapes: the formats in lm-evaluation-harness MMLU / GPQA answer filters.
    """
    letters = re.escape(choices.upper()) + re.escape(choices.lower())
    cls = f"[{letters}]"
    up = f"[{re.escape(choices.upper())}]"
    delim = r"(?=[.)\],:*]|\s*$)"
    phrase = re.compile(rf"(?i:answer(?:\s+is)?)\s*[:=]?\s*(?:\*\*)?\s*(?:\(({cls})\)|({up})\b|({cls}){delim})")
    for regex in (
        phrase,
        re.compile(rf"\*\*\s*\(?({cls})\)?[.):]?\s*\*\*"),
        re.compile(rf"^\s*\(?({cls})\)?[.:)]?\s*$"),
        re.compile(rf"^\s*\(?({up})(?:\)|\.|:)", re.MULTILINE),
    ):
        found = [next(g for g in m.groups() if g) for m in regex.finditer(text)]
        if found:
            return found[-1].upper()
    last = None
    for m in re.finditer(rf"\b({up})\b", text):
        if m.group(1) == "A":
            nxt = re.match(r"\s+([a-z]\w*)", text[m.end() :])
            if nxt and nxt.group(1) not in _A_VERBS:
                continue
        last = m.group(1)
    return last


class ChoiceGrader:
    """Multiple choice: correct when extract_choice(text) equals the reference letter.
    The reference is a letter ("B", "(b)", "B.") among `choices`; otherwise a
    GradingError. No extractable letter in the text is a wrong answer."""

    name = "choice"
    needs_reference = True

    def __init__(self, choices: str = "ABCD") -> None:
        if not choices or not choices.isalpha() or len(set(choices.upper())) != len(choices):
            raise ConfigError(f"grader.choices: expected distinct letters like ABCD (got {choices!r})")
        self.choices = choices.upper()

    async def grade(self, text: str, reference: str | None, spec: RequestSpec) -> GradeResult:
        want = str(reference).strip().strip("().*").strip().upper()
        if len(want) != 1 or want not in self.choices:
            raise GradingError(f"reference is not one of the choices {self.choices} (got {_short(reference)})")
        got = extract_choice(text, self.choices)
        if got is None:
            return GradeResult(False, None, f"no choice among {self.choices} in the answer")
        return GradeResult(got == want, got, None if got == want else f"expected {want} (got {got})")


# ------------------------------------------------------------------------------ JSON schema

_FENCE = re.compile(r"^\s*```[\w-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)


class JsonSchemaGrader:
    """Correct when the text is JSON valid against `schema` (a JSON Schema object).
    A ```json fence around the whole text is removed. Raises ConfigError when the
    `jsonschema` package is missing (`pip install jsonschema`, in the dev extras) or the
    schema itself is invalid."""

    name = "json_schema"
    needs_reference = False

    def __init__(self, schema: dict[str, Any]) -> None:
        try:
            import jsonschema
        except ImportError:
            raise ConfigError("grader json_schema needs the jsonschema package (pip install jsonschema)") from None
        cls = jsonschema.validators.validator_for(schema)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigError(f"grader.schema: invalid JSON Schema: {exc.message}") from None
        self.schema = schema
        self._validator = cls(schema)

    async def grade(self, text: str, reference: str | None, spec: RequestSpec) -> GradeResult:
        m = _FENCE.match(text)
        body = m.group(1) if m else text
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return GradeResult(False, None, f"not JSON: {exc}")
        errors = sorted(self._validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            err = errors[0]
            where = "/".join(str(p) for p in err.absolute_path) or "(root)"
            return GradeResult(False, None, f"{where}: {err.message}")
        return GradeResult(True)


# ------------------------------------------------------------------------------ LLM judge

DEFAULT_JUDGE_TEMPLATE = """You are grading an answer to a question against a reference answer.

Question:
{question}

Reference answer:
{reference}

Answer to grade:
{answer}

Is the answer correct (same meaning as the reference; wording may differ)?
Reply with exactly one word: CORRECT or INCORRECT."""

_VERDICT = re.compile(r"\b(INCORRECT|CORRECT)\b", re.IGNORECASE)


def _question(spec: RequestSpec) -> str:
    """The question of a request: meta `question`, else the body's last user message,
    `prompt` or `text`; "" when none is found."""
    q = spec.meta.get("question")
    if isinstance(q, str):
        return q
    try:
        body = orjson.loads(b"".join(spec.body) if isinstance(spec.body, list) else spec.body or b"{}")
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(body, dict):
        return ""
    for msg in reversed(body.get("messages") or []):
        if isinstance(msg, dict) and msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    for key in ("prompt", "text"):
        if isinstance(body.get(key), str):
            return body[key]
    return ""


class LLMJudgeGrader:
    """An LLM judge over HTTP: POST `url` (OpenAI chat completions, not streamed) with one
    user message, the `template` filled in; the verdict is the last CORRECT / INCORRECT
    word of the reply (case-insensitive).

        LLMJudgeGrader("http://127.0.0.1:8000/v1/chat/completions", "judge-model")
        LLMJudgeGrader(url, "m", template="Q: {question}\\nA: {answer}\\nCORRECT or INCORRECT?")

    Template placeholders (plain text replacement, so other braces stay as they are):
    `{question}` (meta `question`, else the request's last user message / prompt / text),
    `{reference}` (the reference, or "(none)"), `{answer}` (the generated text).
    Body: `{"model", "messages", "temperature": 0, "max_tokens"}`. `api_key` goes in a
    Bearer header. One aiohttp session per call, with `timeout_s` as the total deadline
    (grading is off the request path, so connection reuse is not measured).
    Failures raise GradingError (→ `grading_error`): connection errors, the deadline,
    status >= 400 (its body kept), a body that is not chat-completion JSON, a reply
    without a verdict.
    """

    name = "llm_judge"
    needs_reference = False

    def __init__(
        self,
        url: str,
        model: str,
        *,
        template: str = DEFAULT_JUDGE_TEMPLATE,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_tokens: int = 16,
    ) -> None:
        if "{answer}" not in template:
            raise ConfigError("grader.template: must contain {answer}")
        self.url = url
        self.model = model
        self.template = template
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    def prompt(self, text: str, reference: str | None, spec: RequestSpec) -> str:
        """The filled-in template for one answer."""
        return (
            self.template.replace("{question}", _question(spec))
            .replace("{reference}", reference if reference is not None else "(none)")
            .replace("{answer}", text)
        )

    async def grade(self, text: str, reference: str | None, spec: RequestSpec) -> GradeResult:

        import aiohttp

        body = orjson.dumps(
            {
                "model": self.model,
                "messages": [{"role": "user", "content": self.prompt(text, reference, spec)}],
                "temperature": 0,
                "max_tokens": self.max_tokens,
            }
        )
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as session:
                async with session.post(self.url, data=body, headers=self._headers) as resp:
                    raw = await resp.read()
                    status = resp.status
        except TimeoutError:
            raise GradingError(f"judge: no answer within {self.timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise GradingError(f"judge: {type(exc).__name__}: {exc}") from None
        if status >= 400:
            raise GradingError(f"judge: HTTP {status}: {raw[:200].decode('utf-8', 'replace')}")
        try:
            reply = orjson.loads(raw)["choices"][0]["message"]["content"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            shown = _short(raw[:200].decode("utf-8", "replace"))
            raise GradingError(f"judge: not a chat completion (got {shown})") from None
        verdicts = _VERDICT.findall(reply) if isinstance(reply, str) else []
        if not verdicts:
            raise GradingError(f"judge: reply has no CORRECT/INCORRECT verdict (got {_short(reply)})")
        ok = verdicts[-1].upper() == "CORRECT"
        return GradeResult(ok, verdicts[-1].upper(), None if ok else "judge: INCORRECT")


# ------------------------------------------------------------------------------ the hook


class GradingHook:
    """A PostResponseHook (benchmaker.engine.types) that grades each `ok` sample.

        GradingHook(ExactGrader())                         # every lane
        GradingHook({"qa": ChoiceGrader(), "chat": None})  # per lane; lanes not named: none

    The reference is `spec.meta[reference_key]` (str() of a non-string). A grader that
    needs a reference and finds none sets `grading_error`. See the module docstring for
    what is written on the sample.
    """

    def __init__(self, grader: Grader | Mapping[str, Grader | None], reference_key: str = "reference") -> None:
        self._by_lane = dict(grader) if isinstance(grader, Mapping) else None
        self._grader = None if isinstance(grader, Mapping) else grader
        self.reference_key = reference_key

    async def __call__(self, spec: RequestSpec, sample: Sample, text: str) -> None:
        grader = self._grader if self._by_lane is None else self._by_lane.get(sample.lane)
        if grader is None or sample.outcome != _OK:
            return
        ref = spec.meta.get(self.reference_key)
        reference = None if ref is None else ref if isinstance(ref, str) else str(ref)
        try:
            if reference is None and grader.needs_reference:
                raise GradingError(f"no {self.reference_key!r} in the request's meta (dataset reference missing)")
            result = await grader.grade(text, reference, spec)
        except GradingError as exc:
            sample.outcome = Outcome.GRADING_ERROR.value
            sample.error = f"{grader.name}: {exc}"
            return
        sample.grade = "correct" if result.correct else "wrong"
        if result.answer is not None:
            sample.meta = {**(sample.meta or {}), "answer": result.answer}
        if not result.correct:
            sample.outcome = Outcome.GRADED_WRONG.value
            sample.error = f"{grader.name}: {result.detail or 'wrong answer'}"


# ------------------------------------------------------------------------------ YAML specs


class _Strict(BaseModel):
    """The keys every grader spec has: `reference_key`, the request meta key of the reference."""

    model_config = ConfigDict(extra="forbid")
    reference_key: str = "reference"


class ExactSpec(_Strict):
    type: Literal["exact"]
    case_sensitive: bool = False


class ContainsSpec(_Strict):
    type: Literal["contains"]
    case_sensitive: bool = False


class RegexSpec(_Strict):
    type: Literal["regex"]
    pattern: str | None = None
    case_sensitive: bool = True


class NumericSpec(_Strict):
    type: Literal["numeric"]
    abs_tol: float = Field(0.0, ge=0)
    rel_tol: float = Field(0.0, ge=0)


class ChoiceSpec(_Strict):
    type: Literal["choice"]
    choices: str = "ABCD"


class JsonSchemaSpec(_Strict):
    type: Literal["json_schema"]
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    schema_file: Path | None = None


class LLMJudgeSpec(_Strict):
    type: Literal["llm_judge"]
    url: str
    model: str
    template: str | None = None
    template_file: Path | None = None
    api_key: str | None = None
    timeout_s: float = Field(60.0, gt=0)
    max_tokens: int = Field(16, ge=1)


GraderSpec = Annotated[
    ExactSpec | ContainsSpec | RegexSpec | NumericSpec | ChoiceSpec | JsonSchemaSpec | LLMJudgeSpec,
    Field(discriminator="type"),
]


def _read(path: Path, base_dir: Path | None, field: str) -> str:
    p = path if path.is_absolute() or base_dir is None else base_dir / path
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"grader.{field}: cannot read {p} ({exc.strerror})") from None


def build_grader(spec: Any, base_dir: Path | None = None) -> Grader:
    """Grader object of a GraderSpec; relative file paths resolve against `base_dir`.
    Raises ConfigError on a bad pattern, schema or missing file."""
    if isinstance(spec, ExactSpec):
        return ExactGrader(spec.case_sensitive)
    if isinstance(spec, ContainsSpec):
        return ContainsGrader(spec.case_sensitive)
    if isinstance(spec, RegexSpec):
        return RegexGrader(spec.pattern, spec.case_sensitive)
    if isinstance(spec, NumericSpec):
        return NumericGrader(spec.abs_tol, spec.rel_tol)
    if isinstance(spec, ChoiceSpec):
        return ChoiceGrader(spec.choices)
    if isinstance(spec, JsonSchemaSpec):
        if (spec.schema_ is None) == (spec.schema_file is None):
            raise ConfigError("grader json_schema: give exactly one of schema or schema_file")
        schema = spec.schema_
        if schema is None:
            assert spec.schema_file is not None, "exactly one is given (checked above)"
            text = _read(spec.schema_file, base_dir, "schema_file")
            try:
                schema = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise ConfigError(f"grader.schema_file: bad JSON: {exc}") from None
        return JsonSchemaGrader(schema)
    if isinstance(spec, LLMJudgeSpec):
        if spec.template is not None and spec.template_file is not None:
            raise ConfigError("grader llm_judge: give at most one of template or template_file")
        template = spec.template
        if spec.template_file is not None:
            template = _read(spec.template_file, base_dir, "template_file")
        return LLMJudgeGrader(
            spec.url,
            spec.model,
            template=template or DEFAULT_JUDGE_TEMPLATE,
            api_key=spec.api_key or None,
            timeout_s=spec.timeout_s,
            max_tokens=spec.max_tokens,
        )
    raise ConfigError(f"grader: unknown spec {spec!r}")


def parse_grader_option(value: str, base_dir: Path | None = None) -> tuple[Grader, str]:
    """The `--grader` CLI value: a type name (`exact`, `choice`, ...), inline JSON
    (`{"type": "numeric", "abs_tol": 0.01}`) or `@file.json|yaml`. Returns (grader,
    reference_key). Raises ConfigError naming `--grader`."""
    from pydantic import TypeAdapter, ValidationError

    from benchmaker.engine.config_file import UniqueKeyLoader, format_validation_error

    text = value.strip()
    if text.startswith("@"):
        path = Path(text[1:])
        import yaml

        try:
            data = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)
        except OSError as exc:
            raise ConfigError(f"--grader: cannot read {path} ({exc.strerror})") from None
        except yaml.YAMLError as exc:  # one line: the problem at its line, not PyYAML's excerpt
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
            raise ConfigError(f"--grader: {where}: not YAML/JSON: {problem}") from None
        base_dir = path.resolve().parent
    elif text.startswith("{"):
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"--grader: bad JSON: {exc} (got {_short(text)})") from None
    else:
        data = {"type": text}
    try:
        spec = TypeAdapter(GraderSpec).validate_python(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "--grader")) from None
    return build_grader(spec, base_dir), spec.reference_key
