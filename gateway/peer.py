"""Who is calling: the client connection a request arrived on.

The server sets it once per connection greenlet (greenlets each have their own context, so
it follows the request into the service without being passed through thriftpy2's dispatch).
Scanners belong to the connection that opened them; a subscriber's address is checked
against the caller's host. In-process callers (unit tests, tools) have no peer: ``None``.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Collection
from contextvars import ContextVar
from typing import NamedTuple

from .errors import InvalidArgument


class Peer(NamedTuple):
    id: int  # unique for the life of the process
    host: str  # the client's address as the socket reports it
    port: int


_current: ContextVar[Peer | None] = ContextVar("hqueue_peer", default=None)
_ids = itertools.count(1)


def enter(host: str, port: int) -> Peer:
    """Marks the running greenlet as serving a new connection from ``host:port``."""
    peer = Peer(next(_ids), host, port)
    _current.set(peer)
    return peer


def current() -> Peer | None:
    return _current.get()


_LOOPBACK_NAMES = frozenset(["localhost", "localhost.localdomain", "ip6-localhost"])


def _plain(host: str) -> str:
    host = host.strip("[]").lower()
    return host[7:] if host.startswith("::ffff:") else host  # IPv4 seen through IPv6


def _loopback(host: str) -> bool:
    try:
        return host in _LOOPBACK_NAMES or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_subscriber_host(host: str, allowed: Collection[str]) -> None:
    """Refuses a subscriber address on a host other than the caller's.

    The gateway opens connections to the addresses subscribers register: left open, any client
    could make it connect (and push messages) to any host and port it can reach. So a
    subscriber must be on the host the subscribe call came from, or on one of ``allowed``
    (``--subscriber-hosts``; ``*`` allows any). Callers without a peer (in-process) pass.
    """
    caller = current()
    if caller is None or "*" in allowed:
        return
    want, have = _plain(host), _plain(caller.host)
    if want == have or want in {_plain(h) for h in allowed}:
        return
    if _loopback(want) and _loopback(have):
        return
    raise InvalidArgument(
        "address",
        f"host {host!r} is not the host this call came from ({caller.host}); the gateway "
        "connects only there unless the host is listed in its --subscriber-hosts",
    )
