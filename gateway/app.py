"""The gateway assembled: store, scanner registry, service, push workers, Thrift server.

``start()`` opens the store, starts background work and binds the port; ``stop()`` undoes it
in reverse order: no new requests, in-flight calls finish, push workers stop and write their
checkpoints, the subscription registry closes, then the store is synced and closed.
"""

from __future__ import annotations

import logging
import signal
import socket
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
from gevent.pywsgi import WSGIServer
from hqueue_contract.protocol import hqueue_thrift

from .auth import AdminPolicy, GuardedHandler
from .boundary import GatewayProcessor
from .cluster.member import Hooks
from .config import GatewayConfig
from .httpd import metrics_app, serve_wsgi
from .keys import MessageExtras
from .metrics import GatewayStats
from .monitor import Monitor
from .scanners import ScannerRegistry
from .server import ThriftServer, WireOptions
from .service import GatewayService, ServiceLimits
from .store.base import PartitionStore
from .store.embedded import EmbeddedStore
from .store.memory import MemoryStore
from .subscriptions.embedded_registry import EmbeddedRegistry
from .subscriptions.registry import SubscriptionRegistry
from .subscriptions.retry import DeadLetterWriter
from .subscriptions.service import SubscriptionService
from .subscriptions.workers import WorkerManager
from .tls import client_context, server_context
from .wire import RequestLimits

if TYPE_CHECKING:
    from .cluster.exclusive import NamespaceLease
    from .cluster.forward import Forwarder
    from .cluster.member import ClusterMember

log = logging.getLogger("gateway")


class Gateway:
    def __init__(self, config: GatewayConfig, store: PartitionStore | None = None) -> None:
        self.config = config
        self.store = store or open_store(config)
        self.scanners = ScannerRegistry(
            idle_timeout=config.scanner_timeout,
            max_open=config.max_scanners,
            max_partitions=config.max_scanner_partitions,
            max_bytes=config.max_scanner_bytes,
        )
        self.service: GatewayService | None = None
        self.push: WorkerManager | None = None
        self.extras: MessageExtras | None = None
        self.server: ThriftServer | None = None
        self.stats: GatewayStats | None = None
        self.monitor: Monitor | None = None
        self.http: dict[str, WSGIServer] = {}  # "metrics" / "console" -> listener
        self.cluster: ClusterMember | None = None
        self.forwarder: Forwarder | None = None
        self.namespace_lease: NamespaceLease | None = None
        self.admin_policy = AdminPolicy()  # from the config in start()
        self._stopped = gevent.event.Event()
        self._stop_requested = gevent.event.Event()

    def start(self) -> None:
        thrift = hqueue_thrift()
        # TLS files and admin lists are checked before anything starts
        policy = self.admin_policy = AdminPolicy.from_options(
            self.config.admin_identities, self.config.admin_token_file
        )
        server_tls = server_context(self.config.tls) if self.config.tls.serving else None
        push = self.config.push
        if self.config.tls.connecting:  # push to subscribers over TLS
            sender = replace(push.sender, tls=client_context(self.config.tls))
            push = replace(push, sender=sender)
        self.store.start()
        self.scanners.start()
        try:
            # the registry first: connecting to ZooKeeper may take a while, and no request
            # should arrive before the service can answer it
            registry = self._registry()
            self.push = WorkerManager(self.store, registry, push)
            if self.config.metrics_port is not None or self.config.console_port is not None:
                self.stats = GatewayStats()
                self.push.stats = self.stats
                if isinstance(self.store, EmbeddedStore):
                    self.store.on_log_sync = self.stats.log_synced
            self.server = ThriftServer(
                None,
                self.config.host,
                self.config.port,
                WireOptions(
                    self.config.framed,
                    self.config.compact,
                    RequestLimits.for_batches(
                        self.config.max_request_bytes,
                        self.config.max_value_bytes,
                        self.config.max_batch_messages,
                    ),
                    request_timeout=self.config.request_timeout,
                    send_timeout=self.config.send_timeout,
                    max_pending_bytes=self.config.max_pending_request_bytes,
                    max_reply_bytes=self.config.max_reply_bytes,
                    put_window=self.config.put_window,
                ),
                tls=server_tls,
            )
            self.server.on_close = lambda caller: self.scanners.drop_owner(caller.id)
            self.server.start()
            host, port = self.server.address
            advertise = self.config.advertise or f"{_reachable(self.config.host)}:{port}"
            self.service = GatewayService(
                self.store,
                self.scanners,
                thrift,
                advertise=advertise,
                limits=ServiceLimits(
                    max_value_bytes=self.config.max_value_bytes,
                    max_batch_messages=self.config.max_batch_messages,
                ),
            )
            self.service.encoded_replies = not self.config.compact
            processor = GatewayProcessor(
                thrift,
                thrift.HQueueService,
                GuardedHandler(self.service, policy),
                binary=not self.config.compact,
                max_value_bytes=self.config.max_value_bytes,
            )
            # issue 13: message keys/properties, and dead letters written through the service
            self.extras = MessageExtras(self.store)
            self.extras.start()
            self.service.extras = self.extras
            self.service.subscriptions = SubscriptionService(
                self.store, registry, thrift, self.push, self.extras
            )
            self.service.subscriptions.subscriber_hosts = frozenset(self.config.subscriber_hosts)
            self.service.after_put = self.push.notify_put
            self.push.dead_letter = DeadLetterWriter(
                self.store, self.service.put_internal, self.extras
            )
            self._guard_namespace(advertise)
            if self.config.clustered:
                self._join_cluster(thrift, advertise)
            self.push.start()
            self.server.processor = processor
            if self.stats is not None:
                self.service.stats = processor.stats = self.stats
                self._start_http()
        except Exception:
            self._stop_http()
            if self.server is not None:
                self.server.stop(grace=0)
            if self.cluster is not None:
                self.cluster.stop()
            if self.push is not None:
                self.push.stop()
            if self.namespace_lease is not None:
                self.namespace_lease.stop()
            self.scanners.stop()
            self.store.stop()
            raise
        if policy.tokens is not None and server_tls is None:
            log.warning("admin tokens cross the network in the clear: serve TLS (--tls-cert)")
        if policy.identities is not None and not self.config.tls.mutual:
            log.warning("--admin-identities needs --tls-client-ca: no client has an identity")
        log.info(
            "serving HQueueService on %s:%d (%s, %s), data in %s, advertised as %s",
            host,
            port,
            "framed" if self.config.framed else "buffered",
            ("compact" if self.config.compact else "binary")
            + (", TLS" if server_tls else "")
            + (", client certificates required" if self.config.tls.mutual else ""),
            self.config.data_dir if self.config.store == "embedded" else self.config.store,
            advertise,
        )

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._stop_http()
        if self.cluster is not None:
            # hand every partition over while still serving: in-flight puts finish here,
            # later ones are forwarded to the new owners
            self.cluster.stop()
        if self.server is not None:
            self.server.stop()
        if self.forwarder is not None:
            self.forwarder.close()
        if self.namespace_lease is not None:
            self.namespace_lease.stop()
        if self.push is not None:
            self.push.stop()
        if self.extras is not None:
            self.extras.stop()
        self.scanners.stop()
        self.store.stop()
        log.info("stopped")

    def _start_http(self) -> None:
        """The monitor, then the metrics and console listeners that read it."""
        assert self.stats is not None and self.service is not None and self.server is not None
        service, server, stats = self.service, self.server, self.stats
        self.monitor = Monitor(
            self.store, stats, lambda: service.subscriptions, interval=self.config.stats_interval
        )
        self.monitor.start()
        if self.config.metrics_port is not None:

            def gauges() -> dict[str, object]:
                queues = {m.name: m.partitions for m in self.store.list_queues()}
                if self.cluster is not None:  # what this member owns right now
                    for name in queues:
                        stats.set_partitions_owned(name, len(self.cluster.owned(name)))
                live = {
                    "queues": queues,
                    "open_scanners": len(self.scanners),
                    "open_connections": server.open_connections,
                    "connections_accepted": server.accepted,
                    "scanner_bytes": self.scanners.meter.used,
                    "reply_bytes": server.replies.used,
                }
                cache = getattr(self.store, "block_cache_bytes", None)  # the embedded store's
                if cache is not None:
                    live["block_cache_bytes"] = cache()
                return live

            self.http["metrics"] = serve_wsgi(
                metrics_app(stats, gauges), self.config.host, self.config.metrics_port, "metrics"
            )
        if self.config.console_port is not None:
            from .console import create_app
            from .console.auth import policy_authorize
            from .console.data import ConsoleData

            policy = self.admin_policy
            app = create_app(
                ConsoleData(service, stats, self.monitor),
                policy_authorize(policy),
                token_field=bool(policy.tokens),
            )
            self.http["console"] = serve_wsgi(
                app, self.config.host, self.config.console_port, "the console"
            )

    def _stop_http(self) -> None:
        for server in self.http.values():
            server.stop(timeout=2)
        self.http.clear()
        if self.monitor is not None:
            self.monitor.stop()

    def _guard_namespace(self, advertise: str) -> None:
        """Over HBase: a lone gateway leases its namespace; a cluster marks it (never two
        writers that do not know of each other)."""
        from .store.hbase import HBaseStore

        if not isinstance(self.store, HBaseStore):
            return
        from .cluster.exclusive import NamespaceLease

        lease = NamespaceLease(
            self.store.meta_table,
            mode="cluster" if self.config.clustered else "single",
            advertise=advertise,
            namespace=self.store.address.namespace,
            zookeeper=self.config.zookeeper or "",
        )
        lease.acquire()
        self.namespace_lease = lease
        if self.config.clustered:
            lease.start_renewing(when=lambda: self.cluster is not None and self.cluster.is_leader())
        else:
            lease.start_renewing()
            self.store.guard = lambda _queue, _partition: lease.check()

    def _join_cluster(self, thrift: Any, advertise: str) -> None:
        from .cluster.forward import Forwarder
        from .cluster.member import ClusterMember, ClusterOptions

        assert self.service is not None and self.push is not None
        self.push.owns = lambda queue, partition: bool(
            self.cluster and self.cluster.owns(queue, partition)
        )
        self.forwarder = Forwarder(
            thrift,
            framed=self.config.framed,
            compact=self.config.compact,
            tls=client_context(self.config.tls),  # --tls-ca: forward over TLS
        )
        self.cluster = ClusterMember(
            ClusterOptions(
                zookeeper=self.config.zookeeper or "",
                advertise=advertise,
                session_timeout=self.config.zookeeper_session_timeout,
                move_wait=self.config.cluster_move_wait,
            ),
            _Hooks(self),
        )
        self.service.forwarder = self.forwarder
        self.service.cluster = self.cluster
        if self.service.subscriptions is not None:  # pulls and acks through any gateway
            from .cluster.pulls import cluster_pulls

            self.service.subscriptions.cluster = cluster_pulls(
                self.cluster, self.service.subscriptions, self.forwarder, thrift
            )
        self.store.guard = self.cluster.guard  # type: ignore[attr-defined]
        self.cluster.start()

    def _registry(self) -> SubscriptionRegistry:
        if self.config.zookeeper:
            from .subscriptions.zk_registry import ZooKeeperRegistry

            return ZooKeeperRegistry(
                self.config.zookeeper, session_timeout=self.config.zookeeper_session_timeout
            )
        return EmbeddedRegistry(self.store)

    def run_until_signal(self) -> None:
        def on_signal(signum: int) -> None:
            log.info("received %s, shutting down", signal.Signals(signum).name)
            self._stop_requested.set()

        gevent.signal_handler(signal.SIGTERM, on_signal, signal.SIGTERM)
        gevent.signal_handler(signal.SIGINT, on_signal, signal.SIGINT)
        self._stop_requested.wait()
        self.stop()


class _Hooks(Hooks):
    """What the cluster changes in this gateway when partitions come and go."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def gained(self, queue: str, partition: int, floor_ms: int) -> None:
        assert self.gateway.service is not None and self.gateway.push is not None
        self.gateway.service.own(queue, partition, floor_ms)
        self.gateway.push.changed(queue, None)

    def lost(self, queue: str, partition: int) -> None:
        assert self.gateway.service is not None and self.gateway.push is not None
        self.gateway.service.disown(queue, partition)
        self.gateway.push.reconcile_queue(queue)  # workers stop, checkpoint written

    def queues(self) -> dict[str, int]:
        return {m.name: m.partitions for m in self.gateway.store.list_queues()}


def open_store(config: GatewayConfig) -> PartitionStore:
    """The store ``config.store`` names: ``embedded`` (default), ``memory`` or ``hbase://...``."""
    if config.store == "memory":
        return MemoryStore()  # nothing survives a restart: for tests and demos
    if config.store == "embedded":
        return EmbeddedStore(
            config.data_dir,
            ttl_sweep_interval=config.ttl_sweep_interval,
            log_segment_bytes=config.log_segment_bytes,
            direct_io=config.direct_io,
            block_cache_bytes=config.block_cache_bytes,
        )
    from .store.hbase import HBaseStore  # happybase is only needed for this backend
    from .store.hbase_schema import HBaseAddress

    return HBaseStore(HBaseAddress.parse(config.store))


def _reachable(host: str) -> str:
    """A name clients can connect to when listening on every interface."""
    if host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return host
