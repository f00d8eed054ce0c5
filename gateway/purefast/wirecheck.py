"""The put fast path and the scan reply (gateway/_wirecheck.c: ``extract_put``, ``total_bytes``,
``encode_messages_reply``)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from .common import _I16, _I32, _I64, Row, _be32, _Reader, _Truncated

# ---- the put fast path (gateway/_wirecheck.c, extract_put) --------------------------------


def _read_message(
    r: _Reader, with_pid: bool, max_value: int, topics: list[bytes], values: list[bytes]
) -> None:
    topic_at = value_at = -1
    topic_len = value_len = 0
    while True:
        ft, fid = r.field()
        if ft == 0:
            break
        if fid == 3 and ft == 11:
            topic_at, topic_len = r.str_at()
        elif fid == 4 and ft == 11:
            value_at, value_len = r.str_at()
        elif fid == 2 and ft == 6 and with_pid:
            r.pos += 2  # overridden by the call's partitionID
        else:
            raise _Truncated
    if topic_at < 0 or value_at < 0 or not 1 <= topic_len <= 255 or value_len > max_value:
        raise _Truncated
    topic = r.buf[topic_at : topic_at + topic_len]
    if topics and topics[-1] == topic:
        topic = topics[-1]  # topics repeat: share one object
    topics.append(topic)
    values.append(r.buf[value_at : value_at + value_len])


def extract_put(
    message: bytes, with_pid: bool, single: bool, max_value: int
) -> tuple[int, bytes, int | None, list[bytes], list[bytes]] | None:
    """gateway/_wirecheck.c's extract_put: (seqid, queue, pid|None, topics, values) of a
    binary-protocol put request, or None when it needs the generic path."""
    r = _Reader(bytes(message))
    buf = r.buf
    topics: list[bytes] = []
    values: list[bytes] = []
    queue: bytes | None = None
    pid: int | None = None
    have_list = False
    try:
        if not r.need(4):
            return None
        first = _be32(buf, 0)
        if first < 0:
            if not r.need(8):
                return None
            r.pos = 8 + _be32(buf, 4)
        else:
            r.pos = 4 + first + 1
        if not r.need(4):
            return None
        seqid = _be32(buf, r.pos)
        r.pos += 4
        msgs_fid = 3 if with_pid else 2
        while True:
            ft, fid = r.field()
            if ft == 0:
                break
            if fid == 1 and ft == 11:
                at, n = r.str_at()
                queue = buf[at : at + n]
            elif with_pid and fid == 2 and ft == 6:
                if not r.need(2):
                    return None
                pid = _I16.unpack_from(buf, r.pos)[0]
                r.pos += 2
            elif fid == msgs_fid and single and ft == 12:
                _read_message(r, with_pid, max_value, topics, values)
                have_list = True
            elif fid == msgs_fid and not single and ft in (14, 15):
                if not r.need(5) or buf[r.pos] != 12:
                    return None
                n = _be32(buf, r.pos + 1)
                r.pos += 5
                for _ in range(n):
                    _read_message(r, with_pid, max_value, topics, values)
                have_list = True
            else:
                r.skip(ft, 0)
    except (_Truncated, struct.error):
        return None
    if queue is not None and have_list and (not with_pid or pid is not None):
        return seqid, queue, pid, topics, values
    return None


def total_bytes(strings: Iterable[bytes]) -> int:
    """gateway/_wirecheck.c's total_bytes: the bytes of extract_put's topics or values."""
    return sum(map(len, strings))


# ---- the scan reply (gateway/_wirecheck.c, encode_messages_reply) -------------------------

_REPLY_HEAD = struct.Struct(">iI")
_MESSAGE_HEAD = struct.Struct(">bhbhqbhhbbhhbhI")


def encode_messages_reply(
    name: bytes, seqid: int, partitions: int | list[int], rows: list[Row]
) -> bytes:
    """gateway/_wirecheck.c's encode_messages_reply: the binary REPLY of a method returning
    list<TMessage>, one TMessage per (timestamp, sequence, topic, value) row."""
    n = len(rows)
    one = isinstance(partitions, int)
    if not one and (not isinstance(partitions, list) or len(partitions) != n):
        raise TypeError("partitions must be an int or a list as long as rows")
    out = [
        _I32.pack(-2147418110),  # 0x80010002: version 1, REPLY
        _I32.pack(len(name)),
        name,
        _I32.pack(seqid),
        b"\x0f\x00\x00\x0c",  # success: list<TMessage>
        _I32.pack(n),
    ]
    for i, row in enumerate(rows):
        if not isinstance(row, tuple) or len(row) != 4:
            raise TypeError("a row must be (timestamp, sequence, topic, value)")
        ts, seq, topic, value = row
        if not isinstance(topic, bytes) or not isinstance(value, bytes):
            raise TypeError("topic and value must be bytes")
        p = partitions if one else partitions[i]  # type: ignore[index]
        out.append(tmessage(ts, seq, p, topic, value))  # type: ignore[arg-type]
    out.append(b"\x00")
    return b"".join(out)


def tmessage(ts: int, seq: int, partition: int, topic: bytes, value: bytes) -> bytes:
    """gateway/_thriftbuf.h's put_tmessage: one TMessage on the binary protocol."""
    return (
        b"\x0c\x00\x01\x0a\x00\x01"
        + _I64.pack(ts)
        + b"\x06\x00\x02"
        + _I16.pack(_wrap16(seq))
        + b"\x00\x06\x00\x02"
        + _I16.pack(_wrap16(partition))
        + b"\x0b\x00\x03"
        + _I32.pack(len(topic))
        + topic
        + b"\x0b\x00\x04"
        + _I32.pack(len(value))
        + value
        + b"\x00"
    )


def _wrap16(v: int) -> int:
    """(int16_t)v as C casts it."""
    return ((v + 0x8000) & 0xFFFF) - 0x8000
