"""The HBase codec (gateway/store/_hbasecodec.c)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .. import rowkey
from .common import _I32, _U32, Row, _be32, _Reader, _Truncated

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
