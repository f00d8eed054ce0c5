"""The in-memory store: the simplest honest :class:`PartitionStore`, and so its specification.

Read this module to learn what a store must do; ``tests/contract/`` checks that every backend
does the same. Each partition is a sorted list of row keys with their (topic, body) cells;
nothing survives the process (``--store memory`` is for tests and demos).

What it shares with the real stores: generations change on create and truncate, scans return
rows in MessageID order through readers that remember where they are and may stop early
(after ``max_examined`` rows, or once the rows hold ``max_bytes``), a put replaces a row
with the same key. TTL: rows older than the queue's TTL (by their MessageID's timestamp) are
never returned by a reader, and a put drops the expired rows at the front of its partition
(always keeping the newest, for ``last_id``).
Every call completes without yielding to the event loop, so a put is durable (as durable as
this store gets) and visible to every scan once it returns.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import Any

from .. import rowkey
from ..errors import InvalidArgument
from ..ids import wall_clock_ms
from ..rowkey import MessageId
from .base import Extra, PartitionReader, PartitionStore, PutBatch, QueueMeta, Row
from .reading import KeyRangeReader

# Rows one scan call looks at before it hands control back (as the embedded store does).
MAX_EXAMINED_PER_SCAN = 4096


class _Partition:
    """Row keys in ascending order and, index-aligned, their (topic, body)."""

    __slots__ = ("cells", "keys")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.cells: list[tuple[bytes, bytes]] = []

    def put(self, key: bytes, topic: bytes, value: bytes) -> None:
        keys = self.keys
        if not keys or key > keys[-1]:  # the usual case: ids only grow
            keys.append(key)
            self.cells.append((topic, value))
            return
        i = bisect_left(keys, key)
        if keys[i] == key:  # the same row again replaces it, as in RocksDB and HBase
            self.cells[i] = (topic, value)
        else:
            keys.insert(i, key)
            self.cells.insert(i, (topic, value))

    def drop_before(self, cutoff: bytes) -> None:
        """Forgets the rows below ``cutoff`` except the newest one."""
        n = min(bisect_left(self.keys, cutoff), len(self.keys) - 1)
        if n > 0:
            del self.keys[:n], self.cells[:n]


class MemoryStore(PartitionStore):
    def __init__(self, *, max_examined: int = MAX_EXAMINED_PER_SCAN) -> None:
        if max_examined < 1:
            raise ValueError("'max_examined' must be >= 1")
        self.max_examined = max_examined
        self._queues: dict[str, QueueMeta] = {}
        self._partitions: dict[str, dict[int, _Partition]] = {}  # queue -> partition -> rows
        self._records: dict[str, dict[str, bytes]] = {}  # namespace -> key -> value
        # message keys and properties by queue generation: values in put order (ids only
        # grow, so the oldest are first and expire first), and key -> [(id, partition)]
        self._extras: dict[int, OrderedDict[tuple[int, MessageId], bytes]] = {}
        self._keys: dict[int, dict[bytes, list[tuple[MessageId, int]]]] = {}
        self._generations = itertools.count(1)

    def stop(self) -> None:
        self._queues.clear()
        self._partitions.clear()
        self._records.clear()
        self._extras.clear()
        self._keys.clear()

    # -- metadata -------------------------------------------------------------------------

    def list_queues(self) -> list[QueueMeta]:
        return sorted(self._queues.values(), key=lambda m: m.name)

    def get_queue(self, name: str) -> QueueMeta | None:
        return self._queues.get(name)

    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        if meta.name in self._queues:
            raise InvalidArgument("queueName", f"queue '{meta.name}' already exists")
        return self._new_generation(meta)

    def delete_queue(self, name: str) -> None:
        meta = self._require(name)
        del self._queues[name], self._partitions[name]
        self._drop_extras(meta.generation)

    def truncate_queue(self, name: str) -> QueueMeta:
        old = self._require(name)
        self._drop_extras(old.generation)
        return self._new_generation(old)

    def set_enabled(self, name: str, enabled: bool) -> QueueMeta:
        meta = self._queues[name] = self._require(name).with_changes(enabled=enabled)
        return meta

    def _new_generation(self, meta: QueueMeta) -> QueueMeta:
        meta = self._queues[meta.name] = meta.with_changes(generation=next(self._generations))
        self._partitions[meta.name] = {}
        return meta

    def _require(self, name: str) -> QueueMeta:
        meta = self._queues.get(name)
        if meta is None:
            raise InvalidArgument("queueName", f"queue '{name}' does not exist")
        return meta

    # -- data -----------------------------------------------------------------------------

    def last_id(self, queue: QueueMeta, partition: int) -> MessageId | None:
        keys = self._partition(queue, partition).keys
        if not keys:
            return None
        _, ts, seq = rowkey.decode(keys[-1])
        return MessageId(ts, seq)

    def put(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> None:
        # Every partition is checked before anything is written: a put fails as a whole.
        targets = [self._partition(queue, batch.partition) for batch in batches]
        for rows, (partition, first, topics, values) in zip(targets, batches, strict=True):
            keys = rowkey.consecutive_keys(partition, first[0], first[1], len(values))
            for key, topic, value in zip(keys, topics, values, strict=True):
                rows.put(key, topic, value)
            if keys:
                rows.drop_before(_ttl_cutoff(queue, partition))

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
        return _Reader(self, queue, partition, after, stop, reverse=reverse, topics=topics)

    def _partition(self, queue: QueueMeta, partition: int) -> _Partition:
        current = self._queues.get(queue.name)
        if current is None or current.generation != queue.generation:
            raise InvalidArgument(
                "queueName", f"queue '{queue.name}' was truncated or deleted meanwhile"
            )
        if not 0 <= partition < current.partitions:
            raise InvalidArgument(
                "partitionID", f"{partition} is not a partition of '{queue.name}'"
            )
        return self._partitions[queue.name].setdefault(partition, _Partition())

    # -- small metadata records -----------------------------------------------------------

    def get_record(self, namespace: str, key: str) -> bytes | None:
        return self._records.get(namespace, {}).get(key)

    def put_record(self, namespace: str, key: str, value: bytes) -> None:
        self._records.setdefault(namespace, {})[key] = bytes(value)

    def delete_record(self, namespace: str, key: str) -> None:
        self._records.get(namespace, {}).pop(key, None)

    def list_records(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        found = [kv for kv in self._records.get(namespace, {}).items() if kv[0].startswith(prefix)]
        return sorted(found)  # code point order is UTF-8 byte order

    # -- message keys and properties ------------------------------------------------------

    def put_extras(self, queue: QueueMeta, items: Sequence[Extra]) -> None:
        for partition, _, _, _ in items:
            self._partition(queue, partition)  # checks the generation and the partition
        values = self._extras.setdefault(queue.generation, OrderedDict())
        keys = self._keys.setdefault(queue.generation, {})
        for partition, mid, key, value in items:
            values[(partition, MessageId(*mid))] = bytes(value)
            if key is not None:
                keys.setdefault(bytes(key), []).append((MessageId(*mid), partition))
        cutoff = _ttl_ms(queue)
        while values and next(iter(values))[1].timestamp < cutoff:  # expired: forget them
            values.popitem(last=False)
        for key in {k for _, _, k, _ in items if k is not None}:
            found = keys[key]
            keys[key] = [f for f in found if f[0].timestamp >= cutoff]

    def get_extras(
        self, queue: QueueMeta, partition: int, ids: Sequence[MessageId]
    ) -> dict[MessageId, bytes]:
        values: dict[tuple[int, MessageId], bytes] = self._extras.get(queue.generation, {})
        cutoff = _ttl_ms(queue)
        out = {}
        for mid in ids:
            value = values.get((partition, MessageId(*mid)))
            if value is not None and mid[0] >= cutoff:
                out[MessageId(*mid)] = value
        return out

    def find_by_key(self, queue: QueueMeta, key: bytes, limit: int) -> list[tuple[int, MessageId]]:
        cutoff = _ttl_ms(queue)
        found = self._keys.get(queue.generation, {}).get(bytes(key), [])
        alive = [f for f in found if f[0].timestamp >= cutoff]
        # newest first; one MessageID in two partitions: the lower partition first, as the
        # embedded and HBase stores' key index orders them
        alive.sort(key=lambda f: (-f[0].timestamp, -f[0].sequence, f[1]))
        return [(partition, mid) for mid, partition in alive[:limit]]

    def has_extras(self, queue: QueueMeta) -> bool:
        return bool(self._extras.get(queue.generation))

    def _drop_extras(self, generation: int) -> None:
        self._extras.pop(generation, None)
        self._keys.pop(generation, None)


class _Reader(KeyRangeReader):
    """Bisects the partition's keys on every read: it holds nothing but its position."""

    def __init__(self, store: MemoryStore, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._store = store

    def _scan(
        self, lower: bytes, upper: bytes, limit: int, max_bytes: int | None
    ) -> tuple[list[Row], int, bytes | None]:
        store, topics = self._store, self.topics
        rows = store._partition(self.queue, self.partition)
        first, end = bisect_left(rows.keys, lower), bisect_left(rows.keys, upper)
        out: list[Row] = []
        size = 0
        order = range(end - 1, first - 1, -1) if self.reverse else range(first, end)
        for examined, i in enumerate(order, 1):
            topic, value = rows.cells[i]
            if topics is None or topic in topics:
                _, ts, seq = rowkey.decode(rows.keys[i])
                out.append((ts, seq, topic, value))
                size += len(topic) + len(value)
                if len(out) >= limit or (max_bytes is not None and size >= max_bytes):
                    return out, size, rows.keys[i]
            if examined >= store.max_examined:
                return out, size, rows.keys[i]
        return out, size, None


def _ttl_ms(queue: QueueMeta) -> int:
    return wall_clock_ms() - queue.ttl_seconds * 1000


def _ttl_cutoff(queue: QueueMeta, partition: int) -> bytes:
    """The smallest row key of ``partition`` that has not expired."""
    return rowkey.encode(partition, max(0, wall_clock_ms() - queue.ttl_seconds * 1000), 0)
