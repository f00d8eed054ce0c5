"""Type stubs for the C extension hqueue/toolkit/_fastjsonl.c (its twin: _purejsonl.py)."""

def encode_block(
    block: bytes | bytearray | memoryview,
    first: int,
    queue: bytes,
    batch_size: int,
    topic_partitions: int,
) -> list[tuple[int | None, bytes, range | list[int]]] | None: ...
def count_lines(block: bytes | bytearray | memoryview) -> int: ...
