"""Consumers as MetaQ/RocketMQ users expect them (issue 13): retries with a limit and the
dead-letter queue, replaying dead letters, rewinding a subscriber, message keys and properties.

Real gateway and subscriber processes; the subscription tests run with both registries.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from hqueue_contract.registry import dlq_name

from tests.conftest import GatewayFactory, wait_until
from tests.integration.conftest import Registry, SubscriberFactory, read_jsonl
from tests.integration.test_toolkit import hq, ok

pytestmark = [pytest.mark.slow, pytest.mark.subscriptions]


def values_of(path: Path, tag: str) -> list[str]:
    out: list[str] = []
    for line in read_jsonl(path):
        if line["tag"] == tag:
            out.extend(m[4] for m in line["messages"])
    return out


def deliveries_of(path: Path, value: str) -> int:
    """How many consumeMessages calls carried ``value``."""
    return sum(
        1
        for line in read_jsonl(path)
        if line["tag"] == "delivery" and any(m[4] == value for m in line["messages"])
    )


def scan_all(client: Any, queue: str, partition: int = 0) -> list[Any]:
    T = hqueue_thrift()
    sid = client.messageScannerOpen(queue.encode(), partition, T.TMessageScan(caching=1000))
    out: list[Any] = []
    while True:
        batch = client.messageScannerGetList(sid, 1000)
        if not batch:
            return out
        out.extend(batch)


def test_poison_message_goes_to_the_dead_letter_queue_after_max_attempts(
    start_gateway: GatewayFactory,
    start_subscriber: SubscriberFactory,
    registry: Registry,
    queue_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    T = hqueue_thrift()
    poison_flag = tmp_path / "poison"
    poison_flag.write_text("on")
    monkeypatch.setenv("HQ_TEST_POISON", str(poison_flag))
    # checkpoints are not written on their own during the test: the replay must write the
    # subscriber's progress before it restarts its workers, or they start over (this was a
    # flake with the default 1 s interval: progress of the last second delivered again)
    gw = start_gateway(*registry.gateway_flags(), "--checkpoint-interval", "60")
    client = gw.client()
    client.createQueue(queue_name.encode(), 1, 3600, {})
    out = tmp_path / "out.jsonl"
    start_subscriber(
        gw, queue_name, "s1", "--max-attempts", "4", "--retry-backoff", "20:100",
        "--listener", "tests.subscriber_listeners:Poison", registry=registry, out=out,
    )  # fmt: skip
    good = [f"m{i}" for i in range(20)]
    batch = [*good[:10], "poison", *good[10:]]
    messages = [T.TMessage(topic=b"t", value=v.encode()) for v in batch]
    messages[10].key = b"order-42"
    messages[10].properties = {"origin": b"test"}
    ids = client.putMessagesReturningIds(queue_name.encode(), 0, messages)
    assert len(ids) == 21 and [(i.timestamp, i.sequenceID) for i in ids] == sorted(
        {(i.timestamp, i.sequenceID) for i in ids}
    )
    wait_until(lambda: values_of(out, "ok")[-10:] == good[10:], 30, what="the good messages")
    # messages put after the poison one keep flowing
    client.putMessagesWithPid(queue_name.encode(), 0, [T.TMessage(topic=b"t", value=b"after")])
    wait_until(lambda: "after" in values_of(out, "ok"), 20, what="a later message")
    time.sleep(0.5)  # one more delivery of the poison message would show up now
    assert deliveries_of(out, "poison") == 4  # exactly maxAttempts
    # pushes carry key and properties (messages without have none)
    pushed = {m[4]: m for line in read_jsonl(out) for m in line["messages"]}
    assert pushed["poison"][5:] == ["order-42", {"origin": "test"}]
    assert pushed["m3"][5:] == [None, {}]
    assert values_of(out, "ok") == [*good, "after"]  # in order, none lost, none twice

    letters = scan_all(client, dlq_name(queue_name, "s1"))
    assert [m.value for m in letters] == [b"poison"]
    props = letters[0].properties
    assert props["dlq.partition"] == b"0" and props["dlq.attempts"] == b"4"
    assert props["dlq.id"] == f"{ids[10].timestamp}.{ids[10].sequenceID}".encode()
    assert b"cannot handle poison" in props["dlq.error"] or b"status" in props["dlq.error"]
    assert props["origin"] == b"test" and letters[0].key == b"order-42"
    (info,) = client.listSubscribers(queue_name.encode())
    assert info.deadLetters == 1 and info.retryPolicy.maxAttempts == 4

    listing = ok(hq(gw.address, "dlq", queue_name, "s1"))
    assert "poison" in listing and "after 4 attempts" in listing

    # replay: the listener takes it now; only s1 gets it, and only once
    poison_flag.unlink()
    assert "1 dead letter" in ok(hq(gw.address, "dlq_replay", queue_name, "s1"))
    wait_until(lambda: "poison" in values_of(out, "ok"), 20, what="the replayed dead letter")
    time.sleep(0.5)
    assert values_of(out, "ok") == [*good, "after", "poison"]  # nothing else again
    replayed = [m for line in read_jsonl(out) if line["tag"] == "ok" for m in line["messages"]]
    key, props = replayed[-1][5:]
    assert key == "order-42" and props["origin"] == "test" and props["dlq.attempts"] == "4"
    client.close()


def test_reset_subscriber_rewinds_live_workers(
    start_gateway: GatewayFactory,
    start_subscriber: SubscriberFactory,
    registry: Registry,
    queue_name: str,
    tmp_path: Path,
) -> None:
    T = hqueue_thrift()
    gw = start_gateway(*registry.gateway_flags())
    client = gw.client()
    client.createQueue(queue_name.encode(), 2, 3600, {})
    out = tmp_path / "out.jsonl"
    start_subscriber(
        gw, queue_name, "s1", "--listener", f"jsonl:{out}", registry=registry
    )  # fmt: skip

    def got() -> list[str]:
        return [r["value"] for r in read_jsonl(out)] if out.exists() else []

    def put(p: int, values: list[str]) -> list[Any]:
        return client.putMessagesReturningIds(
            queue_name.encode(), p, [T.TMessage(topic=b"t", value=v.encode()) for v in values]
        )

    first = put(0, ["a0", "a1"]) + put(1, ["b0"])
    wait_until(lambda: len(got()) == 3, 20, what="the first messages")
    time.sleep(0.02)
    middle = put(0, ["a2"])
    wait_until(lambda: len(got()) == 4, 20, what="a2")
    # back to a2's time: a2 again (and only it); through the toolkit, as a MessageID
    mid = f"{middle[0].timestamp}.{middle[0].sequenceID}"
    ok(hq(gw.address, "reset_subscriber", queue_name, "s1", "--to", mid))
    wait_until(lambda: len(got()) == 5, 20, what="a2 again")
    assert got()[-1] == "a2"
    # earliest: everything again; ISO 8601 and latest are accepted too
    ok(hq(gw.address, "reset_subscriber", queue_name, "s1", "--to", "earliest"))
    wait_until(lambda: len(got()) == 9, 20, what="everything again")
    assert sorted(got()[5:]) == ["a0", "a1", "a2", "b0"]
    ok(hq(gw.address, "reset_subscriber", queue_name, "s1", "--to", "latest"))
    ok(hq(gw.address, "reset_subscriber", queue_name, "s1", "--to", "2020-01-01T00:00:00Z"))
    wait_until(lambda: len(got()) == 13, 20, what="everything once more")
    ok(hq(gw.address, "reset_subscriber", queue_name, "s1", "--to", "latest"))
    time.sleep(0.5)
    assert len(got()) == 13
    put(1, ["b1"])
    wait_until(lambda: got()[-1:] == ["b1"], 20, what="new messages after latest")
    assert first  # ids came back
    bad = hq(gw.address, "reset_subscriber", queue_name, "nobody", "--to", "latest")
    assert bad.returncode == 1 and "subscriberName" in bad.stderr + bad.stdout
    client.close()


@pytest.mark.hbase_too
def test_keys_properties_and_ids_on_puts(start_gateway: GatewayFactory, queue_name: str) -> None:
    T = hqueue_thrift()
    gw = start_gateway()
    client = gw.client()
    q = queue_name.encode()
    client.createQueue(q, 3, 3600, {})
    ids = []
    for p in range(3):
        ids += client.putMessagesReturningIds(
            q, p, [T.TMessage(topic=b"t", value=f"v{p}".encode(), key=b"k1",
                              properties={"n": str(p).encode()})]
        )  # fmt: skip
    client.putMessages(q, [T.TMessage(topic=b"t", value=b"plain")])
    client.putMessages(q, [T.TMessage(topic=b"t", value=b"other", key=b"k2")])
    found = client.findMessagesByKey(q, b"k1", 10)
    # newest first by MessageID; partitions count their ids apart, so two puts in the same
    # millisecond can share one, and then the lower partition comes first
    newest_first = sorted(range(3), key=lambda p: (-ids[p].timestamp, -ids[p].sequenceID, p))
    assert [m.value for m in found] == [f"v{p}".encode() for p in newest_first]
    assert [m.properties["n"] for m in found] == [str(p).encode() for p in newest_first]
    assert [m.partitionID for m in found] == newest_first
    assert [(m.id.timestamp, m.id.sequenceID) for m in found] == [
        (ids[p].timestamp, ids[p].sequenceID) for p in newest_first
    ]
    two = client.findMessagesByKey(q, b"k1", 2)
    assert [m.value for m in two] == [f"v{p}".encode() for p in newest_first[:2]]
    assert client.findMessagesByKey(q, b"nothing", 5) == []
    # a scan shows keys and properties; messages without stay without
    everything = [m for p in range(3) for m in scan_all(client, queue_name, p)]
    keyed = {m.value: m for m in everything}
    assert keyed[b"v1"].key == b"k1" and keyed[b"v1"].properties == {"n": b"1"}
    assert keyed[b"plain"].key is None and keyed[b"other"].key == b"k2"
    # -1: the gateway picks the partition
    (one,) = client.putMessagesReturningIds(q, -1, [T.TMessage(topic=b"t", value=b"x")])
    assert one.timestamp > 0
    with pytest.raises(T.IllegalArgument, match="key"):
        client.putMessages(q, [T.TMessage(topic=b"t", value=b"x", key=b"k" * 256)])
    with pytest.raises(T.IllegalArgument, match="key"):
        client.findMessagesByKey(q, b"", 5)
    with pytest.raises(T.IllegalArgument, match="limit"):
        client.findMessagesByKey(q, b"k1", 0)
    client.close()


@pytest.mark.hbase_too
def test_keys_are_found_until_they_expire_and_truncate_drops_them(
    start_gateway: GatewayFactory, queue_name: str
) -> None:
    """The key index over each store: the toolkit finds a key's messages (newest first, with
    the ids it prints everywhere), a truncate forgets them, and they expire with the TTL."""
    T = hqueue_thrift()
    gw = start_gateway()
    client = gw.client()
    q = queue_name.encode()
    client.createQueue(q, 2, 4, {})  # a TTL of 4 s

    def keyed(value: str, partition: int) -> Any:
        (mid,) = client.putMessagesReturningIds(
            q, partition, [T.TMessage(topic=b"t", value=value.encode(), key=b"order-7")]
        )
        return mid

    first, second = keyed("created", 0), keyed("paid", 1)
    # partitions count ids apart: the same millisecond gives both (ts, 0), lower partition first
    newest = sorted(
        [(0, first, "created"), (1, second, "paid")],
        key=lambda e: (-e[1].timestamp, -e[1].sequenceID, e[0]),
    )
    found = ok(hq(gw.address, "find_by_key", queue_name, "order-7")).splitlines()
    assert [line.split()[:2] for line in found] == [
        [str(p), f"{mid.timestamp}.{mid.sequenceID}"] for p, mid, _ in newest
    ]
    assert found[0].endswith(f"  {newest[0][2]}  key=order-7")
    assert "no message" in ok(hq(gw.address, "find_by_key", queue_name, "order-8"))
    ok(hq(gw.address, "truncate", queue_name))
    assert client.findMessagesByKey(q, b"order-7", 10) == []
    keyed("shipped", 0)
    assert [m.value for m in client.findMessagesByKey(q, b"order-7", 10)] == [b"shipped"]
    wait_until(
        lambda: client.findMessagesByKey(q, b"order-7", 10) == [], 15, what="the key to expire"
    )
    client.close()


def _put_values(client: Any, queue: str, partition: int, values: list[str]) -> None:
    T = hqueue_thrift()
    client.putMessagesWithPid(
        queue.encode(), partition, [T.TMessage(topic=b"t", value=v.encode()) for v in values]
    )


def _ack(client: Any, queue: str, name: bytes, member: bytes, messages: list[Any]) -> None:
    T = hqueue_thrift()
    last: dict[int, Any] = {}
    for m in messages:
        last[m.partitionID] = m.id
    client.ackMessages(
        queue.encode(), name, member,
        [T.TSubscribedPartition(partitionID=p, startMessageID=mid) for p, mid in last.items()],
    )  # fmt: skip


def test_pull_long_poll_ack_and_redelivery(
    start_gateway: GatewayFactory, registry: Registry, queue_name: str
) -> None:
    T = hqueue_thrift()
    gw = start_gateway(*registry.gateway_flags(), "--ack-timeout", "1.5", "--pull-lease", "3")
    client = gw.client()
    q = queue_name.encode()
    client.createQueue(q, 2, 3600, {})
    # the first pull creates the group (from now on) and waits: nothing yet
    started = time.monotonic()
    assert client.pullMessages(q, b"php", b"m1", 100, 300) == []
    assert 0.25 <= time.monotonic() - started < 5
    # a long poll returns as soon as a message arrives
    waiter = gw.client()
    result: list[Any] = []
    import threading

    thread = threading.Thread(
        target=lambda: result.extend(waiter.pullMessages(q, b"php", b"m1", 100, 10_000))
    )
    thread.start()
    time.sleep(0.3)
    put_at = time.monotonic()
    _put_values(client, queue_name, 0, ["a"])
    thread.join(10)
    assert [m.value for m in result] == [b"a"] and time.monotonic() - put_at < 3
    _ack(client, queue_name, b"php", b"m1", result)
    _put_values(client, queue_name, 1, ["b", "c"])
    got: list[Any] = []
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        got += client.pullMessages(q, b"php", b"m1", 100, 1000)
    assert sorted(m.value for m in got) == [b"b", b"c"]
    assert all(m.partitionID == 1 for m in got)
    # never acknowledged: delivered again after the ack timeout, nothing else
    again: list[Any] = []
    deadline = time.monotonic() + 10
    while len(again) < 2 and time.monotonic() < deadline:
        again += client.pullMessages(q, b"php", b"m1", 100, 1000)
    assert [m.value for m in again] == [b"b", b"c"]
    _ack(client, queue_name, b"php", b"m1", again)
    time.sleep(2)  # past the ack timeout: acknowledged messages stay acknowledged
    assert client.pullMessages(q, b"php", b"m1", 100, 200) == []
    (info,) = client.listSubscribers(q)
    assert info.shared and info.partitions[1].checkpoint == again[-1].id
    # bad arguments name themselves; push members cannot join a pull group
    with pytest.raises(T.IllegalArgument, match="maxMessages"):
        client.pullMessages(q, b"php", b"m1", 0, 10)
    with pytest.raises(T.IllegalArgument, match="maxWaitMs"):
        client.pullMessages(q, b"php", b"m1", 1, -1)
    with pytest.raises(T.IllegalArgument, match="memberID"):
        client.pullMessages(q, b"php", b"", 1, 10)
    with pytest.raises(T.IllegalArgument, match="push and pull"):
        client.subscribe(q, T.TSubscription(name=b"php", shared=True), b"127.0.0.1:9", 5)
    with pytest.raises(T.IllegalArgument, match="upTo"):
        client.ackMessages(q, b"php", b"m1", [T.TSubscribedPartition(partitionID=0)])
    waiter.close()
    client.close()


def test_pull_group_divides_partitions_and_takes_over_from_a_member_that_left(
    start_gateway: GatewayFactory, registry: Registry, queue_name: str
) -> None:
    gw = start_gateway(*registry.gateway_flags(), "--ack-timeout", "30", "--pull-lease", "2")
    client = gw.client()
    q = queue_name.encode()
    client.createQueue(q, 4, 3600, {})
    client.pullMessages(q, b"g", b"a", 10, 0)
    client.pullMessages(q, b"g", b"b", 10, 0)

    def members() -> dict[str, list[int]]:
        (info,) = client.listSubscribers(q)
        return {m.memberID.decode(): sorted(m.partitions) for m in info.members or []}

    wait_until(lambda: members() == {"a": [0, 2], "b": [1, 3]}, 10, what="two members")
    for p in range(4):
        _put_values(client, queue_name, p, [f"p{p}"])
    seen: dict[str, list[bytes]] = {"a": [], "b": []}
    deadline = time.monotonic() + 10
    while sum(map(len, seen.values())) < 4 and time.monotonic() < deadline:
        for member in ("a", "b"):
            got = client.pullMessages(q, b"g", member.encode(), 10, 200)
            seen[member] += [m.value for m in got]
            if got:
                _ack(client, queue_name, b"g", member.encode(), got)
    assert sorted(seen["a"]) == [b"p0", b"p2"] and sorted(seen["b"]) == [b"p1", b"p3"]
    # b stops pulling: after its lease, a gets every partition, from the group's checkpoints
    for p in range(4):
        _put_values(client, queue_name, p, [f"q{p}"])
    late: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(late) < 4 and time.monotonic() < deadline:
        got = client.pullMessages(q, b"g", b"a", 10, 300)
        late += [m.value for m in got]
        if got:
            _ack(client, queue_name, b"g", b"a", got)
    assert sorted(late) == [b"q0", b"q1", b"q2", b"q3"]  # nothing lost, nothing twice
    assert members() == {"a": [0, 1, 2, 3]}
    client.close()


def test_push_group_of_three_shares_partitions_and_survives_kill9(
    start_gateway: GatewayFactory,
    start_subscriber: SubscriberFactory,
    registry: Registry,
    queue_name: str,
    tmp_path: Path,
) -> None:
    gw = start_gateway(*registry.gateway_flags())
    client = gw.client()
    q = queue_name.encode()
    client.createQueue(q, 6, 3600, {})
    outs = [tmp_path / f"member{i}.jsonl" for i in range(3)]
    # members register through the gateway (leases), in either registry mode
    procs = [
        start_subscriber(gw, queue_name, "grp", "--shared", "--lease", "3",
                         "--listener", f"jsonl:{out}")
        for out in outs
    ]  # fmt: skip

    def members() -> list[list[int]]:
        (info,) = client.listSubscribers(q)
        return sorted(sorted(m.partitions) for m in info.members or [])

    wait_until(lambda: members() == [[0, 3], [1, 4], [2, 5]], 15, what="three members")

    def got(i: int) -> list[tuple[int, str]]:
        if not outs[i].exists():
            return []
        return [(r["partition"], r["value"]) for r in read_jsonl(outs[i])]

    sent: list[str] = []
    for p in range(6):
        values = [f"a{p}-{j}" for j in range(5)]
        _put_values(client, queue_name, p, values)
        sent += values
    wait_until(lambda: sum(len(got(i)) for i in range(3)) >= 30, 20, what="the first round")
    for i in range(3):  # each member got exactly its own partitions
        assert len({p for p, _ in got(i)}) == 2
    time.sleep(1.5)  # let the checkpoints of the first round be written
    procs[2].kill()  # kill -9: no unsubscribe, its lease (3 s) has to run out
    killed_partitions = {p for p, _ in got(2)}
    for p in range(6):
        values = [f"b{p}-{j}" for j in range(5)]
        _put_values(client, queue_name, p, values)
        sent += values
    started = time.monotonic()
    wait_until(lambda: len(members()) == 2, 15, what="the group to shrink")
    assert time.monotonic() - started < 10
    assert sorted(len(m) for m in members()) == [3, 3]

    def delivered() -> set[str]:
        return {v for i in range(3) for _, v in got(i)}

    wait_until(lambda: delivered() >= set(sent), 20, what="every message")
    survivors = [v for i in range(2) for p, v in got(i) if p in killed_partitions]
    assert {v for v in survivors if v.startswith("b")} == {
        f"b{p}-{j}" for p in killed_partitions for j in range(5)
    }
    # per partition, in order across the members
    for i in range(3):
        per: dict[int, list[str]] = {}
        for p, v in got(i):
            per.setdefault(p, []).append(v)
        for values in per.values():
            assert values == sorted(values, key=lambda v: (v[0], int(v.split("-")[1])))
    # push and pull do not mix
    T = hqueue_thrift()
    with pytest.raises(T.IllegalArgument, match="push"):
        client.pullMessages(q, b"grp", b"php", 1, 0)
    client.close()


def test_python_client_pull_ack_and_keys(start_gateway: GatewayFactory, queue_name: str) -> None:
    import hqueue

    gw = start_gateway("--ack-timeout", "1")
    with hqueue.Connection(gw.host, gw.port) as conn:
        conn.create_queue(queue_name, 2, 3600)
        q = conn.queue(queue_name)
        assert q.pull("py", "w1", 10, 200) == []  # joins, from now on
        q.put("t", "v1", 0, key="k", properties={"a": b"1"})
        q.put("t", "v2", 1)
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += q.pull("py", "w1", 10, 1000)
        assert sorted(m.value for m in got) == [b"v1", b"v2"]
        first = next(m for m in got if m.value == b"v1")
        assert first.key == b"k" and first.properties == {"a": b"1"}
        q.ack("py", "w1", got)
        time.sleep(1.5)
        assert q.pull("py", "w1", 10, 200) == []  # acknowledged: not again
        (found,) = q.find_by_key("k")
        assert found.id == first.id and found.partition == 0
