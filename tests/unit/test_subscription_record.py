"""The subscriber record shared by the gateway and the subscriber runtime, and its parsing."""

from __future__ import annotations

import pytest
from hqueue_contract.registry import (
    SubscriberRecord,
    before,
    check_name,
    decode_topics,
    encode_topics,
    resolve,
)

from subscriber_runtime.listeners import BlackHoleListener, call_listener, load_listener
from subscriber_runtime.subscription import Subscription, parse_partitions


def test_before_is_the_checkpoint_that_starts_at_an_id() -> None:
    assert before((100, 5)) == (100, 4)
    assert before((100, 0)) == (99, 32767)
    assert before((0, 0)) is None  # from the very beginning


def test_first_subscription_starts_now_unless_told_otherwise() -> None:
    record = resolve(None, {0: None, 2: (50, 3)}, 4, now_ms=1000)
    assert record.partitions == [0, 2]
    assert record.checkpoints == {0: (999, 32767), 2: (50, 2)}


def test_no_partitions_means_all_and_stored_checkpoints_are_kept() -> None:
    stored = SubscriberRecord([0, 1], {0: (10, 1), 1: None})
    record = resolve(stored, None, 3, now_ms=1000)
    assert record.partitions == [0, 1, 2]
    assert record.checkpoints == {0: (10, 1), 1: None, 2: (999, 32767)}
    # an explicit start overrides the stored checkpoint
    assert resolve(stored, {0: (5, 0)}, 3, now_ms=1000).checkpoints[0] == (4, 32767)


def test_unknown_partition_is_refused() -> None:
    with pytest.raises(ValueError, match="partition 7 does not exist"):
        resolve(None, {7: None}, 4, now_ms=1)


def test_record_and_topics_round_trip() -> None:
    record = SubscriberRecord([1, 0], {0: (1, 2), 1: None}, frozenset([b"t"]))
    decoded = SubscriberRecord.decode(record.encode())
    assert decoded == SubscriberRecord([0, 1], record.checkpoints, frozenset([b"t"]))
    assert resolve(decoded, None, 2, 5, [b"u"]).topics == {b"u"}
    assert record.with_checkpoints({1: (3, 4)}).checkpoints == {0: (1, 2), 1: (3, 4)}
    assert decode_topics(encode_topics([b"a", b"\xff"])) == {b"a", b"\xff"}
    assert decode_topics(encode_topics([])) is None


@pytest.mark.parametrize("name", ["", "a/b", ".", "..", " x"])
def test_bad_subscriber_names(name: str) -> None:
    with pytest.raises(ValueError):
        check_name(name)


def test_parse_partitions() -> None:
    assert parse_partitions("0,1:1700000000000.5, 2:earliest,3:17") == {
        0: None,
        1: (1700000000000, 5),
        2: (0, 0),
        3: (17, 0),
    }
    assert parse_partitions("") == {}
    with pytest.raises(ValueError, match="--partitions"):
        parse_partitions("x")


def test_subscription_to_thrift() -> None:
    sub = Subscription("s", topics=["b", b"a"], partitions={1: (5, 6), 0: None})
    t = sub.to_thrift()
    assert t.name == b"s" and t.topics == [b"a", b"b"]
    assert (t.partitions[0].partitionID, t.partitions[0].startMessageID) == (0, None)
    assert t.partitions[1].startMessageID.timestamp == 5
    again = sub.to_thrift(with_starts=False)  # registering again resumes from checkpoints
    assert all(p.startMessageID is None for p in again.partitions)
    assert Subscription("s").to_thrift().partitions is None  # every partition
    assert sub.add_partitions([3]).partitions == {1: (5, 6), 0: None, 3: None}


def test_listener_results() -> None:
    assert call_listener(lambda ms: None, []) is True
    assert call_listener(lambda ms: False, []) is False
    assert call_listener(lambda ms: 0, []) is True
    assert call_listener(lambda ms: 3, []) is False
    assert isinstance(load_listener("blackhole"), BlackHoleListener)
    assert isinstance(load_listener("subscriber_runtime.listeners:BlackHoleListener"),
                      BlackHoleListener)  # fmt: skip
    with pytest.raises(ValueError, match="--listener"):
        load_listener("nonsense")


def test_consume_call_encoded_from_rows_is_what_thriftpy2_writes() -> None:
    from hqueue.protocol import hqueue_thrift, subscriber_thrift
    from thriftpy2.protocol import TBinaryProtocol
    from thriftpy2.thrift import TMessageType
    from thriftpy2.transport import TMemoryBuffer

    from gateway.subscriptions.sender import encode_call

    T, S = hqueue_thrift(), subscriber_thrift()
    rows = [(1700000000000 + i, i, b"topic", b"\x00\xffvalue%d" % i) for i in range(50)]
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin("consumeMessages", TMessageType.CALL, 0)
    S.HQueueSubscriberService.consumeMessages_args(
        messages=[T.TMessage(T.TMessageID(r[0], r[1]), 7, r[2], r[3]) for r in rows]
    ).write(proto)
    proto.write_message_end()
    assert encode_call(7, rows) == buf.getvalue()


def test_a_consume_call_with_keys_and_properties_decodes_with_them() -> None:
    """Pushes of messages that have a key or properties carry them (rows without stay bare);
    the listeners show them."""
    import io
    import json
    from pathlib import Path
    from tempfile import TemporaryDirectory

    from hqueue.message import from_thrift
    from hqueue.protocol import subscriber_thrift
    from thriftpy2.protocol import TBinaryProtocol
    from thriftpy2.transport import TMemoryBuffer

    from gateway.keys import Extras
    from gateway.subscriptions.sender import encode_call
    from subscriber_runtime.listeners import JsonLinesListener, PrintListener

    S = subscriber_thrift()
    rows = [(1700000000000, 0, b"t", b"a"), (1700000000000, 1, b"t", b"b")]
    data = encode_call(3, rows, [None, Extras(b"order-7", {"origin": b"\xff"})])
    assert encode_call(3, rows, [None, None]) == encode_call(3, rows)  # the C encoder
    proto = TBinaryProtocol(TMemoryBuffer(data))
    assert proto.read_message_begin()[0] == "consumeMessages"
    args = S.HQueueSubscriberService.consumeMessages_args()
    args.read(proto)
    a, b = args.messages
    assert (a.value, a.key, a.properties) == (b"a", None, None)
    assert (b.value, b.partitionID, b.id.sequenceID) == (b"b", 3, 1)
    assert (b.key, b.properties) == (b"order-7", {"origin": b"\xff"})
    messages = from_thrift(args.messages)  # what the subscriber's listeners get
    out = io.StringIO()
    PrintListener(out).on_messages(messages)
    assert out.getvalue().splitlines()[1] == "3 1700000000000.1 t b key=order-7"
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.jsonl"
        listener = JsonLinesListener(str(path))
        listener.on_messages(messages)
        listener.close()
        first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert "key" not in first and "properties" not in first
    assert second["key"] == "order-7" and second["properties"] == {"origin": {"b64": "/w=="}}


def test_add_partitions_changes_the_subscription_it_is_called_on() -> None:
    # seed 4.4 calls subscription.addPartitions(...) and ignores the result
    sub = Subscription("s")
    sub.add_partitions({0: None})
    sub.add_partitions([2])
    assert sub.partitions == {0: None, 2: None}
    assert [p.partitionID for p in sub.to_thrift().partitions] == [0, 2]
    with pytest.raises(ValueError, match="partitions"):
        sub.add_partitions([-1])


def test_retry_policy_backoff_and_record_round_trip() -> None:
    from hqueue_contract.registry import REPLAY_PARTITION, RetryPolicy, SubscriberRecord

    policy = RetryPolicy()
    assert policy.to_list() == [16, 100, 10_000]
    assert [policy.backoff(n) for n in (1, 2, 3, 8, 20)] == [0.1, 0.2, 0.4, 10.0, 10.0]
    plain = SubscriberRecord([0, 1], {0: (5, 1), 1: None})
    assert b"retry" not in plain.encode()  # old readers see the same record
    assert SubscriberRecord.decode(plain.encode()) == plain
    full = SubscriberRecord(
        [0], {0: None}, None, 4, RetryPolicy(3, 10, 20), 7, True, (None, (9, 9))
    )
    assert SubscriberRecord.decode(full.encode()) == full
    moved = full.with_checkpoints({0: (1, 1), REPLAY_PARTITION: (5, 0)})
    assert moved.checkpoints == {0: (1, 1)} and moved.replay == ((5, 0), (9, 9))
    assert moved.retry == full.retry and moved.epoch == 4
    assert full.with_checkpoints({REPLAY_PARTITION: (9, 9)}).replay is None  # replay finished


def test_parse_retry() -> None:
    from hqueue_contract.registry import RetryPolicy

    from subscriber_runtime.subscription import parse_retry

    assert parse_retry(None, None) is None
    assert parse_retry(3, None) == RetryPolicy(3, 100, 10_000)
    assert parse_retry(None, "5:50") == RetryPolicy(16, 5, 50)
    with pytest.raises(ValueError, match="--retry-backoff"):
        parse_retry(None, "9:1")
    with pytest.raises(ValueError, match="--max-attempts"):
        parse_retry(-1, None)


def test_dlq_name() -> None:
    from hqueue_contract.registry import dlq_name

    assert dlq_name("orders", "billing") == "orders.dlq.billing"
    assert dlq_name("q", "a b_c") == "q.dlq.a_20b_5fc"  # escaped, and unambiguous
    long = dlq_name("q" * 100, "s" * 100)
    assert len(long) == 128 and long != dlq_name("q" * 100, "s" * 99 + "t")
