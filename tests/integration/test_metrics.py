"""``--metrics-port``: a real gateway process scraped over HTTP after real puts, scans and
subscriptions; the values must match what was done."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import GatewayFactory, GatewayProcess, free_port, wait_until
from tests.integration.conftest import SubscriberFactory, read_jsonl

pytestmark = pytest.mark.subscriptions


@pytest.fixture
def store() -> str:
    return "embedded"  # what is counted does not depend on the store; WAL syncs are its own


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_puts_scans_errors_and_push(
    start_gateway: GatewayFactory,
    start_subscriber: SubscriberFactory,
    queue_name: str,
    tmp_path: Path,
) -> None:
    port = free_port()
    gw: GatewayProcess = start_gateway(
        "--metrics-port", str(port), "--stats-interval", "0.3", "--push-backoff-max", "0.2"
    )
    T = hqueue_thrift()
    c = gw.client()
    q = queue_name.encode()
    c.createQueue(q, 2, 3600, {})
    before = scrape(port)
    assert value(before, "hqueue_put_messages_total", queue=queue_name) == 0
    assert value(before, "hqueue_open_connections") == 1

    # 10 put calls of 100 messages of 10 bytes, and one message of 1000 bytes
    for i in range(10):
        c.putMessagesWithPid(q, i % 2, [T.TMessage(topic=b"t", value=b"0123456789")] * 100)
    c.putMessage(q, T.TMessage(topic=b"big", value=b"x" * 1000))
    sid = c.queueScannerOpen(q, T.TMessageScan(topics=[b"t"]))
    read = 0
    while batch := c.messageScannerGetList(sid, 300):
        read += len(batch)
    assert read == 1000
    open_sid = c.messageScannerOpen(q, 0, T.TMessageScan())
    with pytest.raises(T.IllegalArgument):
        c.putMessageWithPid(q, 7, T.TMessage(topic=b"t", value=b"v"))

    s = scrape(port)
    assert value(s, "hqueue_put_messages_total", queue=queue_name) == 1001
    assert value(s, "hqueue_put_bytes_total", queue=queue_name) == 10 * 100 * 10 + 1000
    assert value(s, "hqueue_put_batches_total", queue=queue_name) == 11
    assert value(s, "hqueue_read_messages_total", queue=queue_name) == 1000
    assert value(s, "hqueue_read_bytes_total", queue=queue_name) == 10_000
    assert value(s, "hqueue_put_latency_seconds_count") == 11
    assert value(s, "hqueue_put_latency_seconds_bucket", le="+Inf") == 11
    assert value(s, "hqueue_put_latency_seconds_sum") > 0
    # 4 reads returned rows and one (the empty list that ended the scan) did not
    assert value(s, "hqueue_scan_latency_seconds_count") == 5
    assert value(s, "hqueue_open_scanners") == 1
    # every put was synced by some group commit, and each sync covered at least one put
    syncs = value(s, "hqueue_wal_syncs_total")
    assert 1 <= syncs <= 11
    assert value(s, "hqueue_group_commit_puts_count") == syncs
    assert value(s, "hqueue_group_commit_puts_sum") == 11
    assert value(s, "hqueue_group_commit_messages_total") == 1001
    assert (
        value(
            s, "hqueue_request_errors_total", method="putMessageWithPid", error="illegal_argument"
        )
        == 1
    )
    assert value(s, "hqueue_store_errors_total", method="putMessageWithPid") == 0
    assert value(s, "process_resident_memory_bytes") > 0
    # a gateway on its own owns every partition
    assert value(s, "hqueue_partitions_owned", queue=queue_name) == 2
    assert value(s, "hqueue_queue_partitions", queue=queue_name) == 2
    c.messageScannerClose(open_sid)

    # Push: a subscriber whose listener fails three times, then takes everything
    out = tmp_path / "out.jsonl"
    start_subscriber(
        gw, queue_name, "s1", "--listener", "tests.subscriber_listeners:FailThrice",
        "--partitions", "0", out=out,
    )  # fmt: skip
    # and one that is never connected: its lag grows with every put
    c.addSubscriber(q, T.TSubscription(name=b"idle", partitions=[T.TSubscribedPartition(1)]))

    def sampled() -> bool:
        s = scrape(port)
        return all(
            ("hqueue_subscriber_lag_messages", (("queue", queue_name), ("subscriber", n))) in s
            for n in ("idle", "s1")
        )

    wait_until(sampled, 20, what="both subscribers in the metrics")
    c.putMessagesWithPid(q, 0, [T.TMessage(topic=b"t", value=b"p")] * 50)
    c.putMessagesWithPid(q, 1, [T.TMessage(topic=b"t", value=b"i")] * 30)

    def delivered() -> bool:
        oks = [line for line in read_jsonl(out) if line["tag"] == "ok"]
        return sum(len(line["messages"]) for line in oks) >= 50

    wait_until(delivered, 20, what="the subscriber to take the 50 messages")

    def pushed() -> dict[Any, float] | None:
        s = scrape(port)
        labels = {"queue": queue_name, "subscriber": "s1"}
        done = (
            value(s, "hqueue_push_delivered_messages_total", **labels) == 50
            and value(s, "hqueue_subscriber_lag_messages", queue=queue_name, subscriber="idle")
            == 30
            and value(s, "hqueue_subscriber_lag_messages", **labels) == 0
        )
        return s if done else None

    s = wait_until(pushed, 20, what="deliveries and lag in the metrics")
    labels = {"queue": queue_name, "subscriber": "s1"}
    assert value(s, "hqueue_push_retries_total", **labels) == 3
    assert value(s, "hqueue_push_delivered_batches_total", **labels) >= 1
    assert value(s, "hqueue_dead_letters_total", **labels) == 0
    idle = {"queue": queue_name, "subscriber": "idle"}
    assert value(s, "hqueue_subscriber_lag_capped", **idle) == 0
    assert value(s, "hqueue_subscriber_lag_seconds", **idle) > 0
    assert value(s, "hqueue_push_delivered_messages_total", **idle) == 0

    # a deleted queue's series disappear (labels stay bounded)
    c.deleteQueue(q)
    s = scrape(port)
    assert not [k for k in s if dict(k[1]).get("queue") == queue_name]
    c.close()


def test_the_block_cache_gauge_fills_with_flushes_and_stays_within_its_flag(
    start_gateway: GatewayFactory, queue_name: str
) -> None:
    """40 MB of puts with 1 MiB log segments: the log's releases flush RocksDB, each flush
    fills the block cache, and the gauge shows it filled up to --block-cache-mb and no more."""
    port = free_port()
    gw = start_gateway(
        "--metrics-port", str(port), "--log-segment-mb", "1", "--block-cache-mb", "8"
    )  # fmt: skip
    c = gw.client()
    q = queue_name.encode()
    c.createQueue(q, 1, 3600, {})
    assert value(scrape(port), "hqueue_block_cache_bytes") < 1 << 20  # nothing flushed yet
    T = hqueue_thrift()
    body = b"x" * 4000
    for _ in range(100):  # 100 x 100 x 4 kB, each put smaller than a log segment
        msgs = [T.TMessage(topic=b"t", value=body + str(j).encode()) for j in range(100)]
        c.putMessagesWithPid(q, 0, msgs)
    wait_until(
        lambda: value(scrape(port), "hqueue_block_cache_bytes") > 4 << 20, 20,
        what="flushes to fill the block cache",
    )  # fmt: skip
    assert value(scrape(port), "hqueue_block_cache_bytes") <= 8 << 20
    c.close()


def test_metrics_and_console_are_off_by_default_and_ports_checked(
    start_gateway: GatewayFactory, tmp_path: Path
) -> None:
    gw = start_gateway()
    assert "serving metrics" not in gw.log() and "serving the console" not in gw.log()
    import subprocess
    import sys

    bad = subprocess.run(
        [sys.executable, "-m", "gateway", "--metrics-port", "70000", "--data-dir",
         str(tmp_path / "x")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--metrics-port must be 0..65535" in bad.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "gateway", "--console-port", "-1", "--stats-interval", "1",
         "--data-dir", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--console-port must be 0..65535" in bad.stderr
