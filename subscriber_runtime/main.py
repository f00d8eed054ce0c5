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

from .config import SubscriberConfig, add_flags, from_args


def build_parser() -> argparse.ArgumentParser:
    """The flags of every SubscriberConfig setting (subscriber_runtime.config: names, defaults
    and help are written there once)."""
    p = argparse.ArgumentParser(
        prog="hqueue-subscriber",
        description="Receive the messages an hqueue gateway pushes, and pass them to listeners.",
    )
    add_flags(p)
    return p


def _tls(parser: argparse.ArgumentParser, args: SubscriberConfig) -> tuple[Any, Any]:
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
    args = from_args(parser.parse_args(argv))

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
        listeners = [load_listener(spec) for spec in args.listener]
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
        lease_seconds=args.lease_seconds,
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
