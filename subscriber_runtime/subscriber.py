"""A Subscriber: serves HQueueSubscriberService, registers, and hands batches to listeners.

Lifecycle (documented order, like nameko's containers):

- ``start()``: bind the port (given, or a free one), start serving, then register, so the
  gateway never pushes to an address that does not answer yet.
- ``stop(reason)``: unregister first (the gateway stops pushing and writes the checkpoints of
  what was acknowledged), then stop accepting, let batches being handled finish (up to
  ``grace`` seconds; a batch cut short is delivered again), then close the listeners.
- ``kill()``: stop at once without unregistering; the registration ends by itself (ZooKeeper
  session closed, or lease expiry) and unacknowledged batches are delivered again.

It runs on gevent: the process entry point (``hqueue-subscriber``) monkey-patches; a program
using it as a library must call ``gevent.monkey.patch_all()`` first thing, and wait with
``subscriber.wait()`` or gevent-friendly sleeps.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable, Sequence
from typing import Any

import gevent
import gevent.event
import gevent.lock
from hqueue.tls import client_context

from .listeners import call_listener
from .registration import GatewayRegistration, Registration, ZooKeeperRegistration
from .server import STATUS_FAILED, STATUS_OK, STATUS_STOPPING, SubscriberServer
from .subscription import Subscription

log = logging.getLogger(__name__)


class Subscriber:
    def __init__(
        self,
        gateway: str,
        queue: str,
        subscription: Subscription,
        listeners: Sequence[Any],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise_host: str | None = None,
        zookeeper: str | None = None,
        session_timeout: float = 10.0,
        lease_seconds: int = 10,
        grace: float = 10.0,
        tls: Any = None,
        server_tls: ssl.SSLContext | None = None,
    ) -> None:
        """``tls``: how to connect to the gateway (see :func:`hqueue.protocol.connect`);
        ``server_tls``: serve consumeMessages over TLS with this server-side context
        (:func:`hqueue.tls.server_context`; the gateway then needs ``--tls-ca``)."""
        if not listeners:
            raise ValueError("'listeners' must hold at least one MessageListener")
        self.gateway = gateway
        self.queue = queue
        self.subscription = subscription
        self.listeners = list(listeners)
        self.host = host
        self.port = port
        self.advertise_host = advertise_host or host
        self.zookeeper = zookeeper
        self.session_timeout = session_timeout
        self.lease_seconds = lease_seconds
        self.grace = grace  # seconds
        self.tls = client_context(tls)
        self.server_tls = server_tls
        self.received = 0  # messages acknowledged
        self.failed_batches = 0
        self._server: SubscriberServer | None = None
        self._registration: Registration | None = None
        self._stopping = False
        self._stopped = gevent.event.Event()
        self._partition_locks: dict[int, gevent.lock.Semaphore] = {}

    @property
    def address(self) -> str:
        """host:port the gateway pushes to (after ``start()``)."""
        assert self._server is not None, "start() the subscriber first"
        return f"{self.advertise_host}:{self._server.address[1]}"

    def consume(self, messages: list[Any]) -> int:
        """The consumeMessages handler: every listener in order; non-zero on any failure.

        Batches of one partition are handled one at a time: after the gateway restarts a
        worker, a batch still in progress on the old connection finishes before the first
        one of the new connection (which may deliver some of it again) starts."""
        if self._stopping:
            return STATUS_STOPPING
        if not messages:
            return STATUS_OK
        partition = messages[0].partitionID
        lock = self._partition_locks.get(partition)
        if lock is None:
            lock = self._partition_locks[partition] = gevent.lock.Semaphore()
        with lock:
            return self._call_listeners(messages)

    def _call_listeners(self, messages: list[Any]) -> int:
        for listener in self.listeners:
            try:
                ok = call_listener(listener, messages)
            except Exception:
                log.exception("listener %r failed; the batch will be delivered again", listener)
                ok = False
            if not ok:
                self.failed_batches += 1
                return STATUS_FAILED
        self.received += len(messages)
        return STATUS_OK

    def start(self) -> Subscriber:
        self._server = SubscriberServer(self.consume, self.host, self.port, self.server_tls)
        self._server.start()
        if self.zookeeper:
            self._registration = ZooKeeperRegistration(
                self.zookeeper,
                self.gateway,
                self.queue,
                self.subscription,
                self.address,
                session_timeout=self.session_timeout,
                tls=self.tls,
            )
        else:
            self._registration = GatewayRegistration(
                self.gateway,
                self.queue,
                self.subscription,
                self.address,
                lease_seconds=self.lease_seconds,
                tls=self.tls,
            )
        try:
            self._registration.start()
        except Exception:
            self._server.stop(grace=0)
            raise
        log.info("subscriber %s of %s serving at %s", self.subscription.name, self.queue,
                 self.address)  # fmt: skip
        return self

    def stop(self, reason: str = "stopped") -> None:
        if self._stopped.is_set():
            return
        log.info("stopping subscriber %s: %s", self.subscription.name, reason)
        if self._registration is not None:
            self._registration.stop()
        if self._server is not None:
            self._server.stop(self.grace)
        self._stopping = True
        self._close_listeners()
        self._stopped.set()

    def kill(self) -> None:
        if self._stopped.is_set():
            return
        self._stopping = True
        if self._server is not None:
            self._server.stop(grace=0)
        if self._registration is not None:
            self._registration.abandon()
        self._close_listeners()
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks (cooperatively) until stopped or killed; True if it was."""
        return self._stopped.wait(timeout)

    def _close_listeners(self) -> None:
        for listener in self.listeners:
            close = getattr(listener, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    log.exception("closing listener %r failed", listener)


class Queue:
    """The subscription side of a queue (seed 4.4: ``queue.createSubscriber(...)``)."""

    def __init__(self, name: str, gateway: str, *, zookeeper: str | None = None) -> None:
        self.name = name
        self.gateway = gateway
        self.zookeeper = zookeeper

    def create_subscriber(
        self, subscription: Subscription, listeners: Iterable[Any], **options: Any
    ) -> Subscriber:
        """A Subscriber, not started yet; ``options`` as :class:`Subscriber` takes them."""
        options.setdefault("zookeeper", self.zookeeper)
        return Subscriber(self.gateway, self.name, subscription, list(listeners), **options)

    def close(self) -> None:
        """Nothing to release: each subscriber owns its connections."""


def create_subscriber(
    gateway: str,
    queue: str,
    subscription: Subscription,
    listeners: Iterable[Any],
    **options: Any,
) -> Subscriber:
    return Subscriber(gateway, queue, subscription, list(listeners), **options)
