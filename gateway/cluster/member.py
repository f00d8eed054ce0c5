"""A gateway's membership in the cluster: its session, lease, claims, and the leader's loop.

ZooKeeper layout (under the ``--zookeeper`` chroot)::

    /hqueue-cluster/members/<gid>-<seq>      ephemeral: {"advertise", "started_ms", "rates"}
    /hqueue-cluster/ceilings/<gid>           persistent: the MessageID ceiling of gateway <gid>
    /hqueue-cluster/assignment/<queue>       persistent: {"owners": [gid per partition]}
    /hqueue-cluster/claims/<queue>/<p>       ephemeral: gid of the gateway that owns it now

The leader (the member with the lowest sequence number, as HBase's active master is the one
that got its znode first) assigns every partition to a live member and writes
``assignment/<queue>``; the assignment is *intent*. Ownership is the *claim*: a gateway writes
a partition only while it holds ``claims/<queue>/<p>``, an ephemeral znode of its session, and
its :class:`~gateway.cluster.lease.WriteLease` is valid. A partition moves by the old owner
releasing its claim (after its in-flight puts finished and its push workers stopped), or by
its session ending; only then can the new owner create the claim. This is HBase's region
assignment (master decides, the region server opens the region, regions of a dead server are
reassigned after its ZooKeeper session expired) with Pulsar's stateless-broker ownership (an
ephemeral znode per bundle); ``docs/ARCHITECTURE.md`` says why a paused old owner cannot write.

This module is its face: lifecycle, the lease's heartbeat, what the service asks, and the
watches of members and assignments. The rest, put together here as mixins:

- claims.py: claiming assigned partitions, releasing the others;
- leader.py: the leader's loop, and the put rates partitions are balanced by;
- state.py: the ZooKeeper paths (importable from here too) and the shared attributes
  (``_State.__init__``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.event
from hqueue_contract import zk as zk_connect
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ..errors import NotOwner, StoreError
from ..ids import wall_clock_ms
from .claims import _Claims
from .leader import _Leader
from .state import ACTIVE as ACTIVE
from .state import ASSIGNMENT as ASSIGNMENT
from .state import CEILINGS as CEILINGS
from .state import CLAIMS as CLAIMS
from .state import MEMBERS as MEMBERS
from .state import RELEASING as RELEASING
from .state import ROOT as ROOT
from .state import _State

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterOptions:
    zookeeper: str  # HOST:PORT[,...][/chroot]
    advertise: str  # host:port other gateways and clients reach this one at
    session_timeout: float = 10.0  # seconds
    move_wait: float = 5.0  # seconds a put waits for a moving partition's new owner
    rates_interval: float = 5.0  # seconds between publications of put rates

    @property
    def heartbeat(self) -> float:
        return self.session_timeout / 10


@dataclass(frozen=True)
class Member:
    gid: str
    seq: int
    advertise: str
    rates: Mapping[str, float]  # "queue/partition" -> messages/s

    @property
    def put_rate(self) -> float:
        return sum(self.rates.values())


class Hooks:
    """What the cluster tells the rest of the gateway (set by the app)."""

    def gained(self, queue: str, partition: int, floor_ms: int) -> None:
        """This gateway now owns the partition; ids must start at or above ``floor_ms``."""

    def lost(self, queue: str, partition: int) -> None:
        """This gateway no longer owns the partition: stop its push workers (blocking)."""

    def queues(self) -> Mapping[str, int]:
        """Every queue and its partition count (the leader assigns them)."""
        return {}


class ClusterMember(_Claims, _Leader, _State):
    """This gateway's membership in the cluster (its parts: see the module's docstring)."""

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        try:
            self.zk = zk_connect.connect(
                self.options.zookeeper, timeout=self.options.session_timeout
            )
        except Exception as exc:
            raise StoreError(
                f"cannot connect to ZooKeeper at {self.options.zookeeper}: {exc}"
            ) from exc
        self._running = True
        for path in (MEMBERS, CEILINGS, ASSIGNMENT, CLAIMS):
            self.zk.ensure_path(path)
        self.zk.add_listener(self._on_state)
        self._join()
        ChildrenWatch(self.zk, MEMBERS, self._members_changed)
        ChildrenWatch(self.zk, ASSIGNMENT, self._queues_changed)
        self._greenlets = [
            gevent.spawn(self._heartbeat_loop),
            gevent.spawn(self._reconcile_loop),
            gevent.spawn(self._leader_loop),
            gevent.spawn(self._rates_loop),
        ]
        log.info(
            "joined the gateway cluster on %s as %s (%s), session timeout %g s",
            self.options.zookeeper, self.gid, self.options.advertise,
            self.options.session_timeout,
        )  # fmt: skip

    def stop(self) -> None:
        """Hands every owned partition over (graceful), then leaves the cluster."""
        if not self._running:
            return
        self._running = False
        gevent.killall(self._greenlets[2:])  # no more leading or rate publishing
        # Leave first, so the leader reassigns our partitions to the others; then release each
        # claim only after its in-flight puts finished, and the new owner takes it.
        with contextlib.suppress(KazooException):
            self.zk.delete(self._member_path)
        owned = list(self._owned)
        jobs = [gevent.spawn(self._release, q, p) for q, p in owned]
        gevent.joinall(jobs, timeout=self.options.move_wait + 5)
        gevent.killall(self._greenlets[:2])
        self.lease.revoke()
        with contextlib.suppress(Exception):
            self.zk.stop()
            self.zk.close()
        log.info("left the gateway cluster (%d partitions handed over)", len(owned))

    def _join(self) -> None:
        """Registers this process (a new gid each time: a new session is a new member)."""
        self.gid = uuid.uuid4().hex[:12]
        self._highest_id_ms = max(self._highest_id_ms, wall_clock_ms())
        self._heartbeat(timeout=self.options.session_timeout)
        data = json.dumps(
            {"advertise": self.options.advertise, "started_ms": self._started_ms, "rates": {}}
        ).encode()
        self._member_path = self.zk.create(
            f"{MEMBERS}/{self.gid}-", data, ephemeral=True, sequence=True
        )

    def _on_state(self, state: str) -> None:
        # kazoo's greenlet: never block here
        if state == KazooState.LOST and not self._running:
            return  # our own stop closed the session; the partitions were handed over
        if state == KazooState.LOST:
            log.warning("cluster: ZooKeeper session lost; every claim of %s is gone", self.gid)
            self.lease.revoke()
            self._rejoin_needed = True
            gevent.spawn(self._drop_all)
        elif state == KazooState.CONNECTED:
            if self._rejoin_needed and self._running:
                self._rejoin_needed = False
                gevent.spawn(self._rejoin)
            self._kick.set()
            self._leader_kick.set()

    def _drop_all(self) -> None:
        for q, p in list(self._owned):
            self._owned.pop((q, p), None)
            try:
                self.hooks.lost(q, p)
            except Exception:
                log.exception("stopping the push workers of %s/%d failed", q, p)
        self._changed.set()

    def _rejoin(self) -> None:
        try:
            self._join()
            log.info("cluster: joined again as %s", self.gid)
        except Exception:
            log.exception("cluster: joining again failed; retrying")
            self._rejoin_needed = True
            gevent.spawn_later(1.0, self._rejoin)

    # -- the lease ------------------------------------------------------------------------

    def _heartbeat(self, timeout: float) -> None:
        sent = time.monotonic()
        window = int(self.lease.duration * 1000)
        ceiling = max(self.lease.ceiling_ms, max(wall_clock_ms(), self._highest_id_ms) + window)
        path = f"{CEILINGS}/{self.gid}"
        value = str(ceiling).encode()
        try:
            self.zk.set_async(path, value).get(timeout=timeout)
        except NoNodeError:
            self.zk.create_async(path, value, makepath=True).get(timeout=timeout)
        self.lease.confirmed(sent, ceiling)

    def _heartbeat_loop(self) -> None:
        failing = False
        while True:
            gevent.sleep(self.options.heartbeat)
            if self._rejoin_needed:
                continue
            try:
                self._heartbeat(timeout=self.options.heartbeat * 2)
                if failing:
                    log.info("cluster: heartbeats succeed again")
                failing = False
            except (Exception, gevent.Timeout) as exc:  # kazoo's .get(timeout) raises Timeout
                if not failing:
                    log.warning(
                        "cluster: heartbeat failed (%s: %s); writes stop in %.1f s",
                        type(exc).__name__, exc, max(0.0, self.lease.remaining()),
                    )  # fmt: skip
                failing = True

    # -- what the service asks ------------------------------------------------------------

    def owns(self, queue: str, partition: int) -> bool:
        return self._owned.get((queue, partition)) == ACTIVE

    def owned(self, queue: str) -> list[int]:
        return sorted(p for (q, p), s in self._owned.items() if q == queue and s == ACTIVE)

    def assigned_owner(self, queue: str, partition: int) -> str | None:
        owners = self._assignment.get(queue)
        return owners[partition] if owners and partition < len(owners) else None

    def address_of(self, gid: str | None) -> str | None:
        member = self._members.get(gid or "")
        return member.advertise if member else None

    def locations(self, queue: str, partitions: int) -> list[str]:
        """Per partition, the address of its assigned owner ('' while it has none)."""
        return [self.address_of(self.assigned_owner(queue, p)) or "" for p in range(partitions)]

    def route(self, queue: str, partition: int, *, forwarded: bool) -> str | None:
        """None: write it here; else the address of the owner to forward to. Waits up to
        ``move_wait`` for a partition in motion; raises StoreError when it has no owner."""
        deadline = time.monotonic() + self.options.move_wait
        while True:
            state = self._owned.get((queue, partition))
            if state == ACTIVE:
                return None
            owner = self.assigned_owner(queue, partition)
            if state is None and not forwarded and owner not in (None, self.gid):
                address = self.address_of(owner)
                if address:
                    return address
            left = deadline - time.monotonic()
            if forwarded and (left <= 0 or not self._running):
                # a stopping gateway claims nothing more: the sender routes it again at once
                raise NotOwner(
                    f"{NotOwner.MARK} {partition} of '{queue}' (it moved); ask "
                    "getQueueLocations and retry"
                )
            if left <= 0:
                raise StoreError(
                    f"partition {partition} of '{queue}' has no live owner yet (a gateway "
                    "failed or the cluster is rebalancing); retry"
                )
            self._changed.clear()
            self._changed.wait(min(left, 0.25))

    def wait_moved(self, queue: str, partition: int, gone: str | None) -> bool:
        """After the owner ``gone`` (a gid) did not take a forwarded put it was sent: waits up
        to ``move_wait`` for the partition to be owned here or assigned to another live
        gateway; False when it was not (the put fails as it did)."""
        deadline = time.monotonic() + self.options.move_wait
        while True:
            if self._owned.get((queue, partition)) == ACTIVE:
                return True
            owner = self.assigned_owner(queue, partition)
            if owner not in (None, gone) and (owner == self.gid or self.address_of(owner)):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            self._changed.wait(min(left, 0.25))

    def pick_partition(self, queue: str, partitions: int) -> int:
        """A partition for a put that names none: one this gateway owns (no hop) if any."""
        mine = self.owned(queue)
        return random.choice(mine) if mine else random.randrange(partitions)

    @contextlib.contextmanager
    def writing(self, queue: str, partition: int) -> Iterator[None]:
        """Brackets a local put: ownership and lease are checked, and a release waits for it."""
        if self._owned.get((queue, partition)) != ACTIVE:
            raise NotOwner(f"{NotOwner.MARK} {partition} of '{queue}' (it moved away)")
        self.lease.check()
        slot = (queue, partition)
        self._inflight[slot] = self._inflight.get(slot, 0) + 1
        try:
            yield
        finally:
            n = self._inflight[slot] - 1
            if n:
                self._inflight[slot] = n
            else:
                del self._inflight[slot]
                self._changed.set()

    def guard(self, queue: str, partition: int) -> None:
        """The store calls this right before and after sending a write: the claim (active or
        being released with puts still in flight) and the lease must hold."""
        if (queue, partition) not in self._owned:
            raise StoreError(f"partition {partition} of '{queue}' is no longer owned here")
        self.lease.check()

    def check_id(self, timestamp_ms: int) -> None:
        if timestamp_ms > self._highest_id_ms:
            self._highest_id_ms = timestamp_ms
        self.lease.check_id(timestamp_ms)

    def count_put(self, queue: str, partition: int, n: int) -> None:
        slot = (queue, partition)
        self._put_counts[slot] = self._put_counts.get(slot, 0) + n

    # -- watches --------------------------------------------------------------------------

    def _members_changed(self, children: list[str]) -> bool:
        if not self._running:
            return False
        gevent.spawn(self._read_members, children)
        return True

    def _read_members(self, children: list[str]) -> None:
        members = {}
        for child in children:
            gid, _, seq = child.rpartition("-")
            try:
                data, _ = self.zk.get(f"{MEMBERS}/{child}")
            except NoNodeError:
                continue
            d = json.loads(data or b"{}")
            members[gid] = Member(gid, int(seq), d.get("advertise", ""), d.get("rates") or {})
        self._members = members
        self._leader_kick.set()
        self._kick.set()
        self._changed.set()

    def _queues_changed(self, queues: list[str]) -> bool:
        if not self._running:
            return False
        for queue in set(queues) - self._watched_queues:
            self._watched_queues.add(queue)
            self._watch_assignment(queue)
        return True

    def _watch_assignment(self, queue: str) -> None:
        def changed(data: bytes | None, stat: Any) -> bool:
            if not self._running:
                return False
            if data is None:
                self._assignment.pop(queue, None)
                self._watched_queues.discard(queue)
                self._kick.set()
                self._changed.set()
                return False
            self._assignment[queue] = list(json.loads(data)["owners"])
            self._kick.set()
            self._changed.set()
            return True

        DataWatch(self.zk, f"{ASSIGNMENT}/{queue}", changed)
