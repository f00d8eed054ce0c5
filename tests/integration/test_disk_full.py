"""A full disk: clear errors, nothing half-done, and recovery without a restart.

Each test mounts a small tmpfs of its own (root is needed; the test fails, not skips, without
it), runs a gateway whose data dir is on it, and unmounts it at the end. A filler file takes
the space the test wants gone and is removed to free it again. Figures are printed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from hqueue import Connection, Producer, ServerError
from thriftpy2.protocol.binary import TBinaryProtocol

from tests.conftest import wait_until
from tests.helpers import SocketReader, call_bytes, read_answer, scan_queue
from tests.integration.conftest import frozen

MiB = 1 << 20


@pytest.fixture
def store() -> str:
    return "embedded"  # the disk under test is the embedded store's


@pytest.fixture
def small_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A 64 MiB tmpfs (``@pytest.mark.disk_mb(n)``: n MiB); ask for it before
    ``start_gateway`` so that gateways stop first."""
    marker = request.node.get_closest_marker("disk_mb")
    size = marker.args[0] if marker else 64
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.fail(f"these tests mount a tmpfs and need root: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        for _ in range(50):  # the gateway may still be closing its files
            if subprocess.run(["umount", str(mnt)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave: int) -> Path:
    """A file taking all the free space of ``path``'s disk but ``leave`` bytes."""
    filler = path / "filler"
    with open(filler, "ab") as f:
        block = b"\0" * MiB
        while free_bytes(path) > leave + MiB:
            f.write(block)
            f.flush()
        rest = free_bytes(path) - leave
        if rest > 0:
            f.write(b"\0" * rest)
    return filler


def _msg(T: Any, value: bytes) -> Any:
    return T.TMessage(topic=b"t", value=value)


def put_again(c: Any, T: Any, after: str, pause: float) -> float:
    """Puts one message until the gateway takes it (at most 10 s, else the test fails saying
    ``after`` what); returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        try:
            c.putMessages("q", [_msg(T, b"after")])
            return time.monotonic() - t0
        except T.IOError as exc:
            if time.monotonic() - t0 > 10:
                raise AssertionError(f"puts still fail 10 s after {after}: {exc}") from None
            time.sleep(pause)


def test_puts_recover_once_space_is_freed(small_disk: Path, start_gateway: Any, T: Any) -> None:
    """Puts on a full disk fail with an IOError that says so; once space is freed they succeed
    again within seconds, without a restart, and everything acknowledged is there."""
    # 1 MiB log segments: RocksDB flushes its memtables while the disk is full, too
    gw = start_gateway("--log-segment-mb", "1", data_dir=small_disk / "data")
    c = gw.client()
    c.createQueue("q", 2, 3600, {})
    filler = fill(small_disk, 8 * MiB)
    acked, errors = [], []
    for i in range(24):
        value = bytes([i]) * MiB
        try:
            c.putMessages("q", [_msg(T, value)])
            acked.append(value)
        except T.IOError as exc:
            errors.append(exc.message)
    print(f"full disk: {len(acked)} puts of 1 MiB acknowledged, {len(errors)} refused")
    assert errors, "the disk never filled"
    filler.unlink()
    took = put_again(c, T, "space was freed", 0.2)
    print(f"puts succeeded again {took:.2f} s after space was freed")
    got = sorted(m.value for m in scan_queue(c, "q", 4))
    assert got == sorted([*acked, b"after"])
    assert all("disk is full" in e for e in errors), errors[:3]


def test_pipelined_puts_on_a_full_disk_fail_in_their_turn(
    small_disk: Path, start_gateway: Any, T: Any
) -> None:
    """24 puts of 1 MiB sent at once on one connection (gateway/pipeline.py) onto a disk
    with 8 MiB left: every answer comes in request order, each a success or an IOError that
    says the disk is full; the same connection takes puts again once space is freed, and
    everything acknowledged is there."""
    gw = start_gateway("--log-segment-mb", "1", data_dir=small_disk / "data")
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    filler = fill(small_disk, 8 * MiB)
    values = [bytes([i]) * MiB for i in range(24)]
    calls = [
        call_bytes(T, "putMessagesWithPid", i + 1, queueName="q", partitionID=0,
                   tMessages=[_msg(T, v)])
        for i, v in enumerate(values)
    ]  # fmt: skip
    with socket.create_connection((gw.host, gw.port), timeout=60) as sock:
        sock.sendall(b"".join(calls))
        proto = TBinaryProtocol(SocketReader(sock))
        answers = [read_answer(T, proto) for _ in calls]
        assert [seqid for _, seqid, _ in answers] == list(range(1, 25))
        acked = [v for v, (_, _, r) in zip(values, answers, strict=True) if r.io is None]
        errors = [r.io.message for _, _, r in answers if r.io is not None]
        print(f"pipelined onto a full disk: {len(acked)} acknowledged, {len(errors)} refused")
        assert errors, "the disk never filled"
        assert all("disk is full" in e for e in errors), errors[:3]
        filler.unlink()
        deadline = time.monotonic() + 10
        while True:  # the same connection, once space is back
            sock.sendall(call_bytes(T, "putMessagesWithPid", 99, queueName="q", partitionID=0,
                                    tMessages=[_msg(T, b"after")]))  # fmt: skip
            if read_answer(T, proto)[2].io is None:
                break
            assert time.monotonic() < deadline, "puts still fail 10 s after space was freed"
            time.sleep(0.2)
    got = sorted(m.value for m in scan_queue(c, "q", 4))
    assert got == sorted([*acked, b"after"])


@pytest.mark.disk_mb(160)
def test_a_failed_flush_does_not_wedge_the_store(
    small_disk: Path, start_gateway: Any, T: Any
) -> None:
    """A memtable flush needs room for the whole memtable, more than the 8 MiB reserve: when it
    fails for want of space RocksDB refuses every write from then on, and puts failed until the
    gateway restarted, however much space was freed. The store now reopens RocksDB by itself
    once there is room (its own log keeps what was acknowledged), within seconds."""
    gw = start_gateway(data_dir=small_disk / "data")  # 160 MiB free: 10 MiB log segments
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    acked: list[bytes] = []
    for i in range(24):  # 24 MiB in the memtable, in fewer segments than trigger a flush
        value = b"%3d" % i + bytes(MiB)
        c.putMessages("q", [_msg(T, value)])
        acked.append(value)
    filler = fill(small_disk, 16 * MiB)  # above the reserve, too little for that flush
    refused = 0
    for i in range(24, 40):  # segments shrink to 1 MiB, close, and a flush fails
        value = b"%3d" % i + bytes(MiB)
        try:
            c.putMessages("q", [_msg(T, value)])
            acked.append(value)
        except T.IOError as exc:
            assert "disk is full" in exc.message, exc.message
            refused += 1
    wait_until(lambda: "RocksDB stopped accepting writes" in gw.log(), 10, what="a flush to fail")
    filler.unlink()
    took = put_again(c, T, "space was freed", 0.1)
    print(
        f"a flush failed on the full disk ({len(acked)} puts of 1 MiB acknowledged, {refused} "
        f"refused); puts succeeded again {took:.2f} s after space was freed, "
        "without a restart"
    )
    assert refused
    got = sorted(m.value for m in scan_queue(c, "q", 8))
    assert got == sorted([*acked, b"after"])


def test_a_failed_truncate_leaves_the_queue_as_it_was(
    small_disk: Path, start_gateway: Any, T: Any
) -> None:
    """truncateQueue that fails on a full disk (RocksDB cannot write its OPTIONS file) left the
    queue answering IllegalArgument for good; now it is all or nothing."""
    gw = start_gateway(data_dir=small_disk / "data")
    c = gw.client()
    c.createQueue("q", 4, 3600, {})
    c.putMessages("q", [_msg(T, b"kept %d" % i) for i in range(10)])
    filler = fill(small_disk, 0)
    with pytest.raises(T.IOError) as info:
        c.truncateQueue("q")
    print(f"truncate on a full disk: {info.value.message[:160]!r}")
    filler.unlink()
    assert sorted(m.value for m in scan_queue(c, "q")) == [b"kept %d" % i for i in range(10)]
    assert "disk is full" in info.value.message
    c.putMessages("q", [_msg(T, b"more")])
    c.truncateQueue("q")  # with space, it works
    assert scan_queue(c, "q") == []
    gw.stop()
    again = start_gateway(data_dir=small_disk / "data")  # and the store opens after it
    assert [q.name for q in again.client().listQueues()] == [b"q"]


def test_a_nearly_full_disk_is_not_written_many_times_over(
    small_disk: Path, start_gateway: Any, T: Any
) -> None:
    """40 MiB free and 24 MiB of puts: the log sizes its segments to the free space it finds
    (and logs it), so the gateway writes a few times the data at most (it wrote ~50x with
    64 MiB segments and zero-filled spares that kept failing)."""
    fill(small_disk, 40 * MiB)
    gw = start_gateway(data_dir=small_disk / "data")
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    proc = psutil.Process(gw.pid)
    before = proc.io_counters().write_chars
    ok = 0
    for i in range(24):
        try:
            c.putMessages("q", [_msg(T, bytes([i]) * MiB)])
            ok += 1
        except T.IOError as exc:
            assert "disk is full" in exc.message, exc.message
    written = proc.io_counters().write_chars - before
    print(
        f"40 MiB free: {ok} of 24 puts of 1 MiB acknowledged; the gateway wrote "
        f"{written / MiB:.0f} MiB ({written / (24 * MiB):.1f}x the data)"
    )
    assert "write-ahead log:" in gw.log() and "segments of" in gw.log()
    assert written < 4 * 24 * MiB
    # 8 MiB stay in reserve, the log keeps up to ~9 segments and RocksDB flushes: most fit
    assert ok >= 16


def test_metadata_writes_on_a_full_disk_do_not_wedge_the_store(
    small_disk: Path, start_gateway: Any, T: Any
) -> None:
    """A write to RocksDB's own log (queue metadata, subscriber records) that failed for want of
    space left RocksDB refusing every write, puts included, until a restart, however much space
    was freed. The store now stops writing while less than its reserve is free, except to
    delete (a queue can be deleted on a full disk), and puts work again once there is room."""
    gw = start_gateway(data_dir=small_disk / "data")
    c = gw.client()
    c.createQueue("q", 2, 3600, {})
    c.createQueue("big", 1, 3600, {})
    for _ in range(12):
        c.putMessages("big", [_msg(T, b"b" * MiB)])
    filler = fill(small_disk, 0)
    refused = 0
    for i in range(40):  # small records go through RocksDB's own log
        try:
            c.addSubscriber("q", T.TSubscription(name=b"s%d" % i, topics=[b"x" * 200] * 20))
        except T.IOError as exc:
            assert "disk is full" in exc.message, exc.message
            refused += 1
    with pytest.raises(T.IOError):
        c.putMessages("q", [_msg(T, b"no room")])
    filler.unlink()
    filler = fill(small_disk, 2 * MiB)  # below the reserve: deleting still works
    c.deleteQueue("big")
    filler.unlink()  # (the deleted queue's rows were still in the log: it frees little now)
    took = put_again(c, T, "a delete", 0.2)
    print(
        f"{refused} of 40 addSubscriber refused on the full disk; puts worked again "
        f"{took:.2f} s after space was freed"
    )
    assert refused == 40
    c.createQueue("again", 1, 60, {})
    assert [m.value for m in scan_queue(c, "q")] == [b"after"]


def test_producer_puts_joined_on_a_full_disk_all_fail_then_go_again(
    small_disk: Path, start_gateway: Any
) -> None:
    """hqueue.Producer joins the puts that wait for room in its window into one call: on a
    full disk that call is refused, and each put in it fails with the gateway's error (none
    stored); once space is freed the producer's puts go through again."""
    gw = start_gateway(data_dir=small_disk / "data")
    q = Connection(gw.host, gw.port, timeout=30).create_queue("q", 1, 3600)
    p = Producer(gw.host, gw.port, window=1, timeout=30, linger=0)
    assert p.put_many("q", [(b"t", b"before")], 0).result(timeout=30) == 1
    filler = fill(small_disk, 4 * MiB)  # under the 8 MiB the store keeps free
    sent = p.calls
    with frozen(gw.proc):  # the first put in flight, the others wait and join
        futures = [p.put_many("q", [(b"t", b"%d" % i)] * 3, 0) for i in range(4)]
    for f in futures:
        with pytest.raises(ServerError, match="disk is full"):
            f.result(timeout=30)
    assert p.calls - sent == 2
    filler.unlink()
    deadline = time.monotonic() + 10
    while True:
        try:
            p.put_many("q", [(b"t", b"after")], 0).result(timeout=30)
            break
        except ServerError:
            assert time.monotonic() < deadline, "puts still fail 10 s after space was freed"
            time.sleep(0.2)
    assert [m.value for m in q.scan()] == [b"before", b"after"]
    p.close(timeout=30)
    q.connection.close()
