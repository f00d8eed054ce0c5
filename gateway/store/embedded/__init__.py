"""The embedded store: RocksDB (through rocksdict) on local disk. ``store.py`` is its face and
says where each part lives."""

from .extras import EXTRAS_FAMILY
from .layout import FAMILY_BUDGET, MAX_FAMILIES_PER_QUEUE, families_for
from .messagelog import LOG_SEGMENTS_KEPT
from .store import EmbeddedStore

__all__ = [
    "EXTRAS_FAMILY",
    "FAMILY_BUDGET",
    "LOG_SEGMENTS_KEPT",
    "MAX_FAMILIES_PER_QUEUE",
    "EmbeddedStore",
    "families_for",
]
