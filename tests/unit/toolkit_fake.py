"""An in-memory stand-in for the gateway's client, with the contract's scanner semantics, for
the toolkit's tests (test_toolkit_commands.py, test_toolkit_shell.py)."""

from __future__ import annotations

import socket
from typing import Any

from hqueue.protocol import hqueue_thrift
from hqueue.toolkit import commands

T = hqueue_thrift()


class FakeClient:
    """The HQueueService methods the toolkit uses, with the contract's scanner semantics."""

    def __init__(self, batch: int = 2) -> None:
        self.queues: dict[bytes, Any] = {}
        self.partitions: dict[bytes, list[list[Any]]] = {}
        self.scanners: dict[int, list[Any]] = {}
        self.next_scanner = 1
        self.batch = batch  # getList returns at most this many: callers must loop
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.clock = 1_700_000_000_000
        self.closed = False

    def _log(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def _queue(self, name: bytes, enabled: bool = False) -> Any:
        if name not in self.queues:
            raise T.IllegalArgument(message=f"queueName: no queue {name!r}")
        if enabled and not self.queues[name].enabled:
            raise T.IllegalArgument(message="queueName: disabled")
        return self.queues[name]

    def createQueue(self, name: bytes, count: int, ttl: int, config: dict[str, str]) -> None:
        self._log("createQueue", name, count, ttl, config)
        if name in self.queues:
            raise T.IllegalArgument(message="queueName: exists")
        self.queues[name] = T.TQueueInfo(name, count, ttl, True, config)
        self.partitions[name] = [[] for _ in range(count)]

    def deleteQueue(self, name: bytes) -> None:
        self._log("deleteQueue", name)
        self._queue(name)
        del self.queues[name]

    def truncateQueue(self, name: bytes) -> None:
        self._log("truncateQueue", name)
        self._queue(name)
        self.partitions[name] = [[] for _ in self.partitions[name]]

    def disableQueue(self, name: bytes) -> None:
        self._log("disableQueue", name)
        self._queue(name).enabled = False

    def enableQueue(self, name: bytes) -> None:
        self._log("enableQueue", name)
        self._queue(name).enabled = True

    def listQueues(self) -> list[Any]:
        return list(self.queues.values())

    def getQueueLocations(self, name: bytes) -> list[bytes]:
        return [b"h%d:9190" % i for i in range(self._queue(name).partitionCount)]

    def putMessageWithPid(self, name: bytes, pid: int, message: Any) -> None:
        self._log("putMessageWithPid", name, pid, message)
        self._store(name, pid, message)

    def _store(self, name: bytes, pid: int, message: Any) -> None:
        self._queue(name, enabled=True)
        self.clock += 1
        stored = T.TMessage(T.TMessageID(self.clock, 0), pid, message.topic, message.value)
        self.partitions[name][pid].append(stored)

    def putMessage(self, name: bytes, message: Any) -> None:
        self._log("putMessage", name, message)
        self._store(name, 0, message)

    def messageScannerOpen(self, name: bytes, pid: int, scan: Any) -> int:
        self._log("messageScannerOpen", name, pid, scan)
        self._queue(name, enabled=True)
        messages = list(self.partitions[name][pid])
        key = commands.message_key
        if scan.reversed:
            messages.reverse()
        if scan.startMessageID is not None:
            start = (scan.startMessageID.timestamp, scan.startMessageID.sequenceID)
            if scan.reversed:
                messages = [m for m in messages if key(m) <= start]
            else:
                messages = [m for m in messages if key(m) >= start]
        sid = self.next_scanner
        self.next_scanner += 1
        self.scanners[sid] = messages
        return sid

    def messageScannerGetList(self, sid: int, n: int) -> list[Any]:
        if sid not in self.scanners:
            raise T.IllegalArgument(message="id: unknown scanner")
        take = min(n, self.batch)
        out, self.scanners[sid] = self.scanners[sid][:take], self.scanners[sid][take:]
        if not out:
            del self.scanners[sid]  # the contract: an empty list frees the scanner
        return out

    def messageScannerClose(self, sid: int) -> None:
        self._log("messageScannerClose", sid)
        if sid not in self.scanners:
            raise T.IllegalArgument(message="id: unknown scanner")
        del self.scanners[sid]

    def close(self) -> None:
        self.closed = True


def put_values(fake: FakeClient, queue: str, pid: int, *values: bytes) -> None:
    for value in values:
        commands.put_message(fake, queue, b"t", value, pid)


def closed_port() -> int:
    """A port nothing listens on (it was bound and let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
