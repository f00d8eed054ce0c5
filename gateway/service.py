"""The HQueueService handler: validate, route, allocate MessageIDs, store, scan.

Methods carry the IDL's names. They raise :mod:`gateway.errors` exceptions; the Thrift
boundary (:mod:`gateway.boundary`) turns those into the IDL's ``IllegalArgument``/``IOError``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NoReturn

import gevent

from . import rowkey, validation
from .cluster.forward import forward_first_id, forward_messages
from .cursor import ScanSpec
from .errors import InvalidArgument, StoreError, Unwritten
from .fast import total_bytes
from .ids import PartitionIdAllocator, QueueSequence
from .keys import MAX_KEY_BYTES, Extras, MessageExtras, check_extras
from .rowkey import MAX_SEQUENCE, MessageId, consecutive_ids, nth_id
from .scanners import Scanner, ScannerRegistry
from .scanrows import EncodedRows, MessageRows
from .store.base import PartitionStore, PutBatch, QueueMeta
from .store.reading import after_for_start

if TYPE_CHECKING:
    from .cluster.forward import Forwarder
    from .cluster.member import ClusterMember
    from .metrics import GatewayStats
    from .subscriptions.service import SubscriptionService

log = logging.getLogger(__name__)

_BODY = itemgetter(3)  # of a Row


@dataclass(frozen=True)
class ServiceLimits:
    max_value_bytes: int = 4 * 1024 * 1024
    max_batch_messages: int = 100_000
    max_list_messages: int = 100_000  # messageScannerGetList returns at most this many
    max_response_bytes: int = 16 * 1024 * 1024  # ... and stops adding once past this size
    default_caching: int = 1000


class GatewayService:
    def __init__(
        self,
        store: PartitionStore,
        scanners: ScannerRegistry,
        thrift: Any,
        *,
        advertise: str,
        limits: ServiceLimits | None = None,
    ) -> None:
        self.store = store
        self.scanners = scanners
        self.advertise = advertise
        self.limits = limits or ServiceLimits()
        self._allocators: dict[tuple[str, int], PartitionIdAllocator] = {}
        self._sequences: dict[str, QueueSequence] = {}  # shared by a queue's allocators
        self._t = thrift
        # Set by the gateway when subscriptions run: the subscription methods, and the hook
        # that wakes push workers once a put to (queue, partitions) is acknowledged.
        self.subscriptions: SubscriptionService | None = None
        self.after_put: Callable[[str, Iterable[int]], None] | None = None
        # Set by the gateway: message keys and properties (gateway.keys).
        self.extras: MessageExtras | None = None
        # Set by the gateway when replies are on the binary protocol: a scan of one partition
        # may hand its messages over already encoded (EncodedRows) by the store's reader.
        self.encoded_replies = False
        # Set when metrics or the console run: counted once per call (only the byte counts
        # look at each message: a sum of lengths in C).
        self.stats: GatewayStats | None = None
        # Set in a gateway cluster: who owns which partition, and the hop to the owner.
        self.cluster: ClusterMember | None = None
        self.forwarder: Forwarder | None = None
        self._floors: dict[tuple[str, int], int] = {}  # ids start at or above (ms)

    # -- puts -----------------------------------------------------------------------------

    def putMessage(self, queueName: Any, tMessage: Any) -> None:
        self._put(queueName, None, [tMessage], "tMessage")

    def putMessages(self, queueName: Any, tMessages: Any) -> None:
        self._put(queueName, None, tMessages, "tMessages")

    def putMessageWithPid(self, queueName: Any, partitionID: Any, tMessage: Any) -> None:
        self._put(queueName, _required_pid(partitionID), [tMessage], "tMessage")

    def putMessagesWithPid(self, queueName: Any, partitionID: Any, tMessages: Any) -> None:
        self._put(queueName, _required_pid(partitionID), tMessages, "tMessages")

    def forwardMessages(self, queueName: Any, partitionID: Any, tMessages: Any) -> None:
        self._put(queueName, _required_pid(partitionID), tMessages, "tMessages", forwarded=True)

    def forwardMessagesReturningIds(
        self, queueName: Any, partitionID: Any, tMessages: Any
    ) -> list[Any]:
        """A put with keys or properties, or whose ids are wanted, forwarded by another gateway
        of the cluster (gateway.cluster.forward); written only if this gateway owns it."""
        placed = self._put(
            queueName, _required_pid(partitionID), tMessages, "tMessages", forwarded=True,
            want_ids=True,
        )  # fmt: skip
        mid = self._t.TMessageID
        return [mid(ts, seq) for _, ts, seq in placed]

    def _put(
        self,
        raw_queue: Any,
        raw_pid: Any,
        messages: Any,
        argument: str,
        forwarded: bool = False,
        want_ids: bool = False,
    ) -> list[tuple[int, int, int]]:
        """Stores the messages; with ``want_ids`` their (partition, timestamp, sequence), in
        order (else [])."""
        meta = self._queue(raw_queue, writable=True)
        if messages is None or (argument == "tMessage" and messages[0] is None):
            raise InvalidArgument(argument, "must be set")
        self._check_count(len(messages), argument)
        n_partitions = meta.partitions
        forced = None if raw_pid is None else validation.partition(raw_pid, n_partitions)
        default = forced if forced is not None else self._any_partition(meta)
        groups: dict[int, tuple[list[bytes], list[bytes]]] = {}
        extras: dict[int, dict[int, Extras]] = {}  # partition -> index in group -> extras
        where: list[tuple[int, int]] = []  # per message: (partition, index in its group)
        max_value = self.limits.max_value_bytes
        single = argument == "tMessage"
        for i, m in enumerate(messages):
            topic, value = m.topic, m.value
            if (
                type(topic) is not bytes
                or type(value) is not bytes
                or not 0 < len(topic) < 256
                or len(value) > max_value
            ):
                topic, value = self._coerce(m, i, single, argument)
            pid = m.partitionID
            if forced is not None or pid is None:
                pid = default
            elif not (type(pid) is int and 0 <= pid < n_partitions):
                validation.partition(
                    pid, n_partitions, self._where(argument, i, single, "partitionID")
                )
            group = groups.get(pid)
            if group is None:
                group = groups[pid] = ([], [])
            key, props = getattr(m, "key", None), getattr(m, "properties", None)
            if key is not None or props:
                extra = check_extras(key, props, self._where(argument, i, single, ""))
                extras.setdefault(pid, {})[len(group[0])] = extra
            where.append((pid, len(group[0])))
            group[0].append(topic)
            group[1].append(value)
        firsts = self._store(
            meta, [(pid, t, v) for pid, (t, v) in groups.items()], forwarded, extras, want_ids
        )
        if not want_ids:
            return []
        return [(pid, *nth_id(firsts[pid], n)) for pid, n in where]

    def put_raw(
        self,
        raw_queue: bytes,
        raw_pid: int | None,
        topics: Sequence[bytes],
        values: Sequence[bytes],
        forwarded: bool = False,
    ) -> None:
        """A put whose messages were already taken apart and checked on the wire (topics
        1..255 bytes, values within the limit, no per-message partition): see
        :func:`gateway._wirecheck.extract_put`. Same semantics as ``putMessages*``;
        ``forwarded``: ``forwardMessages`` from another gateway of the cluster."""
        self.begin_put_raw(raw_queue, raw_pid, topics, values, forwarded)()

    def begin_put_raw(
        self,
        raw_queue: bytes,
        raw_pid: int | None,
        topics: Sequence[bytes],
        values: Sequence[bytes],
        forwarded: bool = False,
    ) -> Callable[[], None]:
        """``put_raw`` in two steps: checks, allocates ids and writes now (in call order), and
        returns what waits until the put is acknowledged; raises now for a bad argument. A
        connection's next put begins while this one waits for its log sync (gateway/server.py)."""
        meta = self._queue(raw_queue, writable=True)
        self._check_count(len(values), "tMessages")
        if raw_pid is None:
            pid = self._any_partition(meta)
        else:
            pid = validation.partition(raw_pid, meta.partitions)
        return self._store_begin(meta, [(pid, topics, values)], forwarded)[1]

    def _any_partition(self, meta: QueueMeta) -> int:
        """A put that names no partition: a random one (in a cluster, one owned here)."""
        if self.cluster is not None:
            return self.cluster.pick_partition(meta.name, meta.partitions)
        return random.randrange(meta.partitions)

    def _check_count(self, count: int, argument: str) -> None:
        if count > self.limits.max_batch_messages:
            raise InvalidArgument(
                argument,
                f"{count} messages; at most {self.limits.max_batch_messages} per call",
            )

    def _store(
        self,
        meta: QueueMeta,
        groups: Sequence[tuple[int, Sequence[bytes], Sequence[bytes]]],
        forwarded: bool = False,
        extras: dict[int, dict[int, Extras]] | None = None,
        want_ids: bool = False,
    ) -> dict[int, tuple[int, int]]:
        """Stores each group on its partition; the first id of each partition's group."""
        firsts, durable = self._store_begin(meta, groups, forwarded, extras, want_ids)
        durable()
        return firsts

    def _store_begin(
        self,
        meta: QueueMeta,
        groups: Sequence[tuple[int, Sequence[bytes], Sequence[bytes]]],
        forwarded: bool = False,
        extras: dict[int, dict[int, Extras]] | None = None,
        want_ids: bool = False,
    ) -> tuple[dict[int, tuple[int, int]], Callable[[], None]]:
        """``_store`` in two steps: the first ids, and what waits until the put is durable
        (then wakes the push workers). In a cluster the whole put is done here."""
        if self.cluster is not None:
            return self._store_in_cluster(meta, groups, forwarded, extras, want_ids), _done
        batches = []
        firsts = {}
        for pid, topics, values in groups:
            if not values:
                continue
            ts, seq = self._allocator(meta, pid).allocate(len(values))
            firsts[pid] = (ts, seq)
            batches.append(PutBatch(pid, MessageId(ts, seq), topics, values))
        if not batches:
            return firsts, _done
        self._save_extras(meta, firsts, extras)  # first: a visible message's key is found
        written = self._write_begin(meta, batches)
        after_put, name = self.after_put, meta.name
        partitions = [b.partition for b in batches]
        del batches  # the messages are the store's now: nothing here keeps them

        def durable() -> None:
            written()
            if after_put is not None:
                after_put(name, partitions)

        return firsts, durable

    def put_internal(
        self, meta: QueueMeta, partition: int, messages: list[tuple[bytes, bytes, Extras]]
    ) -> list[tuple[int, int]]:
        """A put by the gateway itself (dead letters): ids of the messages, in order."""
        extras = {partition: {i: ex for i, (_, _, ex) in enumerate(messages) if ex}}
        firsts = self._store(
            meta,
            [(partition, [m[0] for m in messages], [m[1] for m in messages])],
            extras=extras,
            want_ids=True,
        )
        return consecutive_ids(*firsts[partition], len(messages)) if messages else []

    def putMessagesReturningIds(
        self, queueName: Any, partitionID: Any, tMessages: Any
    ) -> list[Any]:
        pid = None if partitionID == -1 else partitionID
        placed = self._put(queueName, pid, tMessages, "tMessages", want_ids=True)
        mid = self._t.TMessageID
        return [mid(ts, seq) for _, ts, seq in placed]

    def _write_begin(self, meta: QueueMeta, batches: list[PutBatch]) -> Callable[[], None]:
        """``store.put_begin``, timed (to durable) and counted when metrics run (puts
        forwarded to another gateway are counted there)."""
        stats = self.stats
        if stats is None:
            return self.store.put_begin(meta, batches)
        began = time.perf_counter()
        written = self.store.put_begin(meta, batches)
        counters = stats.queue(meta.name)
        for b in batches:
            counters.put_messages += len(b.values)
            counters.put_bytes += total_bytes(b.values)  # no bytes object per message
        counters.put_batches += len(batches)

        def timed() -> None:
            written()
            stats.put_latency.observe(time.perf_counter() - began)

        return timed

    def _store_in_cluster(
        self,
        meta: QueueMeta,
        groups: Sequence[tuple[int, Sequence[bytes], Sequence[bytes]]],
        forwarded: bool,
        extras: dict[int, dict[int, Extras]] | None = None,
        want_ids: bool = False,
        reroute: bool = True,
    ) -> dict[int, tuple[int, int]]:
        """Writes the groups of partitions owned here, forwards the others to their owners
        (at the same time), and returns once every one of them is acknowledged; the first id
        of each group (of a forwarded one only when its ids were asked for or it carries
        keys or properties: then it goes as ``forwardMessagesReturningIds``).

        A forwarded group the owner did not take unwritten (it had just left, or handed the
        partition on) is routed again, once, when this gateway's view of the cluster moved
        on within ``move_wait``: a rolling restart fails no put for a view a moment old."""
        firsts: dict[int, tuple[int, int]] = {}
        cluster, forwarder = self.cluster, self.forwarder
        assert cluster is not None and forwarder is not None
        name = meta.name

        def send(address: str, gid: str | None, pid: int, topics: Sequence[bytes],
                values: Sequence[bytes]) -> None:  # fmt: skip
            ex = (extras or {}).get(pid)
            try:
                if want_ids or ex:
                    whole = forward_messages(self._t, topics, values, ex)
                    forward_first_id(forwarder, address, name, pid, whole, firsts)
                else:
                    forwarder.forward(address, name, pid, topics, values)
            except Unwritten as exc:
                if not reroute or not cluster.wait_moved(name, pid, gid):
                    raise
                log.info("routing a put for %s/%d again: %s", name, pid, exc)
                firsts.update(self._store_in_cluster(meta, [(pid, topics, values)], False,
                                                     {pid: ex} if ex else None, want_ids,
                                                     reroute=False))  # fmt: skip

        local, hops = [], []
        for pid, topics, values in groups:
            if not values:
                continue
            owner = cluster.route(name, pid, forwarded=forwarded)
            if owner is None:
                local.append((pid, topics, values))
            else:  # who it was routed to, to know when the view moved past it
                gid = cluster.assigned_owner(name, pid)
                hops.append(gevent.spawn(_outcome, send, owner, gid, pid, topics, values))
        try:
            if local:
                with contextlib.ExitStack() as owned:
                    batches = []
                    for pid, topics, values in local:
                        owned.enter_context(cluster.writing(name, pid))
                        alloc = self._allocator(meta, pid)
                        ts, seq = alloc.allocate(len(values))
                        firsts[pid] = (ts, seq)
                        last = alloc.last
                        assert last is not None
                        cluster.check_id(last.timestamp)
                        batches.append(PutBatch(pid, MessageId(ts, seq), topics, values))
                    # before the rows (see _store); only the local groups' (a forwarded
                    # group's owner saves its own)
                    self._save_extras(meta, {b.partition: firsts[b.partition] for b in batches},
                                      extras)  # fmt: skip
                    self._write_begin(meta, batches)()
                for b in batches:
                    cluster.count_put(name, b.partition, len(b.values))
                if self.after_put is not None:
                    self.after_put(name, [b.partition for b in batches])
        finally:
            gevent.joinall(hops)
        for hop in hops:
            if hop.value is not None:
                raise hop.value
        return firsts

    def _save_extras(
        self,
        meta: QueueMeta,
        firsts: dict[int, tuple[int, int]],
        extras: dict[int, dict[int, Extras]] | None,
    ) -> None:
        if extras and self.extras is not None:
            for pid, by_index in extras.items():
                if pid in firsts and by_index:
                    self.extras.save(
                        meta, pid, ((nth_id(firsts[pid], n), ex) for n, ex in by_index.items())
                    )

    def own(self, queue: str, partition: int, floor_ms: int) -> None:
        """This gateway became the partition's owner: its ids start at or above ``floor_ms``
        and above the newest stored row (read again now, after the previous owner stopped)."""
        self._allocators.pop((queue, partition), None)
        self._floors[(queue, partition)] = floor_ms

    def disown(self, queue: str, partition: int) -> None:
        self._allocators.pop((queue, partition), None)
        self._floors.pop((queue, partition), None)

    def _coerce(self, m: Any, i: int, single: bool, argument: str) -> tuple[bytes, bytes]:
        """The slow path of one message: str accepted as UTF-8, anything wrong refused."""
        topic, value = m.topic, m.value
        if isinstance(topic, str):
            topic = topic.encode()
        if isinstance(value, str):
            value = value.encode()
        if (
            type(topic) is bytes
            and type(value) is bytes
            and 0 < len(topic) < 256
            and len(value) <= self.limits.max_value_bytes
        ):
            return topic, value
        self._reject(m, i, single, argument)

    def _reject(self, m: Any, i: int, single: bool, argument: str) -> NoReturn:
        topic, value = m.topic, m.value
        if not topic:
            raise InvalidArgument(self._where(argument, i, single, "topic"), "must not be empty")
        if not isinstance(topic, (bytes, str)) or len(topic) > 255:
            raise InvalidArgument(
                self._where(argument, i, single, "topic"),
                f"must be 1..255 bytes, got {_size(topic)}",
            )
        if value is None:
            raise InvalidArgument(
                self._where(argument, i, single, "value"), "must be set (it may be empty)"
            )
        if not isinstance(value, (bytes, str)) or len(value) > self.limits.max_value_bytes:
            raise InvalidArgument(
                self._where(argument, i, single, "value"),
                f"{len(value)} bytes is over the limit of {self.limits.max_value_bytes} bytes",
            )
        raise InvalidArgument(self._where(argument, i, single, ""), "is malformed")

    @staticmethod
    def _where(argument: str, i: int, single: bool, field: str) -> str:
        base = argument if single else f"{argument}[{i}]"
        return f"{base}.{field}" if field else base

    def _allocator(self, meta: QueueMeta, partition: int) -> PartitionIdAllocator:
        slot = (meta.name, partition)
        alloc = self._allocators.get(slot)
        if alloc is None:
            # Seeded from the newest stored row, so ids keep increasing across restarts, and
            # in a cluster above every id a previous owner could still write (its ceiling).
            last = self.store.last_id(meta, partition)
            floor = self._floors.get(slot)
            if floor is not None and (last is None or last.timestamp < floor):
                last = MessageId(floor - 1, MAX_SEQUENCE)
            # A store that does I/O yields in last_id: a concurrent first put to this
            # partition may have seeded the allocator meanwhile, and two would hand out
            # the same ids.
            alloc = self._allocators.get(slot)
            if alloc is None:
                shared = self._sequences.setdefault(meta.name, QueueSequence())
                alloc = self._allocators[slot] = PartitionIdAllocator(last, shared=shared)
        return alloc

    # -- scans ----------------------------------------------------------------------------

    def messageScannerOpen(self, queueName: Any, partitionID: Any, messageScan: Any) -> int:
        meta = self._queue(queueName)
        p = validation.partition(partitionID, meta.partitions)
        return self._open(meta, [p], messageScan)

    def queueScannerOpen(self, queueName: Any, messageScan: Any) -> int:
        meta = self._queue(queueName)
        return self._open(meta, range(meta.partitions), messageScan)

    def combinedScannerOpen(self, queueName: Any, partitionIDs: Any, messageScan: Any) -> int:
        meta = self._queue(queueName)
        if not partitionIDs:
            raise InvalidArgument("partitionIDs", "must list at least one partition")
        partitions = sorted(
            {
                validation.partition(p, meta.partitions, f"partitionIDs[{i}]")
                for i, p in enumerate(partitionIDs)
            }
        )
        return self._open(meta, partitions, messageScan)

    def _open(self, meta: QueueMeta, partitions: Sequence[int], raw: Any) -> int:
        spec = self._scan_spec(raw)
        return self.scanners.add(Scanner(self.store, meta, partitions, spec))

    def _scan_spec(self, raw: Any) -> ScanSpec:
        if raw is None:
            return ScanSpec(None, None, None, False, self.limits.default_caching)
        start = validation.message_id(raw.startMessageID, "messageScan.startMessageID")
        stop = validation.message_id(raw.stopMessageID, "messageScan.stopMessageID")
        reverse = bool(raw.reversed)
        backwards = (
            start is not None and stop is not None and (stop > start if reverse else stop < start)
        )
        if backwards:
            order = "older" if reverse else "newer"
            raise InvalidArgument(
                "messageScan.stopMessageID",
                f"must be {order} than startMessageID"
                + ("" if reverse else " (set reversed to scan newest first)"),
            )
        topics = None
        if raw.topics:
            for i, t in enumerate(raw.topics):
                if not t or len(t) > 255:
                    raise InvalidArgument(f"messageScan.topics[{i}]", "must be 1..255 bytes")
            topics = frozenset(t.encode() if isinstance(t, str) else t for t in raw.topics)
        caching = raw.caching
        if caching is None or caching < 1:
            caching = self.limits.default_caching
        caching = min(caching, self.limits.max_list_messages)
        return ScanSpec(start, stop, topics, reverse, caching)

    def messageScannerGet(self, id: Any) -> Any:
        scanner = self.scanners.get(id)
        got = self._read(scanner, 1)
        return self._with_extras(scanner.queue, got)[0] if got.rows else self._t.TMessage()

    def messageScannerGetList(self, id: Any, nbMessages: Any) -> MessageRows | list[Any]:
        """The next messages, as rows the Thrift boundary encodes as ``list<TMessage>`` (as
        TMessage objects when the queue has messages with keys or properties)."""
        n = validation.batch_size(nbMessages, self.limits.max_list_messages)
        scanner = self.scanners.get(id)
        extras = self._has_extras(scanner.queue)
        # encoded by the store reader, when the reply is binary and no message has extras
        got = self._read(scanner, n, encoded=self.encoded_replies and not extras)
        if not got.rows:
            self.scanners.finish(id, "it reached its end")
            return got
        # the first message with extras may have come during the read
        if extras or self._has_extras(scanner.queue):
            return self._with_extras(scanner.queue, got)
        return got

    def _has_extras(self, queue: str) -> bool:
        """Whether any message of ``queue`` has a key or properties."""
        meta = self.store.get_queue(queue)
        return self.extras is not None and meta is not None and self.extras.has_any(meta)

    def _with_extras(self, queue: str, got: MessageRows) -> list[Any]:
        messages = got.to_messages(self._t)
        meta = self.store.get_queue(queue)
        if self.extras is not None and meta is not None:
            self.extras.attach(meta, messages)
        return messages

    def findMessagesByKey(self, queueName: Any, key: Any, limit: Any) -> list[Any]:
        meta = self._queue(queueName)
        if isinstance(key, str):
            key = key.encode()
        if not isinstance(key, bytes) or not 0 < len(key) <= MAX_KEY_BYTES:
            raise InvalidArgument("key", f"must be 1..{MAX_KEY_BYTES} bytes")
        n = validation.batch_size(limit, self.limits.max_list_messages, "limit")
        if self.extras is None:
            return []
        out = []
        for pid, (ts, seq) in self.extras.lookup(meta, key, n):
            at = MessageId(ts, seq)
            reader = self.store.reader(
                meta, pid, after_for_start(at, False), rowkey.next_id(at),
                reverse=False, topics=None,
            )  # fmt: skip
            try:
                rows = reader.read(1).rows
            finally:
                reader.close()
            if rows:
                out.extend(self._with_extras(meta.name, MessageRows(pid, rows)))
        return out

    def _read(self, scanner: Scanner, n: int, encoded: bool = False) -> MessageRows:
        if scanner.busy:
            raise InvalidArgument("id", "the scanner is in use by another call")
        scanner.busy = True
        try:
            stats = self.stats
            if stats is None:
                return scanner.next_rows(n, self.limits.max_response_bytes, encoded)
            began = time.perf_counter()
            got = scanner.next_rows(n, self.limits.max_response_bytes, encoded)
            stats.scan_latency.observe(time.perf_counter() - began)
            rows = got.rows
            if rows:
                counters = stats.queue(scanner.queue)
                counters.read_messages += len(rows)
                counters.read_bytes += (
                    rows.bodies
                    if isinstance(rows, EncodedRows)
                    else sum(map(len, map(_BODY, rows)))
                )
            return got
        finally:
            scanner.busy = False
            self.scanners.done_reading(scanner)

    def messageScannerClose(self, id: Any) -> None:
        self.scanners.close(id)

    # -- locations and admin --------------------------------------------------------------

    def getQueueLocations(self, queueName: Any) -> list[bytes]:
        meta = self._queue(queueName, enabled=False)
        if self.cluster is not None:
            return [a.encode() for a in self.cluster.locations(meta.name, meta.partitions)]
        address = self.advertise.encode()
        return [address] * meta.partitions

    def listGateways(self) -> list[Any]:
        info = self._t.TGatewayInfo
        cluster = self.cluster
        if cluster is None:
            owned = {m.name.encode(): list(range(m.partitions)) for m in self.store.list_queues()}
            total = sum(len(p) for p in owned.values())
            return [info(self.advertise.encode(), "", True, total, None, owned)]
        assignment = cluster.assignment()
        out = []
        for member in cluster.members():
            parts = {
                q.encode(): [p for p, gid in enumerate(owners) if gid == member.gid]
                for q, owners in assignment.items()
            }
            parts = {q: ps for q, ps in parts.items() if ps}
            out.append(
                info(
                    member.advertise.encode(),
                    member.gid,
                    member.gid == cluster.members()[0].gid,
                    sum(len(ps) for ps in parts.values()),
                    member.put_rate,
                    parts,
                )
            )
        return out

    def balanceCluster(self, maxMoves: Any) -> int:
        moves = validation.batch_size(maxMoves, 1_000_000, "maxMoves")
        if self.cluster is None:
            return 0
        return self.cluster.balance(moves)

    def createQueue(
        self, queueName: Any, partitionCount: Any, ttlSeconds: Any, config: Any
    ) -> None:
        name = validation.queue_name(queueName)
        partitions = validation.partition_count(partitionCount)
        ttl = validation.ttl_seconds(ttlSeconds)
        cfg = validation.queue_config(config, partitions)
        meta = self.store.create_queue(QueueMeta(name, partitions, ttl, True, cfg))
        log.info("created queue %s (%d partitions, ttl %d s)", name, partitions, ttl)
        self._forget(meta.name)

    def deleteQueue(self, queueName: Any) -> None:
        meta = self._queue(queueName, enabled=False)
        self.store.delete_queue(meta.name)
        self._forget(meta.name)
        log.info("deleted queue %s", meta.name)

    def truncateQueue(self, queueName: Any) -> None:
        # The allocators are kept: ids go on increasing after a truncate.
        meta = self._queue(queueName, enabled=False)
        self.store.truncate_queue(meta.name)
        log.info("truncated queue %s", meta.name)

    def disableQueue(self, queueName: Any) -> None:
        self.store.set_enabled(self._queue(queueName, enabled=False).name, False)

    def enableQueue(self, queueName: Any) -> None:
        self.store.set_enabled(self._queue(queueName, enabled=False).name, True)

    def listQueues(self) -> list[Any]:
        info = self._t.TQueueInfo
        return [
            info(m.name.encode(), m.partitions, m.ttl_seconds, m.enabled, dict(m.config))
            for m in self.store.list_queues()
        ]

    # -- subscriptions (seed 3.5): see gateway.subscriptions.service ----------------------

    def subscribe(self, queueName: Any, subscription: Any, address: Any, leaseSeconds: Any) -> int:
        return self._subs().subscribe(self._queue(queueName), subscription, address, leaseSeconds)

    def renewSubscription(self, queueName: Any, subscriberName: Any, leaseID: Any) -> bool:
        return self._subs().renew(self._queue(queueName, enabled=False), subscriberName, leaseID)

    def unsubscribe(self, queueName: Any, subscriberName: Any, leaseID: Any) -> None:
        self._subs().unsubscribe(self._queue(queueName, enabled=False), subscriberName, leaseID)

    def addSubscriber(self, queueName: Any, subscription: Any) -> None:
        self._subs().add(self._queue(queueName, enabled=False), subscription)

    def deleteSubscriber(self, queueName: Any, subscriberName: Any) -> None:
        self._subs().delete(self._queue(queueName, enabled=False), subscriberName)

    def listSubscribers(self, queueName: Any) -> list[Any]:
        return self._subs().list(self._queue(queueName, enabled=False))

    def resetSubscriber(self, queueName: Any, subscriberName: Any, timestampMs: Any) -> None:
        self._subs().reset(self._queue(queueName, enabled=False), subscriberName, timestampMs)

    def pullMessages(
        self, queueName: Any, subscriberName: Any, memberID: Any, maxMessages: Any, maxWaitMs: Any
    ) -> list[Any]:
        return self._subs().pull(
            self._queue(queueName), subscriberName, memberID, maxMessages, maxWaitMs
        )

    def ackMessages(self, queueName: Any, subscriberName: Any, memberID: Any, upTo: Any) -> None:
        self._subs().ack(self._queue(queueName, enabled=False), subscriberName, memberID, upTo)

    def forwardPull(
        self, queueName: Any, subscriberName: Any, memberID: Any, maxMessages: Any, maxWaitMs: Any
    ) -> list[Any]:
        return self._subs().forwarded_pull(
            self._queue(queueName), subscriberName, memberID, maxMessages, maxWaitMs
        )

    def forwardAck(self, queueName: Any, subscriberName: Any, memberID: Any, upTo: Any) -> None:
        self._subs().forwarded_ack(
            self._queue(queueName, enabled=False), subscriberName, memberID, upTo
        )

    def replayDeadLetters(self, queueName: Any, subscriberName: Any) -> int:
        return self._subs().replay_dead_letters(
            self._queue(queueName, enabled=False), subscriberName
        )

    def _subs(self) -> SubscriptionService:
        if self.subscriptions is None:
            raise StoreError("subscriptions are not running on this gateway")
        return self.subscriptions

    # -- helpers --------------------------------------------------------------------------

    def _queue(self, raw: Any, *, writable: bool = False, enabled: bool = True) -> QueueMeta:
        name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        meta = self.store.get_queue(name) if isinstance(name, str) else None
        if meta is None:
            validation.queue_name(raw)
            raise InvalidArgument("queueName", f"queue '{name}' does not exist")
        if (enabled or writable) and not meta.enabled:
            raise InvalidArgument("queueName", f"queue '{name}' is disabled")
        return meta

    def _forget(self, name: str) -> None:
        for slot in [s for s in self._allocators if s[0] == name]:
            del self._allocators[slot]
        self._sequences.pop(name, None)


def _required_pid(raw: Any) -> Any:
    """Only the methods without a pid pick a partition: an unset one here is a mistake (a
    client that forgot it would otherwise scatter its messages)."""
    if raw is None:
        raise InvalidArgument("partitionID", "must be set (putMessages picks a partition)")
    return raw


def _outcome(fn: Callable[..., None], *args: Any) -> BaseException | None:
    """Runs ``fn`` in a greenlet of its own and returns its error instead of raising it
    (gevent would print the traceback of a greenlet that raised)."""
    try:
        fn(*args)
    except Exception as exc:
        return exc
    return None


def _size(raw: Any) -> str:
    return f"{len(raw)}" if isinstance(raw, (bytes, str)) else type(raw).__name__


def _done() -> None:
    """The wait of a put that was acknowledged before ``_store_begin`` returned."""
