"""Reading YAML config files: `${VAR}` interpolation, `.env`, errors with line numbers.

    data, lines = load_yaml(Path("run.yaml"))      # environment + .env beside the file
    cfg = validate(MyModel, data, Path("run.yaml"), lines)

Interpolation (typed): a scalar that is exactly `${VAR}` (or `${VAR:-default}`) takes
the variable's value parsed as a YAML scalar, so `port: ${PORT}` with PORT=8000 is the
int 8000 and `stream: ${STREAM}` with STREAM=false is a bool; inside a longer string
the text is substituted as is. A variable that is unset and has no default is an error
naming the file, line and field. `.env` (the file's folder, then the working folder)
fills variables the environment lacks; it never overrides the environment.

Validation errors read `run.yaml:9: load: unknown load model 'posson' (...)`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from dotenv import dotenv_values
from pydantic import BaseModel, ValidationError

from benchmaker.errors import ConfigError

M = TypeVar("M", bound=BaseModel)
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
    value = yaml.safe_load(yaml.serialize(node)) if node.tag != "tag:yaml.org,2002:str" else node.value
    if not isinstance(value, str) or "${" not in value:
        return value

    def lookup(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{path}:{node.start_mark.line + 1}: {where}: environment variable {name} is not set")

    whole = _VAR.fullmatch(value)
    if whole:
        text = lookup(whole)
        return yaml.safe_load(text) if text.strip() else text
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


def load_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple, int]]:
    """Read a YAML mapping with interpolation; returns (data, {field path: line}).
    Raises ConfigError naming the file (and line) when it is missing, not YAML, not a
    mapping, or uses an unset variable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    if node is None or not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{path}:1: expected a mapping of settings at the top level")
    return _interpolate(node, _environment(path), path, ""), _line_map(node)


def format_validation_error(exc: ValidationError, path: Path | str, lines: dict[tuple, int] | None = None) -> str:
    """One line per pydantic error: `path:line: field.path: message (got VALUE)`."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        line = None
        if lines:
            probe = loc
            while probe and probe not in lines:
                probe = probe[:-1]
            line = lines.get(probe)
        field = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[") or "(top)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        got = "" if err["type"] in ("extra_forbidden", "missing") else f" (got {err.get('input')!r:.80})"
        out.append(f"{path}{':' + str(line) if line else ''}: {field}: {msg}{got}")
    return "\n".join(out)


def validate(model: type[M], data: dict[str, Any], path: Path | str, lines: dict[tuple, int] | None = None) -> M:
    """Validate `data` as `model`; raises ConfigError with one line per problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, path, lines)) from None
