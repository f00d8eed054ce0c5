"""Small helpers shared by the integration tests."""

from __future__ import annotations

from typing import Any

from hqueue.protocol import hqueue_thrift


def msg(T: Any, topic: bytes, value: bytes, pid: int | None = None) -> Any:
    return T.TMessage(topic=topic, value=value, partitionID=pid)


def drain(client: Any, sid: int, n: int = 1000) -> list[Any]:
    """Reads a scanner to its end (an empty list, which also frees it)."""
    out: list[Any] = []
    while True:
        batch = client.messageScannerGetList(sid, n)
        if not batch:
            return out
        out.extend(batch)


def scan_queue(client: Any, queue: str | bytes, n: int = 1000) -> list[Any]:
    """Every message of a queue, merged in MessageID order."""
    q = queue.encode() if isinstance(queue, str) else queue
    return drain(client, client.queueScannerOpen(q, hqueue_thrift().TMessageScan()), n)


def key(m: Any) -> tuple[int, int]:
    return (m.id.timestamp, m.id.sequenceID)
