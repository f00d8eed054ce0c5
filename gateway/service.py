"""The HQueueService handler: validate, route, allocate MessageIDs, store, scan.

Methods carry the IDL's names. They raise :mod:`gateway.errors` exceptions; the Thrift
boundary (:mod:`gateway.boundary`) turns those into the IDL's ``IllegalArgument``/``IOError``.

This module is its face: locations, queue administration, and the subscription calls handed to
:mod:`gateway.subscriptions.service`. The rest, put together here as mixins:

- service_puts.py: the put path (partitions, MessageID allocation, cluster forwarding);
- service_scans.py: the scan path (scanners, message keys and properties, find by key);
- service_state.py: the attributes every part shares (``_State.__init__``), ServiceLimits.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from . import validation
from .errors import StoreError
from .service_puts import _Puts
from .service_scans import _Scans
from .service_state import ServiceLimits, _State
from .store.base import QueueMeta

if TYPE_CHECKING:
    from .subscriptions.service import SubscriptionService

# what the service's users import from here
__all__ = ["GatewayService", "ServiceLimits"]

log = logging.getLogger(__name__)


class GatewayService(_Puts, _Scans, _State):
    """The handler of every HQueueService call (its parts: see the module's docstring)."""

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

    def _forget(self, name: str) -> None:
        for slot in [s for s in self._allocators if s[0] == name]:
            del self._allocators[slot]
        self._sequences.pop(name, None)
