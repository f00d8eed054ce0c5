"""The pure-Python twins of the store's C paths (gateway/purefast/) answer exactly as the C
does: merging partitions' rows and encoded pages, row keys, the log's cells and put records.
The wire's twins (scan, extract_put, reply encoding, the HBase codec) and the facade's checks
are test_purefast.py; the helpers both use are tests/unit/twins.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import purefast as py
from gateway import rowkey
from gateway.rowkey import MAX_SEQUENCE
from tests.unit.twins import c_only, cuts, edits, load_c, mangle, outcome, tmessage


@c_only
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.integers(0, 5), st.integers(0, 3), st.binary(max_size=3), st.binary(max_size=5)
            ),
            max_size=6,
        ),
        max_size=5,
    ),
    st.lists(st.booleans(), min_size=5, max_size=5),
    st.integers(0, 40),
    st.integers(0, 60),
    st.booleans(),
    st.lists(st.integers(0, 7), min_size=5, max_size=5),
)
def test_merge_rows_twin(
    bufs: list, more: list, n: int, max_bytes: int, reverse: bool, starts: list
) -> None:
    c = load_c("gateway._merge")
    bufs = [sorted(b, reverse=reverse) for b in bufs]
    more = more[: len(bufs)]
    starts = [min(s, len(b)) for s, b in zip(starts, bufs, strict=False)]
    parts = [7 - i for i in range(len(bufs))]
    got = py.merge_rows(bufs, starts, more, parts, n, max_bytes, reverse)
    assert got == c.merge_rows(bufs, starts, more, parts, n, max_bytes, reverse)
    rows, _, taken, _, _ = got
    used = {id(r) for b, s, t in zip(bufs, starts, taken, strict=True) for r in b[s : s + t]}
    assert {id(r) for r in rows} == used  # only rows from each start on, and those taken


@c_only
def test_merge_rows_refuses_a_start_outside_its_buffer() -> None:
    for impl in (py, load_c("gateway._merge")):
        with pytest.raises(ValueError, match="start is outside"):
            impl.merge_rows([[(1, 0, b"t", b"v")]], [2], [False], [0], 10, 100, False)


def test_tmessage_is_what_the_gateway_encodes() -> None:
    from gateway.fast import encode_messages_reply

    one = encode_messages_reply(b"m", 1, 3, [(1 << 40, 7, b"tp", b"value")])
    none = encode_messages_reply(b"m", 1, 3, [])
    assert one[len(none) - 1 : -1] == tmessage(1 << 40, 7, 3, b"tp", b"value")


ROW_LISTS = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 5), st.integers(0, 3), st.binary(max_size=3), st.binary(max_size=5)
        ),
        max_size=6,
    ),
    max_size=5,
)


FIVE_FLAGS = st.lists(st.booleans(), min_size=5, max_size=5)
FIVE_STARTS = st.lists(st.integers(0, 7), min_size=5, max_size=5)


def _parts(out: list) -> list[tuple[str, bytes]]:
    return [(type(p).__name__, bytes(p)) for p in out]


@c_only
@given(
    ROW_LISTS, FIVE_FLAGS, st.integers(0, 40), st.integers(0, 60), st.booleans(), FIVE_STARTS,
    st.sampled_from([0, 41, 90, 1 << 30]),
)  # fmt: skip
def test_merge_encoded_twin_and_merge_rows_agree(
    bufs: list, more: list, n: int, max_bytes: int, reverse: bool, starts: list, view_bytes: int
) -> None:
    """merge_encoded (C and twin) takes the messages merge_rows takes, in its order, and says
    where each buffer goes on; runs of view_bytes or more come as views of their page, shorter
    ones copied into one bytearray, the same parts from both."""
    c = load_c("gateway._merge")
    bufs = [sorted(b, reverse=reverse) for b in bufs]
    more = more[: len(bufs)]
    starts = [min(s, len(b)) for s, b in zip(starts, bufs, strict=False)]
    parts = [7 - i for i in range(len(bufs))]
    encoded = [[tmessage(*r[:2], p, *r[2:]) for r in b] for b, p in zip(bufs, parts, strict=True)]
    pages = [bytearray(b"junk" + b"".join(e)) for e in encoded]  # offsets need not be 0
    offsets = [4 + sum(map(len, e[:s])) for e, s in zip(encoded, starts, strict=True)]
    counts = [len(b) - s for b, s in zip(bufs, starts, strict=True)]
    marks = [_marks_of(e, b, p, 4, reverse) for e, b, p in zip(encoded, bufs, parts, strict=True)]
    answers = []
    for impl, mk in ((py, None), (c, None), (c, marks), (py, marks)):
        out = [bytearray(b"head")]
        got = impl.merge_encoded(
            pages, offsets, counts, more, out, n, max_bytes, reverse, view_bytes, mk
        )
        answers.append((_parts(out), got))
        for part in out[1:]:  # views of long runs; short runs copied, several to a bytearray
            assert len(part) >= view_bytes if isinstance(part, memoryview) else view_bytes > 0
    assert answers[0] == answers[1] == answers[2] == answers[3]  # marks change nothing
    got_parts, (taken, new_offsets, sizes, lasts, bodies) = answers[0]
    out = b"".join(p for _, p in got_parts)
    rows, row_parts, row_taken, row_bytes, _ = c.merge_rows(
        bufs, starts, more, parts, n, max_bytes, reverse
    )
    merged = [tmessage(*r[:2], p, *r[2:]) for r, p in zip(rows, row_parts, strict=True)]
    assert out == b"head" + b"".join(merged)
    assert taken == row_taken and sizes == row_bytes
    assert bodies == sum(len(r[3]) for r in rows)
    for e, s, t, off, last in zip(encoded, starts, taken, new_offsets, lasts, strict=True):
        assert off == 4 + sum(map(len, e[: s + t]))
        assert last == (4 + sum(map(len, e[: s + t - 1])) if t else -1)


def _marks_of(encoded: list, rows: list, part: int, at: int, reverse: bool) -> bytearray:
    """The marks scan_records writes for a page holding ``encoded`` from ``at`` on."""
    marks = bytearray()
    for message, (ts, seq, topic, _) in zip(encoded, rows, strict=True):
        py.mark_message(marks, at, at + len(message), ts, seq, len(topic), part, reverse)
        at += len(message)
    return marks


@c_only
@given(st.integers(0, 5), st.sampled_from(["end", "last_at", "id", "part", "tl", "cut"]))
def test_merge_encoded_refuses_marks_that_disagree_with_the_page(which: int, edit: str) -> None:
    """Marks that do not describe their page: ValueError from the C (the twin does not read
    them), nothing appended, never a read outside the page."""
    c = load_c("gateway._merge")
    rows = [(9, s, b"t", b"v" * s) for s in range(6)]
    encoded = [tmessage(ts, s, 2, t, v) for ts, s, t, v in rows]
    page = bytearray(b"".join(encoded))
    marks = _marks_of(encoded, rows, 2, 0, False)
    assert len(marks) == py.MARK.size  # one segment
    end, last_at, ts, seq, tl, part = py.MARK.unpack(marks)
    wrong = {
        "end": (end + 7 * which + 1, last_at, ts, seq, tl, part),
        "last_at": (end, last_at - 1 - which, ts, seq, tl, part),
        "id": (end, last_at, ts, seq + 1 + which, tl, part),
        "part": (end, last_at, ts, seq, tl, part + 1),
        "tl": (end, last_at, ts, seq, tl + 1 + which, part),
    }
    bad = bytearray(marks[: -1 - which] if edit == "cut" else py.MARK.pack(*wrong[edit]))
    out: list = []
    with pytest.raises(ValueError, match="marks do not match"):
        c.merge_encoded([page], [0], [6], [False], out, 99, 9999, False, 0, [bad])
    assert out == []
    with pytest.raises(ValueError, match="differ in length"):
        c.merge_encoded([page], [0], [6], [False], out, 99, 9999, False, 0, [marks, marks])


@c_only
@given(st.binary(max_size=60), st.integers(0, 3), st.integers(0, 70))
def test_merge_encoded_refuses_what_is_not_its_count_of_tmessages(
    junk: bytes, count: int, cut: int
) -> None:
    """Bytes that are not ``count`` whole TMessages: the same ValueError from C and twin, and
    nothing appended; never a read past the buffer."""
    c = load_c("gateway._merge")
    good = tmessage(5, 1, 0, b"t", b"v" * 9) * 2
    for page in (bytearray(junk), bytearray(good[:cut] + junk)):
        answers = []
        for impl in (py, c):
            out: list = []
            got = outcome(impl.merge_encoded, [page], [0], [count], [False], out, 9, 999, False, 0)
            answers.append((got, _parts(out)))
        assert answers[0] == answers[1]
        if answers[0][0][0] != "ok":
            assert answers[0] == (("ValueError", answers[0][0][1]), [])


@c_only
def test_merge_encoded_refuses_bad_arguments() -> None:
    for impl in (py, load_c("gateway._merge")):
        page = bytearray(tmessage(1, 0, 0, b"t", b"v"))
        with pytest.raises(ValueError, match="offset is outside"):
            impl.merge_encoded([page], [99], [1], [False], [], 5, 99, False, 0)
        with pytest.raises(ValueError, match="differ in length"):
            impl.merge_encoded([page], [0, 0], [1], [False], [], 5, 99, False, 0)
        with pytest.raises(ValueError, match="last part must not be"):
            impl.merge_encoded([page], [0], [1], [False], [page], 5, 99, False, 1 << 20)


@c_only
@given(st.integers(0, 32767), st.integers(0, 2**62), st.integers(0, 32767), st.integers(0, 70000))
def test_consecutive_keys_twin(partition: int, ts: int, seq: int, count: int) -> None:
    c = load_c("gateway._wal")
    assert py.consecutive_keys(partition, ts, seq, count) == c.consecutive_keys(
        partition, ts, seq, count
    )


@c_only
@given(
    st.lists(
        st.tuples(st.binary(max_size=14), st.binary(max_size=20), st.binary(max_size=40)),
        max_size=10,
    ),
    edits,
    cuts,
)
def test_wal_cells_twin(cells: list, ed: list, cut: Any) -> None:
    c = load_c("gateway._wal")
    keys, topics, values = ([r[i] for r in cells] for i in range(3))
    data = c.wal_cells(keys, topics, values)
    assert py.wal_cells(keys, topics, values) == data
    data = mangle(data, ed, cut)
    got_c: list = []
    got_py: list = []
    assert outcome(py.put_wal_cells, lambda *a: got_py.append(a), 1, data) == outcome(
        c.put_wal_cells, lambda *a: got_c.append(a), 1, data
    )
    assert got_py == got_c


@st.composite
def stored_entries(draw: Any) -> tuple[int, list[tuple[bytes, bytes]]]:
    """(partition, entries) as RocksDB holds them: records of puts (of gateway._records'
    wal_records, with small caps) and rows of one message each, in key order."""
    c = load_c("gateway._records")
    partition = draw(st.integers(0, 2))
    ts, seq = draw(st.integers(0, 4)), draw(st.integers(MAX_SEQUENCE - 6, MAX_SEQUENCE))
    out: list[tuple[bytes, bytes]] = []
    for _ in range(draw(st.integers(0, 4))):
        n = draw(st.integers(1, 8))
        if draw(st.booleans()):
            topics = [draw(st.sampled_from([b"a", b"bb", b""])) for _ in range(n)]
            values = [draw(st.binary(max_size=6)) for _ in range(n)]
            caps = draw(st.integers(1, 5)), draw(st.integers(1, 30))
            cells, records = c.wal_records(partition, ts, seq, topics, values, *caps)
            assert py.wal_records(partition, ts, seq, topics, values, *caps) == (cells, records)
            put = py.put_wal_cells(lambda k, v, into: into.append((k, v)), out, cells)
            assert put == records
        else:
            n = 1
            out.append((rowkey.encode(partition, ts, seq), b"\x01a" + draw(st.binary(max_size=4))))
        ts, seq = rowkey.nth_id(rowkey.MessageId(ts, seq), n + draw(st.integers(0, 2)))
    return partition, out


# bounds: anywhere, or exactly on (or just after) the id of the n-th stored message
bounds = st.tuples(st.integers(0, 6), st.integers(0, MAX_SEQUENCE), st.booleans()) | st.tuples(
    st.integers(0, 40), st.booleans()
)


def _bound(partition: int, items: list, bound: tuple) -> bytes:
    if len(bound) == 2:  # (n, just after): on the n-th stored message's id
        rows: list = []
        py.scan_records(iter(items), None, b"", b"\xff" * 13, None, 1 << 30, 1 << 30, rows,
                        1 << 62, False)  # fmt: skip
        ts, seq = (rows[bound[0] % len(rows)][:2]) if rows else (0, 0)
        bound = (ts, seq, bound[1])
    return rowkey.encode(partition, bound[0], bound[1]) + (b"\x00" if bound[2] else b"")


@c_only
@settings(max_examples=300, deadline=None)
@given(
    stored_entries(),
    st.none() | bounds,
    st.none() | bounds,
    st.booleans(),
    st.none() | st.frozensets(st.sampled_from([b"a", b"bb", b""]), max_size=2),
    st.integers(1, 10),
    st.integers(1, 20),
    st.sampled_from([1 << 62, 3, 12]),
    edits,
)
def test_records_twin(
    stored: Any, lo: Any, hi: Any, reverse: bool, topics: Any, limit: int, budget: int,
    max_bytes: int, ed: list,
) -> None:  # fmt: skip
    c = load_c("gateway._records")
    partition, items = stored
    lower = rowkey.partition_start(partition) if lo is None else _bound(partition, items, lo)
    upper = rowkey.partition_end(partition) if hi is None else _bound(partition, items, hi)
    if reverse:
        items = items[::-1]
    held = items[0] if items and ed else None  # an entry handed over from an earlier call
    if ed and items:  # and a damaged one
        k, v = items[-1]
        items = [*items[:-1], (k, mangle(v, ed, None))]
    args = (lower, upper, topics, limit, budget)
    rows_c: list = []
    rows_py: list = []
    a = outcome(c.scan_records, iter(items), held, *args, rows_c, max_bytes, reverse)
    b = outcome(py.scan_records, iter(items), held, *args, rows_py, max_bytes, reverse)
    assert (a, rows_c) == (b, rows_py)
    # encoded reads: the same messages as TMessages, the same answer, the same marks
    enc_c, enc_py, marks_c, marks_py = bytearray(), bytearray(), bytearray(), bytearray()
    a2 = outcome(c.scan_records, iter(items), held, *args, enc_c, max_bytes, reverse, marks_c)
    b2 = outcome(py.scan_records, iter(items), held, *args, enc_py, max_bytes, reverse, marks_py)
    assert (a2, enc_c, marks_c) == (b2, enc_py, marks_py)
    assert a2 == a
    if a[0] == "ok":
        encoded = [py.tmessage(ts, sq, partition, t, v) for ts, sq, t, v in rows_c]
        assert enc_c == b"".join(encoded)
        _check_marks(marks_c, encoded, rows_c, partition, reverse)


def _check_marks(marks: bytes, encoded: list, rows: list, partition: int, reverse: bool) -> None:
    """The marks cover the page, each a run of consecutive ids of one topic length."""
    starts = [sum(map(len, encoded[:i])) for i in range(len(encoded) + 1)]
    first = 0  # the first message of the next segment
    for end, last_at, ts, seq, tl, part in py.MARK.iter_unpack(marks):
        last = starts.index(last_at)
        assert end == starts[last + 1] and part == partition and last >= first
        assert rows[last][:2] == (ts, seq)
        ids = [
            rowkey.nth_id(rows[first][:2], -k if reverse else k) for k in range(last - first + 1)
        ]
        assert [r[:2] for r in rows[first : last + 1]] == ids
        assert {len(r[2]) for r in rows[first : last + 1]} == {tl}
        first = last + 1
    assert first == len(rows)
