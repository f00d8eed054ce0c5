"""Type stubs for the C extension gateway/_merge.c."""

def merge_rows(
    buffers: list[list[tuple[int, int, bytes, bytes]]],
    starts: list[int],
    more: list[bool],
    partitions: list[int],
    n: int,
    max_bytes: int,
    reverse: bool,
) -> tuple[list[tuple[int, int, bytes, bytes]], list[int], list[int], list[int], int]: ...
def merge_encoded(
    buffers: list[bytearray | bytes],
    offsets: list[int],
    counts: list[int],
    more: list[bool],
    out: list[bytearray | memoryview],
    n: int,
    max_bytes: int,
    reverse: bool,
    view_bytes: int,
    marks: list[bytearray | None] | None = None,  # scan_records' marks, per buffer
) -> tuple[list[int], list[int], list[int], list[int], int]: ...
