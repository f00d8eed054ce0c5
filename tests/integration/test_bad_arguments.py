"""Bad arguments from one request: each gets ``IllegalArgument`` naming the argument (or, for
bytes no Thrift peer can mean, the end of that one connection), stores nothing, and leaves the
gateway serving everyone, the caller included.

Each case was run against the gateway without its safeguard and failed (see the commit that
added it); the figure a test measured is printed (``pytest -s`` shows it).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import scan_queue
from tests.rawwire import c_msg, c_varint, connect, read_reply

MiB = 1 << 20


@pytest.fixture
def store() -> str:
    """The network edge does not depend on the store: the embedded one is enough."""
    return "embedded"


def _illegal(T: Any, call: Any, *args: Any) -> str:
    with pytest.raises(T.IllegalArgument) as info:
        call(*args)
    return str(info.value.message)


@pytest.mark.parametrize("wire", [(), ("--framed", "--compact")])
def test_value_just_over_the_limit_is_illegal_argument(
    start_gateway: Any, T: Any, wire: tuple[str, ...]
) -> None:
    """A body of 4 MiB + 1 (the limit is 4 MiB) is refused with IllegalArgument on a
    connection that stays usable; the scanner used to close the connection (broken pipe)."""
    gw = start_gateway(*wire)
    c = gw.client()
    c.createQueue("q", 2, 3600, {})
    for size in (4 * MiB + 1, 8 * MiB, 60 * MiB):
        message = _illegal(T, c.putMessages, "q", [T.TMessage(topic=b"t", value=b"x" * size)])
        print(f"value of {size} bytes: IllegalArgument {message!r}")
        assert "value" in message and str(4 * MiB) in message
        assert c.listQueues()  # the same connection
    message = _illegal(
        T, c.putMessageWithPid, "q", 1, T.TMessage(topic=b"t", value=b"y" * (4 * MiB + 1))
    )
    assert "tMessage.value" in message
    c.putMessages("q", [T.TMessage(topic=b"t", value=b"z" * (4 * MiB))])  # the limit itself
    assert [len(m.value) for m in scan_queue(c, "q")] == [4 * MiB]


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_queue_names_are_refused(gateway: Any, T: Any, name: str) -> None:
    c = gateway.client()
    message = _illegal(T, c.createQueue, name, 1, 60, {})
    print(f"createQueue({name!r}): {message!r}")
    assert message.startswith("queueName:")
    assert c.listQueues() == []


@pytest.mark.parametrize("value", ["\u00b2", "1\u0663", "\uff11", "9" * 5000, "-1", "1e3"])
def test_config_values_take_ascii_digits_only(gateway: Any, T: Any, value: str) -> None:
    """'²'.isdigit() is True and int('²') raises: that was INTERNAL_ERROR."""
    c = gateway.client()
    message = _illegal(T, c.createQueue, "q", 4, 60, {"hbase.hqueue.partitionsPerRegion": value})
    print(f"partitionsPerRegion={value[:12]!r}: {message[:100]!r}")
    assert message.startswith("config['hbase.hqueue.partitionsPerRegion']")
    assert c.listQueues() == []


def test_with_pid_methods_need_the_pid(gateway: Any, T: Any) -> None:
    """putMessage(s)WithPid with the partition id unset went to a random partition."""
    c = gateway.client()
    c.createQueue("q", 4, 3600, {})
    m = T.TMessage(topic=b"t", value=b"v")
    for method, arg in (("putMessagesWithPid", [m, m]), ("putMessageWithPid", m)):
        message = _illegal(T, getattr(c, method), "q", None, arg)
        print(f"{method} without a pid: {message!r}")
        assert message.startswith("partitionID:")
    assert scan_queue(c, "q") == []
    c.putMessagesWithPid("q", 3, [m])  # still fine with a pid
    assert [x.partitionID for x in scan_queue(c, "q")] == [3]


def test_scanners_belong_to_their_connection(gateway: Any, T: Any) -> None:
    """Another connection can neither read nor close a scanner; its owner still can, and a
    scanner ends with its connection."""
    a, b = gateway.client(), gateway.client()
    a.createQueue("q", 2, 3600, {})
    a.putMessages("q", [T.TMessage(topic=b"t", value=b"%d" % i) for i in range(5)])
    sids = [a.queueScannerOpen("q", None) for _ in range(3)]
    print(f"scanner ids: {sids}")
    assert sorted({abs(x - y) for x in sids for y in sids if x != y}) != [1, 2]  # not a count
    sid = sids[0]
    assert _illegal(T, b.messageScannerGetList, sid, 10).startswith("id: no open scanner")
    assert _illegal(T, b.messageScannerGet, sid).startswith("id: no open scanner")
    assert _illegal(T, b.messageScannerClose, sid).startswith("id: no open scanner")
    assert [m.value for m in a.messageScannerGetList(sid, 10)] == [b"%d" % i for i in range(5)]
    a.messageScannerClose(sids[1])
    assert _illegal(T, a.messageScannerGetList, sids[1], 1).endswith("(closed)")
    # the owner goes away: its scanners go with it (the id is unknown afterwards even to a
    # newcomer, who could not have read it anyway)
    a.close()
    c = gateway.client()
    assert _illegal(T, c.messageScannerGetList, sids[2], 1).startswith("id: no open scanner")


def _compact_add_subscriber(timestamp_varint: bytes) -> bytes:
    """addSubscriber('q', {name: 's', partitions: [{partitionID: 0, startMessageID:
    {timestamp: <varint as given>, sequenceID: 0}}]}) in the compact protocol, by hand."""
    return (
        c_msg("addSubscriber")
        + b"\x18" + c_varint(1) + b"q"  # field 1, binary
        + b"\x1c"  # field 2, struct TSubscription
        + b"\x18" + c_varint(1) + b"s"  # name
        + b"\x29" + b"\x1c"  # field 3 (delta 2), list of 1 struct
        + b"\x14" + b"\x00"  # partitionID 0
        + b"\x1c"  # startMessageID
        + b"\x16" + timestamp_varint  # timestamp
        + b"\x14" + b"\x00"  # sequenceID 0
        + b"\x00" + b"\x00" + b"\x00" + b"\x00"
    )  # fmt: skip


def test_overlong_compact_varint_is_never_stored(start_gateway: Any, T: Any) -> None:
    """A TMessageID.timestamp sent as an over-long varint decoded to 2^64 and was stored by
    addSubscriber: listSubscribers of the queue failed for everyone from then on, across
    restarts. Now the request is refused and nothing is stored; the largest valid timestamp
    (2^63 - 1) is accepted and listed."""
    gw = start_gateway("--compact")
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    overlong = b"\x80" * 9 + b"\x04"  # zigzag 2^65: decodes to 2^64
    s = connect(gw)
    s.sendall(_compact_add_subscriber(overlong))
    state, data = read_reply(s)
    s.close()
    print(f"over-long varint addSubscriber: {state} {data[:60]!r}")
    assert state in ("closed", "exception"), state
    assert c.listSubscribers("q") == []
    # 2^63 - 1, zigzag encoded, is the largest valid i64
    s = connect(gw)
    s.sendall(_compact_add_subscriber(c_varint((2**63 - 1) << 1)))
    state, data = read_reply(s)
    s.close()
    assert state == "reply", (state, data)
    listed = c.listSubscribers("q")
    assert [x.name for x in listed] == [b"s"]
    print(f"valid max timestamp stored and listed: {listed[0].partitions}")
    # scanner opens with an out-of-range id: refused without INTERNAL_ERROR
    with pytest.raises(T.IllegalArgument):
        c.queueScannerOpen("q", T.TMessageScan(startMessageID=T.TMessageID(-1, 0)))
    assert gw.proc.poll() is None


@pytest.mark.parametrize("extra", [(), ("--subscriber-hosts", "10.1.2.3,sub.example")])
def test_subscribers_must_be_on_the_callers_host(
    start_gateway: Any, T: Any, extra: tuple[str, ...]
) -> None:
    """subscribe made the gateway connect wherever a client said (it pushed to a mistyped
    'j27.0.0.1:1'). A subscriber address must now name the caller's host, unless the host is
    listed in --subscriber-hosts."""
    gw = start_gateway(*extra)
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    sub = T.TSubscription(name=b"s")
    refused = ["j27.0.0.1:1", "192.0.2.7:9000"] + ([] if extra else ["10.1.2.3:9000"])
    for address in refused:
        message = _illegal(T, c.subscribe, "q", sub, address, 5)
        print(f"subscribe at {address}: {message!r}")
        assert message.startswith("address:") and "--subscriber-hosts" in message
    assert c.listSubscribers("q") == []
    allowed = ["127.0.0.1:1", "localhost:1"] + (["10.1.2.3:9000", "sub.example:2"] if extra else [])
    for address in allowed:
        lease = c.subscribe("q", sub, address, 5)
        c.unsubscribe("q", b"s", lease)
