"""The readers that keep a RocksDB iterator between reads, bounded in number and age."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Protocol

log = logging.getLogger(__name__)


class _Holder(Protocol):
    family: str  # the base of the column families it reads

    def _drop_iterator(self) -> None: ...


class _Cursors:
    """Readers holding the iterator of a read that stopped at its row limit, for the read
    that goes on.

    A lagging consumer reads a partition in chunks (``messageScannerGetList``); a fresh RocksDB
    iterator per chunk seeks again in the memtables and in every level, which made reading a
    large backlog markedly slower than reading fresh data. An iterator pins the memtables and
    files it reads, so few are kept, briefly: at most ``MAX`` for at most ``MAX_AGE`` seconds,
    and none across a dropped column family. The reader keeps its position; when its iterator
    goes it opens a new one there.
    """

    MAX = 256
    MAX_AGE = 5.0

    def __init__(self) -> None:
        self._kept: OrderedDict[_Holder, float] = OrderedDict()  # reader -> when it kept one

    def take(self, reader: _Holder) -> bool:
        """Whether ``reader`` may go on with its iterator (kept, and not too old); it is no
        longer counted here until it keeps one again."""
        at = self._kept.pop(reader, None)
        return at is not None and time.monotonic() - at <= self.MAX_AGE

    def keep(self, reader: _Holder) -> None:
        self.expire()
        kept = self._kept
        kept.pop(reader, None)
        while len(kept) >= self.MAX:
            kept.popitem(last=False)[0]._drop_iterator()
        kept[reader] = time.monotonic()

    def forget(self, reader: _Holder) -> None:
        self._kept.pop(reader, None)

    def expire(self) -> None:
        """Drops the iterators too old to reuse, so none pins memory once reads stop."""
        kept = self._kept
        now = time.monotonic()
        while kept and now - next(iter(kept.values())) > self.MAX_AGE:
            kept.popitem(last=False)[0]._drop_iterator()

    def drop(self, family: str | None = None) -> None:
        """Drops the iterators of readers of ``family`` (all, if None)."""
        for reader in [r for r in self._kept if family is None or r.family == family]:
            del self._kept[reader]
            reader._drop_iterator()

    def __len__(self) -> int:
        return len(self._kept)
