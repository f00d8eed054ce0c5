"""Pulls and acks of consumer groups through any gateway of the cluster.

A pull member's partitions (:func:`gateway.subscriptions.groups.assign`) are read by
``PullWorker`` s on each partition's *owner* (the worker moves with the partition, as push
workers do). The member pulls through one gateway, which keeps its membership lease; that
gateway takes from its own workers and, at the same time, asks the owners of the member's other
partitions with ``forwardPull`` (one hop; the owner neither joins nor renews the member), and
answers as soon as any of them has messages.

A long poll sent to an owner cannot be called back, so an answer that arrives after the pull
returned is kept in the member's *stash* and handed out first by its next pull; at most one
poll per (member, source) is in flight, so a member pulling in a loop never piles polls up. What
sits in a stash was handed out by the owner's worker and not acknowledged: if the member never
comes back to this gateway, its owner delivers it again after the ack timeout, or at once when
the member joins through another gateway (a new incarnation restarts the group's workers from
the acknowledged checkpoints): at-least-once, nothing pulled is lost.

``ackMessages`` acknowledges the partitions with a local worker here and forwards the others to
their owners (``forwardAck``); an ack that cannot reach an owner is dropped with a warning, as
an ack of a partition that moved is: its messages are delivered again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import gevent
import gevent.event

from ..subscriptions import groups
from ..subscriptions.registry import Subscriber

if TYPE_CHECKING:
    from ..subscriptions.service import SubscriptionService
    from .forward import Forwarder

log = logging.getLogger(__name__)

LOCAL = ""  # the source name of this gateway's own workers
POLL_MAX = 10.0  # seconds a poll may wait (forwarded calls time out after 30 s)
GRACE = 0.5  # seconds a pull waits past its maxWait for polls it started to answer
ERROR_PAUSE = 1.0  # seconds before a source that failed is asked again
MEMBERS_TTL = 1.0  # seconds a group's members and partitions are cached for routing
IDLE_STATE = 120.0  # seconds after which an idle member's state (and stash) is dropped
MAX_PULL_BYTES = 16 * 1024 * 1024

Id = tuple[int, int]


class Ownership(Protocol):
    """What pulls need of :class:`gateway.cluster.member.ClusterMember`."""

    gid: str

    def owns(self, queue: str, partition: int) -> bool: ...

    def assigned_owner(self, queue: str, partition: int) -> str | None: ...

    def address_of(self, gid: str | None) -> str | None: ...


@dataclass
class _Member:
    """One pull member's polls in flight and the answers nobody took yet."""

    stash: list[Any] = field(default_factory=list)
    inflight: dict[str, gevent.Greenlet] = field(default_factory=dict)
    ready: gevent.event.Event = field(default_factory=gevent.event.Event)
    touched: float = 0.0

    def take(self, n: int) -> list[Any]:
        out: list[Any] = []
        size = 0
        while self.stash and len(out) < n and (not out or size < MAX_PULL_BYTES):
            m = self.stash.pop(0)
            out.append(m)
            size += len(m.topic or b"") + len(m.value or b"")
        if not self.stash:
            self.ready.clear()
        return out


class ClusterPulls:
    def __init__(
        self,
        cluster: Ownership,
        *,
        subscriber: Callable[[str, str], Subscriber | None],
        partitions: Callable[[str], int],
        local_pull: Callable[[str, str, str, int, float], list[Any]],
        local_ack: Callable[[str, str, str, list[tuple[int, Id]]], list[int]],
        call: Callable[..., Any],
        thrift: Any,
    ) -> None:
        self.cluster = cluster
        self._subscriber = subscriber  # the registry's record and live members
        self._partitions = partitions  # queue -> partition count
        self._local_pull = local_pull  # long poll of this gateway's workers (seconds)
        self._local_ack = local_ack  # acks the local workers; the partitions it found
        self._call = call  # (address, method, *args): gateway.cluster.forward.Forwarder.call
        self._t = thrift
        self._members: dict[tuple[str, str, str], _Member] = {}
        self._groups: dict[tuple[str, str], tuple[float, Subscriber | None]] = {}
        self._swept = time.monotonic()

    # -- where a member's partitions are --------------------------------------------------

    def _group(self, queue: str, name: str, member: str) -> Subscriber | None:
        now = time.monotonic()
        cached = self._groups.get((queue, name))
        if (
            cached is None
            or now - cached[0] > MEMBERS_TTL
            or (cached[1] is not None and all(m.id != member for m in cached[1].members))
        ):  # (a member that just joined is not in an older read)
            cached = self._groups[(queue, name)] = (now, self._subscriber(queue, name))
        return cached[1]

    def member_partitions(self, queue: str, name: str, member: str) -> list[int]:
        sub = self._group(queue, name, member)
        if sub is None or not sub.record.shared:
            return []
        n = self._partitions(queue)
        live = [p for p in sub.record.partitions if p < n]
        return groups.partitions_of(live, sub.members, member)

    def owner_address(self, queue: str, partition: int) -> str | None:
        """The address of the other gateway that owns the partition; None when it is owned
        here (or on its way here), or has no live owner."""
        if self.cluster.owns(queue, partition):
            return None
        gid = self.cluster.assigned_owner(queue, partition)
        if gid is None or gid == self.cluster.gid:
            return None
        return self.cluster.address_of(gid)

    def remote_owners(self, queue: str, name: str, member: str) -> list[str]:
        return [s for s in self.sources(queue, name, member) if s != LOCAL]

    def sources(self, queue: str, name: str, member: str) -> list[str]:
        """Where the member's messages are: LOCAL (this gateway's workers) and the addresses
        of the other owners. LOCAL also while the member's partitions are not known yet (the
        local poll makes this gateway read the group again) or have no live owner."""
        found = {self.owner_address(queue, p) for p in self.member_partitions(queue, name, member)}
        out = sorted(a for a in found if a)
        return out if found and None not in found else [LOCAL, *out]

    # -- pull -----------------------------------------------------------------------------

    def pull(
        self, queue: str, name: str, member: str, max_messages: int, max_wait: float
    ) -> list[Any]:
        """The member's long poll over every gateway owning one of its partitions."""
        self._sweep()
        key = (queue, name, member)
        state = self._members.get(key)
        if state is None:
            state = self._members[key] = _Member()
        state.touched = time.monotonic()
        deadline = state.touched + max_wait
        started = False
        while True:
            if state.stash:
                return state.take(max_messages)
            remaining = deadline - time.monotonic()
            if remaining <= 0 and started:
                break
            for source in self.sources(queue, name, member):
                if source not in state.inflight:
                    wait = min(max(remaining, 0.0), POLL_MAX)
                    state.inflight[source] = gevent.spawn(
                        self._poll, key, state, source, max_messages, wait
                    )
            started = True
            if remaining <= 0:
                break
            state.ready.wait(min(remaining, 0.25))
        # polls this call started may be answering right now: a little longer for them
        if not state.stash and state.inflight:
            state.ready.wait(GRACE)
        return state.take(max_messages)

    def _poll(
        self, key: tuple[str, str, str], state: _Member, source: str, n: int, wait: float
    ) -> None:
        queue, name, member = key
        got: list[Any] = []
        try:
            if source == LOCAL:
                got = self._local_pull(queue, name, member, n, wait)
            else:
                got = self._call(
                    source, "forwardPull", queue.encode(), name.encode(), member.encode(), n,
                    int(wait * 1000),
                )  # fmt: skip
        except gevent.GreenletExit:
            raise
        except Exception as exc:
            log.warning("pull of %s/%s member %s from %s failed: %s", queue, name, member,
                        source or "this gateway", exc)  # fmt: skip
            gevent.sleep(ERROR_PAUSE)  # asked again after a pause, not in a tight loop
        finally:
            if state.inflight.get(source) is gevent.getcurrent():
                del state.inflight[source]
        if got:
            state.stash.extend(got)
            state.touched = time.monotonic()
            state.ready.set()

    def _sweep(self) -> None:
        now = time.monotonic()
        if now - self._swept < IDLE_STATE / 4:
            return
        self._swept = now
        for key, state in list(self._members.items()):
            if not state.inflight and now - state.touched > IDLE_STATE:
                # its owners deliver what it held again (ack timeout)
                del self._members[key]
        for gkey, (when, _) in list(self._groups.items()):
            if now - when > IDLE_STATE:
                del self._groups[gkey]

    def stashed(self, queue: str, name: str, member: str) -> int:
        state = self._members.get((queue, name, member))
        return 0 if state is None else len(state.stash)

    # -- ack ------------------------------------------------------------------------------

    def ack(self, queue: str, name: str, member: str, acks: Sequence[tuple[int, Id]]) -> None:
        """Acks the partitions read here; forwards the others to their owners."""
        found = set(self._local_ack(queue, name, member, list(acks)))
        by_owner: dict[str, list[tuple[int, Id]]] = {}
        for p, upto in acks:
            if p in found:
                continue
            owner = self.owner_address(queue, p)
            if owner is not None:
                by_owner.setdefault(owner, []).append((p, upto))
        if not by_owner:
            return
        calls = [
            gevent.spawn(self._forward_ack, owner, queue, name, member, part)
            for owner, part in by_owner.items()
        ]
        gevent.joinall(calls)

    def _forward_ack(
        self, owner: str, queue: str, name: str, member: str, acks: Iterable[tuple[int, Id]]
    ) -> None:
        t = self._t
        up_to = [
            t.TSubscribedPartition(partitionID=p, startMessageID=t.TMessageID(*mid))
            for p, mid in acks
        ]
        try:
            self._call(owner, "forwardAck", queue.encode(), name.encode(), member.encode(), up_to)
        except Exception as exc:
            # as for a partition that moved: its unacknowledged messages come again
            log.warning("ack of %s/%s member %s at %s failed (its messages will be delivered "
                        "again): %s", queue, name, member, owner, exc)  # fmt: skip


def cluster_pulls(
    cluster: Ownership, subscriptions: SubscriptionService, forwarder: Forwarder, thrift: Any
) -> ClusterPulls:
    """Wires :class:`ClusterPulls` to a gateway's subscription service and forwarder."""
    store = subscriptions.store

    def partitions(queue: str) -> int:
        meta = store.get_queue(queue)
        return 0 if meta is None else meta.partitions

    return ClusterPulls(
        cluster,
        subscriber=subscriptions.registry.get,
        partitions=partitions,
        local_pull=subscriptions.local_pull,
        local_ack=subscriptions.local_ack,
        call=forwarder.call,
        thrift=thrift,
    )
