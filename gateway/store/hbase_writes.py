"""The HBase store's writes, in order: a write lane per partition.

Ids are allocated in the event loop before a put reaches the store, and a scanner that tails
a partition must never see a later batch before an earlier one (it would step over the earlier
one for good). So every partition has a write lane: batches join it in allocation order and
one greenlet sends them, one ``mutateRows`` at a time, coalescing what queued up meanwhile
(group commit: many small concurrent puts cost one round trip).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import gevent
import gevent.event

from .. import rowkey
from ..errors import StoreError
from ..fast import encode_mutate_rows, total_bytes
from . import hbase_schema as schema
from . import rawcall
from .base import PutBatch, QueueMeta

if TYPE_CHECKING:
    from .hbase_state import _State
else:
    _State = object  # the mixins below are put together by HBaseStore (hbase.py)

_MAX_MUTATIONS = 10_000  # rows per mutateRows when a lane coalesces
_MAX_MUTATION_BYTES = 8 << 20


class _Write:
    __slots__ = ("done", "error", "keys", "size", "topics", "values")

    def __init__(self, keys: list[bytes], topics: Sequence[bytes], values: Sequence[bytes]) -> None:
        self.keys = keys
        self.topics = topics
        self.values = values
        self.size = total_bytes(values) + 16 * len(values)
        self.done = gevent.event.Event()
        self.error: BaseException | None = None


class _Lane:
    """The writes of one partition waiting to be sent, in id order."""

    __slots__ = ("busy", "pending")

    def __init__(self) -> None:
        self.pending: list[_Write] = []
        self.busy = False


class _Writes(_State):
    # -- data: puts -------------------------------------------------------------------------

    def put(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> None:
        table = schema.table_name(self.address.namespace, queue.name)
        waits = []
        for partition, first, topics, values in batches:
            if not values:
                continue
            # one HBase row per message, under the seed's row key
            keys = rowkey.consecutive_keys(partition, first[0], first[1], len(values))
            write = _Write(keys, topics, values)
            slot = (table, partition)
            lane = self._lanes.get(slot)
            if lane is None:
                lane = self._lanes[slot] = _Lane()
            lane.pending.append(write)  # no yield since the ids were allocated: id order
            if not lane.busy:
                lane.busy = True
                gevent.spawn(self._drain, queue.name, table, slot, lane)
            waits.append(write)
        for write in waits:
            write.done.wait()
        for write in waits:
            if write.error is not None:
                raise StoreError(f"HBase put failed: {write.error}") from write.error

    def _drain(self, queue: str, table: bytes, slot: tuple[bytes, int], lane: _Lane) -> None:
        guard = self.guard
        try:
            while lane.pending:
                take, rows, size = 0, 0, 0
                for write in lane.pending:
                    if take and (
                        rows + len(write.keys) > _MAX_MUTATIONS
                        or size + write.size > _MAX_MUTATION_BYTES
                    ):
                        break
                    take += 1
                    rows += len(write.keys)
                    size += write.size
                group, lane.pending = lane.pending[:take], lane.pending[take:]
                error: BaseException | None = None
                try:
                    if guard is not None:
                        guard(queue, slot[1])
                    self._mutate_rows(table, group)
                    if guard is not None:
                        guard(queue, slot[1])  # sent in time, but was it answered in time?
                except StoreError as exc:
                    error = exc
                for write in group:
                    write.error = error
                    write.done.set()
        finally:
            lane.busy = False
            if not lane.pending and self._lanes.get(slot) is lane:
                del self._lanes[slot]

    def _mutate_rows(self, table: bytes, group: list[_Write]) -> None:
        """One mutateRows for the writes; returns once HBase acknowledged them (WAL on)."""
        keys, topics, values = group[0].keys, group[0].topics, group[0].values
        if len(group) > 1:
            keys = [k for w in group for k in w.keys]
            topics = [t for w in group for t in w.topics]
            values = [v for w in group for v in w.values]
        prefix = schema.COLUMN_PREFIX
        if not self.address.compact:
            # The request's bytes straight from the lists (what thriftpy2 would write for the
            # same BatchMutations; tests/unit/test_wirecheck.py checks), then happybase's own
            # client reads the reply.
            request = encode_mutate_rows(table, prefix, keys, topics, values)

            self._call(lambda c: rawcall.call(c, request, "mutateRows"))
            return
        mutation, batch_mutation = self._hbase.Mutation, self._hbase.BatchMutation
        mutations = [
            batch_mutation(row=k, mutations=[mutation(column=prefix + t, value=v)])
            for k, t, v in zip(keys, topics, values, strict=True)
        ]
        self._call(lambda c: c.mutateRows(table, mutations, {}))
