"""The network edge: a gevent StreamServer speaking Thrift, one greenlet per connection.

Each connection loops ``processor.process`` until the peer goes away. Idle connections stay
open (no server-side idle timeout, like HBase's ThriftServer). A request may carry at most
``max_request_bytes``: the socket wrapper under thriftpy2's transports counts what one request
reads and aborts the connection past the limit, so an absurd length prefix costs the gateway
nothing but that one connection. Garbage bytes end that connection the same way.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.server import StreamServer
from thriftpy2.protocol import TCompactProtocolFactory
from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory  # type: ignore[attr-defined]
from thriftpy2.transport import TTransportException
from thriftpy2.transport.buffered import TCyBufferedTransportFactory
from thriftpy2.transport.framed import TCyFramedTransportFactory

log = logging.getLogger(__name__)

_READ_CHUNK = 256 * 1024


@dataclass(frozen=True)
class WireOptions:
    framed: bool = False
    compact: bool = False
    max_request_bytes: int = 64 * 1024 * 1024


class _MeteredSocket:
    """What thriftpy2's transports read from and write to: a socket with a per-request budget."""

    __slots__ = ("_sock", "remaining")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.remaining = 0

    def read(self, n: int) -> bytes:
        if self.remaining <= 0:
            raise TTransportException(
                TTransportException.UNKNOWN, "request is larger than the gateway accepts"
            )
        data = self._sock.recv(min(n, _READ_CHUNK, self.remaining))
        if not data:
            raise TTransportException(TTransportException.END_OF_FILE, "peer closed")
        self.remaining -= len(data)
        return data

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)

    def flush(self) -> None:
        pass

    def is_open(self) -> bool:
        return True

    def open(self) -> None:
        pass

    def close(self) -> None:
        self._sock.close()


class ThriftServer:
    """Serves ``processor`` on ``host:port``. ``start()`` binds; ``stop()`` closes listeners
    and then every open connection (in-flight calls get ``grace`` seconds to finish)."""

    def __init__(self, processor: Any, host: str, port: int, wire: WireOptions) -> None:
        self.processor = processor
        self.wire = wire
        self._trans = TCyFramedTransportFactory() if wire.framed else TCyBufferedTransportFactory()
        self._proto = TCompactProtocolFactory() if wire.compact else TCyBinaryProtocolFactory()
        self._server = StreamServer((host, port), self._handle)
        self._connections: set[socket.socket] = set()

    @property
    def address(self) -> tuple[str, int]:
        return self._server.address[:2]

    def start(self) -> None:
        self._server.start()

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self, grace: float = 5.0) -> None:
        self._server.close()
        for sock in list(self._connections):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)  # in-flight replies may still be written
        self._server.stop(timeout=grace)

    def _handle(self, sock: socket.socket, address: Any) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        metered = _MeteredSocket(sock)
        trans = self._trans.get_transport(metered)
        iprot = self._proto.get_protocol(trans)
        oprot = self._proto.get_protocol(trans)
        limit = self.wire.max_request_bytes
        process = self.processor.process
        self._connections.add(sock)
        try:
            while True:
                metered.remaining = limit
                process(iprot, oprot)
        except TTransportException as exc:
            if exc.type != TTransportException.END_OF_FILE:
                log.info("closing connection from %s: %s", _peer(address), exc)
        except (ConnectionError, OSError):
            pass
        except gevent.GreenletExit:
            raise
        except Exception as exc:
            # garbage on the wire (bad protocol version, impossible sizes, ...)
            log.info("closing connection from %s: %s: %s", _peer(address), type(exc).__name__, exc)
        finally:
            self._connections.discard(sock)
            with contextlib.suppress(OSError):
                sock.close()


def _peer(address: Any) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
