"""The locustfile's Thrift client: one connection to the gateway whose every call fires locust's
request event (request type ``thrift``, name = the method, response length = the bytes received),
and the counts of messages the calls moved (locust's statistics count requests only).

IDL exceptions, ``TApplicationException`` and transport errors are all failures. After a failure
that is not an answer from the gateway the connection is dropped and the next call opens a new
one: thriftpy2 does not check sequence ids, so a late reply would otherwise be read as the next
call's. See ``loadtests/locustfile.py`` for the scenarios that use it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from hqueue.protocol import hqueue_thrift, protocol_factory, transport_factory
from locust.exception import RescheduleTask
from thriftpy2.thrift import TApplicationException, TClient
from thriftpy2.transport import TSocket

REQUEST_TYPE = "thrift"
RECONNECT_PAUSE_S = 0.1  # after a failed connect, per user


class Endpoint(Protocol):
    """Where and how to connect (the locustfile's ``Settings`` has these)."""

    host: str
    port: int
    timeout: float
    framed: bool
    compact: bool


# -- counting messages -----------------------------------------------------------------------


class MessageCounter:
    """Messages moved per method; locust's own statistics only count requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.by_method: dict[str, int] = {}
            self.started = time.time()
            self.stopped: float | None = None

    def add(self, method: str, n: int) -> None:
        with self._lock:
            self.by_method[method] = self.by_method.get(method, 0) + n

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "started_unix": self.started,
                "stopped_unix": self.stopped,
                "messages": dict(self.by_method),
            }


COUNTER = MessageCounter()
PUT_METHODS = ("putMessage", "putMessages", "putMessageWithPid", "putMessagesWithPid")


# -- the Thrift client that reports to locust ------------------------------------------------


class _CountingSocket(TSocket):
    """thriftpy2's socket, counting the bytes that pass (for locust's response length)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received = 0
        self.sent = 0

    def read(self, sz: int) -> bytes:
        data = super().read(sz)
        self.received += len(data)
        return data

    def write(self, buf: bytes) -> None:
        super().write(buf)
        self.sent += len(buf)


class CallFailed(RescheduleTask):
    """A call failed and was reported as a failure; ends the task (locust then reschedules).

    A ``RescheduleTask`` so that locust does not report it a second time as an error of the
    locustfile."""


class ThriftClient:
    """One connection to the gateway; every call fires locust's request event.

    Not shared between users (greenlets): thriftpy2 clients do not check sequence ids.
    """

    def __init__(self, settings: Endpoint, request_event: Any) -> None:
        self.settings = settings
        self._request_event = request_event
        self._client: Any = None
        self._sock: _CountingSocket | None = None
        self.generation = 0  # bumped on every new connection: a scanner id dies with its own

    def _fire(self, name: str, t0: float, start: float, length: int, exc: Exception | None,
              context: dict[str, Any]) -> None:  # fmt: skip
        self._request_event.fire(
            request_type=REQUEST_TYPE,
            name=name,
            start_time=start,
            response_time=(time.perf_counter() - t0) * 1000.0,
            response_length=length,
            exception=exc,
            context=context,
        )

    def _connect(self) -> None:
        s = self.settings
        start, t0 = time.time(), time.perf_counter()
        sock = _CountingSocket(s.host, s.port, socket_timeout=int(s.timeout * 1000),
                               connect_timeout=int(s.timeout * 1000))  # fmt: skip
        trans = transport_factory(s.framed).get_transport(sock)
        try:
            trans.open()
        except Exception as exc:
            self._fire("connect", t0, start, 0, exc, {})
            time.sleep(RECONNECT_PAUSE_S)  # (gevent's: locust patched time) do not spin
            raise CallFailed() from exc
        self._fire("connect", t0, start, 0, None, {})
        self._client = TClient(hqueue_thrift().HQueueService,
                               protocol_factory(s.compact).get_protocol(trans))  # fmt: skip
        self._sock = sock
        self.generation += 1

    def call(self, method: str, *args: Any) -> Any:
        """Calls ``method``; reports it; raises :class:`CallFailed` if it failed."""
        if self._client is None:
            self._connect()
        sock = self._sock
        assert sock is not None
        received0, sent0 = sock.received, sock.sent
        start, t0 = time.time(), time.perf_counter()
        result: Any = None
        error: Exception | None = None
        try:
            result = getattr(self._client, method)(*args)
        except Exception as exc:
            error = exc
            if not _is_answer(exc):
                self.close()  # the stream's state is unknown: never read a stale reply
        self._fire(method, t0, start, sock.received - received0, error,
                   {"request_bytes": sock.sent - sent0})  # fmt: skip
        if error is not None:
            raise CallFailed() from error
        return result

    @property
    def connected(self) -> bool:
        return self._client is not None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None
        self._sock = None


def _is_answer(exc: Exception) -> bool:
    """Whether ``exc`` is a reply the gateway sent (the connection is then still in step)."""
    t = hqueue_thrift()
    return isinstance(exc, (t.IOError, t.IllegalArgument, TApplicationException))
