"""The C encoders stay memory-safe when Python code they call changes their inputs (issue 34, low
findings): ``encode_records`` writes the headers it measured even if the caller's headers sequence yields
something else the second time, and ``complete_futures``/``complete_lazy`` read their lists' sizes after
the lock's ``acquire`` (Python code that may release the GIL, or, here, change the lists).

Each case runs in a child process: before the fix they read or write out of bounds (a crash, or corrupt
output), which must not take the test run down."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kafka_handoff.producer.future import C_FUTURES
from kafka_handoff.protocol import records as records_module

pytestmark = pytest.mark.unit


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(records_module._extension is None, reason="the C record encoder is not built")
def test_encode_records_writes_the_headers_it_measured() -> None:
    out = _run(
        """
        from kafka_handoff.protocol import records

        class Shifty:
            # One small header the first time it is read, a thousand large ones afterwards.
            calls = 0
            def __len__(self):
                return 1 if Shifty.calls == 0 else 1000
            def __getitem__(self, i):
                return self._items()[i]
            def __iter__(self):
                items = self._items()
                Shifty.calls += 1
                return iter(items)
            def _items(self):
                if Shifty.calls == 0:
                    return [("h", b"v")]
                return [("k" * 100, b"x" * 10_000)] * 1000

        data, max_ts = records._extension.encode_records([(None, b"value", 5, Shifty())], 0)
        cols = records.RecordColumns()
        end = records._py_records_to_columns(data, 0, 1, 0, 0, cols)
        assert end == len(data), (end, len(data))
        assert cols.headers == [(("h", b"v"),)], cols.headers
        print("ok")
        """
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


@pytest.mark.skipif(records_module._extension is None, reason="the C record encoder is not built")
def test_encode_records_survives_headers_that_empty_the_entry_list() -> None:
    out = _run(
        """
        from kafka_handoff.protocol import records

        entries = []

        class Emptier:
            def __iter__(self):
                entries.clear()  # the list being encoded
                return iter([("h", b"v")])

        entries.extend([(None, b"a", 1, Emptier())] + [(None, b"b" * 100, 2, None)] * 50)
        data, max_ts = records._extension.encode_records(entries, 0)
        cols = records.RecordColumns()
        end = records._py_records_to_columns(data, 0, 51, 0, 0, cols)
        assert end == len(data) and len(cols.offsets) == 51
        print("ok")
        """
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


@pytest.mark.skipif(C_FUTURES is None, reason="the C producer futures are not built")
@pytest.mark.parametrize("function", ["complete_futures", "complete_lazy"])
def test_completion_reads_list_sizes_after_acquiring_the_lock(function: str) -> None:
    out = _run(
        f"""
        from kafka_handoff.producer.future import C_FUTURES

        items = [object() for _ in range(10_000)]

        class Lock:
            def acquire(self):
                items.clear()  # another thread, while acquire released the GIL
                return True
            def release(self):
                pass

        if "{function}" == "complete_futures":
            slow = C_FUTURES.complete_futures(Lock(), items, None, ValueError("x"))
        else:
            items[:] = [(None, b"v", 1, None, object(), None)] * 10_000
            slow = C_FUTURES.complete_lazy(Lock(), items, object())
        assert slow == [], slow
        print("ok")
        """
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
