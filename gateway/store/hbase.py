"""The HBase store: queues as pre-split HBase tables, reached through HBase's Thrift servers.

Data and metadata go through happybase (HBase Thrift1) from a connection pool; creating tables
with split keys and truncating them with their regions kept goes through Thrift2 (see
``hbase_admin.thrift``), which Thrift1 lacks. HBase does durability (a put is acknowledged
after the region server wrote its WAL), TTL (per family, from each cell's timestamp), region
failover and balancing. The layout is in :mod:`gateway.store.hbase_schema`.

Ordered writes: ids are allocated in the event loop before a put reaches the store, and a
scanner that tails a partition must never see a later batch before an earlier one (it would
step over the earlier one for good). So every partition has a write lane: batches join it in
allocation order and one greenlet sends them, one ``mutateRows`` at a time, coalescing what
queued up meanwhile (group commit: many small concurrent puts cost one round trip).

Queue metadata is a row per queue in ``<namespace>:hqueue_meta``, so a restarted or second
gateway sees the same queues. It is cached here and refreshed every few seconds.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.lock
import happybase
import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory, TCompactProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TException
from thriftpy2.transport import TBufferedTransportFactory, TFramedTransportFactory

from .. import rowkey
from ..errors import HQueueError, InvalidArgument, StoreError
from ..fast import encode_mutate_rows, total_bytes
from ..ids import wall_clock_ms
from ..rowkey import MessageId
from . import hbase_schema as schema
from . import rawcall
from .base import Extra, PartitionReader, PartitionStore, PutBatch, QueueMeta, Row
from .hbase_meta import FAMILY as META_FAMILY
from .hbase_meta import MetaTable
from .hbase_scans import ResidentScans
from .reading import KeyRangeReader

log = logging.getLogger(__name__)

Hbase: Any = None  # happybase's loaded Hbase.thrift (Thrift1), set on first use

_MAX_MUTATIONS = 10_000  # rows per mutateRows when a lane coalesces
_MAX_MUTATION_BYTES = 8 << 20
_INVERTED = struct.Struct(">qhh")  # MAX - timestamp, MAX - sequence, partition
_NO_KEYS_RECHECK = 2.0  # seconds a "no table of keys" answer is believed


def _admin_idl() -> Any:
    path = Path(__file__).with_name("hbase_admin.thrift")
    return thriftpy2.load(str(path), module_name="hqueue_hbase_admin_thrift")


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


class HBaseStore(PartitionStore):
    def __init__(self, address: schema.HBaseAddress, *, meta_refresh: float = 2.0) -> None:
        self.address = address
        self.meta_refresh = meta_refresh
        self._pool: happybase.ConnectionPool | None = None
        self._admin_idl = _admin_idl()
        self._admin_client: Any = None
        self._admin_lock = gevent.lock.RLock()  # admin changes one at a time, in this gateway
        self._queues: dict[str, QueueMeta] = {}
        self._lanes: dict[tuple[bytes, int], _Lane] = {}
        self._refresher: gevent.Greenlet | None = None
        self._scans: ResidentScans | None = None
        self._meta: MetaTable | None = None
        self._meta_table = schema.table_name(address.namespace, schema.META_TABLE)
        # In a gateway cluster: raises StoreError unless this gateway may write the partition
        # now (it owns it and its lease holds). Called right before a write is sent and again
        # once HBase acknowledged it, so nothing is acknowledged after the lease ran out.
        self.guard: Callable[[str, int], None] | None = None
        # (queue, generation) -> True, or when a missing table of keys was last seen
        self._keys_tables: dict[tuple[str, int], bool | float] = {}

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        global Hbase
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

        Hbase = Hbase_thrift
        self._meta = MetaTable(self._call, Hbase, self._meta_table)
        self._scans = ResidentScans(self._call, Hbase, raw=not (a.framed or a.compact))
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
        spec = Hbase.TScan(
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
        mutation, batch_mutation = Hbase.Mutation, Hbase.BatchMutation
        mutations = [
            batch_mutation(row=k, mutations=[mutation(column=prefix + t, value=v)])
            for k, t, v in zip(keys, topics, values, strict=True)
        ]
        self._call(lambda c: c.mutateRows(table, mutations, {}))

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

    # -- message keys and properties (a table per queue, see hbase_schema) ---------------

    def put_extras(self, queue: QueueMeta, items: Sequence[Extra]) -> None:
        if not items:
            return
        table = self._keys_table(queue, create=True)
        mutation, batch_mutation = Hbase.Mutation, Hbase.BatchMutation
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
        spec = Hbase.TScan(
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

    # -- small metadata records (rows of the metadata table) ---------------------------

    def get_record(self, namespace: str, key: str) -> bytes | None:
        return self._meta_rows().get_record(namespace, key)

    def put_record(self, namespace: str, key: str, value: bytes) -> None:
        self._meta_rows().put_record(namespace, key, value)

    def delete_record(self, namespace: str, key: str) -> None:
        self._meta_rows().delete_record(namespace, key)

    def list_records(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        return self._meta_rows().list_records(namespace, prefix)

    # -- HBase calls ----------------------------------------------------------------------

    def _call(self, fn: Any) -> Any:
        """Runs ``fn(thrift1_client)`` on a pooled connection; HBase faults -> StoreError."""
        pool = self._pool
        if pool is None:
            raise StoreError("the HBase store is not started")
        try:
            with pool.connection(timeout=self.address.timeout) as conn:
                try:
                    return fn(conn.client)
                except (gevent.GreenletExit, gevent.Timeout):
                    # interrupted mid-call: an answer may still be on its way and would be
                    # read as the answer to the next call on this pooled connection (happybase
                    # refreshes it only after Thrift and socket errors)
                    conn._refresh_thrift_client()
                    raise
        except HQueueError:
            raise
        except Hbase.IllegalArgument as exc:
            raise StoreError(f"HBase refused the call: {exc.message}") from exc
        except Hbase.IOError as exc:
            raise StoreError(f"HBase: {_first_line(exc.message)}") from exc
        except happybase.pool.NoConnectionsAvailable as exc:
            raise StoreError(
                f"all {self.address.pool_size} HBase connections busy for "
                f"{self.address.timeout:g} s"
            ) from exc
        except (TException, OSError) as exc:  # socket timeouts are OSErrors
            raise StoreError(f"HBase Thrift at {self.address.host}:{self.address.port}: "
                             f"{exc or type(exc).__name__}") from exc  # fmt: skip

    def _admin(self, method: str, *args: Any, argument: str | None = None) -> Any:
        """Calls the Thrift2 admin service. ``argument`` names the caller's argument to blame
        when HBase refuses a setting (an unsupported compression, say)."""
        a = self.address
        with self._admin_lock:
            try:
                if self._admin_client is None:
                    self._admin_client = make_client(
                        self._admin_idl.THBaseService,
                        a.admin_host,
                        a.admin_port,
                        timeout=int(max(a.timeout, 60.0) * 1000),  # table admin takes seconds
                        trans_factory=TFramedTransportFactory()
                        if a.framed
                        else TBufferedTransportFactory(),
                        proto_factory=TCompactProtocolFactory()
                        if a.compact
                        else TBinaryProtocolFactory(),
                    )
                return getattr(self._admin_client, method)(*args)
            except self._admin_idl.TIOError as exc:
                message = _first_line(exc.message or "")
                if argument and ("ompression" in message or "DoNotRetryIOException" in message):
                    raise InvalidArgument(argument, f"HBase refused it: {message}") from exc
                raise StoreError(f"HBase {method}: {message}") from exc
            except (TException, OSError) as exc:
                if self._admin_client is not None:
                    self._admin_client.close()
                    self._admin_client = None
                raise StoreError(
                    f"HBase Thrift2 at {a.admin_host}:{a.admin_port} ({method}): "
                    f"{exc or type(exc).__name__}"
                ) from exc

    def _table_name_of(self, queue: str) -> Any:
        return self._admin_idl.TTableName(
            ns=self.address.namespace.encode(), qualifier=queue.encode()
        )

    def _drop_table(self, table: Any) -> None:
        if not self._admin("tableExists", table):
            return
        if self._admin("isTableEnabled", table):
            self._admin("disableTable", table)
        self._admin("deleteTable", table)

    def _make_namespace(self, ns: str) -> None:
        try:
            self._admin("getNamespaceDescriptor", ns)
        except StoreError as exc:
            if "NamespaceNotFound" not in str(exc):
                raise
            try:
                self._admin("createNamespace", self._admin_idl.TNamespaceDescriptor(name=ns))
            except StoreError as exc2:
                if "NamespaceExist" not in str(exc2):  # another gateway starting made it
                    raise

    def _ensure_namespace(self) -> None:
        self._make_namespace(self.address.namespace)
        meta = self._table_name_of(schema.META_TABLE)
        if not self._admin("tableExists", meta):
            family = self._admin_idl.TColumnFamilyDescriptor(name=META_FAMILY, maxVersions=1)
            desc = self._admin_idl.TTableDescriptor(tableName=meta, columns=[family])
            try:
                self._admin("createTable", desc, None)
            except StoreError:
                if not self._admin("tableExists", meta):  # another gateway won the race
                    raise

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


def _first_line(message: str | bytes | None) -> str:
    """The first line of an HBase error (Thrift1 sends it as bytes, Thrift2 as text)."""
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    return (message or "").strip().split("\n", 1)[0][:500]


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
