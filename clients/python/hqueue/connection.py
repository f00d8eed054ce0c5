"""A :class:`Connection` to one gateway: its calls (failures mapped to :mod:`hqueue.errors`),
the routing of a queue's partitions to the gateways that own them in a cluster, and the
administration of queues. :class:`~hqueue.Queue` objects come from :meth:`Connection.queue`.

A connection, like the thriftpy2 client under it, belongs to one thread or greenlet at a time:
share a :class:`hqueue.ConnectionPool` instead. Timeouts are in seconds.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from hqueue_contract.limits import MAX_PARTITIONS
from hqueue_contract.protocol import Address, parse_addresses
from thriftpy2.protocol.exc import TProtocolException
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException

from . import protocol
from .arguments import Bytes, _bytes, _int
from .errors import InvalidArgument, ServerError, TransportError
from .queue import Queue
from .tls import TLSOption, client_context

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9190
LOCATIONS_TTL = 60.0  # seconds a queue's partition owners are cached


@dataclass(frozen=True)
class QueueInfo:
    name: str
    partitions: int
    ttl_seconds: int
    enabled: bool
    config: dict[str, str] = field(default_factory=dict)


def gateway_addresses(
    addresses: Address | Sequence[Address],
    port: int | None = None,
    *,
    argument: str = "host",
) -> list[tuple[str, int]]:
    """The gateway addresses a :class:`Connection` or a subscriber is given, as
    ``[(host, port), ...]``: ``"host:port"``, ``(host, port)``, a list of those or
    ``"h1:p1,h2:p2"``; a bare ``"host"`` (with ``port``, else 9190) as ``Connection`` has
    always taken it. Raises :class:`InvalidArgument` naming ``argument``."""
    if port is not None or (
        isinstance(addresses, str)
        and "," not in addresses
        and not (addresses.count(":") == 1 or addresses.startswith("["))
    ):  # a host name or an IPv6 address without a port
        if not isinstance(addresses, str) or not addresses:
            raise InvalidArgument(argument, f"must be a host name with 'port', got {addresses!r}")
        return [(addresses, _int("port", DEFAULT_PORT if port is None else port, 1, 65535))]
    try:
        return parse_addresses(addresses, argument=argument)
    except ValueError as exc:
        raise InvalidArgument(argument, str(exc)) from None


class Connection:
    """A connection to one gateway. Opened on first use (or by :meth:`open`); after a
    :class:`TransportError` it is closed and the next call opens a new one.

    ``framed`` and ``compact`` must match the gateway's ``--framed``/``--compact`` flags.
    ``tls`` (a :class:`hqueue.TLS`, an ``ssl.SSLContext`` or True for the system's CAs)
    speaks TLS, for a gateway started with ``--tls-cert``; ``token`` is sent with
    ``authenticate`` right after connecting (a gateway with ``--admin-token-file``).

    The gateway: ``Connection("host", port)``, or one ``host`` argument as the subscriber
    takes it (:func:`gateway_addresses`): ``"host:port"``, ``(host, port)``, or several of
    them (a list, or ``"h1:p1,h2:p2"``: gateways of one cluster), of which the first that
    accepts the connection is used (the next one when it fails).
    """

    def __init__(
        self,
        host: Address | Sequence[Address] = DEFAULT_HOST,
        port: int | None = None,
        *,
        framed: bool = False,
        compact: bool = False,
        timeout: float = 30.0,
        autoconnect: bool = False,
        tls: TLSOption = None,
        token: str | None = None,
    ) -> None:
        self.addresses = gateway_addresses(host, port)
        if not timeout > 0:
            raise InvalidArgument("timeout", f"must be > 0 seconds, got {timeout}")
        self.host, self.port = self.addresses[0]  # the gateway in use (see open)
        self.framed = framed
        self.compact = compact
        self.timeout = timeout
        self.tls = client_context(tls)  # built once: loading the files is the slow part
        self.token = token
        self._client: Any = None
        # Routing in a gateway cluster: each queue's partition owners (getQueueLocations),
        # and a connection per owner address, so puts go straight to the owner (no hop).
        self._locations: dict[bytes, tuple[float, list[str]]] = {}
        self._peers: dict[str, Connection] = {}
        self._down: dict[str, float] = {}  # address -> until when (monotonic) it is avoided
        # a reply owed on this socket to a call sent ahead (a scan's next page): whoever
        # sent it reads it when called here, before anything else uses the socket
        self._pending_reply: Callable[[], None] | None = None
        # Pull consumers in a cluster: the gateway pulls and acks go through (another one
        # after this one failed), and every gateway address seen in the queues' locations.
        self._consumer_via: Connection | None = None
        self._gateways: dict[str, None] = dict.fromkeys(f"{h}:{p}" for h, p in self.addresses)
        if autoconnect:
            self.open()

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"<hqueue.Connection {self.host}:{self.port} {state}>"

    @property
    def is_open(self) -> bool:
        return self._client is not None

    def open(self) -> None:
        """Connects, unless already connected: to this gateway, else (given several) the
        next of :attr:`addresses` that accepts, which is then this connection's gateway."""
        if self._client is not None:
            return
        at = self.addresses.index((self.host, self.port))
        failed = []
        for host, port in self.addresses[at:] + self.addresses[:at]:
            try:
                self._client = protocol.connect(
                    host, port, framed=self.framed, compact=self.compact, timeout=self.timeout,
                    tls=self.tls,
                )  # fmt: skip
            except (TTransportException, OSError) as exc:
                # thriftpy2 reports a failed TLS handshake as "Could not connect": say why
                cause = exc.__context__ if isinstance(exc.__context__, ssl.SSLError) else exc
                failed.append((f"{host}:{port}", cause, exc))
                continue
            self.host, self.port = host, port
            break
        else:
            where, cause, error = failed[-1]
            if len(failed) > 1:
                where = "any of " + ", ".join(w for w, _, _ in failed)
            raise TransportError(f"cannot connect to gateway at {where}: {cause}") from error
        if self.token is not None:
            try:
                self.call("authenticate", self.token.encode())
            except BaseException:
                self.close()  # a refused token: no half-authenticated connection stays
                raise

    def close(self) -> None:
        """Closes this connection and those it opened to partition owners."""
        self._drop()
        peers, self._peers = self._peers, {}
        for peer in peers.values():
            peer.close()

    def _owners(self, queue: bytes) -> list[str]:
        cached = self._locations.get(queue)
        if cached is None or time.monotonic() - cached[0] > LOCATIONS_TTL:
            raw = self._ask_locations(queue) or []
            found = [x.decode() if isinstance(x, bytes) else x for x in raw]
            cached = self._locations[queue] = (time.monotonic(), found)
            self._gateways.update(dict.fromkeys(a for a in found if a))
        return cached[1]

    def clustered(self, queue: bytes) -> bool:
        """Whether the queue's partitions are served by more than one gateway."""
        return len(set(self._owners(queue))) > 1

    def _settle(self) -> None:
        """Reads the reply still owed to a call sent ahead, if any (see ``_pending_reply``)."""
        pending, self._pending_reply = self._pending_reply, None
        if pending is not None:
            pending()

    def _drop(self) -> None:
        """Closes the socket (the next call opens a new one); routing state stays."""
        client, self._client = self._client, None
        self._pending_reply = None  # owed on that socket: lost with it
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def owner(self, queue: bytes, partition: int) -> Connection:
        """The connection to the gateway that owns ``partition`` of ``queue`` (this one when
        the queue's partitions are all served by one address, as on a lone gateway). The map
        is cached for a minute and dropped by :meth:`forget_locations`."""
        owners = self._owners(queue)
        address = owners[partition] if partition < len(owners) else ""
        if address and self._down.get(address, 0) > time.monotonic():
            address = ""  # it just failed (restarting?): any live gateway forwards the put
        if not address:
            return self._any_live()
        if len(set(owners)) <= 1:
            return self
        return self.gateway(address)

    def gateway(self, address: str) -> Connection:
        """This connection for its own address, else one (kept) to the gateway there."""
        if address == self.address:
            return self
        peer = self._peers.get(address)
        if peer is None:
            host, _, port = address.rpartition(":")
            peer = self._peers[address] = Connection(
                host, int(port), framed=self.framed, compact=self.compact, timeout=self.timeout,
                tls=self.tls, token=self.token,
            )  # fmt: skip
        return peer

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _any_live(self) -> Connection:
        now = time.monotonic()
        if self._down.get(self.address, 0) <= now:
            return self
        for address, peer in self._peers.items():
            if self._down.get(address, 0) <= now:
                return peer
        return self

    def avoid(self, address: str, seconds: float = 2.0) -> None:
        """Routes around ``address`` for a while (it refused a connection or dropped one)."""
        self._down[address] = time.monotonic() + seconds

    def _ask_locations(self, queue: bytes) -> Any:
        """This gateway's answer, or (while it is down, say restarting) any other known one's."""
        try:
            return self.call("getQueueLocations", queue)
        except TransportError:
            self.avoid(self.address)
            for peer in list(self._peers.values()):
                with contextlib.suppress(TransportError):
                    return peer.call("getQueueLocations", queue)
            raise

    def consumer_call(self, queue: bytes, method: str, *args: Any) -> Any:
        """``pullMessages``/``ackMessages``: any gateway of a cluster serves a pull member
        (it forwards to the owners of the member's partitions), so when the one in use fails
        the call goes to another known gateway, which is used from then on. A pull lost with
        its gateway is delivered again (it was not acknowledged): at-least-once."""
        with contextlib.suppress(InvalidArgument, ServerError, TransportError):
            self._owners(queue)  # learn the cluster's gateways before one of them fails
        via = self._consumer_via or self
        try:
            return via.call(method, *args)
        except TransportError:
            self.avoid(via.address, 5.0)
            now = time.monotonic()
            for address in [self.address, *self._gateways]:
                if address == via.address or self._down.get(address, 0) > now:
                    continue
                other = self.gateway(address)
                try:
                    result = other.call(method, *args)
                except TransportError:
                    self.avoid(address, 5.0)
                    continue
                self._consumer_via = None if other is self else other
                return result
            raise

    def forget_locations(self, queue: bytes) -> None:
        """Reads the partition owners again on the next routed put (after a refusal)."""
        self._locations.pop(queue, None)

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def client(self) -> Any:
        """The raw thriftpy2 ``HQueueService`` client (opens the connection if needed)."""
        self._settle()
        self.open()
        return self._client

    def call(self, method: str, *args: Any) -> Any:
        """Calls an ``HQueueService`` method, mapping failures to :mod:`hqueue.errors`."""
        self._settle()
        if self._client is not None and protocol.closed_by_peer(self._client):
            # the gateway closed this idle connection (it restarted, or handed its partitions
            # over and stopped): reconnect before sending rather than lose the call
            self._drop()
        self.open()
        t = protocol.hqueue_thrift()
        try:
            return getattr(self._client, method)(*args)
        except t.IllegalArgument as exc:
            raise InvalidArgument.from_gateway(exc.message) from None
        except t.IOError as exc:
            raise ServerError(exc.message) from None
        except TApplicationException as exc:
            raise ServerError(f"{method}: {exc}") from None
        except (TTransportException, TProtocolException, OSError, EOFError) as exc:
            # the conversation is out of step, or gone: never reuse this socket
            self._drop()
            raise TransportError(
                f"{method} on gateway {self.host}:{self.port} failed: {exc or type(exc).__name__}"
            ) from exc
        except BaseException:
            # interrupted mid-call (gevent.Timeout, KeyboardInterrupt): an answer may still be
            # on its way, and would be read as the answer to the next call
            self._drop()
            raise

    # -- queues -----------------------------------------------------------------------------

    def queue(self, name: Bytes, *, zookeeper: str | None = None) -> Queue:
        """The queue ``name`` (no call is made: a missing queue shows on first use);
        ``zookeeper``: see :class:`Queue`."""
        return Queue(self, name, zookeeper=zookeeper)

    def create_queue(
        self,
        name: Bytes,
        partitions: int,
        ttl_seconds: int,
        config: dict[str, str] | None = None,
    ) -> Queue:
        """Creates a queue and returns it. ``ttl_seconds``: how long messages are kept."""
        _int("partitions", partitions, 1, MAX_PARTITIONS)
        _int("ttl_seconds", ttl_seconds, 1, 2**31 - 1)
        self.call("createQueue", _bytes("name", name), partitions, ttl_seconds, dict(config or {}))
        return Queue(self, name)

    def delete_queue(self, name: Bytes) -> None:
        self.call("deleteQueue", _bytes("name", name))

    def truncate_queue(self, name: Bytes) -> None:
        """Deletes every message and keeps the partitions."""
        self.call("truncateQueue", _bytes("name", name))

    def disable_queue(self, name: Bytes) -> None:
        """A disabled queue refuses puts and scans until enabled again."""
        self.call("disableQueue", _bytes("name", name))

    def enable_queue(self, name: Bytes) -> None:
        self.call("enableQueue", _bytes("name", name))

    def queues(self) -> list[QueueInfo]:
        return [_queue_info(i) for i in self.call("listQueues")]


def _queue_info(info: Any) -> QueueInfo:
    name = info.name.decode(errors="replace") if isinstance(info.name, bytes) else info.name
    return QueueInfo(
        name=name,
        partitions=info.partitionCount,
        ttl_seconds=info.ttlSeconds,
        enabled=bool(info.enabled),
        config=dict(info.config or {}),
    )
