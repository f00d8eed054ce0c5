"""``hqueue import``: a file of messages into a queue, batched, pipelined and resumable.

How it goes fast: the input is read in blocks of whole lines, and each block is parsed,
grouped per partition and encoded into whole put calls (:mod:`blocks`: msgspec and the
client's C encoder), in this thread or, with ``--workers N``, in N processes whose results
come back in file order. Each call goes to one of ``connections`` sender threads, each with
its own connection, so several calls are in flight at once while the next block is parsed
(the GIL switch interval is shortened meanwhile, so a sender is not kept waiting). A
partition always goes to the same connection, so messages of one partition are stored in the
order of the file. Records without a partition are batched together and sent with
``putMessages`` (the gateway picks one random partition per call), round-robin over the
connections.

How it resumes: every acknowledged batch marks its records (by record number) in an
:class:`AckTracker`; a writer thread keeps a small state file next to the input
(``FILE.hqimport``) recording how many leading records are acknowledged plus which ones after
them are (a compressed bitmap of the few batches that completed out of order). It is rewritten
(atomically) after acknowledgements, and once more when the import stops for any reason.
``--resume`` skips exactly those records. A batch refused or cut off is never recorded, so
after a failure (a bad record, a refused batch, a gateway that stopped) ``--resume`` sends
what was not acknowledged, and nothing twice. The one exception is the importer itself being
killed with SIGKILL between an acknowledgement and its recording (microseconds): those
batches would be sent again.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import io
import itertools
import json
import multiprocessing
import os
import queue as queue_mod
import sys
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from . import blocks
from .blocks import BlockConfig, BlockResult, Out, encode_block, encode_records
from .commands import Client, ToolkitError
from .records import CsvColumns, key_field, read_csv, tmessages

STATE_SUFFIX = ".hqimport"
SWITCH_INTERVAL = 0.0002  # seconds: sys.setswitchinterval while importing (see Importer.run)
STATE_VERSION = 1


class AckTracker:
    """Which records (numbered from 0) are acknowledged: all below ``prefix``, and those
    marked in ``window`` (one byte per record from ``prefix`` on)."""

    def __init__(self, prefix: int = 0, window: bytes = b"") -> None:
        self.prefix = prefix
        self.window = bytearray(window)
        self.count = prefix + self.window.count(1)
        self.changed = threading.Event()
        self._lock = threading.Lock()

    def is_acked(self, n: int) -> bool:
        i = n - self.prefix
        return i < 0 or (i < len(self.window) and self.window[i] == 1)

    def ack(self, numbers: Iterable[int]) -> None:
        with self._lock:
            w = self.window
            base = self.prefix
            if isinstance(numbers, range) and numbers.step > 0 and numbers.start >= base:
                # evenly spaced (one partition's records of a block): marked in one slice
                start, stop = numbers.start - base, numbers.stop - base
                if stop > len(w):
                    w.extend(bytes(stop - len(w)))
                w[start : stop : numbers.step] = b"\x01" * len(numbers)
                self.count = base + w.count(1)
            else:
                for n in numbers:
                    i = n - base
                    if i < 0:
                        continue
                    if i >= len(w):
                        w.extend(bytes(i - len(w) + 1))
                    if not w[i]:
                        w[i] = 1
                        self.count += 1
            done = w.find(0)
            done = len(w) if done < 0 else done
            if done:
                del w[:done]
                self.prefix += done
        self.changed.set()

    def snapshot(self) -> tuple[int, bytes]:
        with self._lock:
            return self.prefix, bytes(self.window.rstrip(b"\x00"))


@dataclass
class StateFile:
    """The resume state of one input, kept in ``path`` (JSON, rewritten atomically)."""

    path: Path
    queue: str
    source: str

    def load(self) -> AckTracker:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            raise ToolkitError(f"--resume: no state file {self.path} (nothing to resume)") from None
        except (OSError, ValueError) as exc:
            raise ToolkitError(f"--resume: cannot read {self.path}: {exc}") from None
        if data.get("version") != STATE_VERSION:
            raise ToolkitError(f"--resume: {self.path} is not a state file of this version")
        if data.get("queue") != self.queue:
            raise ToolkitError(
                f"--resume: {self.path} records an import into queue '{data.get('queue')}', "
                f"not '{self.queue}'"
            )
        window = zlib.decompress(base64.b64decode(data.get("acked_after", "")))
        return AckTracker(int(data["acked"]), window)

    def save(self, tracker: AckTracker, complete: bool = False) -> None:
        prefix, window = tracker.snapshot()
        data = {
            "version": STATE_VERSION,
            "queue": self.queue,
            "source": self.source,
            "acked": prefix,  # records 0..acked-1 are all acknowledged
            "acked_after": base64.b64encode(zlib.compress(window)).decode("ascii"),
            "complete": complete,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data) + "\n")
        os.replace(tmp, self.path)


@dataclass
class ImportOptions:
    batch_size: int = 1000
    connections: int = 4
    partition_by_topic: bool = False
    workers: int = 0  # processes that parse and encode (0: the importing process does)


class _Sender(threading.Thread):
    """One connection; sends the calls of its queue in order, one at a time."""

    def __init__(self, importer: Importer, client: Client) -> None:
        super().__init__(daemon=True)
        self.importer = importer
        self.client = client
        self.calls: queue_mod.Queue[Out | None] = queue_mod.Queue(maxsize=4)

    def run(self) -> None:
        imp = self.importer
        while True:
            out = self.calls.get()
            if out is None:
                return
            if imp.failure is not None:
                continue  # drain: after a failure nothing more is sent
            try:
                imp.send(self.client, out)
            except BaseException as exc:
                imp.fail(exc)
                continue
            imp.tracker.ack(out.numbers)
            imp.progress(len(out.numbers))


class Importer:
    def __init__(
        self,
        clients: list[Client],
        queue: str,
        options: ImportOptions,
        tracker: AckTracker,
        progress: Callable[[int], None],
        partitions: int,
        binary: bool = True,
    ) -> None:
        self.queue = queue.encode()
        self.options = options
        self.tracker = tracker
        self.progress = progress
        self.partitions = partitions
        self.binary = binary
        self.failure: BaseException | None = None
        self._senders = [_Sender(self, c) for c in clients]
        self._next = 0

    def config(self, keys: bool) -> BlockConfig:
        prefix, window = self.tracker.snapshot()
        return BlockConfig(
            queue=self.queue,
            keys=keys,
            by_topic=self.options.partition_by_topic,
            partitions=self.partitions,
            batch_size=self.options.batch_size,
            binary=self.binary,
            acked_prefix=prefix,
            acked_window=window,
        )

    def fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc

    def send(self, client: Client, out: Out) -> None:
        if not isinstance(out.payload, bytes):  # the compact protocol: thriftpy2's objects
            messages = tmessages(out.payload)
            if out.partition is None:
                client.putMessages(self.queue, messages)
            else:
                client.putMessagesWithPid(self.queue, out.partition, messages)
            return
        trans = client._oprot.trans
        trans.write(out.payload)
        trans.flush()
        client._recv("putMessages" if out.partition is None else "putMessagesWithPid")

    def _dispatch(self, out: Out) -> None:
        if out.partition is None:
            sender = self._senders[self._next % len(self._senders)]
            self._next += 1
        else:
            sender = self._senders[out.partition % len(self._senders)]
        while self.failure is None:  # a full queue waits, unless the import already failed
            with contextlib.suppress(queue_mod.Full):
                sender.calls.put(out, timeout=0.2)
                return

    def run(self, blocks: Iterator[BlockResult]) -> int:
        """Sends the calls of every block, in order; returns how many records were sent.
        Raises the first failure (a bad record, a refused batch, a broken connection) after
        the calls in flight have ended; what came before a bad record is still sent."""
        for s in self._senders:
            s.start()
        sent = 0
        read_error: BaseException | None = None
        # The parsing thread runs C calls of a millisecond or two (a block's decode) that
        # hold the GIL; a sender whose reply came in waits for the GIL before it sends the
        # next call, and by default asks for it only after 5 ms: the gateway idles meanwhile.
        # A shorter interval keeps the calls flowing (1.5-2x the import rate, measured).
        interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        try:
            for block in blocks:
                if self.failure is not None:
                    break
                for out in block.outs:
                    self._dispatch(out)
                sent += block.records
                if block.error is not None:
                    read_error = block.error
                    break
        except (ToolkitError, UnicodeDecodeError, OSError) as exc:
            read_error = exc
        finally:
            for s in self._senders:
                s.calls.put(None)
            for s in self._senders:
                s.join()
            sys.setswitchinterval(interval)
        if self.failure is not None:
            raise self.failure
        if read_error is not None:
            raise read_error
        return sent


def state_path(source: str, given: str | None) -> Path | None:
    if given is not None:
        return Path(given)
    if source == "-":
        return None  # stdin: only with --state
    return Path(source + STATE_SUFFIX)


def count_records(path: str) -> int | None:
    """Lines in a regular file, counted fast (the progress bar's total); None for stdin."""
    if path == "-":
        return None
    count = 0
    last = b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def read_blocks(
    path: str, fmt: str, columns: CsvColumns, cfg: BlockConfig, workers: int
) -> tuple[Iterator[BlockResult], Callable[[], None]]:
    """The input's calls, a block at a time, in file order (records already acknowledged left
    out), and what closes the input (and the worker processes)."""
    lines_per_block = cfg.batch_size * max(1, min(cfg.partitions, 16))
    if fmt == "csv":
        if path == "-":
            stream: IO[Any] = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="")
        else:
            stream = open(path, encoding="utf-8", newline="")  # noqa: SIM115 - returned
        rows = read_csv(stream, columns, cfg.keys)

        def csv_blocks() -> Iterator[BlockResult]:
            skip = AckTracker(cfg.acked_prefix, cfg.acked_window).is_acked
            numbered = ((n, r) for n, r in enumerate(rows) if not skip(n))
            while chunk := list(itertools.islice(numbered, lines_per_block)):
                yield encode_records(cfg, chunk)

        return csv_blocks(), stream.close
    binary: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    raw = blocks.read_blocks(binary, lines_per_block)

    def close() -> None:
        if binary is not sys.stdin.buffer:
            binary.close()

    if workers <= 0:
        return (encode_block(cfg, *job) for job in raw), close
    pool = multiprocessing.get_context("fork").Pool(
        workers, initializer=blocks.worker_init, initargs=(cfg,)
    )

    def close_all() -> None:
        pool.terminate()
        pool.join()
        close()

    def in_order() -> Iterator[BlockResult]:
        # at most two blocks per worker in flight: Pool.imap would read the whole input
        # ahead and keep every result the senders have not taken yet
        pending: collections.deque[Any] = collections.deque()
        for job in raw:
            pending.append(pool.apply_async(blocks.worker_encode, (job,)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

    return in_order(), close_all


def keys_supported() -> bool:
    return key_field() is not None
