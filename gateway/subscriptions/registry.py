"""The subscription registry: who subscribes to what, who is alive, and how far each got.

One interface, two implementations (:mod:`.zk_registry` on ZooKeeper, :mod:`.embedded_registry`
in the gateway's own store); the service and the push workers never know which one they have.

A subscriber is *live* while it has an address: in ZooKeeper while its ephemeral ``address``
node exists, through the gateway while its lease is renewed. ``incarnation`` changes every time
a subscriber (re)registers, so the workers know when to start again from the stored checkpoint.
Every record write bumps ``version``; checkpoint writes are conditional on it, so a subscriber
that re-registers with new start positions wins over a worker still flushing old progress.
"""

from __future__ import annotations

import abc
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import gevent
from hqueue_contract.registry import Id, SubscriberRecord

log = logging.getLogger(__name__)

# on_change(queue, name): something about that subscriber changed (name None: anything in the
# queue; queue None: anything at all). Called from the registry's own greenlets; never blocks.
ChangeCallback = Callable[[str | None, str | None], None]


class CheckpointConflict(Exception):
    """The record changed since the version the writer read (the subscriber re-registered)."""


@dataclass(frozen=True)
class Member:
    """A live member of a consumer group (a shared subscriber): push (with an address) or
    pull (without). ``incarnation`` changes when it joins again."""

    id: str
    address: str | None
    topics: frozenset[bytes] | None
    incarnation: str


@dataclass(frozen=True)
class Subscriber:
    queue: str
    name: str
    record: SubscriberRecord
    version: int
    address: str | None = None  # None: not live, its workers pause
    topics: frozenset[bytes] | None = None  # None: every topic
    incarnation: str | None = None
    members: tuple[Member, ...] = ()  # a shared subscriber's live members, sorted by id

    @property
    def live(self) -> bool:
        return self.address is not None or bool(self.members)


class SubscriptionRegistry(abc.ABC):
    """Lifecycle: ``start(on_change)`` once, ``stop()`` once. Leases are the gateway's way to
    keep a subscriber live without a ZooKeeper session (see :class:`LeaseTable`)."""

    def __init__(self) -> None:
        self.leases = LeaseTable(self._lease_ended)
        self._on_change: ChangeCallback = lambda queue, name: None

    def start(self, on_change: ChangeCallback) -> None:
        self._on_change = on_change
        self.leases.start()

    def stop(self) -> None:
        self.leases.stop()

    def changed(self, queue: str | None, name: str | None) -> None:
        try:
            self._on_change(queue, name)
        except Exception:
            log.exception("subscription change callback failed")

    # -- reading --------------------------------------------------------------------------

    @abc.abstractmethod
    def queues(self) -> list[str]:
        """Queues that have at least one subscriber."""

    @abc.abstractmethod
    def list(self, queue: str) -> list[Subscriber]: ...

    @abc.abstractmethod
    def get(self, queue: str, name: str) -> Subscriber | None: ...

    # -- writing --------------------------------------------------------------------------

    @abc.abstractmethod
    def update_record(
        self,
        queue: str,
        name: str,
        change: Callable[[SubscriberRecord | None], SubscriberRecord],
    ) -> int:
        """Creates or replaces the record with ``change(current)`` atomically; new version."""

    @abc.abstractmethod
    def delete(self, queue: str, name: str) -> None:
        """Removes the subscriber, its checkpoints and its liveness."""

    @abc.abstractmethod
    def save_checkpoints(
        self,
        queue: str,
        name: str,
        checkpoints: Mapping[int, Id | None],
        expected_version: int,
        epoch: int | None = None,
    ) -> int:
        """Merges checkpoints into the record if it is still at ``expected_version`` (or, given
        ``epoch``, still of that registration epoch: other gateways of a cluster write the
        checkpoints of the partitions they own); returns the new version. Raises
        CheckpointConflict otherwise, or if the subscriber is gone."""

    @abc.abstractmethod
    def set_live(self, queue: str, name: str, address: str, topics: frozenset[bytes] | None) -> str:
        """Marks the subscriber live (replacing a previous registration); its incarnation."""

    @abc.abstractmethod
    def clear_live(self, queue: str, name: str, incarnation: str | None) -> None:
        """Marks it not live, if still at ``incarnation`` (None: whatever it is)."""

    @abc.abstractmethod
    def join(
        self,
        queue: str,
        name: str,
        member: str,
        address: str | None,
        topics: frozenset[bytes] | None,
    ) -> str:
        """Makes ``member`` a live member of the group (replacing its earlier joining);
        its incarnation."""

    @abc.abstractmethod
    def leave(self, queue: str, name: str, member: str, incarnation: str | None) -> None:
        """Ends a membership, if still at ``incarnation`` (None: whatever it is)."""

    # -- leases (subscribers registered through the gateway) ------------------------------

    def _lease_ended(
        self, queue: str, name: str, incarnation: str, member: str | None = None
    ) -> None:
        who = name if member is None else f"{name} (member {member})"
        log.info("lease of subscriber %s/%s ended; its workers pause", queue, who)
        try:
            if member is None:
                self.clear_live(queue, name, incarnation)
            else:
                self.leave(queue, name, member, incarnation)
        except Exception:
            log.exception("marking %s/%s not live failed", queue, who)


@dataclass
class Lease:
    id: int
    incarnation: str
    seconds: float
    deadline: float
    member: str | None = None  # set for a member of a consumer group


class LeaseTable:
    """Leases by (queue, subscriber, member) in memory (member None: a subscriber that is not
    shared): a gateway restart ends them all, as a lost ZooKeeper session ends ephemeral
    nodes; renewals then answer false and subscribers subscribe again. Expired leases are
    reaped twice a second."""

    def __init__(self, on_expired: Callable[..., None]) -> None:
        # on_expired(queue, name, incarnation), plus the member id for a group member's lease
        self._leases: dict[tuple[str, str, str | None], Lease] = {}
        # wall-clock-based ids stay unique across gateway restarts
        self._ids = itertools.count(time.time_ns() // 1000)
        self._on_expired = on_expired
        self._reaper: gevent.Greenlet | None = None

    def start(self) -> None:
        self._reaper = gevent.spawn(self._reap_loop)

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.kill()
        self._leases.clear()

    def grant(
        self, queue: str, name: str, incarnation: str, seconds: float, member: str | None = None
    ) -> int:
        lease = Lease(next(self._ids), incarnation, seconds, time.monotonic() + seconds, member)
        self._leases[(queue, name, member)] = lease
        return lease.id

    def _find(self, queue: str, name: str, lease_id: int) -> tuple[str, str, str | None] | None:
        lease = self._leases.get((queue, name, None))
        if lease is not None and lease.id == lease_id:
            return (queue, name, None)
        for key, lease in self._leases.items():
            if key[0] == queue and key[1] == name and lease.id == lease_id:
                return key
        return None

    def renew(self, queue: str, name: str, lease_id: int) -> bool:
        key = self._find(queue, name, lease_id)
        if key is None:
            return False
        lease = self._leases[key]
        lease.deadline = time.monotonic() + lease.seconds
        return True

    def renew_member(self, queue: str, name: str, member: str) -> bool:
        lease = self._leases.get((queue, name, member))
        if lease is None:
            return False
        lease.deadline = time.monotonic() + lease.seconds
        return True

    def release(self, queue: str, name: str, lease_id: int | None) -> Lease | None:
        """Ends the lease ``lease_id`` (None: every lease of the subscriber; the last one)."""
        if lease_id is None:
            gone = None
            for key in [k for k in self._leases if k[0] == queue and k[1] == name]:
                gone = self._leases.pop(key)
            return gone
        found = self._find(queue, name, lease_id)
        return None if found is None else self._leases.pop(found)

    def drop_all(self) -> None:
        """Forgets every lease (the registry lost what they guarded)."""
        self._leases.clear()

    def _reap_loop(self) -> None:
        while True:
            gevent.sleep(0.5)
            now = time.monotonic()
            for key, lease in list(self._leases.items()):
                if lease.deadline < now and self._leases.get(key) is lease:
                    del self._leases[key]
                    if lease.member is None:
                        self._on_expired(key[0], key[1], lease.incarnation)
                    else:
                        self._on_expired(key[0], key[1], lease.incarnation, lease.member)
