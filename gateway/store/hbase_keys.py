"""Message keys and properties in the HBase store: a table per queue (see hbase_schema),
made on the first put that carries any."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import rowkey
from ..errors import StoreError
from ..ids import wall_clock_ms
from ..rowkey import MessageId
from . import hbase_schema as schema
from .base import Extra, QueueMeta

if TYPE_CHECKING:
    from .hbase_state import _State
else:
    _State = object  # the mixins below are put together by HBaseStore (hbase.py)

# the HBase store's one logger, as before it was split into parts
log = logging.getLogger("gateway.store.hbase")

_INVERTED = struct.Struct(">qhh")  # MAX - timestamp, MAX - sequence, partition
_NO_KEYS_RECHECK = 2.0  # seconds a "no table of keys" answer is believed


class _Keys(_State):
    # -- message keys and properties (a table per queue, see hbase_schema) ---------------

    def put_extras(self, queue: QueueMeta, items: Sequence[Extra]) -> None:
        if not items:
            return
        table = self._keys_table(queue, create=True)
        mutation, batch_mutation = self._hbase.Mutation, self._hbase.BatchMutation
        column = schema.KEYS_COLUMN
        rows = []
        for partition, (ts, seq), key, value in items:
            row = b"E" + rowkey.encode(partition, ts, seq)
            rows.append(batch_mutation(row=row, mutations=[mutation(column=column, value=value)]))
            if key is not None:
                at = _INVERTED.pack(rowkey.MAX_TIMESTAMP - ts, rowkey.MAX_SEQUENCE - seq, partition)
                row = b"K" + bytes((len(key),)) + key + at
                rows.append(batch_mutation(row=row, mutations=[mutation(column=column, value=b"")]))
        self._call(lambda c: c.mutateRows(table, rows, {}))

    def get_extras(
        self, queue: QueueMeta, partition: int, ids: Sequence[MessageId]
    ) -> dict[MessageId, bytes]:
        table = self._keys_table(queue) if ids else None
        if table is None:
            return {}
        cutoff = wall_clock_ms() - queue.ttl_seconds * 1000
        wanted = {
            b"E" + rowkey.encode(partition, ts, seq): MessageId(ts, seq)
            for ts, seq in ids
            if ts >= cutoff
        }
        if not wanted:
            return {}
        column = [schema.KEYS_COLUMN]
        found = self._call(lambda c: c.getRowsWithColumns(table, list(wanted), column, {}))
        out = {}
        for r in found:
            cell = r.columns.get(schema.KEYS_COLUMN)
            if cell is not None and r.row in wanted:
                out[wanted[r.row]] = cell.value
        return out

    def find_by_key(self, queue: QueueMeta, key: bytes, limit: int) -> list[tuple[int, MessageId]]:
        table = self._keys_table(queue)
        if table is None:
            return []
        prefix = b"K" + bytes((len(key),)) + key
        cutoff = wall_clock_ms() - queue.ttl_seconds * 1000
        spec = self._hbase.TScan(
            startRow=prefix,
            stopRow=prefix + b"\xff" * (_INVERTED.size + 1),
            columns=[schema.KEYS_COLUMN],
            caching=min(limit, 1000),
        )

        def scan(client: Any) -> list[tuple[int, MessageId]]:
            out: list[tuple[int, MessageId]] = []
            sid = client.scannerOpenWithScan(table, spec, {})
            try:
                while len(out) < limit:
                    rows = client.scannerGetList(sid, min(limit, 1000))
                    if not rows:
                        break
                    for r in rows:
                        if len(r.row) != len(prefix) + _INVERTED.size:
                            continue  # a longer key that begins with this one
                        inv_ts, inv_seq, partition = _INVERTED.unpack_from(r.row, len(prefix))
                        ts = rowkey.MAX_TIMESTAMP - inv_ts
                        if ts < cutoff:
                            return out  # the rest is older still
                        out.append((partition, MessageId(ts, rowkey.MAX_SEQUENCE - inv_seq)))
                        if len(out) >= limit:
                            break
                return out
            finally:
                client.scannerClose(sid)

        return self._call(scan)

    def has_extras(self, queue: QueueMeta) -> bool:
        return self._keys_table(queue) is not None

    def _keys_table(self, queue: QueueMeta, *, create: bool = False) -> bytes | None:
        """The Thrift1 name of the queue's table of keys and properties; None if it has none
        (with ``create``: made now)."""
        name = schema.table_name(schema.keys_namespace(self.address.namespace), queue.name)
        slot = (queue.name, queue.generation)
        known = self._keys_tables.get(slot)
        if known is True:
            return name
        if not create and known is not None and time.monotonic() - known < _NO_KEYS_RECHECK:
            return None
        if not self._exists(name):
            if not create:
                self._keys_tables[slot] = time.monotonic()
                return None
            with self._admin_lock:
                self._make_keys_table(queue)
        self._keys_tables[slot] = True
        return name

    def _exists(self, table: bytes) -> bool:
        """Whether the table exists, asked through Thrift1 (the pool): the admin connection is
        held for seconds by table administration, and readers must not wait for it."""
        try:
            self._call(lambda c: c.getColumnDescriptors(table))
        except StoreError as exc:
            if "TableNotFound" in str(exc) or "NamespaceNotFound" in str(exc):
                return False
            raise
        return True

    def _make_keys_table(self, queue: QueueMeta) -> None:
        table = self._keys_table_name(queue.name)
        if self._admin("tableExists", table):
            return
        ns = schema.keys_namespace(self.address.namespace)
        self._make_namespace(ns)
        desc = schema.keys_table_descriptor(
            self._admin_idl, self.address.namespace, queue.name, queue.ttl_seconds
        )
        try:
            self._admin("createTable", desc, None)
        except StoreError:
            if not self._admin("tableExists", table):  # another gateway won the race
                raise
        log.info("made the table of keys and properties of queue %s", queue.name)

    def _keys_table_name(self, queue: str) -> Any:
        ns = schema.keys_namespace(self.address.namespace)
        return self._admin_idl.TTableName(ns=ns.encode(), qualifier=queue.encode())

    def _drop_keys_table(self, queue: str) -> None:
        for slot in [s for s in self._keys_tables if s[0] == queue]:
            del self._keys_tables[slot]
        self._drop_table(self._keys_table_name(queue))
