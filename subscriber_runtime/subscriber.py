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
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import gevent
import gevent.event
import gevent.lock
from hqueue.connection import Connection, gateway_addresses
from hqueue.errors import InvalidArgument
from hqueue.queue import Queue as HQueue
from hqueue.tls import client_context
from hqueue_contract.protocol import Address

from .listeners import Listener, Messages, call_listener
from .options import SubscriberOptions, resolved
from .registration import GatewayRegistration, Registration, ZooKeeperRegistration
from .server import STATUS_FAILED, STATUS_OK, STATUS_STOPPING, SubscriberServer
from .subscription import Subscription

if TYPE_CHECKING:
    # in typing since 3.11; typing_extensions (which type checkers ship with) for 3.10, and
    # only for the checker: no runtime dependency
    from typing_extensions import Unpack

log = logging.getLogger(__name__)


class Subscriber:
    """Receives the pushes of one subscription of ``queue`` and hands them to ``listeners``.

    ``gateway``: where it registers, as :class:`hqueue.Connection` takes it: ``"host:port"``,
    ``(host, port)``, or several (a list, or ``"h1:p1,h2:p2"``) tried in order. Bad arguments
    raise :class:`hqueue.InvalidArgument` naming them."""

    def __init__(
        self,
        gateway: Address | Sequence[Address],
        queue: str,
        subscription: Subscription,
        listeners: Sequence[Listener],
        **options: Unpack[SubscriberOptions],
    ) -> None:
        """``options``: see :class:`~subscriber_runtime.options.SubscriberOptions`."""
        o = resolved("Subscriber", options)
        port = o["port"]
        self.gateways = gateway_addresses(gateway, argument="gateway")
        if not isinstance(queue, str) or not queue:
            raise InvalidArgument("queue", f"must be a queue name (str), got {queue!r}")
        if not isinstance(subscription, Subscription):
            raise InvalidArgument(
                "subscription", f"must be a Subscription, got {type(subscription).__name__}"
            )
        if isinstance(listeners, (str, bytes)) or not listeners:
            raise InvalidArgument("listeners", "must hold at least one MessageListener")
        for i, listener in enumerate(listeners):
            if not callable(getattr(listener, "on_messages", None)) and not callable(listener):
                raise InvalidArgument(
                    f"listeners[{i}]", f"must have on_messages() or be callable, got {listener!r}"
                )
        if not 0 <= port <= 65535:
            raise InvalidArgument("port", f"must be 0..65535, got {port}")
        self.queue = queue
        self.subscription = subscription
        self.listeners = list(listeners)
        self.host = o["host"]
        self.port = port
        self.advertise_host = o["advertise_host"] or self.host
        self.zookeeper = o["zookeeper"]
        self.session_timeout = o["session_timeout"]
        self.lease_seconds = o["lease_seconds"]
        self.grace = o["grace"]  # seconds
        self.tls = client_context(o["tls"])
        self.server_tls = o["server_tls"]
        self.received = 0  # messages acknowledged
        self.failed_batches = 0
        self._server: SubscriberServer | None = None
        self._registration: Registration | None = None
        self._stopping = False
        self._stopped = gevent.event.Event()
        self._partition_locks: dict[int | None, gevent.lock.Semaphore] = {}

    @property
    def gateway(self) -> str:
        """The gateway addresses as ``host:port[,host:port...]``."""
        return ",".join(f"{h}:{p}" for h, p in self.gateways)

    @property
    def address(self) -> str:
        """host:port the gateway pushes to (after ``start()``)."""
        assert self._server is not None, "start() the subscriber first"
        return f"{self.advertise_host}:{self._server.address[1]}"

    def consume(self, messages: Messages) -> int:
        """The consumeMessages handler: every listener in order; non-zero on any failure.

        Batches of one partition are handled one at a time: after the gateway restarts a
        worker, a batch still in progress on the old connection finishes before the first
        one of the new connection (which may deliver some of it again) starts."""
        if self._stopping:
            return STATUS_STOPPING
        if not messages:
            return STATUS_OK
        partition = messages[0].partition
        lock = self._partition_locks.get(partition)
        if lock is None:
            lock = self._partition_locks[partition] = gevent.lock.Semaphore()
        with lock:
            return self._call_listeners(messages)

    def _call_listeners(self, messages: Messages) -> int:
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
                self.gateways,
                self.queue,
                self.subscription,
                self.address,
                session_timeout=self.session_timeout,
                tls=self.tls,
            )
        else:
            self._registration = GatewayRegistration(
                self.gateways,
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


def Queue(
    name: str, gateway: Address | Sequence[Address], *, zookeeper: str | None = None
) -> HQueue:
    """``hqueue.Connection(gateway).queue(name, zookeeper=zookeeper)``: the one
    :class:`hqueue.Queue` class, whose ``create_subscriber`` registers in ``zookeeper`` when
    given. (This was a class of the runtime's own; programs written against it keep working.)"""
    return Connection(gateway).queue(name, zookeeper=zookeeper)


def create_subscriber(
    gateway: Address | Sequence[Address],
    queue: str,
    subscription: Subscription,
    listeners: Iterable[Listener],
    **options: Unpack[SubscriberOptions],
) -> Subscriber:
    """A :class:`Subscriber`, not started yet (the arguments are its own)."""
    return Subscriber(gateway, queue, subscription, list(listeners), **options)
