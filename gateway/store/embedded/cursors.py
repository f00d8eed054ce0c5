"""Iterators kept between the chunks of a scan."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

log = logging.getLogger(__name__)


class _Cursors:
    """Iterators of scans that stopped at their row limit, kept for the call that goes on.

    A lagging consumer reads a partition in chunks (``messageScannerGetList``); a fresh RocksDB
    iterator per chunk seeks again in the memtables and in every level, which made reading a
    large backlog markedly slower than reading fresh data. An iterator pins the memtables and
    files it reads, so few are kept, briefly: at most ``MAX`` for at most ``MAX_AGE`` seconds,
    and none across a dropped column family.
    Keyed by (column family, partition, reverse) and the bound the next call starts from.
    """

    MAX = 256
    MAX_AGE = 5.0

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, int, bool, bytes], tuple[float, Any]] = OrderedDict()

    def take(self, slot: tuple[str, int, bool], start: bytes) -> Any:
        entry = self._kept.pop((*slot, start), None)
        if entry is None or time.monotonic() - entry[0] > self.MAX_AGE:
            return None
        return entry[1]

    def keep(self, slot: tuple[str, int, bool], start: bytes, items: Any) -> None:
        self.expire()
        kept = self._kept
        while len(kept) >= self.MAX:
            kept.popitem(last=False)
        kept[(*slot, start)] = (time.monotonic(), items)

    def expire(self) -> None:
        """Forgets the iterators too old to reuse, so none pins memory once scans stop."""
        kept = self._kept
        now = time.monotonic()
        while kept and now - next(iter(kept.values()))[0] > self.MAX_AGE:
            kept.popitem(last=False)

    def drop(self, family: str | None = None) -> None:
        """Forgets the iterators of ``family`` (all, if None)."""
        if family is None:
            self._kept.clear()
            return
        for key in [k for k in self._kept if k[0] == family]:
            del self._kept[key]
