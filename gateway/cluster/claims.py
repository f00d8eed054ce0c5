"""A cluster member's claims: it claims the partitions the leader assigned to it (an
ephemeral znode each, once the previous owner released it or its session ended), and releases
those assigned elsewhere once their in-flight puts finished."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING

import gevent
import gevent.event
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from .state import ACTIVE, CEILINGS, CLAIMS, MEMBERS, RELEASING

if TYPE_CHECKING:
    from .state import _State
else:
    _State = object  # the mixins below are put together by ClusterMember (member.py)

# the cluster member's one logger, as before it was split into parts
log = logging.getLogger("gateway.cluster.member")


class _Claims(_State):
    # -- claims ---------------------------------------------------------------------------

    def _reconcile_loop(self) -> None:
        while True:
            self._kick.wait(5.0)  # the timeout is only a safety net
            self._kick.clear()
            if self._rejoin_needed:
                continue
            wanted = {
                (q, p)
                for q, owners in self._assignment.items()
                for p, gid in enumerate(owners)
                if gid == self.gid
            }
            for slot in wanted - set(self._owned) - self._claiming:
                self._claiming.add(slot)
                gevent.spawn(self._claim, *slot)
            for slot, state in list(self._owned.items()):
                if slot not in wanted and state == ACTIVE:
                    self._owned[slot] = RELEASING
                    gevent.spawn(self._release, *slot)

    def _claim(self, queue: str, partition: int) -> None:
        path = f"{CLAIMS}/{queue}/{partition}"
        gid = self.gid
        try:
            while (
                self._running and self.gid == gid and self.assigned_owner(queue, partition) == gid
            ):
                try:
                    self.zk.create(path, gid.encode(), ephemeral=True, makepath=True)
                    break
                except NodeExistsError:
                    gone = gevent.event.Event()
                    try:
                        data, _ = self.zk.get(path, watch=lambda _e, gone=gone: gone.set())
                    except NoNodeError:
                        continue
                    if data.decode() == gid:
                        break
                    gone.wait(1.0)  # the holder releases, or its session ends
            else:
                return
            floor = self._dead_ceiling()
            if floor > self._highest_id_ms:
                # ids of this partition start at the floor: record a ceiling above it first
                self._highest_id_ms = floor
                self._heartbeat(timeout=self.options.session_timeout)
            self.hooks.gained(queue, partition, floor)
            self._owned[(queue, partition)] = ACTIVE
            self._changed.set()
            log.debug("cluster: owns %s/%d (ids from %d)", queue, partition, floor)
        except (KazooException, gevent.Timeout) as exc:
            log.warning("cluster: claiming %s/%d failed: %s; retrying", queue, partition, exc)
            gevent.spawn_later(1.0, self._kick.set)
        finally:
            self._claiming.discard((queue, partition))

    def _release(self, queue: str, partition: int) -> None:
        slot = (queue, partition)
        self._owned[slot] = RELEASING
        self._changed.set()
        deadline = time.monotonic() + self.options.move_wait
        while self._inflight.get(slot) and time.monotonic() < deadline:
            self._changed.clear()
            self._changed.wait(0.05)
        try:
            self.hooks.lost(queue, partition)
        except Exception:
            log.exception("stopping the push workers of %s/%d failed", queue, partition)
        path = f"{CLAIMS}/{queue}/{partition}"
        try:
            data, stat = self.zk.get(path)
            if data.decode() == self.gid:
                self.zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
        except KazooException as exc:
            log.warning("cluster: releasing %s/%d: %s (its session's end frees it)", queue,
                        partition, exc)  # fmt: skip
        finally:
            if self._owned.get(slot) == RELEASING:
                del self._owned[slot]
            self._changed.set()

    def _dead_ceiling(self) -> int:
        """The highest ceiling of every gateway that is no longer a member: a new owner's ids
        start above anything such a gateway can still write."""
        # Read the members now, not from the watched cache: the claim we just created proves
        # the old owner's session ended, and a read after our create sees that (one session's
        # requests are ordered), while the cache may not have heard of it yet.
        live = {child.rpartition("-")[0] for child in self.zk.get_children(MEMBERS)}
        live.add(self.gid)
        floor = 0
        for gid in self.zk.get_children(CEILINGS):
            if gid in live:
                continue
            with contextlib.suppress(NoNodeError, ValueError):
                data, _ = self.zk.get(f"{CEILINGS}/{gid}")
                floor = max(floor, int(data))
        return floor
