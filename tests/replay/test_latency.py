"""benchmaker.replay_server.latency: spec parsing, send offsets, token splits."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from benchmaker.replay_server.latency import (
    LatencyModel,
    LatencySpecError,
    TokenizerUnavailable,
    load_splitter,
    parse_latency,
    regex_split,
)
from benchmaker.trajectories.trajectory import Timing
from tests.replay.test_server_fixtures import NASTY, NASTY_ARGS, NASTY_REASONING


def test_parse_latency_forms():
    assert parse_latency("instant") == LatencyModel("instant")
    assert parse_latency("recorded") == LatencyModel("recorded")
    assert parse_latency("fixed:200:20") == LatencyModel("fixed", 200.0, 20.0)
    assert parse_latency(" fixed:0.5:0.25 ") == LatencyModel("fixed", 0.5, 0.25)
    assert parse_latency("fixed:200:20").describe() == "fixed:200:20"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("posson", "unknown latency model 'posson' (expected instant, fixed:TTFT_MS:ITL_MS, recorded)"),
        ("fixed:200", "expected fixed:TTFT_MS:ITL_MS (got 'fixed:200')"),
        ("fixed:a:1", "TTFT_MS is not a number (got 'a' in 'fixed:a:1')"),
        ("fixed:1:-2", "ITL_MS must be finite and >= 0 (got '-2')"),
        ("fixed:1:inf", "ITL_MS must be finite and >= 0 (got 'inf')"),
        ("fixed:nan:1", "TTFT_MS must be finite and >= 0 (got 'nan')"),
    ],
)
def test_parse_latency_errors(spec, message):
    with pytest.raises(LatencySpecError) as info:
        parse_latency(spec)
    assert str(info.value) == f"latency: {message}"


def test_offsets_instant_and_fixed():
    assert LatencyModel("instant").offsets_ms(3) == [0.0, 0.0, 0.0]
    # fixed: event i at TTFT + i * ITL.
    assert LatencyModel("fixed", 100, 10).offsets_ms(4) == [100, 110, 120, 130]
    # No token events still means one event (role + finish) at TTFT.
    assert LatencyModel("fixed", 100, 10).offsets_ms(0) == [100]


def test_offsets_recorded():
    rec = LatencyModel("recorded")
    # ttft 100, duration 300, 5 events: evenly from 100 to 300, step 50.
    assert rec.offsets_ms(5, Timing(ttft_ms=100, duration_ms=300)) == [100, 150, 200, 250, 300]
    # duration shorter than ttft: everything at ttft.
    assert rec.offsets_ms(3, Timing(ttft_ms=100, duration_ms=50)) == [100, 100, 100]
    assert rec.offsets_ms(2, Timing(ttft_ms=40)) == [40, 40]
    # duration only: spread over the whole duration, the last at duration.
    assert rec.offsets_ms(4, Timing(duration_ms=200)) == [50, 100, 150, 200]
    assert rec.offsets_ms(2, Timing()) == [0.0, 0.0]
    assert rec.offsets_ms(2, None) == [0.0, 0.0]


@pytest.mark.parametrize(
    "text",
    [
        NASTY,
        NASTY_ARGS,
        NASTY_REASONING,
        "",
        " ",
        "\r\n\r\n",
        "a\u2028\u2029b",
        "x" * 100,
        "snake_case__name 1234567 ...!!!??",
        "\U0001f600" * 5,
        "e\u0301\u0301",
        "\x00\x1f\x7f",
        "  leading and trailing  ",
    ],
)
def test_regex_split_is_exact(text):
    pieces = regex_split(text)
    assert "".join(pieces) == text
    assert all(pieces)  # no empty pieces (an empty delta would be a wasted event)


def test_regex_split_granularity():
    assert regex_split("Hello world, 12345!") == ["Hello", " world", ",", " 123", "45", "!"]
    assert len(regex_split("a" * 30)) == 3  # words capped at 12 letters: 12 + 12 + 6
    assert regex_split("a  b") == ["a", " ", " b"]  # GPT-2 style: last space joins the word


def test_load_splitter_default_is_regex():
    assert load_splitter(None) is regex_split


@pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is not None,
    reason="tokenizers is installed; the missing-package error cannot happen",
)
def test_tokenizer_without_package_is_a_clear_error(tmp_path):
    with pytest.raises(TokenizerUnavailable, match=r"optional 'tokenizers' package is not installed"):
        load_splitter(tmp_path / "tokenizer.json")


def test_hf_splitter_cuts_at_token_starts(monkeypatch, tmp_path):
    # A stand-in for tokenizers.Tokenizer. For "abcdefgh" its tokens cover (0,2) (3,4)
    # (6,8): "c" (index 2) and "ef" are covered by no token, as when a normalizer drops
    # characters; any other text gets 3-char tokens.
    class _Encoding:
        def __init__(self, text):
            if text == "abcdefgh":
                self.offsets = [(0, 2), (3, 4), (6, 8)]
            else:
                self.offsets = [(i, min(i + 3, len(text))) for i in range(0, len(text), 3)]

    class _Tokenizer:
        @staticmethod
        def from_file(path):
            assert path == str(tmp_path / "tokenizer.json")
            return _Tokenizer()

        def encode(self, text, add_special_tokens=True):
            assert add_special_tokens is False
            return _Encoding(text)

    monkeypatch.setitem(sys.modules, "tokenizers", types.SimpleNamespace(Tokenizer=_Tokenizer))
    split = load_splitter(tmp_path / "tokenizer.json")
    # Cuts at the token starts 3 and 6; uncovered chars stay with the piece before them.
    assert split("abcdefgh") == ["abc", "def", "gh"]
    assert split("") == []
    assert "".join(split(NASTY)) == NASTY


def test_hf_splitter_bad_file(monkeypatch, tmp_path):
    class _Tokenizer:
        @staticmethod
        def from_file(path):
            raise Exception("expected value at line 1 column 1")

    monkeypatch.setitem(sys.modules, "tokenizers", types.SimpleNamespace(Tokenizer=_Tokenizer))
    with pytest.raises(TokenizerUnavailable, match=r"tokenizer\.json: cannot load \(expected value"):
        load_splitter(tmp_path / "tokenizer.json")
