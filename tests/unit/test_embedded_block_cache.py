"""The embedded store's block cache: one for all families, filled by each flush.

With O_DIRECT flushes a new table file is not in the page cache; RocksDB's
``prepopulate_block_cache=kFlushOnly`` (set through an options file: gateway/store/embedded/
layout.py) puts its blocks in the block cache as the flush writes them, so a consumer shortly
behind its producers reads from memory instead of the disk. ``rchar`` in /proc/self/io counts
the bytes this process read through read calls (page cache or disk), which is what the cache
saves.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.config import GatewayConfig
from gateway.ids import wall_clock_ms
from gateway.rowkey import MessageId
from gateway.store.base import PutBatch, QueueMeta
from gateway.store.embedded import EmbeddedStore, layout
from tests.helpers import rocksdb_option

PUTS, PER_PUT, BODY = 8, 1000, 1000  # 8 MB of bodies
DATA = PUTS * PER_PUT * BODY


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("/proc/self/io has no rchar")


def _fill_and_flush(s: EmbeddedStore) -> QueueMeta:
    meta = s.create_queue(QueueMeta("q", 1, 3600))
    t0 = wall_clock_ms()
    for i in range(PUTS):
        values = [bytes([65 + i]) * BODY] * PER_PUT
        s.put(meta, [PutBatch(0, MessageId(t0 + i, 0), [b"t"] * PER_PUT, values)])
    s._families["q"][1][0][0].flush(True)
    assert list(s.path.glob("*.sst")), "the flush wrote no table file"
    return meta


def _read_everything(s: EmbeddedStore, meta: QueueMeta) -> tuple[int, int]:
    """(messages, bytes of bodies) read from partition 0 in scanner-sized chunks."""
    reader = s.reader(meta, 0, None, None, reverse=False, topics=None)
    count = size = 0
    while True:
        r = reader.read(1000)
        count += len(r.rows)
        size += sum(len(row[3]) for row in r.rows)
        if r.done:
            reader.close()
            return count, size


def _table_option(path: Path, name: str) -> list[str]:
    return rocksdb_option(path, name, "TableOptions/BlockBasedTable")


@pytest.mark.parametrize("cache_mib", [256, 1])
def test_a_just_flushed_file_is_read_from_the_block_cache(tmp_path: Path, cache_mib: int) -> None:
    """256 MiB: the flush filled the cache and reading its 8 MB back reads (almost) nothing
    through read calls. 1 MiB (the control, proving the measure can fail): the file does not
    fit, so the read fetches it through the page cache."""
    s = EmbeddedStore(tmp_path, direct_io="on", block_cache_bytes=cache_mib << 20)
    s.start()
    try:
        meta = _fill_and_flush(s)
        every = _table_option(s.path, "prepopulate_block_cache")
        assert len(every) >= 2 and set(every) == {"kFlushOnly"}, every  # default + the queue's
        assert set(_table_option(s.path, "block_size")) == {str(layout.BLOCK_BYTES)}
        before = _rchar()
        assert _read_everything(s, meta) == (PUTS * PER_PUT, DATA)
        read = _rchar() - before
        held = s.block_cache_bytes()
        assert held <= cache_mib << 20  # the cache's memory stays within its size
        if cache_mib == 256:
            assert read < DATA // 8, f"{read} bytes read through read calls"
            assert held > DATA * 0.9  # the flushed file, all of it
        else:
            assert read > DATA // 2, f"only {read} bytes read through read calls"
    finally:
        s.stop()


def test_where_the_options_file_cannot_be_written_the_store_opens_without_prepopulating(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The options file is the store's own (``rocksdb-options/`` in its data dir); where it
    cannot be written (here a file stands where its directory goes, as a full disk at the
    first start would refuse it) the store still opens, with the same block size and shared
    cache, and says so once, not once per family."""
    data = tmp_path / "data"
    data.mkdir()
    (data / layout.TABLE_OPTIONS_DIR).write_text("not a directory")
    s = EmbeddedStore(data)
    with caplog.at_level(logging.WARNING, logger=layout.__name__):
        s.start()
    try:
        meta = _fill_and_flush(s)
        s.create_queue(QueueMeta("more", 4, 3600))  # four more families
        warned = [r for r in caplog.records if "flushes do not fill the block cache" in r.message]
        assert len(warned) == 1, caplog.text
        assert set(_table_option(s.path, "prepopulate_block_cache")) == {"kDisable"}
        assert set(_table_option(s.path, "block_size")) == {str(layout.BLOCK_BYTES)}
        assert _read_everything(s, meta) == (PUTS * PER_PUT, DATA)
    finally:
        s.stop()


def test_the_options_file_is_written_once_and_rewritten_only_when_it_differs(
    tmp_path: Path,
) -> None:
    """Written at the first start, then kept: a restart (or a full disk by then) does not
    write it again; a torn or older file is replaced, and a temp file a crash left behind is
    not taken for options."""
    written = tmp_path / layout.TABLE_OPTIONS_DIR / "OPTIONS-000001"
    s = EmbeddedStore(tmp_path)
    s.start()
    s.create_queue(QueueMeta("q", 8, 3600))
    s.stop()
    first = written.stat()
    assert written.read_text() == layout._TABLE_OPTIONS_FILE
    (written.parent / "OPTIONS.writing").write_text("[Version]\n  garbage")  # a crash's
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        assert set(_table_option(s.path, "prepopulate_block_cache")) == {"kFlushOnly"}
    finally:
        s.stop()
    assert (written.stat().st_ino, written.stat().st_mtime_ns) == (
        first.st_ino,
        first.st_mtime_ns,
    )
    written.write_text(layout._TABLE_OPTIONS_FILE[:40])  # torn mid-write, or another version
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        assert written.read_text() == layout._TABLE_OPTIONS_FILE
        assert set(_table_option(s.path, "prepopulate_block_cache")) == {"kFlushOnly"}
    finally:
        s.stop()


def test_the_block_cache_size_is_checked_and_the_flag_defaults_to_the_store_s() -> None:
    assert GatewayConfig().block_cache_bytes == layout.BLOCK_CACHE_BYTES
    with pytest.raises(ValueError, match="'block_cache_bytes' must be at least 1 MiB"):
        EmbeddedStore("/nonexistent", block_cache_bytes=1000)
