"""What a scan read, on its way to the reply: rows, or TMessages a store reader encoded
(:class:`EncodedRows`), with their partitions (:class:`MessageRows`)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from .store.base import Row

# Bytes left free before the messages of a reply's EncodedRows: the reply's head is written
# there (gateway/boundary.py), so sending it copies no message (a b"".join of head and
# messages copied every reply once more).
REPLY_ROOM = 64


class EncodedRows:
    """Messages a store reader appended as TMessages of the binary protocol (the elements of
    a scan's reply) to one bytearray, from ``start`` on (the bytes before are free for the
    reply's head: ``REPLY_ROOM``): a reply from them needs no Python object per message.
    Iterating decodes them into rows (the compact protocol, keys to attach).

    A merged scan's messages come as ``parts`` instead (``data`` None): the runs it took,
    in order, as views of the partitions' pages or bytearrays they were copied into, sent as
    they are (``data`` is then their concatenation, made when something asks for it)."""

    __slots__ = ("_data", "bodies", "count", "parts", "start")

    def __init__(
        self,
        data: bytearray | None,
        count: int,
        bodies: int,
        start: int = 0,
        parts: list[bytearray | memoryview] | None = None,
    ) -> None:
        assert (data is None) != (parts is None), "one bytearray, or parts"
        self._data = data
        self.count = count
        self.bodies = bodies  # bytes of the bodies (the read_bytes metric)
        self.start = start
        self.parts = parts

    @property
    def data(self) -> bytearray:
        if self._data is None:
            assert self.parts is not None
            self._data = bytearray().join(self.parts)
        return self._data

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows())

    def rows(self) -> list[Row]:
        """The messages as (timestamp, sequence, topic, value) rows."""
        data = self.data
        rows: list[Row] = []
        at = self.start
        for _ in range(self.count):
            # gateway/_thriftbuf.h put_tmessage: field headers of 3 bytes, then the values
            ts, seq = _TS_SEQ.unpack_from(data, at + 6)
            (tl,) = _LEN.unpack_from(data, at + 28)
            topic = bytes(data[at + 32 : at + 32 + tl])
            at += 32 + tl + 3
            (vl,) = _LEN.unpack_from(data, at)
            rows.append((ts, seq, topic, bytes(data[at + 4 : at + 4 + vl])))
            at += 4 + vl + 1
        return rows

    def partition_ids(self) -> list[int]:
        """Each message's partition, as its TMessage says (a merged scan's pages)."""
        data = self.data
        parts: list[int] = []
        at = self.start
        for _ in range(self.count):
            (part,) = _PART.unpack_from(data, at + 23)
            (tl,) = _LEN.unpack_from(data, at + 28)
            (vl,) = _LEN.unpack_from(data, at + 35 + tl)
            parts.append(part)
            at += 40 + tl + vl
        return parts


_TS_SEQ = struct.Struct(">q3xh")  # a TMessageID's two values and the field header between
_LEN = struct.Struct(">i")
_PART = struct.Struct(">h")


class MessageRows(NamedTuple):
    """What a scanner read: rows, and their partition (one for all, or one per row, or None
    for encoded rows whose TMessages say their own).

    The Thrift boundary turns it into ``list<TMessage>``: encoded straight from the rows on
    the binary protocol (:func:`gateway._wirecheck.encode_messages_reply`), through TMessage
    objects otherwise (:meth:`to_messages`).
    """

    partitions: int | list[int] | None
    rows: list[Row] | EncodedRows

    def to_messages(self, thrift: Any) -> list[Any]:
        message, mid = thrift.TMessage, thrift.TMessageID
        parts = self.partitions
        if parts is None:
            assert isinstance(self.rows, EncodedRows)
            parts = self.rows.partition_ids()
        if isinstance(parts, int):
            return [message(mid(r[0], r[1]), parts, r[2], r[3]) for r in self.rows]
        return [
            message(mid(r[0], r[1]), p, r[2], r[3]) for p, r in zip(parts, self.rows, strict=True)
        ]
