"""hqueue: a distributed, persistent message queue on HBase, served through Thrift.

The client API (see :mod:`hqueue.connection`, :mod:`hqueue.queue`, :mod:`hqueue.pool`,
:mod:`hqueue.errors`)::

    import hqueue

    with hqueue.Connection("127.0.0.1", 9190) as conn:
        q = conn.queue("events")
        q.put("clicks", b"payload")
        for message in q.scan(topics=["clicks"]):
            ...
"""

from .batch import Batch
from .connection import Connection, QueueInfo
from .errors import HQueueError, InvalidArgument, PoolTimeout, ServerError, TransportError
from .message import Message, MessageID
from .pool import ConnectionPool
from .producer import Producer
from .queue import Queue
from .tls import TLS

__version__ = "0.1.0"

__all__ = [
    "TLS",
    "Batch",
    "Connection",
    "ConnectionPool",
    "HQueueError",
    "InvalidArgument",
    "Message",
    "MessageID",
    "PoolTimeout",
    "Producer",
    "Queue",
    "QueueInfo",
    "ServerError",
    "TransportError",
]
