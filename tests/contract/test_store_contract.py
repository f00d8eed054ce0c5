"""What every store must do: one suite, run over every ``PartitionStore`` backend.

``gateway/store/memory.py`` is the reference; the embedded store and HBase must behave the same
through the interface of ``gateway/store/base.py``. ``memory-3`` is the memory store stopping
every scan after three examined rows, so each test also covers callers that continue from
``resume_after``. The ``hbase`` parameter needs a real HBase (``hbase_url``: started once per
session by ``scripts/hbase-local`` unless ``$HQUEUE_TEST_HBASE`` names one); leave it out with
``-m "not hbase"``.

What is *not* part of the contract (and so not tested here): what a scan does with stale
metadata (a truncated or deleted generation), replacing a row by putting its key again, and
how expired rows are reclaimed (HBase by cell timestamp, embedded by its sweeper, memory on
put). TTL is enforced for every store by the readers clamping the range (see
``test_expired_rows_are_hidden_from_scanners``).
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
    store.put(meta, [PutBatch(partition, keys, tops, values)])
    return [(*rowkey.decode(k)[1:], t, v) for k, t, v in zip(keys, tops, values, strict=True)]


def read(
    store: PartitionStore,
    meta: QueueMeta,
    partition: int,
    *,
    lower: bytes | None = None,
    upper: bytes | None = None,
    reverse: bool = False,
    topics: frozenset[bytes] | None = None,
    limit: int = 10_000,
    max_bytes: int | None = None,
) -> list[Row]:
    """Reads a range to its end the way every caller does: continue after ``resume_after``
    (before it, when reversed), which must move on at every step."""
    lower = rowkey.partition_start(partition) if lower is None else lower
    upper = rowkey.partition_end(partition) if upper is None else upper
    out: list[Row] = []
    for _ in range(10_000):
        r = store.scan(
            meta, partition, lower, upper,
            reverse=reverse, topics=topics, limit=limit, max_bytes=max_bytes,
        )  # fmt: skip
        assert len(r.rows) <= limit
        assert r.size >= sum(len(row[2]) + len(row[3]) for row in r.rows)
        out += r.rows
        if r.resume_after is None:
            return out
        if r.rows:  # the position covers what was returned
            last = rowkey.id_key(partition, MessageId(r.rows[-1][0], r.rows[-1][1]))
            assert r.resume_after <= last if reverse else r.resume_after >= last
        if reverse:
            assert r.resume_after < upper
            upper = r.resume_after
        else:
            assert r.resume_after >= lower
            lower = r.resume_after + b"\x00"  # keys are fixed-length: the next key after it
    raise AssertionError("the scan never reached its end")


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
    odd = [rowkey.encode(1, T0 + 7, 3), rowkey.encode(1, T0 + 9, 0)]
    backend.put(
        meta,
        [
            PutBatch(1, odd, [b"\x00\xff", b"t:2"], [b"", b"\x00\x01\xfe"]),
            PutBatch(2, [rowkey.encode(2, T0 + 2, 0)], [b"c"], [b"x" * 70_000]),
            PutBatch(0, [], [], []),  # an empty batch is nothing to write
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
    """A store stops early on ``max_bytes``, and reading on from ``resume_after`` gets every
    row once."""
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
    keys = rowkey.consecutive_keys(0, T0, 0, 60)
    values = [b"%04d" % i + bytes(10_000) for i in range(60)]
    backend.put(meta, [PutBatch(0, keys, [b"t"] * 60, values)])
    lower, upper = rowkey.partition_start(0), rowkey.partition_end(0)
    row = 1 + 10_004
    for reverse in (False, True):
        got: list[bytes] = []
        at_lower, at_upper = lower, upper
        for _ in range(60):
            r = backend.scan(
                meta, 0, at_lower, at_upper,
                reverse=reverse, topics=None, limit=1000, max_bytes=3 * row,
            )  # fmt: skip
            assert len(r.rows) <= 3  # 3 rows reach max_bytes
            assert r.rows or r.resume_after is None  # at least one row, but at the end
            got += [v for *_, v in r.rows]
            scans = getattr(backend, "_scans", None)  # HBase: what it read ahead
            if scans is not None:  # (its first chunk, before it knows a row's size: 16 rows)
                held = sum(len(v) for e in scans._open.values() for *_, v in e.buffer)
                assert held <= 16 * row
            if r.resume_after is None:
                break
            if reverse:
                at_upper = r.resume_after
            else:
                at_lower = r.resume_after + b"\x00"
        assert got == (values[::-1] if reverse else values)


def test_a_full_chunk_says_where_to_go_on(backend: PartitionStore) -> None:
    meta = new_queue(backend, 1)
    rows = put(backend, meta, 0, T0, 10)
    lower, upper = rowkey.partition_start(0), rowkey.partition_end(0)
    r = backend.scan(meta, 0, lower, upper, reverse=False, topics=None, limit=4)
    assert r.rows == rows[: len(r.rows)] and r.resume_after is not None
    r = backend.scan(meta, 0, lower, upper, reverse=False, topics=None, limit=100)
    assert r.rows == rows[: len(r.rows)]
    if r.resume_after is None:  # the whole range in one call: nothing can be left out
        assert r.rows == rows


def test_lower_is_inclusive_and_upper_exclusive(backend: PartitionStore) -> None:
    meta = new_queue(backend, 2)
    rows = put(backend, meta, 1, T0, 10)
    put(backend, meta, 0, T0, 10)

    def key(i: int) -> bytes:
        return rowkey.id_key(1, MessageId(rows[i][0], rows[i][1]))

    for reverse in (False, True):
        got = read(backend, meta, 1, lower=key(3), upper=key(7), reverse=reverse)
        assert got == (rows[3:7][::-1] if reverse else rows[3:7])
        got = read(backend, meta, 1, lower=key(3) + b"\x00", upper=key(7) + b"\x00")
        assert got == rows[4:8]
        assert read(backend, meta, 1, lower=key(5), upper=key(5), reverse=reverse) == []
        assert read(backend, meta, 1, lower=key(6), upper=key(2), reverse=reverse) == []
        assert read(backend, meta, 1, upper=key(1), reverse=reverse) == rows[:1]
        assert read(backend, meta, 1, lower=key(9), reverse=reverse) == rows[9:]


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
