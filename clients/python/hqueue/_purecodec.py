"""The pure-Python twin of ``hqueue/_fastclient.c``: the same functions, the same bytes, the
same errors. :mod:`hqueue.codec` uses it when the C extension is missing or
``HQUEUE_PUREPYTHON=1`` is set; the unit tests run both and compare them with thriftpy2.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from hqueue_contract.limits import MAX_PARTITION_ID as MAX_PARTITION

MAX_DEPTH = 64

_message_type: Any = None
_message_id_type: Any = None
_invalid_argument: Any = None

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_FIELD = struct.Struct(">bh")
_LIST = struct.Struct(">bi")


def setup(message: type, message_id: type, invalid_argument: type) -> None:
    global _message_type, _message_id_type, _invalid_argument
    if not issubclass(message_id, tuple):
        raise TypeError("MessageID must be a tuple type")
    _message_type, _message_id_type, _invalid_argument = message, message_id, invalid_argument


def _ready() -> None:
    if _invalid_argument is None:
        raise RuntimeError("hqueue._purecodec.setup() was not called")


def _name(prefix: str, index: int, field: str | None) -> str:
    if index < 0:
        return prefix
    return f"{prefix}[{index}].{field}" if field else f"{prefix}[{index}]"


def _text(o: Any, prefix: str, index: int, field: str | None) -> bytes:
    if isinstance(o, bytes):
        return o
    if isinstance(o, str):
        return o.encode()
    if isinstance(o, (bytearray, memoryview)):
        return bytes(o)
    raise _invalid_argument(
        _name(prefix, index, field), f"must be bytes or str, got {type(o).__name__}"
    )


def _partition(o: Any, prefix: str, index: int) -> int:
    if o is None:
        return -1
    if isinstance(o, bool) or not isinstance(o, int):
        raise _invalid_argument(
            _name(prefix, index, "partition"), f"must be an int, got {type(o).__name__}"
        )
    if not 0 <= o <= MAX_PARTITION:
        raise _invalid_argument(
            _name(prefix, index, "partition"), f"must be 0..{MAX_PARTITION}, got {o}"
        )
    return o


def _check_partition_arg(partition: int) -> None:
    if not -1 <= partition <= MAX_PARTITION:
        raise ValueError(f"partition must be -1 (none) or 0..{MAX_PARTITION}")


def _write_put(
    seqid: int, queue: bytes, partition: int, items: list[tuple[bytes, bytes, int]]
) -> bytes:
    name = b"putMessages" if partition < 0 else b"putMessagesWithPid"
    out = [_I32.pack(-0x7FFEFFFF), _I32.pack(len(name)), name, _I32.pack(seqid)]
    out += [_FIELD.pack(11, 1), _I32.pack(len(queue)), queue]
    if partition >= 0:
        out += [_FIELD.pack(6, 2), _I16.pack(partition)]
    out += [_FIELD.pack(15, 2 if partition < 0 else 3), _LIST.pack(12, len(items))]
    topic_field, value_field, pid_field = _FIELD.pack(11, 3), _FIELD.pack(11, 4), _FIELD.pack(6, 2)
    for topic, value, pid in items:
        if pid >= 0 and partition < 0:
            out += [pid_field, _I16.pack(pid)]
        out += [topic_field, _I32.pack(len(topic)), topic]
        out += [value_field, _I32.pack(len(value)), value, b"\x00"]
    out.append(b"\x00")
    return b"".join(out)


def encode_put(
    seqid: int, queue: bytes, partition: int, messages: Sequence[Any], base_index: int
) -> bytes:
    """The binary-protocol CALL of putMessages (``partition`` -1) or putMessagesWithPid."""
    _ready()
    _check_partition_arg(partition)
    items = []
    for i, o in enumerate(messages):
        idx = base_index + i
        if isinstance(o, _message_type) and len(o) >= 3:
            t, v, p = o[0], o[1], o[2]
        elif isinstance(o, (tuple, list)) and 2 <= len(o) <= 3:
            t, v = o[0], o[1]
            p = o[2] if len(o) == 3 else None
        else:
            raise _invalid_argument(
                _name("messages", idx, None),
                f"must be a Message or a (topic, value[, partition]) tuple, got {o!r}",
            )
        pid = _partition(p, "messages", idx)
        items.append((_text(t, "messages", idx, "topic"), _text(v, "messages", idx, "value"), pid))
    return _write_put(seqid, queue, partition, items)


def encode_put_lists(
    seqid: int,
    queue: bytes,
    partition: int,
    topics: bytes | str | Sequence[Any],
    values: Sequence[Any],
    base_index: int,
) -> bytes:
    """Like :func:`encode_put`, from one topic (or a list as long as ``values``) and values."""
    _ready()
    _check_partition_arg(partition)
    if isinstance(topics, (bytes, str)):
        one = _text(topics, "topic", -1, None)
        tlist = None
    else:
        tlist = list(topics)
        if len(tlist) != len(values):
            raise _invalid_argument("topics", "must be one topic or as many as the values")
    items = []
    for i, v in enumerate(values):
        t = one if tlist is None else _text(tlist[i], "topics", base_index + i, None)
        items.append((t, _text(v, "values", base_index + i, None), -1))
    return _write_put(seqid, queue, partition, items)


class _Short(Exception):
    """The buffer ends before the message does."""


class _Odd(Exception):
    """Not something this codec reads; thriftpy2 decodes it (or says what is wrong)."""


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self.buf = bytes(buf)
        self.pos = 0

    def take(self, n: int) -> int:
        at = self.pos
        if at + n > len(self.buf):
            raise _Short
        self.pos = at + n
        return at

    def i16(self) -> int:
        return _I16.unpack_from(self.buf, self.take(2))[0]

    def i32(self) -> int:
        return _I32.unpack_from(self.buf, self.take(4))[0]

    def i64(self) -> int:
        return _I64.unpack_from(self.buf, self.take(8))[0]

    def string(self) -> bytes:
        n = self.i32()
        if n < 0:
            raise _Odd
        at = self.take(n)
        return self.buf[at : at + n]

    def field(self) -> tuple[int, int]:
        t = self.buf[self.take(1)]
        return (t, 0) if t == 0 else (t, self.i16())

    def header(self) -> int:
        first = self.i32() & 0xFFFFFFFF
        if first & 0xFFFF0000 != 0x80010000:
            raise _Odd
        self.string()
        self.i32()
        return first & 0xFF

    def skip(self, t: int, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise _Odd
        if t in (2, 3):
            self.take(1)
        elif t == 6:
            self.take(2)
        elif t == 8:
            self.take(4)
        elif t in (4, 10):
            self.take(8)
        elif t == 11:
            self.string()
        elif t == 12:
            while True:
                ft, _ = self.field()
                if ft == 0:
                    return
                self.skip(ft, depth + 1)
        elif t in (14, 15):
            et = self.buf[self.take(1)]
            n = self.i32()
            if n < 0:
                raise _Odd
            for _ in range(n):
                self.skip(et, depth + 1)
        elif t == 13:
            at = self.take(2)
            kt, vt = self.buf[at], self.buf[at + 1]
            n = self.i32()
            if n < 0:
                raise _Odd
            for _ in range(n):
                self.skip(kt, depth + 1)
                self.skip(vt, depth + 1)
        else:
            raise _Odd


def message_end(buffer: bytes | bytearray | memoryview) -> int:
    """Where the Thrift message at the start of ``buffer`` ends; 0 if it is incomplete."""
    r = _Reader(buffer)
    try:
        r.header()
        r.skip(12)
    except _Short:
        return 0
    except _Odd:
        raise ValueError("the reply is not a binary-protocol Thrift message") from None
    return r.pos


def _message(r: _Reader) -> Any:
    mid = pid = topic = value = None
    while True:
        ft, fid = r.field()
        if ft == 0:
            break
        if fid == 1 and ft == 12:
            ts = seq = None
            while True:
                it, iid = r.field()
                if it == 0:
                    break
                if iid == 1 and it == 10:
                    ts = r.i64()
                elif iid == 2 and it == 6:
                    seq = r.i16()
                else:
                    r.skip(it, 2)
            if ts is None or seq is None:
                raise _Odd
            mid = _message_id_type(ts, seq)
        elif fid == 2 and ft == 6:
            pid = r.i16()
            if pid < 0:
                pid = None
        elif fid == 3 and ft == 11:
            topic = r.string()
        elif fid == 4 and ft == 11:
            value = r.string()
        else:
            r.skip(ft, 1)
    if topic is None or value is None:
        raise _Odd
    return _message_type(topic, value, pid, mid)


def decode_list_reply(buffer: bytes | bytearray | memoryview) -> tuple[int, list[Any]] | int:
    """A ``list<TMessage>`` REPLY as ``(end, [Message])``; 0 if it is incomplete, -1 if it
    is anything else (an exception: the caller lets thriftpy2 decode it)."""
    _ready()
    r = _Reader(buffer)
    out: list[Any] = []
    have_list = False
    try:
        if r.header() != 2:
            return -1
        while True:
            ft, fid = r.field()
            if ft == 0:
                break
            if fid != 0 or ft != 15:
                return -1
            et = r.buf[r.take(1)]
            n = r.i32()
            if et != 12 or n < 0:
                return -1
            for _ in range(n):
                out.append(_message(r))
            have_list = True
    except _Short:
        return 0
    except _Odd:
        return -1
    return (r.pos, out) if have_list else -1
