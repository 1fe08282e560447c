"""The clickstream sample generator behind ``handoff produce-sample`` (ground truth for pipeline tests)."""

from __future__ import annotations

import json

import pytest

from kafka_handoff.cli.main import build_parser
from kafka_handoff.sample import (
    DEFAULT_START_MS,
    REQUIRED_FIELDS,
    generate_events,
    iter_events,
)

pytestmark = pytest.mark.unit


def test_same_seed_same_events_other_seed_other_events() -> None:
    a = generate_events(500, seed=7, malformed_share=0.05)
    b = generate_events(500, seed=7, malformed_share=0.05)
    c = generate_events(500, seed=8, malformed_share=0.05)
    assert a == b
    assert [e.value for e in a] != [e.value for e in c]


def test_well_formed_events_are_complete_json_keyed_by_user() -> None:
    events = generate_events(2000, seed=1, malformed_share=0.0)
    assert all(e.malformed is None for e in events)
    ids = set()
    last = DEFAULT_START_MS
    for e in events:
        parsed = json.loads(e.value)
        assert parsed == e.event
        assert set(REQUIRED_FIELDS) <= parsed.keys()
        assert e.key == parsed["user"].encode()
        assert e.timestamp == parsed["timestamp"] >= last
        assert isinstance(parsed["timestamp"], int)
        assert parsed["session"].startswith("s-" + parsed["user"][len("user-") :])
        last = e.timestamp
        ids.add(parsed["event_id"])
    assert len(ids) == len(events)


def test_malformed_share_and_kinds() -> None:
    events = generate_events(20_000, seed=2, malformed_share=0.02)
    bad = [e for e in events if e.is_malformed]
    assert 300 <= len(bad) <= 500
    kinds = {e.malformed for e in bad}
    assert kinds == {"invalid_json", "missing_field"}
    for e in bad:
        assert e.event is None
        if e.malformed == "invalid_json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(e.value)
        else:
            parsed = json.loads(e.value)
            assert not set(REQUIRED_FIELDS) <= parsed.keys()


def test_iter_events_matches_generate_events_and_validates() -> None:
    assert list(iter_events(100, 3, 0.1, start_ms=5, users=3)) == generate_events(
        100, 3, 0.1, start_ms=5, users=3
    )
    assert {e.key for e in generate_events(200, users=3)} == {b"user-0000", b"user-0001", b"user-0002"}
    with pytest.raises(ValueError):
        generate_events(10, malformed_share=1.5)
    with pytest.raises(ValueError):
        generate_events(-1)


def test_cli_registers_produce_sample() -> None:
    args = build_parser().parse_args(
        [
            "produce-sample",
            "--topic",
            "t",
            "--count",
            "10",
            "--rate",
            "5",
            "--malformed-share",
            "0.1",
            "--partitions",
            "3",
            "--seed",
            "9",
        ]
    )
    assert (args.topic, args.count, args.rate, args.malformed_share, args.partitions, args.seed) == (
        "t",
        10,
        5.0,
        0.1,
        3,
        9,
    )
    assert callable(args.func)


def test_default_event_times_end_about_now_and_now_starts_now() -> None:
    from kafka_handoff.sample import default_start_ms

    now = 1_800_000_000_000
    start = default_start_ms(100_000, now_ms=now)
    assert start == now - 2_500_000  # 25 ms mean spacing: the 100,000 events end about now
    times = [e.timestamp for e in iter_events(100_000, 0, 0.0, start_ms=start)]
    assert abs(times[-1] - now) < 60_000  # within a minute of now: retention keeps them, none far ahead
    assert default_start_ms(100_000, now=True, now_ms=now) == now
