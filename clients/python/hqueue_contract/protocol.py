"""The Thrift contract (``idl/``) loaded once, and how both sides speak it.

The IDL files ship inside this package (``hqueue_contract/idl`` links to ``idl/``), so the
gateway, the subscriber runtime, the toolkit and every Python client load the very same
contract. Loading is lazy and cached: importing this module parses nothing.
"""

from __future__ import annotations

import functools
import os
import select
import socket
import ssl
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory, TCompactProtocolFactory
from thriftpy2.transport import TBufferedTransportFactory, TFramedTransportFactory

IDL_DIR = Path(os.environ.get("HQUEUE_IDL_DIR") or Path(__file__).resolve().parent / "idl")


@functools.cache
def hqueue_thrift() -> ModuleType:
    """The module generated from ``idl/hqueue.thrift`` (TMessage, HQueueService, ...)."""
    return thriftpy2.load(str(IDL_DIR / "hqueue.thrift"), module_name="hqueue_thrift")


@functools.cache
def subscriber_thrift() -> ModuleType:
    """The module generated from ``idl/subscriber.thrift`` (HQueueSubscriberService)."""
    hqueue_thrift()  # the include must resolve to the same module object
    return thriftpy2.load(str(IDL_DIR / "subscriber.thrift"), module_name="subscriber_thrift")


def transport_factory(framed: bool) -> Any:
    return TFramedTransportFactory() if framed else TBufferedTransportFactory()


def protocol_factory(compact: bool) -> Any:
    return TCompactProtocolFactory() if compact else TBinaryProtocolFactory()


def closed_by_peer(client: Any) -> bool:
    """Whether the peer already closed a raw client's idle socket (a zero-timeout poll:
    cheap). Between calls nothing is owed to us, so a readable socket means EOF (or stray
    bytes: drop it too). Over TLS the server may send records no call asked for (session
    tickets), so a readable socket proves nothing there: the first call on a dead one fails."""
    sock = getattr(getattr(getattr(client, "_iprot", None), "trans", None), "sock", None)
    if not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket):
        return False
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def parse_address(address: str, *, argument: str = "address") -> tuple[str, int]:
    """``host:port`` -> (host, port); raises ValueError naming ``argument``."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"'{argument}' must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


Address = str | tuple[str, int]


def parse_addresses(
    addresses: Address | Sequence[Address], *, argument: str = "address"
) -> list[tuple[str, int]]:
    """Gateway addresses as the Python clients take them: ``"host:port"``, a comma-separated
    ``"h1:p1,h2:p2"``, a ``(host, port)`` pair, or a list of those -> [(host, port), ...] in
    the order given. Raises ValueError naming ``argument`` (its index in a list)."""
    if isinstance(addresses, tuple) and len(addresses) == 2 and isinstance(addresses[1], int):
        items: list[Any] = [addresses]
    elif isinstance(addresses, str):
        items = [a for a in (s.strip() for s in addresses.split(",")) if a]
    elif isinstance(addresses, Sequence):
        items = list(addresses)
    else:
        raise ValueError(
            f"'{argument}' must be host:port, (host, port) or a list of them, got {addresses!r}"
        )
    if not items:
        raise ValueError(f"'{argument}' must name at least one host:port")
    out = []
    for i, item in enumerate(items):
        name = argument if len(items) == 1 else f"{argument}[{i}]"
        if isinstance(item, str):
            out.append(parse_address(item.strip(), argument=name))
            continue
        try:
            host, port = item
        except (TypeError, ValueError):
            host, port = None, None
        if (
            not isinstance(host, str)
            or not host
            or isinstance(port, bool)
            or not isinstance(port, int)
            or not 0 < port < 65536
        ):
            raise ValueError(f"'{name}' must be host:port or (host, port), got {item!r}")
        out.append((host.strip("[]"), port))
    return out
