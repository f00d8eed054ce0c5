"""What every store must do: one suite, run over every ``PartitionStore`` backend.

``gateway/store/memory.py`` is the reference; the embedded store and HBase must behave the same
through the interface of ``gateway/store/base.py``. ``memory-3`` is the memory store stopping
every read after three examined rows, so each test also covers readers that go on from where
they stopped without having returned anything. The ``hbase`` parameter needs a real HBase
(``hbase_url``: started once per session by ``scripts/hbase-local`` unless
``$HQUEUE_TEST_HBASE`` names one); leave it out with ``-m "not hbase"``.

What is *not* part of the contract (and so not tested here): replacing a row by putting its
key again, and how expired rows are reclaimed (HBase by cell timestamp, embedded by its
sweeper, memory on put). TTL is enforced for every store by its readers (see
``test_expired_rows_are_hidden_from_scanners``); a reader of a truncated or deleted
generation raises (``test_truncate_or_delete_while_reading``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import rowkey
from gateway.errors import InvalidArgument
from gateway.ids import wall_clock_ms
from gateway.rowkey import MessageId
from gateway.scanners import Scanner, ScanSpec
from gateway.store.base import PartitionStore, PutBatch, QueueMeta, Row
from gateway.store.embedded import EmbeddedStore
from gateway.store.memory import MemoryStore

HOUR_MS = 3600 * 1000
T0 = wall_clock_ms() - 60_000  # a minute ago: alive in every queue made here


@pytest.fixture(
    params=["memory", "memory-3", "embedded", pytest.param("hbase", marks=pytest.mark.hbase)]
)
def backend(request: Any, tmp_path: Path) -> Iterator[PartitionStore]:
    store: PartitionStore
    if request.param == "memory":
        store = MemoryStore()
    elif request.param == "memory-3":
        store = MemoryStore(max_examined=3)
    elif request.param == "embedded":
        store = EmbeddedStore(tmp_path)
    else:
        from gateway.store.hbase import HBaseStore
        from gateway.store.hbase_schema import HBaseAddress

        url: str = request.getfixturevalue("hbase_url")
        sep = "&" if "?" in url else "?"
        store = HBaseStore(HBaseAddress.parse(f"{url}{sep}namespace=c_{uuid.uuid4().hex[:10]}"))
    store.start()
    try:
        yield store
    finally:
        store.stop()


def new_queue(store: PartitionStore, partitions: int = 3, ttl: int = 3600, **kw: Any) -> QueueMeta:
    return store.create_queue(QueueMeta(f"q_{uuid.uuid4().hex[:12]}", partitions, ttl, **kw))


def put(
    store: PartitionStore,
    meta: QueueMeta,
    partition: int,
    ts: int,
    count: int,
    topics: tuple[bytes, ...] = (b"t",),
) -> list[Row]:
    """Puts ``count`` messages with consecutive ids from (ts, 0), topics taken in turn; returns
    them as a scan returns them."""
    keys = rowkey.consecutive_keys(partition, ts, 0, count)
    tops = [topics[i % len(topics)] for i in range(count)]
    values = [b"%d/%d/%d" % (partition, ts, i) for i in range(count)]
    store.put(meta, [PutBatch(partition, MessageId(ts, 0), tops, values)])
    return [(*rowkey.decode(k)[1:], t, v) for k, t, v in zip(keys, tops, values, strict=True)]


def read(
    store: PartitionStore,
    meta: QueueMeta,
    partition: int,
    *,
    after: MessageId | None = None,
    stop: MessageId | None = None,
    reverse: bool = False,
    topics: frozenset[bytes] | None = None,
    limit: int = 10_000,
    max_bytes: int | None = None,
) -> list[Row]:
    """Reads with one reader to its end, checking each read's bounds on the way."""
    reader = store.reader(meta, partition, after, stop, reverse=reverse, topics=topics)
    out: list[Row] = []
    try:
        for _ in range(10_000):
            r = reader.read(limit, max_bytes)
            assert len(r.rows) <= limit
            assert r.size >= sum(len(row[2]) + len(row[3]) for row in r.rows)
            out += r.rows
            if r.done:
                return out
        raise AssertionError("the reader never reached its end")
    finally:
        reader.close()


# -- queues ---------------------------------------------------------------------------------


def test_create_get_list(backend: PartitionStore) -> None:
    a = new_queue(backend, 3, 3600, config={"hbase.hqueue.partitionsPerRegion": "1"})
    b = new_queue(backend, 1, 60)
    assert (a.partitions, a.ttl_seconds, a.enabled) == (3, 3600, True)
    assert a.config == {"hbase.hqueue.partitionsPerRegion": "1"}
    assert a.generation != b.generation
    assert backend.get_queue(a.name) == a
    assert backend.get_queue("q_missing") is None
    names = [m.name for m in backend.list_queues()]
    assert {a.name, b.name} <= set(names) and names == sorted(names)


def test_a_duplicate_queue_is_refused(backend: PartitionStore) -> None:
    meta = new_queue(backend)
    with pytest.raises(InvalidArgument) as err:
        backend.create_queue(QueueMeta(meta.name, 5, 60))
    assert err.value.argument == "queueName"
    assert backend.get_queue(meta.name) == meta  # unchanged


def test_delete_then_create_again_is_a_new_empty_generation(backend: PartitionStore) -> None:
    meta = new_queue(backend, 2)
    put(backend, meta, 1, T0, 5)
    backend.delete_queue(meta.name)
    assert backend.get_queue(meta.name) is None
    assert meta.name not in [m.name for m in backend.list_queues()]
    for call in (backend.delete_queue, backend.truncate_queue):
        with pytest.raises(InvalidArgument) as err:
            call(meta.name)
        assert err.value.argument == "queueName"
    with pytest.raises(InvalidArgument):
        backend.set_enabled(meta.name, False)
    again = backend.create_queue(QueueMeta(meta.name, 2, 3600))
    assert again.generation != meta.generation
    assert read(backend, again, 1) == []
    assert backend.last_id(again, 1) is None


def test_truncate_empties_every_partition_and_keeps_the_layout(backend: PartitionStore) -> None:
    meta = new_queue(backend, 3, 600, config={"hbase.hqueue.partitionsPerRegion": "2"})
    for p in range(3):
        put(backend, meta, p, T0, 4)
    new = backend.truncate_queue(meta.name)
    assert new.generation != meta.generation
    assert (new.name, new.partitions, new.ttl_seconds, new.config, new.enabled) == (
        meta.name, meta.partitions, meta.ttl_seconds, meta.config, meta.enabled,
    )  # fmt: skip
    assert backend.get_queue(meta.name) == new
    for p in range(3):
        assert read(backend, new, p) == []
        assert backend.last_id(new, p) is None
    rows = put(backend, new, 2, T0 + 1, 3)  # usable at once
    assert read(backend, new, 2) == rows


def test_disable_and_enable_keep_the_data(backend: PartitionStore) -> None:
    meta = new_queue(backend, 2)
    rows = put(backend, meta, 0, T0, 5)
    off = backend.set_enabled(meta.name, False)
    assert not off.enabled
    assert off.with_changes(enabled=True) == meta  # nothing else changed
    assert backend.get_queue(meta.name) == off
    assert [m for m in backend.list_queues() if m.name == meta.name] == [off]
    on = backend.set_enabled(meta.name, True)
    assert on == meta and backend.get_queue(meta.name) == meta
    assert read(backend, on, 0) == rows


# -- rows -----------------------------------------------------------------------------------


def test_put_then_scan_returns_a_partition_in_key_order(backend: PartitionStore) -> None:
    meta = new_queue(backend, 3)
    first = put(backend, meta, 1, T0, 5, topics=(b"a", b"b"))
    put(backend, meta, 0, T0 + 1, 2)  # other partitions stay apart
    put(backend, meta, 2, T0 - 1, 2)
    # several partitions in one call, binary topics and bodies, an empty body
    # (and two batches of one partition)
    backend.put(
        meta,
        [
            PutBatch(1, MessageId(T0 + 7, 3), [b"\x00\xff"], [b""]),
            PutBatch(1, MessageId(T0 + 9, 0), [b"t:2"], [b"\x00\x01\xfe"]),
            PutBatch(2, MessageId(T0 + 2, 0), [b"c"], [b"x" * 70_000]),
            PutBatch(0, MessageId(T0 + 3, 0), [], []),  # an empty batch is nothing to write
        ],
    )
    expected = [*first, (T0 + 7, 3, b"\x00\xff", b""), (T0 + 9, 0, b"t:2", b"\x00\x01\xfe")]
    assert read(backend, meta, 1) == expected
    assert read(backend, meta, 2)[-1] == (T0 + 2, 0, b"c", b"x" * 70_000)
    assert [r[:2] for r in read(backend, meta, 0)] == [(T0 + 1, 0), (T0 + 1, 1)]


def test_reverse_returns_newest_first(backend: PartitionStore) -> None:
    meta = new_queue(backend, 2)
    rows = put(backend, meta, 0, T0, 7) + put(backend, meta, 0, T0 + 3, 4)
    put(backend, meta, 1, T0 + 1, 3)
    assert read(backend, meta, 0, reverse=True) == rows[::-1]
    assert read(backend, meta, 0, reverse=True, limit=2) == rows[::-1]


def test_topic_filters(backend: PartitionStore) -> None:
    meta = new_queue(backend, 1)
    rows = put(backend, meta, 0, T0, 12, topics=(b"a", b"b", b"c"))
    for wanted in ({b"a"}, {b"a", b"c"}, {b"zz"}, set()):
        expected = [r for r in rows if r[2] in wanted]
        topics = frozenset(wanted)
        assert read(backend, meta, 0, topics=topics) == expected
        assert read(backend, meta, 0, topics=topics, reverse=True) == expected[::-1]
        assert read(backend, meta, 0, topics=topics, limit=1) == expected


@pytest.mark.parametrize("limit", [1, 2, 7, 100])
@pytest.mark.parametrize("reverse", [False, True])
def test_limits_continue_without_skipping_or_repeating(
    backend: PartitionStore, limit: int, reverse: bool
) -> None:
    meta = new_queue(backend, 1)
    rows: list[Row] = []
    for i in range(6):  # runs of a topic nobody reads between the wanted ones
        rows += put(backend, meta, 0, T0 + 2 * i, 9, topics=(b"noise",))
        rows += put(backend, meta, 0, T0 + 2 * i + 1, 3, topics=(b"want", b"also"))
    order = rows[::-1] if reverse else rows
    assert read(backend, meta, 0, reverse=reverse, limit=limit) == order
    wanted = frozenset({b"want"})
    assert read(backend, meta, 0, reverse=reverse, limit=limit, topics=wanted) == [
        r for r in order if r[2] == b"want"
    ]


@pytest.mark.parametrize("max_bytes", [1, 150, 1000])
def test_a_byte_hint_never_skips_or_repeats(backend: PartitionStore, max_bytes: int) -> None:
    """A store stops early on ``max_bytes``, and reading on gets every row once."""
    meta = new_queue(backend, 1)
    rows = put(backend, meta, 0, T0, 12, topics=(b"a", b"bb"))
    for reverse in (False, True):
        got = read(backend, meta, 0, reverse=reverse, max_bytes=max_bytes)
        assert got == (rows[::-1] if reverse else rows)


def test_a_scan_stops_once_its_rows_reach_max_bytes(backend: PartitionStore) -> None:
    """``max_bytes`` bounds a reply's memory: a scan returns rows while their topics and values
    hold less than it (at least one row). HBase's scans ignored it and returned whole chunks
    (up to 1000 rows, whatever their size), and read as many ahead."""
    meta = new_queue(backend, 1)
    values = [b"%04d" % i + bytes(10_000) for i in range(60)]
    backend.put(meta, [PutBatch(0, MessageId(T0, 0), [b"t"] * 60, values)])
    row = 1 + 10_004
    for reverse in (False, True):
        got: list[bytes] = []
        reader = backend.reader(meta, 0, None, None, reverse=reverse, topics=None)
        for _ in range(60):
            r = reader.read(1000, 3 * row)
            assert len(r.rows) <= 3  # 3 rows reach max_bytes
            assert r.rows or r.done  # at least one row, but at the end
            got += [v for *_, v in r.rows]
            scans = getattr(backend, "_scans", None)  # HBase: what it read ahead
            if scans is not None:  # (its first chunk, before it knows a row's size: 16 rows)
                held = sum(len(v) for e in scans._open.values() for *_, v in e.buffer)
                assert held <= 16 * row
            if r.done:
                break
        reader.close()
        assert got == (values[::-1] if reverse else values)


def test_a_reader_goes_on_where_it_stopped(backend: PartitionStore) -> None:
    meta = new_queue(backend, 1)
    rows = put(backend, meta, 0, T0, 10)
    reader = backend.reader(meta, 0, None, None, reverse=False, topics=None)
    r = reader.read(4)
    assert r.rows == rows[: len(r.rows)] and not r.done
    got = list(r.rows)
    while not r.done:
        r = reader.read(100)
        got += r.rows
    assert got == rows
    # a forward reader without a stop finds what was put after its end
    more = put(backend, meta, 0, T0 + 1, 3)
    assert read_on(reader) == more
    reader.close()
    reader.close()  # closing twice is fine


def read_on(reader: Any) -> list[Row]:
    out: list[Row] = []
    while True:
        r = reader.read(100)
        out += r.rows
        if r.done:
            return out


def test_after_is_exclusive_and_stop_exclusive(backend: PartitionStore) -> None:
    meta = new_queue(backend, 2)
    rows = put(backend, meta, 1, T0, 10)
    put(backend, meta, 0, T0, 10)

    def at(i: int) -> MessageId:
        return MessageId(rows[i][0], rows[i][1])

    assert read(backend, meta, 1, after=at(3), stop=at(7)) == rows[4:7]
    assert read(backend, meta, 1, after=at(7), stop=at(3), reverse=True) == rows[4:7][::-1]
    assert read(backend, meta, 1, after=at(5), stop=at(6)) == []
    assert read(backend, meta, 1, after=at(6), stop=at(2)) == []
    assert read(backend, meta, 1, stop=at(1)) == rows[:1]
    assert read(backend, meta, 1, after=at(8)) == rows[9:]
    assert read(backend, meta, 1, after=at(1), reverse=True) == rows[:1]
    assert read(backend, meta, 1, stop=at(8), reverse=True) == rows[9:][::-1]
    assert read(backend, meta, 1, after=at(9)) == []
    # the extremes: nothing after the largest id, everything after "before the smallest"
    assert read(backend, meta, 1, after=rowkey.MAX_ID) == []
    assert read(backend, meta, 1, stop=rowkey.MAX_ID, reverse=True) == []
    assert read(backend, meta, 1, after=rowkey.MAX_ID, reverse=True) == rows[::-1]
    assert read(backend, meta, 1, after=MessageId(0, 0), stop=rowkey.MAX_ID) == rows


def test_a_reader_goes_on_after_its_store_dropped_what_it_held(backend: PartitionStore) -> None:
    """Idle readers lose their iterator or HBase scanner (and its read-ahead); the next read
    reopens from the reader's own position."""
    meta = new_queue(backend, 1)
    rows = put(backend, meta, 0, T0, 40, topics=(b"a", b"b"))
    for reverse in (False, True):
        for topics in (None, frozenset({b"b"})):
            expected = [r for r in rows if topics is None or r[2] in topics]
            if reverse:
                expected.reverse()
            reader = backend.reader(meta, 0, None, None, reverse=reverse, topics=topics)
            got: list[Row] = []
            for _ in range(1000):
                r = reader.read(3)
                got += r.rows
                if r.done:
                    break
                drop_held(backend)
            reader.close()
            assert got == expected


def drop_held(store: PartitionStore) -> None:
    """What a store does to an idle reader: forget its iterator / close its scanner."""
    cursors = getattr(store, "_cursors", None)
    if cursors is not None:  # embedded
        cursors.drop()
    scans = getattr(store, "_scans", None)
    if scans is not None:  # HBase
        for owner in list(scans._open):
            scans.release(owner)


def test_truncate_or_delete_while_reading(backend: PartitionStore) -> None:
    meta = new_queue(backend, 1)
    put(backend, meta, 0, T0, 20)
    reader = backend.reader(meta, 0, None, None, reverse=False, topics=None)
    assert len(reader.read(2).rows) == 2
    new = backend.truncate_queue(meta.name)
    with pytest.raises(InvalidArgument):
        reader.read(5)
    reader.close()
    rows = put(backend, new, 0, T0 + 1, 3)
    assert read(backend, new, 0) == rows
    reader = backend.reader(new, 0, None, None, reverse=True, topics=None)
    assert reader.read(1).rows == rows[-1:]
    backend.delete_queue(meta.name)
    with pytest.raises(InvalidArgument):
        reader.read(5)
    reader.close()


def test_last_id_is_the_newest_of_the_partition(backend: PartitionStore) -> None:
    meta = new_queue(backend, 3)
    assert backend.last_id(meta, 1) is None
    put(backend, meta, 1, T0, 3)
    put(backend, meta, 1, T0 + 5, 2)
    put(backend, meta, 2, T0 + 50, 1)  # newer, but another partition
    assert backend.last_id(meta, 1) == MessageId(T0 + 5, 1)
    assert backend.last_id(meta, 0) is None
    assert backend.last_id(meta, 2) == MessageId(T0 + 50, 0)
    # the sequence carries into the next millisecond past 32767
    put(backend, meta, 0, T0, rowkey.MAX_SEQUENCE + 3)
    assert backend.last_id(meta, 0) == MessageId(T0 + 1, 1)


def test_expired_rows_are_hidden_from_scanners(backend: PartitionStore) -> None:
    """TTL by the MessageID's timestamp: expired rows never reach a reader; last_id still
    counts them (ids must keep growing past them)."""
    meta = new_queue(backend, 2, ttl=3600)
    now = wall_clock_ms()
    put(backend, meta, 0, now - 3 * HOUR_MS, 4)  # expired
    put(backend, meta, 1, now - 2 * HOUR_MS, 2)  # expired
    alive = put(backend, meta, 1, now - 60_000, 3)
    assert backend.last_id(meta, 0) == MessageId(now - 3 * HOUR_MS, 3)
    assert backend.last_id(meta, 1) == MessageId(now - 60_000, 2)
    for reverse in (False, True):
        spec = ScanSpec(None, None, None, reverse, caching=2)
        scanner = Scanner(backend, meta, [0, 1], spec)
        got = scanner.next_rows(100, 1 << 20)
        assert got.rows == (alive[::-1] if reverse else alive)
        assert scanner.next_rows(100, 1 << 20).rows == []
        one = Scanner(backend, meta, [0], spec)
        assert one.next_rows(100, 1 << 20).rows == []
        assert read(backend, meta, 0, reverse=reverse) == []
        assert read(backend, meta, 1, reverse=reverse) == (alive[::-1] if reverse else alive)
        assert read(backend, meta, 1, reverse=reverse, limit=1) == (
            alive[::-1] if reverse else alive
        )


# -- records --------------------------------------------------------------------------------


def test_records(backend: PartitionStore) -> None:
    ns = f"contract_{uuid.uuid4().hex[:8]}"
    assert backend.get_record(ns, "a") is None
    assert backend.list_records(ns) == []
    for key, value in [("b", b"1"), ("a/2", b"2"), ("a/10", b"3"), ("\u00e9", b"4"), ("z", b"")]:
        backend.put_record(ns, key, value)
    backend.put_record(f"{ns}_other", "a/2", b"elsewhere")
    backend.put_record(ns, "b", b"replaced")
    assert backend.get_record(ns, "b") == b"replaced"
    assert backend.get_record(ns, "z") == b""
    # sorted by the keys' UTF-8 bytes: "é" (C3 A9) after "z"
    assert backend.list_records(ns) == [
        ("a/10", b"3"), ("a/2", b"2"), ("b", b"replaced"), ("z", b""), ("\u00e9", b"4"),
    ]  # fmt: skip
    assert backend.list_records(ns, "a/") == [("a/10", b"3"), ("a/2", b"2")]
    assert backend.list_records(ns, "nothing") == []
    backend.delete_record(ns, "a/2")
    backend.delete_record(ns, "never-there")  # absent is not an error
    assert backend.get_record(ns, "a/2") is None
    assert backend.get_record(f"{ns}_other", "a/2") == b"elsewhere"
    # records are not queues and outlive them
    meta = new_queue(backend, 1)
    backend.truncate_queue(meta.name)
    backend.delete_queue(meta.name)
    assert [k for k, _ in backend.list_records(ns)] == ["a/10", "b", "z", "\u00e9"]
    assert all(m.name != ns for m in backend.list_queues())


# -- message keys and properties ------------------------------------------------------------


def test_extras_and_the_key_index(backend: PartitionStore) -> None:
    meta = new_queue(backend, 3)
    other = new_queue(backend, 1)
    assert not backend.has_extras(meta)
    assert backend.find_by_key(meta, b"k", 10) == []
    assert backend.get_extras(meta, 0, [MessageId(T0, 0)]) == {}
    backend.put_extras(
        meta,
        [
            (0, MessageId(T0, 0), b"k", b"v0"),
            (0, MessageId(T0, 1), None, b"props only"),
            (2, MessageId(T0 + 5, 7), b"k", b"v2"),
            (1, MessageId(T0 + 3, 0), b"k2", b"\x00\xff"),
            (1, MessageId(T0 + 9, 0), b"k\x00", b"a key that begins with k"),
        ],
    )
    backend.put_extras(other, [(0, MessageId(T0 + 50, 0), b"k", b"elsewhere")])
    assert backend.has_extras(meta) and backend.has_extras(other)
    got = backend.get_extras(meta, 0, [MessageId(T0, 0), MessageId(T0, 1), MessageId(T0, 2)])
    assert got == {MessageId(T0, 0): b"v0", MessageId(T0, 1): b"props only"}
    assert backend.get_extras(meta, 1, [MessageId(T0, 0)]) == {}  # another partition's id
    # newest first, every partition, only this queue, only this exact key
    assert backend.find_by_key(meta, b"k", 10) == [(2, MessageId(T0 + 5, 7)), (0, MessageId(T0, 0))]
    assert backend.find_by_key(meta, b"k", 1) == [(2, MessageId(T0 + 5, 7))]
    assert backend.find_by_key(meta, b"k2", 10) == [(1, MessageId(T0 + 3, 0))]
    assert backend.find_by_key(meta, b"missing", 10) == []
    assert backend.find_by_key(other, b"k", 10) == [(0, MessageId(T0 + 50, 0))]
    # partitions count ids apart: one MessageID in two partitions, the lower partition first
    tie = MessageId(T0 + 7, 0)
    backend.put_extras(meta, [(2, tie, b"tie", b""), (1, tie, b"tie", b"")])
    assert backend.find_by_key(meta, b"tie", 10) == [(1, tie), (2, tie)]


def test_extras_expire_with_the_messages(backend: PartitionStore) -> None:
    meta = new_queue(backend, 2, ttl=3600)
    now = wall_clock_ms()
    old, young = MessageId(now - 2 * HOUR_MS, 0), MessageId(now - 60_000, 0)
    backend.put_extras(meta, [(0, old, b"k", b"old"), (1, young, b"k", b"young")])
    assert backend.find_by_key(meta, b"k", 10) == [(1, young)]
    assert backend.get_extras(meta, 0, [old]) == {}
    assert backend.get_extras(meta, 1, [young]) == {young: b"young"}


def test_truncate_and_delete_drop_the_extras(backend: PartitionStore) -> None:
    meta = new_queue(backend, 1)
    backend.put_extras(meta, [(0, MessageId(T0, 0), b"k", b"v")])
    new = backend.truncate_queue(meta.name)
    assert not backend.has_extras(new)
    assert backend.find_by_key(new, b"k", 10) == []
    assert backend.get_extras(new, 0, [MessageId(T0, 0)]) == {}
    backend.put_extras(new, [(0, MessageId(T0 + 1, 0), b"k", b"again")])  # usable at once
    assert backend.find_by_key(new, b"k", 10) == [(0, MessageId(T0 + 1, 0))]
    backend.delete_queue(meta.name)
    again = backend.create_queue(QueueMeta(meta.name, 1, 3600))
    assert not backend.has_extras(again)
    assert backend.find_by_key(again, b"k", 10) == []
