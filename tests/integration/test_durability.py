"""Durability, restarts and TTL, against gateway processes that are killed and restarted."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.helpers import drain, key, msg


def kill_under_producers(
    gw: Any, T: Any, q: bytes, *, producers: int, batch: int, body: int, at_least: int
) -> set[bytes]:
    """Puts from ``producers`` threads until ``at_least`` messages were acknowledged, kills
    the gateway with SIGKILL mid-call and returns what it had acknowledged."""
    acked: list[bytes] = []
    lock = threading.Lock()
    stop = threading.Event()

    def produce(n: int) -> None:
        c = gw.client(timeout=5)
        b = 0
        try:
            while not stop.is_set():
                values = [b"w%d-b%d-m%d-" % (n, b, i) + b"x" * body for i in range(batch)]
                c.putMessages(q, [msg(T, b"t", v) for v in values])
                with lock:
                    acked.extend(values)  # only what the gateway acknowledged
                b += 1
        except Exception:
            pass  # the gateway is killed under us; unacknowledged batches may be lost

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    wait_until(lambda: len(acked) >= at_least, timeout=60, what=f"{at_least} acknowledged messages")
    gw.kill()
    stop.set()
    for t in threads:
        t.join(10)
    with lock:
        return set(acked)


def test_acknowledged_puts_survive_kill_9(start_gateway: Any, T: Any, queue_name: str) -> None:
    gw = start_gateway()
    q = queue_name.encode()
    gw.client().createQueue(q, 4, 3600, {})
    acknowledged = kill_under_producers(gw, T, q, producers=4, batch=100, body=0, at_least=5000)

    again = start_gateway(data_dir=gw.data_dir)
    c = again.client()
    stored = drain(c, c.queueScannerOpen(q, T.TMessageScan()))
    values = {m.value for m in stored}
    missing = acknowledged - values
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
    # ids after the restart continue above every stored id of the partition
    newest = {p: max(key(m) for m in stored if m.partitionID == p) for p in range(4)}
    for p in range(4):
        c.putMessageWithPid(q, p, msg(T, b"t", b"after-restart"))
        last = drain(c, c.messageScannerOpen(q, p, T.TMessageScan(reversed=True)), n=1)[0]
        assert last.value == b"after-restart" and key(last) > newest[p]


@pytest.mark.parametrize("store", ["embedded"], indirect=True)  # the embedded store's own log
def test_acknowledged_puts_survive_kill_9_across_log_segments(
    start_gateway: Any, T: Any, queue_name: str
) -> None:
    """1 MiB log segments and 1 KB messages: the kill lands after tens of segments were
    filled, flushed and reused, with producers mid-call."""
    gw = start_gateway("--log-segment-mb", "1")
    q = queue_name.encode()
    gw.client().createQueue(q, 3, 3600, {})
    acknowledged = kill_under_producers(gw, T, q, producers=3, batch=50, body=1000, at_least=40_000)
    # the active one, LOG_SEGMENTS_KEPT (6) full ones, at most 2 spares and one being made
    segments = list((gw.data_dir / "wal").glob("segment-*.log"))
    assert 1 <= len(segments) <= 10, f"the log kept {len(segments)} segments"

    again = start_gateway("--log-segment-mb", "1", data_dir=gw.data_dir)
    c = again.client()
    values = {m.value for m in drain(c, c.queueScannerOpen(q, T.TMessageScan()))}
    missing = acknowledged - values
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
    assert "replayed" in again.log()


def test_clean_restart_keeps_queues_and_ids(start_gateway: Any, T: Any, queue_name: str) -> None:
    gw = start_gateway()
    q = queue_name.encode()
    c = gw.client()
    c.createQueue(q, 2, 3600, {"hbase.hqueue.partitionsPerRegion": "2"})
    c.putMessagesWithPid(q, 0, [msg(T, b"t", b"%d" % i) for i in range(40_000)])
    c.disableQueue(q)
    assert gw.stop() == 0

    gw2 = start_gateway(data_dir=gw.data_dir)
    c = gw2.client()
    info = next(i for i in c.listQueues() if i.name == q)
    assert (info.partitionCount, info.enabled, info.config) == (
        2,
        False,
        {"hbase.hqueue.partitionsPerRegion": "2"},
    )
    c.enableQueue(q)
    stored = drain(c, c.messageScannerOpen(q, 0, T.TMessageScan()), n=10_000)
    assert [m.value for m in stored] == [b"%d" % i for i in range(40_000)]
    before = key(stored[-1])
    c.putMessageWithPid(q, 0, msg(T, b"t", b"next"))
    newest = drain(c, c.messageScannerOpen(q, 0, T.TMessageScan(reversed=True)), n=1)[0]
    assert newest.value == b"next" and key(newest) > before


def test_expired_messages_are_never_returned(start_gateway: Any, T: Any, queue_name: str) -> None:
    gw = start_gateway("--ttl-sweep-interval", "3600")  # filtering alone, no deletion yet
    c = gw.client()
    q = queue_name.encode()
    c.createQueue(q, 2, 1, {})
    c.putMessagesWithPid(q, 1, [msg(T, b"t", b"old")] * 10)

    def gone() -> bool:
        return drain(c, c.queueScannerOpen(q, T.TMessageScan())) == []

    wait_until(gone, timeout=10, interval=0.1, what="expiry after the 1 s TTL")
    assert drain(c, c.messageScannerOpen(q, 1, T.TMessageScan(reversed=True))) == []
    c.putMessageWithPid(q, 1, msg(T, b"t", b"fresh"))
    assert [m.value for m in drain(c, c.queueScannerOpen(q, T.TMessageScan()))] == [b"fresh"]


@pytest.mark.parametrize("store", ["embedded"], indirect=True)  # HBase: test_hbase_store
def test_expired_messages_are_deleted_from_disk(
    start_gateway: Any, T: Any, queue_name: str
) -> None:
    gw = start_gateway("--ttl-sweep-interval", "0.2")
    c = gw.client()
    q = queue_name.encode()
    c.createQueue(q, 3, 1, {})
    for p in range(3):
        c.putMessagesWithPid(q, p, [msg(T, b"t", b"x" * 1000)] * 500)
    wait_until(lambda: _swept(gw.log()), timeout=15, what="a TTL sweep of the expired rows")
    c.putMessageWithPid(q, 2, msg(T, b"t", b"keep"))  # fresh: the sweeps must leave it alone
    c.close()
    assert gw.stop() == 0

    from rocksdict import Rdict

    path = str(gw.data_dir / "rocksdb")
    families = [n for n in Rdict.list_cf(path) if n.startswith(queue_name + "@")]
    assert len(families) == 3  # one per partition (region)
    db = Rdict(path)  # opens every column family as stored
    try:
        entries = [kv for f in families for kv in db.get_column_family(f).items()]
    finally:
        db.close()
    from gateway.fast import scan_records

    # one entry, a put record (gateway/store/embedded/records.py) of the one fresh message
    rows: list = []
    scan_records(iter(entries), None, b"", b"\xff", None, 100, 100, rows, 1 << 62, False)
    assert len(entries) == 1 and [r[2:] for r in rows] == [(b"t", b"keep")]


def _swept(log: str) -> bool:
    return "TTL sweep removed" in log
