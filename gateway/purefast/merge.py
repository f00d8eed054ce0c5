"""The merges of merged scans (gateway/_merge.c)."""

from __future__ import annotations

import heapq
import struct

from .common import Row

# ---- merged scans (gateway/_merge.c, merge_rows) ------------------------------------------


def merge_rows(
    buffers: list[list[Row]],
    starts: list[int],
    more: list[bool],
    partitions: list[int],
    n: int,
    max_bytes: int,
    reverse: bool,
) -> tuple[list[Row], list[int], list[int], list[int], int]:
    """gateway/_merge.c's merge_rows: merges the partitions' buffered rows (each from its
    ``starts[i]`` on) in (timestamp, sequence, partition) order (reversed with ``reverse``)
    until n rows, max_bytes of topics and values, or a buffer that may have more runs dry."""
    k = len(buffers)
    if len(starts) != k or len(more) != k or len(partitions) != k:
        raise ValueError("buffers, starts, more and partitions differ in length")
    sign = -1 if reverse else 1
    heap: list[tuple[int, int, int, int]] = []
    for c, buf in enumerate(buffers):
        if not isinstance(buf, list):
            raise TypeError("buffers must be lists")
        if not 0 <= starts[c] <= len(buf):
            raise ValueError("a start is outside its buffer")
        if starts[c] < len(buf):
            ts, seq = buf[starts[c]][0], buf[starts[c]][1]
            heap.append((sign * ts, sign * seq, sign * partitions[c], sign * c))
    heapq.heapify(heap)
    at = list(starts)
    bytes_at = [0] * k
    rows: list[Row] = []
    parts: list[int] = []
    size = 0
    while heap and len(rows) < n and size < max_bytes:
        c = sign * heap[0][3]
        buf = buffers[c]
        row = buf[at[c]]
        rows.append(row)
        parts.append(partitions[c])
        b = len(row[2]) + len(row[3])
        size += b
        bytes_at[c] += b
        at[c] += 1
        if at[c] < len(buf):
            nxt = buf[at[c]]
            heapq.heapreplace(heap, (sign * nxt[0], sign * nxt[1], heap[0][2], heap[0][3]))
            continue
        if more[c]:
            break  # its next rows are unknown: refill before going on
        heapq.heappop(heap)
    return rows, parts, [a - s for a, s in zip(at, starts, strict=True)], bytes_at, size


_ENC_HEAD = struct.Struct(">B2xB2xq3xh4xh3xi")  # a TMessage's first 32 bytes (_thriftbuf.h)


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
    marks: list[bytearray | None] | None = None,
) -> tuple[list[int], list[int], list[int], list[int], int]:
    """gateway/_merge.c's merge_encoded: merges the partitions' encoded TMessages (``counts[i]``
    of them in ``buffers[i]`` from ``offsets[i]`` on) in (timestamp, sequence, partition) order
    (reversed with ``reverse``), until n messages, max_bytes of topics and values, or a buffer
    that may have more runs dry, onto the parts list ``out``: runs of ``view_bytes`` or more as
    memoryviews of their buffer, shorter ones copied into the bytearray ending ``out``;
    -> (taken, offsets, sizes, lasts, bodies). ``marks`` (the pages' segments, from
    scan_records) only spare the C a walk over the messages: the answer is the same without,
    and this twin walks them."""
    k = len(buffers)
    if (
        len(offsets) != k
        or len(counts) != k
        or len(more) != k
        or (marks is not None and len(marks) != k)
    ):
        raise ValueError("buffers, offsets, counts, more and marks differ in length")
    if out and any(b is out[-1] for b in buffers):
        raise ValueError("out's last part must not be one of the buffers")
    at, left = list(offsets), list(counts)
    inside = all(0 <= a <= len(b) for a, b in zip(at, buffers, strict=True))
    if not inside or min(left, default=0) < 0:
        raise ValueError("an offset is outside its buffer")
    sizes, lasts = [0] * k, [-1] * k
    sign = -1 if reverse else 1

    def message(c: int) -> tuple[tuple[int, int, int, int], int, int, int]:
        buf, a = buffers[c], at[c]
        room = len(buf) - a
        bad = ValueError("a buffer does not hold the TMessages its count says")
        if room < 40:
            raise bad
        t_id, t_ts, ts, seq, part, tl = _ENC_HEAD.unpack_from(buf, a)
        if t_id != 12 or t_ts != 10 or buf[a + 25] != 11 or tl < 0 or tl > room - 40:
            raise bad
        if buf[a + 32 + tl] != 11:
            raise bad
        (vl,) = struct.unpack_from(">i", buf, a + 35 + tl)
        if vl < 0 or vl > room - 40 - tl or buf[a + 39 + tl + vl] != 0:
            raise bad
        return (sign * ts, sign * seq, sign * part, sign * c), 40 + tl + vl, tl, vl

    heap = [message(c)[0] for c in range(k) if left[c]]
    heapq.heapify(heap)
    count = size = bodies = 0
    runs: list[tuple[int, int, int]] = []  # copied at the end: nothing on an error
    while heap and count < n and size < max_bytes:
        c = sign * heap[0][3]
        start = at[c]
        moved = False
        first = True
        while left[c] and count < n and size < max_bytes:
            key, length, tl, vl = message(c)
            if not first and len(heap) > 1 and key > min(heap[1:3]):
                heapq.heapreplace(heap, key)
                moved = True
                break
            first = False
            lasts[c] = at[c]
            at[c] += length
            left[c] -= 1
            sizes[c] += tl + vl
            size += tl + vl
            bodies += vl
            count += 1
        if at[c] > start:
            runs.append((c, start, at[c]))
        if moved:
            continue
        if left[c]:
            break  # n messages or max_bytes
        if more[c]:
            break  # its next messages are unknown: refill before going on
        heapq.heappop(heap)
    for c, start, end in runs:
        if end - start >= view_bytes:
            out.append(memoryview(buffers[c])[start:end])
            continue
        if not out or type(out[-1]) is not bytearray:
            out.append(bytearray())
        tail = out[-1]
        assert isinstance(tail, bytearray)
        tail += buffers[c][start:end]
    taken = [was - now for was, now in zip(counts, left, strict=True)]
    return taken, at, sizes, lasts, bodies
