"""The gateway's subscription methods: subscribe, renew, unsubscribe, add, delete, list.

They let a subscriber in any language register without a ZooKeeper client: the gateway writes
the registry for it (the same znodes when ZooKeeper is configured) and keeps it live for as
long as it renews its lease. Arguments are checked here and named in every error.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import gevent
from hqueue_contract import registry as layout

from .. import peer, rowkey, validation
from ..errors import InvalidArgument, StoreError
from ..ids import wall_clock_ms
from ..store.base import PartitionStore, QueueMeta, Row
from . import arguments as args
from . import groups
from . import pull as pull_module
from .registry import CheckpointConflict, SubscriptionRegistry

if TYPE_CHECKING:
    from ..cluster.pulls import ClusterPulls
    from ..keys import MessageExtras
    from .workers import WorkerManager

log = logging.getLogger(__name__)

LAG_COUNT_CAP = 100_000  # listSubscribers counts at most this many messages per partition


class SubscriptionService:
    def __init__(
        self,
        store: PartitionStore,
        registry: SubscriptionRegistry,
        thrift: Any,
        manager: WorkerManager | None = None,
        extras: MessageExtras | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self._t = thrift
        self.manager = manager  # runs the workers; pulls take from them
        self.extras = extras
        self.subscriber_hosts: frozenset[str] = frozenset()  # --subscriber-hosts
        # Set in a gateway cluster: pulls and acks over every owner (gateway.cluster.pulls).
        self.cluster: ClusterPulls | None = None

    # -- registration ---------------------------------------------------------------------

    def subscribe(
        self, meta: QueueMeta, subscription: Any, address: Any, lease_seconds: Any
    ) -> int:
        name, topics, requested, opts = self._subscription(meta, subscription)
        addr = args.text(address, "address")
        try:
            from hqueue_contract.protocol import parse_address

            host, _ = parse_address(addr, argument="address")
        except ValueError as exc:
            raise InvalidArgument("address", str(exc)) from None
        peer.check_subscriber_host(host, self.subscriber_hosts)
        args.lease_seconds(lease_seconds)
        existing = self.registry.get(meta.name, name)
        if opts.shared:
            if existing is not None and groups.kind(existing.members) == "pull":
                raise InvalidArgument(
                    "subscription.shared",
                    f"group '{name}' has pull members; push and pull members cannot be mixed",
                )
        elif existing is not None and existing.record.shared and existing.members:
            raise InvalidArgument(
                "subscription.shared",
                f"'{name}' is a consumer group with live members: subscribe with shared",
            )
        self._write_record(meta, name, requested, topics, opts)
        if opts.shared:  # a member of a consumer group; its address is its member id
            incarnation = self.registry.join(meta.name, name, addr, addr, topics)
            lease = self.registry.leases.grant(
                meta.name, name, incarnation, lease_seconds, member=addr
            )
        else:
            incarnation = self.registry.set_live(meta.name, name, addr, topics)
            lease = self.registry.leases.grant(meta.name, name, incarnation, lease_seconds)
        log.info("subscriber %s/%s registered at %s (lease %d s%s)", meta.name, name, addr,
                 lease_seconds, ", shared" if opts.shared else "")  # fmt: skip
        return lease

    def renew(self, meta: QueueMeta, raw_name: Any, lease_id: Any) -> bool:
        name = args.name(raw_name, "subscriberName")
        if not isinstance(lease_id, int):
            raise InvalidArgument("leaseID", f"must be an integer, got {lease_id!r}")
        return self.registry.leases.renew(meta.name, name, lease_id)

    def unsubscribe(self, meta: QueueMeta, raw_name: Any, lease_id: Any) -> None:
        name = args.name(raw_name, "subscriberName")
        if not isinstance(lease_id, int):
            raise InvalidArgument("leaseID", f"must be an integer, got {lease_id!r}")
        lease = self.registry.leases.release(meta.name, name, lease_id)
        if lease is not None:
            if lease.member is not None:
                self.registry.leave(meta.name, name, lease.member, lease.incarnation)
            else:
                self.registry.clear_live(meta.name, name, lease.incarnation)
            log.info("subscriber %s/%s unsubscribed", meta.name, name)

    # -- administration -------------------------------------------------------------------

    def add(self, meta: QueueMeta, subscription: Any) -> None:
        name, topics, requested, opts = self._subscription(meta, subscription)
        self._write_record(meta, name, requested, topics, opts)

    def reset(self, meta: QueueMeta, raw_name: Any, timestamp_ms: Any) -> None:
        """Every partition's checkpoint to just before the first message at or after
        ``timestamp_ms``; a time after a partition's newest message means "from its end"."""
        name = args.name(raw_name, "subscriberName")
        if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool) or timestamp_ms < 0:
            raise InvalidArgument(
                "timestampMs", f"must be >= 0 (ms since the epoch), got {timestamp_ms!r}"
            )
        sub = self.registry.get(meta.name, name)
        if sub is None:
            raise InvalidArgument(
                "subscriberName", f"queue '{meta.name}' has no subscriber '{name}'"
            )
        target = layout.before((timestamp_ms, 0))
        now = wall_clock_ms()
        moved: dict[int, layout.Id | None] = {}
        for p in range(meta.partitions):
            last = self.store.last_id(meta, p)
            ceiling = (
                (last.timestamp, last.sequence) if last is not None else layout.before((now, 0))
            )
            moved[p] = target if target is None or ceiling is None else min(target, ceiling)

        def change(existing: layout.SubscriberRecord | None) -> layout.SubscriberRecord:
            if existing is None:
                raise InvalidArgument("subscriberName", f"subscriber '{name}' was deleted")
            keep = {p: c for p, c in moved.items() if p in existing.partitions}
            return replace(existing.with_checkpoints(keep), epoch=existing.epoch + 1)

        self.registry.update_record(meta.name, name, change)
        log.info("subscriber %s/%s reset to %d", meta.name, name, timestamp_ms)

    def replay_dead_letters(self, meta: QueueMeta, raw_name: Any) -> int:
        """Marks the dead letters there now for delivery again to this subscriber only: its
        workers push them from the dead-letter queue (see :mod:`.retry`). Their count."""
        name = args.name(raw_name, "subscriberName")
        if self.registry.get(meta.name, name) is None:
            raise InvalidArgument(
                "subscriberName", f"queue '{meta.name}' has no subscriber '{name}'"
            )
        dlq = self.store.get_queue(layout.dlq_name(meta.name, name))
        last = None if dlq is None else self.store.last_id(dlq, 0)
        if dlq is None or last is None:
            return 0
        count = self._count(dlq, 0, None)
        upto = (last.timestamp, last.sequence)
        # The new epoch restarts the subscriber's workers from the record's checkpoints: write
        # their progress there first, or what they delivered since the last checkpoint write
        # would go out again.
        run = None if self.manager is None else self.manager.runs().get((meta.name, name))
        if run is not None and not run.updater.conflicted:
            # a conflict: registered again meanwhile, its workers restart from the record anyway
            with contextlib.suppress(CheckpointConflict):
                run.updater.flush()

        def change(existing: layout.SubscriberRecord | None) -> layout.SubscriberRecord:
            if existing is None:
                raise InvalidArgument("subscriberName", f"subscriber '{name}' was deleted")
            return replace(existing, replay=(None, upto), epoch=existing.epoch + 1)

        self.registry.update_record(meta.name, name, change)
        return count

    def pull(
        self, meta: QueueMeta, raw_name: Any, raw_member: Any, max_messages: Any, max_wait_ms: Any
    ) -> list[Any]:
        """Long poll of a pull member (see :mod:`.pull`)."""
        name = args.name(raw_name, "subscriberName")
        member = args.name(raw_member, "memberID")
        args.int_in(max_messages, "maxMessages", 1, args.MAX_PULL_MESSAGES)
        args.int_in(max_wait_ms, "maxWaitMs", 0, args.MAX_WAIT_MS)
        manager = self._manager()
        self._join_pull(meta, name, member, manager)
        if self.cluster is not None:  # the member's partitions may be owned elsewhere
            return self.cluster.pull(meta.name, name, member, max_messages, max_wait_ms / 1000)
        return self.local_pull(meta.name, name, member, max_messages, max_wait_ms / 1000)

    def local_pull(
        self, queue: str, name: str, member: str, max_messages: int, max_wait: float
    ) -> list[Any]:
        """The long poll of this gateway's pull workers of the member (wait in seconds)."""
        return pull_module.pull(
            self._manager(), queue, name, member, max_messages, max_wait,
            lambda rows: self._messages(queue, rows),
        )  # fmt: skip

    def forwarded_pull(
        self, meta: QueueMeta, raw_name: Any, raw_member: Any, max_messages: Any, max_wait_ms: Any
    ) -> list[Any]:
        """``forwardPull``: another gateway of the cluster pulls for a member from the
        partitions owned here; the member's lease is that gateway's business."""
        name = args.name(raw_name, "subscriberName")
        member = args.name(raw_member, "memberID")
        args.int_in(max_messages, "maxMessages", 1, args.MAX_PULL_MESSAGES)
        args.int_in(max_wait_ms, "maxWaitMs", 0, args.MAX_WAIT_MS)
        return self.local_pull(meta.name, name, member, max_messages, max_wait_ms / 1000)

    def _join_pull(self, meta: QueueMeta, name: str, member: str, manager: WorkerManager) -> None:
        if self.registry.leases.renew_member(meta.name, name, member):
            return  # a member already: the common case costs no registry read
        sub = self.registry.get(meta.name, name)
        if sub is None:
            opts = args.SubscriptionOptions(layout.RetryPolicy(), None, True)
            self._write_record(meta, name, {}, None, opts)  # every partition, from now on
        elif not sub.record.shared:
            if sub.address is not None:
                raise InvalidArgument(
                    "subscriberName",
                    f"'{name}' is a live push subscriber; a pull consumer needs its own name",
                )

            def shared(existing: layout.SubscriberRecord | None) -> layout.SubscriberRecord:
                if existing is None:
                    raise InvalidArgument("subscriberName", f"subscriber '{name}' was deleted")
                return replace(existing, shared=True)

            self.registry.update_record(meta.name, name, shared)
        elif groups.kind(sub.members) == "push":
            raise InvalidArgument(
                "memberID",
                f"group '{name}' has push members; push and pull members cannot be mixed",
            )
        topics = None if sub is None else sub.record.topics
        incarnation = self.registry.join(meta.name, name, member, None, topics)
        self.registry.leases.grant(
            meta.name, name, incarnation, manager.options.pull_lease, member=member
        )
        log.info("pull member %s joined %s/%s", member, meta.name, name)

    def ack(self, meta: QueueMeta, raw_name: Any, raw_member: Any, up_to: Any) -> None:
        """Acknowledges, per partition, everything up to and including the given id."""
        name = args.name(raw_name, "subscriberName")
        member = args.name(raw_member, "memberID")
        acks = self._acks(meta, up_to)
        self.registry.leases.renew_member(meta.name, name, member)
        if self.cluster is not None:  # partitions owned elsewhere: acked at their owners
            self.cluster.ack(meta.name, name, member, acks)
        else:
            self.local_ack(meta.name, name, member, acks)

    def forwarded_ack(self, meta: QueueMeta, raw_name: Any, raw_member: Any, up_to: Any) -> None:
        """``forwardAck``: acks of the partitions owned here, through another gateway."""
        name = args.name(raw_name, "subscriberName")
        member = args.name(raw_member, "memberID")
        self.local_ack(meta.name, name, member, self._acks(meta, up_to))

    def local_ack(
        self, queue: str, name: str, member: str, acks: list[tuple[int, layout.Id]]
    ) -> list[int]:
        """Acks this gateway's pull workers of the member; the partitions it has them for."""
        workers = {w.partition: w for w in self._manager().pull_workers(queue, name, member) or ()}
        found = []
        for p, mid_ in acks:
            worker = workers.get(p)
            if worker is not None:  # else the partition moved: the new member gets it again
                worker.ack(mid_)
                found.append(p)
        return found

    def _acks(self, meta: QueueMeta, up_to: Any) -> list[tuple[int, layout.Id]]:
        if up_to is None:
            raise InvalidArgument("upTo", "must be set (it may be empty)")
        acks = []
        for i, part in enumerate(up_to):
            if part is None:
                raise InvalidArgument(f"upTo[{i}]", "must be set")
            p = validation.partition(part.partitionID, meta.partitions, f"upTo[{i}].partitionID")
            mid = validation.message_id(part.startMessageID, f"upTo[{i}].startMessageID")
            if mid is None:
                raise InvalidArgument(f"upTo[{i}].startMessageID", "must be set")
            acks.append((p, (mid.timestamp, mid.sequence)))
        return acks

    def _messages(self, queue: str, rows: list[tuple[int, Row]]) -> list[Any]:
        t = self._t
        out = [t.TMessage(t.TMessageID(r[0], r[1]), p, r[2], r[3]) for p, r in rows]
        meta = self.store.get_queue(queue)
        if self.extras is not None and meta is not None:
            self.extras.attach(meta, out)
        return out

    def _manager(self) -> WorkerManager:
        if self.manager is None:
            raise StoreError("subscription workers are not running on this gateway")
        return self.manager

    def _count(self, meta: QueueMeta, partition: int, checkpoint: layout.Id | None) -> int:
        count, _, _ = self._lag(meta, partition, checkpoint, None)
        return count

    def delete(self, meta: QueueMeta, raw_name: Any) -> None:
        name = args.name(raw_name, "subscriberName")
        if self.registry.get(meta.name, name) is None:
            raise InvalidArgument(
                "subscriberName", f"queue '{meta.name}' has no subscriber '{name}'"
            )
        self.registry.delete(meta.name, name)

    def list(self, meta: QueueMeta) -> list[Any]:
        t = self._t
        out = []
        now = wall_clock_ms()
        for sub in self.registry.list(meta.name):
            topics = sub.topics if sub.live else sub.record.topics
            partitions = []
            for p in sub.record.partitions:
                if p >= meta.partitions:
                    continue
                checkpoint = sub.record.checkpoints.get(p)
                count, capped, oldest = self._lag(meta, p, checkpoint, topics)
                newest = self.store.last_id(meta, p)
                partitions.append(
                    t.TPartitionProgress(
                        partitionID=p,
                        checkpoint=None if checkpoint is None else t.TMessageID(*checkpoint),
                        newest=None if newest is None else t.TMessageID(*newest),
                        lagMessages=count,
                        lagMessagesCapped=capped,
                        lagSeconds=0.0 if oldest is None else max(0.0, (now - oldest) / 1000),
                    )
                )
            dlq = self.store.get_queue(layout.dlq_name(meta.name, sub.name))
            retry = sub.record.retry
            members = []
            live = [p for p in sub.record.partitions if p < meta.partitions]
            if sub.record.shared:
                assignment = groups.assign(live, sub.members)
                for m in sub.members:
                    mine = sorted(p for p, a in assignment.items() if a.id == m.id)
                    address = None if m.address is None else m.address.encode()
                    members.append(t.TGroupMember(m.id.encode(), address, mine))
            elif sub.address is not None:
                members.append(t.TGroupMember(sub.address.encode(), sub.address.encode(), live))
            out.append(
                t.TSubscriberInfo(
                    name=sub.name.encode(),
                    address=None if sub.address is None else sub.address.encode(),
                    topics=sorted(topics or ()),
                    partitions=partitions,
                    members=members,
                    deadLetters=0 if dlq is None else self._count(dlq, 0, None),
                    shared=sub.record.shared,
                    retryPolicy=t.TRetryPolicy(*retry.to_list()),
                )
            )
        return out

    def _lag(
        self,
        meta: QueueMeta,
        partition: int,
        checkpoint: layout.Id | None,
        topics: frozenset[bytes] | None,
    ) -> tuple[int, bool, int | None]:
        """(messages after the checkpoint, whether counting stopped at the cap, timestamp ms of
        the oldest of them)."""
        after = None if checkpoint is None else rowkey.MessageId(*checkpoint)
        reader = self.store.reader(meta, partition, after, None, reverse=False, topics=topics)
        count = 0
        oldest = None
        try:
            while count < LAG_COUNT_CAP:
                result = reader.read(min(4096, LAG_COUNT_CAP - count))
                if result.rows and oldest is None:
                    oldest = result.rows[0][0]
                count += len(result.rows)
                if result.done:
                    return count, False, oldest
                gevent.sleep(0)
        finally:
            reader.close()
        return count, True, oldest

    # -- helpers --------------------------------------------------------------------------

    def _subscription(
        self, meta: QueueMeta, raw: Any
    ) -> tuple[str, frozenset[bytes] | None, dict[int, layout.Id | None], args.SubscriptionOptions]:
        if raw is None:
            raise InvalidArgument("subscription", "must be set")
        name = args.name(raw.name, "subscription.name")
        topics: frozenset[bytes] | None = None
        if raw.topics:
            checked = set()
            for i, topic in enumerate(raw.topics):
                if isinstance(topic, str):
                    topic = topic.encode()
                if not isinstance(topic, bytes) or not 0 < len(topic) <= 255:
                    raise InvalidArgument(f"subscription.topics[{i}]", "must be 1..255 bytes")
                checked.add(topic)
            topics = frozenset(checked)
        requested: dict[int, layout.Id | None] = {}
        for i, part in enumerate(raw.partitions or ()):
            where = f"subscription.partitions[{i}]"
            if part is None:
                raise InvalidArgument(where, "must be set")
            p = validation.partition(part.partitionID, meta.partitions, f"{where}.partitionID")
            start = validation.message_id(part.startMessageID, f"{where}.startMessageID")
            requested[p] = None if start is None else (start.timestamp, start.sequence)
        return name, topics, requested, args.subscription_options(raw)

    def _write_record(
        self,
        meta: QueueMeta,
        name: str,
        requested: dict[int, layout.Id | None],
        topics: frozenset[bytes] | None,
        opts: args.SubscriptionOptions,
    ) -> None:
        now = wall_clock_ms()

        def change(existing: layout.SubscriberRecord | None) -> layout.SubscriberRecord:
            return layout.resolve(
                existing,
                requested,
                meta.partitions,
                now,
                topics,
                retry=opts.retry,
                max_batch=opts.max_batch,
                shared=opts.shared,
            )

        self.registry.update_record(meta.name, name, change)
