"""The friendly Python client: a :class:`Connection` to one gateway and the :class:`Queue`
objects it hands out.

    from hqueue import Connection

    with Connection("127.0.0.1", 9190) as conn:
        q = conn.create_queue("events", partitions=4, ttl_seconds=86400)
        q.put("clicks", b"\\x00payload")
        q.put_many([("clicks", b"a"), ("views", b"b")], partition=2)
        for m in q.scan(topics=["clicks"]):
            print(m.partition, m.id, m.topic, m.value)

Topics, values and queue names are bytes; ``str`` is accepted and encoded as UTF-8. A
connection, like the thriftpy2 client under it, belongs to one thread or greenlet at a time:
share a :class:`hqueue.ConnectionPool` instead. Timeouts are in seconds.

The client is split by concern: :mod:`hqueue.connection` (a gateway connection, its calls,
routing to partition owners, queue administration), :mod:`hqueue.queue` (puts, scans,
subscribers, pull consumers), :mod:`hqueue.scan` (the scan iterator) and
:mod:`hqueue.arguments` (argument checks). This module keeps the names programs import from it.
"""

from __future__ import annotations

from .arguments import Bytes
from .connection import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    LOCATIONS_TTL,
    Connection,
    QueueInfo,
    gateway_addresses,
)
from .queue import DEFAULT_BATCH_SIZE, Queue
from .scan import ScanIterator

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "LOCATIONS_TTL",
    "Bytes",
    "Connection",
    "Queue",
    "QueueInfo",
    "ScanIterator",
    "gateway_addresses",
]
