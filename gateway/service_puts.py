"""The put path of the gateway service: check the messages, pick partitions, allocate
MessageIDs, write (or, in a cluster, forward to the owners), and wake the push workers."""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import gevent

from . import validation
from .cluster.forward import forward_first_id, forward_messages
from .errors import InvalidArgument, Unwritten
from .fast import total_bytes
from .ids import PartitionIdAllocator, QueueSequence
from .keys import Extras, check_extras
from .rowkey import MAX_SEQUENCE, MessageId, consecutive_ids, nth_id
from .store.base import PutBatch, QueueMeta

if TYPE_CHECKING:
    from .service_state import _State
else:
    _State = object  # the parts are put together by GatewayService (service.py)

# the service's one logger, as before it was split into parts
log = logging.getLogger("gateway.service")


class _Puts(_State):
    """The put calls, and the MessageID allocators of the partitions they write."""

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
