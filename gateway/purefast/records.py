"""The embedded store's put records and their scan loop (gateway/_records.c)."""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator, Sequence
from typing import Any

from .. import rowkey
from ..rowkey import MAX_PARTITIONS, MAX_SEQUENCE
from .common import _LE32, Row
from .wirecheck import tmessage

# ---- the embedded store's put records (gateway/_records.c) --------------------------------

_RECORD_MARK = 0
_RECORD_VERSION = 1
_RECORD_HEAD = struct.Struct("<BBI")  # mark, version, count; then count u32 LE offsets


def wal_records(
    partition: int,
    timestamp: int,
    sequence: int,
    topics: Sequence[bytes],
    values: Sequence[bytes],
    max_count: int,
    max_bytes: int,
) -> tuple[bytes, int]:
    """gateway/_records.c's wal_records: the put's records (first message's row key; u8 0,
    u8 version, u32 LE count, the messages' u32 LE offsets, then per message u8 topic length,
    topic, body) as log cells (u8 key length, key, u32 LE value length, value)."""
    if not (
        0 <= partition <= MAX_PARTITIONS - 1
        and 0 <= sequence <= MAX_SEQUENCE
        and timestamp >= 0
        and max_count >= 1
        and max_bytes >= 1
    ):
        raise ValueError("partition, timestamp, sequence or caps out of range")
    if len(topics) != len(values):
        raise ValueError("topics and values differ in length")
    for t, v in zip(topics, values, strict=True):
        if not isinstance(t, bytes) or not isinstance(v, bytes) or len(t) > 255:
            raise TypeError("topics must be bytes of at most 255, values bytes")
    out = []
    records = 0
    i, n = 0, len(values)
    while i < n:
        j, size = i, 0
        while j < n:
            entry = 1 + len(topics[j]) + len(values[j])
            if j > i and (j - i >= max_count or size + entry > max_bytes):
                break
            size += entry
            j += 1
        ts, seq = rowkey.nth_id((timestamp, sequence), i)
        head = _RECORD_HEAD.size + 4 * (j - i)
        offsets, entries, at = [], [], head
        for k in range(i, j):
            offsets.append(_LE32.pack(at))
            entries.append(bytes((len(topics[k]),)) + topics[k] + values[k])
            at += len(entries[-1])
        value = b"".join(
            [_RECORD_HEAD.pack(_RECORD_MARK, _RECORD_VERSION, j - i), *offsets, *entries]
        )
        key = rowkey.KEY_UNSIGNED.pack(partition, ts, seq)
        out.append(bytes((len(key),)) + key + _LE32.pack(len(value)) + value)
        records += 1
        i = j
    return b"".join(out), records


def _malformed() -> ValueError:
    return ValueError("a stored row key, cell or record is malformed")


def _record_head(value: bytes) -> tuple[int, int]:
    """A record's message count and where its first message starts."""
    if len(value) < _RECORD_HEAD.size or value[1] != _RECORD_VERSION:
        raise _malformed()
    count = _LE32.unpack_from(value, 2)[0]
    first = _RECORD_HEAD.size + 4 * count
    if count < 1 or first > len(value):
        raise _malformed()
    return count, first


def _record_message(
    key: bytes, value: bytes, count: int, first: int, i: int
) -> tuple[bytes, bytes, bytes]:
    """(row key, topic, body) of message ``i`` of a record."""
    table = _RECORD_HEAD.size
    at = _LE32.unpack_from(value, table + 4 * i)[0]
    end = _LE32.unpack_from(value, table + 4 * (i + 1))[0] if i + 1 < count else len(value)
    if at < first or end > len(value) or at >= end or at + 1 + value[at] > end:
        raise _malformed()
    p, ts0, seq0 = rowkey.KEY_UNSIGNED.unpack(key)
    ts, seq = rowkey.nth_id((ts0, seq0), i)
    tl = value[at]
    key = rowkey.KEY_UNSIGNED.pack(p, ts, seq)
    return key, value[at + 1 : at + 1 + tl], value[at + 1 + tl : end]


def scan_records(
    items: Iterator[tuple[bytes, bytes]],
    held: tuple[bytes, bytes] | None,
    lower: bytes,
    upper: bytes,
    topics: frozenset[bytes] | set[bytes] | None,
    limit: int,
    budget: int,
    rows: list[Row] | bytearray,
    max_bytes: int,
    reverse: bool,
    marks: bytearray | None = None,
) -> tuple[int, bytes | None, int, int, tuple[bytes, bytes] | None, int, bytes | None, int]:
    """gateway/_records.c's scan_records: appends the (timestamp, sequence, topic, body) of
    the messages of ``held`` then ``items`` (per-row values or records) in [lower, upper)
    whose topic is in ``topics``, in scan order, to ``rows`` (a bytearray: as TMessages, and
    ``limit`` counts what this call adds, and ``marks`` gets the page's segments: see
    :func:`mark_message`); returns (status, key, size, budget, held, taken, last, bodies) as
    the C does (status 0 end, 1 out of range, 2 limit or max_bytes, 3 budget)."""
    if topics is not None and not isinstance(topics, (set, frozenset)):
        raise TypeError("topics must be a set, a frozenset or None")
    encoded = type(rows) is bytearray
    if not encoded and not isinstance(rows, list):
        raise TypeError("rows must be a list or a bytearray")
    if marks is not None and (not encoded or type(marks) is not bytearray or marks is rows):
        raise TypeError("marks must be None, or a bytearray of its own when rows is a bytearray")
    at: bytes | None = None
    size = taken = bodies = 0
    last: bytes | None = None
    unpack = rowkey.KEY.unpack

    def entries() -> Iterator[Any]:
        if held is not None:
            yield held
        yield from items

    def done(status: int, keep: tuple[bytes, bytes] | None = None) -> Any:
        return status, at, size, budget, keep, taken, last, bodies

    def emit(mkey: bytes, topic: bytes, body: bytes, keep: Any) -> int | None:
        """One message in range: taken if its topic is wanted; a status when the call ends."""
        nonlocal taken, bodies, last, size, budget
        if topics is None or topic in topics:
            partition, ts, seq = unpack(mkey)
            if isinstance(rows, bytearray):
                start = len(rows)
                rows.extend(tmessage(ts, seq, partition, topic, body))
                if marks is not None:
                    mark_message(marks, start, len(rows), ts, seq, len(topic), partition,
                                 reverse)  # fmt: skip
            else:
                rows.append((ts, seq, topic, body))
            taken += 1
            bodies += len(body)
            last = mkey
            size += 1 + len(topic) + len(body)
            if (taken if encoded else len(rows)) >= limit or size >= max_bytes:
                return 2
        budget -= 1
        return 3 if budget <= 0 else None

    for item in entries():
        if (
            not isinstance(item, tuple)
            or len(item) != 2
            or not isinstance(item[0], bytes)
            or not isinstance(item[1], bytes)
        ):
            raise TypeError("items must yield (bytes, bytes) pairs")
        key, value = item
        if len(key) != 12 or not value:
            raise _malformed()
        record = value[0] == _RECORD_MARK
        if not record:
            if 1 + value[0] > len(value):
                raise _malformed()
            count, first = 1, 0
        elif key >= upper:  # a record starting past the range holds nothing in it
            at = key
            if reverse:
                continue
            return done(1)
        else:
            count, first = _record_head(value)
        keep = item if record else None
        if not record:
            mkey, topic, body = key, value[1 : 1 + value[0]], value[1 + value[0] :]
            at = mkey
            if mkey < lower:
                if reverse:
                    return done(1)
                continue
            if mkey >= upper:
                if reverse:
                    continue
                return done(1)
            status = emit(mkey, topic, body, keep)
            if status is not None:
                return done(status, keep)
            continue
        # a record: the messages in [lower, upper) are [lo, hi) by index, found by bisection
        # over their keys; messages outside are not read (as the C)
        p, ts0, seq0 = rowkey.KEY_UNSIGNED.unpack(key)

        def key_at(i: int, p: int = p, ts0: int = ts0, seq0: int = seq0) -> bytes:
            return rowkey.KEY_UNSIGNED.pack(p, *rowkey.nth_id((ts0, seq0), i))

        lo = bisect.bisect_left(range(count), lower, key=key_at)
        hi = max(lo, bisect.bisect_left(range(count), upper, key=key_at))
        for i in range(hi - 1, lo - 1, -1) if reverse else range(lo, hi):
            mkey, topic, body = _record_message(key, value, count, first, i)
            at = mkey
            status = emit(mkey, topic, body, keep)
            if status is not None:
                return done(status, keep)
        if not reverse and hi < count:
            at = key_at(hi)
            return done(1)
        if reverse and lo > 0:
            at = key_at(lo - 1)
            return done(1)
        at = key_at(0 if reverse else count - 1)
    return done(0)


# ---- an encoded page's marks (gateway/_marks.h) --------------------------------------------

MARK = struct.Struct("=qqqihh")  # end, last_at, last_ts, last_seq, topic length, partition


def mark_message(
    marks: bytearray, at: int, end: int, ts: int, seq: int, tl: int, part: int, reverse: bool
) -> None:
    """gateway/_marks.h's hq_mark_message: the message just appended at [at, end) extends the
    page's last segment (it follows it, with the next id, or the previous when ``reverse``,
    and the same topic length and partition) or begins one."""
    if marks:
        m_end, _, m_ts, m_seq, m_tl, m_part = MARK.unpack_from(marks, len(marks) - MARK.size)
        step = -1 if reverse else 1
        linear = ts * (MAX_SEQUENCE + 1) + seq
        if (
            m_end == at
            and m_tl == tl
            and m_part == part
            and linear == m_ts * (MAX_SEQUENCE + 1) + m_seq + step
        ):
            MARK.pack_into(marks, len(marks) - MARK.size, end, at, ts, seq, tl, part)
            return
    marks += MARK.pack(end, at, ts, seq, tl, part)
