"""The toolkit's operations, independent of any user interface.

Each function takes a connected ``HQueueService`` client (see :func:`hqueue.protocol.connect`)
and returns data or text; the shell and the command line only parse arguments and print.
Server exceptions (``IllegalArgument``, ``IOError``, transport errors) pass through unchanged;
mistakes caught before calling the gateway raise :class:`ToolkitError`.
"""

from __future__ import annotations

import contextlib
import re
import ssl
from collections.abc import Mapping
from typing import Any

from hqueue_contract.limits import MAX_SEQUENCE
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException

from hqueue import protocol
from hqueue.protocol import hqueue_thrift

from . import display

# exit codes shared by the command line and the shell
EXIT_OK = 0
EXIT_REFUSED = 1  # the gateway (or the toolkit on its behalf) said the request is wrong
EXIT_USAGE = 2  # the command itself could not be understood
EXIT_UNAVAILABLE = 3  # no gateway, a broken connection, or the gateway's own failure
I16_MAX = 2**15 - 1
I32_MAX = 2**31 - 1
DEFAULT_TAIL_COUNT = 10
FOLLOW_BATCH = 1000  # messages read per poll while following

Client = Any  # a thriftpy2 HQueueService client (or a test double with the same methods)


class ToolkitError(Exception):
    """The user's mistake, found without asking the gateway (same exit code as IllegalArgument)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class GatewayUnavailable(Exception):
    """The gateway at ``address`` could not be reached."""

    def __init__(self, address: str, cause: BaseException) -> None:
        super().__init__(f"cannot connect to gateway at {address}: {_cause_text(cause)}")
        self.address = address
        self.cause = cause


def _cause_text(exc: BaseException) -> str:
    return str(getattr(exc, "message", None) or exc or type(exc).__name__)


def open_client(
    address: str,
    *,
    framed: bool = False,
    compact: bool = False,
    timeout: float = 30.0,
    tls: Any = None,
    token: bytes | None = None,
) -> Client:
    """A client connected to ``address`` (host:port); ``timeout`` in seconds. ``tls``: see
    :func:`hqueue.protocol.connect`; ``token``: sent with ``authenticate`` first.

    Raises ValueError for a malformed address and GatewayUnavailable when nothing answers.
    """
    host, port = protocol.parse_address(address, argument="gateway")
    try:
        client = protocol.connect(
            host, port, framed=framed, compact=compact, timeout=timeout, tls=tls
        )
    except (TTransportException, OSError) as exc:
        # thriftpy2 reports a failed TLS handshake as "Could not connect": keep why
        cause = exc.__context__ if isinstance(exc.__context__, ssl.SSLError) else exc
        raise GatewayUnavailable(address, cause) from exc
    if token is not None:
        try:
            client.authenticate(token)
        except BaseException:
            close_client(client)
            raise
    return client


def tls_option(ca: str | None, cert: str | None, key: str | None) -> Any:
    """A :class:`hqueue.TLS` when any of the files is given, else None (plain TCP)."""
    if ca is None and cert is None and key is None:
        return None
    from hqueue.errors import InvalidArgument
    from hqueue.tls import TLS

    try:
        return TLS(ca=ca, cert=cert, key=key).context()
    except InvalidArgument as exc:
        raise ToolkitError(f"--{exc.argument.replace('.', '-')}: {exc.message}") from None


def read_token(path: str) -> bytes:
    """The first non-empty line of ``path``."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    return line.strip()
    except OSError as exc:
        raise ToolkitError(f"--token-file: cannot read {path}: {exc.strerror}") from None
    raise ToolkitError(f"--token-file: {path} is empty")


def close_client(client: Client) -> None:
    """Close a client's connection, ignoring a connection that is already broken."""
    close = getattr(client, "close", None)
    if close is not None:
        # a socket that is dead already is as closed as we wanted it
        with contextlib.suppress(TTransportException, OSError):
            close()


def is_connection_error(exc: BaseException) -> bool:
    """True when the connection can no longer be trusted and must be rebuilt."""
    return isinstance(exc, (TTransportException, OSError, EOFError, GatewayUnavailable))


def classify_error(exc: BaseException, address: str) -> tuple[int, str] | None:
    """(exit code, message) for an expected failure, None for anything else (a bug)."""
    t = hqueue_thrift()
    hint = "is hqueue-gateway running?"
    if isinstance(exc, (t.IllegalArgument, ToolkitError)):
        return EXIT_REFUSED, exc.message
    if isinstance(exc, t.IOError):
        return EXIT_UNAVAILABLE, f"gateway at {address} failed: {exc.message}"
    if isinstance(exc, GatewayUnavailable):
        if isinstance(exc.cause, ssl.SSLError):
            return EXIT_UNAVAILABLE, (
                f"TLS with gateway at {exc.address} failed: {_cause_text(exc.cause)} "
                "(does --tls-ca hold the CA of its certificate? does it want --tls-cert?)"
            )
        return EXIT_UNAVAILABLE, f"cannot connect to gateway at {exc.address} ({hint})"
    if isinstance(exc, TApplicationException):
        return EXIT_UNAVAILABLE, f"gateway at {address} failed: {_cause_text(exc)}"
    if isinstance(exc, (TTransportException, OSError, EOFError)):
        # connected, then cut off: a stopped gateway, or --framed/--compact not matching it
        return (
            EXIT_UNAVAILABLE,
            f"connection to gateway at {address} failed: {_cause_text(exc)} "
            f"({hint} do --framed/--compact/--tls-ca match its flags?)",
        )
    return None


def _check_range(argument: str, value: int, low: int, high: int) -> None:
    # the Thrift types are i16/i32: out-of-range ints would fail deep in the encoder instead
    if not low <= value <= high:
        raise ToolkitError(f"'{argument}' must be between {low} and {high}, got {value}")


def _name(queue: str) -> bytes:
    if not queue:
        raise ToolkitError("'queue_name' must not be empty")
    return to_bytes(queue)


def to_bytes(text: str) -> bytes:
    """UTF-8, except that the parser's escapes for raw bytes (``\\xff``) stay raw bytes."""
    return text.encode("utf-8", "surrogateescape")


# -- queue administration ------------------------------------------------------------------


def create_queue(
    client: Client,
    queue: str,
    partition_count: int,
    ttl_seconds: int,
    config: Mapping[str, str] | None = None,
) -> str:
    """Create a queue; ``ttl_seconds`` in seconds. Returns a confirmation line."""
    _check_range("partition_count", partition_count, 1, I16_MAX)
    _check_range("ttl", ttl_seconds, 0, I32_MAX)
    conf = {str(k): str(v) for k, v in (config or {}).items()}
    for key, value in conf.items():
        try:  # config is map<string, string>: text only, unlike names and values
            key.encode("utf-8")
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolkitError(f"config {key!r} must be text, not raw bytes") from None
    client.createQueue(_name(queue), partition_count, ttl_seconds, conf)
    extra = f", config {display.format_config_inline(conf)}" if conf else ""
    return f"created queue '{queue}' with {partition_count} partitions, ttl {ttl_seconds}s{extra}"


def drop_queue(client: Client, queue: str) -> str:
    """Delete a queue and all its messages."""
    client.deleteQueue(_name(queue))
    return f"dropped queue '{queue}'"


def truncate_queue(client: Client, queue: str) -> str:
    """Delete every message of a queue, keeping its partitions (seed 4.1 (2))."""
    client.truncateQueue(_name(queue))
    return f"truncated queue '{queue}'"


def disable_queue(client: Client, queue: str) -> str:
    """Disable a queue: puts and scans are refused until it is enabled."""
    client.disableQueue(_name(queue))
    return f"disabled queue '{queue}'"


def enable_queue(client: Client, queue: str) -> str:
    """Enable a disabled queue."""
    client.enableQueue(_name(queue))
    return f"enabled queue '{queue}'"


def list_queues(client: Client) -> list[Any]:
    """Every queue's TQueueInfo, sorted by name."""
    return sorted(client.listQueues(), key=lambda info: info.name or b"")


def describe_queue(client: Client, queue: str) -> Any:
    """The TQueueInfo of one queue; ToolkitError when there is no such queue."""
    # the contract has no per-queue call: listQueues is the one source of queue metadata
    wanted = _name(queue)
    for info in client.listQueues():
        if info.name == wanted:
            return info
    raise ToolkitError(f"queue '{queue}' does not exist")


def queue_locations(client: Client, queue: str) -> list[str]:
    """host:port of the gateway serving each partition, in partition order."""
    return [display.text(loc) for loc in client.getQueueLocations(_name(queue))]


def list_gateways(client: Client) -> list[Any]:
    """The gateways of the cluster (TGatewayInfo), the leader first."""
    return sorted(client.listGateways(), key=lambda g: (not g.leader, display.text(g.address)))


def balance(client: Client, max_moves: int) -> str:
    _check_range("--max-moves", max_moves, 1, 1_000_000)
    moved = client.balanceCluster(max_moves)
    return f"moved {moved} partition(s)" if moved else "already balanced: nothing moved"


# -- messages --------------------------------------------------------------------------------


def put_message(
    client: Client, queue: str, topic: bytes, value: bytes, partition: int | None = None
) -> str:
    """Put one message, on ``partition`` or (None) a partition the gateway picks."""
    t = hqueue_thrift()
    message = t.TMessage(topic=topic, value=value)
    if partition is None:
        client.putMessage(_name(queue), message)
        where = "a random partition"
    else:
        _check_range("partition", partition, 0, I16_MAX)
        client.putMessageWithPid(_name(queue), partition, message)
        where = f"partition {partition}"
    unit = "byte" if len(value) == 1 else "bytes"
    return f"put {len(value)} {unit} on {where} of queue '{queue}'"


def _read(client: Client, queue: str, partition: int, scan: Any, limit: int) -> list[Any]:
    """Up to ``limit`` messages of one scan; the scanner is always released."""
    sid = client.messageScannerOpen(_name(queue), partition, scan)
    messages: list[Any] = []
    exhausted = False
    try:
        while len(messages) < limit:
            batch = client.messageScannerGetList(sid, limit - len(messages))
            if not batch:
                exhausted = True  # an empty list also freed the scanner on the gateway
                break
            messages.extend(batch)
    finally:
        if not exhausted:
            try:
                client.messageScannerClose(sid)
            except hqueue_thrift().IllegalArgument:
                pass  # already gone (expired): nothing left to release
    return messages[:limit]


def tail(
    client: Client,
    queue: str,
    partition: int,
    count: int = DEFAULT_TAIL_COUNT,
    topics: list[str] | None = None,
) -> list[Any]:
    """The ``count`` newest messages of a partition (of ``topics`` only, if given), newest
    first."""
    _check_range("partition", partition, 0, I16_MAX)
    _check_range("count", count, 1, I32_MAX)
    scan = hqueue_thrift().TMessageScan(
        reversed=True,
        caching=min(count, FOLLOW_BATCH),
        topics=[to_bytes(t) for t in topics] if topics else None,
    )
    return _read(client, queue, partition, scan, count)


def message_key(message: Any) -> tuple[int, int]:
    """A message's MessageID as a comparable (timestamp ms, sequenceID)."""
    return (message.id.timestamp, message.id.sequenceID)


def read_after(
    client: Client,
    queue: str,
    partition: int,
    after: tuple[int, int] | None,
    limit: int = FOLLOW_BATCH,
) -> list[Any]:
    """Up to ``limit`` messages newer than MessageID ``after`` (None: from the oldest), oldest
    first."""
    _check_range("partition", partition, 0, I16_MAX)
    t = hqueue_thrift()
    start = None if after is None else t.TMessageID(timestamp=after[0], sequenceID=after[1])
    scan = t.TMessageScan(startMessageID=start, reversed=False, caching=min(limit, FOLLOW_BATCH))
    # the start is inclusive: read one more and drop the message already seen
    messages = _read(client, queue, partition, scan, limit + (after is not None))
    if after is not None:
        messages = [m for m in messages if message_key(m) > after]
    return messages[:limit]


# -- subscribers (seed 4.1 (3), (4)) ----------------------------------------------------------


def add_subscriber(client: Client, queue: str, subscriber: str) -> str:
    """Create a subscriber of every partition, starting with messages written from now on;
    a subscriber process with that name receives them once it runs."""
    t = hqueue_thrift()
    _check_subscriber(subscriber)
    client.addSubscriber(_name(queue), t.TSubscription(name=to_bytes(subscriber)))
    return f"added subscriber '{subscriber}' to queue '{queue}'"


def delete_subscriber(client: Client, subscriber: str, queue: str) -> str:
    """Delete a subscriber and its checkpoints. Arguments in the seed's USAGE order
    (subscriber, queue); its example gives them the other way round, which is accepted too
    when only that reading names an existing queue."""
    _check_subscriber(subscriber)
    names = {info.name for info in client.listQueues()}
    if _name(queue) not in names and _name(subscriber) in names:
        subscriber, queue = queue, subscriber
    client.deleteSubscriber(_name(queue), to_bytes(subscriber))
    return f"deleted subscriber '{subscriber}' of queue '{queue}'"


def list_subscribers(client: Client, queue: str) -> list[Any]:
    """Every TSubscriberInfo of a queue, sorted by name."""
    return sorted(client.listSubscribers(_name(queue)), key=lambda info: info.name or b"")


def _check_subscriber(name: str) -> None:
    if not name:
        raise ToolkitError("'subscriber_name' must not be empty")


# A MessageID as the toolkit prints it and takes it everywhere: TS.SEQ (timestamp ms, sequence).
_MESSAGE_ID = re.compile(r"(\d+)\.(\d+)\Z")


def parse_message_id(text: str, flag: str = "MessageID") -> tuple[int, int] | None:
    """``TS.SEQ`` as (timestamp ms, sequence); None when ``text`` is not of that form."""
    found = _MESSAGE_ID.match(text.strip())
    if found is None:
        return None
    ts, seq = int(found.group(1)), int(found.group(2))
    if seq > MAX_SEQUENCE:
        raise ToolkitError(f"{flag}: a MessageID's sequence is 0..{MAX_SEQUENCE}, got {text!r}")
    return ts, seq
