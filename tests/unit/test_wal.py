"""The embedded store's write-ahead log: records, recovery, segment reuse, the sync thread."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import rowkey
from gateway.fast import Syncer, put_wal_cells, wal_cells
from gateway.rowkey import MessageId
from gateway.store import wal as wal_module
from gateway.store.wal import MAX_SPARES, LogError, WriteAheadLog

ROOT = Path(__file__).resolve().parents[2]


@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=40),
            st.binary(min_size=1, max_size=255),
            st.binary(max_size=300),
        ),
        max_size=30,
    )
)
def test_cells_put_topic_length_topic_value_under_each_key(rows: list) -> None:
    keys, topics, values = (
        (list(column) for column in zip(*rows, strict=True)) if rows else ([],) * 3
    )
    cells = wal_cells(keys, topics, values)
    handle = object()
    calls: list[tuple[bytes, bytes, object]] = []
    assert put_wal_cells(lambda k, c, h: calls.append((k, c, h)), handle, cells) == len(rows)
    assert calls == [(k, rowkey.encode_cell(t, v), handle) for k, t, v in rows]
    assert [rowkey.decode_cell(c) for _, c, _ in calls] == [(t, v) for _, t, v in rows]


def test_cells_refuse_bad_rows_and_malformed_bytes_and_pass_errors_on() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        wal_cells([b"k"], [b"t", b"u"], [b"v"])
    with pytest.raises(TypeError, match="at most 255"):
        wal_cells([b"k"], [b"t" * 256], [b"v"])
    with pytest.raises(TypeError):
        wal_cells([b"k"], ["t"], [b"v"])
    good = wal_cells([b"key"], [b"t"], [b"value"])

    def put(k: bytes, c: bytes, h: object) -> None:
        pass

    for bad in (good[:-1], good[:3], good + b"\x05"):
        with pytest.raises(ValueError, match="malformed"):
            put_wal_cells(put, None, bad)

    def failing(k: bytes, c: bytes, h: object) -> None:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        put_wal_cells(failing, None, good)


def records(n: int, start: int = 0, size: int = 1000) -> list[list[bytes]]:
    return [[b"r%06d:" % i, b"x" * size] for i in range(start, start + n)]


def reopen(path: Path, segment_bytes: int = 4096) -> tuple[WriteAheadLog, list[bytes]]:
    wal = WriteAheadLog(path, segment_bytes)
    replay = [payload for _, payload in wal.recover()]
    wal.start()
    return wal, replay


def test_records_come_back_in_order_after_a_crash(tmp_path: Path) -> None:
    wal, replay = reopen(tmp_path)
    assert replay == []
    for parts in records(100):  # 3 to a segment of 4 KiB
        wal.append(parts)
    assert len(list(tmp_path.glob("segment-*.log"))) == 34
    # no close, no checkpoint: as after kill -9
    again, replay = reopen(tmp_path)
    assert replay == [b"".join(parts) for parts in records(100)]
    # start() checkpointed those (the store has flushed them): the next crash replays only
    # what came after, although the old records are still in the files being reused
    for parts in records(5, start=100):
        again.append(parts)
    _, replay = reopen(tmp_path)
    assert replay == [b"".join(parts) for parts in records(5, start=100)]


def test_a_torn_tail_ends_the_replay(tmp_path: Path) -> None:
    wal, _ = reopen(tmp_path, segment_bytes=1 << 20)
    for parts in records(10):
        wal.append(parts)
    segment = next(tmp_path.glob("segment-*.log"))
    data = bytearray(segment.read_bytes())
    record = (len(data)) // 10
    data[record * 7 + 30] ^= 0xFF  # the 8th record's payload: its checksum fails
    segment.write_bytes(bytes(data))
    _, replay = reopen(tmp_path, segment_bytes=1 << 20)
    assert replay == [b"".join(parts) for parts in records(7)]


def test_released_segments_are_reused_and_their_old_records_never_replayed(
    tmp_path: Path,
) -> None:
    wal, _ = reopen(tmp_path)
    for parts in records(200):
        lsn = wal.append(parts)
        if lsn is not None:
            wal.write_checkpoint(lsn)  # as the store does once the families are flushed
            wal.release(lsn)
    # few files, all rewritten over and over
    assert len(list(tmp_path.glob("segment-*.log"))) <= MAX_SPARES + 2
    last_checkpoint = wal.checkpoint_lsn
    assert last_checkpoint > 150
    _, replay = reopen(tmp_path)
    assert replay == [b"".join(parts) for parts in records(200)[last_checkpoint:]]


def test_records_after_a_missing_one_are_ignored(tmp_path: Path) -> None:
    wal, _ = reopen(tmp_path)
    for parts in records(60):
        wal.append(parts)
    segments = sorted(tmp_path.glob("segment-*.log"))
    assert len(segments) > 3
    first = len(wal_module._records(segments[0], wal.epoch))
    segments[1].write_bytes(b"")  # as if its records never reached the disk
    again, replay = reopen(tmp_path)
    assert replay == [b"".join(parts) for parts in records(first)]
    # records written later never pick up what lay past the gap, although their LSNs follow
    # on from the new ones (the epoch tells them apart)
    for parts in records(3, start=1000):
        again.append(parts)
    _, replay = reopen(tmp_path)
    assert replay == [b"".join(parts) for parts in records(3, start=1000)]


def test_a_damaged_checkpoint_is_an_error_naming_the_file(tmp_path: Path) -> None:
    reopen(tmp_path)
    (tmp_path / "checkpoint").write_bytes(b"\x00" * 5)
    with pytest.raises(LogError, match="checkpoint is damaged"):
        WriteAheadLog(tmp_path).recover()


def test_a_spare_segment_is_zeros_of_the_segment_size(tmp_path: Path) -> None:
    wal, _ = reopen(tmp_path, segment_bytes=8192)
    for parts in records(3):  # past a quarter of the segment
        wal.append(parts)
    assert wal.wants_spare()
    made = wal.make_spare(wal.reserve_number())
    assert made[0].read_bytes() == bytes(8192)
    wal.add_spare(made)
    assert not wal.wants_spare()


def wait_readable(fd: int, timeout: float = 5.0) -> None:
    ready, _, _ = select.select([fd], [], [], timeout)
    assert ready, "the syncer never signalled"


def test_the_syncer_syncs_and_reports_errors(tmp_path: Path) -> None:
    s = Syncer()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert s.finish() is None  # nothing asked
        os.write(fd, b"data")
        s.kick([fd])
        with pytest.raises(RuntimeError, match="already running"):
            s.kick([fd])
        wait_readable(s.fileno())
        assert s.finish() == 0
        closed = os.dup(fd)
        os.close(closed)
        s.kick([fd, closed])
        wait_readable(s.fileno())
        assert s.finish() == 9  # EBADF, from the closed descriptor
        with pytest.raises(ValueError, match=">= 0"):
            s.kick([-1])
    finally:
        s.close()
        os.close(fd)
    with pytest.raises(ValueError, match="closed"):
        s.kick([0])


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from gevent import monkey; monkey.patch_all()
    from gateway.rowkey import MessageId
    from gateway.store.base import PutBatch, QueueMeta
    from gateway.store.embedded import LOG_SEGMENTS_KEPT, EmbeddedStore

    s = EmbeddedStore(sys.argv[1], log_segment_bytes=64 << 10)
    s.start()
    meta = s.create_queue(QueueMeta("q", 3, 3600))
    for i in range(300):
        p = i % 3
        values = [b"%d:%d:" % (i, j) + b"x" * 100 for j in range(20)]
        s.put(meta, [PutBatch(p, MessageId(1_000_000 + i, 0), [b"t"] * 20, values)])
        print(i, flush=True)  # acknowledged
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_store_killed_mid_write_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    from gateway.store.embedded import LOG_SEGMENTS_KEPT, EmbeddedStore

    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    acked = len(proc.stdout.split())
    assert acked == 300
    kept = len(list((tmp_path / "wal").glob("segment-*.log")))
    assert kept <= 1 + LOG_SEGMENTS_KEPT + MAX_SPARES + 1  # active, full, spares, one in the making
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        meta = s.get_queue("q")
        assert meta is not None
        for p in range(3):
            # the child's ids are from 1970: read as if the TTL kept them (readers apply it)
            forever = meta.with_changes(ttl_seconds=2**62 // 1000)
            reader = s.reader(forever, p, None, None, reverse=False, topics=None)
            got = []
            while True:
                r = reader.read(1000)
                got += [v for _, _, _, v in r.rows]
                if r.done:
                    break
            want = [b"%d:%d:" % (i, j) + b"x" * 100 for i in range(p, 300, 3) for j in range(20)]
            assert got == want
            # each put was one record, replayed whole: the newest id is its last message's
            assert s.last_id(meta, p) == MessageId(1_000_000 + 297 + p, 19)
    finally:
        s.stop()
    # a clean stop leaves nothing to replay
    wal = WriteAheadLog(tmp_path / "wal")
    assert wal.recover() == []
    wal.close()


def test_only_families_still_holding_older_rows_are_flushed(tmp_path: Path) -> None:
    from gateway.rowkey import MessageId
    from gateway.store.base import PutBatch, QueueMeta
    from gateway.store.embedded import EmbeddedStore

    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        meta = s.create_queue(QueueMeta("q", 2, 3600))
        for p in range(2):
            s.put(meta, [PutBatch(p, MessageId(1_000_000, 0), [b"t"] * 10, [b"v"] * 10)])
        marks = dict(s._rows)  # the end of a log segment
        families = s._live_families()
        assert set(marks) == set(families) == {"q@1#0", "q@1#1"}
        assert set(s._holding_rows_before(marks)) == {"q@1#0", "q@1#1"}
        families["q@1#0"][0].flush(True)  # as RocksDB does with a full memtable
        assert set(s._holding_rows_before(marks)) == {"q@1#1"}
        # newer rows do not count
        s.put(meta, [PutBatch(0, MessageId(1_000_001, 0), [b"t"] * 5, [b"v"] * 5)])
        assert set(s._holding_rows_before(marks)) == {"q@1#1"}
        s.truncate_queue("q")  # dropped families have nothing to keep
        assert s._holding_rows_before(marks) == {}
    finally:
        s.stop()


@given(st.lists(st.binary(max_size=3000), max_size=6))
def test_the_logs_crc_is_zlibs_crc32_from_zlib_ng(parts: list[bytes]) -> None:
    """Records are checked with zlib-ng's CRC-32 (SIMD); its values are the stdlib's, so logs
    written by either read back with the other."""
    assert wal_module.crc32.__module__.startswith("zlib_ng"), (
        "the log uses the stdlib's slow CRC-32: pip install zlib-ng (the gateway extra)"
    )
    ours = theirs = 0
    for part in parts:
        ours = wal_module.crc32(part, ours)
        theirs = zlib.crc32(part, theirs)
    assert ours == theirs
