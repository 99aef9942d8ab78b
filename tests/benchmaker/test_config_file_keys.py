"""config_file: a key given twice in one mapping is refused at its second line (keys
compare by tag and text); a `${VAR}` whose value holds a line break is refused."""

from __future__ import annotations

import pytest
import yaml

from benchmaker.engine.config_file import UniqueKeyLoader, load_yaml
from benchmaker.engine.errors import ConfigError


def _load(text: str) -> object:
    return yaml.load(text, Loader=UniqueKeyLoader)


def test_a_quoted_and_a_plain_key_of_the_same_text_are_one_key() -> None:
    with pytest.raises(yaml.constructor.ConstructorError) as info:
        _load('a: 1\nb: 2\n"a": 3\n')
    assert info.value.problem == "duplicate key 'a' (first at line 1)"
    assert info.value.problem_mark.line + 1 == 3


def test_keys_of_different_types_are_different_keys() -> None:
    assert _load('1: int\n"1": str\n') == {1: "int", "1": "str"}


def test_the_same_key_in_two_mappings_is_fine() -> None:
    assert _load("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}


def test_a_duplicate_inside_a_list_item_names_its_line() -> None:
    with pytest.raises(yaml.constructor.ConstructorError) as info:
        _load("lanes:\n  - name: a\n    rate: closed:1\n    name: b\n")
    assert info.value.problem == "duplicate key 'name' (first at line 2)"
    assert info.value.problem_mark.line + 1 == 4


@pytest.mark.parametrize("text", ["headers:\n  X-Token: ${TOKEN}\n", "headers:\n  X-Token: Bearer ${TOKEN}\n"])
def test_a_variable_holding_a_line_break_is_refused_naming_file_line_and_field(
    tmp_path, monkeypatch, text: str
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("url: http://127.0.0.1:1\n" + text)
    monkeypatch.setenv("TOKEN", "a\nb")
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert str(info.value).startswith(
        f"{path}:3: headers.X-Token: the value of TOKEN holds a line break (refused: YAML would fold it"
    )


def test_a_variable_on_one_line_is_kept_as_it_is(tmp_path, monkeypatch) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("port: ${PORT}\nname: x-${NAME}\n")
    monkeypatch.setenv("PORT", "8000")
    monkeypatch.setenv("NAME", "a b")
    assert load_yaml(path)[0] == {"port": 8000, "name": "x-a b"}
