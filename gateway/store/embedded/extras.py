"""Message keys and properties (PartitionStore.put_extras) in the family ``hqueue.extras``."""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from rocksdict import (
    Rdict,
    ReadOptions,
    WriteBatch,
)

from ... import rowkey
from ...errors import StoreError
from ...ids import wall_clock_ms
from ...rowkey import MessageId
from ..base import Extra, QueueMeta
from .layout import _options

if TYPE_CHECKING:
    from .state import _State
else:
    _State = object  # the mixins below are put together by EmbeddedStore (store.py)


log = logging.getLogger(__name__)

# Message keys and properties (PartitionStore.put_extras) live in a column family of their
# own, keyed by the queue's generation (8 bytes), so truncate and delete drop a generation's
# with one range delete:
#   gen + b"E" + timestamp(8) + sequence(2) + partition(2)  -> the value
#   gen + b"K" + bucket(8) + len(key)(1) + key + ~timestamp(8) + ~sequence(2) + partition(2)
# Both begin with time, so the TTL sweep expires them with range deletes as it does the rows:
# values up to the cutoff, keys by whole time buckets (a bucket is 1/16 of the queue's TTL, at
# least a minute). Inside a bucket a key's entries come newest first (inverted ids), and
# find_by_key walks the buckets of the TTL from the newest.
EXTRAS_FAMILY = "hqueue.extras"
_GEN = struct.Struct(">q")
_VALUE_AT = struct.Struct(">qhh")  # timestamp, sequence, partition
_BUCKET = struct.Struct(">q")
_INVERTED = struct.Struct(">qhh")  # MAX - timestamp, MAX - sequence, partition
_BUCKETS_PER_TTL = 16
_MIN_BUCKET_MS = 60_000


def _bucket_ms(meta: QueueMeta) -> int:
    return max(_MIN_BUCKET_MS, meta.ttl_seconds * 1000 // _BUCKETS_PER_TTL)


class _Extras(_State):
    """Keys and properties of messages: writes, lookups, and their TTL sweep."""

    def put_extras(self, queue: QueueMeta, items: Sequence[Extra]) -> None:
        with self._gate.passing():  # see _heal_loop
            if not items:
                return
            self._check_space()
            self._family(queue, 0)  # the queue's generation is still current
            _, handle = self._extras_family()
            gen = _GEN.pack(queue.generation)
            width = _bucket_ms(queue)
            batch = WriteBatch(raw_mode=True)
            for partition, (ts, seq), key, value in items:
                batch.put(gen + b"E" + _VALUE_AT.pack(ts, seq, partition), value, handle)
                if key is not None:
                    at = _INVERTED.pack(
                        rowkey.MAX_TIMESTAMP - ts, rowkey.MAX_SEQUENCE - seq, partition
                    )
                    entry = gen + b"K" + _BUCKET.pack(ts // width) + bytes((len(key),)) + key + at
                    batch.put(entry, b"", handle)
            self._db_call(self._db_required().write, batch, self._no_sync)  # RocksDB's own log
            self._has_extras[queue.generation] = True
            self._await_sync()

    def get_extras(
        self, queue: QueueMeta, partition: int, ids: Sequence[MessageId]
    ) -> dict[MessageId, bytes]:
        self._gate.wait_open()  # not while the store reopens (see _heal_loop)
        if not ids:
            return {}
        cf, _ = self._extras_family()
        gen = _GEN.pack(queue.generation)
        cutoff = wall_clock_ms() - queue.ttl_seconds * 1000
        wanted = [MessageId(*mid) for mid in ids if mid[0] >= cutoff]
        keys = [gen + b"E" + _VALUE_AT.pack(ts, seq, partition) for ts, seq in wanted]
        values = self._db_call(cf.get, keys) if keys else []
        return {mid: v for mid, v in zip(wanted, values, strict=True) if v is not None}

    def find_by_key(self, queue: QueueMeta, key: bytes, limit: int) -> list[tuple[int, MessageId]]:
        with self._gate.passing():  # see _heal_loop
            if not self.has_extras(queue):
                return []
            cf, _ = self._extras_family()
            gen = _GEN.pack(queue.generation)
            width = _bucket_ms(queue)
            now = wall_clock_ms()
            cutoff = now - queue.ttl_seconds * 1000
            found: list[tuple[int, MessageId]] = []
            tail = bytes((len(key),)) + key
            # from the bucket after now (ids may run a little ahead of the clock) down to the
            # bucket of the cutoff
            for bucket in range(now // width + 1, cutoff // width - 1, -1):
                prefix = gen + b"K" + _BUCKET.pack(bucket) + tail
                it = cf.iter(ReadOptions())
                it.seek(prefix)
                while it.valid():
                    entry = it.key()
                    if not entry.startswith(prefix) or len(entry) != len(prefix) + _INVERTED.size:
                        if not entry.startswith(prefix):
                            break
                        it.next()  # a longer key that begins with this one
                        continue
                    inv_ts, inv_seq, partition = _INVERTED.unpack_from(entry, len(prefix))
                    ts = rowkey.MAX_TIMESTAMP - inv_ts
                    if ts < cutoff:
                        break  # the rest of this bucket is older still
                    found.append((partition, MessageId(ts, rowkey.MAX_SEQUENCE - inv_seq)))
                    if len(found) >= limit:
                        return found
                    it.next()
                gevent.sleep(0)
            return found

    def has_extras(self, queue: QueueMeta) -> bool:
        self._gate.wait_open()  # not while the store reopens (see _heal_loop)
        known = self._has_extras.get(queue.generation)
        if known is None:
            cf, _ = self._extras_family()
            gen = _GEN.pack(queue.generation)
            it = cf.iter(ReadOptions())
            it.seek(gen)
            known = self._has_extras[queue.generation] = it.valid() and it.key().startswith(gen)
        return known

    def _extras_family(self) -> tuple[Rdict, Any]:
        if self._extras is None:
            raise StoreError("the embedded store is closed")
        return self._extras

    def _open_extras(self, *, create: bool) -> None:
        db = self._db_required()
        if create:
            db.create_column_family(EXTRAS_FAMILY, _options(self._tables))
        self._extras = (
            db.get_column_family(EXTRAS_FAMILY),
            db.get_column_family_handle(EXTRAS_FAMILY),
        )
        # generations of queues deleted or truncated meanwhile (a crash mid-way) go now
        live = {meta.generation for meta in self._queues.values()}
        cf = self._extras[0]
        it = cf.iter(ReadOptions())
        it.seek_to_first()
        while it.valid():
            (generation,) = _GEN.unpack_from(it.key())
            if generation not in live:
                self._drop_extras(generation)
            it.seek(_GEN.pack(generation + 1))

    def _drop_extras(self, generation: int) -> None:
        self._has_extras.pop(generation, None)
        if self._extras is None:
            return
        cf = self._extras[0]
        self._db_call(cf.delete_range, _GEN.pack(generation), _GEN.pack(generation + 1))

    def _sweep_extras(self, meta: QueueMeta, cutoff: int) -> list[tuple[bytes, bytes]]:
        """Deletes the keys and properties of messages older than ``cutoff``; the ranges."""
        if cutoff <= 0 or not self.has_extras(meta):
            return []
        cf, _ = self._extras_family()
        gen = _GEN.pack(meta.generation)
        ranges = [
            (gen + b"E", gen + b"E" + _VALUE_AT.pack(cutoff, 0, 0)),
            (gen + b"K", gen + b"K" + _BUCKET.pack(cutoff // _bucket_ms(meta))),
        ]
        for begin, end in ranges:
            self._db_call(cf.delete_range, begin, end)
        return ranges
