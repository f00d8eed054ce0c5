"""The subscriber's Python face: what listeners get, how addresses and bad arguments are taken."""

from __future__ import annotations

import warnings

import pytest
from hqueue import Connection, InvalidArgument, Message, MessageID, Queue
from hqueue.message import KeyedMessage
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TProcessor
from thriftpy2.transport import TMemoryBuffer

from gateway.keys import Extras
from gateway.subscriptions.sender import encode_call
from subscriber_runtime.subscription import Subscription


def test_a_consume_call_reaches_listeners_as_hqueue_messages() -> None:
    from hqueue.protocol import subscriber_thrift

    from subscriber_runtime.server import _Handler

    class Server:
        _busy = 0

    got = []
    rows = [(1700000000000, 0, b"t", b"a"), (1700000000000, 1, b"t", b"b")]
    data = encode_call(3, rows, [None, Extras(b"k", {"p": b"v"})])
    out = TMemoryBuffer()
    handler = _Handler(lambda ms: got.extend(ms) or 0, Server())  # type: ignore[arg-type]
    TProcessor(subscriber_thrift().HQueueSubscriberService, handler).process(
        TBinaryProtocol(TMemoryBuffer(data)), TBinaryProtocol(out)
    )
    plain, keyed = got
    assert type(plain) is Message and plain == (b"t", b"a", 3, (1700000000000, 0))
    assert type(plain.id) is MessageID and plain.key is None and plain.properties is None
    assert type(keyed) is KeyedMessage and (keyed.key, keyed.properties) == (b"k", {"p": b"v"})


def test_the_tmessage_spellings_still_work_with_a_warning() -> None:
    m = Message(b"t", b"v", 2, MessageID(5, 7))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert (m.partitionID, m.id.sequenceID) == (2, 7)  # type: ignore[union-attr]
    assert [w.category for w in caught] == [DeprecationWarning, DeprecationWarning]


@pytest.mark.parametrize(
    ("make", "argument"),
    [
        (lambda: Subscription(""), "name"),
        (lambda: Subscription(7), "name"),  # type: ignore[arg-type]
        (lambda: Subscription("s", topics="t"), "topics"),
        (lambda: Subscription("s", topics=[b"a", 5]), "topics[1]"),  # type: ignore[list-item]
        (lambda: Subscription("s", partitions=[-1]), "partitions"),
        (lambda: Subscription("s", partitions={0: (1, -1)}), "partitions[0]"),
        (lambda: Subscription("s", partitions="0"), "partitions"),
        (lambda: Subscription("s", max_batch=0), "max_batch"),
        (lambda: Subscription("s", retry=3), "retry"),  # type: ignore[arg-type]
    ],
)
def test_bad_subscriptions_raise_invalid_argument_naming_it(make, argument) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as info:
        make()
    assert info.value.argument == argument


def test_starts_are_message_ids() -> None:
    sub = Subscription("s", partitions={1: (5, 6)}).add_partitions([2])
    assert sub.partitions == {1: (5, 6), 2: None} and type(sub.partitions[1]) is MessageID


def test_subscriber_takes_addresses_as_connection_does() -> None:
    from subscriber_runtime import BlackHoleListener, Subscriber
    from subscriber_runtime import Queue as RuntimeQueue

    sub = Subscription("s")
    for given, want in [
        ("h:1", [("h", 1)]),
        (("h", 1), [("h", 1)]),
        (["h:1", ("g", 2)], [("h", 1), ("g", 2)]),
        ("h:1,g:2", [("h", 1), ("g", 2)]),
    ]:
        s = Subscriber(given, "q", sub, [BlackHoleListener()])
        assert s.gateways == want == Connection(given).addresses
    with pytest.raises(InvalidArgument) as info:
        Subscriber("h:x", "q", sub, [BlackHoleListener()])
    assert info.value.argument == "gateway"
    with pytest.raises(InvalidArgument, match="listeners"):
        Subscriber("h:1", "q", sub, [])
    # one Queue class: the runtime's facade is hqueue.Queue, with its ZooKeeper default
    q = RuntimeQueue("q", ["h:1", "g:2"], zookeeper="zk:2181/x")
    assert type(q) is Queue
    made = q.create_subscriber(sub, [BlackHoleListener()])
    assert made.zookeeper == "zk:2181/x" and made.gateways == [("h", 1), ("g", 2)]


def test_the_subscriber_options_are_stated_once_and_checked() -> None:
    """Subscriber, Queue.create_subscriber and create_subscriber take SubscriberOptions: the
    defaults of DEFAULTS, the queue's ZooKeeper and TLS, and no keyword that is not an option
    (``**options`` would otherwise swallow a misspelt one)."""
    from subscriber_runtime import BlackHoleListener, Subscriber, create_subscriber
    from subscriber_runtime.options import DEFAULTS, SubscriberOptions

    assert set(DEFAULTS) == SubscriberOptions.__optional_keys__
    sub, listeners = Subscription("s"), [BlackHoleListener()]
    s = Subscriber("h:1", "q", sub, listeners)
    assert (s.host, s.port, s.advertise_host, s.zookeeper) == ("127.0.0.1", 0, "127.0.0.1", None)
    assert (s.session_timeout, s.lease_seconds, s.grace, s.tls, s.server_tls) == (
        10.0, 10, 10.0, None, None,
    )  # fmt: skip
    made = create_subscriber("h:1", "q", sub, listeners, port=7, grace=2.5, advertise_host="a")
    assert (made.port, made.grace, made.advertise_host, made.host) == (7, 2.5, "a", "127.0.0.1")
    q = Connection("h:1").queue("q", zookeeper="zk:1/x")
    assert q.create_subscriber(sub, listeners, zookeeper="zk:2/y").zookeeper == "zk:2/y"
    with pytest.raises(
        TypeError, match=r"Subscriber\(\) got an unexpected keyword argument .lease"
    ):
        Subscriber("h:1", "q", sub, listeners, lease=4)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'bogus'"):
        create_subscriber("h:1", "q", sub, listeners, bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'lease_secs'"):
        q.create_subscriber(sub, listeners, lease_secs=4)  # type: ignore[call-arg]


def test_record_checkpoints_decode_as_message_ids() -> None:
    from hqueue_contract.registry import SubscriberRecord, before

    raw = SubscriberRecord([0], {0: (5, 1)}).encode()
    assert type(SubscriberRecord.decode(raw).checkpoints[0]) is MessageID
    assert type(before((5, 0))) is MessageID
