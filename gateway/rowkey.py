"""The row key: its layout and codec, the one place every store backend and fast path takes
them from (the same bytes in RocksDB and HBase; ``gateway/_rowkey.h`` is its C twin).

Row key = partitionID (int16 big-endian) + timestamp in ms (int64 BE) + sequenceID (int16 BE).
Partition and sequence ids are non-negative, so unsigned big-endian order is the numeric order
and lexicographic byte order is (partition, timestamp, sequence) order.

This module is the layout only: it imports no fast path (``gateway/purefast/`` and the C
build on it, not the other way round).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

# The MessageID type and the limits both sides of the wire share, re-exported (the gateway
# imports them from here): MessageId is (timestamp ms, sequence id), the very type of the
# client's hqueue.MessageID; partition ids are 0..MAX_PARTITION_ID and sequence ids
# 0..MAX_SEQUENCE within one millisecond.
from hqueue_contract.ids import MessageID as MessageId
from hqueue_contract.limits import MAX_PARTITION_ID as MAX_PARTITION_ID
from hqueue_contract.limits import MAX_PARTITIONS as MAX_PARTITIONS
from hqueue_contract.limits import MAX_SEQUENCE as MAX_SEQUENCE
from hqueue_contract.limits import MAX_TIMESTAMP as MAX_TIMESTAMP

# consecutive_keys, the row keys of consecutive_ids(timestamp, sequence, count) in a partition,
# is a fast path (gateway/_wal.c or its twin): callers reach it here as they always did, but it
# is bound on first use, so that importing the layout imports no fast path (purefast imports
# this module). Hidden from mypy, which would otherwise type every unknown name as Any.
if TYPE_CHECKING:
    from .fast import consecutive_keys as consecutive_keys
else:

    def __getattr__(name: str) -> Any:
        if name == "consecutive_keys":
            from .fast import consecutive_keys

            globals()[name] = consecutive_keys
            return consecutive_keys
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


KEY = struct.Struct(">hqh")  # partition, timestamp, sequence
# The same bytes for every valid key, read unsigned: what the C's uint64 arithmetic writes
# when a timestamp carries past MAX_TIMESTAMP (purefast's twin must write it too).
KEY_UNSIGNED = struct.Struct(">HQH")
PARTITION = struct.Struct(">h")  # a key's first field: the partition prefix
KEY_LENGTH = KEY.size  # 12
TIMESTAMP_AT = PARTITION.size  # byte offsets of the fields, as in _rowkey.h
SEQUENCE_AT = TIMESTAMP_AT + 8

MAX_ID = MessageId(MAX_TIMESTAMP, MAX_SEQUENCE)

_pack = KEY.pack


def encode(partition: int, timestamp: int, sequence: int) -> bytes:
    return _pack(partition, timestamp, sequence)


def decode(key: bytes) -> tuple[int, int, int]:
    """(partition, timestamp, sequence) of a row key."""
    return KEY.unpack(key)


def id_key(partition: int, message_id: MessageId) -> bytes:
    return _pack(partition, message_id.timestamp, message_id.sequence)


def consecutive_ids(timestamp: int, sequence: int, count: int) -> list[tuple[int, int]]:
    """The ``count`` ids from (timestamp, sequence) as (timestamp, sequence) pairs, the
    sequence carrying into the next millisecond after MAX_SEQUENCE (see :mod:`gateway.ids`)."""
    span = MAX_SEQUENCE + 1
    return [(timestamp + (sequence + i) // span, (sequence + i) % span) for i in range(count)]


def partition_start(partition: int) -> bytes:
    """The smallest key of a partition (inclusive)."""
    return PARTITION.pack(partition)


def partition_end(partition: int) -> bytes:
    """The first key after a partition (exclusive): the next partition's prefix.

    For the last possible partition this is b"\\x80", above every valid key.
    """
    return (partition + 1).to_bytes(2, "big") if partition < MAX_PARTITIONS else b"\x80"


def key_after(key: bytes) -> bytes:
    """The smallest byte string above ``key``: keys have one length, so no stored key lies
    between them and an exclusive lower bound ``key`` becomes this inclusive one."""
    return key + b"\x00"


def key_before(key: bytes) -> bytes | None:
    """The greatest row key below ``key`` (a row key or a shorter prefix of one), or None when
    no row key can be below it. HBase's reversed scans start inclusively, so an exclusive upper
    bound becomes this key."""
    if len(key) > KEY_LENGTH:
        raise ValueError(f"row keys have {KEY_LENGTH} bytes, got {len(key)}")
    value = int.from_bytes(key.ljust(KEY_LENGTH, b"\x00"), "big")
    if value == 0:
        return None
    return (value - 1).to_bytes(KEY_LENGTH, "big")


def next_id(message_id: MessageId) -> MessageId:
    """The smallest MessageID strictly greater than ``message_id``."""
    if message_id.sequence < MAX_SEQUENCE:
        return MessageId(message_id.timestamp, message_id.sequence + 1)
    return MessageId(message_id.timestamp + 1, 0)


def previous_id(message_id: MessageId) -> MessageId | None:
    """The greatest MessageID strictly below ``message_id``, None below (0, 0)."""
    ts, seq = message_id
    if seq > 0:
        return MessageId(ts, seq - 1)
    return MessageId(ts - 1, MAX_SEQUENCE) if ts > 0 else None


def nth_id(first: tuple[int, int], n: int) -> MessageId:
    """The ``n``-th of the consecutive ids from ``first`` (``first`` itself for 0)."""
    s = first[1] + n
    return MessageId(first[0] + s // (MAX_SEQUENCE + 1), s % (MAX_SEQUENCE + 1))


# The value stored under a row key in the embedded store: topic length (1 byte), topic, body.
# HBase keeps the topic as the column qualifier instead; both decode to (topic, body).


def encode_cell(topic: bytes, value: bytes) -> bytes:
    return bytes((len(topic),)) + topic + value


def decode_cell(cell: bytes) -> tuple[bytes, bytes]:
    n = cell[0] + 1
    return cell[1:n], cell[n:]
