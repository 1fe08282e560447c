"""How ``handoff produce`` reads records: delimiters, key delimiters, headers, JSON lines, base64."""

from __future__ import annotations

import argparse
import io

import pytest

from kafka_handoff.cli.main import build_parser
from kafka_handoff.cli.produce import ProduceInput, parse_records

pytestmark = pytest.mark.unit


def _args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["produce", "-t", "t", *flags])


def _read(text: str, *flags: str) -> list[tuple[object, ...]]:
    return list(parse_records(io.StringIO(text), "stdin", _args(*flags)))


def test_lines_are_values_blank_lines_skipped() -> None:
    assert _read("a\n\nb\n") == [(None, b"a", [], None, None), (None, b"b", [], None, None)]


def test_key_delimiter_headers_and_partition() -> None:
    got = _read("k1:v:1\nk2:v2\n", "-K", ":", "-H", "src=cli", "-p", "3")
    assert got == [
        (b"k1", b"v:1", [("src", b"cli")], 3, None),
        (b"k2", b"v2", [("src", b"cli")], 3, None),
    ]


def test_a_line_without_the_key_delimiter_names_its_record() -> None:
    with pytest.raises(ProduceInput, match="stdin: record 2: no key delimiter"):
        _read("k:v\nnokey\n", "-K", ":")


def test_custom_and_empty_record_delimiters() -> None:
    assert [r[1] for r in _read("a|b|c", "-D", "|")] == [b"a", b"b", b"c"]
    assert [r[1] for r in _read("line1\nline2\n", "-D", "")] == [b"line1\nline2\n"]


def test_json_lines_with_headers_objects_and_base64() -> None:
    text = (
        '{"key": "k", "value": {"n": 1}, "headers": {"h": "x"}, "partition": 2, "timestamp": 1700000000000}\n'
        '{"value": "plain", "headers": [["a", "1"], ["a", "2"]]}\n'
    )
    assert _read(text, "--format", "json") == [
        (b"k", b'{"n":1}', [("h", b"x")], 2, 1700000000000),
        (None, b"plain", [("a", b"1"), ("a", b"2")], None, None),
    ]
    assert _read('{"key": "AAE=", "value": "/w=="}\n', "--format", "json", "--base64")[0][:2] == (
        b"\x00\x01",
        b"\xff",
    )


def test_bad_json_and_bad_base64_name_the_record() -> None:
    with pytest.raises(ProduceInput, match="record 1: not JSON"):
        _read("{nope\n", "--format", "json")
    with pytest.raises(ProduceInput, match="record 1: not valid base64"):
        _read("***\n", "--base64")
    with pytest.raises(ProduceInput, match="expected an object"):
        _read('{"valu": 1}\n', "--format", "json")
