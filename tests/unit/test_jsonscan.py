"""The C scanner of flat JSON objects (``pipeline/_jsonscan.c``) against pyarrow.json, no Spark: every row
it accepts is one the native JSON parse would have given pyarrow (``{...}`` on one line) and that pyarrow
parses, wrapped as ``{"v":<value>}`` with the explicit schema, to exactly the same values; every row pyarrow
refuses it refuses too.  Inputs: clickstream events (some malformed), the tricky-value corpus of the Spark
comparison, escapes, unicode and invalid UTF-8, integer boundaries, duplicate keys, nested unknown fields,
whitespace, and a seeded fuzz of mutated events."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.json as pj
import pytest

from kafka_handoff._native import load_extension
from kafka_handoff.pipeline import transform as T
from kafka_handoff.sample import generate_events
from native_json_corpus import CORPUS

SCAN = load_extension("kafka_handoff.pipeline._jsonscan", honour_env=False)

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(SCAN is None, reason="the _jsonscan extension is not built"),
]

REFUSED = object()

CLICKS = [("event_id", pa.string()), ("user", pa.string()), ("session", pa.string()), ("page", pa.string()),
          ("action", pa.string()), ("timestamp", pa.int64())]  # fmt: skip
# The corpus schema without its float fields (the C scanner is not used for a schema with floats).
TYPED = [("s", pa.string()), ("l", pa.int64()), ("i", pa.int32()), ("sh", pa.int16()), ("b", pa.int8()),
         ("ok", pa.bool_()), ("timestamp", pa.int64())]  # fmt: skip


@pytest.fixture(autouse=True)
def c_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T, "_JSONSCAN", SCAN)  # (also under KAFKA_HANDOFF_PURE_PYTHON)


def struct_of(fields: Sequence[tuple[str, Any]]) -> Any:
    return pa.struct([pa.field(name, t) for name, t in fields])


def c_scan(values: Any, fields: Sequence[tuple[str, Any]]) -> list[Any]:
    """Per row: REFUSED, or the row's dict as the C scanner parsed it."""
    chunked = values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values], values.type)
    plan = T._Plan(None, [n for n, _ in fields], [t for _, t in fields])
    scanned = T._c_scan(chunked, plan, struct_of(fields))
    assert scanned is not None
    mask, acc = scanned
    acc.validate(full=True)
    assert len(mask) == len(chunked) and len(acc) == int(mask.sum())
    rows = iter(acc.to_pylist())
    return [next(rows) if ok else REFUSED for ok in mask.tolist()]


def reference(value: bytes | None, fields: Sequence[tuple[str, Any]]) -> Any:
    """REFUSED, or what today's path makes of ``value`` without Spark: a one-line ``{...}`` value wrapped
    and parsed by pyarrow.json alone, to an object."""
    if value is None or not (value.startswith(b"{") and value.endswith(b"}")):
        return REFUSED
    if b"\n" in value or b"\r" in value:
        return REFUSED
    wrap = pa.schema([pa.field("v", struct_of(fields))])
    try:
        table = pj.read_json(
            pa.BufferReader(b'{"v":' + value + b"}\n"),
            read_options=pj.ReadOptions(use_threads=False),
            parse_options=pj.ParseOptions(explicit_schema=wrap, unexpected_field_behavior="ignore"),
        )
    except Exception:
        return REFUSED
    if table.num_rows != 1:
        return REFUSED
    try:
        row = table.column("v")[0].as_py()
    except UnicodeDecodeError:  # pyarrow let invalid UTF-8 through into a string
        return REFUSED
    return REFUSED if row is None else row


def check(values: Sequence[bytes | None], fields: Sequence[tuple[str, Any]]) -> list[bool]:
    """Assert that every row the C scanner accepts equals pyarrow's parse of it; per row, accepted."""
    got = c_scan(pa.array(values, pa.binary()), fields)
    accepted = []
    for value, row in zip(values, got, strict=True):
        if row is REFUSED:
            accepted.append(False)
            continue
        expected = reference(value, fields)
        assert expected is not REFUSED, f"C accepted {value!r}, pyarrow refuses it"
        assert row == expected, f"{value!r}: C {row!r}, pyarrow {expected!r}"
        accepted.append(True)
    return accepted


def test_clickstream_events_are_accepted_and_equal_pyarrows_malformed_ones_refused() -> None:
    events = generate_events(3000, seed=5, malformed_share=0.05)
    accepted = check([e.value for e in events], CLICKS)
    for event, ok in zip(events, accepted, strict=True):
        if event.malformed == "invalid_json":
            assert not ok, event.value
        else:  # a valid event, or one missing a (required) field: JSON the scanner reads
            assert ok, event.value
    assert sum(accepted) > 2800


def test_the_tricky_corpus() -> None:
    accepted = dict(zip(CORPUS, check(CORPUS, TYPED), strict=True))
    # the plain, boundary, unicode and escaped values are the scanner's; the others are not
    for value in (
        b'{"s":"y","l":-9223372036854775808,"i":-2147483648,"sh":-32768,"b":-128,"d":-0.0,"f":-0.0,"ok":false}',
        b'{"s":"caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x82\xac","l":1}',
        b'{"s":"\\u00e9\\ud83d\\ude00\\/\\"\\\\\\b\\f\\n\\r\\t","l":1}',
        b'{"s":"x\\u0000y","l":1}',
        b"{}",
        b'{"s":null,"l":null}',
        b'{"S":"upper case key","l":1}',
    ):
        assert accepted[value], value
    for refused in (
        b'{"s":123,"l":1}', b'{"s":"x","l":"123"}', b'{"s":"x","l":1.0}',
        b'{"s":"x","l":9223372036854775808}', b'{"s":"x","l":1,"b":128}', b'{"s":"x","l":1,"ok":1}',
        b'{"s":"x","l":007}', b'{"s":"x","l":+1}',
        b'{"s":"lone \\ud800 surrogate","l":1}', b'{"s":"bad utf8 \xff\xfe","l":1}',
        b'{"s":"raw\ttab","l":1}',
        b'{"s":"encoded surrogate \xed\xa0\x80","l":1}', b'{"s":"overlong \xc0\xaf","l":1}',
        b'{"\\u0073":"escaped key","l":1}', b'{"s":"first","s":"second","l":1}', b' \t{"s":"x","l":1} ',
        b'{"s":"x","l":1}\n', b'{"s":"x",\n"l":1}', b'{"s":"x","l":1}{"s":"y","l":2}', b'{"s":"x","l":1,}',
        b'{"s":"x","l":1,"d":NaN}', b"{'s':'single quotes','l':1}", b"null", b"[1,2]", None, b"",
    ):  # fmt: skip
        assert not accepted[refused], refused


def test_escapes_and_unicode() -> None:
    strings = [
        b'"plain"', b'""', b'"\\"\\\\\\/\\b\\f\\n\\r\\t"', b'"\\u0041\\u00e9\\u20AC\\uFFFF\\uffff"',
        b'"\\ud83d\\ude00"', b'"\\uD83D\\uDE00x"', b'"\\udbff\\udfff"', b'"\\ud800"', b'"\\ud800x"',
        b'"\\ud800\\u0041"', b'"\\udc00"', b'"\\ude00\\ud83d"', b'"\\u12"', b'"\\u12g4"', b'"\\x41"',
        b'"\\a"',
        b'"\\"', b'"\\', b'"\\u0000"', b'"\\u001f"', b'"\x7f"', b'"\x1f"', b'"\x00"', b'"\t"',
        b'"\xc3\xa9"', b'"\xe2\x82\xac"', b'"\xf0\x9f\x98\x80"', b'"\xf4\x8f\xbf\xbf"', b'"\xef\xbf\xbf"',
        b'"\xc3"', b'"\xc3x"', b'"\xe2\x82"', b'"\xf0\x9f\x98"', b'"\x80"', b'"\xbf"', b'"\xc0\x80"',
        b'"\xc1\xbf"', b'"\xe0\x80\xaf"', b'"\xe0\x9f\xbf"', b'"\xed\xa0\x80"', b'"\xed\xbf\xbf"',
        b'"\xed\x9f\xbf"', b'"\xf0\x80\x80\xaf"', b'"\xf0\x8f\xbf\xbf"', b'"\xf4\x90\x80\x80"',
        b'"\xf5\x80\x80\x80"',
        b'"\xff"', b'"\xfe"', b'"a\xc3\xa9\\n\xe2\x82\xac\\u00e9b"', b'"' + b"x" * 5000 + b'"',
    ]  # fmt: skip
    values = [b'{"s":' + s + b',"l":1}' for s in strings]
    values += [b'{"l":1,"zz":' + s + b"}" for s in strings]  # the same in an unknown field
    accepted = check(values, TYPED)
    assert accepted[0] and accepted[3] and accepted[4] and accepted[24]  # plain, \\u, surrogate pair, UTF-8


def test_integer_boundaries() -> None:
    values = []
    for name, bits in (("b", 8), ("sh", 16), ("i", 32), ("l", 64)):
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        for n in (lo - 1, lo, lo + 1, -1, 0, 1, hi - 1, hi, hi + 1, hi * 10, lo * 10):
            values.append(f'{{"{name}":{n}}}'.encode())
        for text in ("-0", "00", "01", "-01", "1.0", "1e2", "1E2", "-", "+1", "1.", ".5", "0x10", "--1"):
            values.append(f'{{"{name}":{text}}}'.encode())
    values += [b'{"l":' + b"9" * 25 + b"}", b'{"l":-' + b"9" * 25 + b"}", b'{"l":18446744073709551616}']
    accepted = check(values, TYPED)
    in_range = [v for v, ok in zip(values, accepted, strict=True) if ok]
    assert b'{"l":-9223372036854775808}' in in_range and b'{"l":9223372036854775807}' in in_range
    assert b'{"b":-128}' in in_range and b'{"b":127}' in in_range and b'{"i":2147483647}' in in_range
    assert b'{"b":128}' not in in_range and b'{"l":9223372036854775808}' not in in_range


def test_booleans_nulls_duplicates_nesting_and_whitespace() -> None:
    values = [
        b'{"ok":true}', b'{"ok":false}', b'{"ok":null}', b'{"ok":1}', b'{"ok":"true"}', b'{"ok":True}',
        b'{"ok":tru}', b'{"ok":truex}', b'{"ok":nul}', b'{"s":nullx}',
        b'{"s":"a","s":"b"}', b'{"s":null,"s":"b"}', b'{"l":1,"l":1}', b'{"ok":true,"ok":true}',
        b'{"x":1,"x":2,"s":"a"}', b'{"x":{"y":[1,2,{"z":null}],"w":"q"},"s":"a"}', b'{"x":[],"y":{},"s":"a"}',
        b'{"x":[1,2,],"s":"a"}', b'{"x":{"y":1,},"s":"a"}', b'{"x":[1 2],"s":"a"}', b'{"x":{"y"},"s":"a"}',
        b'{"x":{"y":1}}}', b'{"x":' + b"[" * 40 + b"]" * 40 + b"}", b'{"x":' + b"[" * 20 + b"]" * 20 + b"}",
        b'{"x":-1.5e10,"y":0.25,"z":1E+2,"s":"a"}', b'{"x":1e999}', b'{"x":1e-999}', b'{"x":01}',
        b'{"x":1.}', b'{"x":-}', b'{"x":.5}', b'{"x":' + b"1" * 400 + b"}", b'{"x":"\\u00e9\\n"}',
        b'{"x":"\xff"}', b'{"x":"\x01"}', b'{"\\u0078":1}', b'{"x\\n":1}', b'{"x\xff":1}',
        b'{ "s" : "a" , "l" : 1 }', b'{\t"s"\t:\t"a"\t}', b'{  }', b'{"s":"a"} ', b' {"s":"a"}',
        b'{"s":"a"\x0b}', b'{"s":"a"\x0c}', b'{"s"\n:"a"}', b'{"s":"a",\r"l":1}', b'{"s":"a"}}',
        b'{{"s":"a"}',
        b'{"s" "a"}', b'{"s":"a" "l":1}', b'{"s":"a",,"l":1}', b'{,"s":"a"}', b'{"s":}', b'{"s"}', b"{",
        b"}", b"{}}", b'{"":1,"s":"a"}', b'{"S":"a","L":2}',
    ]  # fmt: skip
    accepted = dict(zip(values, check(values, TYPED), strict=True))
    assert accepted[b'{"ok":false}'] and accepted[b'{"x":{"y":[1,2,{"z":null}],"w":"q"},"s":"a"}']
    assert accepted[b'{ "s" : "a" , "l" : 1 }'] and accepted[b'{\t"s"\t:\t"a"\t}'] and accepted[b"{  }"]
    assert not accepted[b'{"s":"a","s":"b"}'] and not accepted[b'{"s":null,"s":"b"}']


def test_sliced_chunked_arrays_and_null_rows() -> None:
    values: list[bytes | None] = []
    for n in range(300):
        ok = str(n % 2 == 0).lower()
        values.append(None if n % 7 == 0 else f'{{"s":"v{n}","l":{n},"ok":{ok}}}'.encode())
        if n % 11 == 0:
            values.append(b'{"s":"bad","l":1.5}')
    whole = pa.array(values, pa.binary())
    expected = [REFUSED if reference(v, TYPED) is REFUSED else reference(v, TYPED) for v in values]
    for start, stop in ((0, len(values)), (1, len(values)), (13, 200), (64, 65), (5, 5)):
        assert c_scan(whole.slice(start, stop - start), TYPED) == expected[start:stop]
    # several chunks, sliced ones and a string (not binary) column among them
    chunked = pa.chunked_array([whole.slice(0, 50), whole.slice(50, 0), whole.slice(50, 100)])
    assert c_scan(chunked, TYPED) == expected[:150]
    strings = pa.array([None if v is None else v.decode() for v in values[:80]], pa.string()).slice(3)
    assert c_scan(strings, TYPED) == expected[3:80]
    assert c_scan(pa.array([None, None], pa.binary()), TYPED) == [REFUSED, REFUSED]
    assert c_scan(pa.array([], pa.binary()), TYPED) == []


def test_every_field_type_arrives_with_its_arrow_type_and_nulls() -> None:
    values = [
        b'{"s":"a","l":1,"i":2,"sh":3,"b":4,"ok":true,"timestamp":5}',
        b"{}",
        b'{"s":null,"l":null,"i":-2,"sh":null,"b":-4,"ok":false}',
        b'{"ok":true,"b":0}',
    ] * 5
    plan = T._Plan(None, [n for n, _ in TYPED], [t for _, t in TYPED])
    scanned = T._c_scan(pa.chunked_array([pa.array(values, pa.binary())]), plan, struct_of(TYPED))
    assert scanned is not None
    mask, acc = scanned
    assert mask.all() and acc.type == struct_of(TYPED)
    for (name, _), child in zip(TYPED, acc.flatten(), strict=True):
        assert child.null_count == sum(1 for v in values if json.loads(v).get(name) is None), name
    nulls = dict.fromkeys(["s", "l", "sh", "timestamp"])
    assert acc.to_pylist()[2] == {**nulls, "i": -2, "b": -4, "ok": False}


def mutate(rng: random.Random, value: bytes) -> bytes:
    alphabet = b'{}[]",:\\ \t\n0123456789-+.eEuntrfalsd\x00\x1f\x7f\x80\xbf\xc3\xe2\xed\xf0\xff'
    data = bytearray(value)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) + 1)
        kind = rng.randrange(4)
        if kind == 0 and data:
            del data[min(at, len(data) - 1)]
        elif kind == 1:
            data.insert(at, rng.choice(alphabet))
        elif kind == 2 and data:
            a = rng.randrange(len(data))
            data[a:a] = data[a : a + rng.randint(1, 12)]
        elif len(data) > 1:
            a, b = rng.randrange(len(data)), rng.randrange(len(data))
            data[a], data[b] = data[b], data[a]
    return bytes(data)


def test_a_seeded_fuzz_of_mutated_events() -> None:
    rng = random.Random(1515)
    seeds = [e.value for e in generate_events(200, seed=3, malformed_share=0.0)]
    typed = [
        b'{"s":"caf\xc3\xa9 \\u00e9\\ud83d\\ude00","l":-42,"i":7,"sh":-3,"b":12,"ok":true,'
        b'"x":[1,{"y":null}]}',
        b'{"l":9223372036854775807,"b":-128,"ok":false,"s":"\\"q\\"","timestamp":0}',
    ]
    clicks = [mutate(rng, rng.choice(seeds)) for _ in range(2500)]
    accepted = check(clicks, CLICKS)
    assert 0 < sum(accepted) < len(clicks)
    variants = [mutate(rng, rng.choice(typed)) for _ in range(1500)]
    accepted = check(variants, TYPED)
    assert 0 < sum(accepted) < len(variants)
