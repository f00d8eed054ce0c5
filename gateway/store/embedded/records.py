"""A put batch as one RocksDB entry (a record), as Kafka keeps a producer's record batch.

Half of the gateway's CPU on puts was RocksDB handling one entry per message three times
(memtable insert, flush, compaction). A record holds consecutive messages of one put in one
partition, keyed like a row by its first message's row key; message *i* has the first id
plus *i* (a put's ids are consecutive: :func:`gateway.rowkey.consecutive_ids`). The value
(written and read in C, gateway/_records.c, whose docstring has the bytes) starts with a 0
byte, where a per-row value starts with its topic length (1-255): data written before
records stays readable beside them, with no migration. Records are capped
(``MAX_RECORD_MESSAGES``, ``MAX_RECORD_BYTES``) so that a read starting inside one never
decodes much, and a reader that stops inside one holds at most one record.

The store's metadata says which layout it holds (``STORE_FORMAT``): a store refuses to open
data of a newer format than its own.
"""

from __future__ import annotations

import struct

from ... import rowkey
from ...rowkey import MessageId

RECORD_VERSION = 1
MAX_RECORD_MESSAGES = 4096
MAX_RECORD_BYTES = 256 << 10  # of topics and bodies; a larger message makes a record alone
# 1: one entry per message; 2: per-put records (and older rows beside them)
STORE_FORMAT = 2
FORMAT_KEY = b"format"  # in the default family

_COUNT = struct.Struct("<I")  # after the 0 mark and the version byte


def is_record(value: bytes) -> bool:
    return value[:1] == b"\x00"


def last_id(key: bytes, value: bytes) -> MessageId:
    """The id of the newest message stored under ``key`` (a row or a record)."""
    _, ts, seq = rowkey.decode(key)
    if not is_record(value):
        return MessageId(ts, seq)
    (count,) = _COUNT.unpack_from(value, 2)
    return rowkey.nth_id(MessageId(ts, seq), count - 1)
