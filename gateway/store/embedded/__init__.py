"""The embedded store: RocksDB (through rocksdict) on local disk. See store.py."""

from .store import (
    EXTRAS_FAMILY,
    FAMILY_BUDGET,
    LOG_SEGMENTS_KEPT,
    MAX_FAMILIES_PER_QUEUE,
    EmbeddedStore,
    families_for,
)

__all__ = [
    "EXTRAS_FAMILY",
    "FAMILY_BUDGET",
    "LOG_SEGMENTS_KEPT",
    "MAX_FAMILIES_PER_QUEUE",
    "EmbeddedStore",
    "families_for",
]
