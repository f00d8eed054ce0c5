"""The friendly Python client: a :class:`Connection` to one gateway and the :class:`Queue`
objects it hands out.

    from hqueue import Connection

    with Connection("127.0.0.1", 9190) as conn:
        q = conn.create_queue("events", partitions=4, ttl_seconds=86400)
        q.put("clicks", b"\\x00payload")
        q.put_many([("clicks", b"a"), ("views", b"b")], partition=2)
        for m in q.scan(topics=["clicks"]):
            print(m.partition, m.id, m.topic, m.value)

Topics, values and queue names are bytes; ``str`` is accepted and encoded as UTF-8. A
connection, like the thriftpy2 client under it, belongs to one thread or greenlet at a time:
share a :class:`hqueue.ConnectionPool` instead. Timeouts are in seconds.
"""

from __future__ import annotations

import contextlib
import itertools
import ssl
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from hqueue_contract.limits import MAX_PARTITION_ID, MAX_PARTITIONS, MAX_SEQUENCE
from hqueue_contract.protocol import Address, parse_addresses
from thriftpy2.protocol.exc import TProtocolException
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException

from . import codec, fastpath, protocol
from .batch import Batch
from .errors import InvalidArgument, ServerError, TransportError
from .message import KeyedMessage, Message, MessageID, keyed_from_thrift
from .tls import TLSOption, client_context

if TYPE_CHECKING:  # types only: the runtime is imported by Queue.create_subscriber, when called
    from subscriber_runtime.listeners import Listener
    from subscriber_runtime.subscriber import Subscriber
    from subscriber_runtime.subscription import Subscription

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9190
DEFAULT_BATCH_SIZE = 1000
LOCATIONS_TTL = 60.0  # seconds a queue's partition owners are cached

Bytes = bytes | str


@dataclass(frozen=True)
class QueueInfo:
    name: str
    partitions: int
    ttl_seconds: int
    enabled: bool
    config: dict[str, str] = field(default_factory=dict)


def _bytes(argument: str, value: Bytes) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgument(argument, f"must be bytes or str, got {type(value).__name__}")


def _int(argument: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(argument, f"must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgument(argument, f"must be {low}..{high}, got {value}")
    return value


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


def _own_partitions(messages: Sequence[Any]) -> bool:
    """Whether any item names its own partition (a Message's, a 3-tuple's third)."""
    for m in messages:
        if isinstance(m, Message):
            if m.partition is not None:
                return True
        elif isinstance(m, (tuple, list)) and len(m) == 3 and m[2] is not None:
            return True
    return False


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


def _message(m: Any) -> Message:
    mid = MessageID(m.id.timestamp, m.id.sequenceID) if m.id is not None else None
    return Message(topic=m.topic, value=m.value, partition=m.partitionID, id=mid)


def _message_id(argument: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, Message):
        value = value.id
    try:
        timestamp, sequence = value
    except (TypeError, ValueError):
        raise InvalidArgument(
            argument, f"must be a MessageID or (timestamp, sequence), got {value!r}"
        ) from None
    return protocol.hqueue_thrift().TMessageID(
        timestamp=_int(f"{argument}.timestamp", timestamp, 0, 2**63 - 1),
        sequenceID=_int(f"{argument}.sequence", sequence, 0, MAX_SEQUENCE),
    )


class ScanIterator(itertools.chain[Message]):
    """What :meth:`Queue.scan` returns: its messages, page after page.

    An :func:`itertools.chain` of the pages a generator reads, so that stepping from one
    message to the next runs no Python code (a generator yielding each message cost about
    as much as decoding it). Dropping it, or :meth:`close`, ends the scan as closing a
    generator would: the gateway-side scanner is closed."""

    __slots__ = ("_pages",)
    _pages: Generator[list[Message], None, None]

    @classmethod
    def over(cls, pages: Generator[list[Message], None, None]) -> ScanIterator:
        it: ScanIterator = cls.from_iterable(pages)  # type: ignore[assignment]
        it._pages = pages
        return it

    def close(self) -> None:
        """Ends the scan now: closes the gateway-side scanner if it is still open (what is
        left of the page already read still comes out, then nothing)."""
        self._pages.close()


class Queue:
    """One queue, used through one :class:`Connection`. ``zookeeper`` (``host:port/chroot``)
    is where its :meth:`create_subscriber` registers subscribers unless told otherwise (None:
    through the gateway)."""

    def __init__(
        self, connection: Connection, name: Bytes, *, zookeeper: str | None = None
    ) -> None:
        self.connection = connection
        self.name = _bytes("name", name)
        if not self.name:
            raise InvalidArgument("name", "must not be empty")
        self.zookeeper = zookeeper

    def __repr__(self) -> str:
        return f"<hqueue.Queue {self.name.decode(errors='replace')!r} on {self.connection!r}>"

    def _tmessage(
        self,
        argument: str,
        item: Any,
        partition: int | None = None,
        key: Bytes | None = None,
        properties: dict[str, bytes] | None = None,
    ) -> Any:
        if isinstance(item, Message):
            topic, value, partition = item.topic, item.value, item.partition
        elif isinstance(item, (tuple, list)) and len(item) in (2, 3):
            topic, value = item[0], item[1]
            if len(item) == 3:
                partition = item[2]
        else:
            raise InvalidArgument(
                argument, f"must be a Message or a (topic, value[, partition]) tuple, got {item!r}"
            )
        if partition is not None:
            _int(f"{argument}.partition", partition, 0, MAX_PARTITION_ID)
        return protocol.hqueue_thrift().TMessage(
            topic=_bytes(f"{argument}.topic", topic),
            value=_bytes(f"{argument}.value", value),
            partitionID=partition,
            key=None if key is None else _bytes(f"{argument}.key", key),
            properties=properties or None,
        )

    def put(
        self,
        topic: Bytes,
        value: Bytes,
        partition: int | None = None,
        *,
        key: Bytes | None = None,
        properties: dict[str, bytes] | None = None,
    ) -> None:
        """Puts one message on ``partition``, or a random one. Returns once it is durable.
        ``key`` (1..255 bytes) finds it again with :meth:`find_by_key`."""
        message = self._tmessage("message", (topic, value), None, key, properties)
        if partition is None:
            self.connection.call("putMessage", self.name, message)
        else:
            _int("partition", partition, 0, MAX_PARTITION_ID)
            self._routed("putMessageWithPid", partition, message)

    def put_many(
        self,
        messages: Iterable[Message | tuple[Bytes, Bytes] | tuple[Bytes, Bytes, int]],
        partition: int | None = None,
        batch_size: int | None = None,
    ) -> int:
        """Puts messages in order and returns how many. Each item is a :class:`Message` or a
        ``(topic, value[, partition])`` tuple. With ``partition`` all go there; otherwise an
        item's own partition, else one random partition per batch. ``batch_size`` splits a
        long iterable into several calls (order is kept only within one partition)."""
        if partition is not None:
            _int("partition", partition, 0, MAX_PARTITION_ID)
        if batch_size is not None:
            _int("batch_size", batch_size, 1, 2**31 - 1)
        if batch_size is None and isinstance(messages, (list, tuple)):
            return self._put_batch(partition, messages, 0) if messages else 0
        sent = 0
        items = iter(messages)
        while chunk := list(itertools.islice(items, batch_size)):
            sent += self._put_batch(partition, chunk, sent)
        return sent

    def put_lists(
        self,
        topics: Bytes | Sequence[Bytes],
        values: Sequence[Bytes],
        partition: int | None = None,
        batch_size: int | None = None,
    ) -> int:
        """Puts ``values`` in order, all under one topic (``topics`` a bytes or str) or
        each under its own (``topics`` a list as long as ``values``); otherwise as
        :meth:`put_many`. The fastest way to send many messages through one connection."""
        if partition is not None:
            _int("partition", partition, 0, MAX_PARTITION_ID)
        if batch_size is not None:
            _int("batch_size", batch_size, 1, 2**31 - 1)
        if isinstance(values, (bytes, str)) or not isinstance(values, Sequence):
            raise InvalidArgument("values", "must be a list of values")
        one = isinstance(topics, (bytes, str))
        if not one and len(topics) != len(values):
            raise InvalidArgument("topics", "must be one topic or as many as the values")
        step = batch_size or max(len(values), 1)
        sent = 0
        for at in range(0, len(values), step):
            vs = values[at : at + step]
            ts = topics if one else topics[at : at + step]  # type: ignore[index]
            sent += self._put_lists(partition, ts, vs, at)
        return sent

    def _put_batch(self, partition: int | None, messages: Sequence[Any], base: int) -> int:
        """One call putting ``messages`` (``messages[base]`` is the first, for errors) on
        ``partition`` (through its owner), or each message's own, else a random one."""
        conn = self.connection
        generic = conn.compact or (
            partition is None and _own_partitions(messages) and conn.clustered(self.name)
        )  # several owners in one call: the generic path splits it (see _send)
        if generic:
            batch = []
            for i, item in enumerate(messages):
                tm = self._tmessage(f"messages[{base + i}]", item)
                if partition is not None:
                    tm.partitionID = None
                batch.append(tm)
            return self._send(batch, partition)
        pid = -1 if partition is None else partition
        request = codec.encode_put(0, self.name, pid, messages, base)
        self._put_encoded(partition, request)
        return len(messages)

    def _put_lists(
        self, partition: int | None, topics: Any, values: Sequence[Any], base: int
    ) -> int:
        pid = -1 if partition is None else partition
        # encoded (and checked) here on both paths, so errors name the same arguments
        request = codec.encode_put_lists(0, self.name, pid, topics, values, base)
        if self.connection.compact:
            one = isinstance(topics, (bytes, str))
            pairs = [(topics if one else topics[i], v) for i, v in enumerate(values)]
            return self._put_batch(partition, pairs, base)
        self._put_encoded(partition, request)
        return len(values)

    def _put_encoded(self, partition: int | None, request: bytes) -> None:
        """Sends a put encoded by :mod:`hqueue.codec`: to the partition's owner (as
        :meth:`_routed` does), or to this connection's gateway for a random partition."""
        conn = self.connection
        method = "putMessages" if partition is None else "putMessagesWithPid"
        target = conn if partition is None else conn.owner(self.name, partition)
        try:
            ch = fastpath.channel(target)  # connects: a dead owner fails here (routed around)
            if ch is None:  # not a socket client (a test's stand-in): decode and go generic
                args = fastpath.generic_args(method, request)
                if partition is None:
                    conn.call(method, self.name, args.tMessages)
                else:
                    self._routed(method, partition, args.tMessages)
                return
            fastpath.call(target, ch, method, request, fastpath.void_reply)
        except TransportError:
            if partition is not None:
                conn.avoid(target.address)
                conn.forget_locations(self.name)
            raise
        except ServerError:
            if partition is not None:
                conn.forget_locations(self.name)
            raise

    def _send(self, batch: list[Any], partition: int | None) -> int:
        if (
            partition is None
            and any(m.partitionID is not None for m in batch)
            and self.connection.clustered(self.name)
        ):  # each partition's messages straight to its owner
            by_partition: dict[int | None, list[Any]] = {}
            for m in batch:
                by_partition.setdefault(m.partitionID, []).append(m)
            for p, group in by_partition.items():
                for m in group:
                    m.partitionID = None
                self._send(group, p)
            return len(batch)
        if partition is None:
            self.connection.call("putMessages", self.name, batch)
            return len(batch)
        self._routed("putMessagesWithPid", partition, batch)
        return len(batch)

    def _routed(self, method: str, partition: int, payload: Any) -> None:
        """A put sent to the partition's owner; a refusal or a lost owner refreshes the map
        (the caller decides whether to retry: a failed put may or may not be stored)."""
        conn = self.connection
        target = conn.owner(self.name, partition)
        try:
            target.call(method, self.name, partition, payload)
        except TransportError:
            conn.avoid(target.address)
            conn.forget_locations(self.name)
            raise
        except ServerError:
            conn.forget_locations(self.name)
            raise

    def scan(
        self,
        *,
        start: MessageID | tuple[int, int] | Message | None = None,
        stop: MessageID | tuple[int, int] | Message | None = None,
        topics: Iterable[Bytes] | None = None,
        reverse: bool = False,
        partitions: int | Sequence[int] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        limit: int | None = None,
    ) -> ScanIterator:
        """Messages from ``start`` (inclusive) to ``stop`` (exclusive), in MessageID order
        (newest first with ``reverse``; then ``start`` is the newer end).

        ``partitions``: None scans the whole queue, an int one partition, a list those
        partitions merged. ``topics`` keeps only those topics. ``batch_size`` messages are
        fetched per call; ``limit`` stops after that many.

        The gateway-side scanner is opened on the first ``next()`` and closed when the
        iteration ends, breaks or raises (as with happybase, consume the iterator while the
        connection is yours, e.g. inside the pool's ``with``).
        """
        _int("batch_size", batch_size, 1, 2**31 - 1)
        if limit is not None:
            _int("limit", limit, 0, 2**63 - 1)
        t = protocol.hqueue_thrift()
        topic_list = None
        if topics is not None:
            if isinstance(topics, (bytes, str)):
                raise InvalidArgument("topics", "must be a list of topics, not one topic")
            topic_list = [_bytes(f"topics[{i}]", x) for i, x in enumerate(topics)]
        spec = t.TMessageScan(
            startMessageID=_message_id("start", start),
            stopMessageID=_message_id("stop", stop),
            topics=topic_list,
            reversed=bool(reverse),
            caching=batch_size,
        )
        if partitions is None:
            opener: tuple[Any, ...] = ("queueScannerOpen", self.name, spec)
        elif isinstance(partitions, int):
            _int("partitions", partitions, 0, MAX_PARTITION_ID)
            opener = ("messageScannerOpen", self.name, partitions, spec)
        else:
            pids = [
                _int(f"partitions[{i}]", p, 0, MAX_PARTITION_ID) for i, p in enumerate(partitions)
            ]
            if not pids:
                raise InvalidArgument("partitions", "must not be empty")
            opener = ("combinedScannerOpen", self.name, pids, spec)
        return ScanIterator.over(self._pages(opener, batch_size, limit))

    def _pages(
        self, opener: tuple[Any, ...], batch_size: int, limit: int | None
    ) -> Generator[list[Message], None, None]:
        if limit == 0:
            return
        conn = self.connection
        sid = conn.call(*opener)
        ch = fastpath.channel(conn)
        if ch is not None:  # read straight into Messages, one page ahead
            pages = fastpath.PagedScan(conn, ch, sid, batch_size, limit)
            try:
                while page := pages.next():
                    yield page
            finally:
                pages.close()
            return
        open_ = True
        count = 0
        try:
            while True:
                want = batch_size if limit is None else min(batch_size, limit - count)
                batch = [_message(m) for m in conn.call("messageScannerGetList", sid, want)]
                if not batch:
                    open_ = False  # the empty list freed it
                    return
                yield batch
                count += len(batch)
                if limit is not None and count >= limit:
                    return
        except TransportError:
            open_ = False  # gone with the connection; the gateway expires it
            raise
        finally:
            if open_:
                with contextlib.suppress(InvalidArgument, ServerError, TransportError):
                    conn.call("messageScannerClose", sid)

    def batch(self, batch_size: int = DEFAULT_BATCH_SIZE, partition: int | None = None) -> Batch:
        """A :class:`~hqueue.batch.Batch` that sends its puts ``batch_size`` at a time (to
        ``partition``, else each message's own, else one random partition per call)."""
        if partition is not None:
            _int("partition", partition, 0, MAX_PARTITION_ID)
        return Batch(self, batch_size, partition)

    def locations(self) -> list[str]:
        """``host:port`` of the gateway serving each partition, in partition order."""
        return [
            x.decode() if isinstance(x, bytes) else x
            for x in self.connection.call("getQueueLocations", self.name)
        ]

    def info(self) -> QueueInfo:
        for info in self.connection.queues():
            if info.name.encode() == self.name:
                return info
        raise InvalidArgument("queueName", f"no queue named {self.name!r}")

    def truncate(self) -> None:
        """Deletes every message and keeps the partitions."""
        self.connection.truncate_queue(self.name)

    def create_subscriber(
        self,
        subscription: Subscription,
        listeners: Iterable[Listener],
        *,
        zookeeper: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise_host: str | None = None,
        session_timeout: float = 10.0,
        lease_seconds: int = 10,
        grace: float = 10.0,
        tls: TLSOption = None,
        server_tls: ssl.SSLContext | None = None,
    ) -> Subscriber:
        """A push subscriber of this queue (seed 4.4's ``queue.createSubscriber``), not
        started yet: a :class:`subscriber_runtime.Subscriber` for ``subscription`` calling
        ``listeners`` in order for every batch (a ``list[hqueue.Message]``). It registers
        through this connection's gateways, or in ZooKeeper with
        ``zookeeper="host:port/chroot"`` (default: the queue's); it reaches the gateway with
        this connection's TLS unless ``tls`` is given. The other options are those of
        :class:`~subscriber_runtime.Subscriber`. It runs on gevent: monkey-patch first (see
        :mod:`subscriber_runtime`)."""
        from subscriber_runtime import Subscriber  # the runtime (gevent) only when wanted

        return Subscriber(
            self.connection.addresses,
            self.name.decode(),
            subscription,
            list(listeners),
            host=host,
            port=port,
            advertise_host=advertise_host,
            zookeeper=self.zookeeper if zookeeper is None else zookeeper,
            session_timeout=session_timeout,
            lease_seconds=lease_seconds,
            grace=grace,
            tls=self.connection.tls if tls is None else tls,
            server_tls=server_tls,
        )

    # -- consumers (issue 13) -----------------------------------------------------------------

    def pull(
        self, subscriber: Bytes, member: Bytes, max_messages: int = 100, max_wait_ms: int = 5000
    ) -> list[KeyedMessage]:
        """Long poll as ``member`` of the pull group ``subscriber``: the messages of the member's
        partitions as soon as there are any, else ``[]`` after ``max_wait_ms``. The first pull
        creates the group (from new messages on) or joins it. Call :meth:`ack` after handling
        them; what stays unacknowledged is delivered again after the gateway's ack timeout.
        In a gateway cluster a failed gateway is replaced by another (see
        :meth:`Connection.consumer_call`)."""
        _int("max_messages", max_messages, 1, 100_000)
        _int("max_wait_ms", max_wait_ms, 0, 300_000)
        got = self.connection.consumer_call(
            self.name, "pullMessages", self.name, _bytes("subscriber", subscriber),
            _bytes("member", member), max_messages, max_wait_ms,
        )  # fmt: skip
        return keyed_from_thrift(got)

    def ack(
        self, subscriber: Bytes, member: Bytes, messages: Iterable[Message | KeyedMessage]
    ) -> None:
        """Acknowledges ``messages`` (pulled by ``member``): per partition, up to the last."""
        t = protocol.hqueue_thrift()
        last: dict[int, Any] = {}
        for i, m in enumerate(messages):
            if m.partition is None or m.id is None:
                raise InvalidArgument(f"messages[{i}]", "must be a pulled message")
            if m.partition not in last or m.id > last[m.partition]:
                last[m.partition] = m.id
        up_to = [
            t.TSubscribedPartition(partitionID=p, startMessageID=t.TMessageID(*mid))
            for p, mid in sorted(last.items())
        ]
        self.connection.consumer_call(
            self.name, "ackMessages", self.name, _bytes("subscriber", subscriber),
            _bytes("member", member), up_to,
        )  # fmt: skip

    def find_by_key(self, key: Bytes, limit: int = 100) -> list[KeyedMessage]:
        """Messages put with ``key``, newest first, from every partition."""
        _int("limit", limit, 1, 100_000)
        got = self.connection.call("findMessagesByKey", self.name, _bytes("key", key), limit)
        return keyed_from_thrift(got)
