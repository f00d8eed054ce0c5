"""The ZooKeeper paths of the gateway cluster (the layout in member.py's docstring), and the
state every part of a :class:`~gateway.cluster.member.ClusterMember` shares (see member.py
for the parts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gevent
import gevent.event

from ..ids import wall_clock_ms
from .lease import WriteLease

if TYPE_CHECKING:
    from .member import ClusterOptions, Hooks, Member

ROOT = "/hqueue-cluster"
MEMBERS = f"{ROOT}/members"
CEILINGS = f"{ROOT}/ceilings"
ASSIGNMENT = f"{ROOT}/assignment"
CLAIMS = f"{ROOT}/claims"

ACTIVE, RELEASING = "active", "releasing"


class _State:
    """A cluster member's attributes, and the parts' methods the other parts call."""

    def __init__(self, options: ClusterOptions, hooks: Hooks) -> None:
        self.options = options
        self.hooks = hooks
        self.lease = WriteLease(options.session_timeout)
        self.gid = ""
        self.zk: Any = None
        self._member_path = ""
        self._members: dict[str, Member] = {}
        self._assignment: dict[str, list[str]] = {}  # queue -> gid per partition
        self._owned: dict[tuple[str, int], str] = {}  # (queue, partition) -> ACTIVE|RELEASING
        self._claiming: set[tuple[str, int]] = set()
        self._inflight: dict[tuple[str, int], int] = {}
        self._changed = gevent.event.Event()  # ownership moved: waiting puts look again
        self._kick = gevent.event.Event()  # assignment or members moved: reconcile
        self._leader_kick = gevent.event.Event()
        self._watched_queues: set[str] = set()
        self._put_counts: dict[tuple[str, int], int] = {}
        self._rates: dict[str, float] = {}
        self._highest_id_ms = 0
        self._started_ms = wall_clock_ms()
        self._greenlets: list[gevent.Greenlet] = []
        self._running = False
        self._rejoin_needed = False

    # The parts call these of each other; each is defined in the module named.

    def assigned_owner(self, queue: str, partition: int) -> str | None:  # member.py
        raise NotImplementedError

    def _heartbeat(self, timeout: float) -> None:  # member.py
        raise NotImplementedError
