"""The HQueueService contract, end to end against a gateway process (thriftpy2 client)."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.helpers import drain, key, msg


def scan_partition(client: Any, T: Any, q: str, p: int, **scan: Any) -> list[Any]:
    return drain(client, client.messageScannerOpen(q.encode(), p, T.TMessageScan(**scan)))


# -- admin ---------------------------------------------------------------------------------


def test_create_list_describe_and_config(client: Any, T: Any, queue_name: str) -> None:
    cfg = {"hbase.hqueue.partitionsPerRegion": "4", "hbase.hstore.compaction.min": "16"}
    client.createQueue(queue_name.encode(), 32, 86400, cfg)
    infos = {i.name: i for i in client.listQueues()}
    info = infos[queue_name.encode()]
    assert (info.partitionCount, info.ttlSeconds, info.enabled) == (32, 86400, True)
    assert info.config == cfg
    with pytest.raises(T.IllegalArgument, match="already exists"):
        client.createQueue(queue_name.encode(), 1, 1, {})
    assert len(client.getQueueLocations(queue_name.encode())) == 32


@pytest.mark.parametrize(
    ("partitions", "ttl", "config", "argument"),
    [
        (0, 10, {}, "partitionCount"),
        (-1, 10, {}, "partitionCount"),
        (1, 0, {}, "ttlSeconds"),
        (1, 10, {"hbase.no.such.key": "1"}, "config"),
        (2, 10, {"hbase.hqueue.partitionsPerRegion": "3"}, "partitionsPerRegion"),
    ],
)
def test_create_rejects_bad_arguments(
    client: Any, T: Any, queue_name: str, partitions: int, ttl: int, config: dict, argument: str
) -> None:
    with pytest.raises(T.IllegalArgument, match=argument):
        client.createQueue(queue_name.encode(), partitions, ttl, config)
    assert queue_name.encode() not in [i.name for i in client.listQueues()]


def test_bad_queue_name(client: Any, T: Any) -> None:
    for bad in (b"", b"has space", b"x" * 129, b"\xff\xfe"):
        with pytest.raises(T.IllegalArgument, match="queueName"):
            client.createQueue(bad, 1, 60, {})


def test_delete_truncate_disable_enable(client: Any, T: Any, queue_name: str) -> None:
    q = queue_name.encode()
    client.createQueue(q, 4, 3600, {})
    client.putMessagesWithPid(q, 1, [msg(T, b"t", b"%d" % i) for i in range(10)])
    before = scan_partition(client, T, queue_name, 1)
    assert len(before) == 10

    client.truncateQueue(q)
    info = next(i for i in client.listQueues() if i.name == q)
    assert info.partitionCount == 4  # the layout survives a truncate
    assert scan_partition(client, T, queue_name, 1) == []
    client.putMessageWithPid(q, 1, msg(T, b"t", b"after"))
    after = scan_partition(client, T, queue_name, 1)
    assert [m.value for m in after] == [b"after"]
    assert key(after[0]) > key(before[-1])  # ids keep increasing across a truncate

    client.disableQueue(q)
    assert not next(i for i in client.listQueues() if i.name == q).enabled
    with pytest.raises(T.IllegalArgument, match="disabled"):
        client.putMessage(q, msg(T, b"t", b"x"))
    with pytest.raises(T.IllegalArgument, match="disabled"):
        client.messageScannerOpen(q, 0, T.TMessageScan())
    client.enableQueue(q)
    client.putMessage(q, msg(T, b"t", b"x"))

    client.deleteQueue(q)
    assert q not in [i.name for i in client.listQueues()]
    with pytest.raises(T.IllegalArgument, match="does not exist"):
        client.putMessage(q, msg(T, b"t", b"x"))
    with pytest.raises(T.IllegalArgument, match="does not exist"):
        client.deleteQueue(q)


def test_open_scanner_sees_truncate_and_disable(client: Any, T: Any, queue_name: str) -> None:
    q = queue_name.encode()
    client.createQueue(q, 1, 3600, {})
    client.putMessages(q, [msg(T, b"t", b"%d" % i) for i in range(5)])
    sid = client.messageScannerOpen(q, 0, T.TMessageScan())
    assert len(client.messageScannerGetList(sid, 2)) == 2
    client.disableQueue(q)
    with pytest.raises(T.IllegalArgument, match="disabled"):
        client.messageScannerGetList(sid, 2)
    client.enableQueue(q)
    client.truncateQueue(q)
    with pytest.raises(T.IllegalArgument, match="truncated"):
        client.messageScannerGetList(sid, 2)


# -- puts ----------------------------------------------------------------------------------


def test_put_without_partition_picks_random_partitions(
    client: Any, T: Any, queue_name: str
) -> None:
    q = queue_name.encode()
    client.createQueue(q, 4, 3600, {})
    for i in range(60):
        client.putMessage(q, msg(T, b"t", b"%d" % i))
    used = {m.partitionID for m in drain(client, client.queueScannerOpen(q, T.TMessageScan()))}
    assert len(used) >= 2  # all 60 on one partition: probability 4 * 4**-60


def test_put_messages_one_random_partition_per_call_unless_set(
    client: Any, T: Any, queue_name: str
) -> None:
    q = queue_name.encode()
    client.createQueue(q, 8, 3600, {})
    for call in range(5):
        client.putMessages(q, [msg(T, b"t", b"c%d-%d" % (call, i)) for i in range(20)])
    by_call: dict[bytes, set[int]] = {}
    for m in drain(client, client.queueScannerOpen(q, T.TMessageScan())):
        by_call.setdefault(m.value.split(b"-")[0], set()).add(m.partitionID)
    assert all(len(ps) == 1 for ps in by_call.values()), by_call

    client.truncateQueue(q)
    client.putMessages(
        q, [msg(T, b"t", b"a", pid=3), msg(T, b"t", b"b", pid=5), msg(T, b"t", b"c")]
    )
    got = {
        m.value: m.partitionID for m in drain(client, client.queueScannerOpen(q, T.TMessageScan()))
    }
    assert got[b"a"] == 3 and got[b"b"] == 5 and b"c" in got

    client.truncateQueue(q)  # *WithPid overrides a message's own partitionID
    client.putMessagesWithPid(q, 6, [msg(T, b"t", b"x", pid=1), msg(T, b"t", b"y")])
    client.putMessageWithPid(q, 6, msg(T, b"t", b"z", pid=2))
    assert [(m.partitionID, m.value) for m in scan_partition(client, T, queue_name, 6)] == [
        (6, b"x"),
        (6, b"y"),
        (6, b"z"),
    ]


def test_batch_keeps_order_and_ids_increase(client: Any, T: Any, queue_name: str) -> None:
    q = queue_name.encode()
    client.createQueue(q, 2, 3600, {})
    values = [b"%06d" % i for i in range(5000)]
    client.putMessagesWithPid(q, 1, [msg(T, b"t", v) for v in values])
    got = scan_partition(client, T, queue_name, 1)
    assert [m.value for m in got] == values
    ids = [key(m) for m in got]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(m.partitionID == 1 and 0 <= m.id.sequenceID <= 32767 for m in got)


def test_put_errors_name_the_argument_and_write_nothing(
    start_gateway: Any, T: Any, queue_name: str
) -> None:
    gw = start_gateway("--max-value-bytes", "1024")
    client = gw.client()
    q = queue_name.encode()
    client.createQueue(q, 2, 3600, {})
    cases = [
        ([msg(T, b"", b"v")], r"tMessages\[0\]\.topic: must not be empty"),
        ([msg(T, b"t", b"v"), msg(T, b"x" * 256, b"v")], r"tMessages\[1\]\.topic"),
        ([msg(T, b"t", b"v" * 1025)], r"tMessages\[0\]\.value: 1025 bytes is over the limit"),
        ([msg(T, b"t", b"v", pid=2)], r"tMessages\[0\]\.partitionID: 2 is out of range"),
        ([msg(T, b"t", b"v", pid=-1)], r"partitionID: -1 is out of range"),
    ]
    for batch, match in cases:
        with pytest.raises(T.IllegalArgument, match=match):
            client.putMessages(q, batch)
    with pytest.raises(T.IllegalArgument, match="partitionID: 7 is out of range"):
        client.putMessageWithPid(q, 7, msg(T, b"t", b"v"))
    with pytest.raises(T.IllegalArgument, match=r"tMessage\.topic"):
        client.putMessage(q, msg(T, b"", b"v"))
    with pytest.raises(T.IllegalArgument, match="does not exist"):
        client.putMessage(b"no_such_queue", msg(T, b"t", b"v"))
    # nothing of a rejected batch was written, and the connection still works
    assert drain(client, client.queueScannerOpen(q, T.TMessageScan())) == []
    client.putMessage(q, msg(T, b"t", b"v" * 1024))
    assert len(drain(client, client.queueScannerOpen(q, T.TMessageScan()))) == 1


def test_concurrent_producers_on_one_partition(gateway: Any, T: Any, queue_name: str) -> None:
    q = queue_name.encode()
    setup = gateway.client()
    setup.createQueue(q, 1, 3600, {})
    errors: list[BaseException] = []

    def produce(n: int) -> None:
        c = gateway.client()
        try:
            for b in range(20):
                c.putMessagesWithPid(
                    q, 0, [msg(T, b"p%d" % n, b"%d-%d" % (b, i)) for i in range(50)]
                )
                c.putMessage(q, msg(T, b"p%d" % n, b"single-%d" % b))
        except BaseException as exc:
            errors.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    got = scan_partition(setup, T, queue_name, 0)
    assert len(got) == 8 * 20 * 51
    ids = [key(m) for m in got]
    assert all(a < b for a, b in itertools.pairwise(ids)), "ids must strictly increase"
    for n in range(8):  # each producer's own messages stay in the order it sent them
        mine = [m.value for m in got if m.topic == b"p%d" % n and not m.value.startswith(b"s")]
        assert mine == [b"%d-%d" % (b, i) for b in range(20) for i in range(50)]


# -- scans ---------------------------------------------------------------------------------


@pytest.fixture
def filled(client: Any, T: Any, queue_name: str) -> list[Any]:
    """3 partitions; topics a/b alternating; returns every message in MessageID order."""
    q = queue_name.encode()
    client.createQueue(q, 3, 3600, {})
    for r in range(4):
        for p in range(3):
            client.putMessagesWithPid(
                q,
                p,
                [msg(T, b"ab"[i % 2 : i % 2 + 1], b"r%d-p%d-%d" % (r, p, i)) for i in range(5)],
            )
    return sorted(
        drain(client, client.queueScannerOpen(q, T.TMessageScan())),
        key=lambda m: (key(m), m.partitionID),
    )


def test_queue_scanner_merges_in_message_id_order(filled: list[Any]) -> None:
    assert len(filled) == 60
    ids = [(key(m), m.partitionID) for m in filled]
    assert ids == sorted(ids)


def test_scan_start_inclusive_stop_exclusive(
    client: Any, T: Any, queue_name: str, filled: list[Any]
) -> None:
    p1 = [m for m in filled if m.partitionID == 1]
    start, stop = p1[3].id, p1[9].id
    got = scan_partition(client, T, queue_name, 1, startMessageID=start, stopMessageID=stop)
    assert [m.value for m in got] == [m.value for m in p1[3:9]]
    rev = scan_partition(
        client, T, queue_name, 1, startMessageID=p1[9].id, stopMessageID=p1[3].id, reversed=True
    )
    assert [m.value for m in rev] == [m.value for m in reversed(p1[4:10])]
    with pytest.raises(T.IllegalArgument, match="stopMessageID"):
        client.messageScannerOpen(
            queue_name.encode(), 1, T.TMessageScan(startMessageID=stop, stopMessageID=start)
        )


def test_scan_by_time_only(client: Any, T: Any, queue_name: str, filled: list[Any]) -> None:
    p0 = [m for m in filled if m.partitionID == 0]
    ts = p0[5].id.timestamp
    got = scan_partition(client, T, queue_name, 0, startMessageID=T.TMessageID(timestamp=ts))
    assert [m.value for m in got] == [m.value for m in p0 if m.id.timestamp >= ts]


def test_topic_filter_and_reversed(client: Any, T: Any, queue_name: str, filled: list[Any]) -> None:
    q = queue_name.encode()
    got = drain(client, client.queueScannerOpen(q, T.TMessageScan(topics=[b"b"], reversed=True)))
    expected = [m for m in filled if m.topic == b"b"]
    assert [m.value for m in got] == [m.value for m in reversed(expected)]


def test_combined_scanner_reads_only_listed_partitions(
    client: Any, T: Any, queue_name: str, filled: list[Any]
) -> None:
    q = queue_name.encode()
    got = drain(client, client.combinedScannerOpen(q, [2, 0], T.TMessageScan(caching=3)), n=7)
    assert [m.value for m in got] == [m.value for m in filled if m.partitionID in (0, 2)]
    with pytest.raises(T.IllegalArgument, match=r"partitionIDs\[1\]"):
        client.combinedScannerOpen(q, [0, 3], T.TMessageScan())
    with pytest.raises(T.IllegalArgument, match="partitionIDs"):
        client.combinedScannerOpen(q, [], T.TMessageScan())


def test_scanner_end_of_data_and_ids(
    client: Any, T: Any, queue_name: str, filled: list[Any]
) -> None:
    q = queue_name.encode()
    sid = client.messageScannerOpen(q, 2, T.TMessageScan(topics=[b"a"]))
    seen = []
    while True:
        m = client.messageScannerGet(sid)
        if m.id is None:
            break
        seen.append(m)
    assert len(seen) == 12 and all(m.partitionID == 2 and m.topic == b"a" for m in seen)
    assert client.messageScannerGet(sid).id is None  # stays at the end until closed
    client.messageScannerClose(sid)
    with pytest.raises(T.IllegalArgument, match="closed"):
        client.messageScannerGet(sid)

    sid = client.messageScannerOpen(q, 2, T.TMessageScan())
    assert len(drain(client, sid)) == 20
    with pytest.raises(T.IllegalArgument, match="end"):  # the empty list freed it
        client.messageScannerGetList(sid, 10)
    client.messageScannerClose(sid)  # closing a finished scanner is harmless
    with pytest.raises(T.IllegalArgument, match="id"):
        client.messageScannerGetList(987654, 10)
    with pytest.raises(T.IllegalArgument, match="nbMessages"):
        client.messageScannerGetList(client.messageScannerOpen(q, 0, T.TMessageScan()), 0)


def test_idle_scanners_expire(start_gateway: Any, T: Any, queue_name: str) -> None:
    gw = start_gateway("--scanner-timeout", "0.5")
    client = gw.client()
    q = queue_name.encode()
    client.createQueue(q, 1, 3600, {})
    client.putMessages(q, [msg(T, b"t", b"v")] * 3)
    sid = client.messageScannerOpen(q, 0, T.TMessageScan())
    assert len(client.messageScannerGetList(sid, 1)) == 1

    def expired() -> bool:
        try:
            client.messageScannerGet(sid)  # a use renews the scanner: poll slower than it expires
        except T.IllegalArgument as exc:
            return "expired" in exc.message
        return False

    wait_until(expired, timeout=15, interval=1.5, what="the idle scanner to expire")
    # other scanners are unaffected, and the connection is fine
    assert (
        len(client.messageScannerGetList(client.messageScannerOpen(q, 0, T.TMessageScan()), 5)) == 3
    )


def test_locations_use_the_advertised_address(start_gateway: Any, T: Any, queue_name: str) -> None:
    gw = start_gateway("--advertise", "gw1.example:7000")
    client = gw.client()
    client.createQueue(queue_name.encode(), 3, 60, {})
    assert client.getQueueLocations(queue_name.encode()) == [b"gw1.example:7000"] * 3
    with pytest.raises(T.IllegalArgument, match="does not exist"):
        client.getQueueLocations(b"nope")


def test_default_location_is_host_and_port(gateway: Any, client: Any, queue_name: str) -> None:
    client.createQueue(queue_name.encode(), 2, 60, {})
    assert client.getQueueLocations(queue_name.encode()) == [gateway.address.encode()] * 2


def test_large_responses_are_split(client: Any, T: Any, queue_name: str) -> None:
    q = queue_name.encode()
    client.createQueue(q, 1, 3600, {})
    values = [bytes([i]) * (1024 * 1024) for i in range(40)]
    for i in range(0, 40, 10):
        client.putMessages(q, [msg(T, b"t", v) for v in values[i : i + 10]])
    sid = client.messageScannerOpen(q, 0, T.TMessageScan())
    first = client.messageScannerGetList(sid, 100)
    # a response stops growing once past 16 MiB of bodies; the rest comes with the next calls
    assert 16 <= len(first) < 40
    rest = drain(client, sid, 100)
    assert [m.value for m in first + rest] == values


@pytest.mark.timeout(300)
def test_queue_scan_over_the_most_partitions(gateway: Any, T: Any, queue_name: str) -> None:
    # Over HBase every partition costs an HBase scan when the queue scanner primes its
    # cursors: about a minute for 32767 partitions on a loaded 2-core machine.
    client = gateway.client(timeout=240)
    q = queue_name.encode()
    client.createQueue(q, 32767, 3600, {"hbase.hqueue.partitionsPerRegion": "4096"})
    assert len(client.getQueueLocations(q)) == 32767
    client.putMessageWithPid(q, 32766, msg(T, b"t", b"last partition"))
    client.putMessageWithPid(q, 0, msg(T, b"t", b"first partition"))
    got = drain(client, client.queueScannerOpen(q, T.TMessageScan()))
    assert sorted((m.partitionID, m.value) for m in got) == [
        (0, b"first partition"),
        (32766, b"last partition"),
    ]
    # MessageID order, ties (the same millisecond and sequence) broken by partition id
    assert [(key(m), m.partitionID) for m in got] == sorted((key(m), m.partitionID) for m in got)
    with pytest.raises(T.IllegalArgument, match="partitionID: 32767 is out of range"):
        client.putMessageWithPid(q, 32767, msg(T, b"t", b"x"))
