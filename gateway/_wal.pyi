"""Type stubs for the C extension gateway/_wal.c."""

from collections.abc import Callable, Sequence
from typing import Any

def wal_cells(keys: list[bytes], topics: list[bytes], values: list[bytes]) -> bytes: ...
def put_wal_cells(
    put: Callable[[bytes, bytes, Any], object],
    handle: Any,
    cells: bytes | bytearray | memoryview,
) -> int: ...
def consecutive_keys(partition: int, timestamp: int, sequence: int, count: int) -> list[bytes]: ...
def scan_cells(
    items: Any,
    lower: bytes,
    upper: bytes,
    topics: frozenset[bytes] | set[bytes] | None,
    limit: int,
    budget: int,
    rows: list[tuple[int, int, bytes, bytes]],
    max_bytes: int,
) -> tuple[int, bytes | None, int, int]: ...

class Syncer:
    def __init__(self) -> None: ...
    def kick(self, fds: Sequence[int]) -> None: ...
    def finish(self) -> int | None: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...

KEY_LENGTH: int  # gateway/_rowkey.h's, checked by tests/unit/test_limits.py
MAX_SEQUENCE: int
MAX_PARTITION_ID: int
