"""The HBase store: queues as pre-split HBase tables, reached through HBase's Thrift servers.

Data and metadata go through happybase (HBase Thrift1) from a connection pool; creating tables
with split keys and truncating them with their regions kept goes through Thrift2 (see
``hbase_admin.thrift``), which Thrift1 lacks. HBase does durability (a put is acknowledged
after the region server wrote its WAL), TTL (per family, from each cell's timestamp), region
failover and balancing. The layout is in :mod:`gateway.store.hbase_schema`.

Queue metadata is a row per queue in ``<namespace>:hqueue_meta``, so a restarted or second
gateway sees the same queues. It is cached here and refreshed every few seconds.

This module is its face: lifecycle, queues, records, the newest id and readers. The rest:

- hbase_writes.py: puts, in order, through a write lane per partition (group commit);
- hbase_keys.py: message keys and properties (a table per queue);
- hbase_calls.py: calls to HBase (Thrift1 pool, Thrift2 admin) and their errors;
- hbase_state.py: the shared attributes; hbase_meta.py: the metadata table;
  hbase_scans.py: HBase scanners kept open between reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import Any

import gevent
import happybase
from thriftpy2.thrift import TException

from .. import rowkey
from ..errors import InvalidArgument, StoreError
from ..rowkey import MessageId
from . import hbase_schema as schema
from .base import PartitionReader, PartitionStore, QueueMeta, Row
from .hbase_calls import _admin_idl as _admin_idl
from .hbase_calls import _Calls
from .hbase_calls import _first_line as _first_line
from .hbase_keys import _Keys
from .hbase_meta import MetaTable
from .hbase_scans import ResidentScans
from .hbase_state import _State
from .hbase_writes import _Writes
from .reading import KeyRangeReader

log = logging.getLogger(__name__)


class HBaseStore(_Writes, _Keys, _Calls, _State, PartitionStore):
    """Queues as pre-split HBase tables (its parts: see the module's docstring)."""

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        a = self.address
        try:
            self._pool = happybase.ConnectionPool(
                a.pool_size,
                host=a.host,
                port=a.port,
                timeout=int(a.timeout * 1000),
                transport="framed" if a.framed else "buffered",
                protocol="compact" if a.compact else "binary",
            )
        except (TException, OSError) as exc:
            raise StoreError(f"cannot reach HBase Thrift at {a.host}:{a.port}: {exc}") from exc
        import Hbase_thrift  # loaded by happybase on import

        self._hbase = Hbase_thrift
        self._meta = MetaTable(self._call, Hbase_thrift, self._meta_table)
        self._scans = ResidentScans(self._call, Hbase_thrift, raw=not (a.framed or a.compact))
        self._ensure_namespace()
        deadline = time.monotonic() + 30
        while True:  # a metadata table another gateway just created may not be online yet
            try:
                self._refresh_meta()
                break
            except StoreError:
                if time.monotonic() > deadline:
                    raise
                gevent.sleep(0.5)
        self._refresher = gevent.spawn(self._refresh_loop)
        log.info(
            "HBase store: thrift %s:%d, admin %s:%d, namespace %s, %d queue(s)",
            a.host, a.port, a.admin_host, a.admin_port, a.namespace, len(self._queues),
        )  # fmt: skip

    def stop(self) -> None:
        if self._refresher is not None:
            self._refresher.kill()
            self._refresher = None
        if self._scans is not None:
            self._scans.close_all()
        deadline = time.monotonic() + self.address.timeout
        while any(lane.busy for lane in self._lanes.values()) and time.monotonic() < deadline:
            gevent.sleep(0.01)  # acknowledge what is in flight before closing connections
        with self._admin_lock:
            if self._admin_client is not None:
                self._admin_client.close()
                self._admin_client = None

    # -- metadata -------------------------------------------------------------------------

    def list_queues(self) -> list[QueueMeta]:
        self._refresh_meta()
        return sorted(self._queues.values(), key=lambda m: m.name)

    def get_queue(self, name: str) -> QueueMeta | None:
        meta = self._queues.get(name)
        if meta is None:  # created by another gateway since the last refresh?
            meta = self._meta_rows().read(name)
            if meta is not None:
                self._queues[name] = meta
        return meta

    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        schema.check_queue_name(meta.name)
        schema.check_regions(meta.partitions, meta.config, self.address.max_regions)
        with self._admin_lock:
            self._meta_rows().claim(meta.name)
            try:
                meta = meta.with_changes(generation=self._meta_rows().next_generation())
                table = self._table_name_of(meta.name)
                if self._admin("tableExists", table):  # left by a crash mid-create/delete
                    log.warning("dropping orphaned HBase table %s", table.qualifier.decode())
                    self._drop_table(table)
                desc = schema.table_descriptor(
                    self._admin_idl, self.address.namespace, meta.name, meta.ttl_seconds,
                    meta.config,
                )  # fmt: skip
                splits = schema.split_keys(
                    meta.partitions, schema.partitions_per_region(meta.config)
                )
                self._admin("createTable", desc, splits, argument="config")
            except BaseException:
                self._meta_rows().delete(meta.name)
                raise
            self._meta_rows().save(meta)
            self._queues[meta.name] = meta
            return meta

    def delete_queue(self, name: str) -> None:
        with self._admin_lock:
            self._require(name)
            self._meta_rows().delete(name)  # invisible first; a crash leaves an orphan table
            self._queues.pop(name, None)
            self._drop_scans(name)
            self._drop_table(self._table_name_of(name))
            self._drop_keys_table(name)

    def truncate_queue(self, name: str) -> QueueMeta:
        with self._admin_lock:
            old = self._require(name)
            new = old.with_changes(generation=self._meta_rows().next_generation())
            table = self._table_name_of(name)
            if self._admin("isTableEnabled", table):
                self._admin("disableTable", table)
            self._admin("truncateTable", table, True)  # keeps the split points; enables it
            if not new.enabled:
                self._admin("disableTable", table)
            self._drop_keys_table(name)
            self._meta_rows().save(new)
            self._queues[name] = new
            self._drop_scans(name)
            return new

    def _drop_scans(self, queue: str) -> None:
        """The open scanners of a queue's table go with its rows (their readers raise)."""
        if self._scans is not None:
            self._scans.drop_table(schema.table_name(self.address.namespace, queue))

    def set_enabled(self, name: str, enabled: bool) -> QueueMeta:
        with self._admin_lock:
            meta = self._require(name).with_changes(enabled=enabled)
            table = self._table_name_of(name)
            if self._admin("isTableEnabled", table) != enabled:
                self._admin("enableTable" if enabled else "disableTable", table)
            self._meta_rows().save(meta)
            self._queues[name] = meta
            return meta

    # -- data -----------------------------------------------------------------------------

    def last_id(self, queue: QueueMeta, partition: int) -> MessageId | None:
        # Expired rows are gone from HBase's view; ids then restart from the clock, which is
        # past them unless it stepped back by more than the queue's TTL.
        table = schema.table_name(self.address.namespace, queue.name)
        spec = self._hbase.TScan(
            startRow=rowkey.key_before(rowkey.partition_end(partition)) or b"",
            stopRow=rowkey.key_before(rowkey.partition_start(partition)) or b"",
            columns=[schema.FAMILY],
            caching=1,
            reversed=True,
        )

        def newest(client: Any) -> list[Any]:
            sid = client.scannerOpenWithScan(table, spec, {})
            try:
                return client.scannerGetList(sid, 1)
            finally:
                client.scannerClose(sid)

        rows = self._call(newest)
        if not rows:
            return None
        p, ts, seq = rowkey.decode(rows[0].row)
        return MessageId(ts, seq) if p == partition else None

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

    def _scan(
        self,
        reader: _Reader,
        lower: bytes,
        upper: bytes,
        limit: int,
        max_bytes: int | None,
    ) -> tuple[list[Row], int, bytes | None]:
        queue, partition, topics = reader.queue, reader.partition, reader.topics
        current = self._queues.get(queue.name)
        if current is None or current.generation != queue.generation:
            raise InvalidArgument(
                "queueName", f"queue '{queue.name}' was truncated or deleted meanwhile"
            )
        if lower >= upper:
            return [], 0, None
        columns = [schema.FAMILY] if topics is None else [schema.COLUMN_PREFIX + t for t in topics]
        if not columns:
            return [], 0, None
        if reader.reverse:
            start = rowkey.key_before(upper)
            if start is None:
                return [], 0, None
            stop = rowkey.key_before(lower) or b""
        else:
            start, stop = lower, upper
        if self._scans is None:
            raise StoreError("the HBase store is not started")
        table = schema.table_name(self.address.namespace, queue.name)
        rows, exhausted = self._scans.scan(
            reader, table, partition, lower, upper, start, stop,
            reverse=reader.reverse, columns=columns, limit=limit, max_bytes=max_bytes,
        )  # fmt: skip
        size = sum(len(r[2]) + len(r[3]) for r in rows)
        resume = (
            None if exhausted or not rows else rowkey.encode(partition, rows[-1][0], rows[-1][1])
        )
        return rows, size, resume

    # -- small metadata records (rows of the metadata table) ---------------------------

    def get_record(self, namespace: str, key: str) -> bytes | None:
        return self._meta_rows().get_record(namespace, key)

    def put_record(self, namespace: str, key: str, value: bytes) -> None:
        self._meta_rows().put_record(namespace, key, value)

    def delete_record(self, namespace: str, key: str) -> None:
        self._meta_rows().delete_record(namespace, key)

    def list_records(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        return self._meta_rows().list_records(namespace, prefix)

    # -- metadata cache -------------------------------------------------------------------

    @property
    def meta_table(self) -> MetaTable:
        return self._meta_rows()

    def _meta_rows(self) -> MetaTable:
        if self._meta is None:
            raise StoreError("the HBase store is not started")
        return self._meta

    def _refresh_loop(self) -> None:
        while True:
            gevent.sleep(self.meta_refresh)
            try:
                self._refresh_meta()
            except StoreError as exc:
                log.warning("refreshing queue metadata from HBase: %s", exc)

    def _refresh_meta(self) -> None:
        with self._admin_lock:  # an admin change of ours must not be overwritten by old rows
            self._queues = self._meta_rows().queues()

    def _require(self, name: str) -> QueueMeta:
        meta = self._meta_rows().read(name)  # fresh: another gateway may have changed it
        if meta is None:
            self._queues.pop(name, None)
            raise InvalidArgument("queueName", f"queue '{name}' does not exist")
        return meta


class _Reader(KeyRangeReader):
    """Reads through an HBase scanner that stays open between reads (see
    :class:`ResidentScans`, which closes it when idle; the next read opens another from here)."""

    def __init__(self, store: HBaseStore, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._store = store

    def _scan(
        self, lower: bytes, upper: bytes, limit: int, max_bytes: int | None
    ) -> tuple[list[Row], int, bytes | None]:
        return self._store._scan(self, lower, upper, limit, max_bytes)

    def _release(self) -> None:
        scans = self._store._scans
        if scans is not None:
            scans.release(self)
