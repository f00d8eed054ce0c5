"""The embedded store's layout: column families (regions), keys of metadata and records.

Layout: a queue's partitions are split into regions as on HBase (``partitionsPerRegion``, by
default one partition each, at most ``MAX_FAMILIES_PER_QUEUE`` regions, ``FAMILY_BUDGET`` over all
queues), and each region is a
column family ``<name>@<generation>#<region>``, so truncate and re-create swap in fresh families
and drop the old ones at once. The default family holds queue metadata. Keys are the shared row
keys of :mod:`gateway.rowkey` (of a put's first message); a value is a put record
(records.py), or topic length + topic + body in data written before records.

Why regions: a partition only ever grows at its end, so in a family of its own new data never
overlaps older data and compaction writes each byte about once. One family for all partitions
made every flushed file (new rows of every partition) overlap the whole older key range:
compaction rewrote the stored backlog again and again (4.8x the flushed bytes with 10 million
messages stored, against 1.0x per partition), taking the CPU puts needed. Queues made before
regions existed (no ``families`` in their metadata) keep their one ``<name>@<generation>``
family until they are truncated.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from rocksdict import (
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Env,
    Options,
    Rdict,
)

from ...errors import InvalidArgument
from ..base import QueueMeta

if TYPE_CHECKING:
    from .state import _State
else:
    _State = object  # the mixins below are put together by EmbeddedStore (store.py)

log = logging.getLogger(__name__)

_META_PREFIX = b"queue\x00"
_GENERATION_KEY = b"generation"
# Small records (see PartitionStore.get_record): b"record\x00" + namespace + b"\x00" + key.
_RECORD_PREFIX = b"record\x00"
# Column families (regions) one queue gets at most; more partitions share them. RocksDB
# rewrites its whole OPTIONS file for every family it creates or drops, so the families of all
# queues together are capped too: past FAMILY_BUDGET a new queue gets one family (creating a
# queue then still takes milliseconds; 960 families made it take 2 s).
MAX_FAMILIES_PER_QUEUE = 16
FAMILY_BUDGET = 256
# Memtable memory of all families together; past it RocksDB flushes the largest.
MEMTABLES_BYTES = 256 << 20
# RocksDB's data block size. Queues are read in long runs of consecutive rows, so big blocks
# (fewer block loads and checks per message) read a stored backlog about 12 % faster than 4 KiB.
BLOCK_BYTES = 64 << 10
# A queue's compression (its ``hbase.hqueue.compression``, as on HBase; NONE unless given), one
# codec on every level of its families. A family only grows at its end, so RocksDB moves its
# files down the levels without rewriting them, but only between levels of one codec: with
# none on L0/L1 and LZ4 below, every byte was read, compressed and written again on its way to
# L2, a fifth of the gateway's CPU on puts (perf: CompactionJob) and a third of their rate.
# GZ and LZO are not in the RocksDB this store links: refused on create.
CODECS = {
    "NONE": ("none", "kNoCompression"),
    "LZ4": ("lz4", "kLZ4Compression"),
    "SNAPPY": ("snappy", "kSnappyCompression"),
    "ZSTD": ("zstd", "kZSTD"),
    "BZIP2": ("bz2", "kBZip2Compression"),
}


def compression_of(meta: QueueMeta) -> str:
    """The queue's codec (a key of CODECS, or one this store cannot use)."""
    return meta.config.get("hbase.hqueue.compression", "NONE").upper()


def check_compression(meta: QueueMeta) -> None:
    codec = compression_of(meta)
    if codec not in CODECS:
        raise InvalidArgument(
            "config['hbase.hqueue.compression']",
            f"the embedded store cannot compress with {codec}; use one of {', '.join(CODECS)}",
        )


# RocksDB's block cache, one per store for all its families (each family's table options made
# a 32 MiB cache of their own before: up to 8 GiB with FAMILY_BUDGET families). A flush puts the
# blocks of the file it writes into it (prepopulate_block_cache=kFlushOnly): with --direct-io the
# file is not in the page cache, and a consumer one memtable behind the producers read it from
# the disk (tests/perf/read_after_produce.py: 106 MB read for 1M messages, the read's CPU up by
# half). Made at its size, not resized: RocksDB shards a cache by its size at creation, and a
# 256 MiB cache shrunk to 8 MiB had shards too small to keep a 64 KiB block.
BLOCK_CACHE_BYTES = 256 << 20
# rocksdict has no setter for prepopulate_block_cache; RocksDB reads it from an options file
# (its INI format, documented in RocksDB's examples/rocksdb_option_file_example.ini).
_TABLE_OPTIONS_FILE = f"""[Version]
  rocksdb_version=9.8.4
  options_file_version=1.1
[DBOptions]
[CFOptions "default"]
[TableOptions/BlockBasedTable "default"]
  block_size={BLOCK_BYTES}
  prepopulate_block_cache=kFlushOnly
"""
TABLE_OPTIONS_DIR = "rocksdb-options"  # in the data dir, beside rocksdb/ and wal/


class TableOptions:
    """Options whose block-based table factory has BLOCK_BYTES blocks and the store's block
    cache, filled by flushes, for each family the store opens or creates.

    The options file is the store's own (``directory``), written once when missing or not
    the same: writing it to a fresh temp dir for every family made opening a store of 256
    families about 100 ms slower, and a file the store keeps does not depend on /tmp. Where it
    cannot be written (a full disk at the first start) the families get the same without
    prepopulating (reads of a just-flushed file then go to the page cache), and the store says
    so once."""

    def __init__(self, directory: Path, cache: Cache) -> None:
        self.directory = directory
        self.cache = cache
        self._file = directory / "OPTIONS-000001"
        self._written = False
        self._warned = False

    def _write(self) -> None:
        with contextlib.suppress(OSError):
            if self._file.read_text() == _TABLE_OPTIONS_FILE:
                return
        self.directory.mkdir(parents=True, exist_ok=True)
        # RocksDB takes only OPTIONS-<number> files for options: a torn temp file is ignored
        part = self.directory / "OPTIONS.writing"
        with open(part, "w") as out:
            out.write(_TABLE_OPTIONS_FILE)
            out.flush()
            os.fsync(out.fileno())
        os.replace(part, self._file)

    def options(self) -> Options:
        try:
            if not self._written:
                self._write()
                self._written = True
            _, families = Options.load_latest(str(self.directory), Env(), False, self.cache)
            return families["default"]
        except Exception as exc:  # OSError, or rocksdict's plain Exception
            self._written = False  # removed meanwhile? written again next time
            if not self._warned:
                self._warned = True
                log.warning(
                    "RocksDB's options file %s could not be written or loaded (%s): flushes "
                    "do not fill the block cache",
                    self._file,
                    exc,
                )
        opts = Options(raw_mode=True)
        table = BlockBasedOptions()
        table.set_block_size(BLOCK_BYTES)
        table.set_block_cache(self.cache)
        opts.set_block_based_table_factory(table)
        return opts


def _options(tables: TableOptions, direct_io: bool = False, compression: str = "NONE") -> Options:
    """RocksDB's options for the database (``direct_io`` applies there) and its families (of
    a queue compressed with ``compression``, a key of CODECS), with the store's ``tables``."""
    opts = tables.options()
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.increase_parallelism(2)
    opts.set_max_background_jobs(2)
    opts.set_db_write_buffer_size(MEMTABLES_BYTES)
    opts.set_compression_type(getattr(DBCompressionType, CODECS[compression][0])())
    if direct_io:
        # Flushes and compactions write past the page cache. Every message is written twice
        # (the message log, then a flushed table file) and the second copy into the page
        # cache cost a fifth of the gateway's CPU on puts (perf: copy_folio_from_iter_atomic
        # in RocksDB's flush thread). A flush fills the block cache instead (above); scans of
        # an older backlog read it through the page cache.
        opts.set_use_direct_io_for_flush_and_compaction(True)
    return opts


DIRECT_IO_CHOICES = ("auto", "on", "off")


def supports_direct_io(directory: Path) -> bool:
    """Whether files in ``directory`` can be written with O_DIRECT (not every filesystem
    takes it: RocksDB would then fail its first flush)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    probe = directory / ".direct-io-probe"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | flag, 0o600)
    except OSError:
        return False
    try:
        with mmap.mmap(-1, mmap.PAGESIZE) as block:  # page-aligned, as O_DIRECT wants
            os.write(fd, block)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            probe.unlink()


def families_for(meta: QueueMeta, in_use: int = 0) -> int:
    """How many column families (regions) a new generation of ``meta`` gets when the other
    queues have ``in_use``."""
    per_region = int(meta.config.get("hbase.hqueue.partitionsPerRegion", "1"))
    per_region = max(per_region, -(-meta.partitions // MAX_FAMILIES_PER_QUEUE))
    wanted = -(-meta.partitions // per_region)
    return wanted if in_use + wanted <= FAMILY_BUDGET else 1


class _Layout(NamedTuple):
    """Where a queue generation's partitions live: ``families`` column families of ``span``
    consecutive partitions each; ``legacy``: the one family of queues made before regions."""

    base: str  # <name>@<generation>
    generation: int
    families: int
    span: int
    legacy: bool
    compression: str = "NONE"  # a key of CODECS (compression_of, when this store can use it)

    @classmethod
    def of(cls, meta: QueueMeta, families: int | None) -> _Layout:
        base = f"{meta.name}@{meta.generation}"
        codec = compression_of(meta)
        if codec not in CODECS:  # stored before the store checked it: uncompressed, as it was
            codec = "NONE"
        if families is None:
            return cls(base, meta.generation, 1, max(1, meta.partitions), True, codec)
        span = -(-meta.partitions // families)
        return cls(base, meta.generation, families, span, False, codec)

    def names(self) -> list[str]:
        if self.legacy:
            return [self.base]
        return [f"{self.base}#{i}" for i in range(self.families)]

    def name_of(self, partition: int) -> str:
        return self.base if self.legacy else f"{self.base}#{partition // self.span}"


def _record_key(namespace: str, key: str) -> bytes:
    if "\x00" in namespace:
        raise ValueError("'namespace' must not contain NUL")
    return _RECORD_PREFIX + namespace.encode() + b"\x00" + key.encode()


class _Families(_State):
    """Opens, makes and drops the column families of queue generations; queue metadata."""

    def _require(self, name: str) -> QueueMeta:
        meta = self._queues.get(name)
        if meta is None:
            raise InvalidArgument("queueName", f"queue '{name}' does not exist")
        return meta

    def _family(self, meta: QueueMeta, partition: int) -> tuple[_Layout, tuple[Rdict, Any]]:
        """The column family (Rdict, handle) holding ``partition`` of ``meta``'s generation,
        and that generation's layout (floors and kept iterators are filed under its base)."""
        entry = self._families.get(meta.name)
        if entry is None or entry[0].generation != meta.generation:
            raise InvalidArgument(
                "queueName", f"queue '{meta.name}' was truncated or deleted meanwhile"
            )
        layout, families = entry
        return layout, families[partition // layout.span]

    def _families_in_use(self) -> int:
        return sum(layout.families for layout, _ in self._families.values())

    def _open_families(self, queue: str, layout: _Layout, *, create: bool) -> None:
        self._families[queue] = (layout, self._make_families(layout, create=create))

    def _make_families(self, layout: _Layout, *, create: bool = True) -> list[tuple[Rdict, Any]]:
        """Opens (creating them first when ``create``) the families of ``layout``.

        Creating or dropping a family makes RocksDB rewrite its OPTIONS file, tens of ms with a
        hundred families, holding the GIL: in the thread pool, one family per call, the loop
        gets the GIL back between two and no put waits for more than one (it waited for all
        32 of a 16-partition truncate, 0.7-1 s, on the loop)."""
        db = self._db_required()
        pool = gevent.get_hub().threadpool
        opened = []
        codec = layout.compression
        for name in layout.names():
            if create:
                options = _options(self._tables, compression=codec)
                self._db_call(pool.apply, db.create_column_family, (name, options))
            cf = self._db_call(db.get_column_family, name)
            if not create and codec != "NONE":
                # opened with the store's defaults (wedge.py): the queue's codec again, for
                # the files flushed from now on (this too rewrites the OPTIONS file)
                setting = {"compression": CODECS[codec][1]}
                self._db_call(pool.apply, cf.set_options, (setting,))
            opened.append((cf, self._db_call(db.get_column_family_handle, name)))
        return opened

    def _undo_families(self, layout: _Layout) -> None:
        """Drops what exists of ``layout``'s families (after a failed create or truncate); one
        that cannot be dropped now is an orphan the next start drops."""
        db = self._db_required()
        pool = gevent.get_hub().threadpool
        for name in layout.names():
            with contextlib.suppress(Exception):
                pool.apply(db.drop_column_family, (name,))

    def _drop_families(self, queue: str) -> None:
        entry = self._families.pop(queue, None)
        if entry is not None:
            self._drop(entry[0])

    def _drop(self, layout: _Layout) -> None:
        self._cursors.drop(layout.base)
        db = self._db_required()
        pool = gevent.get_hub().threadpool  # see _make_families
        for name in layout.names():
            self._db_call(pool.apply, db.drop_column_family, (name,))

    def _live_families(self) -> dict[str, tuple[Rdict, Any]]:
        """Every open column family by name: (its Rdict, its handle)."""
        live: dict[str, tuple[Rdict, Any]] = {}
        for layout, families in self._families.values():
            live.update(zip(layout.names(), families, strict=True))
        return live

    def _next_generation(self) -> int:
        db = self._db_required()
        raw = db.get(_GENERATION_KEY)
        generation = (int(raw) if raw else 0) + 1
        self._db_call(db.put, _GENERATION_KEY, str(generation).encode(), self._no_sync)
        self._await_sync()
        return generation

    def _save_meta(self, meta: QueueMeta) -> None:
        db = self._db_required()
        layout = self._families[meta.name][0]
        extra = {} if layout.legacy else {"families": layout.families}
        raw = meta.to_json(**extra)
        self._db_call(db.put, _META_PREFIX + meta.name.encode(), raw, self._no_sync)
        self._await_sync()
