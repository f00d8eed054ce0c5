"""The row-key codec shared by every store backend (the same bytes in RocksDB and HBase).

Row key = partitionID (int16 big-endian) + timestamp in ms (int64 BE) + sequenceID (int16 BE).
Partition and sequence ids are non-negative, so unsigned big-endian order is the numeric order
and lexicographic byte order is (partition, timestamp, sequence) order.
"""

from __future__ import annotations

import struct

# The MessageID type and the limits both sides of the wire share, re-exported (the gateway
# imports them from here): MessageId is (timestamp ms, sequence id), the very type of the
# client's hqueue.MessageID; partition ids are 0..MAX_PARTITIONS-1 and sequence ids
# 0..MAX_SEQUENCE within one millisecond.
from hqueue_contract.ids import MessageID as MessageId
from hqueue_contract.limits import MAX_PARTITIONS as MAX_PARTITIONS
from hqueue_contract.limits import MAX_SEQUENCE as MAX_SEQUENCE
from hqueue_contract.limits import MAX_TIMESTAMP as MAX_TIMESTAMP

from . import fast

_KEY = struct.Struct(">hqh")
_PARTITION = struct.Struct(">h")
KEY_LENGTH = _KEY.size  # 12


MAX_ID = MessageId(MAX_TIMESTAMP, MAX_SEQUENCE)


def encode(partition: int, timestamp: int, sequence: int) -> bytes:
    return _KEY.pack(partition, timestamp, sequence)


def consecutive_ids(timestamp: int, sequence: int, count: int) -> list[tuple[int, int]]:
    """The ``count`` ids from (timestamp, sequence) as (timestamp, sequence) pairs, the
    sequence carrying into the next millisecond after 32767 (see :mod:`gateway.ids`)."""
    span = MAX_SEQUENCE + 1
    return [(timestamp + (sequence + i) // span, (sequence + i) % span) for i in range(count)]


# The row keys of consecutive_ids(timestamp, sequence, count) in ``partition``, built in C (one
# bytes object per key, no Python step between them): the put path makes one per message.
consecutive_keys = fast.consecutive_keys


def decode(key: bytes) -> tuple[int, int, int]:
    """(partition, timestamp, sequence) of a row key."""
    return _KEY.unpack(key)


def partition_start(partition: int) -> bytes:
    """The smallest key of a partition (inclusive)."""
    return _PARTITION.pack(partition)


def partition_end(partition: int) -> bytes:
    """The first key after a partition (exclusive): the next partition's prefix.

    For the last possible partition this is b"\\x80", above every valid key.
    """
    return (partition + 1).to_bytes(2, "big") if partition < 0x7FFF else b"\x80"


def id_key(partition: int, message_id: MessageId) -> bytes:
    return _KEY.pack(partition, message_id.timestamp, message_id.sequence)


def next_id(message_id: MessageId) -> MessageId:
    """The smallest MessageID strictly greater than ``message_id``."""
    if message_id.sequence < MAX_SEQUENCE:
        return MessageId(message_id.timestamp, message_id.sequence + 1)
    return MessageId(message_id.timestamp + 1, 0)


def nth_id(first: MessageId, n: int) -> MessageId:
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
