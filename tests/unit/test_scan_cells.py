"""gateway._wal.scan_cells does what EmbeddedStore.scan's loop did in Python."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.fast import scan_cells

KEY = struct.Struct(">hqh")


def reference(items: Any, lower: bytes, upper: bytes, topics: Any, limit: int, budget: int,
              rows: list, max_bytes: int) -> tuple[int, bytes | None, int, int]:  # fmt: skip
    """The loop as it was in Python (gateway/store/embedded.py before scan_cells)."""
    size = 0
    key = None
    for key, cell in items:
        if key < lower or key >= upper:
            return 1, key, size, budget
        n = cell[0] + 1
        topic = cell[1:n]
        if topics is None or topic in topics:
            _, ts, seq = KEY.unpack(key)
            rows.append((ts, seq, topic, cell[n:]))
            size += len(cell)
            if len(rows) >= limit or size >= max_bytes:
                return 2, key, size, budget
        budget -= 1
        if not budget:
            return 3, key, size, budget
    return 0, key, size, budget


@st.composite
def cells(draw: Any) -> list[tuple[bytes, bytes]]:
    out = []
    for p, ts, seq in sorted(
        set(
            draw(
                st.lists(
                    st.tuples(st.integers(0, 3), st.integers(0, 2**40), st.integers(0, 32767)),
                    max_size=40,
                )
            )
        )
    ):
        topic = draw(st.sampled_from([b"a", b"bb", b""]))
        value = draw(st.binary(max_size=20))
        out.append((KEY.pack(p, ts, seq), bytes([len(topic)]) + topic + value))
    return out  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(cells(), st.integers(0, 3), st.integers(1, 4), st.none() | st.just(frozenset([b"a"])),
       st.integers(1, 50), st.integers(1, 50), st.integers(0, 3),
       st.sampled_from([1 << 62, 1, 30, 100]))  # fmt: skip
def test_scan_cells_is_the_python_loop(
    data: list,
    lo: int,
    hi: int,
    topics: Any,
    limit: int,
    budget: int,
    already: int,
    max_bytes: int,
) -> None:
    lower, upper = KEY.pack(lo, 0, 0), KEY.pack(hi, 0, 0)
    start = [(0, 0, b"x", b"y")] * already  # rows from an earlier iterator of the same call
    want_rows, got_rows = list(start), list(start)
    want = reference(iter(data), lower, upper, topics, limit, budget, want_rows, max_bytes)
    got = scan_cells(iter(data), lower, upper, topics, limit, budget, got_rows, max_bytes)
    assert got_rows == want_rows
    if want[0] == 0:  # exhausted: the key returned is the last one seen, or None
        assert got[0] == 0 and got[2:] == want[2:]
    else:
        assert got == want


def test_scan_cells_refuses_what_is_not_a_store_row() -> None:
    good = KEY.pack(0, 1, 1)
    with pytest.raises(ValueError):
        scan_cells(iter([(good, b"")]), b"", b"\xff", None, 10, 10, [], 1 << 62)
    with pytest.raises(ValueError):
        scan_cells(iter([(good, b"\x05ab")]), b"", b"\xff", None, 10, 10, [], 1 << 62)
    with pytest.raises(ValueError):
        scan_cells(iter([(b"short", b"\x01a")]), b"", b"\xff", None, 10, 10, [], 1 << 62)
    with pytest.raises(TypeError):
        scan_cells(iter([(good,)]), b"", b"\xff", None, 10, 10, [], 1 << 62)
    with pytest.raises(TypeError):
        scan_cells(iter([]), b"", b"\xff", [b"a"], 10, 10, [], 1 << 62)

    def failing() -> Any:
        yield good, b"\x01av"
        raise OSError("disk")

    rows: list = []
    with pytest.raises(OSError, match="disk"):
        scan_cells(failing(), b"", b"\xff", None, 10, 10, rows, 1 << 62)
    assert rows == [(1, 1, b"a", b"v")]
