"""The native JSON parse's pieces without Spark: finding the rows that contain a byte, and parsing
wrapped lines with the values pyarrow refuses left out, every parsed row at its own position."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from kafka_handoff.pipeline import transform as T

pytestmark = pytest.mark.unit

WRAP = pa.schema([pa.field("v", pa.struct([pa.field("s", pa.string()), pa.field("l", pa.int64())]))])


def lines(values: list[bytes]) -> Any:
    return pa.array([b'{"v":' + v + b"}\n" for v in values], pa.binary())


def parsed_rows(values: list[bytes]) -> dict[int, Any]:
    out = {}
    for start, arr in T._parse_rows(lines(values), WRAP):
        for i, row in enumerate(arr.to_pylist()):
            out[start + i] = row
    return out


def test_rows_with_finds_each_row_holding_one_of_the_bytes() -> None:
    values = pa.array([b"ab", None, b"", b"x\ny", b"\r", b"zz\n"] * 700, pa.binary()).slice(3)
    got = T._rows_with(values, b"\n\r")
    expected = [b"\n" in v or b"\r" in v if v is not None else False for v in values.to_pylist()]
    assert got.tolist() == expected
    assert not T._rows_with(pa.array([None, None], pa.binary()), b"{").any()


def test_refused_values_are_left_out_and_the_others_keep_their_rows() -> None:
    good = [f'{{"s":"v{n}","l":{n}}}'.encode() for n in range(5000)]
    bad = {
        17: b'{"s":1,"l":1}',  # type change: the error names its row
        2100: b'{"s":"x","l":1.5}',  # conversion error: no row named, found by halving
        2101: b'{"s":"x","l":99999999999999999999}',
        4999: b'{"s":"cut',
        3000: b'{"s":"two\\u0022"}{"s":"objects"}',
    }
    values = [bad.get(n, v) for n, v in enumerate(good)]
    rows = parsed_rows(values)
    assert set(rows) == set(range(5000)) - set(bad)
    assert all(rows[n] == {"s": f"v{n}", "l": n} for n in rows)


def test_a_line_break_inside_a_value_never_shifts_the_rows_after_it() -> None:
    # Split at the break, such a value reads as two objects; the row count check refuses it.
    tricky = [b'{"s":"a","l":1}}\r{"v":{"s":"b","l":2}', b'{"s":"a","l":1}}\n{"v":{"s":"b","l":2}']
    values = [f'{{"s":"v{n}","l":{n}}}'.encode() for n in range(10)]
    values[3], values[7] = tricky
    rows = parsed_rows(values)
    assert 3 not in rows and 7 not in rows
    assert all(rows[n] == {"s": f"v{n}", "l": n} for n in rows) and len(rows) == 8
