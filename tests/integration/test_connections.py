"""The gateway's connections, many and quiet and cut: idle clients stay connected, concurrent
clients get strictly increasing ids, a client gone mid-request or mid-response costs nobody
else anything, and SIGTERM with idle clients exits cleanly.

Split from test_robustness.py (hostile requests); the raw-socket helpers are tests/rawwire.py.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from typing import Any

import pytest

from tests.helpers import scan_queue
from tests.rawwire import (
    MB,
    RSS_LIMIT,
    STOP,
    T_I32,
    Pinger,
    RssPeak,
    b_field,
    b_i32,
    b_msg,
    connect,
    put_messages_prefix,
    put_messages_request,
    read_reply,
    reset,
    tmessage,
    warm,
)

# the request reader and the connections: runs over the embedded store only
pytestmark = pytest.mark.wire


# -- idle and many clients ----------------------------------------------------------------


def test_idle_connection_stays_open(gateway: Any) -> None:
    """No server-side idle timeout: a quiet client is still connected seconds later."""
    c = gateway.client()
    c.createQueue("q", 1, 60, {})
    raw = connect(gateway)
    # The one deliberate sleep of this file: idleness is the thing under test, and there is
    # no event to poll for -- the gateway must simply do nothing for a while.
    time.sleep(4)
    c.putMessage("q", tmessage(b"after idle"))
    assert [m.value for m in scan_queue(c, "q")] == [b"after idle"]
    raw.sendall(b_msg("listQueues", seqid=7) + STOP)
    state, data = read_reply(raw)
    assert state == "reply" and b"listQueues" in data
    raw.close()


def test_many_concurrent_clients_get_strictly_increasing_ids(gateway: Any) -> None:
    """50 clients on their own threads put and scan at once; every id is unique and strictly
    increasing per partition, and each client's messages keep their order."""
    n_clients, rounds, partitions = 50, 8, 4
    admin = gateway.client()
    admin.createQueue("q", partitions, 3600, {})
    barrier = threading.Barrier(n_clients)
    errors: list[str] = []

    def worker(i: int) -> None:
        try:
            c = gateway.client(timeout=30)
            own = i % partitions
            barrier.wait(timeout=30)
            for r in range(rounds):
                c.putMessages(
                    "q", [tmessage(b"%d:%d:%d" % (i, r, k), b"c%d" % i) for k in range(5)]
                )
                c.putMessagesWithPid(
                    "q", own, [tmessage(b"%d:%d:p%d" % (i, r, k), b"c%d" % i) for k in range(3)]
                )
                c.putMessage("q", tmessage(b"%d:%d:s" % (i, r), b"c%d" % i, partition=own))
            # a scan of its own partition, concurrent with other clients' puts
            sid = c.messageScannerOpen("q", own, None)
            seen = []
            while batch := c.messageScannerGetList(sid, 37):
                seen.extend(batch)
            ids = [(m.id.timestamp, m.id.sequenceID) for m in seen]
            if any(a >= b for a, b in itertools.pairwise(ids)):
                errors.append(f"client {i}: ids not strictly increasing in its scan")
            mine = [m.value for m in seen if m.topic == b"c%d" % i and b":p" in m.value]
            if mine != [b"%d:%d:p%d" % (i, r, k) for r in range(rounds) for k in range(3)]:
                errors.append(f"client {i}: its pid-messages out of order or missing")
            c.close()
        except Exception as exc:
            errors.append(f"client {i}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:10]

    got = scan_queue(admin, "q")
    assert len(got) == n_clients * rounds * 9
    keys = [(m.partitionID, m.id.timestamp, m.id.sequenceID) for m in got]
    assert len(set(keys)) == len(keys), "duplicate MessageIDs"
    by_pid: dict[int, list[Any]] = {}
    for m in got:
        by_pid.setdefault(m.partitionID, []).append(m)
    for pid, ms in by_pid.items():
        ids = [(m.id.timestamp, m.id.sequenceID) for m in ms]
        assert ids == sorted(ids) and len(set(ids)) == len(ids), f"partition {pid}"
        # each client's messages on this partition appear in the order it put them
        for i in range(n_clients):
            vals = [m.value for m in ms if m.topic == b"c%d" % i]
            order = [_order(v) for v in vals]
            assert order == sorted(order), (pid, i, vals)
    # the merged scan is in MessageID order
    merged = [(m.id.timestamp, m.id.sequenceID) for m in got]
    assert merged == sorted(merged)


def _order(value: bytes) -> tuple[int, int, int]:
    """Put order within one client: round, then batch, pid-batch, single."""
    _, r, k = value.split(b":")
    if k == b"s":
        return int(r), 2, 0
    if k.startswith(b"p"):
        return int(r), 1, int(k[1:])
    return int(r), 0, int(k)


# -- disconnects --------------------------------------------------------------------------


def test_disconnect_mid_request(gateway: Any) -> None:
    """Peers vanishing halfway through a request (FIN or RST) leave nothing stored."""
    healthy = warm(gateway)
    request = put_messages_request([b"v" * 100_000, b"w" * 100_000])
    with Pinger(gateway) as pinger:
        for cut in (1, 3, 10, 30, 1000, len(request) // 2, len(request) - 1):
            for hard in (False, True):
                s = connect(gateway)
                s.sendall(request[:cut])
                reset(s) if hard else s.close()
        assert healthy.listQueues()
    assert not pinger.problems()
    assert scan_queue(healthy, "q") == []
    healthy.putMessages("q", [tmessage(b"intact")])
    assert [m.value for m in scan_queue(healthy, "q")] == [b"intact"]


def test_disconnect_mid_response(gateway: Any) -> None:
    """A huge messageScannerGetList whose caller hangs up while the reply is being written."""
    healthy = warm(gateway)
    big = [bytes([i % 251]) * 100_000 for i in range(200)]  # 20 MB in the queue
    for k in range(0, len(big), 20):
        healthy.putMessages("q", [tmessage(v) for v in big[k : k + 20]])
    with Pinger(gateway) as pinger, RssPeak(gateway.pid) as rss:
        for hard in (True, False, True, False):
            sid = healthy.queueScannerOpen("q", None)
            s = connect(gateway)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(
                b_msg("messageScannerGetList")
                + b_field(T_I32, 1) + b_i32(sid) + b_field(T_I32, 2) + b_i32(100_000)
                + STOP
            )  # fmt: skip
            assert s.recv(1000)  # the reply has started
            reset(s) if hard else s.close()
        assert healthy.listQueues()
    assert not pinger.problems()
    assert rss.growth < 4 * RSS_LIMIT, f"RSS grew by {rss.growth / MB:.0f} MB"
    got = scan_queue(healthy, "q", 50)
    assert [m.value for m in got] == big
    assert gateway.proc.poll() is None


# -- shutdown -----------------------------------------------------------------------------


def test_sigterm_with_idle_clients_exits_cleanly(start_gateway: Any) -> None:
    """SIGTERM while clients are connected (idle, or halfway through a request): exit code 0,
    promptly, and what was acknowledged is there after a restart."""
    gw = start_gateway()
    clients = [gw.client() for _ in range(5)]
    clients[0].createQueue("q", 2, 3600, {})
    for i, c in enumerate(clients):
        c.putMessages("q", [tmessage(b"m%d" % i)])
    raw_idle = connect(gw)
    raw_partial = connect(gw)
    raw_partial.sendall(put_messages_prefix()[:20])

    t0 = time.monotonic()
    assert gw.stop(timeout=15) == 0
    assert time.monotonic() - t0 < 5.0, f"shutdown took {time.monotonic() - t0:.1f} s"
    for s in (raw_idle, raw_partial):
        assert read_reply(s)[0] == "closed"
        s.close()
    with pytest.raises(Exception):  # noqa: B017 - any transport error: the server is gone
        clients[1].listQueues()
    assert "stopped" in gw.log()

    again = start_gateway(data_dir=gw.data_dir)
    c = again.client()
    assert sorted(m.value for m in scan_queue(c, "q")) == [b"m%d" % i for i in range(5)]
