"""Raw thriftpy2 connections to a gateway, speaking the contract of :mod:`hqueue_contract`.

The IDL loading and the helpers both sides share live in :mod:`hqueue_contract.protocol`; they
are re-exported here, where scripts and tests have always imported them
(``from hqueue.protocol import connect, hqueue_thrift``).
"""

from __future__ import annotations

from typing import Any

from hqueue_contract.protocol import (
    IDL_DIR,
    closed_by_peer,
    hqueue_thrift,
    parse_address,
    protocol_factory,
    subscriber_thrift,
    transport_factory,
)

from .tls import client_context

__all__ = [
    "IDL_DIR",
    "closed_by_peer",
    "connect",
    "hqueue_thrift",
    "parse_address",
    "protocol_factory",
    "subscriber_thrift",
    "transport_factory",
]


def connect(
    host: str,
    port: int,
    *,
    framed: bool = False,
    compact: bool = False,
    timeout: float = 30.0,
    tls: Any = None,
) -> Any:
    """A raw thriftpy2 ``HQueueService`` client. ``timeout`` is in seconds.

    ``tls``: None for plain TCP, else a :class:`hqueue.tls.TLS`, an ``ssl.SSLContext`` or
    True (the system's CAs). One client per greenlet or thread: thriftpy2 clients do not check
    sequence ids.
    """
    # thriftpy2.rpc imports asyncio (its aio server): 40 ms of every `import hqueue` when
    # imported at the top, for the one function that uses it
    from thriftpy2.rpc import make_client

    return make_client(
        hqueue_thrift().HQueueService,
        host=host,
        port=port,
        timeout=int(timeout * 1000),
        trans_factory=transport_factory(framed),
        proto_factory=protocol_factory(compact),
        ssl_context=client_context(tls),
    )
