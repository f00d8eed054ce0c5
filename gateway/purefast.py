"""The pure-Python twins of the gateway's C fast paths (``HQUEUE_PUREPYTHON=1``).

Each function here does what its C original does, byte for byte and result for result, in
plain Python: ``gateway/fast.py`` binds these instead of the C functions when the variable is
set, and the C extensions are then not imported at all. They are the readable spec of the C
code (tests/unit/test_purefast.py checks them equal with Hypothesis) and a way to run the
gateway where nothing can be compiled; they are several times slower.

Owners: the Thrift fast codec (``scan``, ``extract_put``, ``total_bytes``,
``encode_messages_reply``:
gateway/_wirecheck.c), the merged scans' merge (``merge_rows``: gateway/_merge.c), the embedded
store's log cells, row keys and sync thread (gateway/_wal.c) and its put records and their
scan loop (``wal_records``, ``scan_records``: gateway/_records.c), the HBase codec
(``encode_mutate_rows``, ``decode_rows_reply``: gateway/store/_hbasecodec.c).
"""

from __future__ import annotations

import heapq
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from . import rowkey
from .rowkey import MAX_PARTITIONS, MAX_SEQUENCE

Row = tuple[int, int, bytes, bytes]

MAX_DEPTH = 64

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_LE32 = struct.Struct("<I")

# ---- the request scanner (gateway/_wirecheck.c, scan) -------------------------------------

_F_STRUCT, _F_LIST, _F_MAP = 1, 2, 3
_BINARY_TYPES = frozenset((2, 3, 4, 6, 8, 10, 11, 12, 13, 14, 15))


class _More(Exception):
    def __init__(self, need: int) -> None:
        self.need = need


class _Bad(Exception):
    pass


class _State:
    __slots__ = ("depth_frames", "header_done", "name_len", "name_off", "pos", "values")

    def __init__(self) -> None:
        self.pos = 0
        self.values = 0
        self.name_off = 0
        self.name_len = 0
        self.header_done = False
        # frames: [kind, t1, t2, phase, remaining]
        self.depth_frames: list[list[int]] = []

    def copy(self) -> _State:
        s = _State()
        s.pos, s.values, s.name_off, s.name_len = (
            self.pos,
            self.values,
            self.name_off,
            self.name_len,
        )
        s.header_done = self.header_done
        s.depth_frames = [list(f) for f in self.depth_frames]
        return s


def _be32(buf: bytes, p: int) -> int:
    return _I32.unpack_from(buf, p)[0]  # type: ignore[no-any-return]


class _Scan:
    def __init__(
        self, buf: bytes, max_string: int, max_container: int, max_values: int, s: _State
    ) -> None:
        self.buf = buf
        self.len = len(buf)
        self.max_string = max_string
        self.max_container = max_container
        self.max_values = max_values
        self.s = s

    def varint(self, at: int, max_bytes: int) -> tuple[int, int]:
        v = 0
        shift = 0
        for i in range(max_bytes):
            if at + i >= self.len:
                raise _More(at + i + 1)
            b = self.buf[at + i]
            if shift == 63 and b > 1:
                raise _Bad(f"varint over 64 bits (byte 0x{b:x})")
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v & 0xFFFFFFFFFFFFFFFF, at + i + 1
            shift += 7
        raise _Bad(f"varint longer than {max_bytes} bytes")

    def varint_within(self, at: int, max_bytes: int, limit: int, what: str) -> int:
        v, at = self.varint(at, max_bytes)
        if v > limit:
            raise _Bad(f"{what} varint 0x{v:x} is out of range")
        return at

    @staticmethod
    def check_size(size: int, limit: int, what: str) -> None:
        if size < 0:
            raise _Bad(f"negative size {size}")
        if size > limit:
            raise _Bad(f"{what} of {size} is over the limit of {limit}")

    def push(self, kind: int, t1: int, t2: int, remaining: int) -> None:
        if len(self.s.depth_frames) >= MAX_DEPTH:
            raise _Bad(f"nesting deeper than {MAX_DEPTH}")
        self.s.depth_frames.append([kind, t1, t2, 0, remaining])

    def begin_arguments(self, p: int) -> None:
        if p > self.len:
            raise _More(p)
        self.s.pos = p
        self.s.header_done = True
        self.push(_F_STRUCT, 0, 0, 0)

    # binary protocol
    def binary_value(self, t: int, p: int, in_field: bool) -> int:
        buf, n_ = self.buf, self.len
        pushed = False
        if t in (2, 3):
            p += 1
        elif t == 6:
            p += 2
        elif t == 8:
            p += 4
        elif t in (4, 10):
            p += 8
        elif t == 11:
            if p + 4 > n_:
                raise _More(p + 4)
            n = _be32(buf, p)
            self.check_size(n, self.max_string, "string")
            p += 4 + n
        elif t == 12:
            self.push(_F_STRUCT, 0, 0, 0)
            pushed = True
        elif t in (14, 15):
            if p + 5 > n_:
                raise _More(p + 5)
            et = buf[p]
            n = _be32(buf, p + 1)
            self.check_size(n, self.max_container, "list")
            if n > 0 and et not in _BINARY_TYPES:
                raise _Bad(f"invalid list element type {et}")
            p += 5
            if p > n_:
                raise _More(p)
            self.push(_F_LIST, et, 0, n)
            pushed = True
        elif t == 13:
            if p + 6 > n_:
                raise _More(p + 6)
            kt, vt = buf[p], buf[p + 1]
            n = _be32(buf, p + 2)
            self.check_size(n, self.max_container, "map")
            if n > 0 and (kt not in _BINARY_TYPES or vt not in _BINARY_TYPES):
                raise _Bad(f"invalid map key or value type {kt * 256 + vt}")
            p += 6
            self.push(_F_MAP, kt, vt, n)
            pushed = True
        else:
            raise _Bad(f"invalid type {t}")
        if p > n_:
            if pushed:
                self.s.depth_frames.pop()
            raise _More(p)
        return p

    def binary_header(self) -> None:
        if self.len < 4:
            raise _More(4)
        first = _be32(self.buf, 0)
        if first < 0:
            if (first & 0xFFFF0000) != 0x80010000:
                raise _Bad(f"bad protocol version 0x{first & 0xFFFFFFFF:x}")
            if self.len < 8:
                raise _More(8)
            name_len = _be32(self.buf, 4)
            self.check_size(name_len, 4096, "method name")
            self.s.name_off = 8
            p = 8 + name_len + 4
        else:
            name_len = first
            self.check_size(name_len, 4096, "method name")
            self.s.name_off = 4
            p = 4 + name_len + 1 + 4
        self.s.name_len = name_len
        self.begin_arguments(p)

    def binary_field(self, at: int) -> tuple[int, int] | None:
        if at >= self.len:
            raise _More(at + 1)
        t = self.buf[at]
        if t == 0:
            return None
        if t not in _BINARY_TYPES:
            raise _Bad(f"invalid field type {t}")
        if at + 3 > self.len:
            raise _More(at + 3)
        return t, at + 3

    # compact protocol
    def compact_value(self, t: int, p: int, in_field: bool) -> int:
        pushed = False
        if t in (1, 2):
            if not in_field:
                p += 1
        elif t == 3:
            p += 1
        elif t == 4:
            p = self.varint_within(p, 3, 0xFFFF, "i16")
        elif t == 5:
            p = self.varint_within(p, 5, 0xFFFFFFFF, "i32")
        elif t == 6:
            p = self.varint_within(p, 10, 0xFFFFFFFFFFFFFFFF, "i64")
        elif t == 7:
            p += 8
        elif t == 8:
            v, p = self.varint(p, 5)
            self.check_size(v, self.max_string, "string")
            p += v
        elif t == 12:
            self.push(_F_STRUCT, 0, 0, 0)
            pushed = True
        elif t in (9, 10):
            if p >= self.len:
                raise _More(p + 1)
            h = self.buf[p]
            p += 1
            et = h & 0x0F
            n = h >> 4
            if n == 15:
                n, p = self.varint(p, 5)
            self.check_size(n, self.max_container, "list")
            if n > 0 and not 1 <= et <= 12:
                raise _Bad(f"invalid list element type {et}")
            if p > self.len:
                raise _More(p)
            self.push(_F_LIST, et, 0, n)
            pushed = True
        elif t == 11:
            n, p = self.varint(p, 5)
            self.check_size(n, self.max_container, "map")
            kt = vt = 0
            if n > 0:
                if p >= self.len:
                    raise _More(p + 1)
                kt = self.buf[p] >> 4
                vt = self.buf[p] & 0x0F
                p += 1
                if not (1 <= kt <= 12 and 1 <= vt <= 12):
                    raise _Bad(f"invalid map key or value type {kt * 16 + vt}")
            self.push(_F_MAP, kt, vt, n)
            pushed = True
        else:
            raise _Bad(f"invalid type {t}")
        if p > self.len:
            if pushed:
                self.s.depth_frames.pop()
            raise _More(p)
        return p

    def compact_header(self) -> None:
        if self.len < 2:
            raise _More(2)
        if self.buf[0] != 0x82:
            raise _Bad(f"bad compact protocol id 0x{self.buf[0]:x}")
        if (self.buf[1] & 0x1F) != 1:
            raise _Bad(f"bad compact protocol version {self.buf[1] & 0x1F}")
        p = self.varint_within(2, 5, 0xFFFFFFFF, "seqid")
        v, p = self.varint(p, 5)
        self.check_size(v, 4096, "method name")
        self.s.name_off = p
        self.s.name_len = v
        self.begin_arguments(p + v)

    def compact_field(self, at: int) -> tuple[int, int] | None:
        if at >= self.len:
            raise _More(at + 1)
        b = self.buf[at]
        if b == 0:
            return None
        p = at + 1
        if (b >> 4) == 0:
            p = self.varint_within(p, 3, 0xFFFF, "field id")
        return b & 0x0F, p

    def walk(self, compact: bool) -> None:
        s = self.s
        if compact:
            header, field, value = self.compact_header, self.compact_field, self.compact_value
        else:
            header, field, value = self.binary_header, self.binary_field, self.binary_value
        if not s.header_done:
            header()
        frames = s.depth_frames
        while frames:
            f = frames[-1]
            at = s.pos
            if f[0] == _F_STRUCT:
                got = field(at)
                if got is None:
                    s.pos = at + 1
                    frames.pop()
                    continue
                t, at = got
                at = value(t, at, True)
            else:
                if f[4] == 0:
                    frames.pop()
                    continue
                phase, remaining = f[3], f[4]
                t = f[2] if (f[0] == _F_MAP and phase) else f[1]
                if f[0] == _F_MAP:
                    f[3] ^= 1
                if f[0] == _F_LIST or phase:
                    f[4] -= 1
                try:
                    at = value(t, at, False)
                except (_More, _Bad):
                    f[3], f[4] = phase, remaining
                    raise
            s.pos = at
            s.values += 1
            if s.values > self.max_values:
                raise _Bad(f"more than {self.max_values} values in one request")


def scan(
    buffer: bytes | bytearray | memoryview,
    compact: bool,
    state: Any,
    max_string: int,
    max_container: int,
    max_values: int,
) -> tuple[int, int, Any, bytes | None]:
    """gateway/_wirecheck.c's scan: (0, end, None, name) for a whole valid message in
    buffer[0:end], (1, need, state, name|None) when more bytes are needed, ValueError else.
    The state is this twin's own (a snapshot, as the C's bytes are)."""
    buf = bytes(buffer)
    if state is None:
        s = _State()
    elif isinstance(state, _State):
        s = state.copy()
    else:
        raise TypeError("state must be a value scan() returned")
    c = _Scan(buf, max_string, max_container, max_values, s)
    need = -1
    error: str | None = None
    try:
        c.walk(compact)
    except _More as more:
        need = more.need
    except _Bad as bad:
        error = str(bad)
    name = None
    if s.header_done and s.name_off + s.name_len <= len(buf):
        name = buf[s.name_off : s.name_off + s.name_len]
    if error is not None:
        raise ValueError(error)
    if need < 0:
        return 0, s.pos, None, name
    return 1, need, s, name


# ---- the binary reader both codecs share (gateway/_thriftbuf.h) ----------------------------


class _Truncated(Exception):
    """The C reader's 0: truncated or unusual; the caller takes its generic path."""


class _Reader:
    __slots__ = ("buf", "len", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.len = len(buf)
        self.pos = 0

    def need(self, n: int) -> bool:
        return self.pos + n <= self.len

    def str_at(self) -> tuple[int, int]:
        """A binary string at pos: (offset, length)."""
        if not self.need(4):
            raise _Truncated
        n = _be32(self.buf, self.pos)
        self.pos += 4
        if n < 0 or not self.need(n):
            raise _Truncated
        at = self.pos
        self.pos += n
        return at, n

    def field(self) -> tuple[int, int]:
        """A field header: (type, id); type 0 at the end of a struct (id 0 then)."""
        if not self.need(1):
            raise _Truncated
        t = self.buf[self.pos]
        self.pos += 1
        if t == 0:
            return 0, 0
        if not self.need(2):
            raise _Truncated
        fid = _I16.unpack_from(self.buf, self.pos)[0]
        self.pos += 2
        return t, fid

    def skip(self, t: int, depth: int) -> None:
        """Skips one value of binary type t."""
        if depth > MAX_DEPTH:
            raise _Truncated
        buf = self.buf
        if t in (2, 3):
            self.pos += 1
        elif t == 6:
            self.pos += 2
        elif t == 8:
            self.pos += 4
        elif t in (4, 10):
            self.pos += 8
        elif t == 11:
            if not self.need(4):
                raise _Truncated
            self.pos += 4 + _be32(buf, self.pos)
        elif t == 12:
            while True:
                if not self.need(1):
                    raise _Truncated
                ft = buf[self.pos]
                self.pos += 1
                if ft == 0:
                    break
                self.pos += 2
                self.skip(ft, depth + 1)
        elif t in (14, 15):
            if not self.need(5):
                raise _Truncated
            et = buf[self.pos]
            n = _be32(buf, self.pos + 1)
            self.pos += 5
            for _ in range(n):
                self.skip(et, depth + 1)
        elif t == 13:
            if not self.need(6):
                raise _Truncated
            kt, vt = buf[self.pos], buf[self.pos + 1]
            n = _be32(buf, self.pos + 2)
            self.pos += 6
            for _ in range(n):
                self.skip(kt, depth + 1)
                self.skip(vt, depth + 1)
        else:
            raise _Truncated
        if self.pos > self.len:
            raise _Truncated


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


# ---- the HBase codec (gateway/store/_hbasecodec.c) ----------------------------------------


def encode_mutate_rows(
    table: bytes, prefix: bytes, keys: list[bytes], topics: Sequence[bytes], values: Sequence[bytes]
) -> bytes:
    """gateway/store/_hbasecodec.c's encode_mutate_rows: the binary CALL of HBase Thrift1's
    mutateRows(table, one BatchMutation per row, attributes={}), as thriftpy2 writes it."""
    n = len(keys)
    if len(topics) != n or len(values) != n:
        raise ValueError("keys, topics and values differ in length")
    pack32 = _I32.pack
    out = [
        pack32(-2147418111),  # 0x80010001: version 1, CALL
        pack32(10),
        b"mutateRows",
        pack32(0),
        b"\x0b\x00\x01",
        pack32(len(table)),
        table,
        b"\x0f\x00\x02\x0c",
        pack32(n),
    ]
    for k, t, v in zip(keys, topics, values, strict=True):
        if not isinstance(k, bytes) or not isinstance(t, bytes) or not isinstance(v, bytes):
            raise TypeError("keys, topics and values must be bytes")
        out.append(
            b"\x0b\x00\x01"
            + pack32(len(k))
            + k
            + b"\x0f\x00\x02\x0c\x00\x00\x00\x01\x02\x00\x01\x00\x0b\x00\x02"
            + pack32(len(prefix) + len(t))
            + prefix
            + t
            + b"\x0b\x00\x03"
            + pack32(len(v))
            + v
            + b"\x02\x00\x04\x01\x00\x00"
        )
    out.append(b"\x0d\x00\x03\x0b\x0b\x00\x00\x00\x00\x00")
    return b"".join(out)


def _read_cell(r: _Reader) -> tuple[int, int]:
    at = -1
    n = 0
    while True:
        ft, fid = r.field()
        if ft == 0:
            break
        if fid == 1 and ft == 11:
            at, n = r.str_at()
        else:
            r.skip(ft, 1)
    if at < 0:
        raise _Truncated
    return at, n


def decode_rows_reply(
    message: bytes | bytearray | memoryview, prefix_len: int
) -> tuple[list[Row], int] | None:
    """gateway/store/_hbasecodec.c's decode_rows_reply: the (timestamp, sequence, topic,
    value) rows of a scannerGetList REPLY and its TRowResult count, or None if unusual."""
    r = _Reader(bytes(message))
    buf = r.buf
    rows: list[Row] = []
    row_count = 0
    last_topic = b""
    key_at = rowkey.KEY.unpack_from  # the C reads (int64)timestamp and (int16)sequence
    try:
        if not r.need(8) or _U32.unpack_from(buf, 0)[0] != 0x80010002:
            return None
        r.pos = 4
        r.str_at()
        if not r.need(4):
            return None
        r.pos += 4  # seqid
        while True:
            ft, fid = r.field()
            if ft == 0:
                break
            if fid != 0 or ft != 15 or not r.need(5) or buf[r.pos] != 12:
                return None  # an exception, or not list<TRowResult>
            n = _be32(buf, r.pos + 1)
            r.pos += 5
            row_count += n
            for _ in range(n):
                row_at = -1
                while True:
                    ft, fid = r.field()
                    if ft == 0:
                        break
                    if fid == 1 and ft == 11:
                        row_at, row_len = r.str_at()
                        if row_len != rowkey.KEY_LENGTH:
                            return None
                    elif fid == 2 and ft == 13:
                        if row_at < 0 or not r.need(6) or buf[r.pos] != 11 or buf[r.pos + 1] != 12:
                            return None
                        m = _be32(buf, r.pos + 2)
                        r.pos += 6
                        _, ts, seq = key_at(buf, row_at)
                        for _ in range(m):
                            col_at, col_len = r.str_at()
                            if col_len <= prefix_len:
                                return None
                            val_at, val_len = _read_cell(r)
                            topic = buf[col_at + prefix_len : col_at + col_len]
                            if topic == last_topic:
                                topic = last_topic  # topics repeat: share one object
                            else:
                                last_topic = topic
                            rows.append((ts, seq, topic, buf[val_at : val_at + val_len]))
                    else:
                        r.skip(ft, 1)
    except (_Truncated, struct.error):
        return None
    if r.pos != r.len:
        return None
    return rows, row_count


# ---- merged scans (gateway/_merge.c, merge_rows) ------------------------------------------


def merge_rows(
    buffers: list[list[Row]],
    starts: list[int],
    more: list[bool],
    partitions: list[int],
    n: int,
    max_bytes: int,
    reverse: bool,
) -> tuple[list[Row], list[int], list[int], list[int], int]:
    """gateway/_merge.c's merge_rows: merges the partitions' buffered rows (each from its
    ``starts[i]`` on) in (timestamp, sequence, partition) order (reversed with ``reverse``)
    until n rows, max_bytes of topics and values, or a buffer that may have more runs dry."""
    k = len(buffers)
    if len(starts) != k or len(more) != k or len(partitions) != k:
        raise ValueError("buffers, starts, more and partitions differ in length")
    sign = -1 if reverse else 1
    heap: list[tuple[int, int, int, int]] = []
    for c, buf in enumerate(buffers):
        if not isinstance(buf, list):
            raise TypeError("buffers must be lists")
        if not 0 <= starts[c] <= len(buf):
            raise ValueError("a start is outside its buffer")
        if starts[c] < len(buf):
            ts, seq = buf[starts[c]][0], buf[starts[c]][1]
            heap.append((sign * ts, sign * seq, sign * partitions[c], sign * c))
    heapq.heapify(heap)
    at = list(starts)
    bytes_at = [0] * k
    rows: list[Row] = []
    parts: list[int] = []
    size = 0
    while heap and len(rows) < n and size < max_bytes:
        c = sign * heap[0][3]
        buf = buffers[c]
        row = buf[at[c]]
        rows.append(row)
        parts.append(partitions[c])
        b = len(row[2]) + len(row[3])
        size += b
        bytes_at[c] += b
        at[c] += 1
        if at[c] < len(buf):
            nxt = buf[at[c]]
            heapq.heapreplace(heap, (sign * nxt[0], sign * nxt[1], heap[0][2], heap[0][3]))
            continue
        if more[c]:
            break  # its next rows are unknown: refill before going on
        heapq.heappop(heap)
    return rows, parts, [a - s for a, s in zip(at, starts, strict=True)], bytes_at, size



_ENC_HEAD = struct.Struct(">B2xB2xq3xh4xh3xi")  # a TMessage's first 32 bytes (_thriftbuf.h)


def merge_encoded(
    buffers: list[bytearray | bytes],
    offsets: list[int],
    counts: list[int],
    more: list[bool],
    out: bytearray,
    n: int,
    max_bytes: int,
    reverse: bool,
) -> tuple[list[int], list[int], list[int], list[int], int]:
    """gateway/_merge.c's merge_encoded: merges the partitions' encoded TMessages (``counts[i]``
    of them in ``buffers[i]`` from ``offsets[i]`` on) into ``out`` in (timestamp, sequence,
    partition) order (reversed with ``reverse``), until n messages, max_bytes of topics and
    values, or a buffer that may have more runs dry; -> (taken, offsets, sizes, lasts, bodies)."""
    k = len(buffers)
    if len(offsets) != k or len(counts) != k or len(more) != k:
        raise ValueError("buffers, offsets, counts and more differ in length")
    if any(b is out for b in buffers):
        raise ValueError("out must not be one of the buffers")
    at, left = list(offsets), list(counts)
    inside = all(0 <= a <= len(b) for a, b in zip(at, buffers, strict=True))
    if not inside or min(left, default=0) < 0:
        raise ValueError("an offset is outside its buffer")
    sizes, lasts = [0] * k, [-1] * k
    sign = -1 if reverse else 1

    def message(c: int) -> tuple[tuple[int, int, int, int], int, int, int]:
        buf, a = buffers[c], at[c]
        room = len(buf) - a
        bad = ValueError("a buffer does not hold the TMessages its count says")
        if room < 40:
            raise bad
        t_id, t_ts, ts, seq, part, tl = _ENC_HEAD.unpack_from(buf, a)
        if t_id != 12 or t_ts != 10 or buf[a + 25] != 11 or tl < 0 or tl > room - 40:
            raise bad
        if buf[a + 32 + tl] != 11:
            raise bad
        (vl,) = struct.unpack_from(">i", buf, a + 35 + tl)
        if vl < 0 or vl > room - 40 - tl or buf[a + 39 + tl + vl] != 0:
            raise bad
        return (sign * ts, sign * seq, sign * part, sign * c), 40 + tl + vl, tl, vl

    heap = [message(c)[0] for c in range(k) if left[c]]
    heapq.heapify(heap)
    count = size = bodies = 0
    runs: list[tuple[int, int, int]] = []  # copied at the end: nothing on an error
    while heap and count < n and size < max_bytes:
        c = sign * heap[0][3]
        start = at[c]
        moved = False
        first = True
        while left[c] and count < n and size < max_bytes:
            key, length, tl, vl = message(c)
            if not first and len(heap) > 1 and key > min(heap[1:3]):
                heapq.heapreplace(heap, key)
                moved = True
                break
            first = False
            lasts[c] = at[c]
            at[c] += length
            left[c] -= 1
            sizes[c] += tl + vl
            size += tl + vl
            bodies += vl
            count += 1
        runs.append((c, start, at[c]))
        if moved:
            continue
        if left[c]:
            break  # n messages or max_bytes
        if more[c]:
            break  # its next messages are unknown: refill before going on
        heapq.heappop(heap)
    for c, start, end in runs:
        out += buffers[c][start:end]
    taken = [was - now for was, now in zip(counts, left, strict=True)]
    return taken, at, sizes, lasts, bodies


# ---- the embedded store (gateway/_wal.c) --------------------------------------------------


def consecutive_keys(partition: int, timestamp: int, sequence: int, count: int) -> list[bytes]:
    """gateway/_wal.c's consecutive_keys: the row keys of ``count`` consecutive ids from
    (timestamp, sequence) in ``partition``, the sequence carrying after MAX_SEQUENCE."""
    if not (
        0 <= partition <= MAX_PARTITIONS
        and 0 <= sequence <= MAX_SEQUENCE
        and count >= 0
        and timestamp >= 0
    ):
        raise ValueError("partition, timestamp, sequence or count out of range")
    pack = rowkey.KEY_UNSIGNED.pack
    keys = []
    ts, seq = timestamp, sequence
    for _ in range(count):
        keys.append(pack(partition, ts & 0xFFFFFFFFFFFFFFFF, seq))
        seq += 1
        if seq > MAX_SEQUENCE:
            seq = 0
            ts += 1
    return keys


def wal_cells(keys: list[bytes], topics: list[bytes], values: list[bytes]) -> bytes:
    """gateway/_wal.c's wal_cells: per row u8 key length, key, u32 LE cell length, cell
    (u8 topic length, topic, value)."""
    n = len(keys)
    if len(topics) != n or len(values) != n:
        raise ValueError("keys, topics and values differ in length")
    for k, t, v in zip(keys, topics, values, strict=True):
        if (
            not isinstance(k, bytes)
            or not isinstance(t, bytes)
            or not isinstance(v, bytes)
            or len(k) > 255
            or len(t) > 255
            or len(v) > 0xFFFFFFFF - 256
        ):
            raise TypeError("keys and topics must be bytes of at most 255, values bytes")
    pack = _LE32.pack
    return b"".join(
        bytes((len(k),)) + k + pack(1 + len(t) + len(v)) + bytes((len(t),)) + t + v
        for k, t, v in zip(keys, topics, values, strict=True)
    )


def put_wal_cells(
    put: Callable[[bytes, bytes, Any], object],
    handle: Any,
    cells: bytes | bytearray | memoryview,
) -> int:
    """gateway/_wal.c's put_wal_cells: put(key, cell, handle) for every row of ``cells``."""
    buf = bytes(cells)
    end = len(buf)
    p = 0
    count = 0
    while p < end:
        kl = buf[p]
        p += 1
        if end - p < kl + 4:
            raise ValueError(f"malformed log cells after {count} rows")
        key = buf[p : p + kl]
        p += kl
        cl = _LE32.unpack_from(buf, p)[0]
        p += 4
        if end - p < cl or cl < 1 or buf[p] + 1 > cl:
            raise ValueError(f"malformed log cells after {count} rows")
        put(key, buf[p : p + cl], handle)
        p += cl
        count += 1
    return count


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
) -> tuple[int, bytes | None, int, int, tuple[bytes, bytes] | None, int, bytes | None, int]:
    """gateway/_records.c's scan_records: appends the (timestamp, sequence, topic, body) of
    the messages of ``held`` then ``items`` (per-row values or records) in [lower, upper)
    whose topic is in ``topics``, in scan order, to ``rows`` (a bytearray: as TMessages, and
    ``limit`` counts what this call adds); returns (status, key, size, budget, held, taken,
    last, bodies) as the C does (status 0 end, 1 out of range, 2 limit or max_bytes, 3
    budget)."""
    if topics is not None and not isinstance(topics, (set, frozenset)):
        raise TypeError("topics must be a set, a frozenset or None")
    encoded = type(rows) is bytearray
    if not encoded and not isinstance(rows, list):
        raise TypeError("rows must be a list or a bytearray")
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
        for n in range(count):
            if record:
                i = count - 1 - n if reverse else n
                mkey, topic, body = _record_message(key, value, count, first, i)
            else:
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
            keep = item if record else None
            if topics is None or topic in topics:
                partition, ts, seq = unpack(mkey)
                if isinstance(rows, bytearray):
                    rows += tmessage(ts, seq, partition, topic, body)
                else:
                    rows.append((ts, seq, topic, body))
                taken += 1
                bodies += len(body)
                last = mkey
                size += 1 + len(topic) + len(body)
                if (taken if encoded else len(rows)) >= limit or size >= max_bytes:
                    return done(2, keep)
            budget -= 1
            if budget <= 0:
                return done(3, keep)
    return done(0)


def _original_threads() -> tuple[Callable[..., Any], Callable[[], Any]]:
    """A real OS thread and lock even under gevent's monkey patching (the C Syncer runs a
    pthread: fdatasync must not block the event loop)."""
    try:
        from gevent.monkey import get_original
    except ImportError:  # pragma: no cover - the gateway depends on gevent
        import _thread

        return _thread.start_new_thread, _thread.allocate_lock
    start, lock = get_original("_thread", ["start_new_thread", "allocate_lock"])
    return start, lock


class _SyncState:
    """What the sync thread shares with its Syncer (the thread holds no reference to the
    Syncer, so dropping the Syncer stops the thread, as the C type's dealloc does)."""

    def __init__(self) -> None:
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.wake = os.eventfd(0, os.EFD_CLOEXEC)  # the thread blocks reading it
        self.fds: list[int] | None = None
        self.error = 0
        self.stop = False
        start, allocate_lock = _original_threads()
        self.ended = allocate_lock()
        self.ended.acquire()
        start(_sync_main, (self,))


def _sync_main(st: _SyncState) -> None:
    try:
        while True:
            os.eventfd_read(st.wake)
            fds, st.fds = st.fds, None
            if fds is not None:
                err = 0
                for fd in fds:
                    try:
                        os.fdatasync(fd)
                    except OSError as exc:
                        err = err or (exc.errno or 0)
                st.error = err
                os.eventfd_write(st.efd, 1)
            if st.stop:
                break
    finally:
        st.ended.release()


class Syncer:
    """gateway/_wal.c's Syncer: a thread of its own that runs fdatasync. kick(fds) starts one
    sync of those descriptors; fileno() is an eventfd readable when it is over; finish() then
    returns its errno (0 when it worked), or None if it is not over yet. close() stops it."""

    _st: _SyncState | None = None

    def __init__(self) -> None:
        if self._st is not None:
            raise RuntimeError("Syncer is already running")
        self._busy = False
        self._st = _SyncState()

    def kick(self, fds: Sequence[int]) -> None:
        st = self._st
        if st is None:
            raise ValueError("the syncer is closed")
        if self._busy:
            raise RuntimeError("a sync is already running")
        if not isinstance(fds, Sequence):
            raise TypeError("kick() takes a sequence of file descriptors")
        todo = [int(fd) for fd in fds]
        if any(fd < 0 or fd > 0x7FFFFFFF for fd in todo):
            raise ValueError("file descriptors must be >= 0")
        st.fds = todo
        self._busy = True
        os.eventfd_write(st.wake, 1)

    def finish(self) -> int | None:
        st = self._st
        if st is None or not self._busy:
            return None
        try:
            os.eventfd_read(st.efd)
        except BlockingIOError:
            return None
        self._busy = False
        return st.error

    def fileno(self) -> int:
        return self._st.efd if self._st is not None else -1

    def close(self) -> None:
        st = self._st
        if st is None:
            return
        self._st = None
        st.stop = True
        os.eventfd_write(st.wake, 1)
        st.ended.acquire()
        os.close(st.efd)
        os.close(st.wake)

    def __del__(self) -> None:
        self.close()
