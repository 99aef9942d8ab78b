"""config_file.UniqueKeyLoader: a key given twice in one mapping is refused at its
second line; keys compare by tag and text."""

from __future__ import annotations

import pytest
import yaml

from benchmaker.engine.config_file import UniqueKeyLoader


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
