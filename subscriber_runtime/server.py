"""The subscriber's HQueueSubscriberService (seed 3.5.5) on a gevent StreamServer.

Each gateway worker keeps one connection per (subscriber, partition) and sends one batch at a
time on it, so batches of one partition reach the listeners in order; batches of different
partitions may be handled at the same time (one greenlet per connection).

thriftpy2 decodes each call into TMessage objects (its Cython reader, about 1 us per message
on a busy 2-core machine); the handler turns them into :class:`hqueue.Message` objects
(:func:`hqueue.message.from_thrift`, about 0.3 us more) before any listener sees them.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

import gevent
from gevent.server import StreamServer
from hqueue.message import from_thrift
from hqueue_contract.protocol import subscriber_thrift
from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory  # type: ignore[attr-defined]
from thriftpy2.thrift import TProcessor
from thriftpy2.transport import TSocket, TTransportException
from thriftpy2.transport.buffered import TCyBufferedTransportFactory

from .listeners import Messages

log = logging.getLogger(__name__)

# consumeMessages answers: 0 = acknowledged, anything else = deliver this batch again
STATUS_OK = 0
STATUS_FAILED = 1
STATUS_STOPPING = 2
HANDSHAKE_TIMEOUT = 10.0  # seconds


Consume = Callable[[Messages], int]


class _Handler:
    def __init__(self, consume: Consume, server: SubscriberServer) -> None:
        self._consume = consume
        self._server = server

    def consumeMessages(self, messages: list[Any] | None) -> int:
        self._server._busy += 1
        try:
            return self._consume(from_thrift(messages) if messages else [])
        finally:
            self._server._busy -= 1


class SubscriberServer:
    """Serves ``consume(messages) -> status`` on host:port (port 0: a free one); over TLS
    with ``tls`` (a server-side context, see :func:`hqueue.tls.server_context`)."""

    def __init__(
        self,
        consume: Consume,
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._tls = tls
        self._processor = TProcessor(
            subscriber_thrift().HQueueSubscriberService, _Handler(consume, self)
        )
        self._trans = TCyBufferedTransportFactory()
        self._proto = TCyBinaryProtocolFactory()
        self._server = StreamServer((host, port), self._handle)
        self._connections: set[socket.socket] = set()
        self._busy = 0

    @property
    def address(self) -> tuple[str, int]:
        return self._server.address[:2]

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float) -> None:
        """Stops accepting; calls in progress get ``grace`` seconds to finish."""
        self._server.close()
        deadline = gevent.get_hub().loop.now() + grace
        while self._busy and gevent.get_hub().loop.now() < deadline:
            gevent.sleep(0.01)
        for sock in list(self._connections):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._server.stop(timeout=0.5)

    def _handle(self, sock: socket.socket, address: Any) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                sock.settimeout(HANDSHAKE_TIMEOUT)
                sock.do_handshake()
                sock.settimeout(None)
            except (ssl.SSLError, OSError) as exc:
                log.warning("TLS handshake with %s failed: %s", address, exc)
                with contextlib.suppress(OSError):
                    sock.close()
                return
        tsock = TSocket(sock=sock, socket_timeout=None)
        trans = self._trans.get_transport(tsock)
        prot = self._proto.get_protocol(trans)
        self._connections.add(sock)
        try:
            while True:
                self._processor.process(prot, prot)
        except TTransportException:
            pass
        except (ConnectionError, OSError):
            pass
        except gevent.GreenletExit:
            raise
        except Exception:
            log.exception("closing connection from %s", address)
        finally:
            self._connections.discard(sock)
            with contextlib.suppress(OSError):
                sock.close()
