"""The embedded store's write-ahead log for messages.

Why a log of our own rather than RocksDB's: a durable put must wait for one fdatasync, and with
RocksDB's log that sync can only start once ``write`` has returned, after the memtable insert;
the write also costs about 0.15 ms per 1000 messages in the log's own copy and checksum, with the
GIL held. Here a put appends its record (one ``pwritev``), starts the sync on the C thread of
:class:`gateway._wal.Syncer` and fills the memtable (``disable_wal``) while the disk works. And
the log's files are reused: rewriting blocks a file already has is synced in about 0.11 ms on
this machine's virtual disk, growing a file in about 0.25 ms (the size must be journalled too).

Files: ``segment-<n>.log`` of about ``segment_bytes`` each, and ``checkpoint``. A record is a
header (payload length u32, CRC-32 of the rest u32, epoch u64, LSN u64; little-endian) and its
payload. LSNs count records, one after the other, across segments. Once RocksDB has flushed the
memtables that hold a segment's messages to its files (the store calls :meth:`release` after
``flush``), ``checkpoint`` records that LSN and the segment is reused from its start.

Recovery replays, in LSN order, the records after the checkpoint's LSN written in the
checkpoint's epoch, and stops at the first one missing: a torn or unsynced tail was never
acknowledged. Then the epoch goes up, so that whatever a crash left past that point (records
that were written but never synced) can never be mistaken for later records. Replaying a record
whose rows RocksDB already has writes the same bytes again: harmless.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from pathlib import Path

try:  # the same CRC-32 as zlib's, with carry-less multiplication (SIMD): 2.2 us per 100 KB
    # record against zlib's 31 us on this project's 2-core VM, 8 % of the event loop on puts
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - the gateway extra installs zlib-ng
    from zlib import crc32

log = logging.getLogger(__name__)

SEGMENT_BYTES = 64 << 20
# On a nearly full disk segments shrink to a share of the free space (the log holds up to about
# nine), but not below this: 64 MiB segments (and zero-filled spares) on a disk with 40 MiB free
# failed every put and wrote ~50x the data in attempts.
MIN_SEGMENT_BYTES = 1 << 20
_FREE_SHARE = 16
# Segments kept for reuse once released; more are deleted.
MAX_SPARES = 2
_HEADER = struct.Struct("<IIQQ")  # payload length, crc32(epoch, lsn, payload), epoch, lsn
_CHECKPOINT = struct.Struct("<QQI")  # lsn, epoch, crc32 of both
_NAME = re.compile(r"segment-(\d+)\.log")
_ZEROS = bytes(1 << 20)


class LogError(Exception):
    """The log cannot be written or read; the message says which file and why."""


class _Segment:
    __slots__ = ("fd", "last_lsn", "number", "path", "size", "used")

    def __init__(self, path: Path, number: int, fd: int, size: int) -> None:
        self.path = path
        self.number = number
        self.fd = fd
        self.size = size  # bytes the file has (rewriting them needs no size change)
        self.used = 0  # bytes of records written since it became active
        self.last_lsn = 0


class WriteAheadLog:
    """Not thread-safe: the event loop appends; only :meth:`make_spare` and
    :meth:`write_checkpoint` are meant for a worker thread, and they change nothing the loop
    reads."""

    def __init__(self, directory: str | os.PathLike[str], segment_bytes: int = SEGMENT_BYTES):
        if segment_bytes < 4096:
            raise ValueError("'segment_bytes' must be at least 4096")
        self.dir = Path(directory)
        self.configured_bytes = segment_bytes
        self.segment_bytes = segment_bytes  # the size in use: see _fit_to_disk
        self.epoch = 0
        self.last_lsn = 0  # the last record appended (or replayed)
        self.checkpoint_lsn = 0
        self._segments: list[_Segment] = []  # every open file
        self._active: _Segment | None = None
        self._closed: list[_Segment] = []  # written, not yet released, oldest first
        self._spares: list[_Segment] = []
        self._unsynced: dict[int, None] = {}  # fds written since the last take_unsynced()
        self._next_number = 0

    # -- recovery and start ---------------------------------------------------------------

    def recover(self) -> list[tuple[int, bytes]]:
        """Opens the directory and returns the records to replay, (lsn, payload), in order."""
        self.dir.mkdir(parents=True, exist_ok=True)
        lsn, epoch = self._read_checkpoint()
        found: dict[int, bytes] = {}
        for path in sorted(self.dir.iterdir()):
            m = _NAME.fullmatch(path.name)
            if m is None:
                continue
            number = int(m.group(1))
            self._next_number = max(self._next_number, number + 1)
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            seg = _Segment(path, number, fd, os.fstat(fd).st_size)
            self._segments.append(seg)
            for record_lsn, payload in _records(path, epoch):
                if record_lsn > lsn:
                    found[record_lsn] = payload
        replay = []
        while lsn + 1 in found:
            lsn += 1
            replay.append((lsn, found[lsn]))
        self.epoch, self.last_lsn, self.checkpoint_lsn = epoch, lsn, lsn
        if len(found) > len(replay):
            log.warning(
                "write-ahead log: %d record(s) after LSN %d were never synced; ignored",
                len(found) - len(replay),
                lsn,
            )
        return replay

    def start(self) -> None:
        """Begins a new epoch after :meth:`recover` (whose records the caller has made
        durable elsewhere): every segment is free to be rewritten."""
        self.epoch += 1
        self.write_checkpoint(self.last_lsn, self.epoch)
        self.checkpoint_lsn = self.last_lsn
        self._spares = sorted(self._segments, key=lambda s: s.number)
        while len(self._spares) > MAX_SPARES + 1:
            self._delete(self._spares.pop())
        self._activate()

    def close(self) -> None:
        for seg in self._segments:
            os.close(seg.fd)
        self._segments.clear()
        self._spares.clear()
        self._closed.clear()
        self._unsynced.clear()
        self._active = None

    # -- writing --------------------------------------------------------------------------

    def append(self, parts: list[bytes]) -> int | None:
        """Writes one record, the concatenation of ``parts`` (not synced). When the active
        segment was full and is closed first, returns its last LSN: once RocksDB's files hold
        everything up to it, the caller writes the checkpoint and hands it to :meth:`release`."""
        seg = self._active
        if seg is None:
            raise LogError("the write-ahead log is not open")
        closed: int | None = None
        if len(parts) > 64:  # pwritev takes at most IOV_MAX (1024) buffers
            parts = [b"".join(parts)]
        size = sum(len(part) for part in parts)
        length = _HEADER.size + size
        if seg.used and seg.used + length > self.segment_bytes:
            self._closed.append(seg)
            closed = seg.last_lsn
            self._activate()
            seg = self._active
            assert seg is not None
        lsn = self.last_lsn + 1
        head = struct.pack("<QQ", self.epoch, lsn)
        crc = crc32(head)
        for part in parts:
            crc = crc32(part, crc)
        header = _HEADER.pack(size, crc, self.epoch, lsn)
        try:
            written = os.pwritev(seg.fd, [header, *parts], seg.used)
        except OSError as exc:
            raise LogError(f"writing {seg.path}: {exc}") from exc
        if written != length:
            raise LogError(f"writing {seg.path}: short write ({written} of {length} bytes)")
        seg.used += length
        seg.size = max(seg.size, seg.used)
        seg.last_lsn = self.last_lsn = lsn
        self._unsynced[seg.fd] = None
        return closed

    def take_unsynced(self) -> list[int]:
        """The descriptors written since the last call: what the next sync must cover."""
        fds = list(self._unsynced)
        self._unsynced.clear()
        return fds

    def wants_spare(self) -> bool:
        """Whether a zero-filled segment should be made ready (see :meth:`make_spare`)."""
        seg = self._active
        return (
            not self._spares
            and seg is not None
            and seg.used > self.segment_bytes // 4
            and seg.size < 2 * self.segment_bytes  # not for a log of only huge records
        )

    def reserve_number(self) -> int:
        number = self._next_number
        self._next_number += 1
        return number

    def make_spare(self, number: int) -> tuple[Path, int, int]:
        """Creates segment ``number`` (from :meth:`reserve_number`) full of zeros, synced, in a
        worker thread: rewriting it later is cheaper to sync than growing a file. Hand the
        result to :meth:`add_spare`."""
        path = self.dir / f"segment-{number:08d}.log"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            for offset in range(0, self.segment_bytes, len(_ZEROS)):
                os.pwrite(fd, _ZEROS[: self.segment_bytes - offset], offset)
            os.fdatasync(fd)
            _sync_dir(self.dir)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        return path, number, fd

    def add_spare(self, made: tuple[Path, int, int]) -> None:
        path, number, fd = made
        seg = _Segment(path, number, fd, os.fstat(fd).st_size)
        self._segments.append(seg)
        self._spares.append(seg)

    # -- release --------------------------------------------------------------------------

    def write_checkpoint(self, lsn: int, epoch: int | None = None) -> None:
        """Records durably that every record up to ``lsn`` is in RocksDB's files."""
        epoch = self.epoch if epoch is None else epoch
        body = struct.pack("<QQ", lsn, epoch)
        tmp = self.dir / "checkpoint.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, _CHECKPOINT.pack(lsn, epoch, crc32(body)))
            os.fdatasync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.dir / "checkpoint")
        _sync_dir(self.dir)

    def release(self, lsn: int) -> None:
        """After :meth:`write_checkpoint` of ``lsn``: the closed segments it covers are
        reused."""
        self.checkpoint_lsn = max(self.checkpoint_lsn, lsn)
        while self._closed and self._closed[0].last_lsn <= lsn:
            seg = self._closed.pop(0)
            if len(self._spares) < MAX_SPARES and seg.size <= 2 * self.segment_bytes:
                self._spares.append(seg)
            else:
                self._delete(seg)

    # -- helpers --------------------------------------------------------------------------

    def _fit_to_disk(self) -> None:
        """Sizes the next segments to the free space found (and says so when that changes)."""
        try:
            st = os.statvfs(self.dir)
        except OSError:
            return
        free = st.f_bavail * st.f_frsize
        share = free // _FREE_SHARE // 4096 * 4096
        size = min(self.configured_bytes, max(MIN_SEGMENT_BYTES, share))
        if size != self.segment_bytes:
            log.warning(
                "write-ahead log: %d MiB free in %s; segments of %d KiB from now on "
                "(configured: %d KiB)",
                free >> 20,
                self.dir,
                size >> 10,
                self.configured_bytes >> 10,
            )
            self.segment_bytes = size

    def _activate(self) -> None:
        self._fit_to_disk()
        if self._spares:
            seg = self._spares.pop(0)
        else:  # none ready: a new file, growing as it is written
            number = self.reserve_number()
            path = self.dir / f"segment-{number:08d}.log"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            _sync_dir(self.dir)  # a record synced in it must be found after a power loss
            seg = _Segment(path, number, fd, 0)
            self._segments.append(seg)
        seg.used = 0
        seg.last_lsn = self.last_lsn
        self._active = seg

    def _delete(self, seg: _Segment) -> None:
        os.close(seg.fd)
        self._unsynced.pop(seg.fd, None)
        self._segments.remove(seg)
        seg.path.unlink(missing_ok=True)

    def _read_checkpoint(self) -> tuple[int, int]:
        path = self.dir / "checkpoint"
        if not path.exists():
            return 0, 0
        raw = path.read_bytes()
        if len(raw) != _CHECKPOINT.size:
            raise LogError(f"{path} is damaged ({len(raw)} bytes, expected {_CHECKPOINT.size})")
        lsn, epoch, crc = _CHECKPOINT.unpack(raw)
        if crc32(raw[:16]) != crc:
            raise LogError(f"{path} is damaged (checksum mismatch)")
        return lsn, epoch


def _records(path: Path, epoch: int) -> list[tuple[int, bytes]]:
    """The valid records of one segment written in ``epoch``, from its start up to the first
    that is torn, of another epoch, or not the next LSN."""
    data = path.read_bytes()
    out: list[tuple[int, bytes]] = []
    offset, previous = 0, None
    while offset + _HEADER.size <= len(data):
        length, crc, record_epoch, lsn = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        if length == 0 or start + length > len(data) or record_epoch != epoch:
            break
        payload = data[start : start + length]
        if crc32(payload, crc32(data[offset + 8 : start])) != crc:
            break
        if previous is not None and lsn != previous + 1:
            break
        out.append((lsn, payload))
        previous, offset = lsn, start + length
    return out


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
