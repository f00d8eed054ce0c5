"""A greenlet that samples, every ``interval`` seconds, what is too costly to compute per
scrape or per page view: each subscriber's lag (it counts messages after the checkpoints, a
scan of up to :data:`~gateway.subscriptions.service.LAG_COUNT_CAP` rows per partition) and
each queue's put rates. It keeps the last ``history`` samples for the console's charts and
hands the newest lag to the metrics.

Its cost is bounded: after a sample that took ``t`` seconds the next waits at least ``10 t``,
so counting lag never takes more than about a tenth of the event loop.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import gevent

from .errors import HQueueError
from .metrics import GatewayStats, Lag
from .store.base import PartitionStore

if TYPE_CHECKING:
    from .subscriptions.service import SubscriptionService

log = logging.getLogger(__name__)


class LagSample(NamedTuple):
    time: float  # Unix seconds
    messages: int
    capped: bool
    seconds: float


class RateSample(NamedTuple):
    time: float
    put_messages: int
    put_bytes: int
    read_messages: int
    read_bytes: int


class Monitor:
    def __init__(
        self,
        store: PartitionStore,
        stats: GatewayStats,
        subscriptions: Callable[[], SubscriptionService | None],
        *,
        interval: float = 10.0,
        history: int = 360,
    ) -> None:
        if interval <= 0:
            raise ValueError("'interval' must be > 0 seconds")
        self.store = store
        self.stats = stats
        self.subscriptions = subscriptions
        self.interval = interval
        self.history = history
        self.lags: dict[tuple[str, str], deque[LagSample]] = {}
        self.rates: dict[str, deque[RateSample]] = {}
        self._loop: gevent.Greenlet | None = None

    def start(self) -> None:
        self._loop = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.kill()

    def rate(self, queue: str) -> dict[str, float] | None:
        """Per second over the last interval: put/read messages and bytes (None: too early)."""
        samples = self.rates.get(queue)
        if not samples or len(samples) < 2:
            return None
        a, b = samples[-2], samples[-1]
        dt = b.time - a.time
        if dt <= 0:
            return None
        return {
            "put_messages": (b.put_messages - a.put_messages) / dt,
            "put_bytes": (b.put_bytes - a.put_bytes) / dt,
            "read_messages": (b.read_messages - a.read_messages) / dt,
            "read_bytes": (b.read_bytes - a.read_bytes) / dt,
        }

    def _run(self) -> None:
        while True:
            began = time.monotonic()
            try:
                self.sample()
            except gevent.GreenletExit:
                raise
            except Exception:
                log.exception("sampling lag and rates failed; trying again later")
            took = time.monotonic() - began
            gevent.sleep(max(self.interval, 10 * took))

    def sample(self) -> None:
        now = time.time()
        metas = self.store.list_queues()
        names = {m.name for m in metas}
        for meta in metas:
            c = self.stats.queue(meta.name)
            ring = self.rates.setdefault(meta.name, deque(maxlen=self.history))
            ring.append(RateSample(now, c.put_messages, c.put_bytes, c.read_messages, c.read_bytes))
        for gone in [q for q in self.rates if q not in names]:
            del self.rates[gone]
        subs = self.subscriptions()
        seen: set[tuple[str, str]] = set()
        if subs is not None:
            for meta in metas:
                try:
                    infos = subs.list(meta)
                except HQueueError as exc:  # say, the queue was deleted meanwhile
                    log.debug("no lag for queue %s this time: %s", meta.name, exc)
                    infos = []
                for info in infos:
                    key = (meta.name, info.name.decode())
                    seen.add(key)
                    lag = Lag(
                        messages=sum(p.lagMessages for p in info.partitions),
                        capped=any(p.lagMessagesCapped for p in info.partitions),
                        seconds=max((p.lagSeconds for p in info.partitions), default=0.0),
                        partitions={
                            p.partitionID: (p.lagMessages, p.lagSeconds) for p in info.partitions
                        },
                    )
                    self.stats.lag[key] = lag
                    ring2 = self.lags.setdefault(key, deque(maxlen=self.history))
                    ring2.append(LagSample(time.time(), lag.messages, lag.capped, lag.seconds))
                gevent.sleep(0)
        for key in [k for k in self.lags if k not in seen]:
            del self.lags[key]
        for key in [k for k in self.stats.lag if k not in seen]:
            del self.stats.lag[key]
