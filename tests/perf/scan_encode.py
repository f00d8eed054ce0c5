"""What an encoded scan costs per message in the embedded store's C loop, without a gateway:
``scan_records`` (gateway/_records.c) turning put records into a reply's TMessages.

    python -m tests.perf.scan_encode [--against OTHER_BUILD/_records.so] [--value-bytes 100]
        [--rounds 7]

Records of 1000 messages (topic ``topic``, ``--value-bytes`` each), 100 of them, read in
pages of 4096 messages into fresh bytearrays as a merged or single read does, with the
gateway's malloc settings. Prints ns per message (median over ``--rounds``, each the best of
3). ``--against`` loads another build of the extension (for an A/B in one process: this
machine's speed moves by a third from minute to minute, so separate runs cannot compare
changes of this size); both must encode the same bytes, or the probe stops.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

MESSAGES_PER_RECORD = 1000
RECORDS = 100
PAGE = 4096  # what the friendly scan asks per call (hqueue.queue.DEFAULT_SCAN_BATCH)


def load(path: Path) -> ModuleType:
    """A build of gateway._records from ``path`` (a module of its own, beside the one
    gateway.fast uses)."""
    import gateway._wirecheck  # noqa: F401 - _records finds its Spans type there at import

    spec = importlib.util.spec_from_file_location("gateway._records", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--against: {path} is not an extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records(module: ModuleType, value_bytes: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) pairs RocksDB would hold for RECORDS puts of one partition."""
    from gateway.fast import put_wal_cells

    out: list[tuple[bytes, bytes]] = []
    for r in range(RECORDS):
        n = MESSAGES_PER_RECORD
        cells, _ = module.wal_records(
            3, 1_700_000_000_000 + r, 0, [b"topic"] * n, [b"x" * value_bytes] * n, n, 1 << 30
        )
        put_wal_cells(lambda key, value, _: out.append((key, value)), None, cells)
    return out


def reader(module: ModuleType, rows: list[tuple[bytes, bytes]], keep: bool) -> Callable[[], bytes]:
    """A read of all ``rows`` page by page; returns the pages' bytes when ``keep``."""
    from gateway.rowkey import key_after

    def read() -> bytes:
        items, held, lower, pages = iter(rows), None, b"\x00" * 12, []
        while True:
            sink = bytearray(64)
            status, key, *_, held, _, _, _ = module.scan_records(
                items, held, lower, b"\xff" * 12, None, PAGE, 1 << 30, sink, 16 << 20, False
            )
            if keep:
                pages.append(bytes(sink))
            if key is not None:
                lower = key_after(key)
            if status == 0:  # every row read
                return b"".join(pages)

    return read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another build's _records .so, for an A/B")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if not 0 <= args.value_bytes <= 1 << 20:
        ap.error("--value-bytes must be 0..1048576")
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if args.against is not None and not args.against.is_file():
        ap.error(f"--against: no file {args.against}")
    from gateway import _records
    from gateway.main import tune_malloc

    tune_malloc()
    builds = {"this build": _records}
    if args.against is not None:
        builds[str(args.against)] = load(args.against)
    rows = records(_records, args.value_bytes)
    encoded = {reader(m, rows, keep=True)() for m in builds.values()}
    if len(encoded) != 1:
        raise SystemExit("the builds encode different bytes: no A/B of different outputs")
    runs = {name: reader(m, rows, keep=False) for name, m in builds.items()}
    figures: dict[str, list[float]] = {name: [] for name in runs}
    total = RECORDS * MESSAGES_PER_RECORD
    for _ in range(args.rounds):  # interleaved, so both see the same machine
        for name, run in runs.items():
            best = min(timeit.repeat(run, number=1, repeat=3))
            figures[name].append(best / total * 1e9)
    for name, got in figures.items():
        shown = sorted(round(f, 1) for f in got)
        print(f"{name:40} {statistics.median(got):6.1f} ns/msg {shown}")
    if len(figures) == 2:
        this, other = (statistics.median(f) for f in figures.values())
        print(f"this build / other: {this / other:.2f}")


if __name__ == "__main__":
    main()
