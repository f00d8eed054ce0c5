"""Puts pipelined on one connection (gateway/pipeline.py), against gateway processes: answers
in request order, ids in request order, shared log syncs, and the fault stories (kill -9, a
paused gateway, a client that goes away mid-window)."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import threading
import time
import urllib.request
from typing import Any

import pytest
from hqueue import Connection, Producer
from thriftpy2.protocol.binary import TBinaryProtocol

from tests.conftest import free_port, wait_until
from tests.helpers import SocketReader, call_bytes, read_answer, scan_queue


@pytest.fixture
def store() -> str:
    return "embedded"  # the store whose durability is a wait of its own (the log's sync)


def puts(T: Any, queue: str, count: int, first_seqid: int = 1) -> list[bytes]:
    return [
        call_bytes(T, "putMessagesWithPid", first_seqid + i, queueName=queue, partitionID=0,
                   tMessages=[T.TMessage(topic=b"t", value=b"p%d-%d" % (i, j)) for j in range(20)])
        for i in range(count)
    ]  # fmt: skip


def wal_syncs(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.search(r"^hqueue_wal_syncs(?:_total)? (\S+)$", text, re.MULTILINE)
    assert found, "no hqueue_wal_syncs in /metrics"
    return int(float(found.group(1)))


def test_answers_and_ids_keep_the_order_of_the_requests(
    start_gateway: Any, T: Any, queue_name: str
) -> None:
    """50 puts sent in one write, then a bad put, more puts and a scan: every answer comes in
    request order, the bad one fails alone in its turn, the partition holds the messages in
    request order, and the scan (a call of another kind) sees every put before it."""
    gw = start_gateway()
    c = gw.client()
    c.createQueue(queue_name, 2, 3600, {})
    data = puts(T, queue_name, 50)
    bad = call_bytes(T, "putMessagesWithPid", 51, queueName=queue_name, partitionID=9,
                     tMessages=[T.TMessage(topic=b"t", value=b"x")])  # fmt: skip
    after = puts(T, queue_name, 10, first_seqid=52)
    scan = call_bytes(T, "messageScannerOpen", 62, queueName=queue_name, partitionID=0,
                      messageScan=T.TMessageScan())  # fmt: skip
    with socket.create_connection((gw.host, gw.port), timeout=30) as sock:
        sock.sendall(b"".join([*data, bad, *after, scan]))
        proto = TBinaryProtocol(SocketReader(sock))
        answers = [read_answer(T, proto) for _ in range(62)]
        scanner = answers[61][2].success  # owned by this connection: read it here
        sock.sendall(call_bytes(T, "messageScannerGetList", 63, id=scanner, nbMessages=5000))
        values = [m.value for m in read_answer(T, proto)[2].success]
    assert [seqid for _, seqid, _ in answers] == list(range(1, 63))
    for name, seqid, result in answers[:61]:
        assert name == "putMessagesWithPid"
        if seqid == 51:
            assert result.ia is not None and "partitionID" in result.ia.message
        else:
            assert result.ia is None and result.io is None, (seqid, result)
    expected = [b"p%d-%d" % (i, j) for i in range(50) for j in range(20)]
    expected += [b"p%d-%d" % (i, j) for i in range(10) for j in range(20)]
    assert values == expected


def test_a_connections_puts_share_log_syncs(start_gateway: Any, T: Any, queue_name: str) -> None:
    """The point of the pipeline: 60 puts sent at once on one connection are written while
    earlier ones sync, so they take fewer syncs than puts; with --put-window 1 each put
    waits for a sync of its own before the next is read."""
    counts = {}
    for window in (1, 16):
        metrics = free_port()
        gw = start_gateway("--put-window", str(window), "--metrics-port", str(metrics))
        gw.client().createQueue(queue_name, 1, 3600, {})
        before = wal_syncs(metrics)
        with socket.create_connection((gw.host, gw.port), timeout=30) as sock:
            sock.sendall(b"".join(puts(T, queue_name, 60)))
            proto = TBinaryProtocol(SocketReader(sock))
            assert [read_answer(T, proto)[1] for _ in range(60)] == list(range(1, 61))
        counts[window] = wal_syncs(metrics) - before
        gw.stop()
    print(f"log syncs for 60 puts on one connection: {counts}")
    assert counts[1] >= 60, counts
    assert counts[16] <= 30, counts


def test_acknowledged_pipelined_puts_survive_kill_9(
    start_gateway: Any, T: Any, queue_name: str
) -> None:
    """A Producer keeps 8 puts in flight on one connection; the gateway is killed with
    SIGKILL mid-window; every put it acknowledged is there after the restart, in order."""
    gw = start_gateway()
    Connection(gw.host, gw.port).create_queue(queue_name, partitions=1, ttl_seconds=3600)
    acked: list[int] = []
    lock = threading.Lock()

    def delivered(batch: int) -> Any:
        def on_done(future: Any) -> None:
            if future.exception() is None:
                with lock:
                    acked.append(batch)

        return on_done

    p = Producer(gw.host, gw.port, window=8, timeout=10)
    batch = 0
    deadline = time.monotonic() + 60
    while True:
        with lock:
            if len(acked) >= 300:
                break
        assert time.monotonic() < deadline, f"only {len(acked)} puts acknowledged in 60 s"
        future = p.put_many(queue_name, [(b"t", b"b%d-%d" % (batch, i)) for i in range(100)],
                            partition=0)  # fmt: skip
        future.add_done_callback(delivered(batch))
        batch += 1
    gw.kill()
    with contextlib.suppress(Exception):  # what was in flight fails: not what is checked here
        p.close()

    again = start_gateway(data_dir=gw.data_dir)
    stored = [m.value for m in scan_queue(again.client(), queue_name)]
    present = set(stored)
    with lock:
        missing = [b for b in acked if b"b%d-0" % b not in present]
    assert not missing, f"{len(missing)} acknowledged puts lost, e.g. batch {missing[:3]}"
    # the partition keeps the order the puts were sent in, across the window
    firsts = [int(v[1:].split(b"-")[0]) for v in stored if v.endswith(b"-0")]
    assert firsts == sorted(firsts)
    assert len(stored) == 100 * len(firsts)  # a put is there whole or not at all


def test_a_paused_gateway_answers_the_whole_window_when_it_resumes(
    start_gateway: Any, T: Any, queue_name: str
) -> None:
    """SIGSTOP with puts in flight on one connection: nothing is answered while it is
    stopped; after SIGCONT every put is answered, in order, and stored."""
    gw = start_gateway()
    gw.client().createQueue(queue_name, 1, 3600, {})
    with socket.create_connection((gw.host, gw.port), timeout=30) as sock:
        gw.proc.send_signal(signal.SIGSTOP)
        try:
            sock.sendall(b"".join(puts(T, queue_name, 40)))
            sock.settimeout(1.0)
            with pytest.raises(socket.timeout):
                sock.recv(1)  # a stopped gateway answers nothing
        finally:
            gw.proc.send_signal(signal.SIGCONT)
        sock.settimeout(30)
        proto = TBinaryProtocol(SocketReader(sock))
        assert [read_answer(T, proto)[1] for _ in range(40)] == list(range(1, 41))
    assert len(scan_queue(gw.client(), queue_name)) == 40 * 20


def test_a_client_that_leaves_mid_window_does_not_hurt_the_others(
    start_gateway: Any, T: Any, queue_name: str
) -> None:
    """A client sends 100 puts and closes its socket without reading an answer: the puts the
    gateway read are written whole, and the gateway keeps serving everyone else."""
    gw = start_gateway()
    c = gw.client()
    c.createQueue(queue_name, 1, 3600, {})
    for _ in range(5):
        with socket.create_connection((gw.host, gw.port), timeout=30) as sock:
            sock.sendall(b"".join(puts(T, queue_name, 100)))
    c.putMessagesWithPid(queue_name, 0, [T.TMessage(topic=b"t", value=b"last")])
    wait_until(lambda: "Traceback" not in gw.log() and len(scan_queue(c, queue_name)) > 1, 10,
               what="the first client's puts")  # fmt: skip
    stored = [m.value for m in scan_queue(c, queue_name)]
    assert b"last" in stored
    assert (len(stored) - 1) % 20 == 0  # whole puts only
    assert "Traceback" not in gw.log() and "internal error" not in gw.log()
