"""Type stubs for the C extension gateway/_wirecheck.c."""

from typing import Any

def scan(
    buffer: bytes | bytearray | memoryview,
    compact: bool,
    state: bytes | None,
    max_string: int,
    max_container: int,
    max_values: int,
) -> tuple[int, int, bytes | None, bytes | None]: ...
def extract_put(
    message: bytes, with_pid: bool, single: bool, max_value: int
) -> tuple[int, bytes, int | None, list[bytes], list[bytes]] | None: ...
def encode_messages_reply(
    name: bytes,
    seqid: int,
    partitions: int | list[int],
    rows: list[tuple[int, int, bytes, bytes]],
) -> bytes: ...
def consecutive_keys(partition: int, timestamp: int, sequence: int, count: int) -> list[bytes]: ...
def encode_mutate_rows(
    table: bytes, prefix: bytes, keys: list[bytes], topics: list[bytes], values: list[bytes]
) -> bytes: ...
def decode_rows_reply(
    message: bytes | bytearray | memoryview, prefix_len: int
) -> tuple[list[tuple[int, int, bytes, bytes]], int] | None: ...
def merge_rows(
    buffers: list[list[tuple[int, int, bytes, bytes]]],
    more: list[bool],
    partitions: list[int],
    n: int,
    max_bytes: int,
    reverse: bool,
) -> tuple[list[tuple[int, int, bytes, bytes]], list[int], list[int], list[int], int]: ...
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
