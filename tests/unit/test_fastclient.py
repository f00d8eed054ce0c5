"""The client's codec (hqueue/_fastclient.c and its twin hqueue/_purecodec.py) writes and reads
exactly what thriftpy2 does, and both implementations agree, error messages included."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import threading
import weakref
from types import ModuleType
from typing import Any

import pytest
from hqueue import (  # type: ignore[attr-defined]
    Connection,
    InvalidArgument,
    Message,
    MessageID,
    ServerError,
    TransportError,
    _fastclient,
    codec,
    fastpath,
)
from hqueue.protocol import hqueue_thrift
from hypothesis import given, settings
from hypothesis import strategies as st
from thriftpy2.protocol.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TCyMemoryBuffer

from tests.unit.client_codecs import IMPLS

T = hqueue_thrift()


@pytest.fixture(params=IMPLS, ids=["c", "python"])
def impl(request: Any) -> ModuleType:
    return request.param  # type: ignore[no-any-return]


def thrift_bytes(kind: int, method: str, payload: Any) -> bytes:
    """What thriftpy2's Cython binary protocol (the client's default) writes."""
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin(method, kind, 0)
    payload.write(proto)
    proto.write_message_end()
    proto.trans.flush()
    return buf.getvalue()  # type: ignore[no-any-return]


def thrift_put(queue: bytes, partition: int | None, tmessages: list[Any]) -> bytes:
    if partition is None:
        args = T.HQueueService.putMessages_args(queueName=queue, tMessages=tmessages)
        return thrift_bytes(TMessageType.CALL, "putMessages", args)
    args = T.HQueueService.putMessagesWithPid_args(
        queueName=queue, partitionID=partition, tMessages=tmessages
    )
    return thrift_bytes(TMessageType.CALL, "putMessagesWithPid", args)


def as_bytes(x: bytes | str) -> bytes:
    return x.encode() if isinstance(x, str) else x


texts = st.binary(max_size=40) | st.text(max_size=20)
pids = st.none() | st.integers(0, 32766)
items = st.one_of(
    st.tuples(texts, texts),
    st.tuples(texts, texts, pids),
    st.builds(Message, texts, texts, pids),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(items, max_size=25), pids, st.binary(min_size=1, max_size=30))
def test_put_is_byte_for_byte_thriftpy2(batch: list[Any], partition: Any, queue: bytes) -> None:
    expected = []
    for item in batch:
        topic, value = as_bytes(item[0]), as_bytes(item[1])
        own = item[2] if len(item) >= 3 else None
        expected.append(
            T.TMessage(topic=topic, value=value, partitionID=own if partition is None else None)
        )
    want = thrift_put(queue, partition, expected)
    pid = -1 if partition is None else partition
    for impl in IMPLS:
        assert impl.encode_put(0, queue, pid, batch, 0) == want
        assert impl.encode_put(0, queue, pid, tuple(batch), 0) == want


@settings(max_examples=100, deadline=None)
@given(st.lists(texts, max_size=25), st.booleans(), pids)
def test_put_lists_is_byte_for_byte_thriftpy2(values: list[Any], one: bool, partition: Any) -> None:
    topics: Any = b"topic" if one else [b"t%d" % i for i in range(len(values))]
    expected = [
        T.TMessage(topic=b"topic" if one else b"t%d" % i, value=as_bytes(v))
        for i, v in enumerate(values)
    ]
    want = thrift_put(b"q", partition, expected)
    pid = -1 if partition is None else partition
    for impl in IMPLS:
        assert impl.encode_put_lists(0, b"q", pid, topics, values, 0) == want


def test_put_takes_buffers_and_lists(impl: ModuleType) -> None:
    got = impl.encode_put(0, b"q", 3, [[bytearray(b"t"), memoryview(b"v")], ["t", "v", 1]], 0)
    assert got == thrift_put(b"q", 3, [T.TMessage(topic=b"t", value=b"v")] * 2)


SHAPE = "must be a Message or a (topic, value[, partition]) tuple, got "
BAD_ITEMS = [
    ([(b"t", b"v"), 5], "messages[1]", SHAPE + "5"),
    ([(b"t",)], "messages[0]", SHAPE + "(b't',)"),
    ([(1, b"v")], "messages[0].topic", "must be bytes or str, got int"),
    ([(b"t", None)], "messages[0].value", "must be bytes or str, got NoneType"),
    ([(b"t", b"v", True)], "messages[0].partition", "must be an int, got bool"),
    # partition ids are 0..32766 (a queue has at most 32767 partitions): the gateway's range
    ([(b"t", b"v", 32767)], "messages[0].partition", "must be 0..32766, got 32767"),
    ([Message(b"t", b"v", partition=-1)], "messages[0].partition", "must be 0..32766, got -1"),
    ([(b"t", b"v", 2**70)], "messages[0].partition", f"must be 0..32766, got {2**70}"),
]  # fmt: skip


@pytest.mark.parametrize(("batch", "argument", "message"), BAD_ITEMS)
def test_bad_items_name_the_argument(
    impl: ModuleType, batch: list[Any], argument: str, message: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        impl.encode_put(0, b"q", -1, batch, 0)
    assert (info.value.argument, info.value.message) == (argument, message)


def test_bad_lists_name_the_argument(impl: ModuleType) -> None:
    with pytest.raises(InvalidArgument) as info:
        impl.encode_put_lists(0, b"q", -1, [b"a"], [b"1", b"2"], 0)
    assert info.value.argument == "topics"
    with pytest.raises(InvalidArgument) as info:
        impl.encode_put_lists(0, b"q", -1, b"t", [b"1", 2], 1000)
    assert info.value.argument == "values[1001]"
    assert info.value.message == "must be bytes or str, got int"
    with pytest.raises(InvalidArgument) as info:
        impl.encode_put_lists(0, b"q", -1, [b"a", None], [b"1", b"2"], 0)
    assert info.value.argument == "topics[1]"
    with pytest.raises(ValueError, match="partition"):
        impl.encode_put(0, b"q", 40000, [], 0)
    with pytest.raises(TypeError):
        impl.encode_put(0, b"q", -1, 7, 0)


# -- replies -------------------------------------------------------------------------------

tmessages = st.lists(
    st.builds(
        lambda t, v, p, ts, seq: T.TMessage(
            topic=t, value=v, partitionID=p, id=T.TMessageID(ts, seq)
        ),
        st.binary(min_size=1, max_size=20),
        st.binary(max_size=200),
        st.integers(0, 32767),
        st.integers(0, 2**63 - 1),
        st.integers(0, 32767),
    ),
    max_size=30,
)


def list_reply(msgs: list[Any]) -> bytes:
    result = T.HQueueService.messageScannerGetList_result(success=msgs)
    return thrift_bytes(TMessageType.REPLY, "messageScannerGetList", result)


def expected(msgs: list[Any]) -> list[Message]:
    return [
        Message(m.topic, m.value, m.partitionID, MessageID(m.id.timestamp, m.id.sequenceID))
        for m in msgs
    ]


@settings(max_examples=150, deadline=None)
@given(tmessages, st.integers(0, 10_000))
def test_list_replies_decode_like_thriftpy2(msgs: list[Any], cut: int) -> None:
    data = list_reply(msgs)
    for impl in IMPLS:
        end, got = impl.decode_list_reply(data + b"\x80\x01next")
        assert end == len(data)
        assert got == expected(msgs)
        assert all(type(m) is Message and type(m.id) is MessageID for m in got)
        assert impl.message_end(data) == len(data)
        if cut < len(data):
            assert impl.decode_list_reply(data[:cut]) == 0
            assert impl.message_end(data[:cut]) == 0


mixed_tmessages = st.lists(
    st.builds(
        lambda t, v, p, i, k: T.TMessage(topic=t, value=v, partitionID=p, id=i, key=k),
        st.binary(min_size=1, max_size=5),
        st.binary(max_size=9),
        st.none() | st.integers(0, 32767),
        st.none() | st.builds(T.TMessageID, st.integers(0, 2**63 - 1), st.integers(0, 32767)),
        st.none() | st.binary(min_size=1, max_size=4),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(mixed_tmessages, st.integers(0, 2_000))
def test_gateway_shaped_and_other_messages_in_one_page_decode_like_thriftpy2(
    msgs: list[Any], cut: int
) -> None:
    """The C reads a message laid out as the gateway writes it (id, partition, topic, value,
    nothing else) without its per-field loop, any other with it: one page of both, cut
    anywhere, gives what thriftpy2 gives (a key is not part of a scanned Message)."""
    data = list_reply(msgs)
    want = [
        Message(m.topic, m.value, m.partitionID,
                None if m.id is None else MessageID(m.id.timestamp, m.id.sequenceID))
        for m in msgs
    ]  # fmt: skip
    for impl in IMPLS:
        assert impl.decode_list_reply(data) == (len(data), want)
        assert impl.message_end(data) == len(data)
        if cut < len(data):
            assert impl.decode_list_reply(data[:cut]) == 0
            assert impl.message_end(data[:cut]) == 0


@pytest.mark.c_only
def test_c_decoded_messages_are_left_out_of_the_cycle_collector() -> None:
    # a page's thousands of messages would make the collector walk them all, again and again
    data = list_reply([T.TMessage(topic=b"t", value=b"v", partitionID=3, id=T.TMessageID(5, 1))])
    _, (m,) = _fastclient.decode_list_reply(data)
    assert type(m) is _fastclient.Message
    assert not gc.is_tracked(m) and not gc.is_tracked(m.id)
    assert m == Message(b"t", b"v", 3, MessageID(5, 1))

    class Loose(tuple):  # type: ignore[type-arg]
        pass  # instances have a __dict__: a cycle could go through them, so they stay tracked

    class Box:
        pass

    try:
        _fastclient.setup(Message, Loose, InvalidArgument)
        _, (loose,) = _fastclient.decode_list_reply(data)
        assert not gc.is_tracked(loose)
        assert type(loose.id) is Loose and gc.is_tracked(loose.id)
        assert gc.is_tracked(loose)  # it holds something a cycle can go through now
        box = Box()
        box.m, loose.id.box = loose, box  # type: ignore[attr-defined]
        gone = weakref.ref(box)
        del box, loose
        gc.collect()
        assert gone() is None
    finally:
        _fastclient.setup(Message, MessageID, InvalidArgument)


@pytest.mark.c_only
def test_another_message_type_is_read_as_a_tuple_without_running_python() -> None:
    # a named tuple set up as the Message type (the pure-Python pass's) is read by its slots:
    # nothing of the caller's runs while the encoder holds pointers into the items
    items: list[Any] = []

    class Sly(tuple):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            items.clear()  # would free the items under the encoder
            return super().__iter__()

    items += [Sly((b"t%d" % i, b"v%d" % i, None)) for i in range(3)]
    want = thrift_put(b"q", 1, [T.TMessage(topic=b"t%d" % i, value=b"v%d" % i) for i in range(3)])
    try:
        _fastclient.setup(Sly, MessageID, InvalidArgument)
        assert _fastclient.encode_put(0, b"q", 1, items, 0) == want
    finally:
        _fastclient.setup(Message, MessageID, InvalidArgument)
    assert len(items) == 3


def test_a_count_larger_than_the_bytes_is_short_or_unusual_as_it_reads(impl: ModuleType) -> None:
    # the C sizes its list by the bytes there are: a count that cannot fit is what reading
    # finds, short (0) if the bytes run out, unusual (-1) for empty elements, as the twin says
    empty = T.HQueueService.messageScannerGetList_result(success=[])
    data = bytearray(thrift_bytes(TMessageType.REPLY, "messageScannerGetList", empty))
    at = data.index(b"\x0f\x00\x00\x0c") + 4  # the list's count
    struct_ends = bytes(data[:at]) + (2).to_bytes(4, "big") + b"\x00\x00" + b"\x00"
    assert impl.message_end(struct_ends) == len(struct_ends)
    assert impl.decode_list_reply(struct_ends) == -1
    one = list_reply([T.TMessage(topic=b"t", value=b"v")])
    at = one.index(b"\x0f\x00\x00\x0c") + 4
    claims_more = one[:at] + (10**6).to_bytes(4, "big") + one[at + 4 : -2]  # its end cut off
    assert impl.decode_list_reply(claims_more) == 0


@pytest.mark.c_only
def test_freeing_leaves_the_types_counts_as_they_were() -> None:
    # every instance of a heap type holds a reference to it, dropped by its dealloc; one of a
    # static type (tuple, if setup is handed it) holds none, so that type keeps CPython's
    # dealloc. In a fresh process with the collector off: in this one, other tests' garbage
    # can take a count down at any time
    code = """
import gc, sys
from gateway.fast import encode_messages_reply
from hqueue import _fastclient
from hqueue.errors import InvalidArgument
from hqueue.message import MessageID

Message = _fastclient.Message
_fastclient.setup(Message, MessageID, InvalidArgument)
gc.disable()
data = encode_messages_reply(b"messageScannerGetList", 7, 0,
                             [(5, i, b"t", b"v" * 100) for i in range(500)])
def counts():
    return sys.getrefcount(Message), sys.getrefcount(MessageID), sys.getrefcount(tuple)
def decode_and_drop(kind):
    for _ in range(20):
        _, page = _fastclient.decode_list_reply(data)
        assert type(page[0]) is Message and page[0][3] == (5, 0), page[0]
        assert all(type(m.id) is kind for m in page[::7]), page[0]  # ids made on reading
        del page
before = counts()
decode_and_drop(MessageID)
built = [Message(b"t", b"v", 1, MessageID(7, i)) for i in range(500)]
del built
assert counts() == before, ("Message, MessageID, tuple", before, counts())
_fastclient.setup(Message, tuple, InvalidArgument)
before = counts()
decode_and_drop(tuple)
assert counts() == before, ("after setup(Message, tuple)", before, counts())
print("counts kept")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "counts kept"), done.stderr[-2000:]


@pytest.mark.c_only
def test_deeply_nested_messages_built_in_python_are_freed_without_a_crash() -> None:
    # what the codec makes cannot nest; a Message built around another is tracked and freed
    # through the trashcan, which keeps a long chain from overflowing the C stack
    code = (
        "from hqueue import _fastclient\n"
        "from hqueue.errors import InvalidArgument\n"
        "from hqueue.message import MessageID\n"
        "Message = _fastclient.Message\n"
        "_fastclient.setup(Message, MessageID, InvalidArgument)\n"
        "m = MessageID(1, 2)\n"
        "for _ in range(300_000):\n"
        "    m = Message(b't', b'v', 1, Message(m, m))\n"
        "del m\n"
        "print('freed')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "freed"), done.stderr[-2000:]


def test_odd_messages_decode_too(impl: ModuleType) -> None:
    # no id, no partition, an unknown field: still what thriftpy2 would give
    data = list_reply([T.TMessage(topic=b"t", value=b"v")])
    assert impl.decode_list_reply(data) == (len(data), [Message(b"t", b"v")])


def test_exceptions_are_left_to_thriftpy2(impl: ModuleType) -> None:
    ia = T.HQueueService.messageScannerGetList_result(ia=T.IllegalArgument(message="id: gone"))
    data = thrift_bytes(TMessageType.REPLY, "messageScannerGetList", ia)
    assert impl.decode_list_reply(data) == -1
    assert impl.message_end(data) == len(data)
    with pytest.raises(T.IllegalArgument):
        fastpath.generic("messageScannerGetList", data)
    app = thrift_bytes(
        TMessageType.EXCEPTION,
        "messageScannerGetList",
        TApplicationException(TApplicationException.INTERNAL_ERROR, "boom"),
    )
    assert impl.decode_list_reply(app) == -1
    assert impl.message_end(app) == len(app)
    with pytest.raises(ValueError):
        impl.message_end(b"GET / HTTP/1.1\r\n\r\n")
    assert impl.decode_list_reply(b"GET / HTTP/1.1\r\n\r\n") == -1


def test_get_list_request_is_thriftpy2s() -> None:
    args = T.HQueueService.messageScannerGetList_args(id=123456, nbMessages=1000)
    assert codec.encode_get_list(0, 123456, 1000) == thrift_bytes(
        TMessageType.CALL, "messageScannerGetList", args
    )


def test_the_switch_selects_the_twin() -> None:
    code = "import hqueue.codec as c; print(c.NATIVE, c.impl.__name__)"
    env = dict(os.environ)
    for value, want in (("1", "False hqueue._purecodec"), ("", "True hqueue._fastclient")):
        env["HQUEUE_PUREPYTHON"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, timeout=60)  # fmt: skip
        assert out.stdout.strip() == want


# -- the channel: whole replies off a socket, in pieces ------------------------------------


class _Client:
    def close(self) -> None:
        pass


def _serve(sock: socket.socket, chunks: list[bytes]) -> None:
    for c in chunks:
        sock.sendall(c)


@pytest.mark.parametrize("framed", [False, True])
@pytest.mark.parametrize("chunk", [fastpath.READ_CHUNK, 1000])
def test_channel_reads_replies_in_pieces_and_maps_errors(
    framed: bool, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a small buffer to start with: it grows to a whole reply, and moves a partial one to
    # the front when the reply before it is read
    monkeypatch.setattr(fastpath, "READ_CHUNK", chunk)
    a, b = socket.socketpair()
    a.settimeout(5)
    conn = Connection("127.0.0.1", 1)
    conn._client = _Client()
    ch = fastpath.Channel(a, framed)

    def frame(data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + data if framed else data

    msgs = [T.TMessage(topic=b"t", value=b"x" * 50, partitionID=1, id=T.TMessageID(5, i))
            for i in range(100)]  # fmt: skip

    def put_reply(**result: Any) -> bytes:
        payload = T.HQueueService.putMessages_result(**result)
        return frame(thrift_bytes(TMessageType.REPLY, "putMessages", payload))

    ok = frame(list_reply(msgs))
    void = put_reply()
    bad = put_reply(ia=T.IllegalArgument(message="tMessages[3].topic: must be 1..255 bytes, got 0"))
    io = put_reply(io=T.IOError(message="disk"))
    stream = ok + void + bad + io + ok
    pieces = [stream[i : i + 777] for i in range(0, len(stream), 777)]
    t = threading.Thread(target=_serve, args=(b, pieces))
    t.start()
    got = fastpath.call(conn, ch, "messageScannerGetList", b"", fastpath.list_reply)
    assert got == expected(msgs)
    assert fastpath.call(conn, ch, "putMessages", b"", fastpath.void_reply) is None
    with pytest.raises(InvalidArgument) as info:
        fastpath.call(conn, ch, "putMessages", b"", fastpath.void_reply)
    assert info.value.argument == "tMessages[3].topic"
    with pytest.raises(ServerError, match="disk"):
        fastpath.call(conn, ch, "putMessages", b"", fastpath.void_reply)
    assert conn.is_open  # an answer, even a refusal, keeps the connection
    assert len(fastpath.call(conn, ch, "messageScannerGetList", b"", fastpath.list_reply)) == 100
    t.join()
    b.sendall(b"\x00\x00\x00\x07garbage" if framed else b"garbage that is no thrift")
    with pytest.raises(TransportError):
        fastpath.call(conn, ch, "putMessages", b"", fastpath.void_reply)
    assert not conn.is_open  # out of step: never reused
    b.close()
    a.close()
