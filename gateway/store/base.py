"""The one storage interface of the gateway; the service never knows which backend it has.

Every backend stores the same bytes (see :mod:`gateway.rowkey`): a queue is a table, a message
is a row keyed by partition + MessageID, the topic is the column and the body its value.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ..rowkey import MessageId


@dataclass(frozen=True)
class QueueMeta:
    """What the store knows about a queue. ``generation`` changes when the queue is truncated
    or re-created, so scanners opened before can tell that their data is gone."""

    name: str
    partitions: int
    ttl_seconds: int
    enabled: bool = True
    config: dict[str, str] = field(default_factory=dict)
    generation: int = 0

    def with_changes(self, **changes: object) -> QueueMeta:
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_json(self, **extra: object) -> bytes:
        """How stores keep it (the name is their key); ``extra`` adds store-specific fields."""
        fields = {
            "partitions": self.partitions,
            "ttl_seconds": self.ttl_seconds,
            "enabled": self.enabled,
            "config": self.config,
            "generation": self.generation,
            **extra,
        }
        return json.dumps(fields, sort_keys=True).encode()

    @classmethod
    def from_json(cls, name: str, raw: bytes | dict[str, Any]) -> QueueMeta:
        d = json.loads(raw) if isinstance(raw, bytes) else raw
        return cls(
            name=name,
            partitions=d["partitions"],
            ttl_seconds=d["ttl_seconds"],
            enabled=d["enabled"],
            config=d["config"],
            generation=d["generation"],
        )


# What a message carries beyond topic and body, as the gateway hands it to a store (see
# PartitionStore.put_extras): (partition, MessageID, key or None, the encoded key and properties).
Extra = tuple[int, MessageId, bytes | None, bytes]

# A stored message as a scan returns it: (timestamp ms, sequence id, topic, value). A plain
# tuple: scans build one per message, and a NamedTuple costs ten times as much to make.
Row = tuple[int, int, bytes, bytes]


class PutBatch(NamedTuple):
    """Messages for one partition: the id of the first, then topics and bodies, index-aligned.

    The ids are consecutive (:func:`gateway.rowkey.consecutive_ids` from ``first``: the
    allocator reserves them at once), so a store makes the keys its layout needs itself."""

    partition: int
    first: MessageId
    # lists, or read-only sequences of bytes (a put off the wire: extract_put's Spans)
    topics: Sequence[bytes]
    values: Sequence[bytes]


class ReadResult(NamedTuple):
    """What one :meth:`PartitionReader.read` got."""

    rows: list[Row]
    # At least the bytes of topics and values in ``rows`` (responses are bounded by it).
    size: int
    # Nothing more to read now. A forward reader without a stop may find newer rows later
    # (read it again); any other reader is at its end for good.
    done: bool


class EncodedRead(NamedTuple):
    """What one :meth:`PartitionReader.read_encoded` appended to its bytearray."""

    messages: int
    size: int  # as ReadResult's
    bodies: int  # bytes of their bodies
    last: MessageId | None  # the id of the last of them
    done: bool  # as ReadResult's


class PartitionReader(abc.ABC):
    """Reads one partition in MessageID order (newest first when reversed), remembering
    where it is between calls; made by :meth:`PartitionStore.reader`.

    A reader may hold store resources between reads (a RocksDB iterator, an HBase scanner and
    its read-ahead); the store drops them when the reader is idle, or when its queue is
    truncated or deleted, and a later read reopens them from the reader's own position.
    Every read re-checks the queue's generation: a reader of a truncated or deleted queue
    raises InvalidArgument. Expired rows (older than the queue's TTL by their MessageID) are
    never returned, nor are rows whose put is not durable yet.
    """

    @abc.abstractmethod
    def read(self, limit: int, max_bytes: int | None = None) -> ReadResult:
        """Up to ``limit`` rows from where the last read stopped, fewer once their topics
        and values reach ``max_bytes`` (a hint that bounds a reply's memory; at least one
        row is returned when there is one). The store may also stop early after examining a
        bounded number of rows (topic filters skip many): then ``done`` is False, possibly
        with no rows, and the caller should let the event loop run before it reads on."""

    def read_encoded(
        self,
        out: bytearray,
        limit: int,
        max_bytes: int | None = None,
        marks: bytearray | None = None,
    ) -> EncodedRead | None:
        """As :meth:`read`, with the messages appended to ``out`` as the binary protocol's
        TMessages (the elements of a scan's reply) rather than returned as rows; None when
        the store cannot (the caller reads rows). The embedded store can: a scan's reply is
        then written without a Python object per message. ``marks``: a bytearray that gets
        the page's segments (gateway/_marks.h), for a merge."""
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Frees what the reader holds; it must not be read again. Closing twice is fine."""


class PartitionStore(abc.ABC):
    """Queues, their metadata, and the rows of their partitions.

    Lifecycle: ``start()`` before use, ``stop()`` once (it flushes and releases files).
    Every method may raise :class:`gateway.errors.StoreError` for faults of the store.
    """

    def start(self) -> None:  # noqa: B027 - optional hook
        """Opens files and connections and starts background work."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stops background work and closes the store; pending writes are completed first."""

    # -- metadata -------------------------------------------------------------------------

    @abc.abstractmethod
    def list_queues(self) -> list[QueueMeta]: ...

    @abc.abstractmethod
    def get_queue(self, name: str) -> QueueMeta | None: ...

    @abc.abstractmethod
    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        """Creates the queue; raises InvalidArgument if it exists."""

    @abc.abstractmethod
    def delete_queue(self, name: str) -> None: ...

    @abc.abstractmethod
    def truncate_queue(self, name: str) -> QueueMeta:
        """Deletes every message, keeps the partition layout; returns the new metadata."""

    @abc.abstractmethod
    def set_enabled(self, name: str, enabled: bool) -> QueueMeta: ...

    # -- data -----------------------------------------------------------------------------

    @abc.abstractmethod
    def last_id(self, queue: QueueMeta, partition: int) -> MessageId | None:
        """The newest stored MessageID of a partition (expired or not), or None if empty."""

    @abc.abstractmethod
    def put(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> None:
        """Stores the batches; returns once they are durable. Later calls never carry smaller
        keys for a partition."""

    def put_begin(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> Callable[[], None]:
        """``put`` in two steps: applies the batches now, in call order, and returns what waits
        until they are durable (raising what ``put`` would raise). A connection's next put can
        begin while an earlier one waits (gateway/server.py). This default does the whole put
        here; a store whose durability is a wait of its own (the embedded store's log sync)
        returns that wait instead."""
        self.put(queue, batches)
        return already_durable

    @abc.abstractmethod
    def reader(
        self,
        queue: QueueMeta,
        partition: int,
        after: MessageId | None,
        stop: MessageId | None,
        *,
        reverse: bool,
        topics: Collection[bytes] | None,
    ) -> PartitionReader:
        """A reader of ``partition`` of this generation of ``queue``: the rows strictly after
        ``after`` in scan order (None: from the oldest, or the newest when ``reverse``), up to
        ``stop`` exclusive in scan order (None: no bound), keeping only ``topics`` when
        given. Making one costs nothing in the store: its first read opens what it needs."""

    # -- small metadata records -----------------------------------------------------------
    # A namespaced key/value map for the gateway's own bookkeeping (the embedded subscription
    # registry keeps one record per subscriber here). Records are small (a few KiB), few
    # (thousands), and independent of queues: deleting or truncating a queue leaves them.

    @abc.abstractmethod
    def get_record(self, namespace: str, key: str) -> bytes | None:
        """The value stored under (namespace, key), or None. Sees every completed put."""

    @abc.abstractmethod
    def put_record(self, namespace: str, key: str, value: bytes) -> None:
        """Stores (replaces) the value; returns once it is durable."""

    @abc.abstractmethod
    def delete_record(self, namespace: str, key: str) -> None:
        """Removes the record (absent is not an error); returns once durable."""

    @abc.abstractmethod
    def list_records(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        """Every (key, value) of ``namespace`` whose key starts with ``prefix``, sorted by key
        (UTF-8 byte order)."""

    # -- message keys and properties ------------------------------------------------------
    # What a message carries beyond topic and body (TMessage.key and .properties), kept beside
    # its row by its queue's generation and expired with it: an opaque value per message (the
    # gateway's encoding, gateway.keys) and an index of the keys for find_by_key. Truncating
    # or deleting the queue drops them. Only messages with a key or properties have any.

    @abc.abstractmethod
    def put_extras(self, queue: QueueMeta, items: Sequence[Extra]) -> None:
        """Stores the values (and indexes the keys) of messages about to be put; returns once
        durable. The gateway calls it before ``put`` of the same messages, so a message a
        reader can see always has its key findable."""

    @abc.abstractmethod
    def get_extras(
        self, queue: QueueMeta, partition: int, ids: Sequence[MessageId]
    ) -> dict[MessageId, bytes]:
        """The stored values of those of ``ids`` (of one partition) that have one."""

    @abc.abstractmethod
    def find_by_key(self, queue: QueueMeta, key: bytes, limit: int) -> list[tuple[int, MessageId]]:
        """(partition, MessageID) of up to ``limit`` messages put with ``key``, newest first,
        every partition, none older than the queue's TTL."""

    @abc.abstractmethod
    def has_extras(self, queue: QueueMeta) -> bool:
        """False when this generation of the queue has no message with a key or properties
        (readers then skip ``get_extras``); cheap, may lag a put by another gateway by a few
        seconds."""


def already_durable() -> None:
    """The wait of a put that was durable when ``put_begin`` returned."""
