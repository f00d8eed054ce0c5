"""The leader's loop (it assigns every partition to a live member and removes the ceilings
of long-dead gateways), and the load: each member's put rates, published for the leader and
``balance`` to move partitions by."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING

import gevent
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from ..errors import StoreError
from ..ids import wall_clock_ms
from .assign import assign, moves, rebalance_by_load
from .state import ASSIGNMENT, CEILINGS

if TYPE_CHECKING:
    from .member import Member
    from .state import _State
else:
    _State = object  # the mixins below are put together by ClusterMember (member.py)

# the cluster member's one logger, as before it was split into parts
log = logging.getLogger("gateway.cluster.member")

_DEAD_CEILING_KEPT_MS = 3_600_000  # a dead gateway's ceiling matters until its writes landed


class _Leader(_State):
    # -- the leader -----------------------------------------------------------------------

    def is_leader(self) -> bool:
        if not self._members or self.gid not in self._members:
            return False
        return min(self._members.values(), key=lambda m: m.seq).gid == self.gid

    def _leader_loop(self) -> None:
        while True:
            self._leader_kick.wait(1.0)
            self._leader_kick.clear()
            if not self.is_leader() or self._rejoin_needed:
                continue
            try:
                self._assign_all()
                self._collect_ceilings()
            except (KazooException, StoreError) as exc:
                log.warning("cluster: assigning partitions failed: %s; retrying", exc)
            except Exception:
                log.exception("cluster: assigning partitions failed; retrying")

    def _assign_all(self) -> None:
        queues = dict(self.hooks.queues())
        if not self._members:
            return
        owners_now, versions = self._read_assignment()
        current: dict[str, list[str | None]] = {q: list(o) for q, o in owners_now.items()}
        for queue in set(current) - set(queues):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{ASSIGNMENT}/{queue}")
        wanted = {q: n for q, n in queues.items()}
        new = assign(wanted, sorted(self._members), {q: current.get(q, []) for q in wanted})
        moved = 0
        for queue, owners in new.items():
            if current.get(queue) == owners:
                continue
            moved += len(moves({queue: current.get(queue, [])}, {queue: owners}))
            self._write_assignment(queue, owners, versions.get(queue))
        if moved:
            log.info("cluster: assigned %d partition(s) over %d gateway(s)", moved,
                     len(self._members))  # fmt: skip

    def _read_assignment(self) -> tuple[dict[str, list[str]], dict[str, int]]:
        """Every queue's owners and znode version, read now (for a versioned rewrite)."""
        owners: dict[str, list[str]] = {}
        versions: dict[str, int] = {}
        for queue in self.zk.get_children(ASSIGNMENT):
            with contextlib.suppress(NoNodeError):
                data, stat = self.zk.get(f"{ASSIGNMENT}/{queue}")
                owners[queue] = list(json.loads(data)["owners"])
                versions[queue] = stat.version
        return owners, versions

    def _write_assignment(self, queue: str, owners: list[str], version: int | None) -> None:
        data = json.dumps({"owners": owners}).encode()
        path = f"{ASSIGNMENT}/{queue}"
        try:
            if version is None:
                self.zk.create(path, data, makepath=True)
            else:
                self.zk.set(path, data, version=version)
        except (NodeExistsError, BadVersionError):
            self._leader_kick.set()  # someone else changed it: compute again

    def _collect_ceilings(self) -> None:
        live = set(self._members)
        now = wall_clock_ms()
        for gid in self.zk.get_children(CEILINGS):
            if gid in live:
                continue
            with contextlib.suppress(NoNodeError, ValueError):
                data, stat = self.zk.get(f"{CEILINGS}/{gid}")
                if int(data) < now - _DEAD_CEILING_KEPT_MS:
                    self.zk.delete(f"{CEILINGS}/{gid}", version=stat.version)

    # -- load -----------------------------------------------------------------------------

    def _rates_loop(self) -> None:
        last = time.monotonic()
        while True:
            gevent.sleep(self.options.rates_interval)
            now = time.monotonic()
            counts, self._put_counts = self._put_counts, {}
            span = max(now - last, 1e-3)
            last = now
            self._rates = {f"{q}/{p}": round(n / span, 1) for (q, p), n in counts.items()}
            try:
                data = json.dumps(
                    {"advertise": self.options.advertise, "rates": self._rates,
                     "started_ms": self._started_ms}
                ).encode()  # fmt: skip
                self.zk.set(self._member_path, data)
            except (KazooException, gevent.Timeout) as exc:
                log.debug("publishing put rates failed: %s", exc)

    def members(self) -> list[Member]:
        return sorted(self._members.values(), key=lambda m: m.seq)

    def assignment(self) -> dict[str, list[str]]:
        return {q: list(o) for q, o in self._assignment.items()}

    def balance(self, max_moves: int) -> int:
        """Moves partitions (keeping counts balanced) to even out put rates; returns how many."""
        rates: dict[tuple[str, int], float] = {}
        for member in self._members.values():
            for key, rate in member.rates.items():
                q, _, p = key.rpartition("/")
                rates[(q, int(p))] = rate
        current, versions = self._read_assignment()
        new = rebalance_by_load(current, rates, max_moves)
        moved = 0
        for queue, owners in new.items():
            if owners != current.get(queue):
                moved += len(moves({queue: current[queue]}, {queue: owners}))
                self._write_assignment(queue, owners, versions[queue])
        return moved
