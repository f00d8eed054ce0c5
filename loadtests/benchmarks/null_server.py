"""A do-nothing HQueueService: the ceiling of the stack.

Two stacks, chosen with ``--stack``:

* ``thriftpy2`` (the default, the ceiling the targets are judged against): a plain thriftpy2
  server speaking the same IDL, as anyone would write one on gevent: a ``StreamServer`` whose
  connections loop ``TProcessor.process`` over thriftpy2's Cython buffered transport and binary
  protocol. Every request is decoded into Python objects and every reply encoded from them.
* ``gateway``: the gateway's own stack with nothing behind it, which also has the gateway's C
  fast paths: what the gateway would reach if storing cost nothing. It is built from gateway
  internals, so it lives with the tests (``tests.perf.null_gateway``, which answers with this
  module's :class:`NullHandler`); ``--stack gateway`` runs that module in this process's place.

A scanner returns ``--lists-per-scan`` full lists of ``--list-size`` prebuilt messages (ids,
partition id, topic and a fixed-size value all set, as the gateway returns them) and then the
empty list that marks its end, so a client's scan loop follows the same call sequence as
against the gateway. Puts return at once.

Usage::

    python -m loadtests.benchmarks.null_server [--stack thriftpy2|gateway] [--host 127.0.0.1]
        [--port 0] [--list-size 1000] [--value-bytes 100] [--lists-per-scan 25]

It prints ``LISTENING <host>:<port>`` on stdout once bound and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Sequence
from typing import Any

TOPIC = b"t"


class NullHandler:
    """Implements every HQueueService method with as little work as possible."""

    def __init__(
        self,
        thrift: Any,
        *,
        list_size: int,
        value_bytes: int,
        lists_per_scan: int,
        rows_type: Any = None,
    ):
        self._thrift = thrift
        self.lists_per_scan = lists_per_scan
        value = (b"abcdefghijklmnopqrstuvwxyz" * (value_bytes // 26 + 1))[:value_bytes]
        base_ts = 1_700_000_000_000
        ids = [(base_ts + i // 1000, i % 1000) for i in range(list_size)]
        self._list = [
            thrift.TMessage(thrift.TMessageID(ts, seq), 0, TOPIC, value) for ts, seq in ids
        ]
        # The gateway's handler answers scans with rows (gateway.scanners.MessageRows, which
        # tests.perf.null_gateway passes) that its boundary encodes in C; None: TMessage lists.
        self._rows_type = rows_type
        self._rows = [(ts, seq, TOPIC, value) for ts, seq in ids]
        self._scanners: dict[int, int] = {}
        self._ids = itertools.count(1)
        self._address = b"127.0.0.1:0"

    # puts: nothing at all
    def putMessage(self, queueName: Any, tMessage: Any) -> None:
        return None

    def putMessages(self, queueName: Any, tMessages: Any) -> None:
        return None

    def putMessageWithPid(self, queueName: Any, partitionID: Any, tMessage: Any) -> None:
        return None

    def putMessagesWithPid(self, queueName: Any, partitionID: Any, tMessages: Any) -> None:
        return None

    def put_raw(self, raw_queue: Any, raw_pid: Any, topics: Any, values: Any) -> None:
        """The gateway boundary's fast put path (messages taken apart from the wire in C)."""
        return None

    def begin_put_raw(
        self, raw_queue: Any, raw_pid: Any, topics: Any, values: Any, forwarded: bool = False
    ) -> Callable[[], None]:
        """The same in two steps, as the gateway's server pipelines a connection's puts."""
        return _nothing

    # scans: a counter per scanner, the same prebuilt list every time
    def _open(self) -> int:
        sid = next(self._ids)
        self._scanners[sid] = 0
        return sid

    def messageScannerOpen(self, queueName: Any, partitionID: Any, messageScan: Any) -> int:
        return self._open()

    def queueScannerOpen(self, queueName: Any, messageScan: Any) -> int:
        return self._open()

    def combinedScannerOpen(self, queueName: Any, partitionIDs: Any, messageScan: Any) -> int:
        return self._open()

    def messageScannerGet(self, id: Any) -> Any:
        return self._list[0]

    def messageScannerGetList(self, id: Any, nbMessages: Any) -> Any:
        served = self._scanners.get(id)
        if served is None or served >= self.lists_per_scan:
            self._scanners.pop(id, None)
            return self._rows_type(0, []) if self._rows_type is not None else []
        self._scanners[id] = served + 1
        n = max(nbMessages, 0)
        if self._rows_type is not None:
            return self._rows_type(0, self._rows if n >= len(self._rows) else self._rows[:n])
        return self._list if n >= len(self._list) else self._list[:n]

    def messageScannerClose(self, id: Any) -> None:
        self._scanners.pop(id, None)

    # admin: accepted and forgotten
    def getQueueLocations(self, queueName: Any) -> list[bytes]:
        return [self._address]

    def createQueue(self, queueName: Any, partitionCount: Any, ttlSeconds: Any, config: Any):
        return None

    def deleteQueue(self, queueName: Any) -> None:
        return None

    def truncateQueue(self, queueName: Any) -> None:
        return None

    def disableQueue(self, queueName: Any) -> None:
        return None

    def enableQueue(self, queueName: Any) -> None:
        return None

    def listQueues(self) -> list[Any]:
        return []


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.benchmarks.null_server",
        description="A do-nothing HQueueService (the benchmark's ceiling).",
    )
    p.add_argument(
        "--stack",
        choices=["thriftpy2", "gateway"],
        default="thriftpy2",
        help="plain thriftpy2 server (default) or the gateway's own stack",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 (default): any free port")
    p.add_argument("--list-size", type=int, default=1000, help="messages per scanner list")
    p.add_argument("--value-bytes", type=int, default=100, help="bytes per message value")
    p.add_argument(
        "--lists-per-scan",
        type=int,
        default=25,
        help="full lists a scanner returns before its end (empty list)",
    )
    return p


def serve_plain(handler: Any, thrift: Any, host: str, port: int) -> None:
    """The plain thriftpy2 server (``--stack thriftpy2``); serves until SIGTERM/SIGINT."""
    import signal
    import socket

    import gevent
    import gevent.event
    from gevent.server import StreamServer
    from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory  # type: ignore[attr-defined]
    from thriftpy2.thrift import TProcessor
    from thriftpy2.transport import TTransportException
    from thriftpy2.transport.buffered import TCyBufferedTransportFactory
    from thriftpy2.transport.socket import TSocket

    processor = TProcessor(thrift.HQueueService, handler)
    trans_factory = TCyBufferedTransportFactory()
    proto_factory = TCyBinaryProtocolFactory()

    def connection(sock: socket.socket, _address: Any) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        trans = trans_factory.get_transport(TSocket(sock=sock, socket_timeout=None))
        proto = proto_factory.get_protocol(trans)
        try:
            while True:
                processor.process(proto, proto)
        except (TTransportException, OSError):
            pass
        finally:
            sock.close()

    server = StreamServer((host, port), connection)
    server.start()
    bound_host, bound_port = server.address[:2]
    handler._address = f"{bound_host}:{bound_port}".encode()
    print(f"LISTENING {bound_host}:{bound_port}", flush=True)
    stop = gevent.event.Event()
    gevent.signal_handler(signal.SIGTERM, stop.set)
    gevent.signal_handler(signal.SIGINT, stop.set)
    stop.wait()
    server.stop(timeout=2)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.stack == "gateway":
        import os

        os.execv(sys.executable, [
            sys.executable, "-m", "tests.perf.null_gateway", "--host", args.host,
            "--port", str(args.port), "--list-size", str(args.list_size),
            "--value-bytes", str(args.value_bytes), "--lists-per-scan", str(args.lists_per_scan),
        ])  # fmt: skip

    # Exactly as gateway/main.py: patch once, before anything opens sockets or threads.
    from gevent import monkey

    monkey.patch_all()

    from hqueue.protocol import hqueue_thrift

    thrift = hqueue_thrift()
    handler = NullHandler(
        thrift,
        list_size=args.list_size,
        value_bytes=args.value_bytes,
        lists_per_scan=args.lists_per_scan,
    )
    serve_plain(handler, thrift, args.host, args.port)
    return 0


def _nothing() -> None:
    return None


if __name__ == "__main__":
    sys.exit(main())
