"""Type stubs for the C extension gateway/store/_hbasecodec.c."""

from collections.abc import Sequence

def decode_rows_reply(
    message: bytes | bytearray | memoryview, prefix_len: int
) -> tuple[list[tuple[int, int, bytes, bytes]], int] | None: ...
def encode_mutate_rows(
    table: bytes,
    prefix: bytes,
    keys: list[bytes],
    topics: Sequence[bytes],  # lists, or extract_put's Spans (another sequence: TypeError)
    values: Sequence[bytes],
) -> bytes: ...

KEY_LENGTH: int  # gateway/_rowkey.h's
