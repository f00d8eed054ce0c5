"""Wire compatibility: the official Apache Thrift Python library talks to the gateway.

The stubs are the committed ones in ``clients/python/gen`` (``clients/generate`` makes them from
``idl/`` with the Apache ``thrift`` compiler; tests/unit/test_generated_stubs.py checks they are
current), so this is exactly what a third-party client would use. Every transport/protocol
combination the gateway offers is exercised against a gateway started with the matching flags,
including the C-accelerated protocol variants of the Apache library.

Module caching: thriftpy2 registers the IDL it loads (``hqueue.protocol.hqueue_thrift()``) in
``sys.modules`` as ``hqueue_thrift`` -- the very name of the generated package. The fixture
therefore imports the generated package with that entry set aside and restores it afterwards;
the generated modules keep references to each other, so they work without being registered.
"""

from __future__ import annotations

import importlib
import itertools
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GEN_DIR = ROOT / "clients" / "python" / "gen"
GEN_PACKAGE = "hqueue_thrift"

# the request reader and the protocols: the store never sees these requests
pytestmark = pytest.mark.wire


# -- generated stubs ----------------------------------------------------------------------


def _set_aside(prefix: str) -> dict[str, Any]:
    taken = {
        name: mod
        for name, mod in sys.modules.items()
        if name == prefix or name.startswith(prefix + ".")
    }
    for name in taken:
        del sys.modules[name]
    return taken


@pytest.fixture(scope="session")
def apache() -> Iterator[SimpleNamespace]:
    """The committed Apache-generated stubs for both IDL files, plus the Apache library pieces."""
    out = GEN_DIR
    assert (out / GEN_PACKAGE / "gateway" / "HQueueService.py").is_file(), os.listdir(out)
    assert (out / GEN_PACKAGE / "subscriber" / "HQueueSubscriberService.py").is_file()

    from hqueue.protocol import hqueue_thrift
    from thrift.protocol import TBinaryProtocol, TCompactProtocol

    # Load thriftpy2's module first, whatever ran before, so the set-aside path always runs.
    thriftpy2_module = hqueue_thrift()
    assert sys.modules.get(GEN_PACKAGE) is thriftpy2_module
    saved = _set_aside(GEN_PACKAGE)
    sys.path.insert(0, str(out))
    importlib.invalidate_caches()
    try:
        service = importlib.import_module(f"{GEN_PACKAGE}.gateway.HQueueService")
        ttypes = importlib.import_module(f"{GEN_PACKAGE}.gateway.ttypes")
        subscriber = importlib.import_module(f"{GEN_PACKAGE}.subscriber.HQueueSubscriberService")
        assert Path(service.__file__).is_relative_to(out), service.__file__
    finally:
        sys.path.remove(str(out))
        _set_aside(GEN_PACKAGE)
        sys.modules.update(saved)

    assert sys.modules[GEN_PACKAGE] is thriftpy2_module  # other tests see what they saw
    # the generated subscriber service refers to the generated TMessage, not thriftpy2's
    args_spec = subscriber.consumeMessages_args.thrift_spec[1]
    assert args_spec[3][1][0] is ttypes.TMessage

    yield SimpleNamespace(
        HQueueService=service,
        ttypes=ttypes,
        subscriber=subscriber,
        protocols={
            "binary": TBinaryProtocol.TBinaryProtocolFactory(),
            "binary-accel": TBinaryProtocol.TBinaryProtocolAcceleratedFactory(),
            "compact": TCompactProtocol.TCompactProtocolFactory(),
            "compact-accel": TCompactProtocol.TCompactProtocolAcceleratedFactory(),
        },
    )


# -- a gateway and an Apache client per wire format ---------------------------------------

TRANSPORTS = ["buffered", "framed"]
PROTOCOLS = ["binary", "binary-accel", "compact", "compact-accel"]


class ApacheConn:
    """One Apache-library connection: ``client`` (generated), plus raw ``proto``/``trans``."""

    def __init__(self, apache: SimpleNamespace, gw: Any, transport: str, protocol: str) -> None:
        from thrift.transport import TSocket, TTransport

        sock = TSocket.TSocket(gw.host, gw.port)
        sock.setTimeout(15_000)
        trans = (
            TTransport.TFramedTransport(sock)
            if transport == "framed"
            else TTransport.TBufferedTransport(sock)
        )
        trans.open()
        self.trans = trans
        self.proto = apache.protocols[protocol].getProtocol(trans)
        self.client = apache.HQueueService.Client(self.proto)

    def close(self) -> None:
        self.trans.close()


@pytest.fixture(params=[(t, p) for t in TRANSPORTS for p in PROTOCOLS], ids=lambda v: "-".join(v))
def wire(request: Any, apache: SimpleNamespace, start_gateway: Any) -> Iterator[SimpleNamespace]:
    transport, protocol = request.param
    flags = []
    if transport == "framed":
        flags.append("--framed")
    if protocol.startswith("compact"):
        flags.append("--compact")
    gw = start_gateway(*flags)
    conns: list[ApacheConn] = []

    def connect() -> ApacheConn:
        conn = ApacheConn(apache, gw, transport, protocol)
        conns.append(conn)
        return conn

    first = connect()
    yield SimpleNamespace(
        gw=gw, conn=first, client=first.client, connect=connect, t=apache.ttypes, apache=apache
    )
    for conn in conns:
        conn.close()


# -- helpers ------------------------------------------------------------------------------


def drain(client: Any, sid: int, n: int = 7) -> list[Any]:
    """messageScannerGetList until the empty list (which also frees the scanner)."""
    out: list[Any] = []
    for _ in range(10_000):
        batch = client.messageScannerGetList(sid, n)
        if not batch:
            return out
        out.extend(batch)
    raise AssertionError("scanner never reached its end")


def key(m: Any) -> tuple[int, int]:
    return (m.id.timestamp, m.id.sequenceID)


def strictly_increasing(ids: list[tuple[int, int]]) -> bool:
    return all(a < b for a, b in itertools.pairwise(ids))


NON_UTF8 = [
    bytes(range(256)),
    b"\xff\xfe\xfd\x00\x80\xc0\xc1",
    b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8
    b"\x00" * 17,
    b"",
    b"plain ascii",
    os.urandom(70_000),
]
TOPIC_255 = bytes((i * 7 + 1) % 256 or 1 for i in range(255))  # non-UTF-8, 255 bytes


# -- the tests ----------------------------------------------------------------------------


def test_round_trip(wire: SimpleNamespace, queue_name: str) -> None:
    c, t = wire.client, wire.t
    qname = queue_name.encode()
    assert c.createQueue(qname, 3, 3600, {"hbase.hqueue.compression": "lz4"}) is None

    # a batch without partitionIDs lands on one partition, in order
    batch = [t.TMessage(topic=b"t\xff", value=v) for v in NON_UTF8]
    batch.append(t.TMessage(topic=TOPIC_255, value=b""))
    batch.append(t.TMessage(topic=TOPIC_255, value=b"\x80\x81 end"))
    c.putMessages(qname, batch)
    # explicit partitions, and putMessageWithPid
    c.putMessages(
        qname, [t.TMessage(partitionID=2, topic=b"p2", value=b"\xfe%d" % i) for i in range(5)]
    )
    c.putMessageWithPid(qname, 1, t.TMessage(topic=TOPIC_255, value=b"\x00with-pid\xff"))
    c.putMessageWithPid(qname, 1, t.TMessage(topic=b"a", value=b""))

    sent = {(m.topic, m.value) for m in batch}
    sent |= {(b"p2", b"\xfe%d" % i) for i in range(5)}
    sent |= {(TOPIC_255, b"\x00with-pid\xff"), (b"a", b"")}

    # queue scanner: everything, byte for byte, merged in MessageID order
    got = drain(c, c.queueScannerOpen(qname, t.TMessageScan()))
    assert len(got) == len(batch) + 7
    assert {(m.topic, m.value) for m in got} == sent
    for m in got:
        assert type(m.topic) is bytes and type(m.value) is bytes
        assert m.id is not None and m.partitionID in (0, 1, 2)
    assert [key(m) for m in got] == sorted(key(m) for m in got)
    by_pid: dict[int, list[Any]] = {}
    for m in got:
        by_pid.setdefault(m.partitionID, []).append(m)
    for ms in by_pid.values():
        assert strictly_increasing([key(m) for m in ms])
    p2 = [m for m in by_pid[2] if m.topic == b"p2"]
    assert [m.value for m in p2] == [b"\xfe%d" % i for i in range(5)]
    assert [m.value for m in by_pid[1]][-2:] == [b"\x00with-pid\xff", b""]
    # the unpartitioned batch kept its order on the partition it went to
    batch_pid = next(m.partitionID for m in got if m.topic == b"t\xff")
    in_batch = [(m.topic, m.value) for m in by_pid[batch_pid] if m.topic in (b"t\xff", TOPIC_255)]
    assert in_batch[: len(batch)] == [(m.topic, m.value) for m in batch]

    # topic filter with the 255-byte non-UTF-8 topic, newest first
    rev = drain(c, c.queueScannerOpen(qname, t.TMessageScan(topics=[TOPIC_255], reversed=True)))
    assert {m.topic for m in rev} == {TOPIC_255}
    assert len(rev) == 3
    assert [key(m) for m in rev] == sorted((key(m) for m in rev), reverse=True)

    # combined scanner over two partitions
    comb = drain(c, c.combinedScannerOpen(qname, [2, 1], t.TMessageScan(caching=2)), n=2)
    assert {m.partitionID for m in comb} <= {1, 2}
    assert len(comb) == len(by_pid.get(1, [])) + len(by_pid[2])
    assert [key(m) for m in comb] == sorted(key(m) for m in comb)

    # single-partition scanner; start inclusive / stop exclusive
    scan = t.TMessageScan(startMessageID=p2[1].id, stopMessageID=p2[4].id, caching=1)
    sub = drain(c, c.messageScannerOpen(qname, 2, scan), n=1)
    assert [m.value for m in sub] == [b"\xfe1", b"\xfe2", b"\xfe3"]
    assert all(m.partitionID == 2 and m.id == p2[i + 1].id for i, m in enumerate(sub))

    # messageScannerGet one by one, then the empty TMessage (id unset) at the end
    sid = c.messageScannerOpen(qname, 2, t.TMessageScan())
    one_by_one = []
    for _ in range(100):
        m = c.messageScannerGet(sid)
        if m.id is None:
            assert m.partitionID is None
            break
        one_by_one.append(m)
    else:
        raise AssertionError("messageScannerGet never returned the empty message")
    expected = [(m.id, m.topic, m.value) for m in by_pid[2]]
    assert [(m.id, m.topic, m.value) for m in one_by_one] == expected
    c.messageScannerClose(sid)

    # locations and queue info
    assert c.getQueueLocations(qname) == [wire.gw.address.encode()] * 3
    infos = [i for i in c.listQueues() if i.name == qname]
    assert len(infos) == 1
    info = infos[0]
    assert isinstance(info, t.TQueueInfo)
    assert (info.name, info.partitionCount, info.ttlSeconds, info.enabled) == (qname, 3, 3600, True)
    assert info.config == {"hbase.hqueue.compression": "LZ4"}
    c.disableQueue(qname)
    assert [i.enabled for i in c.listQueues() if i.name == qname] == [False]
    c.enableQueue(qname)
    c.truncateQueue(qname)
    assert drain(c, c.queueScannerOpen(qname, None)) == []
    c.deleteQueue(qname)
    assert all(i.name != qname for i in c.listQueues())


def test_errors_name_the_argument_and_keep_the_connection(
    wire: SimpleNamespace, queue_name: str
) -> None:
    c, t = wire.client, wire.t
    ia = t.IllegalArgument
    qname = queue_name.encode()
    c.createQueue(qname, 2, 60, {})
    ok = [t.TMessage(topic=b"x", value=b"ok")]

    def put(*messages: Any) -> None:
        c.putMessages(qname, list(messages))

    cases: list[tuple[str, Any]] = [
        ("partitionCount", lambda: c.createQueue(b"q_other", 0, 60, {})),
        ("queueName", lambda: c.createQueue(b"bad name\xff", 1, 60, {})),
        ("ttlSeconds", lambda: c.createQueue(b"q_other", 1, 0, {})),
        ("config", lambda: c.createQueue(b"q_other", 1, 60, {"no.such.key": "1"})),
        ("queueName", lambda: c.putMessages(b"q_missing_queue", ok)),
        ("tMessages[1].topic", lambda: put(ok[0], t.TMessage(topic=b"", value=b""))),
        ("tMessages[0].topic", lambda: put(t.TMessage(topic=b"x" * 256, value=b""))),
        ("tMessages[0].value", lambda: put(t.TMessage(topic=b"x"))),
        (
            "tMessages[0].partitionID",
            lambda: put(t.TMessage(partitionID=7, topic=b"x", value=b"")),
        ),
        ("partitionID", lambda: c.putMessageWithPid(qname, 2, ok[0])),
        ("partitionID", lambda: c.putMessageWithPid(qname, -1, ok[0])),
        ("partitionID", lambda: c.messageScannerOpen(qname, 5, None)),
        ("partitionIDs", lambda: c.combinedScannerOpen(qname, [], None)),
        ("partitionIDs[1]", lambda: c.combinedScannerOpen(qname, [0, 9], None)),
        (
            "messageScan.stopMessageID",
            lambda: c.queueScannerOpen(
                qname,
                t.TMessageScan(
                    startMessageID=t.TMessageID(10, 0), stopMessageID=t.TMessageID(5, 0)
                ),
            ),
        ),
        ("id", lambda: c.messageScannerGet(123456789)),
        ("id", lambda: c.messageScannerGetList(123456789, 10)),
        ("nbMessages", lambda: c.messageScannerGetList(c.queueScannerOpen(qname, None), 0)),
        ("queueName", lambda: c.getQueueLocations(b"q_missing_queue")),
    ]
    for argument, call in cases:
        with pytest.raises(ia) as info:
            call()
        assert isinstance(info.value.message, str)
        assert info.value.message.startswith(argument + ":"), (argument, info.value.message)
        # the same connection keeps working after every error
        c.putMessageWithPid(qname, 0, ok[0])

    got = drain(c, c.messageScannerOpen(qname, 0, None))
    assert [m.value for m in got] == [b"ok"] * len(cases)


def _call_unknown(conn: ApacheConn, name: str, seqid: int) -> Any:
    from thrift.Thrift import TApplicationException, TMessageType, TType

    p = conn.proto
    p.writeMessageBegin(name, TMessageType.CALL, seqid)
    p.writeStructBegin(f"{name}_args")
    p.writeFieldBegin("junk", TType.STRING, 1)
    p.writeBinary(b"\xff\x00payload")
    p.writeFieldEnd()
    p.writeFieldStop()
    p.writeStructEnd()
    p.writeMessageEnd()
    conn.trans.flush()

    rname, rtype, rseqid = p.readMessageBegin()
    assert (rname, rtype, rseqid) == (name, TMessageType.EXCEPTION, seqid)
    exc = TApplicationException()
    exc.read(p)
    p.readMessageEnd()
    return exc


def test_unknown_method_is_an_application_exception(wire: SimpleNamespace, queue_name: str) -> None:
    from thrift.Thrift import TApplicationException

    conn = wire.conn
    for seqid, name in enumerate(["noSuchMethod", "putMessage2", "consumeMessages"], start=1):
        exc = _call_unknown(conn, name, seqid)
        assert exc.type == TApplicationException.UNKNOWN_METHOD, (exc.type, exc.message)
        # the connection survives and stays in sync
        assert isinstance(conn.client.listQueues(), list)

    conn.client.createQueue(queue_name.encode(), 1, 60, {})
    conn.client.putMessage(queue_name.encode(), wire.t.TMessage(topic=b"t", value=b"\xff"))
    got = drain(conn.client, conn.client.queueScannerOpen(queue_name.encode(), None))
    assert [(m.topic, m.value) for m in got] == [(b"t", b"\xff")]


def test_subscriber_stubs_serialize_tmessage(apache: SimpleNamespace) -> None:
    """The generated subscriber service shares TMessage with the gateway stubs (include)."""
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TTransport

    t, sub = apache.ttypes, apache.subscriber
    msgs = [
        t.TMessage(id=t.TMessageID(1_700_000_000_000, 3), partitionID=4, topic=TOPIC_255, value=v)
        for v in NON_UTF8
    ]
    buf = TTransport.TMemoryBuffer()
    sub.consumeMessages_args(messages=msgs).write(TBinaryProtocol.TBinaryProtocol(buf))
    back = sub.consumeMessages_args()
    back.read(TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(buf.getvalue())))
    assert back.messages == msgs


def test_several_apache_connections_at_once(wire: SimpleNamespace, queue_name: str) -> None:
    """Several Apache connections at once, each a separate server-side conversation."""
    c0, t = wire.client, wire.t
    qname = queue_name.encode()
    c0.createQueue(qname, 1, 60, {})
    conns = [wire.connect() for _ in range(4)]
    for round_ in range(3):
        for i, conn in enumerate(conns):
            conn.client.putMessage(qname, t.TMessage(topic=b"c%d" % i, value=b"%d" % round_))
    got = drain(c0, c0.queueScannerOpen(qname, None))
    assert len(got) == 12
    assert strictly_increasing([key(m) for m in got])
    # a peer that connects and leaves without a word does not disturb the others
    s = socket.create_connection((wire.gw.host, wire.gw.port))
    s.close()
    assert len(drain(conns[-1].client, conns[-1].client.queueScannerOpen(qname, None))) == 12
