"""The keyword options of a push subscriber, written once: :class:`~subscriber_runtime.Subscriber`,
``hqueue.Queue.create_subscriber`` and :func:`subscriber_runtime.create_subscriber` all take
``**options: Unpack[SubscriberOptions]``, so the type checker checks each keyword's name and type
at every call, and each default is in :data:`DEFAULTS` (``hqueue-subscriber``'s flags take theirs
from there too).

Imports nothing of gevent, ssl or the client at run time: ``hqueue-subscriber`` reads
:data:`DEFAULTS` before it monkey-patches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # the process reads DEFAULTS before it patches: no ssl, no client yet
    import ssl

    from hqueue.tls import TLSOption


class SubscriberOptions(TypedDict, total=False):
    """Each option is optional; one left out takes its value in :data:`DEFAULTS`."""

    host: str
    """The address its ``HQueueSubscriberService`` listens on."""
    port: int
    """The port it listens on; 0: a free one."""
    advertise_host: str | None
    """The host the gateway connects to; None: ``host``."""
    zookeeper: str | None
    """Register in ZooKeeper at ``host:port/chroot`` (the gateway's); None: through the gateway,
    with a lease. ``Queue.create_subscriber``'s None is the queue's ``zookeeper``."""
    session_timeout: float
    """Its ZooKeeper session timeout, in seconds."""
    lease_seconds: int
    """The lease when registered through the gateway, in seconds (renewed every third)."""
    grace: float
    """Seconds ``stop()`` lets batches being handled finish (one cut short comes again)."""
    tls: TLSOption
    """How to connect to the gateway (see :func:`hqueue.protocol.connect`);
    ``Queue.create_subscriber``'s None is its connection's TLS."""
    server_tls: ssl.SSLContext | None
    """Serve ``consumeMessages`` over TLS with this server-side context
    (:func:`hqueue.tls.server_context`; the gateway then needs ``--tls-ca``)."""


DEFAULTS: SubscriberOptions = {
    "host": "127.0.0.1",
    "port": 0,
    "advertise_host": None,
    "zookeeper": None,
    "session_timeout": 10.0,
    "lease_seconds": 10,
    "grace": 10.0,
    "tls": None,
    "server_tls": None,
}


def resolved(caller: str, options: SubscriberOptions) -> SubscriberOptions:
    """``options`` over :data:`DEFAULTS`; a keyword that is not an option is a TypeError, as
    Python raises it for a function with explicit keywords (``**options`` would take it)."""
    unknown = options.keys() - DEFAULTS.keys()
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {min(unknown)!r}")
    return {**DEFAULTS, **options}
