"""``hqueue import`` and ``hqueue export`` as the command line runs them: connections, the
progress bar on stderr (tqdm: count, rate, ETA when the total is known) and the resume state.
"""

from __future__ import annotations

import contextlib
import datetime
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from tqdm import tqdm

from hqueue.protocol import hqueue_thrift

from . import records
from .bulk_import import (
    AckTracker,
    Importer,
    ImportOptions,
    StateFile,
    count_records,
    keys_supported,
    read_blocks,
    state_path,
)
from .commands import Client, ToolkitError, close_client, parse_message_id

EXPORT_BATCH = 5000  # messages per messageScannerGetList
STATE_WRITE_INTERVAL = 0.05  # seconds between state rewrites while acknowledgements come


def _bar(total: int | None, desc: str, enabled: bool | None) -> Any:
    return tqdm(
        total=total,
        desc=desc,
        unit="msg",
        unit_scale=True,
        file=sys.stderr,
        disable=None if enabled is None else not enabled,  # None: only on a terminal
        mininterval=0.5,
        smoothing=0.1,
    )


def _shown(enabled: bool | None) -> bool:
    return sys.stderr.isatty() if enabled is None else enabled


def run_import(
    connect: Callable[[], Client],
    args: Any,
    *,
    binary: bool,
) -> str:
    """Imports ``args.file`` into ``args.queue``; returns the summary line."""
    if args.batch_size < 1:
        raise ToolkitError("--batch-size must be >= 1")
    if not 1 <= args.connections <= 64:
        raise ToolkitError("--connections must be 1..64")
    workers = getattr(args, "workers", 0) or 0
    if not 0 <= workers <= 64:
        raise ToolkitError("--workers must be 0..64")
    fmt = args.format or ("csv" if args.file.endswith(".csv") else "jsonl")
    columns = records.CsvColumns(
        topic=args.topic_column,
        value=args.value_column,
        key=args.key_column,
        partition=args.partition_column,
        value_base64=args.value_base64,
    )
    if fmt != "csv" and (args.key_column or args.partition_column):
        raise ToolkitError("--key-column/--partition-column are for --format csv")
    keys = keys_supported()
    path = state_path(args.file, args.state)
    if args.resume and path is None:
        raise ToolkitError("--resume: reading stdin, so give --state PATH to resume from")
    state = StateFile(path, args.queue, args.file) if path is not None else None
    tracker = state.load() if args.resume and state is not None else AckTracker()
    try:  # the bar's total, counted only for a bar that is shown
        total = count_records(args.file) if _shown(args.progress) else None
    except OSError as exc:
        raise ToolkitError(f"cannot read {args.file}: {exc.strerror}") from None
    if total is not None and fmt == "csv":
        total = max(total - 1, 0)  # the header
    close_input: Callable[[], None] | None = None
    clients: list[Client] = []
    try:
        clients.append(connect())
        partitions = len(clients[0].getQueueLocations(args.queue.encode()))
        clients.extend(connect() for _ in range(args.connections - 1))
        importer = Importer(
            clients,
            args.queue,
            ImportOptions(args.batch_size, args.connections, args.partition_by_topic, workers),
            tracker,
            lambda n: None,
            partitions,
            binary=binary,
        )
        try:
            # before any thread starts: --workers forks its processes here
            source, close_input = read_blocks(
                args.file, fmt, columns, importer.config(keys), workers
            )
        except OSError as exc:
            raise ToolkitError(f"cannot read {args.file}: {exc.strerror}") from None
        bar = _bar(total, f"import {args.queue}", args.progress)
        bar.update(tracker.count)
        importer.progress = bar.update
        started = time.monotonic()
        already = tracker.count
        writer = _StateWriter(state, tracker)
        writer.start()
        complete = False
        try:
            sent = importer.run(source)
            complete = True
        finally:
            writer.stop(complete)
            bar.close()
        seconds = max(time.monotonic() - started, 1e-9)
        acked = tracker.count - already
        skipped = f", {already} skipped as already imported" if already else ""
        return (
            f"imported {acked} messages into '{args.queue}' in {seconds:.2f} s "
            f"({acked / seconds:,.0f} msgs/s){skipped}"
            + ("" if sent == acked else f" (of {sent} sent)")
        )
    finally:
        if close_input is not None:
            close_input()
        for c in clients:
            close_client(c)


class _StateWriter(threading.Thread):
    """Rewrites the state file soon after acknowledgements arrive, and once more at the end."""

    def __init__(self, state: StateFile | None, tracker: AckTracker) -> None:
        super().__init__(daemon=True)
        self.state = state
        self.tracker = tracker
        self._done = threading.Event()

    def run(self) -> None:
        if self.state is None:
            return
        while not self._done.is_set():
            if self.tracker.changed.wait(0.2):
                self.tracker.changed.clear()
                self.state.save(self.tracker)
                self._done.wait(STATE_WRITE_INTERVAL)

    def stop(self, complete: bool) -> None:
        self._done.set()
        self.tracker.changed.set()
        self.join()
        if self.state is not None:
            self.state.save(self.tracker, complete=complete)


# -- export ------------------------------------------------------------------------------------


def parse_point(text: str, flag: str) -> tuple[int, int]:
    """A MessageID ``TS.SEQ`` as itself, else a time (see :func:`parse_time`) as (ms, 0)."""
    mid = parse_message_id(text, flag)
    return mid if mid is not None else (parse_time(text, flag), 0)


def parse_time(text: str, flag: str) -> int:
    """Milliseconds since the epoch from an integer (ms) or an ISO-8601 date/time (UTC unless
    it says otherwise)."""
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = datetime.datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise ToolkitError(
            f"{flag}: expected milliseconds since the epoch or an ISO-8601 time "
            f"(2026-01-31 or 2026-01-31T12:00:00Z), got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def run_export(client: Client, args: Any, out: IO[str]) -> str:
    """Writes the queue's messages (oldest first, merged over the partitions) as JSON Lines."""
    t = hqueue_thrift()
    start = parse_point(args.from_, "--from") if args.from_ else None
    stop = parse_point(args.to, "--to") if args.to else None
    if start is not None and stop is not None and stop <= start:
        raise ToolkitError("--to must be later than --from")
    topics = [x.encode() for x in args.topics.split(",") if x] if args.topics else None
    scan = t.TMessageScan(
        startMessageID=None if start is None else t.TMessageID(*start),
        stopMessageID=None if stop is None else t.TMessageID(*stop),
        topics=topics,
        caching=EXPORT_BATCH,
    )
    name = args.queue.encode()
    if args.partitions:
        try:
            pids = sorted({int(p) for p in args.partitions.split(",") if p.strip()})
        except ValueError:
            raise ToolkitError(f"--partitions: expected P,P,..., got {args.partitions!r}") from None
        sid = client.combinedScannerOpen(name, pids, scan)
    else:
        sid = client.queueScannerOpen(name, scan)
    bar = _bar(None, f"export {args.queue}", args.progress)
    count = 0
    started = time.monotonic()
    exhausted = False
    try:
        while True:
            batch = client.messageScannerGetList(sid, EXPORT_BATCH)
            if not batch:
                exhausted = True
                break
            out.write("\n".join(records.export_line(m) for m in batch))
            out.write("\n")
            count += len(batch)
            bar.update(len(batch))
    finally:
        bar.close()
        if not exhausted:
            with contextlib.suppress(Exception):  # it expires on the gateway anyway
                client.messageScannerClose(sid)
    out.flush()
    seconds = max(time.monotonic() - started, 1e-9)
    return f"exported {count} messages of '{args.queue}' in {seconds:.2f} s"
