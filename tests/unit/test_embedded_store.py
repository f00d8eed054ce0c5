"""The embedded store's chunked scans: the iterators it keeps between chunks never change what a
scan returns (rows written meanwhile, reverse scans, truncates, topic filters)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import rowkey
from gateway.errors import InvalidArgument, StoreError
from gateway.ids import wall_clock_ms
from gateway.rowkey import MessageId
from gateway.store import embedded
from gateway.store.base import PutBatch, QueueMeta
from gateway.store.embedded import EmbeddedStore, extras, layout, wedge
from gateway.store.embedded import cursors as kept
from tests.helpers import rocksdb_option

T0 = wall_clock_ms()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def put(s: EmbeddedStore, meta: QueueMeta, partition: int, ts: int, count: int, topic=b"t"):
    keys = rowkey.consecutive_keys(partition, ts, 0, count)
    values = [f"{partition}:{ts}:{i}".encode() for i in range(count)]
    s.put(meta, [PutBatch(partition, MessageId(ts, 0), [topic] * count, values)])
    return [(rowkey.decode(k)[1], rowkey.decode(k)[2]) for k in keys]


def read_all(s, meta, partition, *, reverse=False, topics=None, limit=1000, between=None):
    """Reads a partition the way a scanner does, in chunks; ``between(n)`` runs after chunk n."""
    reader = s.reader(meta, partition, None, None, reverse=reverse, topics=topics)
    ids: list[tuple[int, int]] = []
    chunk = 0
    while True:
        r = reader.read(limit)
        ids += [(ts, seq) for ts, seq, _, _ in r.rows]
        chunk += 1
        if between is not None:
            between(chunk)
        if r.done:
            reader.close()
            return ids


def test_forward_chunks_see_rows_written_between_them(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 2, 3600))
    first = put(store, meta, 0, T0, 2500)
    later: list[tuple[int, int]] = []

    def write_more(chunk: int) -> None:
        if chunk in (1, 2):  # while the kept iterator is mid-way and after it
            later.extend(put(store, meta, 0, T0 + chunk, 700))

    got = read_all(store, meta, 0, between=write_more)
    assert got == first + later
    assert len(got) == 2500 + 1400


def test_reverse_chunks_return_everything_newest_first(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    ids = put(store, meta, 0, T0, 2345)
    assert read_all(store, meta, 0, reverse=True, limit=500) == ids[::-1]


def test_a_kept_iterator_never_outlives_a_truncate(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    put(store, meta, 0, T0, 3000)
    reader = store.reader(meta, 0, None, None, reverse=False, topics=None)
    r = reader.read(1000)
    assert len(r.rows) == 1000 and not r.done and len(store._cursors) == 1
    new_meta = store.truncate_queue("q")
    assert len(store._cursors) == 0  # dropped with its family
    fresh = put(store, new_meta, 0, T0 + 5, 10)
    with pytest.raises(InvalidArgument, match="truncated"):
        reader.read(1000)
    reader.close()
    # a reader of the new generation from the old position: only what was written since
    last = MessageId(r.rows[-1][0], r.rows[-1][1])
    again = store.reader(new_meta, 0, last, None, reverse=False, topics=None).read(1000)
    assert [(ts, seq) for ts, seq, _, _ in again.rows] == fresh
    assert read_all(store, new_meta, 0) == fresh


def test_topic_filters_go_on_across_chunks(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    wanted = []
    for i in range(12):  # long runs of other topics: scans stop on their examine budget
        put(store, meta, 0, T0 + 2 * i, 1000, topic=b"noise")
        wanted += put(store, meta, 0, T0 + 2 * i + 1, 3, topic=b"want")
    assert read_all(store, meta, 0, topics={b"want"}, limit=10) == wanted


def test_kept_iterators_are_bounded_in_number_and_age(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(kept.time, "monotonic", lambda: now[0])

    class Holder:
        def __init__(self, family: str) -> None:
            self.family = family
            self.dropped = False

        def _drop_iterator(self) -> None:
            self.dropped = True

    cursors = kept._Cursors()
    holders = [Holder("f") for _ in range(kept._Cursors.MAX + 10)]
    for h in holders:
        cursors.keep(h)
    assert len(cursors) == kept._Cursors.MAX
    assert holders[0].dropped and not cursors.take(holders[0])  # evicted first
    assert not holders[-1].dropped and cursors.take(holders[-1])
    young = Holder("f")
    cursors.keep(young)
    now[0] += kept._Cursors.MAX_AGE + 1
    assert not cursors.take(young)  # too old to trust
    idle = Holder("h")
    cursors.keep(idle)
    now[0] += kept._Cursors.MAX_AGE + 1
    cursors.expire()  # without any read going on
    assert idle.dropped and len(cursors) == 0
    mine, other = Holder("g"), Holder("x")
    cursors.keep(mine)
    cursors.keep(other)
    cursors.drop("g")
    assert mine.dropped and not other.dropped and not cursors.take(mine)


@pytest.mark.parametrize(
    ("partitions", "config", "families"),
    [
        (1, {}, 1),
        (8, {}, 8),
        (16, {}, 16),
        (17, {}, 9),  # two partitions per family past 16
        (32767, {}, 16),
        (32, {"hbase.hqueue.partitionsPerRegion": "4"}, 8),
        (10, {"hbase.hqueue.partitionsPerRegion": "4"}, 3),
    ],
)
def test_a_queue_gets_a_family_per_region_and_at_most_16(
    partitions: int, config: dict[str, str], families: int
) -> None:
    assert embedded.families_for(QueueMeta("q", partitions, 60, config=config)) == families
    # past the budget of all queues together: one family
    over = embedded.FAMILY_BUDGET - families + 1
    assert embedded.families_for(QueueMeta("q", partitions, 60, config=config), over) == 1


def test_queues_past_the_family_budget_share_one_family(store: EmbeddedStore) -> None:
    full = embedded.FAMILY_BUDGET // embedded.MAX_FAMILIES_PER_QUEUE
    for i in range(full):
        store.create_queue(QueueMeta(f"q{i}", 16, 3600))
    assert store._families_in_use() == embedded.FAMILY_BUDGET
    late = store.create_queue(QueueMeta("late", 4, 3600))
    ids = {p: put(store, late, p, T0 + p, 10) for p in range(4)}
    assert all(read_all(store, late, p) == ids[p] for p in range(4))
    store.delete_queue("q0")  # frees 16: a truncate of the late queue spreads it out
    late = store.truncate_queue("late")
    assert store._families_in_use() == embedded.FAMILY_BUDGET - 16 + 4


def test_partitions_sharing_a_family_stay_apart(store: EmbeddedStore) -> None:
    meta = store.create_queue(
        QueueMeta("q", 10, 3600, config={"hbase.hqueue.partitionsPerRegion": "4"})
    )
    ids = {p: put(store, meta, p, T0 + p, 50 + p) for p in range(10)}
    for p in range(10):
        assert read_all(store, meta, p, limit=7) == ids[p]
        assert read_all(store, meta, p, reverse=True, limit=7) == ids[p][::-1]
        last = store.last_id(meta, p)
        assert last is not None and (last.timestamp, last.sequence) == ids[p][-1]
    # a TTL sweep far in the future empties every partition of every family
    assert store.sweep_expired(now_ms=T0 + 10 * 3600_000) == 10
    assert all(read_all(store, meta, p) == [] for p in range(10))


def test_queues_stored_in_one_family_before_regions_still_open(tmp_path: Path) -> None:
    """A data dir written before regions: queue metadata without 'families', all partitions in
    one column family <name>@<generation>."""
    from rocksdict import Cache, Rdict, WriteBatch

    tables = layout.TableOptions(tmp_path / layout.TABLE_OPTIONS_DIR, Cache(8 << 20))
    db = Rdict(str(tmp_path / "rocksdb"), layout._options(tables))
    meta = QueueMeta("old", 3, 3600, generation=1)
    db.put(b"queue\x00old", meta.to_json())
    db.put(b"generation", b"1")
    db.create_column_family("old@1", layout._options(tables))
    batch = WriteBatch(raw_mode=True)
    handle = db.get_column_family_handle("old@1")
    for p in range(3):
        for key in rowkey.consecutive_keys(p, T0, 0, 5):
            batch.put(key, rowkey.encode_cell(b"t", b"v"), handle)
    db.write(batch)
    del batch, handle  # they hold the database open
    db.close()

    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        meta = s.get_queue("old")
        assert meta is not None
        assert [len(read_all(s, meta, p)) for p in range(3)] == [5, 5, 5]
        put(s, meta, 1, T0 + 1, 3)
        assert len(read_all(s, meta, 1)) == 8
        new = s.truncate_queue("old")  # the new generation gets a family per partition
        put(s, new, 2, T0 + 2, 4)
        assert [len(read_all(s, new, p)) for p in range(3)] == [0, 0, 4]
    finally:
        s.stop()
    from rocksdict import Rdict as R

    assert sorted(n for n in R.list_cf(str(tmp_path / "rocksdb")) if n != "default") == [
        embedded.EXTRAS_FAMILY,  # made on the first start that had none
        "old@2#0",
        "old@2#1",
        "old@2#2",
    ]


def test_a_wedged_store_reopens_with_everything_acknowledged(tmp_path: Path) -> None:
    """What the healer does once a failed flush left RocksDB refusing writes (the real thing,
    on a full tmpfs, is tests/integration/test_disk_full.py): RocksDB and the log are closed
    and opened again in-process, the log's unflushed records are applied, and the store goes
    on: rows, queues and records as before, puts accepted, and a later restart replays
    nothing twice."""
    import gevent

    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        meta = s.create_queue(QueueMeta("q", 2, 3600))
        ids = put(s, meta, 0, T0, 300) + put(s, meta, 1, T0, 5)
        s.put_record("ns", "k", b"v")
        first = MessageId(*ids[0])
        s.put_extras(meta, [(0, first, b"key", b"props")])
        held = s.reader(meta, 0, None, None, reverse=False, topics=None)
        held.read(10)  # keeps an iterator
        s._wedged = True  # as _note_failure sets it
        with pytest.raises(StoreError, match="disk is full"):
            put(s, meta, 0, T0 + 1, 1)
        s._healer = gevent.spawn(s._heal_loop)
        s._healer.join(timeout=10)
        assert not s._wedged
        ids += put(s, meta, 0, T0 + 2, 3)
        got = read_all(s, meta, 0) + read_all(s, meta, 1)
        assert sorted(got) == sorted(ids)
        assert [m.name for m in s.list_queues()] == ["q"]
        assert s.get_record("ns", "k") == b"v"
        assert s.get_extras(meta, 0, [first]) == {first: b"props"}
        assert s.find_by_key(meta, b"key", 10) == [(0, first)]
    finally:
        s.stop()
    again = EmbeddedStore(tmp_path)
    again.start()
    try:
        meta = again.get_queue("q")
        assert meta is not None
        got = read_all(again, meta, 0) + read_all(again, meta, 1)
        assert sorted(got) == sorted(ids)
    finally:
        again.stop()


def test_the_disk_is_looked_at_per_put_only_near_its_reserve(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Far from the reserve a statvfs is saved for SPACE_RECHECK_SECONDS; near it every put
    looks, and below it puts are refused."""
    looks: list[int] = []
    free = [10 << 30]

    def statvfs(path: Path) -> int:
        looks.append(free[0])
        return free[0]

    monkeypatch.setattr(wedge, "_free_bytes", statvfs)
    monkeypatch.setattr(wedge, "SPACE_RECHECK_SECONDS", 3600.0)
    meta = store.create_queue(QueueMeta("space", 1, 3600))
    for i in range(5):
        put(store, meta, 0, T0 + i, 1)
    assert len(looks) == 1
    store._space_ok_until = 0.0  # as when the hour is over
    free[0] = wedge.SPACE_SLACK_BYTES - 1
    for i in range(5, 10):
        put(store, meta, 0, T0 + i, 1)
    assert len(looks) == 6  # one per put
    free[0] = wedge.DISK_RESERVE_BYTES - 1
    with pytest.raises(StoreError, match="disk is full"):
        put(store, meta, 0, T0 + 10, 1)


def _extras_entries(s: EmbeddedStore) -> list[bytes]:
    assert s._extras is not None
    return [k for k, _ in s._extras[0].items()]


def test_the_ttl_sweep_deletes_expired_keys_and_properties(tmp_path: Path) -> None:
    """Keys and properties sit in their own column family, time first: the sweep removes what
    expired with range deletes (values to the cutoff, the index by whole buckets), the rest
    stays findable, and a restart keeps it."""
    from gateway.rowkey import MessageId

    s = EmbeddedStore(tmp_path)
    s.start()
    meta = s.create_queue(QueueMeta("q", 2, 3600))  # buckets of 225 s
    now = wall_clock_ms()
    old, young = MessageId(now - 2 * 3600_000, 0), MessageId(now - 1000, 3)
    s.put_extras(meta, [(0, old, b"k", b"old"), (1, young, b"k", b"young")])
    assert len(_extras_entries(s)) == 4
    s.sweep_expired(now)
    assert len(_extras_entries(s)) == 2  # the old value and its index entry are gone
    assert s.find_by_key(meta, b"k", 10) == [(1, young)]
    s.stop()
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        meta = s.get_queue("q")
        assert meta is not None and s.has_extras(meta)
        assert s.find_by_key(meta, b"k", 10) == [(1, young)]
        assert s.get_extras(meta, 1, [young]) == {young: b"young"}
        s.sweep_expired(now + 2 * 3600_000)  # everything expired by then
        assert _extras_entries(s) == []
    finally:
        s.stop()


def test_truncate_drops_the_generations_keys(store: EmbeddedStore) -> None:
    from gateway.rowkey import MessageId

    meta = store.create_queue(QueueMeta("q", 1, 3600))
    store.put_extras(meta, [(0, MessageId(T0, 0), b"k", b"v")])
    store.truncate_queue("q")
    assert _extras_entries(store) == []


def test_a_start_drops_keys_of_generations_no_queue_has(tmp_path: Path) -> None:
    """What a crash between dropping a generation's rows and its keys would leave."""
    from gateway.rowkey import MessageId

    s = EmbeddedStore(tmp_path)
    s.start()
    meta = s.create_queue(QueueMeta("q", 1, 3600))
    s.put_extras(meta, [(0, MessageId(T0, 0), b"k", b"v")])
    assert s._extras is not None
    s._extras[0].put(extras._GEN.pack(meta.generation + 1000) + b"E" + bytes(12), b"left")
    s.stop()
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        entries = _extras_entries(s)
        assert len(entries) == 2  # the live queue's value and index entry
        assert all(e.startswith(extras._GEN.pack(meta.generation)) for e in entries)
    finally:
        s.stop()


def _options_file_says(path: Path) -> str:
    (value,) = rocksdb_option(path, "use_direct_io_for_flush_and_compaction", "DBOptions")
    return value


@pytest.mark.parametrize("mode", ["auto", "on", "off"])
def test_direct_io_flushes_keep_every_message(tmp_path: Path, mode: str) -> None:
    """With O_DIRECT flushes (the default where the filesystem takes it, as tmp_path's does)
    flushed messages read back alike, before and after a restart; RocksDB's OPTIONS file says
    which way it writes."""
    s = EmbeddedStore(tmp_path, direct_io=mode)
    s.start()
    try:
        assert s.direct_io is (mode != "off")
        assert _options_file_says(s.path) == ("false" if mode == "off" else "true")
        meta = s.create_queue(QueueMeta("q", 1, 3600))
        ids = put(s, meta, 0, T0, 3000) + put(s, meta, 0, T0 + 1, 3000)
        s._families["q"][1][0][0].flush(True)  # to a table file, with O_DIRECT or not
        assert list((s.path).glob("*.sst"))
        assert read_all(s, meta, 0) == ids
    finally:
        s.stop()
    s = EmbeddedStore(tmp_path, direct_io=mode)
    s.start()
    try:
        meta = s.get_queue("q")
        assert meta is not None and read_all(s, meta, 0) == ids
        rows = s.reader(meta, 0, None, None, reverse=False, topics=None).read(1).rows
        assert rows[0][3] == f"0:{T0}:0".encode()
    finally:
        s.stop()


def test_direct_io_auto_falls_back_where_the_filesystem_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = layout.os.open

    def refuse_direct(path, flags, *args):  # as a filesystem without O_DIRECT answers
        if flags & layout.os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(layout.os, "open", refuse_direct)
    assert layout.supports_direct_io(tmp_path) is False
    assert not list(tmp_path.iterdir())  # the probe file is gone
    s = EmbeddedStore(tmp_path, direct_io="auto")
    s.start()
    try:
        assert s.direct_io is False
        assert _options_file_says(s.path) == "false"
    finally:
        s.stop()
    monkeypatch.undo()
    assert layout.supports_direct_io(tmp_path) is True


def test_direct_io_takes_only_auto_on_or_off(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'direct_io' must be one of auto, on, off"):
        EmbeddedStore(tmp_path, direct_io="yes")


def _table_bytes(s: EmbeddedStore, queue: str) -> int:
    """The bytes of ``queue``'s table files, after flushing its memtables to them."""
    total = 0
    for cf, _ in s._families[queue][1]:
        cf.flush(True)
        total += cf.property_int_value("rocksdb.total-sst-files-size") or 0
    return total


def _put_compressible(s: EmbeddedStore, meta: QueueMeta, ts: int) -> None:
    values = [b"order shipped to warehouse 7; " * 30] * 2000  # about 900 bytes each
    s.put(meta, [PutBatch(0, MessageId(ts, 0), [b"t"] * len(values), values)])


def test_a_queue_is_compressed_with_its_codec_on_every_level_and_after_a_restart(
    tmp_path: Path,
) -> None:
    """``hbase.hqueue.compression`` (as on HBase): NONE unless given, one codec for all the
    levels of the queue's families (so RocksDB moves files down without rewriting them), and
    the codec again after a restart; codecs this RocksDB lacks are refused, naming the key."""
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        plain = s.create_queue(QueueMeta("plain", 1, 3600))
        packed = s.create_queue(
            QueueMeta("packed", 1, 3600, config={"hbase.hqueue.compression": "LZ4"})
        )
        for codec in ("GZ", "LZO"):
            with pytest.raises(InvalidArgument, match=r"compression.*cannot compress with"):
                s.create_queue(
                    QueueMeta("bad", 1, 3600, config={"hbase.hqueue.compression": codec})
                )
        assert s.get_queue("bad") is None
        _put_compressible(s, plain, T0)
        _put_compressible(s, packed, T0)
        plain_bytes, packed_bytes = _table_bytes(s, "plain"), _table_bytes(s, "packed")
        assert plain_bytes > 1_500_000  # 2000 x ~900 bytes, as they came
        assert packed_bytes < plain_bytes // 10
    finally:
        s.stop()
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        plain, packed = s.get_queue("plain"), s.get_queue("packed")
        assert plain is not None and packed is not None
        _put_compressible(s, plain, T0 + 1)
        _put_compressible(s, packed, T0 + 1)
        assert _table_bytes(s, "plain") > 2 * plain_bytes * 0.9
        assert _table_bytes(s, "packed") < 2 * packed_bytes * 1.5  # compressed again
        assert len(read_all(s, packed, 0, limit=5000)) == 4000
    finally:
        s.stop()
