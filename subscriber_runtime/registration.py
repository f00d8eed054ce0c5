"""How a subscriber makes itself known: directly in ZooKeeper, or through the gateway.

:class:`ZooKeeperRegistration` (seed 3.5.2's SubscriberZooKeeper) writes the subscriber's record
and its ephemeral ``address`` and ``topics`` nodes with its own session; when that session is
lost (expired while the process was frozen or cut off) kazoo connects with a new one and the
ephemeral nodes are created again. :class:`GatewayRegistration` calls the gateway's
``subscribe`` and renews the lease it gets; a failed renewal (lease expired, gateway restarted)
subscribes again. Either way, only the first registration applies the subscription's start
positions: registering again resumes from the stored checkpoints.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import time
from typing import Any

import gevent
from hqueue.connection import Connection
from hqueue_contract import registry as layout
from hqueue_contract import zk

from .subscription import Subscription

log = logging.getLogger(__name__)


class Registration(abc.ABC):
    @abc.abstractmethod
    def start(self) -> None:
        """Registers; raises if it cannot."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Unregisters cleanly (the gateway stops pushing)."""

    @abc.abstractmethod
    def abandon(self) -> None:
        """Drops the registration without telling anyone (``Subscriber.kill``)."""


Gateways = list[tuple[str, int]]  # as hqueue.connection.gateway_addresses returns them


def partition_count(gateways: Gateways, queue: str, timeout: float = 10.0, tls: Any = None) -> int:
    with Connection(gateways, timeout=timeout, tls=tls) as conn:
        return len(conn.call("getQueueLocations", queue.encode()))


class GatewayRegistration(Registration):
    """Registers through the gateways (the first that answers; another one when it fails)."""

    def __init__(
        self,
        gateways: Gateways,
        queue: str,
        subscription: Subscription,
        address: str,
        *,
        lease_seconds: int = 10,
        tls: Any = None,
    ) -> None:
        self.tls = tls  # for the connection to the gateway: see hqueue.protocol.connect
        self.gateways = gateways
        self.queue = queue
        self.subscription = subscription
        self.address = address
        self.lease_seconds = lease_seconds
        self.lease: int | None = None
        self._conn = Connection(gateways, timeout=max(5.0, lease_seconds), tls=tls)
        self._renewer: gevent.Greenlet | None = None

    def _call(self, method: str, *args: Any) -> Any:
        """A gateway call; errors are hqueue's (InvalidArgument, ServerError, TransportError).
        After a failure the connection is opened again, to the next gateway that answers."""
        try:
            return self._conn.call(method, *args)
        except Exception:
            self._drop_client()
            raise

    def _drop_client(self) -> None:
        self._conn.close()

    def _subscribe(self, first: bool) -> None:
        self.lease = self._call(
            "subscribe",
            self.queue.encode(),
            self.subscription.to_thrift(with_starts=first),
            self.address.encode(),
            self.lease_seconds,
        )
        log.info("registered %s/%s at %s through the gateway (lease %d s)",
                 self.queue, self.subscription.name, self.address, self.lease_seconds)  # fmt: skip

    def start(self) -> None:
        self._subscribe(first=True)
        self._renewer = gevent.spawn(self._renew_loop)

    def _renew_loop(self) -> None:
        interval = self.lease_seconds / 3
        while True:
            gevent.sleep(interval)
            try:
                renewed = self.lease is not None and self._call(
                    "renewSubscription", self.queue.encode(), self.subscription.name.encode(),
                    self.lease,
                )  # fmt: skip
                if not renewed:
                    log.warning("lease of %s/%s is gone; subscribing again",
                                self.queue, self.subscription.name)  # fmt: skip
                    self._subscribe(first=False)
            except gevent.GreenletExit:
                raise
            except Exception as exc:
                log.warning("renewing the subscription failed (%s: %s); retrying",
                            type(exc).__name__, exc)  # fmt: skip
                interval = min(1.0, self.lease_seconds / 3)
                continue
            interval = self.lease_seconds / 3

    def stop(self) -> None:
        if self._renewer is not None:
            self._renewer.kill()
        if self.lease is not None:
            try:
                self._call(
                    "unsubscribe", self.queue.encode(), self.subscription.name.encode(), self.lease
                )
            except Exception as exc:
                log.warning("unsubscribing failed (%s); the lease will expire", exc)
        self._drop_client()

    def abandon(self) -> None:
        if self._renewer is not None:
            self._renewer.kill()
        self._drop_client()


class ZooKeeperRegistration(Registration):
    def __init__(
        self,
        hosts: str,
        gateways: Gateways,
        queue: str,
        subscription: Subscription,
        address: str,
        *,
        session_timeout: float = 10.0,
        tls: Any = None,
    ) -> None:
        self.tls = tls  # for the connection to the gateway
        self.hosts = hosts
        self.gateways = gateways
        self.queue = queue
        self.subscription = subscription
        self.address = address
        self.session_timeout = session_timeout
        self.path = layout.subscriber_path(queue, subscription.name)
        self.zk: Any = None
        self._lost = False
        self._stopping = False
        self._registering = False
        self._again = False
        self._partitions: int | None = None

    def start(self) -> None:
        from kazoo.protocol.states import KazooState

        self._partitions = partition_count(self.gateways, self.queue, tls=self.tls)
        self.zk = zk.connect(self.hosts, timeout=self.session_timeout)
        self._register(first=True)

        def on_state(state: str) -> None:  # runs in kazoo's greenlet: never block
            if state == KazooState.LOST:
                log.warning("ZooKeeper session lost; will register again when reconnected")
                self._lost = True
            elif state == KazooState.CONNECTED and self._lost and not self._stopping:
                self._lost = False
                gevent.spawn(self._register_again)

        self.zk.add_listener(on_state)

    def _register_again(self) -> None:
        """Registers again (no starts), once at a time: a lost session and the deletion of
        our ``address`` often come together, and two registrations at once would delete each
        other's nodes. A request that arrives meanwhile makes the running one go round again."""
        self._again = True
        if self._registering:
            return
        self._registering = True
        try:
            delay = 0.1
            while self._again and not self._stopping:
                self._again = False
                try:
                    self._register(first=False)
                except Exception as exc:
                    self._again = True
                    log.warning("registering again failed (%s: %s); retrying",
                                type(exc).__name__, exc)  # fmt: skip
                    gevent.sleep(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            self._registering = False

    def _register(self, first: bool) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        assert self._partitions is not None
        requested = (
            dict(self.subscription.partitions)
            if first
            else {p: None for p in self.subscription.partitions}
        )
        self.zk.ensure_path(layout.subscribers_path(self.queue))
        while True:  # read-modify-write the record, conditional on its version
            try:
                data, stat = self.zk.get(self.path)
                existing = layout.SubscriberRecord.decode(data)
            except NoNodeError:
                stat, existing = None, None
            record = layout.resolve(
                existing,
                requested,
                self._partitions,
                _now_ms(),
                self.subscription.topics,
                retry=self.subscription.retry,
                max_batch=self.subscription.max_batch,
                shared=self.subscription.shared,
            )
            try:
                if stat is None:
                    self.zk.create(self.path, record.encode())
                elif record.encode() != data:
                    self.zk.set(self.path, record.encode(), stat.version)
                break
            except (NodeExistsError, BadVersionError):
                continue
        if self.subscription.shared:
            self._join_group()
            return
        # A previous process of ours may still hold the ephemerals until its session expires:
        # delete those. Our own session's nodes, when both exist, mean we are registered.
        session = self.zk.client_id[0]
        ours = []
        for child in ("address", "topics"):
            node = f"{self.path}/{child}"
            stat = self.zk.exists(node)
            if stat is not None and stat.ephemeralOwner == session:
                ours.append(node)
            elif stat is not None:
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(node)
        if len(ours) == 2:
            self.zk.exists(f"{self.path}/address", watch=self._address_event)
            return
        for node in ours:  # half of a registration: start over
            with contextlib.suppress(NoNodeError):
                self.zk.delete(node)
        tx = self.zk.transaction()
        tx.create(
            f"{self.path}/topics", layout.encode_topics(sorted(self.subscription.topics)),
            ephemeral=True,
        )  # fmt: skip
        tx.create(f"{self.path}/address", self.address.encode(), ephemeral=True)
        failed = [r for r in tx.commit() if isinstance(r, Exception)]
        if failed:
            raise failed[0]
        log.info("registered %s in ZooKeeper (session 0x%x) at %s",
                 self.path, self.zk.client_id[0], self.address)  # fmt: skip
        self.zk.exists(f"{self.path}/address", watch=self._address_event)

    @property
    def member_path(self) -> str:
        return f"{self.path}/members/{self.address}"

    def _join_group(self) -> None:
        """A consumer-group member: the ephemeral ``members/<address>`` node of our session,
        as the gateway writes for a member that subscribes through it (its address is its
        member id); the gateways' watch on ``members/`` divides the partitions again."""
        import json

        from kazoo.exceptions import NodeExistsError, NoNodeError

        with contextlib.suppress(NodeExistsError):
            self.zk.create(f"{self.path}/members")
        for member in self.zk.get_children(f"{self.path}/members"):
            with contextlib.suppress(NoNodeError):
                data, _ = self.zk.get(f"{self.path}/members/{member}")
                if data and json.loads(data).get("address") is None:
                    raise ValueError(
                        f"group '{self.subscription.name}' has pull members; push and pull "
                        "members cannot be mixed"
                    )
        node = self.member_path
        stat = self.zk.exists(node)
        if stat is not None and stat.ephemeralOwner == self.zk.client_id[0]:
            self.zk.exists(node, watch=self._address_event)
            return
        with contextlib.suppress(NoNodeError):  # a previous process of ours, not expired yet
            self.zk.delete(node)
        data = json.dumps(
            {
                "address": self.address,
                "topics": sorted(t.decode("latin-1") for t in self.subscription.topics),
            }
        ).encode()
        self.zk.create(node, data, ephemeral=True)
        log.info("joined group %s in ZooKeeper (session 0x%x) at %s",
                 self.path, self.zk.client_id[0], self.address)  # fmt: skip
        self.zk.exists(node, watch=self._address_event)

    def _address_event(self, event: Any) -> None:
        """Our ``address`` (or group ``members/<address>``) node was deleted by someone else
        (``delete_subscriber``, or a second process with our name): register again, as a
        lease-based subscriber does."""
        from kazoo.protocol.states import EventType, KazooState

        if (
            event.type == EventType.DELETED
            and not self._stopping
            and self.zk.state == KazooState.CONNECTED
        ):
            log.warning("%s was deleted; registering again", event.path)
            gevent.spawn(self._register_again)

    def stop(self) -> None:
        self._stopping = True
        if self.zk is None:
            return
        from kazoo.exceptions import NoNodeError

        nodes = (
            [self.member_path]
            if self.subscription.shared
            else [f"{self.path}/{child}" for child in ("address", "topics")]
        )
        for node in nodes:
            try:
                self.zk.delete(node)
            except NoNodeError:
                pass
            except Exception as exc:
                log.warning("deleting %s failed: %s", node, exc)
        self.zk.stop()
        self.zk.close()

    def abandon(self) -> None:
        self._stopping = True
        if self.zk is not None:
            self.zk.stop()  # the session ends, and with it the ephemeral nodes
            self.zk.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
