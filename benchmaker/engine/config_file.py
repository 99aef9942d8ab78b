"""Reading YAML config files: `${VAR}` interpolation, `.env`, errors with line numbers.

    data, lines = load_yaml(Path("run.yaml"))      # environment + .env beside the file
    cfg = validate(MyModel, data, Path("run.yaml"), lines)

Interpolation (typed): a scalar that is exactly `${VAR}` (or `${VAR:-default}`) takes
the variable's value parsed as a YAML scalar, so `port: ${PORT}` with PORT=8000 is the
int 8000 and `stream: ${STREAM}` with STREAM=false is a bool; inside a longer string
the text is substituted as is. A variable that is unset and has no default, or whose
value holds a line break (YAML would fold it into a space silently), is an error naming
the file, line and field. `.env` (the file's folder, then the working folder)
fills variables the environment lacks; it never overrides the environment.

Validation errors read `run.yaml:9: load: unknown load model 'posson' (...)`.

Aliases (`&a` / `*a`) are allowed within bounds: a file whose aliases expand to more
than MAX_NODES nodes (the "billion laughs" attack: nine levels of nine-fold aliases)
or refer to themselves (`a: &a [*a]`) is a ConfigError naming the line, found by
counting before anything is expanded.

A key given twice in one mapping is refused (`UniqueKeyLoader`) with the line of the
second and of the first: PyYAML's own loaders keep the last silently.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from dotenv import dotenv_values
from pydantic import BaseModel, ValidationError

from benchmaker.engine.errors import ConfigError
from benchmaker.engine.files import not_regular

M = TypeVar("M", bound=BaseModel)
MAX_NODES = 100_000  # YAML nodes a config may expand to, aliases counted at each use
MAX_BYTES = 10 * 1024 * 1024  # a config file larger than this is refused


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader that refuses a mapping holding the same key twice, for every
    YAML a user gives (run files, `--grader @file.yaml`): raises
    yaml.constructor.ConstructorError whose `problem` names the key and the line of its
    first use and whose `problem_mark` is the second (YAML 1.2 says keys are unique;
    PyYAML keeps the last one silently). Keys compare by tag and text, so `a` and
    `"a"` are one key, `1` and `"1"` two."""

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        node = super().compose_mapping_node(anchor)
        first: dict[tuple[str, str], yaml.Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            seen = first.setdefault((key_node.tag, key_node.value), key_node)
            if seen is not key_node:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key_node.value!r} (first at line {seen.start_mark.line + 1})",
                    key_node.start_mark,
                )
        return node


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _environment(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for candidate in (Path.cwd() / ".env", path.parent / ".env"):
        if candidate.is_file():
            env.update({k: v for k, v in dotenv_values(candidate).items() if v is not None})
    env.update(os.environ)
    return env


def _interpolate(node: yaml.Node, env: dict[str, str], path: Path, where: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = key_node.value
            out[key] = _interpolate(value_node, env, path, f"{where}.{key}" if where else str(key))
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_interpolate(v, env, path, f"{where}[{i}]") for i, v in enumerate(node.value)]
    try:
        value = yaml.safe_load(yaml.serialize(node)) if node.tag != "tag:yaml.org,2002:str" else node.value
    except yaml.YAMLError as exc:  # a tag safe_load does not construct (!!python/name:...)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}:{node.start_mark.line + 1}: {where}: not valid YAML: {problem}") from None
    if not isinstance(value, str) or "${" not in value:
        return value

    def lookup(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        text = env[name] if name in env else default
        if text is not None and ("\n" in text or "\r" in text):
            raise ConfigError(
                f"{path}:{node.start_mark.line + 1}: {where}: the value of {name} holds a line break "
                "(refused: YAML would fold it into a space, and a header would carry it; "
                "write multi-line text in the file as a block scalar `|`)"
            )
        if text is not None:
            return text
        raise ConfigError(f"{path}:{node.start_mark.line + 1}: {where}: environment variable {name} is not set")

    whole = _VAR.fullmatch(value)
    if whole:
        text = lookup(whole)
        try:
            return yaml.load(text, Loader=UniqueKeyLoader) if text.strip() else text
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(
                f"{path}:{node.start_mark.line + 1}: {where}: the value of {whole.group(1)} is not valid YAML: {problem}"
            ) from None
    return _VAR.sub(lookup, value)


def _line_map(node: yaml.Node, prefix: tuple = ()) -> dict[tuple, int]:
    lines = {prefix: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (key_node.value,)
            lines[prefix + key] = key_node.start_mark.line + 1
            lines.update({k: v for k, v in _line_map(value_node, prefix + key).items() if k != prefix + key})
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            lines.update(_line_map(v, prefix + (i,)))
    return lines


def _check_expansion(root: yaml.Node, path: Path) -> None:
    """Raise ConfigError when the node graph has a cycle (a self-referencing alias) or
    expands to more than MAX_NODES nodes. Counts each distinct node's expanded size
    once (memoised), so the check itself is linear in the document."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise ConfigError(f"{path}:{node.start_mark.line + 1}: YAML alias refers to itself (a cycle)")
        on_path.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_NODES:
                raise ConfigError(
                    f"{path}:{node.start_mark.line + 1}: YAML aliases expand to more than "
                    f"{MAX_NODES} nodes (refused: an alias bomb?)"
                )
        on_path.discard(key)
        sizes[key] = total
        return total

    size(root)


def load_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple, int]]:
    """Read a YAML mapping with interpolation; returns (data, {field path: line}).
    Raises ConfigError naming the file (and line) when it is missing, not YAML, not a
    mapping, holds a key twice in one mapping, or uses an unset variable."""
    problem = not_regular(path)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    try:
        if path.is_file() and path.stat().st_size > MAX_BYTES:
            raise ConfigError(f"{path}: config larger than {MAX_BYTES // (1024 * 1024)} MiB")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        node = yaml.compose(text, Loader=UniqueKeyLoader)
        if node is None or not isinstance(node, yaml.MappingNode):
            raise ConfigError(f"{path}:1: expected a mapping of settings at the top level")
        _check_expansion(node, path)
        return _interpolate(node, _environment(path), path, ""), _line_map(node)
    except RecursionError:
        raise ConfigError(f"{path}: YAML nested too deeply") from None
    except yaml.YAMLError as exc:  # composing (_interpolate reports its own, with the field)
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc


def format_validation_error(
    exc: ValidationError,
    path: Path | str | None,
    lines: dict[tuple, int] | None = None,
    names: dict[tuple, str] | None = None,
) -> str:
    """One line per pydantic error: `path:line: field.path: message (got VALUE)`.

    With `names` (field path -> what the user typed, e.g. ("slo", "ttft_ms") ->
    "--slo-ttft-ms") the longest named prefix of the field path replaces it and `path`
    may be None: `--slo-ttft-ms: Input should be greater than 0 (got -5.0)`. The
    alternatives of a union report once per field. Messages from our own validators
    already hold the value and get no second "(got ...)"."""
    out: list[str] = []
    seen: set[str] = set()
    for err in exc.errors():
        loc = tuple(err["loc"])
        line = None
        if lines:
            probe = loc
            while probe and probe not in lines:
                probe = probe[:-1]
            line = lines.get(probe)
        field = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[") or "(top)"
        if names is not None:
            probe = loc
            while probe and probe not in names:
                probe = probe[:-1]
            field = names.get(probe, field)
        if field in seen:
            continue
        seen.add(field)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        got = (
            ""
            if err["type"] in ("extra_forbidden", "missing")
            or "(got " in msg
            or not loc
            or repr(err.get("input")) in msg
            else f" (got {err.get('input')!r:.80})"
        )
        where = f"{path}{':' + str(line) if line else ''}: " if path is not None else ""
        out.append(f"{where}{field}: {msg}{got}")
    return "\n".join(out)


def validate(model: type[M], data: dict[str, Any], path: Path | str, lines: dict[tuple, int] | None = None) -> M:
    """Validate `data` as `model`; raises ConfigError with one line per problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, path, lines)) from None
