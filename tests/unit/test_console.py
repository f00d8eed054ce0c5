"""The console's data layer and JSON API in-process (Flask's test client over a real embedded
store and the gateway's service), and the metrics' own arithmetic."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from prometheus_client import CollectorRegistry, generate_latest

from gateway.console import auth, create_app
from gateway.console.data import ConsoleData, Cursor, show_value
from gateway.errors import InvalidArgument
from gateway.metrics import GatewayStats, Histogram, Lag, StatsCollector
from gateway.scanners import ScannerRegistry
from gateway.service import GatewayService
from gateway.store.embedded import EmbeddedStore

T = hqueue_thrift()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[GatewayService]:
    store = EmbeddedStore(tmp_path)
    store.start()
    svc = GatewayService(store, ScannerRegistry(), T, advertise="127.0.0.1:9190")
    svc.stats = GatewayStats()
    yield svc
    store.stop()


@pytest.fixture
def api(service: GatewayService) -> Any:
    app = create_app(ConsoleData(service, service.stats))
    app.testing = True
    return app.test_client()


def put(service: GatewayService, queue: str, partition: int, values: list[bytes], topic=b"t"):
    service.putMessagesWithPid(
        queue.encode(), partition, [T.TMessage(topic=topic, value=v) for v in values]
    )


def all_newest_first(service: GatewayService, queue: str) -> list[tuple[int, int, int]]:
    sid = service.queueScannerOpen(queue.encode(), T.TMessageScan(reversed=True))
    out = []
    while True:
        got = service.messageScannerGetList(sid, 1000)
        if not got.rows:
            return out
        out += [(r[0], r[1], p) for p, r in zip(got.partitions, got.rows, strict=True)]


def key(m: dict[str, Any]) -> tuple[int, int, int]:
    return (m["id"]["timestamp"], m["id"]["sequence"], m["partition"])


def test_pages_continue_exactly_where_the_last_ended(service: GatewayService, api: Any) -> None:
    service.createQueue(b"q", 3, 3600, {})
    # ids tie across partitions (same millisecond, same sequence): the cursor's partition
    # must break the tie
    for _ in range(4):
        for p in range(3):
            put(service, "q", p, [b"m%d" % i for i in range(25)])
    expected = all_newest_first(service, "q")
    assert len(expected) == 300
    seen: list[tuple[int, int, int]] = []
    url = "/api/queues/q/messages?limit=7"
    pages = 0
    while True:
        reply = api.get(url)
        assert reply.status_code == 200, reply.json
        page = reply.json
        seen += [key(m) for m in page["messages"]]
        pages += 1
        if pages == 3:
            # newer messages arriving while someone pages do not shift the next page
            put(service, "q", 1, [b"new"] * 10)
        if page["next"] is None:
            break
        url = f"/api/queues/q/messages?limit=7&before={page['next']}"
    assert seen == expected
    assert pages == 300 // 7 + 1


def test_filters_topic_partition_and_time(service: GatewayService, api: Any) -> None:
    service.createQueue(b"q", 2, 3600, {})
    put(service, "q", 0, [b"a"] * 5, topic=b"x")
    put(service, "q", 1, [b"b"] * 5, topic=b"y")
    everything = all_newest_first(service, "q")
    got = api.get("/api/queues/q/messages?topic=y").json["messages"]
    assert {m["topic"] for m in got} == {"y"} and len(got) == 5
    got = api.get("/api/queues/q/messages?partition=0").json["messages"]
    assert {m["partition"] for m in got} == {0} and len(got) == 5
    newest_ts = everything[0][0]
    oldest_ts = everything[-1][0]
    got = api.get(f"/api/queues/q/messages?from={newest_ts}").json["messages"]
    assert [key(m) for m in got] == [k for k in everything if k[0] >= newest_ts]
    got = api.get(f"/api/queues/q/messages?to={oldest_ts}").json["messages"]
    assert got == []
    got = api.get(f"/api/queues/q/messages?to={newest_ts + 1}&from={oldest_ts}").json
    assert [key(m) for m in got["messages"]] == everything
    reply = api.get("/api/queues/q/messages?partition=9")
    assert reply.status_code == 400 and reply.json["argument"] == "partition"
    reply = api.get("/api/queues/q/messages?key=" + "k" * 256)
    assert reply.status_code == 400 and reply.json["argument"] == "key"
    reply = api.get("/api/queues/q/messages?from=yesterday")
    assert reply.status_code == 400 and reply.json["argument"] == "from"


def test_the_key_filter_pages_a_keys_messages_newest_first(service: GatewayService) -> None:
    from gateway.keys import MessageExtras

    service.extras = MessageExtras(service.store)
    service.createQueue(b"q", 2, 3600, {})
    for i in range(12):
        service.putMessagesWithPid(b"q", i % 2, [
            T.TMessage(topic=b"x" if i % 3 else b"y", value=b"m%d" % i, key=b"k1"),
            T.TMessage(topic=b"x", value=b"other %d" % i, key=b"k2"),
            T.TMessage(topic=b"x", value=b"none %d" % i),
        ])  # fmt: skip
    app = create_app(ConsoleData(service, service.stats))
    app.testing = True
    client = app.test_client()
    seen: list[dict[str, Any]] = []
    url = "/api/queues/q/messages?key=k1&limit=5"
    while url:
        page = client.get(url).json
        seen += page["messages"]
        url = page["next"] and f"/api/queues/q/messages?key=k1&limit=5&before={page['next']}"
    assert sorted(m["value"]["text"] for m in seen) == sorted(f"m{i}" for i in range(12))
    assert [key(m) for m in seen] == sorted((key(m) for m in seen), reverse=True)
    assert {m["key"] for m in seen} == {"k1"}
    got = client.get("/api/queues/q/messages?key=k1&topic=y&partition=0").json["messages"]
    assert sorted(m["value"]["text"] for m in got) == ["m0", "m6"]
    assert client.get("/api/queues/q/messages?key=nope").json["messages"] == []
    html = client.get("/queues/q/messages?key=k1").get_data(as_text=True)
    assert "m11" in html and "other" not in html


def test_console_reads_count_in_the_read_metrics(service: GatewayService, api: Any) -> None:
    from gateway.keys import MessageExtras

    service.extras = MessageExtras(service.store)
    service.createQueue(b"q", 2, 3600, {})
    put(service, "q", 0, [b"v" * 10] * 30)
    time.sleep(0.005)  # a later millisecond: the keyed message is the newest, not tied
    service.putMessagesWithPid(b"q", 1, [T.TMessage(topic=b"t", value=b"kv", key=b"k")])
    counters = service.stats.queue("q")
    assert (counters.read_messages, counters.read_bytes) == (0, 0)
    assert len(api.get("/api/queues/q/messages?limit=20").json["messages"]) == 20
    # a page reads one message more than it shows, to know whether there is a next page
    assert (counters.read_messages, counters.read_bytes) == (21, 21 * 10 - 10 + 2)
    api.get("/api/queues/q/messages?key=k")
    assert (counters.read_messages, counters.read_bytes) == (22, 21 * 10 - 10 + 4)
    text = generate_latest(_registry(service.stats)).decode()
    assert 'hqueue_read_messages_total{queue="q"} 22.0' in text


def _registry(stats: GatewayStats) -> CollectorRegistry:
    live = {"queues": {"q": 2}, "open_scanners": 0, "open_connections": 0,
            "connections_accepted": 0}  # fmt: skip
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StatsCollector(stats, lambda: live))  # type: ignore[arg-type]
    return reg


def test_values_as_text_or_hex_and_cut() -> None:
    assert show_value(b"hello") == {"encoding": "utf-8", "text": "hello", "size": 5,
                                    "truncated": False}  # fmt: skip
    v = show_value(b"\xff\x00")
    assert v["encoding"] == "hex" and v["text"] == "ff00"
    v = show_value("é".encode() * 1000)  # 2000 bytes of UTF-8: cut on a character boundary
    assert v["encoding"] == "utf-8" and v["truncated"] and v["text"] == "é" * 512
    v = show_value(bytes(range(256)) * 8)
    assert v["encoding"] == "hex" and v["truncated"] and len(v["text"]) == 512


def test_cursor_round_trip_and_errors() -> None:
    assert Cursor.parse(str(Cursor(1700000000000, 3, 2))) == Cursor(1700000000000, 3, 2)
    for bad in ("x", "1.2", "1.2.3.4", "-1.0.0", "1.99999.0"):
        with pytest.raises(InvalidArgument, match="before"):
            Cursor.parse(bad)


def test_admin_api_asks_for_confirmation_and_json(service: GatewayService, api: Any) -> None:
    reply = api.post("/api/queues", json={"name": "q2", "partitions": 2, "ttl_seconds": 60})
    assert reply.status_code == 201 and reply.json["partitions"] == 2
    reply = api.post("/api/queues", json={"name": "q2", "partitions": 2, "ttl_seconds": 60})
    assert reply.status_code == 400
    reply = api.post("/api/queues", json={"name": "bad name", "partitions": 2, "ttl_seconds": 1})
    assert reply.status_code == 400 and reply.json["argument"] == "queueName"
    put(service, "q2", 0, [b"v"] * 3)
    assert api.post("/api/queues/q2/truncate", json={}).status_code == 400  # no confirm
    assert api.post("/api/queues/q2/truncate?confirm=q2", data="x").status_code == 400  # no JSON
    reply = api.post(
        "/api/queues/q2/truncate?confirm=q2", json={}, headers={"Origin": "http://elsewhere"}
    )
    assert reply.status_code == 403
    assert api.post("/api/queues/q2/truncate?confirm=q2", json={}).status_code == 200
    assert api.get("/api/queues/q2/messages").json["messages"] == []
    assert api.post("/api/queues/q2/disable", json={}).json["state"] == "disabled"
    assert api.get("/api/queues/q2/messages").status_code == 400
    assert api.post("/api/queues/q2/enable", json={}).json["state"] == "enabled"
    assert api.delete("/api/queues/q2").status_code == 400
    assert api.delete("/api/queues/q2?confirm=q2").status_code == 200
    assert api.get("/api/queues/q2").status_code == 404
    assert api.get("/api/queues/q2/subscribers").status_code == 404


def test_authorize_hook_refuses(service: GatewayService) -> None:
    def nobody(environ: dict[str, Any]) -> str:
        raise auth.NotAllowed("not an administrator")

    app = create_app(ConsoleData(service), authorize=nobody)
    client = app.test_client()
    reply = client.post("/api/queues", json={"name": "q3", "partitions": 1, "ttl_seconds": 60})
    assert reply.status_code == 403 and "not an administrator" in reply.json["error"]
    reply = client.post("/queues", data={"name": "q3", "partitions": "1", "ttl_seconds": "60"})
    assert reply.status_code == 403
    assert service.store.get_queue("q3") is None
    assert client.get("/queues").status_code == 200  # reading needs no permission


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = Histogram((0.001, 0.01))
    for v in (0.0005, 0.001, 0.002, 5.0):
        h.observe(v)
    assert h.cumulative() == [("0.001", 2), ("0.01", 3), ("+Inf", 4)]
    assert h.sum == pytest.approx(5.0035)


def test_collector_exposes_counters_with_bounded_labels() -> None:
    stats = GatewayStats()
    stats.queue("a").put_messages += 5
    stats.queue("gone").put_messages += 1
    stats.subscriber("a", "s").retries += 2
    stats.set_partitions_owned("a", 3)
    live = {"queues": {"a": 4}, "open_scanners": 4, "open_connections": 2,
            "connections_accepted": 9}  # fmt: skip
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(stats, lambda: live))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'hqueue_put_messages_total{queue="a"} 5.0' in text
    assert "gone" not in text  # deleted queues are forgotten
    assert 'hqueue_push_retries_total{queue="a",subscriber="s"} 2.0' in text
    assert 'hqueue_partitions_owned{queue="a"} 3.0' in text
    assert "hqueue_open_scanners 4.0" in text
    assert 'hqueue_queue_partitions{queue="a"} 4.0' in text
    assert "hqueue_connections_total 9.0" in text


def test_dashboard_and_alerts_use_only_exported_metrics() -> None:
    """docs/grafana/hqueue.json and docs/alerts.yml name only metrics the gateway exports."""
    import json
    import re

    import yaml

    stats = GatewayStats()
    stats.queue("a")
    stats.subscriber("a", "s")
    stats.lag[("a", "s")] = Lag(1, False, 1.0)
    stats.request_error("putMessages", "io_error")
    stats.store_error("putMessages")
    stats.set_partitions_owned("a", 1)
    live = {"queues": {"a": 1}, "open_scanners": 0, "open_connections": 0,
            "connections_accepted": 0}  # fmt: skip
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(stats, lambda: live))  # type: ignore[arg-type]
    exported = set()
    for family in registry.collect():
        exported |= {s.name for s in family.samples}
    docs = Path(__file__).resolve().parents[2] / "docs"
    rules = yaml.safe_load((docs / "alerts.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    dashboard = json.loads((docs / "grafana" / "hqueue.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\bhqueue_[a-z_]+", e)}
    assert used, "no hqueue metric found: the check would prove nothing"
    assert used <= exported, f"not exported: {sorted(used - exported)}"
    assert len(exprs) > 20


def test_gateways_show_owners_and_the_cluster_when_it_exists(
    service: GatewayService, api: Any
) -> None:
    service.createQueue(b"q", 5, 60, {})
    got = api.get("/api/gateways").json
    owners = got["queues"][0]["owners"]
    assert owners == [{"address": "127.0.0.1:9190", "partitions": [0, 1, 2, 3, 4],
                       "ranges": "0-4"}]  # fmt: skip
    # listGateways (the cluster's, issue 12): a gateway on its own lists itself
    [me] = got["gateways"]
    assert me["address"] == "127.0.0.1:9190" and me["partitionsOwned"] == 5
    page = api.get("/gateways")
    assert page.status_code == 200 and b"127.0.0.1:9190" in page.data


def test_the_admin_policy_guards_the_console(service: GatewayService, tmp_path: Any) -> None:
    """With --admin-token-file, console changes need a token (API header or form field), as
    Thrift calls do; with --admin-identities alone the console cannot check and refuses."""
    from gateway.auth import AdminPolicy

    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-admin-token-0123\n")
    policy = AdminPolicy.from_options(None, str(tokens))
    app = create_app(ConsoleData(service), auth.policy_authorize(policy), token_field=True)
    client = app.test_client()
    body = {"name": "q4", "partitions": 1, "ttl_seconds": 60}
    reply = client.post("/api/queues", json=body)
    assert reply.status_code == 403 and "admin token" in reply.json["error"]
    bad = {"Authorization": "Bearer wrong-token-0000000000"}
    assert client.post("/api/queues", json=body, headers=bad).status_code == 403
    good = {"Authorization": "Bearer s3cret-admin-token-0123"}
    assert client.post("/api/queues", json=body, headers=good).status_code in (200, 201)
    assert service.store.get_queue("q4") is not None
    assert b'name="admin_token"' in client.get("/queues").data
    form = {"name": "q5", "partitions": "1", "ttl_seconds": "60"}
    assert client.post("/queues", data=form).status_code == 403
    form["admin_token"] = "s3cret-admin-token-0123"
    assert client.post("/queues", data=form).status_code in (200, 302, 303)
    assert service.store.get_queue("q5") is not None

    certs_only = AdminPolicy.from_options("alice", None)
    app = create_app(ConsoleData(service), auth.policy_authorize(certs_only))
    reply = app.test_client().post("/api/queues", json={**body, "name": "q6"})
    assert reply.status_code == 403 and "certificates" in reply.json["error"]
