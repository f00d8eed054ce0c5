"""Type stubs for the C extension gateway/_wirecheck.c."""

from collections.abc import Iterable, Sequence

def scan(
    buffer: bytes | bytearray | memoryview,
    compact: bool,
    state: bytes | None,
    max_string: int,
    max_container: int,
    max_values: int,
) -> tuple[int, int, bytes | None, bytes | None]: ...

# topics and values: Spans (gateway/_spans.h), read-only sequences of bytes over ``message``
def extract_put(
    message: bytes | bytearray | memoryview, with_pid: bool, single: bool, max_value: int
) -> tuple[int, bytes, int | None, Sequence[bytes], Sequence[bytes]] | None: ...
def total_bytes(strings: Iterable[bytes]) -> int: ...
def encode_messages_reply(
    name: bytes,
    seqid: int,
    partitions: int | list[int],
    rows: list[tuple[int, int, bytes, bytes]],
) -> bytes: ...
