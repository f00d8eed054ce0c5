"""The gateway's own stack with nothing behind it: ``loadtests/bench``'s ``--ceiling gateway``.

The gateway assembled by ``gateway.app.Gateway`` exactly as ``hqueue-gateway`` assembles it
(gevent monkey patching, ``gateway.server.ThriftServer`` with the same transport, protocol and
request checks, ``gateway.boundary.GatewayProcessor``), with two things replaced: the store is
a stub that does nothing, and the processor's handler is
:class:`loadtests.benchmarks.null_server.NullHandler`, which answers scans with
``gateway.scanners.MessageRows`` as the gateway's handler does (the boundary then encodes the
reply in C). Because only the handler differs, whatever the gateway's stack costs (reading and
checking requests, decoding, encoding replies, the event loop) is in this ceiling too, now and
after the stack changes.

    python -m tests.perf.null_gateway [--host 127.0.0.1] [--port 0] [--list-size 1000]
        [--value-bytes 100] [--lists-per-scan 25]

(the options of ``loadtests.benchmarks.null_server``, which runs this for ``--stack gateway``).
It prints ``LISTENING <host>:<port>`` on stdout once bound and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from loadtests.benchmarks.null_server import NullHandler, build_parser


class _NoStore:
    """The store the null gateway is given: it is started and stopped, nothing else."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    # Exactly as gateway/main.py: patch once, before anything opens sockets or threads.
    from gevent import monkey

    monkey.patch_all()

    import logging

    from hqueue.protocol import hqueue_thrift

    from gateway.app import Gateway, GatewayConfig
    from gateway.scanners import MessageRows

    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handler = NullHandler(
        hqueue_thrift(),
        list_size=args.list_size,
        value_bytes=args.value_bytes,
        lists_per_scan=args.lists_per_scan,
        rows_type=MessageRows,
    )
    gateway = Gateway(GatewayConfig(host=args.host, port=args.port), store=_NoStore())  # type: ignore[arg-type]
    gateway.start()
    server = gateway.server
    if server is None or not hasattr(server.processor, "_handler"):
        raise SystemExit("gateway.app.Gateway no longer exposes server.processor._handler")
    server.processor._handler = handler  # thriftpy2's TProcessor calls getattr(_handler, method)
    host, port = server.address
    handler._address = f"{host}:{port}".encode()
    print(f"LISTENING {host}:{port}", flush=True)
    gateway.run_until_signal()
    return 0


if __name__ == "__main__":
    sys.exit(main())
