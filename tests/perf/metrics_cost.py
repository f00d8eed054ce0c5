"""What counting costs a put and a scan read, measured in-process without a disk.

    python -m tests.perf.metrics_cost [--batch 1000] [--repeat 7]

The gateway's service puts batches into a store that does nothing (so the figure is the
service's own work plus, with metrics on, the counting) and reads them back through a scanner
over a store that returns a fixed chunk; each way is timed with and without
:class:`gateway.metrics.GatewayStats` attached. The best of ``--repeat`` runs is reported, the
figure least disturbed by other processes on a busy machine. The end-to-end put rate with and
without ``--metrics-port`` is ``loadtests/bench --only metrics``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Collection, Sequence

from hqueue.protocol import hqueue_thrift

from gateway.metrics import GatewayStats
from gateway.rowkey import MessageId
from gateway.scanners import ScannerRegistry
from gateway.service import GatewayService
from gateway.store.base import (
    Extra,
    PartitionReader,
    PartitionStore,
    PutBatch,
    QueueMeta,
    ReadResult,
    Row,
)


class _NullReader(PartitionReader):
    """Returns the same chunk on every read, never at its end."""

    def __init__(self, chunk: list[Row]) -> None:
        self.chunk = chunk

    def read(self, limit: int, max_bytes: int | None = None) -> ReadResult:
        return ReadResult(self.chunk[:limit], 0, False)

    def close(self) -> None: ...


class NullStore(PartitionStore):
    """Keeps queue metadata; puts vanish, scans return ``chunk`` rows ``rounds`` times."""

    def __init__(self, chunk: list[Row]) -> None:
        self.meta = QueueMeta("q", 8, 86400)
        self.chunk = chunk

    def stop(self) -> None: ...
    def list_queues(self) -> list[QueueMeta]:
        return [self.meta]

    def get_queue(self, name: str) -> QueueMeta | None:
        return self.meta if name == "q" else None

    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        raise NotImplementedError

    def delete_queue(self, name: str) -> None: ...
    def truncate_queue(self, name: str) -> QueueMeta:
        return self.meta

    def set_enabled(self, name: str, enabled: bool) -> QueueMeta:
        return self.meta

    def last_id(self, queue: QueueMeta, partition: int) -> MessageId | None:
        return None

    def put(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> None: ...

    def reader(
        self, queue: QueueMeta, partition: int, after: MessageId | None, stop: MessageId | None,
        *, reverse: bool, topics: Collection[bytes] | None,
    ) -> PartitionReader:  # fmt: skip
        return _NullReader(self.chunk)

    def get_record(self, namespace: str, key: str) -> bytes | None:
        return None

    def put_record(self, namespace: str, key: str, value: bytes) -> None: ...
    def delete_record(self, namespace: str, key: str) -> None: ...
    def list_records(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        return []

    def put_extras(self, queue: QueueMeta, items: Sequence[Extra]) -> None: ...
    def get_extras(
        self, queue: QueueMeta, partition: int, ids: Sequence[MessageId]
    ) -> dict[MessageId, bytes]:
        return {}

    def find_by_key(self, queue: QueueMeta, key: bytes, limit: int) -> list[tuple[int, MessageId]]:
        return []

    def has_extras(self, queue: QueueMeta) -> bool:
        return False


def measure(batch: int, calls: int, repeat: int, stats: bool) -> tuple[float, float]:
    """Best microseconds per put call and per scanner read of ``batch`` messages."""
    rows: list[Row] = [(1, i, b"t", b"x" * 100) for i in range(batch)]
    service = GatewayService(NullStore(rows), ScannerRegistry(), hqueue_thrift(), advertise="-")
    if stats:
        service.stats = GatewayStats()
    topics = [b"t"] * batch
    values = [b"x" * 100] * batch
    sid = service.messageScannerOpen(b"q", 0, None)
    best_put = best_read = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        for i in range(calls):
            service.put_raw(b"q", i & 7, topics, values)
        best_put = min(best_put, (time.perf_counter() - began) / calls)
        began = time.perf_counter()
        for _ in range(calls):
            service.messageScannerGetList(sid, batch)
        best_read = min(best_read, (time.perf_counter() - began) / calls)
    return best_put * 1e6, best_read * 1e6


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tests.perf.metrics_cost", description=__doc__)
    p.add_argument("--batch", type=int, default=1000, help="messages per call (1000)")
    p.add_argument("--calls", type=int, default=2000, help="calls per run (2000)")
    p.add_argument("--repeat", type=int, default=7, help="runs; the best counts (7)")
    args = p.parse_args()
    print(f"{args.batch} messages of 100 B per call, best of {args.repeat} x {args.calls} calls")
    print(f"{'':12} {'put us/call':>12} {'read us/call':>13}")
    figures = {}
    for label, on in (("no metrics", False), ("metrics", True)):
        figures[label] = measure(args.batch, args.calls, args.repeat, on)
        put, read = figures[label]
        print(f"{label:12} {put:12.1f} {read:13.1f}")
    (p0, r0), (p1, r1) = figures["no metrics"], figures["metrics"]
    print(f"{'added':12} {p1 - p0:12.1f} {r1 - r0:13.1f}")


if __name__ == "__main__":
    main()
