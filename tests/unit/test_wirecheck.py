"""gateway._wirecheck finds message ends and refuses what thriftpy2 must never decode."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from hypothesis import given, settings
from hypothesis import strategies as st
from thriftpy2.protocol import TBinaryProtocol, TCompactProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TMemoryBuffer

from gateway.fast import scan

T = hqueue_thrift()
LIMITS = (4 * 1024 * 1024, 100_000, 801_024)


def encode(compact: bool, method: str, **args: Any) -> bytes:
    buf = TMemoryBuffer()
    proto = TCompactProtocol(buf) if compact else TBinaryProtocol(buf)
    proto.write_message_begin(method, TMessageType.CALL, 7)
    getattr(T.HQueueService, method + "_args")(**args).write(proto)
    proto.write_message_end()
    return buf.getvalue()


def feed(data: bytes, compact: bool, cuts: list[int]) -> int:
    """Scans ``data`` as if it arrived in pieces ending at ``cuts``; returns the message end."""
    state = None
    need = 1
    for end in [*sorted(set(cuts)), len(data)]:
        if end < need:
            continue
        status, n, state, _ = scan(data[:end], compact, state, *LIMITS)
        if status == 0:
            return n
        assert n > end, "an incomplete scan must ask for more than it has"
        need = n
    raise AssertionError("never complete")


messages = st.lists(
    st.builds(
        lambda t, v, p: T.TMessage(topic=t, value=v, partitionID=p),
        st.binary(min_size=1, max_size=20),
        st.binary(max_size=300),
        st.none() | st.integers(0, 100),
    ),
    max_size=30,
)


@settings(max_examples=200)
@given(st.booleans(), messages, st.lists(st.integers(0, 20_000), max_size=40))
def test_put_requests_end_where_thriftpy2_says(compact: bool, batch: list, cuts: list) -> None:
    data = encode(compact, "putMessages", queueName=b"q1", tMessages=batch)
    assert feed(data, compact, cuts) == len(data)
    assert feed(data + b"\x80\x01trailing", compact, cuts) == len(data)  # pipelined bytes


@pytest.mark.parametrize("compact", [False, True])
def test_every_method_shape(compact: bool) -> None:
    scan_spec = T.TMessageScan(
        startMessageID=T.TMessageID(1, 2), topics=[b"a", b"b"], reversed=True, caching=9
    )
    cases = [
        encode(compact, "listQueues"),
        encode(compact, "createQueue", queueName=b"q", partitionCount=3, ttlSeconds=9,
               config={"hbase.hqueue.partitionsPerRegion": "1"}),
        encode(compact, "combinedScannerOpen", queueName=b"q", partitionIDs=[1, 2, 300],
               messageScan=scan_spec),
        encode(compact, "messageScannerGetList", id=5, nbMessages=1000),
    ]  # fmt: skip
    for data in cases:
        status, end, _, name = scan(data, compact, None, *LIMITS)
        assert (status, end) == (0, len(data))
        assert name in {
            b"listQueues",
            b"createQueue",
            b"combinedScannerOpen",
            b"messageScannerGetList",
        }


def header(name: bytes) -> bytes:
    return struct.pack(">Ii", 0x80010001, len(name)) + name + struct.pack(">i", 1)


@pytest.mark.parametrize(
    ("data", "compact", "reason"),
    [
        # a list of STOP elements: thriftpy2 would skip 2**31 elements reading nothing
        (
            header(b"putMessages") + b"\x0f\x00\x02\x01" + struct.pack(">i", 2**31 - 1),
            False,
            "list",
        ),
        (
            header(b"putMessages") + b"\x0f\x00\x02\x01" + struct.pack(">i", 5),
            False,
            "element type",
        ),
        (header(b"putMessages") + b"\x0b\x00\x01" + struct.pack(">i", -1), False, "negative"),
        (header(b"putMessages") + b"\x0b\x00\x01" + struct.pack(">i", 2**30), False, "string"),
        (header(b"putMessages") + b"\x0f\x00\x02\x0c" + struct.pack(">i", -1), False, "negative"),
        (header(b"x") + b"\x63\x00\x01", False, "field type"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False, "method name"),
        (b"\x80\x02\x00\x01", False, "version"),
        (b"\x82\x21\x01\x0bcreateQueue\x4b\xff\xff\xff\xff\x07\x00", True, "map"),
        (b"\x82\x21\x01\x01x\x19\xf0\xff\xff\xff\xff\xff\x01", True, "varint"),
        (b"\x83\x21", True, "protocol id"),
    ],
)
def test_refuses(data: bytes, compact: bool, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        scan(data, compact, None, *LIMITS)


def test_nesting_depth_is_bounded() -> None:
    nested = header(b"x") + b"\x0c\x00\x01" * 100
    with pytest.raises(ValueError, match="nesting"):
        scan(nested, False, None, *LIMITS)


def test_total_values_are_bounded() -> None:
    data = encode(
        False, "putMessages", queueName=b"q", tMessages=[T.TMessage(topic=b"t", value=b"")] * 50
    )
    scan(data, False, None, LIMITS[0], LIMITS[1], 200)
    with pytest.raises(ValueError, match="values"):
        scan(data, False, None, LIMITS[0], LIMITS[1], 100)


def test_a_long_string_asks_for_all_its_bytes_at_once() -> None:
    data = encode(
        False, "putMessage", queueName=b"q", tMessage=T.TMessage(topic=b"t", value=b"v" * 100_000)
    )
    status, need, state, name = scan(data[:200], False, None, *LIMITS)
    assert status == 1 and name == b"putMessage"
    assert need > 100_000  # the reader can refuse or wait without rescanning per chunk
    assert scan(data, False, state, *LIMITS)[:2] == (0, len(data))


# -- the put fast path ----------------------------------------------------------------------

PUTS = {
    "putMessages": (False, False),
    "putMessagesWithPid": (True, False),
    "putMessage": (False, True),
    "putMessageWithPid": (True, True),
}

any_messages = st.lists(
    st.builds(
        lambda t, v, p, i: T.TMessage(topic=t, value=v, partitionID=p, id=i),
        st.binary(max_size=260),
        st.binary(max_size=120),
        st.none() | st.integers(0, 9),
        st.none() | st.just(T.TMessageID(1, 2)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300)
@given(st.sampled_from(list(PUTS)), any_messages, st.integers(0, 9))
def test_extract_put_agrees_with_thriftpy2(method: str, batch: list, pid: int) -> None:
    from gateway.fast import extract_put

    with_pid, single = PUTS[method]
    args: dict[str, Any] = {"queueName": b"q1"}
    if with_pid:
        args["partitionID"] = pid
    if single:
        batch = batch[:1]
        args["tMessage"] = batch[0]
    else:
        args["tMessages"] = batch
    data = encode(False, method, **args)
    taken = extract_put(data, with_pid, single, 100)
    simple = all(
        0 < len(m.topic) < 256
        and len(m.value) <= 100
        and m.id is None
        and (with_pid or m.partitionID is None)
        for m in batch
    )
    if not simple:
        assert taken is None  # the generic path answers these, errors and all
        return
    assert taken is not None
    seqid, queue, got_pid, topics, values = taken
    assert (seqid, queue) == (7, b"q1")
    assert got_pid == (pid if with_pid else None)
    assert topics == [m.topic for m in batch]
    assert values == [m.value for m in batch]


def test_extract_put_leaves_incomplete_calls_to_the_generic_path() -> None:
    from gateway.fast import extract_put

    no_list = encode(False, "putMessages", queueName=b"q")
    assert extract_put(no_list, False, False, 100) is None
    no_pid = encode(False, "putMessagesWithPid", queueName=b"q", tMessages=[])
    assert extract_put(no_pid, True, False, 100) is None
    empty = encode(False, "putMessages", queueName=b"q", tMessages=[])
    assert extract_put(empty, False, False, 100) == (7, b"q", None, [], [])


# -- the scan fast path ---------------------------------------------------------------------

rows_strategy = st.lists(
    st.tuples(
        st.integers(0, 2**63 - 1),
        st.integers(0, 32767),
        st.binary(min_size=1, max_size=255),
        st.binary(max_size=200),
    ),
    max_size=20,
)


@settings(max_examples=200)
@given(rows_strategy, st.integers(0, 32766), st.booleans(), st.integers(0, 2**31 - 1))
def test_encoded_reply_is_what_thriftpy2_writes(
    rows: list, partition: int, per_row: bool, seqid: int
) -> None:
    from gateway.fast import encode_messages_reply
    from gateway.scanners import MessageRows

    partitions: int | list[int] = (
        [(partition + i) % 32767 for i in range(len(rows))] if per_row else partition
    )
    got = encode_messages_reply(b"messageScannerGetList", seqid, partitions, rows)

    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin("messageScannerGetList", TMessageType.REPLY, seqid)
    messages = MessageRows(partitions, rows).to_messages(T)
    T.HQueueService.messageScannerGetList_result(success=messages).write(proto)
    proto.write_message_end()
    assert got == buf.getvalue()


def test_encoded_reply_refuses_malformed_rows() -> None:
    from gateway.fast import encode_messages_reply

    with pytest.raises(TypeError):
        encode_messages_reply(b"m", 1, 0, [(1, 2, "str topic", b"v")])
    with pytest.raises(TypeError):
        encode_messages_reply(b"m", 1, [0, 1], [(1, 2, b"t", b"v")])


@given(
    st.lists(
        st.tuples(
            st.binary(min_size=12, max_size=12),
            st.binary(min_size=1, max_size=255),
            st.binary(max_size=300),
        ),
        max_size=40,
    ),
    st.binary(min_size=1, max_size=40),
)
def test_mutate_rows_call_is_what_thriftpy2_writes(rows: list, table: bytes) -> None:
    import happybase  # noqa: F401 - loads Hbase_thrift, the HBase Thrift1 IDL it ships
    import Hbase_thrift as H

    from gateway.fast import encode_mutate_rows

    keys, topics, values = ([r[i] for r in rows] for i in range(3))
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin("mutateRows", TMessageType.CALL, 0)
    batches = [
        H.BatchMutation(row=k, mutations=[H.Mutation(column=b"message:" + t, value=v)])
        for k, t, v in rows
    ]
    H.Hbase.mutateRows_args(tableName=table, rowBatches=batches, attributes={}).write(proto)
    proto.write_message_end()
    assert encode_mutate_rows(table, b"message:", keys, topics, values) == buf.getvalue()


def test_mutate_rows_refuses_what_it_cannot_encode() -> None:
    from gateway.fast import encode_mutate_rows

    with pytest.raises(ValueError, match="differ in length"):
        encode_mutate_rows(b"t", b"m:", [b"k"], [], [b"v"])
    with pytest.raises(TypeError, match="must be bytes"):
        encode_mutate_rows(b"t", b"m:", [b"k"], ["topic"], [b"v"])  # type: ignore[list-item]


def _rows_reply(results: list[Any], seqid: int = 3) -> bytes:
    import happybase  # noqa: F401 - loads Hbase_thrift
    import Hbase_thrift as H

    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin("scannerGetList", TMessageType.REPLY, seqid)
    H.Hbase.scannerGetList_result(success=results).write(proto)
    proto.write_message_end()
    return buf.getvalue()


@given(
    st.lists(
        st.tuples(
            st.integers(0, 32766),
            st.integers(0, 2**63 - 1),
            st.integers(0, 32767),
            st.binary(min_size=1, max_size=255),
            st.binary(max_size=300),
            st.integers(-(2**63), 2**63 - 1),
        ),
        max_size=40,
    )
)
def test_rows_reply_decodes_as_thriftpy2_does(cells: list) -> None:
    import Hbase_thrift as H

    from gateway import rowkey
    from gateway.fast import decode_rows_reply

    results = [
        H.TRowResult(
            row=rowkey.encode(p, ts, seq),
            columns={b"message:" + topic: H.TCell(value=value, timestamp=stamp)},
        )
        for p, ts, seq, topic, value, stamp in cells
    ]
    decoded = decode_rows_reply(_rows_reply(results), len(b"message:"))
    assert decoded == ([(ts, seq, t, v) for _, ts, seq, t, v, _ in cells], len(cells))


def test_rows_reply_leaves_the_unusual_to_the_generic_path() -> None:
    import Hbase_thrift as H

    from gateway.fast import decode_rows_reply

    ours = H.TRowResult(row=bytes(12), columns={b"message:t": H.TCell(value=b"v")})
    assert decode_rows_reply(_rows_reply([ours]), 8) == ([(0, 0, b"t", b"v")], 1)
    assert decode_rows_reply(_rows_reply([]), 8) == ([], 0)
    not_ours = H.TRowResult(row=b"short", columns={b"message:t": H.TCell(value=b"v")})
    assert decode_rows_reply(_rows_reply([not_ours]), 8) is None
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin("scannerGetList", TMessageType.REPLY, 0)
    H.Hbase.scannerGetList_result(io=H.IOError(message="scanner expired")).write(proto)
    proto.write_message_end()
    assert decode_rows_reply(buf.getvalue(), 8) is None
    assert decode_rows_reply(b"\x80\x01\x00\x02", 8) is None  # truncated
