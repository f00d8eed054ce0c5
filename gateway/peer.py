"""Who is calling: the client connection a request arrived on.

The server sets it once per connection greenlet (greenlets each have their own context, so
it follows the request into the service without being passed through thriftpy2's dispatch).
Scanners belong to the connection that opened them; a subscriber's address is checked
against the caller's host. In-process callers (unit tests, tools) have no peer: ``None``.
"""

from __future__ import annotations

import itertools
from contextvars import ContextVar
from typing import NamedTuple


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
