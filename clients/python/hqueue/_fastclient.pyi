"""Type stubs for the C extension hqueue/_fastclient.c (its twin: hqueue/_purecodec.py)."""

from collections.abc import Sequence
from typing import Any

def setup(message: type, message_id: type, invalid_argument: type) -> None: ...
def encode_put(
    seqid: int, queue: bytes, partition: int, messages: Sequence[Any], base_index: int
) -> bytes: ...
def encode_put_lists(
    seqid: int,
    queue: bytes,
    partition: int,
    topics: bytes | str | Sequence[Any],
    values: Sequence[Any],
    base_index: int,
) -> bytes: ...
def decode_list_reply(buffer: bytes | bytearray | memoryview) -> tuple[int, list[Any]] | int: ...
def message_end(buffer: bytes | bytearray | memoryview) -> int: ...
