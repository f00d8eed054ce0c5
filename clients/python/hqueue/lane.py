"""A producer's connections (see :mod:`hqueue.producer`): the calls of each go out in order,
up to ``window`` in flight; the calls that find the window full wait in line and join, and a
reader thread matches the answers to them."""

from __future__ import annotations

import collections
import contextlib
import re
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from . import codec, fastpath
from .errors import InvalidArgument, TransportError

if TYPE_CHECKING:
    from .producer import Producer


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
        # calls out of the window and the line whose futures are not resolved yet: flush()
        # waits for them too, or it could return before the error it must raise is known
        self._delivering = 0
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
                    self._delivering += 1  # in hand: neither waiting nor in flight
                    self._cond.notify_all()  # room in the line
                try:
                    self._transmit(call)
                except TransportError as exc:
                    error = exc
                else:
                    self._delivered(1)  # in flight now
                    return
            self._deliver_all([(call, error)])  # and the slot goes to the next one

    def _read(self, sock: socket.socket, ch: fastpath.Channel, generation: int) -> None:
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
                self._delivering += 1
            self._next()
            self._deliver_all([(call, error)])

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
            self._delivering += len(failed) + len(unsent)
            self._cond.notify_all()
        if lost:
            self.producer._unreachable(self)
        with contextlib.suppress(OSError):
            sock.close()
        self._deliver_all(
            [(c, error) for c in failed]
            + [(c, TransportError(f"not sent: {error}")) for c in unsent]
        )

    def _deliver_all(self, outcomes: Sequence[tuple[_Call, BaseException | None]]) -> None:
        """Resolves the futures of calls counted in ``_delivering``; then flush() may see
        them done."""
        try:
            for call, error in outcomes:
                self.producer._deliver(call, error)
        finally:
            self._delivered(len(outcomes))

    def _delivered(self, count: int) -> None:
        """``count`` calls of ``_delivering`` are resolved (or were sent after all)."""
        with self._cond:
            self._delivering -= count
            self._cond.notify_all()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def wait_idle(self, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._inflight and not self._waiting and not self._delivering,
                timeout,
            )

    def close(self) -> None:
        with self._send_lock:
            sock = self._sock
            if sock is not None:
                self._broken(sock, TransportError("the producer was closed"), lost=False)


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
