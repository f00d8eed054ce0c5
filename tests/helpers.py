"""Small helpers shared by the tests."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from hqueue.protocol import hqueue_thrift
from thriftpy2.protocol.binary import TBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TMemoryBuffer


def msg(T: Any, topic: bytes, value: bytes, pid: int | None = None) -> Any:
    return T.TMessage(topic=topic, value=value, partitionID=pid)


def drain(client: Any, sid: int, n: int = 1000) -> list[Any]:
    """Reads a scanner to its end (an empty list, which also frees it)."""
    out: list[Any] = []
    while True:
        batch = client.messageScannerGetList(sid, n)
        if not batch:
            return out
        out.extend(batch)


def scan_queue(client: Any, queue: str | bytes, n: int = 1000) -> list[Any]:
    """Every message of a queue, merged in MessageID order."""
    q = queue.encode() if isinstance(queue, str) else queue
    return drain(client, client.queueScannerOpen(q, hqueue_thrift().TMessageScan()), n)


def key(m: Any) -> tuple[int, int]:
    return (m.id.timestamp, m.id.sequenceID)


def call_bytes(T: Any, method: str, seqid: int, **args: Any) -> bytes:
    """A binary-protocol call, encoded (to send several before reading an answer)."""
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin(method, TMessageType.CALL, seqid)
    getattr(T.HQueueService, method + "_args")(**args).write(proto)
    proto.write_message_end()
    return buf.getvalue()


class SocketReader:
    """thriftpy2's transport face over a blocking socket, for reading answers one by one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the gateway closed the connection")
            out += chunk
        return out


def read_answer(T: Any, proto: Any) -> tuple[str, int, Any]:
    """(method, seqid, result struct) of the next answer on ``proto``."""
    name, kind, seqid = proto.read_message_begin()
    if kind == TMessageType.EXCEPTION:
        exc = TApplicationException()
        exc.read(proto)
        raise AssertionError(f"{name} #{seqid} failed: {exc}")
    result = getattr(T.HQueueService, name + "_result")()
    result.read(proto)
    proto.read_message_end()
    return name, seqid, result


def rocksdb_option(path: Path, name: str, section: str = "") -> list[str]:
    """``name``'s value in each section of RocksDB's latest OPTIONS file in ``path`` whose
    header starts with ``[`` + ``section`` (every section by default)."""
    latest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    values, inside = [], False
    for line in latest.read_text().splitlines():
        if line.startswith("["):
            inside = line.startswith("[" + section)
        elif inside and line.strip().startswith(name + "="):
            values.append(line.split("=", 1)[1].strip())
    return values
