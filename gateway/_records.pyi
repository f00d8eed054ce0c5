"""Type stubs for the C extension gateway/_records.c."""

from collections.abc import Sequence
from typing import Any

def wal_records(
    partition: int,
    timestamp: int,
    sequence: int,
    topics: Sequence[bytes],  # lists, or extract_put's Spans (another sequence: TypeError)
    values: Sequence[bytes],
    max_count: int,
    max_bytes: int,
) -> tuple[bytes, int]: ...
def scan_records(
    items: Any,
    held: tuple[bytes, bytes] | None,
    lower: bytes,
    upper: bytes,
    topics: frozenset[bytes] | set[bytes] | None,
    limit: int,
    budget: int,
    rows: list[tuple[int, int, bytes, bytes]] | bytearray,
    max_bytes: int,
    reverse: bool,
    marks: bytearray | None = None,  # the page's segments (gateway/_marks.h)
) -> tuple[int, bytes | None, int, int, tuple[bytes, bytes] | None, int, bytes | None, int]: ...

RECORD_VERSION: int  # checked against gateway/store/embedded/records.py by the unit tests
