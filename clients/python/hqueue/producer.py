"""An asynchronous producer: puts that do not wait for their answer.

    with hqueue.Producer("127.0.0.1", 9190, window=8) as p:
        for line in lines:
            p.put("events", "lines", line)          # batched: batch_size, or linger seconds
        done = p.put_many("events", pairs, partition=2)   # one call now: a Future
    # leaving the block sent the rest and waited for every answer

A :class:`Connection` sends a call and waits for its answer before the next one, so client
and gateway take turns. A producer keeps up to ``window`` calls in flight on each of its
``connections`` (as librdkafka does): while the gateway stores one batch, the next is being
encoded and is already on the wire. The gateway answers the calls of one connection in
order, so a producer keeps per-partition order: a (queue, partition) always uses the same
connection. Several connections let concurrent batches share the gateway's group commit.

Calls made while the window is full wait in line, and a call to a (queue, partition) joins the
call already waiting for it (up to ``max_call_messages`` and ``max_call_bytes``): under load
the gateway gets a few large calls instead of many small ones, as librdkafka fills its batches
while its requests are in flight. Each put keeps its own Future. A joined call is answered as
one: the gateway checks a put whole before storing any of it, so when it refuses one message
the put holding it gets the error (naming the message among its own) and the other puts of the
call fail saying they were not stored and may be sent again.

Each call's outcome is a :class:`concurrent.futures.Future` resolving to the number of
messages once they are durable, or to the error (:class:`InvalidArgument`,
:class:`ServerError`, :class:`TransportError`, as :class:`Connection` raises them).
``on_delivery(count, error)`` is called for every call too, on the producer's reader thread:
keep it short. Errors of batches made by :meth:`Producer.put` (which hands out no future) are
raised by the next :meth:`flush` when there is no ``on_delivery``.

A partition's calls go to the gateway that owns it (the owners as
:meth:`hqueue.Connection.owner` knows them), calls without a partition to the gateway given.
A broken connection fails every call in flight on it with :class:`TransportError` (those
messages may or may not have been stored), routes around that gateway for a while and reads
the owners again; the next call opens a new connection. The
producer speaks the binary protocol (buffered or framed transport). It is thread-safe; under
gevent, monkey-patch first (its reader is a thread).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from hqueue_contract.limits import MAX_PARTITION_ID

from . import codec, fastpath
from .arguments import Bytes, _bytes, _int
from .connection import DEFAULT_HOST, DEFAULT_PORT, Connection
from .errors import HQueueError, InvalidArgument, TransportError
from .queue import DEFAULT_BATCH_SIZE

DeliveryCallback = Callable[[int, "BaseException | None"], None]


class _Call:
    """A call on its way to the gateway: its request (or the put requests joined into it, see
    :meth:`_Lane.send`) and the futures of the puts it carries, with their message counts."""

    __slots__ = ("count", "deliveries", "generation", "key", "method", "requests", "size")

    def __init__(
        self, method: str, key: tuple[bytes, int | None], request: bytes, count: int,
        future: Future[int],
    ) -> None:  # fmt: skip
        self.method = method
        self.key = key
        self.requests = [request]
        self.deliveries = [(future, count)]
        self.count = count
        self.size = len(request)
        self.generation = 0  # which socket of its lane it went out on

    def join(self, other: _Call, max_messages: int, max_bytes: int) -> bool:
        """Takes ``other``'s puts in, when the two fit in one call."""
        if other.count + self.count > max_messages or other.size + self.size > max_bytes:
            return False
        self.requests += other.requests
        self.deliveries += other.deliveries
        self.count += other.count
        self.size += other.size
        return True

    def request(self) -> bytes:
        return codec.join_puts(self.requests)


class _Lane:
    """One connection: calls go out in order, a reader thread matches answers to them.

    Up to ``window`` calls are in flight. Calls made while the window is full wait in line
    (at most ``window`` of them), and a call to a (queue, partition) joins the last one
    waiting for it while they fit in ``max_call_messages`` and ``max_call_bytes``: under load
    the gateway gets fewer, larger calls, as librdkafka fills its batches while its requests
    are in flight. When an answer comes, the first waiting call takes its slot."""

    def __init__(self, producer: Producer, index: int, host: str, port: int) -> None:
        self.producer = producer
        self.index = index
        self.host = host
        self.port = port
        self._send_lock = threading.Lock()  # held from taking a slot until the bytes are out
        self._cond = threading.Condition()  # guards what follows
        self._free = producer.window  # slots of the window; > 0 only when none waits
        self._waiting: collections.deque[_Call] = collections.deque()
        self._inflight: collections.deque[_Call] = collections.deque()
        self._sock: socket.socket | None = None
        self._generation = 0  # which socket an in-flight call went out on
        self.calls = 0  # calls sent (puts joined into one count once)

    def _open(self) -> socket.socket:
        p = self.producer
        try:
            sock = socket.create_connection((self.host, self.port), timeout=p.timeout)
        except OSError as exc:
            p._unreachable(self)
            raise TransportError(
                f"cannot connect to gateway at {self.host}:{self.port}: {exc}"
            ) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._generation += 1
        reader = threading.Thread(
            target=self._read,
            args=(sock, fastpath.Channel(sock, p.framed), self._generation),
            name=f"hqueue-producer-{self.index}",
            daemon=True,
        )
        self._sock = sock
        reader.start()
        return sock

    def send(self, call: _Call) -> None:
        """Sends ``call`` now, or lines it up (joined to a waiting call when it fits); waits
        up to the producer's timeout for room in the line when that is full. Raises
        TransportError when ``call`` was not sent (its future is then left alone)."""
        p = self.producer
        deadline = time.monotonic() + p.timeout
        while True:
            with self._send_lock:
                with self._cond:
                    now = self._free > 0
                    if now:
                        self._free -= 1
                    elif self._line_up(call):
                        return
                if now:
                    try:
                        self._transmit(call)
                        return
                    except TransportError as exc:
                        failed = exc
            if now:  # not sent: its slot goes on (outside _send_lock, which _next takes)
                self._next()
                raise failed
            with self._cond:
                if not self._cond.wait_for(
                    lambda: self._free > 0 or len(self._waiting) < p.window,
                    deadline - time.monotonic(),
                ):
                    raise TransportError(
                        f"no answer from {self.host}:{self.port} within {p.timeout} s"
                    )

    def _line_up(self, call: _Call) -> bool:
        """Joins ``call`` to the last call waiting for its (queue, partition), or puts it at
        the end of the line; False when the line is full. Holding _cond."""
        p = self.producer
        for waiting in reversed(self._waiting):
            if waiting.key == call.key and waiting.method == call.method:
                if waiting.join(call, p.max_call_messages, p.max_call_bytes):
                    return True
                break  # joining an earlier one would put these messages before its
        if len(self._waiting) >= p.window:
            return False
        self._waiting.append(call)
        return True

    def _transmit(self, call: _Call) -> None:
        """Sends ``call``, holding _send_lock and a slot of the window. Raises TransportError
        when no connection can be made; a connection that breaks fails the call."""
        request = call.request()
        while True:
            sock = self._sock or self._open()
            with self._cond:
                # the reader may have found the connection broken since: then this call,
                # not sent yet and not among the calls it failed, goes on a new one
                if self._sock is sock:
                    call.generation = self._generation
                    self._inflight.append(call)
                    self.calls += 1
                    self._cond.notify_all()
                    break
        try:
            sock.sendall(fastpath.frame(request) if self.producer.framed else request)
        except OSError as exc:
            self._broken(sock, TransportError(f"{call.method} to {self.address}: {exc}"))

    def _next(self) -> None:
        """A slot of the window came free: the first waiting call takes it, or it is free."""
        while True:
            with self._send_lock:
                with self._cond:
                    if not self._waiting:
                        self._free += 1
                        self._cond.notify_all()
                        return
                    call = self._waiting.popleft()
                    self._cond.notify_all()  # room in the line
                try:
                    self._transmit(call)
                    return
                except TransportError as exc:
                    error = exc
            self.producer._deliver(call, error)  # and the slot goes to the next one

    def _read(self, sock: socket.socket, ch: fastpath.Channel, generation: int) -> None:
        p = self.producer
        while True:
            with self._cond:
                while not self._inflight or self._inflight[0].generation != generation:
                    if self._sock is not sock:
                        return  # closed or replaced: its calls were failed already
                    self._cond.wait(0.5)
                call = self._inflight[0]
            error: BaseException | None = None
            try:
                ch.receive(call.method, fastpath.void_reply)
            except (OSError, EOFError, ValueError) as exc:
                if self._sock is not sock:
                    return
                self._broken(sock, TransportError(f"{call.method} on {self.address}: {exc}"))
                return
            except Exception as exc:  # an answer: the gateway refused this call
                error = fastpath.mapped(call.method, exc)
            if isinstance(error, TransportError):
                self._broken(sock, error)
                return
            with self._cond:
                self._inflight.popleft()
                self._cond.notify_all()  # flush() may wait for the window to empty
            self._next()
            p._deliver(call, error)

    def _broken(self, sock: socket.socket, error: BaseException, lost: bool = True) -> None:
        """Closes ``sock`` and fails every call sent on it, and those waiting to be (they
        were not sent); ``lost``: the gateway dropped it (rather than we closing it), so
        routing goes around it for a while."""
        with self._cond:
            if self._sock is not sock:  # replaced already: its calls were failed then
                with contextlib.suppress(OSError):
                    sock.close()
                return
            self._sock = None
            failed = list(self._inflight)
            unsent = list(self._waiting)
            self._free += len(failed)
            self._inflight.clear()
            self._waiting.clear()
            self._cond.notify_all()
        if lost:
            self.producer._unreachable(self)
        with contextlib.suppress(OSError):
            sock.close()
        for call in failed:
            self.producer._deliver(call, error)
        for call in unsent:
            self.producer._deliver(call, TransportError(f"not sent: {error}"))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def wait_idle(self, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._inflight and not self._waiting, timeout)

    def close(self) -> None:
        with self._send_lock:
            sock = self._sock
            if sock is not None:
                self._broken(sock, TransportError("the producer was closed"), lost=False)


class Producer:
    """Puts to the gateway at ``host:port`` without waiting (see the module's docs).

    ``window``: calls in flight per connection; ``connections``: how many; ``batch_size``:
    messages per call made by :meth:`put`; ``linger``: seconds a :meth:`put` batch waits to
    fill before it is sent anyway (0: only when full, or on :meth:`flush`); ``timeout``
    seconds for connecting and for room to send. Calls that find the window full wait in
    line, and later calls to the same queue and partition join them (see :class:`_Lane`) up
    to ``max_call_messages`` and ``max_call_bytes`` together (librdkafka's defaults: 10000
    and 1 MB; keep them within the gateway's ``--max-batch-messages`` and
    ``--max-request-bytes``); ``max_call_messages=1`` joins none."""

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        window: int = 4,
        connections: int = 1,
        batch_size: int = DEFAULT_BATCH_SIZE,
        framed: bool = False,
        timeout: float = 30.0,
        linger: float = 0.005,
        on_delivery: DeliveryCallback | None = None,
        max_call_messages: int = 10_000,
        max_call_bytes: int = 1 << 20,
    ) -> None:
        _int("port", port, 1, 65535)
        self.max_call_messages = _int("max_call_messages", max_call_messages, 1, 2**31 - 1)
        self.max_call_bytes = _int("max_call_bytes", max_call_bytes, 1, 2**31 - 1)
        self.window = _int("window", window, 1, 1024)
        _int("connections", connections, 1, 64)
        self.batch_size = _int("batch_size", batch_size, 1, 2**31 - 1)
        if not timeout > 0:
            raise InvalidArgument("timeout", f"must be > 0 seconds, got {timeout}")
        if not 0 <= linger <= 3600:
            raise InvalidArgument("linger", f"must be 0..3600 seconds, got {linger}")
        self.linger = linger
        self.host = host
        self.port = port
        self.framed = framed
        self.timeout = timeout
        self.on_delivery = on_delivery
        self.connections = connections
        # lanes per gateway address: the one given, and the owners of partitions put to
        self._by_address: dict[str, list[_Lane]] = {}
        self._lanes = self._lanes_of(host, port)
        self._spread = itertools.count()
        # partition owners, as the lead's Connection knows them (getQueueLocations, cached);
        # a Connection is one thread's at a time: lookups hold _route_lock
        self._router = Connection(host, port, framed=framed, timeout=timeout)
        self._route_lock = threading.Lock()
        self._routed: set[bytes] = set()  # queues whose owners were looked up
        self._lock = threading.Lock()
        self._buffers: dict[tuple[bytes, int | None], list[Any]] = {}
        self._unseen: list[BaseException] = []  # put() batches' errors for flush()
        self._closed = False
        # put()'s batches: when each was begun (for linger), and one lock that keeps a
        # (queue, partition)'s batches going out in the order they were filled
        self._born: dict[tuple[bytes, int | None], float] = {}
        self._order = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._lingering: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<hqueue.Producer {self.host}:{self.port} window={self.window}>"

    def _lanes_of(self, host: str, port: int) -> list[_Lane]:
        address = f"{host}:{port}"
        lanes = self._by_address.get(address)
        if lanes is None:
            base = len(self._by_address) * self.connections
            lanes = [_Lane(self, base + i, host, port) for i in range(self.connections)]
            self._by_address[address] = lanes
        return lanes

    def _lane(self, queue: bytes, partition: int | None) -> _Lane:
        if partition is None:  # a random partition anyway: spread the calls
            lanes = self._lanes
            return lanes[next(self._spread) % len(lanes)]
        # A partition's puts go to its owner, as Queue.put_many routes them (a gateway that
        # does not own it forwards them, one hop more); a partition always takes one lane
        # of that owner, so its order is kept
        with self._route_lock:
            self._routed.add(queue)
            try:
                owner = self._router.owner(queue, partition)
                lanes = self._lanes_of(owner.host, owner.port)
            except HQueueError:
                lanes = self._lanes  # the map is unknown now: the gateway given forwards
        return lanes[hash((queue, partition)) % len(lanes)]

    def _unreachable(self, lane: _Lane) -> None:
        """A gateway refused a connection or dropped one: route around it for a while and
        read the partition owners again."""
        with self._route_lock:
            self._router.avoid(lane.address)
            for queue in self._routed:
                self._router.forget_locations(queue)

    def _deliver(self, call: _Call, error: BaseException | None) -> None:
        """Resolves the futures of ``call``'s puts (and tells on_delivery of each)."""
        for i, (future, count) in enumerate(call.deliveries):
            own = error if len(call.deliveries) == 1 else _joined_error(call, i, error)
            if own is None:
                future.set_result(count)
            else:
                future.set_exception(own)
            if self.on_delivery is not None:
                with contextlib.suppress(Exception):  # a failing callback must not stop us
                    self.on_delivery(count, own)

    def put_many(
        self,
        queue: Bytes,
        messages: Sequence[Any] | Iterable[Any],
        partition: int | None = None,
    ) -> Future[int]:
        """Sends ``messages`` (as :meth:`hqueue.Queue.put_many` takes them) in one call, now;
        the Future gives their count once they are durable. Bad arguments raise here."""
        if self._closed:
            raise HQueueError("the producer is closed")
        name = _bytes("queue", queue)
        if not name:
            raise InvalidArgument("queue", "must not be empty")
        if partition is not None:
            _int("partition", partition, 0, MAX_PARTITION_ID)
        items = messages if isinstance(messages, (list, tuple)) else list(messages)
        request = codec.encode_put(0, name, -1 if partition is None else partition, items, 0)
        return self._send(name, partition, request, len(items))

    def put_lists(
        self,
        queue: Bytes,
        topics: Bytes | Sequence[Bytes],
        values: Sequence[Bytes],
        partition: int | None = None,
    ) -> Future[int]:
        """Like :meth:`put_many`, from one topic (or a list of them) and a list of values."""
        if self._closed:
            raise HQueueError("the producer is closed")
        name = _bytes("queue", queue)
        if not name:
            raise InvalidArgument("queue", "must not be empty")
        if partition is not None:
            _int("partition", partition, 0, MAX_PARTITION_ID)
        pid = -1 if partition is None else partition
        request = codec.encode_put_lists(0, name, pid, topics, values, 0)
        return self._send(name, partition, request, len(values))

    def _send(self, name: bytes, partition: int | None, request: bytes, count: int) -> Future[int]:
        future: Future[int] = Future()
        if count == 0:
            future.set_result(0)
            return future
        method = "putMessages" if partition is None else "putMessagesWithPid"
        future.set_running_or_notify_cancel()
        call = _Call(method, (name, partition), request, count, future)
        self._lane(name, partition).send(call)
        return future

    def put(self, queue: Bytes, topic: Bytes, value: Bytes, partition: int | None = None) -> None:
        """Adds one message to the batch of (queue, partition); the batch is sent once it
        holds ``batch_size`` messages or is ``linger`` seconds old (or on :meth:`flush`)."""
        if self._closed:
            raise HQueueError("the producer is closed")
        name = _bytes("queue", queue)
        if partition is not None:
            _int("partition", partition, 0, MAX_PARTITION_ID)
        key = (name, partition)
        with self._lock:
            batch = self._buffers.get(key)
            if batch is None:
                batch = self._buffers[key] = []
                self._born[key] = time.monotonic()
                if self.linger > 0:
                    if self._lingering is None:
                        self._lingering = threading.Thread(
                            target=self._linger_loop, name="hqueue-producer-linger", daemon=True
                        )
                        self._lingering.start()
                    self._wake.notify()
            batch.append((topic, value))
            if len(batch) < self.batch_size:
                return
        with self._order:
            with self._lock:
                batch = self._buffers.get(key)
                if batch is None or len(batch) < self.batch_size:
                    return  # sent meanwhile (linger, flush)
                del self._buffers[key]
                self._born.pop(key, None)
            self._send_buffered(key, batch)

    def _linger_loop(self) -> None:
        """Sends put()'s batches once they are ``linger`` seconds old."""
        while True:
            with self._lock:
                while True:
                    if self._closed:
                        return
                    if not self._born:
                        self._wake.wait()
                        continue
                    wait = min(self._born.values()) + self.linger - time.monotonic()
                    if wait <= 0:
                        break
                    self._wake.wait(wait)
            with self._order:
                with self._lock:
                    now = time.monotonic()
                    ripe = [k for k, t in self._born.items() if t + self.linger <= now]
                    batches = [(k, self._buffers.pop(k)) for k in ripe]
                    for k in ripe:
                        del self._born[k]
                for key, batch in batches:
                    try:
                        self._send_buffered(key, batch)
                    except HQueueError as exc:  # no caller to raise it to
                        self._lost(len(batch), exc)

    def _lost(self, count: int, error: HQueueError) -> None:
        if self.on_delivery is not None:
            with contextlib.suppress(Exception):
                self.on_delivery(count, error)
        else:
            with self._lock:
                self._unseen.append(error)

    def _send_buffered(self, key: tuple[bytes, int | None], batch: list[Any]) -> None:
        future = self.put_many(key[0], batch, key[1])
        if self.on_delivery is None:
            future.add_done_callback(self._remember)

    def _remember(self, future: Future[int]) -> None:
        error = future.exception()
        if error is not None:
            with self._lock:
                self._unseen.append(error)

    def flush(self, timeout: float | None = None) -> None:
        """Sends what :meth:`put` buffered and waits (``timeout`` seconds, None: as long as
        it takes) until every call sent so far is answered. Raises the first error of a
        :meth:`put` batch, if there is no ``on_delivery`` to hear of it."""
        with self._order:
            with self._lock:
                buffers, self._buffers = self._buffers, {}
                self._born.clear()
            for key, batch in buffers.items():
                self._send_buffered(key, batch)
        for lane in self._all_lanes():
            if not lane.wait_idle(timeout):
                raise TransportError(f"calls still unanswered after {timeout} s")
        with self._lock:
            unseen, self._unseen = self._unseen, []
        if unseen:
            raise unseen[0]

    def _all_lanes(self) -> list[_Lane]:
        with self._route_lock:
            return [lane for lanes in self._by_address.values() for lane in lanes]

    @property
    def calls(self) -> int:
        """Calls sent to gateways so far: puts joined into one call count once."""
        return sum(lane.calls for lane in self._all_lanes())

    def pending(self) -> int:
        """Messages buffered by :meth:`put`, not sent yet."""
        with self._lock:
            return sum(len(b) for b in self._buffers.values())

    def close(self, timeout: float | None = None) -> None:
        """Flushes (unless closed already), then closes the connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
                self._wake.notify_all()  # the linger thread ends
            for lane in self._all_lanes():
                lane.close()
            self._router.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # leaving by an exception: what was sent is answered, the buffers dropped
            with self._lock:
                self._buffers.clear()
                self._born.clear()
                self._closed = True
                self._wake.notify_all()
            for lane in self._all_lanes():
                with contextlib.suppress(Exception):
                    lane.wait_idle(self.timeout)
                lane.close()
            self._router.close()


_MESSAGE_ARGUMENT = re.compile(r"tMessages\[(\d+)\](.*)")


def _joined_error(call: _Call, index: int, error: BaseException | None) -> BaseException | None:
    """The outcome of the ``index``-th put joined into ``call``, when the call's is
    ``error``. The gateway checks a put whole before storing any of it, so a refused call
    stored nothing: the put whose message was refused gets the error with that message
    numbered among its own; the others are told they went down with it."""
    if not isinstance(error, InvalidArgument):
        return error
    match = _MESSAGE_ARGUMENT.fullmatch(error.argument)
    if match is None:  # about the queue or partition: every put of the call shares it
        return error
    at = int(match.group(1))
    first = sum(count for _, count in call.deliveries[:index])
    own = call.deliveries[index][1]
    if first <= at < first + own:
        return InvalidArgument(f"tMessages[{at - first}]{match.group(2)}", error.message)
    return InvalidArgument(
        "",
        "not stored: the producer sent these messages in one call with others, and the gateway "
        f"refused that call for one of those ({error.argument}: {error.message}); "
        "these may be sent again",
    )
