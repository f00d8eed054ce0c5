"""CheckpointUpdater (seed 3.5.3): writes a subscriber's acknowledged progress to the registry.

One updater per live subscriber collects the last acknowledged MessageID of each of its
partition senders and writes those that moved, about once a second and once more on a clean
stop. The write is conditional on the record's version: when the subscriber registered again
meanwhile (possibly with new start positions) the write is refused and the manager restarts the
subscriber's workers from what the registry now says. A crash loses at most the progress of
the last interval, which is then delivered again (at-least-once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import gevent

from .registry import CheckpointConflict, SubscriptionRegistry
from .scanner import Id

log = logging.getLogger(__name__)


class CheckpointUpdater:
    def __init__(
        self,
        registry: SubscriptionRegistry,
        queue: str,
        name: str,
        version: int,
        progress: Callable[[], dict[int, Id | None]],
        on_conflict: Callable[[], None],
        *,
        interval: float = 1.0,
        epoch: int | None = None,
    ) -> None:
        self.registry = registry
        self.queue = queue
        self.name = name
        self.version = version  # the record version our last write produced (or we read)
        self.progress = progress
        self.on_conflict = on_conflict
        self.interval = interval  # seconds
        self.epoch = epoch  # the registration epoch the run started from (cluster merging)
        self._written: dict[int, Id | None] = dict(progress())
        self.conflicted = False

    def run(self) -> None:
        while True:
            gevent.sleep(self.interval)
            try:
                self.flush()
            except CheckpointConflict:
                return
            except Exception:
                log.exception(
                    "writing checkpoints of %s/%s failed; retrying", self.queue, self.name
                )

    def flush(self) -> None:
        """Writes the partitions whose progress moved; raises CheckpointConflict (once)."""
        if self.conflicted:
            raise CheckpointConflict("already conflicted")
        current = self.progress()
        moved = {p: c for p, c in current.items() if self._written.get(p) != c}
        if not moved:
            return
        try:
            self.version = self.registry.save_checkpoints(
                self.queue, self.name, moved, self.version, self.epoch
            )
        except CheckpointConflict as exc:
            self.conflicted = True
            log.info("checkpoints of %s/%s not written: %s", self.queue, self.name, exc)
            self.on_conflict()
            raise
        self._written.update(moved)
