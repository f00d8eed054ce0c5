"""``hqueue-gateway``: runs the gateway in the foreground until SIGTERM or SIGINT.

Shutdown order: stop accepting and reading requests, let in-flight calls finish, stop the
scanner registry, then close the store (which syncs what is pending).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

# the libraries of pyproject.toml's `gateway` extra (import names), which a client-only
# install lacks
GATEWAY_EXTRA = frozenset({"rocksdict", "happybase", "kazoo", "prometheus_client", "flask"})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hqueue-gateway",
        description="Serve the hqueue Thrift API (HQueueService) over an embedded store "
        "or Apache HBase.",
    )
    p.add_argument(
        "--store",
        default="embedded",
        metavar="embedded|memory|hbase://HOST:PORT[?OPTIONS]",
        help="where messages live: the embedded store in --data-dir (default), memory (keeps "
        "nothing across restarts: for tests and demos), or HBase "
        "through its Thrift1 server at HOST:PORT (options: admin=HOST:PORT of its Thrift2 "
        "server, default PORT+1; transport=buffered|framed; protocol=binary|compact; "
        "namespace=NS; pool=N; timeout=SECONDS; max_regions=N)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    p.add_argument("--port", type=int, default=9190, help="port to listen on (default %(default)s)")
    p.add_argument(
        "--data-dir", default="./hqueue-data", help="where the embedded store keeps its files"
    )
    p.add_argument("--framed", action="store_true", help="framed transport (default: buffered)")
    p.add_argument("--compact", action="store_true", help="compact protocol (default: binary)")
    p.add_argument(
        "--advertise",
        metavar="HOST:PORT",
        help="address getQueueLocations reports for this gateway (default: --host:--port)",
    )
    p.add_argument(
        "--scanner-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="idle scanners expire after this long (default %(default)s)",
    )
    p.add_argument("--max-scanners", type=int, default=10_000, help="open scanners at most")
    p.add_argument(
        "--max-value-bytes",
        type=int,
        default=4 * 1024 * 1024,
        help="largest message body accepted (default 4 MiB)",
    )
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="largest request accepted; larger ones close the connection (default 64 MiB)",
    )
    p.add_argument(
        "--max-batch-messages",
        type=int,
        default=100_000,
        help="most messages in one putMessages call (default %(default)s)",
    )
    p.add_argument(
        "--ttl-sweep-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how often expired messages are deleted from disk (default %(default)s)",
    )
    p.add_argument(
        "--log-segment-mb",
        type=int,
        default=64,
        metavar="MIB",
        help="embedded store: size of a write-ahead log segment; after each one the families "
        "it wrote are flushed and it is reused (default %(default)s)",
    )
    sub = p.add_argument_group("cluster and subscriptions")
    sub.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[,...][/CHROOT]",
        help="over HBase: form a gateway cluster with every gateway using the same ZooKeeper "
        "and chroot (partitions are owned, moved and balanced across them), and keep the "
        "subscription registry there; with the embedded store (one machine by design): only "
        "the subscription registry (default: in the store)",
    )
    sub.add_argument(
        "--cluster-move-wait",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long a put waits for a partition that is changing owner before it fails "
        "with IOError (default %(default)s)",
    )
    sub.add_argument(
        "--zookeeper-session-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="ZooKeeper session timeout (default %(default)s)",
    )
    sub.add_argument(
        "--push-batch",
        type=int,
        default=1000,
        metavar="MESSAGES",
        help="most messages in one consumeMessages call (default %(default)s)",
    )
    sub.add_argument(
        "--push-buffer",
        type=int,
        default=10_000,
        metavar="MESSAGES",
        help="messages read ahead per subscriber and partition (default %(default)s)",
    )
    sub.add_argument(
        "--push-buffer-bytes",
        type=int,
        default=8 * 1024 * 1024,
        help="bytes read ahead per subscriber and partition (default 8 MiB)",
    )
    sub.add_argument(
        "--push-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a consumeMessages call may take before it is retried (default %(default)s)",
    )
    sub.add_argument(
        "--push-backoff-max",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="longest wait between retries of a failed push (default %(default)s)",
    )
    sub.add_argument(
        "--checkpoint-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often push progress is written to the registry (default %(default)s)",
    )
    # -- consumers (issue 13) --
    sub.add_argument(
        "--ack-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="pulled messages not acknowledged within this are delivered again "
        "(default %(default)s)",
    )
    sub.add_argument(
        "--pull-lease",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a pull member that has not pulled for this long leaves its group "
        "(default %(default)s)",
    )
    ops = p.add_argument_group("operating it (HTTP on --host; off unless a port is given)")
    ops.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port)",
    )
    ops.add_argument(
        "--console-port",
        type=int,
        metavar="PORT",
        help="serve the web console and its /api/ at http://HOST:PORT/ (0: any free port); "
        "anyone who reaches it may administer queues",
    )
    ops.add_argument(
        "--stats-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often subscriber lag and queue rates are sampled for metrics and the "
        "console (default %(default)s)",
    )
    _add_security_options(p)
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    guard = p.add_argument_group("limits against hostile or broken clients")
    guard.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a partly received request that gets no byte for this long closes its connection "
        "(idle connections between requests stay open) (default %(default)s)",
    )
    guard.add_argument(
        "--max-pending-request-bytes",
        type=int,
        default=256 * 1024 * 1024,
        help="bytes of unfinished requests all connections together may hold; past it large "
        "requests wait (at most --request-timeout) (default 256 MiB)",
    )
    guard.add_argument(
        "--send-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a reply not sent within this long (the client stopped reading) closes its "
        "connection (default %(default)s)",
    )
    guard.add_argument(
        "--max-reply-bytes",
        type=int,
        default=256 * 1024 * 1024,
        help="bytes of replies all connections together may be sending; past it no connection "
        "reads a new request until sends finish or time out (default 256 MiB)",
    )
    guard.add_argument(
        "--subscriber-hosts",
        default="",
        metavar="HOST[,HOST...]",
        help="hosts a subscriber's address may name besides the host of the subscribe call "
        "(default: none; '*' allows any)",
    )
    guard.add_argument(
        "--max-scanner-partitions",
        type=int,
        default=1 << 20,
        help="partitions all open scanners may cover together; opening more is an IOError "
        "(default %(default)s: 32 scanners over the widest queue)",
    )
    guard.add_argument(
        "--max-scanner-bytes",
        type=int,
        default=256 << 20,
        help="bytes of rows all open scanners may hold together (read ahead, kept between "
        "calls); past it idle scanners forget their read-ahead, least recently used first, "
        "then reads are refused with IOError (default 256 MiB)",
    )
    return p


def _add_security_options(p: argparse.ArgumentParser) -> None:
    """TLS and who may administer (issue 15): gateway.tls, gateway.auth."""
    sec = p.add_argument_group("TLS and administration")
    sec.add_argument(
        "--tls-cert", metavar="PEM", help="serve Thrift over TLS with this certificate"
    )
    sec.add_argument("--tls-key", metavar="PEM", help="its private key (default: in --tls-cert)")
    sec.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="require client certificates signed by this CA (mutual TLS)",
    )
    sec.add_argument(
        "--tls-ca",
        metavar="PEM",
        help="connect to subscribers (and other gateways) over TLS, trusting this CA and "
        "presenting --tls-cert as the client certificate",
    )
    sec.add_argument(
        "--admin-identities",
        metavar="CN,...",
        help="only clients whose certificate has one of these common names may create, "
        "delete, truncate, disable or enable queues and delete subscribers (mutual TLS)",
    )
    sec.add_argument(
        "--admin-token-file",
        metavar="PATH",
        help="... or clients that called authenticate() with a token listed in this file "
        "(one per line, at least 16 characters)",
    )


def _check_security(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    from .auth import AdminPolicy
    from .tls import TLSConfig, TLSConfigError

    config = TLSConfig(args.tls_cert, args.tls_key, args.tls_client_ca, args.tls_ca)
    try:
        config.check()
        AdminPolicy.from_options(args.admin_identities, args.admin_token_file)
    except (TLSConfigError, ValueError) as exc:
        parser.error(str(exc))
    if args.admin_identities is not None and args.tls_client_ca is None:
        parser.error(
            "--admin-identities needs --tls-client-ca (identities come from client "
            "certificates); without mutual TLS use --admin-token-file"
        )
    return config


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not 0 <= args.port < 65536:
        parser.error(f"--port must be 0..65535, got {args.port}")
    for name in (
        "scanner_timeout",
        "ttl_sweep_interval",
        "zookeeper_session_timeout",
        "push_timeout",
        "push_backoff_max",
        "checkpoint_interval",
        "stats_interval",
        "request_timeout",
        "send_timeout",
        "cluster_move_wait",
        "ack_timeout",
        "pull_lease",
    ):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0 seconds")
    for name in (
        "max_scanners",
        "max_value_bytes",
        "max_request_bytes",
        "max_batch_messages",
        "push_batch",
        "push_buffer",
        "push_buffer_bytes",
        "log_segment_mb",
        "max_scanner_partitions",
        "max_reply_bytes",
        "max_scanner_bytes",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("metrics_port", "console_port"):
        value = getattr(args, name)
        if value is not None and not 0 <= value < 65536:
            parser.error(f"--{name.replace('_', '-')} must be 0..65535, got {value}")
    if args.max_pending_request_bytes < args.max_request_bytes:
        parser.error("--max-pending-request-bytes must be at least --max-request-bytes")
    if args.max_request_bytes < args.max_value_bytes + 4096:
        parser.error("--max-request-bytes must exceed --max-value-bytes by at least 4096")
    if args.store not in ("embedded", "memory"):
        from .store.hbase_schema import HBaseAddress

        try:
            HBaseAddress.parse(args.store)
        except ValueError as exc:
            parser.error(str(exc))
    if args.advertise:
        from hqueue_contract.protocol import parse_address

        try:
            parse_address(args.advertise, argument="--advertise")
        except ValueError as exc:
            parser.error(str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    # gevent at the edge: patch once, first thing, before anything imports ssl or opens
    # sockets or threads. Checking the arguments already imports thriftpy2 (and with it ssl)
    # for --store hbase://... and --advertise, and builds TLS contexts for --tls-*: patched
    # after that, those modules would keep the blocking ssl and socket.
    from gevent import monkey

    monkey.patch_all()

    parser = build_parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    tls_config = _check_security(parser, args)

    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        from .app import Gateway, GatewayConfig
        from .subscriptions.sender import SenderOptions
        from .subscriptions.workers import PushOptions
    except ModuleNotFoundError as exc:  # `pip install hqueue` is the client side only
        if (exc.name or "").split(".")[0] not in GATEWAY_EXTRA:
            raise
        print(
            f"hqueue-gateway: {exc.name} is not installed; the gateway needs the 'gateway' "
            "extra: pip install 'hqueue[gateway]'",
            file=sys.stderr,
        )
        return 2

    config = GatewayConfig(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        framed=args.framed,
        compact=args.compact,
        advertise=args.advertise,
        scanner_timeout=args.scanner_timeout,
        max_scanners=args.max_scanners,
        max_value_bytes=args.max_value_bytes,
        max_request_bytes=args.max_request_bytes,
        max_batch_messages=args.max_batch_messages,
        ttl_sweep_interval=args.ttl_sweep_interval,
        log_segment_bytes=args.log_segment_mb << 20,
        store=args.store,
        zookeeper=args.zookeeper,
        zookeeper_session_timeout=args.zookeeper_session_timeout,
        cluster_move_wait=args.cluster_move_wait,
        push=PushOptions(
            buffer_messages=args.push_buffer,
            buffer_bytes=args.push_buffer_bytes,
            sender=SenderOptions(
                batch_messages=args.push_batch,
                timeout=args.push_timeout,
                backoff_max=args.push_backoff_max,
            ),
            checkpoint_interval=args.checkpoint_interval,
            ack_timeout=args.ack_timeout,
            pull_lease=args.pull_lease,
        ),
        metrics_port=args.metrics_port,
        console_port=args.console_port,
        stats_interval=args.stats_interval,
        request_timeout=args.request_timeout,
        max_pending_request_bytes=args.max_pending_request_bytes,
        send_timeout=args.send_timeout,
        max_reply_bytes=args.max_reply_bytes,
        subscriber_hosts=tuple(h.strip() for h in args.subscriber_hosts.split(",") if h.strip()),
        max_scanner_partitions=args.max_scanner_partitions,
        max_scanner_bytes=args.max_scanner_bytes,
        tls=tls_config,
        admin_identities=args.admin_identities,
        admin_token_file=args.admin_token_file,
    )
    gateway = Gateway(config)
    try:
        gateway.start()
    except Exception as exc:
        logging.getLogger("gateway").error("cannot start: %s", exc, exc_info=True)
        return 1
    gateway.run_until_signal()
    return 0


if __name__ == "__main__":
    sys.exit(main())
