"""The write lease: how long this gateway may still write the partitions it claimed.

ZooKeeper ends a session no earlier than ``session_timeout`` after the server last heard from
the client. Every heartbeat of ours is a ZooKeeper write; when it succeeds we know the session
was alive when we *sent* it, so it cannot expire before ``sent + session_timeout`` on the
server. We stop writing at ``sent + session_timeout * fraction`` on our own monotonic clock,
well before. Only clock *rates* matter here (never wall-clock agreement between machines), and
``fraction`` (default 1/2) tolerates one clock running up to twice as fast as another.

A paused process (SIGSTOP, a long GC-like stall, a VM freeze) wakes up with the monotonic clock
advanced by the pause, so its lease is seen as expired before it writes again.

The lease also carries the ID ceiling: MessageIDs this gateway hands out stay below the
ceiling it last recorded in ZooKeeper, so a new owner that starts above the old owner's
ceiling can never hand out an id the old owner could still write (see ``docs/ARCHITECTURE.md``,
"The gateway cluster").
"""

from __future__ import annotations

import time

from ..errors import StoreError


class WriteLease:
    __slots__ = ("_until", "ceiling_ms", "duration")

    def __init__(self, session_timeout: float, fraction: float = 0.5) -> None:
        if not 0 < fraction < 1:
            raise ValueError("'fraction' must be between 0 and 1")
        self.duration = session_timeout * fraction  # seconds
        self._until = 0.0  # monotonic seconds; 0 = never confirmed
        self.ceiling_ms = 0  # MessageID timestamps must stay below this

    def confirmed(self, sent_at: float, ceiling_ms: int) -> None:
        """A heartbeat sent at ``sent_at`` (monotonic) that recorded ``ceiling_ms`` succeeded."""
        self._until = max(self._until, sent_at + self.duration)
        self.ceiling_ms = max(self.ceiling_ms, ceiling_ms)

    def revoke(self) -> None:
        self._until = 0.0

    def remaining(self) -> float:
        """Seconds of writing left (<= 0: expired)."""
        return self._until - time.monotonic()

    def check(self) -> None:
        """Raises StoreError unless this gateway may write now."""
        if time.monotonic() >= self._until:
            raise StoreError(
                "this gateway's cluster lease expired (ZooKeeper unreachable or the process "
                "was paused): it no longer writes; retry, the partition moves to another gateway"
            )

    def check_id(self, timestamp_ms: int) -> None:
        """Raises StoreError if an id with this timestamp would pass the recorded ceiling."""
        if timestamp_ms >= self.ceiling_ms:
            raise StoreError(
                "this gateway's MessageID ceiling was not extended in ZooKeeper in time; "
                "retry the put"
            )
