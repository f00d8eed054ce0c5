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

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from hqueue_contract.limits import MAX_PARTITION_ID

from . import codec
from .arguments import Bytes, _bytes, _int
from .connection import DEFAULT_HOST, DEFAULT_PORT, Connection
from .errors import HQueueError, InvalidArgument, TransportError
from .lane import _Call, _joined_error, _Lane
from .queue import DEFAULT_BATCH_SIZE

DeliveryCallback = Callable[[int, "BaseException | None"], None]


class Producer:
    """Puts to the gateway at ``host:port`` without waiting (see the module's docs).

    ``window``: calls in flight per connection; ``connections``: how many; ``batch_size``:
    messages per call made by :meth:`put`; ``linger``: seconds a :meth:`put` batch waits to
    fill before it is sent anyway (0: only when full, or on :meth:`flush`); ``timeout``
    seconds for connecting and for room to send. Calls that find the window full wait in
    line, and later calls to the same queue and partition join them (see :mod:`hqueue.lane`) up
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
