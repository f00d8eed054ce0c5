"""What the gateway counts, and its Prometheus exposition (``--metrics-port``).

Counting happens on the hot paths, so it is plain Python arithmetic on objects of our own
(an int added per put *call*, never per message; a bisect into fixed buckets per histogram
observation), with no locks: every counter is touched on the gevent event loop only.
:class:`StatsCollector` turns them into Prometheus metric families when scraped, through
``prometheus_client``'s custom-collector API; the client library then does the text format.

Labels are bounded: ``queue`` (queues that exist now; a deleted queue's series disappear),
``subscriber`` (subscribers an operator created), ``method`` (the IDL's methods) and a small
``error`` enum. No per-message, per-partition or per-client labels: a queue may have 32767
partitions and clients come and go.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

# seconds: a durable put is ~0.2-2 ms on an SSD, 10 ms+ on a slow disk or HBase under load
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
# puts that shared one write-ahead-log sync
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Histogram:
    """Fixed-bucket histogram: ``counts[i]`` holds observations in (bounds[i-1], bounds[i]],
    the last slot those above every bound (Prometheus's ``le`` is inclusive)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), total))
        return out


class QueueCounters:
    __slots__ = ("put_batches", "put_bytes", "put_messages", "read_bytes", "read_messages")

    def __init__(self) -> None:
        self.put_messages = 0
        self.put_bytes = 0  # message bodies
        self.put_batches = 0  # per partition per put call
        self.read_messages = 0  # by scanners of clients (pushes are counted as deliveries)
        self.read_bytes = 0


class PushCounters:
    __slots__ = ("dead_letters", "delivered_batches", "delivered_messages", "retries")

    def __init__(self) -> None:
        self.delivered_messages = 0  # acknowledged by the subscriber
        self.delivered_batches = 0
        self.retries = 0  # failed consumeMessages calls that will be (or were) sent again
        self.dead_letters = 0  # messages given up on and moved to a dead-letter queue


@dataclass(frozen=True)
class Lag:
    """A subscriber's lag summed over its partitions (messages) and its worst partition
    (seconds: the age of the oldest message it has not acknowledged)."""

    messages: int
    capped: bool  # counting stopped at the cap in some partition: at least ``messages``
    seconds: float
    partitions: dict[int, tuple[int, float]] = field(default_factory=dict)


class GatewayStats:
    """Every counter of one gateway process."""

    def __init__(self) -> None:
        self.started = time.time()
        self.queues: dict[str, QueueCounters] = {}
        self.put_latency = Histogram(LATENCY_BUCKETS)
        self.scan_latency = Histogram(LATENCY_BUCKETS)
        self.wal_syncs = 0
        self.wal_sync_latency = Histogram(LATENCY_BUCKETS)
        self.group_commit_puts = Histogram(GROUP_BUCKETS)
        self.group_commit_messages = 0
        self.store_errors: dict[str, int] = {}  # by method (or background task)
        self.request_errors: dict[tuple[str, str], int] = {}  # (method, error kind)
        self.push: dict[tuple[str, str], PushCounters] = {}
        self.lag: dict[tuple[str, str], Lag] = {}  # set by gateway.monitor
        # set by the cluster (issue 12): partitions of each queue this gateway owns. Until
        # it first does, the gateway stands alone and owns every partition of every queue.
        self.partitions_owned: dict[str, int] = {}
        self.clustered = False

    # -- hot paths: one call per put or scan call ----------------------------------------

    def queue(self, name: str) -> QueueCounters:
        counters = self.queues.get(name)
        if counters is None:
            counters = self.queues[name] = QueueCounters()
        return counters

    def subscriber(self, queue: str, name: str) -> PushCounters:
        key = (queue, name)
        counters = self.push.get(key)
        if counters is None:
            counters = self.push[key] = PushCounters()
        return counters

    def log_synced(self, puts: int, messages: int, seconds: float, failed: bool) -> None:
        """The embedded store's write-ahead log finished one sync (one group commit)."""
        self.wal_syncs += 1
        self.wal_sync_latency.observe(seconds)
        self.group_commit_puts.observe(puts)
        self.group_commit_messages += messages
        if failed:
            self.store_error("wal_sync")

    def store_error(self, method: str) -> None:
        self.store_errors[method] = self.store_errors.get(method, 0) + 1

    def request_error(self, method: str, kind: str) -> None:
        key = (method, kind)
        self.request_errors[key] = self.request_errors.get(key, 0) + 1

    def set_partitions_owned(self, queue: str, count: int) -> None:
        """For the cluster: how many of ``queue``'s partitions this gateway owns now."""
        self.clustered = True
        self.partitions_owned[queue] = count

    def forget(self, existing: set[str]) -> None:
        """Drops the series of queues that no longer exist (keeps labels bounded)."""
        for name in [q for q in self.queues if q not in existing]:
            del self.queues[name]
        for key in [k for k in self.push if k[0] not in existing]:
            del self.push[key]
        for key in [k for k in self.lag if k[0] not in existing]:
            del self.lag[key]
        for name in [q for q in self.partitions_owned if q not in existing]:
            del self.partitions_owned[name]


class StatsCollector:
    """A ``prometheus_client`` collector reading :class:`GatewayStats` and live gauges.

    ``gauges`` returns the values read at scrape time: ``open_scanners``,
    ``open_connections``, ``connections_accepted``, ``queues`` (each queue that exists: its
    partition count), and optionally ``scanner_bytes``, ``reply_bytes`` and (the embedded
    store) ``block_cache_bytes``.
    """

    def __init__(self, stats: GatewayStats, gauges: Callable[[], dict[str, Any]]) -> None:
        self.stats = stats
        self.gauges = gauges

    def describe(self) -> list[Metric]:
        return []  # no duplicate check at registration: our names are our own

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        live = self.gauges()
        queues: dict[str, int] = live["queues"]
        s.forget(set(queues))
        partitions = GaugeMetricFamily(
            "hqueue_queue_partitions", "Partitions of each queue.", labels=["queue"]
        )
        for queue, count in sorted(queues.items()):
            partitions.add_metric([queue], count)
        yield partitions
        yield from self._queues(s)
        yield _histogram(
            "hqueue_put_latency_seconds",
            "Time a put call waits for the store to make its messages durable.",
            s.put_latency,
        )
        yield _histogram(
            "hqueue_scan_latency_seconds",
            "Time to serve one scanner read (messageScannerGet/GetList).",
            s.scan_latency,
        )
        yield _gauge("hqueue_open_scanners", "Scanners open now.", live["open_scanners"])
        yield _gauge(
            "hqueue_open_connections", "Thrift client connections open now.",
            live["open_connections"],
        )  # fmt: skip
        yield _gauge(
            "hqueue_scanner_bytes",
            "Bytes of rows open scanners hold (read ahead), capped by --max-scanner-bytes.",
            live.get("scanner_bytes", 0),
        )
        yield _gauge(
            "hqueue_reply_bytes",
            "Bytes of replies being sent on all connections, capped by --max-reply-bytes.",
            live.get("reply_bytes", 0),
        )
        if "block_cache_bytes" in live:
            yield _gauge(
                "hqueue_block_cache_bytes",
                "Bytes the embedded store's RocksDB block cache holds, capped by --block-cache-mb.",
                live["block_cache_bytes"],
            )
        c = CounterMetricFamily("hqueue_connections", "Thrift connections accepted.")
        c.add_metric([], live["connections_accepted"])
        yield c
        yield from self._store(s)
        yield from self._push(s)
        owned = GaugeMetricFamily(
            "hqueue_partitions_owned",
            "Partitions of each queue this gateway owns (the cluster sets it).",
            labels=["queue"],
        )
        for queue, count in sorted((s.partitions_owned if s.clustered else queues).items()):
            owned.add_metric([queue], count)
        yield owned
        up = GaugeMetricFamily("hqueue_start_time_seconds", "When this gateway started (Unix).")
        up.add_metric([], s.started)
        yield up

    @staticmethod
    def _queues(s: GatewayStats) -> Iterator[Metric]:
        families = {
            "put_messages": ("hqueue_put_messages", "Messages acknowledged to producers."),
            "put_bytes": ("hqueue_put_bytes", "Bytes of message bodies put."),
            "put_batches": ("hqueue_put_batches", "Batches written (one per partition a put call writes)."),  # noqa: E501
            "read_messages": ("hqueue_read_messages", "Messages returned to scanners."),
            "read_bytes": ("hqueue_read_bytes", "Bytes of message bodies returned to scanners."),
        }  # fmt: skip
        for attr, (name, doc) in families.items():
            family = CounterMetricFamily(name, doc, labels=["queue"])
            for queue, counters in sorted(s.queues.items()):
                family.add_metric([queue], getattr(counters, attr))
            yield family

    @staticmethod
    def _store(s: GatewayStats) -> Iterator[Metric]:
        syncs = CounterMetricFamily(
            "hqueue_wal_syncs", "Syncs of the embedded store's write-ahead log (group commits)."
        )
        syncs.add_metric([], s.wal_syncs)
        yield syncs
        yield _histogram(
            "hqueue_wal_sync_seconds", "Duration of one write-ahead log sync.", s.wal_sync_latency
        )
        yield _histogram(
            "hqueue_group_commit_puts",
            "Put calls made durable by one write-ahead log sync.",
            s.group_commit_puts,
        )
        msgs = CounterMetricFamily(
            "hqueue_group_commit_messages", "Messages made durable by write-ahead log syncs."
        )
        msgs.add_metric([], s.group_commit_messages)
        yield msgs
        errors = CounterMetricFamily(
            "hqueue_store_errors",
            "Failures of the store (IOError answers, failed log syncs), by method.",
            labels=["method"],
        )
        for method, count in sorted(s.store_errors.items()):
            errors.add_metric([method], count)
        yield errors
        requests = CounterMetricFamily(
            "hqueue_request_errors",
            "Calls answered with an error, by method and kind "
            "(illegal_argument, io_error, overloaded, internal).",
            labels=["method", "error"],
        )
        for (method, kind), count in sorted(s.request_errors.items()):
            requests.add_metric([method, kind], count)
        yield requests

    @staticmethod
    def _push(s: GatewayStats) -> Iterator[Metric]:
        labels = ["queue", "subscriber"]
        counters = {
            "delivered_messages": ("hqueue_push_delivered_messages", "Messages pushed and acknowledged."),  # noqa: E501
            "delivered_batches": ("hqueue_push_delivered_batches", "consumeMessages calls acknowledged."),  # noqa: E501
            "retries": ("hqueue_push_retries", "consumeMessages calls that failed and are sent again."),  # noqa: E501
            "dead_letters": ("hqueue_dead_letters", "Messages moved to a dead-letter queue."),
        }  # fmt: skip
        for attr, (name, doc) in counters.items():
            family = CounterMetricFamily(name, doc, labels=labels)
            for (queue, sub), c in sorted(s.push.items()):
                family.add_metric([queue, sub], getattr(c, attr))
            yield family
        messages = GaugeMetricFamily(
            "hqueue_subscriber_lag_messages",
            "Messages after a subscriber's checkpoints, summed over its partitions "
            "(counting stops at a cap per partition, see hqueue_subscriber_lag_capped).",
            labels=labels,
        )
        capped = GaugeMetricFamily(
            "hqueue_subscriber_lag_capped",
            "1 when some partition's lag count stopped at the cap (the lag is at least that).",
            labels=labels,
        )
        seconds = GaugeMetricFamily(
            "hqueue_subscriber_lag_seconds",
            "Age of the oldest message a subscriber has not acknowledged (worst partition).",
            labels=labels,
        )
        for (queue, sub), lag in sorted(s.lag.items()):
            messages.add_metric([queue, sub], lag.messages)
            capped.add_metric([queue, sub], 1 if lag.capped else 0)
            seconds.add_metric([queue, sub], lag.seconds)
        yield messages
        yield capped
        yield seconds


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g


def _histogram(name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc)
    family.add_metric([], h.cumulative(), h.sum)
    return family
