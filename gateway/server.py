"""The network edge: a gevent StreamServer speaking Thrift, one greenlet per connection.

Each connection loops ``processor.process`` until the peer goes away. Idle connections stay
open (no server-side idle timeout, like HBase's ThriftServer). Requests are read whole and
checked by :mod:`gateway.wire` before thriftpy2 decodes them from memory, so an absurd length
prefix or garbage costs the gateway nothing but that one connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.event
from gevent.server import StreamServer
from thriftpy2.protocol import TCompactProtocolFactory
from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory  # type: ignore[attr-defined]
from thriftpy2.transport import TTransportException
from thriftpy2.transport.buffered import TCyBufferedTransportFactory
from thriftpy2.transport.framed import TCyFramedTransportFactory
from thriftpy2.transport.memory import TCyMemoryBuffer

from . import peer
from .auth import Principal, set_current_principal
from .pipeline import PutLane
from .tls import accept, peer_identity, shutdown_read
from .wire import (
    BULK_METHODS,
    MessageReader,
    PendingBudget,
    ReplyBudget,
    RequestLimits,
    SocketWriter,
    set_direct_writer,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WireOptions:
    framed: bool = False
    compact: bool = False
    limits: RequestLimits = field(default_factory=RequestLimits)
    request_timeout: float = 30.0  # seconds a partly received request may stall
    send_timeout: float = 60.0  # seconds a reply may take to be sent
    max_pending_bytes: int = 256 * 1024 * 1024  # unfinished requests, all connections
    max_reply_bytes: int = 256 * 1024 * 1024  # replies being sent, all connections
    put_window: int = 16  # puts of a connection written while earlier ones sync (pipeline.py)


# After a reply larger than this, a connection's output transport is replaced: thriftpy2's
# buffer keeps the size of the largest reply it wrote (16 MiB scans) for the connection's life.
_KEEP_WRITE_BUFFER = 256 * 1024
_FRAME_HEADER = struct.Struct(">i")


class ThriftServer:
    """Serves ``processor`` on ``host:port``. ``start()`` binds; ``stop()`` closes listeners
    and then every open connection (in-flight calls get ``grace`` seconds to finish).
    ``tls``: serve TLS with this server-side context (see :mod:`gateway.tls`)."""

    def __init__(
        self,
        processor: Any,
        host: str,
        port: int,
        wire: WireOptions,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        # Connections accepted before the processor is set (the gateway binds first, to know
        # its port, and joins its cluster before it serves) wait for it.
        self._ready = gevent.event.Event()
        self.processor = processor
        self._tls = tls
        self.wire = wire
        self._trans = TCyFramedTransportFactory() if wire.framed else TCyBufferedTransportFactory()
        self._proto = TCompactProtocolFactory() if wire.compact else TCyBinaryProtocolFactory()
        self._server = StreamServer((host, port), self._handle)
        self.pending = PendingBudget(wire.max_pending_bytes)
        self.replies = ReplyBudget(wire.max_reply_bytes)
        self._connections: set[socket.socket] = set()
        self.accepted = 0  # connections accepted since start (a metric)

        # Called with a connection's Peer once it is gone (the gateway closes its scanners).
        self.on_close: Callable[[peer.Peer], object] | None = None

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    @property
    def processor(self) -> Any:
        return self._processor

    @processor.setter
    def processor(self, processor: Any) -> None:
        self._processor = processor
        if processor is not None:
            self._ready.set()

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
                shutdown_read(sock)  # in-flight replies may still be written
        self._server.stop(timeout=grace)

    def _handle(self, sock: socket.socket, address: Any) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            try:
                sock = accept(sock, self._tls)
            except (ssl.SSLError, OSError) as exc:  # plain TCP, no/untrusted client cert, ...
                log.info("TLS handshake with %s failed: %s", _peer(address), exc)
                with contextlib.suppress(OSError):
                    sock.close()
                return
        # this greenlet serves only this connection: who it is stays with it (gateway.auth)
        set_current_principal(Principal(peer_identity(sock), peer=_peer(address)))
        caller = peer.enter(*_host_port(address))
        self._ready.wait()
        reader = MessageReader(
            sock,
            framed=self.wire.framed,
            compact=self.wire.compact,
            limits=self.wire.limits,
            request_timeout=self.wire.request_timeout,
            budget=self.pending,
        )
        writer = SocketWriter(
            sock, self.wire.send_timeout, self.replies, vectored=self._tls is None
        )
        replies = self.replies
        wait_room = replies.wait_room
        write_parts = writer.write_parts
        if self.wire.framed:

            def direct(*parts: bytes | memoryview) -> None:
                write_parts((_FRAME_HEADER.pack(sum(map(len, parts))), *parts))

        else:

            def direct(*parts: bytes | memoryview) -> None:
                write_parts(parts)

        set_direct_writer(direct)
        oprot = self._proto.get_protocol(self._trans.get_transport(writer))
        new_protocol = self._proto.get_protocol
        process = self.processor.process
        fast_puts = getattr(self.processor, "fast_puts", False)
        fast_put = self.processor.process_put if fast_puts else None
        begin_put = self.processor.begin_put if fast_puts and self.wire.put_window > 1 else None
        lane = PutLane(
            self.wire.put_window,
            lambda: set_direct_writer(direct),
            lambda _exc: _shutdown(sock),
        )
        self._connections.add(sock)
        self.accepted += 1
        try:
            while True:
                message, method = reader.next_message()
                if method in BULK_METHODS:
                    answer = None if begin_put is None else begin_put(message, method, oprot)
                    if answer is not None:
                        del message
                        lane.push(answer)  # answered in order while the next is read
                        continue
                    lane.drain()
                    if fast_put is None or not fast_put(message, method, oprot):
                        process(new_protocol(TCyMemoryBuffer(message)), oprot)
                else:
                    lane.drain()  # its answer follows theirs
                    # Its reply may be large: not while the replies being sent by all
                    # connections are past --max-reply-bytes (this connection reads nothing
                    # meanwhile). Puts go on: their replies are a few bytes, and clients that
                    # never read must not stall producers.
                    reserved = wait_room()
                    try:
                        process(new_protocol(TCyMemoryBuffer(message)), oprot)
                    finally:
                        if reserved:
                            replies.done(reserved)
                del message
                if writer.largest > _KEEP_WRITE_BUFFER:
                    writer.largest = 0
                    oprot = self._proto.get_protocol(self._trans.get_transport(writer))
        except TTransportException as exc:
            if exc.type != TTransportException.END_OF_FILE:
                log.info("closing connection from %s: %s", _peer(address), exc)
        except (ConnectionError, OSError):
            pass
        except gevent.GreenletExit:
            raise
        except Exception as exc:
            # a checked message that still does not decode (a wrong type for a field, ...)
            log.info("closing connection from %s: %s: %s", _peer(address), type(exc).__name__, exc)
        finally:
            lane.close()  # the puts in it are written: their answers go out where they can
            reader.close()
            self._connections.discard(sock)
            with contextlib.suppress(OSError):
                sock.close()
            if self.on_close is not None:
                self.on_close(caller)


def _shutdown(sock: socket.socket) -> None:
    """Ends a connection whose answer could not be written: its reader sees the end."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _peer(address: Any) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)


def _host_port(address: Any) -> tuple[str, int]:
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return str(address), 0  # a Unix socket: no host
