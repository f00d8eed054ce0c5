"""Connecting to ZooKeeper (kazoo) under gevent, with an optional chroot that is created first.

kazoo does not create the chroot of ``host:port/chroot``; we connect without it once to make
sure it exists, so each deployment (or each test) can use its own namespace.
"""

from __future__ import annotations

from typing import Any


def split_hosts(hosts: str) -> tuple[str, str]:
    """``h1:p1,h2:p2/chroot`` -> (``h1:p1,h2:p2``, ``/chroot`` or '')."""
    servers, sep, chroot = hosts.partition("/")
    if not servers:
        raise ValueError(f"'zookeeper' must be HOST:PORT[,HOST:PORT...][/chroot], got {hosts!r}")
    return servers, (sep + chroot).rstrip("/") if chroot else ""


def connect(hosts: str, *, timeout: float = 10.0, connect_timeout: float = 15.0) -> Any:
    """A started KazooClient with the gevent handler; ``timeout`` is the session timeout and
    ``connect_timeout`` how long to wait for the first connection, both in seconds."""
    from kazoo.client import KazooClient
    from kazoo.handlers.gevent import SequentialGeventHandler

    servers, chroot = split_hosts(hosts)
    if chroot:
        bootstrap = KazooClient(hosts=servers, handler=SequentialGeventHandler(), timeout=timeout)
        bootstrap.start(timeout=connect_timeout)
        try:
            bootstrap.ensure_path(chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()
    client = KazooClient(hosts=servers + chroot, handler=SequentialGeventHandler(), timeout=timeout)
    client.start(timeout=connect_timeout)
    return client
