"""The gateway's subscription methods: subscribe, renew, unsubscribe, add, delete, list.

They let a subscriber in any language register without a ZooKeeper client: the gateway writes
the registry for it (the same znodes when ZooKeeper is configured) and keeps it live for as
long as it renews its lease. Arguments are checked here and named in every error.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent
from hqueue import subscriptions as layout

from .. import peer, rowkey, validation
from ..errors import InvalidArgument
from ..ids import wall_clock_ms
from ..store.base import PartitionStore, QueueMeta
from .registry import SubscriptionRegistry

log = logging.getLogger(__name__)

MIN_LEASE_SECONDS = 1
MAX_LEASE_SECONDS = 3600
LAG_COUNT_CAP = 100_000  # listSubscribers counts at most this many messages per partition


class SubscriptionService:
    def __init__(self, store: PartitionStore, registry: SubscriptionRegistry, thrift: Any) -> None:
        self.store = store
        self.registry = registry
        self._t = thrift
        self.subscriber_hosts: frozenset[str] = frozenset()  # --subscriber-hosts

    # -- registration ---------------------------------------------------------------------

    def subscribe(
        self, meta: QueueMeta, subscription: Any, address: Any, lease_seconds: Any
    ) -> int:
        name, topics, requested = self._subscription(meta, subscription)
        addr = _text(address, "address")
        try:
            from hqueue.protocol import parse_address

            host, _ = parse_address(addr, argument="address")
        except ValueError as exc:
            raise InvalidArgument("address", str(exc)) from None
        peer.check_subscriber_host(host, self.subscriber_hosts)
        if not isinstance(lease_seconds, int) or not (
            MIN_LEASE_SECONDS <= lease_seconds <= MAX_LEASE_SECONDS
        ):
            raise InvalidArgument(
                "leaseSeconds",
                f"must be {MIN_LEASE_SECONDS}..{MAX_LEASE_SECONDS} seconds, got {lease_seconds!r}",
            )
        self._write_record(meta, name, requested, topics)
        incarnation = self.registry.set_live(meta.name, name, addr, topics)
        lease = self.registry.leases.grant(meta.name, name, incarnation, lease_seconds)
        log.info("subscriber %s/%s registered at %s (lease %d s)", meta.name, name, addr,
                 lease_seconds)  # fmt: skip
        return lease

    def renew(self, meta: QueueMeta, raw_name: Any, lease_id: Any) -> bool:
        name = _name(raw_name, "subscriberName")
        if not isinstance(lease_id, int):
            raise InvalidArgument("leaseID", f"must be an integer, got {lease_id!r}")
        return self.registry.leases.renew(meta.name, name, lease_id)

    def unsubscribe(self, meta: QueueMeta, raw_name: Any, lease_id: Any) -> None:
        name = _name(raw_name, "subscriberName")
        if not isinstance(lease_id, int):
            raise InvalidArgument("leaseID", f"must be an integer, got {lease_id!r}")
        lease = self.registry.leases.release(meta.name, name, lease_id)
        if lease is not None:
            self.registry.clear_live(meta.name, name, lease.incarnation)
            log.info("subscriber %s/%s unsubscribed", meta.name, name)

    # -- administration -------------------------------------------------------------------

    def add(self, meta: QueueMeta, subscription: Any) -> None:
        name, topics, requested = self._subscription(meta, subscription)
        self._write_record(meta, name, requested, topics)

    def delete(self, meta: QueueMeta, raw_name: Any) -> None:
        name = _name(raw_name, "subscriberName")
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
            out.append(
                t.TSubscriberInfo(
                    name=sub.name.encode(),
                    address=None if sub.address is None else sub.address.encode(),
                    topics=sorted(topics or ()),
                    partitions=partitions,
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
        lower = (
            rowkey.partition_start(partition)
            if checkpoint is None
            else rowkey.id_key(partition, rowkey.next_id(rowkey.MessageId(*checkpoint)))
        )
        cutoff = rowkey.encode(partition, max(0, wall_clock_ms() - meta.ttl_seconds * 1000), 0)
        lower = max(lower, cutoff)
        upper = rowkey.partition_end(partition)
        count = 0
        oldest = None
        while count < LAG_COUNT_CAP:
            result = self.store.scan(
                meta, partition, lower, upper, reverse=False, topics=topics,
                limit=min(4096, LAG_COUNT_CAP - count),
            )  # fmt: skip
            if result.rows and oldest is None:
                oldest = result.rows[0][0]
            count += len(result.rows)
            if result.resume_after is None:
                return count, False, oldest
            lower = result.resume_after + b"\x00"
            gevent.sleep(0)
        return count, True, oldest

    # -- helpers --------------------------------------------------------------------------

    def _subscription(
        self, meta: QueueMeta, raw: Any
    ) -> tuple[str, frozenset[bytes] | None, dict[int, layout.Id | None]]:
        if raw is None:
            raise InvalidArgument("subscription", "must be set")
        name = _name(raw.name, "subscription.name")
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
        return name, topics, requested

    def _write_record(
        self,
        meta: QueueMeta,
        name: str,
        requested: dict[int, layout.Id | None],
        topics: frozenset[bytes] | None,
    ) -> None:
        now = wall_clock_ms()

        def change(existing: layout.SubscriberRecord | None) -> layout.SubscriberRecord:
            return layout.resolve(existing, requested, meta.partitions, now, topics)

        self.registry.update_record(meta.name, name, change)


def _text(raw: Any, argument: str) -> str:
    if isinstance(raw, bytes):
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise InvalidArgument(argument, "must be UTF-8") from None
    if isinstance(raw, str):
        return raw
    raise InvalidArgument(argument, "must be set")


def _name(raw: Any, argument: str) -> str:
    name = _text(raw, argument)
    try:
        return layout.check_name(name, argument)
    except ValueError as exc:
        raise InvalidArgument(argument, str(exc)) from None
