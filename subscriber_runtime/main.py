"""``hqueue-subscriber``: a subscriber process; runs until SIGTERM/SIGINT, then stops cleanly.

hqueue-subscriber --gateway H:P --queue Q --name S [--topics a,b] [--partitions 0,1[:START]]
                  [--listener print|blackhole|jsonl:PATH|pkg.mod:callable ...] [--port N]
                  [--zookeeper HOST:PORT[/chroot]]
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hqueue-subscriber",
        description="Receive the messages an hqueue gateway pushes, and pass them to listeners.",
    )
    p.add_argument("--gateway", required=True, metavar="HOST:PORT", help="the gateway")
    p.add_argument("--queue", required=True)
    p.add_argument("--name", required=True, help="the subscriber's name (its checkpoints)")
    p.add_argument("--topics", default="", help="comma-separated topics (default: all)")
    p.add_argument(
        "--partitions",
        default="",
        metavar="P[:START],...",
        help="partitions, each with an optional start TIMESTAMP_MS[.SEQ] or 'earliest' "
        "(default: all, from the stored checkpoint or from now)",
    )
    p.add_argument(
        "--listener",
        action="append",
        default=[],
        metavar="SPEC",
        help="print, blackhole, jsonl:PATH or package.module:callable; repeatable, called in "
        "order (default: print)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    p.add_argument("--advertise-host", help="host the gateway connects to (default: --host)")
    p.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="register in ZooKeeper directly (default: through the gateway, with a lease)",
    )
    p.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="ZooKeeper session timeout (default %(default)s)",
    )
    p.add_argument(
        "--lease",
        type=int,
        default=10,
        metavar="SECONDS",
        help="lease length when registered through the gateway (default %(default)s)",
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        metavar="N",
        help="deliveries of a failing message before it becomes a dead letter; 0 = retry "
        "forever (default 16)",
    )
    p.add_argument(
        "--retry-backoff",
        metavar="FIRST_MS[:MAX_MS]",
        help="back-off between retries of a failed delivery (default 100:10000)",
    )
    p.add_argument(
        "--shared",
        action="store_true",
        help="join the consumer group of this name: its members share the partitions "
        "(through the gateway, or with --zookeeper as an ephemeral members/<address> node)",
    )
    p.add_argument(
        "--max-batch", type=int, metavar="N", help="messages per delivery (default: the gateway's)"
    )
    tls = p.add_argument_group("TLS")
    tls.add_argument(
        "--tls-ca", metavar="PEM", help="connect to the gateway over TLS, trusting this CA"
    )
    tls.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="serve consumeMessages over TLS with this certificate (the gateway needs --tls-ca); "
        "also the client certificate presented to a gateway requiring mutual TLS",
    )
    tls.add_argument("--tls-key", metavar="PEM", help="its private key (default: in --tls-cert)")
    tls.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="accept pushes only from gateways with a certificate this CA signed (mutual TLS)",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def _tls(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Any, Any]:
    """(client TLS to the gateway, server context for consumeMessages); usage errors named."""
    from hqueue.errors import InvalidArgument
    from hqueue.tls import TLS
    from hqueue_contract.tls import server_context

    if args.tls_client_ca and not args.tls_cert:
        parser.error("--tls-client-ca needs --tls-cert")
    client = None
    server = None
    try:
        if args.tls_ca:
            # the certificate doubles as the client certificate for a mutual-TLS gateway
            client = TLS(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key).context()
        if args.tls_cert:
            server = server_context(args.tls_cert, args.tls_key, args.tls_client_ca)
    except InvalidArgument as exc:
        parser.error(f"--{exc.argument.replace('.', '-')}: {exc.message}")
    except OSError as exc:  # ssl.SSLError too
        parser.error(f"--tls-cert/--tls-key/--tls-client-ca: {exc}")
    return client, server


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    # gevent at the edge: patch once, here, before anything opens sockets.
    from gevent import monkey

    monkey.patch_all()

    import signal

    import gevent

    from .listeners import load_listener
    from .subscriber import Subscriber
    from .subscription import Subscription, parse_partitions, parse_retry

    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    log = logging.getLogger("subscriber")
    client_tls, server_tls = _tls(parser, args)
    try:
        subscription = Subscription(
            args.name,
            topics=[t for t in args.topics.split(",") if t],
            partitions=parse_partitions(args.partitions),
            retry=parse_retry(args.max_attempts, args.retry_backoff),
            max_batch=args.max_batch,
            shared=args.shared,
        )
        listeners = [load_listener(spec) for spec in args.listener or ["print"]]
    except (ValueError, ImportError, AttributeError) as exc:
        parser.error(str(exc))
    subscriber = Subscriber(
        args.gateway,
        args.queue,
        subscription,
        listeners,
        host=args.host,
        port=args.port,
        advertise_host=args.advertise_host,
        zookeeper=args.zookeeper,
        session_timeout=args.session_timeout,
        lease_seconds=args.lease,
        tls=client_tls,
        server_tls=server_tls,
    )
    try:
        subscriber.start()
    except Exception as exc:
        log.error("cannot start: %s: %s", type(exc).__name__, exc)
        return 1

    def on_signal(signum: int) -> None:
        gevent.spawn(subscriber.stop, f"received {signal.Signals(signum).name}")

    gevent.signal_handler(signal.SIGTERM, on_signal, signal.SIGTERM)
    gevent.signal_handler(signal.SIGINT, on_signal, signal.SIGINT)
    subscriber.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
