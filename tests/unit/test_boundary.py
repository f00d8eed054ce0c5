"""The Thrift boundary in-process: the real server, processor and service over a memory store
that can be made to fail. Every failure becomes the answer the IDL promises (InvalidArgument ->
IllegalArgument, StoreError -> IOError, anything else -> TApplicationException INTERNAL_ERROR)
and the same connection then serves the next call, on every protocol and transport."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import gevent.socket
import pytest
from hqueue.protocol import hqueue_thrift
from thriftpy2.protocol import TBinaryProtocol, TCompactProtocol
from thriftpy2.thrift import TApplicationException, TClient, TMessageType
from thriftpy2.transport import TBufferedTransport, TFramedTransport, TSocket

from gateway.boundary import GatewayProcessor
from gateway.errors import StoreError
from gateway.scanners import ScannerRegistry
from gateway.server import ThriftServer, WireOptions
from gateway.service import GatewayService
from gateway.store.base import PartitionReader, PutBatch, QueueMeta, ReadResult
from gateway.store.memory import MemoryStore
from gateway.wire import RequestLimits

T = hqueue_thrift()
WIRES = [(False, False), (True, False), (False, True), (True, True)]  # (framed, compact)
WIRE_IDS = ["buffered-binary", "framed-binary", "buffered-compact", "framed-compact"]


class FailingStore(MemoryStore):
    """A memory store whose puts and scans raise ``fail`` while it is set."""

    fail: BaseException | None = None

    def put(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> None:
        if self.fail is not None:
            raise self.fail
        super().put(queue, batches)

    def reader(self, queue: QueueMeta, partition: int, *args: Any, **kw: Any) -> PartitionReader:
        return _FailingReader(self, super().reader(queue, partition, *args, **kw))


class _FailingReader(PartitionReader):
    def __init__(self, store: FailingStore, inner: PartitionReader) -> None:
        self.store, self.inner = store, inner

    def read(self, limit: int, max_bytes: int | None = None) -> ReadResult:
        if self.store.fail is not None:
            raise self.store.fail
        return self.inner.read(limit, max_bytes)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def store() -> FailingStore:
    return FailingStore()


@contextlib.contextmanager
def serve(store: FailingStore, framed: bool, compact: bool) -> Iterator[Any]:
    """A client connected to an in-process gateway server over ``store``."""
    service = GatewayService(store, ScannerRegistry(), T, advertise="127.0.0.1:1")
    processor = GatewayProcessor(
        T, T.HQueueService, service, binary=not compact, max_value_bytes=4 << 20
    )
    server = ThriftServer(processor, "127.0.0.1", 0, WireOptions(framed, compact, RequestLimits()))
    server.start()
    sock = gevent.socket.create_connection(server.address, timeout=10)
    transport = (TFramedTransport if framed else TBufferedTransport)(TSocket(sock=sock))
    client = TClient(T.HQueueService, (TCompactProtocol if compact else TBinaryProtocol)(transport))
    try:
        yield client
    finally:
        sock.close()
        server.stop(grace=1)


def messages(*values: bytes, pid: int | None = None) -> list[Any]:
    return [T.TMessage(topic=b"t", value=v, partitionID=pid) for v in values]


@pytest.mark.parametrize(("framed", "compact"), WIRES, ids=WIRE_IDS)
def test_a_callers_mistake_is_an_illegal_argument_naming_it(
    store: FailingStore, framed: bool, compact: bool
) -> None:
    with serve(store, framed, compact) as c:
        with pytest.raises(T.IllegalArgument) as err:
            c.createQueue(b"q", 0, 60, {})
        assert "partitionCount" in err.value.message
        c.createQueue(b"q", 2, 60, {})  # the same connection goes on
        with pytest.raises(T.IllegalArgument) as err:
            c.putMessagesWithPid(b"q", 7, messages(b"x"))
        assert "partitionID" in err.value.message
        with pytest.raises(T.IllegalArgument) as err:
            c.messageScannerGetList(424242, 10)
        assert "id" in err.value.message
        assert [q.name for q in c.listQueues()] == [b"q"]


@pytest.mark.parametrize(("framed", "compact"), WIRES, ids=WIRE_IDS)
def test_a_store_fault_is_an_io_error(store: FailingStore, framed: bool, compact: bool) -> None:
    with serve(store, framed, compact) as c:
        c.createQueue(b"q", 2, 60, {})
        sid = c.messageScannerOpen(b"q", 0, T.TMessageScan())
        store.fail = StoreError("disk full")
        for put in (
            lambda: c.putMessagesWithPid(b"q", 1, messages(b"a", b"b")),  # the fast path
            lambda: c.putMessages(b"q", messages(b"a", pid=1)),  # a message's own partition
            lambda: c.putMessage(b"q", messages(b"a")[0]),
        ):
            with pytest.raises(T.IOError) as err:
                put()
            assert "disk full" in err.value.message
        with pytest.raises(T.IOError):
            c.messageScannerGetList(sid, 10)
        store.fail = None
        c.putMessagesWithPid(b"q", 0, messages(b"ok"))
        assert [m.value for m in c.messageScannerGetList(sid, 10)] == [b"ok"]


@pytest.mark.parametrize(("framed", "compact"), WIRES, ids=WIRE_IDS)
def test_anything_else_is_an_internal_error_and_the_connection_survives(
    store: FailingStore, framed: bool, compact: bool
) -> None:
    with serve(store, framed, compact) as c:
        c.createQueue(b"q", 1, 60, {})
        sid = c.queueScannerOpen(b"q", T.TMessageScan())
        store.fail = ZeroDivisionError("boom")
        for call in (
            lambda: c.putMessagesWithPid(b"q", 0, messages(b"a")),
            lambda: c.putMessages(b"q", messages(b"a", pid=0)),
            lambda: c.messageScannerGetList(sid, 10),
        ):
            with pytest.raises(TApplicationException) as err:
                call()
            assert err.value.type == TApplicationException.INTERNAL_ERROR
            assert "ZeroDivisionError: boom" in err.value.message
        store.fail = None
        c.putMessagesWithPid(b"q", 0, messages(b"a", b"b"))
        got = c.messageScannerGetList(sid, 10)
        assert [(m.partitionID, m.topic, m.value) for m in got] == [
            (0, b"t", b"a"),
            (0, b"t", b"b"),
        ]
        assert c.messageScannerGetList(sid, 10) == []


def test_scan_replies_are_the_same_encoded_in_c_or_by_thriftpy2(store: FailingStore) -> None:
    """Binary replies are encoded from rows in C, compact ones through TMessage objects."""
    answers = []
    for compact in (False, True):
        with serve(store, False, compact) as c:
            if not compact:
                c.createQueue(b"q", 3, 60, {})
                for p in range(3):
                    c.putMessagesWithPid(b"q", p, messages(b"", b"\x00" * 300, bytes(range(256))))
            answers.append(c.messageScannerGetList(c.queueScannerOpen(b"q", None), 100))
    assert len(answers[0]) == 9
    assert answers[0] == answers[1]


@pytest.mark.parametrize(("framed", "compact"), WIRES, ids=WIRE_IDS)
def test_an_unknown_method_is_an_application_exception(
    store: FailingStore, framed: bool, compact: bool
) -> None:
    with serve(store, framed, compact) as c:
        proto = c._oprot  # a call the IDL does not have, written by hand
        proto.write_message_begin("noSuchMethod", TMessageType.CALL, 0)
        proto.write_struct(T.HQueueService.listQueues_args())  # no fields: just a stop
        proto.write_message_end()
        proto.trans.flush()
        with pytest.raises(TApplicationException) as err:
            c._recv("noSuchMethod")
        assert err.value.type == TApplicationException.UNKNOWN_METHOD
        assert c.listQueues() == []  # the connection goes on
