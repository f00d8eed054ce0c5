"""What a merged scan's merge costs per message, without a gateway: ``merge_encoded``
(gateway/_merge.c) over the pages of several partitions, walking every message and taking
segments by the pages' marks (gateway/_marks.h).

    python -m tests.perf.merge_encode [--partitions 8] [--value-bytes 100] [--rounds 7]

Each partition holds puts of 1000 messages (one record each, topic ``topic``, ``--value-bytes``
each) whose milliseconds interleave with the other partitions' puts, as producers writing
several partitions at once leave them; a page of 4096 messages per partition is read with
``scan_records`` as a merged scanner's cursor reads it (its marks with it), then merged whole
into a reply's parts, as ``Scanner._merge_encoded`` does. Prints ns per message (median over
``--rounds``, each the best of 3, the two ways interleaved, each on fresh copies of the pages)
and their ratio; both must give the same reply, or the probe stops.
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable

MESSAGES_PER_PUT = 1000
PAGE = 4096  # what the friendly scan asks per call (hqueue.queue.DEFAULT_SCAN_BATCH)
VIEW_BYTES = 8192  # gateway.scanners.MERGE_VIEW_BYTES


def pages(partitions: int, value_bytes: int) -> list[tuple[bytearray, int, bytearray]]:
    """Per partition: (its page of TMessages, how many, their marks)."""
    from gateway.fast import put_wal_cells, scan_records, wal_records

    puts = -(-PAGE // MESSAGES_PER_PUT)
    out = []
    for p in range(partitions):
        rows: list[tuple[bytes, bytes]] = []
        for r in range(puts):
            n = MESSAGES_PER_PUT
            ts = 1_700_000_000_000 + r * partitions + p  # the partitions' puts take turns
            cells, _ = wal_records(p, ts, 0, [b"topic"] * n, [b"x" * value_bytes] * n, n, n)
            put_wal_cells(lambda key, value, into: into.append((key, value)), rows, cells)
        page, marks = bytearray(), bytearray()
        got = scan_records(
            iter(rows), None, b"", b"\xff" * 12, None, PAGE, 1 << 30, page, 1 << 40, False, marks
        )
        out.append((page, got[5], marks))
    return out


def merge(
    read: list[tuple[bytearray, int, bytearray]], marked: bool
) -> Callable[[], tuple[object, list[bytearray | memoryview]]]:
    """One merge of all of ``read`` (fresh copies of its pages), with or without marks."""
    from gateway.fast import merge_encoded

    copies: list[list[bytearray | bytes]] = []

    def setup() -> None:
        copies.append([bytearray(page) for page, _, _ in read])

    def run() -> tuple[object, list[bytearray | memoryview]]:
        out: list[bytearray | memoryview] = []
        got = merge_encoded(
            copies.pop(), [0] * len(read), [n for _, n, _ in read], [False] * len(read), out,
            1 << 30, 1 << 40, False, VIEW_BYTES, [m for *_, m in read] if marked else None,
        )  # fmt: skip
        return got, out

    run.setup = setup  # type: ignore[attr-defined]
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if not 2 <= args.partitions <= 64:
        ap.error("--partitions must be 2..64 (merged scans merge in C up to 64)")
    if not 0 <= args.value_bytes <= 1 << 16:
        ap.error("--value-bytes must be 0..65536")
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    from gateway.main import tune_malloc

    tune_malloc()
    read = pages(args.partitions, args.value_bytes)
    total = sum(n for _, n, _ in read)
    ways = {
        "walking every message": merge(read, False),
        "taking segments by marks": merge(read, True),
    }
    answers = []
    for run in ways.values():
        run.setup()  # type: ignore[attr-defined]
        got, out = run()
        answers.append((got, b"".join(bytes(p) for p in out)))
    if answers[0] != answers[1]:
        raise SystemExit("the two ways merge differently: no A/B of different outputs")
    figures: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):  # interleaved, so both see the same machine
        for name, run in ways.items():
            times = []
            for _ in range(3):
                run.setup()  # type: ignore[attr-defined]
                times.append(timeit.timeit(run, number=1))
            figures[name].append(min(times) / total * 1e9)
    for name, got in figures.items():
        shown = sorted(round(f, 1) for f in got)
        print(f"{name:26} {statistics.median(got):6.1f} ns/msg {shown}")
    walk, marks = (statistics.median(f) for f in figures.values())
    print(f"{args.partitions} partitions, {total} messages: marks / walk {marks / walk:.2f}")


if __name__ == "__main__":
    main()
