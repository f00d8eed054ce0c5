"""The scan path of the gateway service: open scanners, read them (counted when metrics
run), attach message keys and properties, and find messages by key."""

from __future__ import annotations

import time
from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from . import rowkey, validation
from .cursor import ScanSpec
from .errors import InvalidArgument
from .keys import MAX_KEY_BYTES
from .rowkey import MessageId
from .scanners import Scanner
from .scanrows import EncodedRows, MessageRows
from .store.base import QueueMeta
from .store.reading import after_for_start

if TYPE_CHECKING:
    from .service_state import _State
else:
    _State = object  # the parts are put together by GatewayService (service.py)

_BODY = itemgetter(3)  # of a Row


class _Scans(_State):
    """The scanner calls, and finding messages by key."""

    # -- scans ----------------------------------------------------------------------------

    def messageScannerOpen(self, queueName: Any, partitionID: Any, messageScan: Any) -> int:
        meta = self._queue(queueName)
        p = validation.partition(partitionID, meta.partitions)
        return self._open(meta, [p], messageScan)

    def queueScannerOpen(self, queueName: Any, messageScan: Any) -> int:
        meta = self._queue(queueName)
        return self._open(meta, range(meta.partitions), messageScan)

    def combinedScannerOpen(self, queueName: Any, partitionIDs: Any, messageScan: Any) -> int:
        meta = self._queue(queueName)
        if not partitionIDs:
            raise InvalidArgument("partitionIDs", "must list at least one partition")
        partitions = sorted(
            {
                validation.partition(p, meta.partitions, f"partitionIDs[{i}]")
                for i, p in enumerate(partitionIDs)
            }
        )
        return self._open(meta, partitions, messageScan)

    def _open(self, meta: QueueMeta, partitions: Sequence[int], raw: Any) -> int:
        spec = self._scan_spec(raw)
        return self.scanners.add(Scanner(self.store, meta, partitions, spec))

    def _scan_spec(self, raw: Any) -> ScanSpec:
        if raw is None:
            return ScanSpec(None, None, None, False, self.limits.default_caching)
        start = validation.message_id(raw.startMessageID, "messageScan.startMessageID")
        stop = validation.message_id(raw.stopMessageID, "messageScan.stopMessageID")
        reverse = bool(raw.reversed)
        backwards = (
            start is not None and stop is not None and (stop > start if reverse else stop < start)
        )
        if backwards:
            order = "older" if reverse else "newer"
            raise InvalidArgument(
                "messageScan.stopMessageID",
                f"must be {order} than startMessageID"
                + ("" if reverse else " (set reversed to scan newest first)"),
            )
        topics = None
        if raw.topics:
            for i, t in enumerate(raw.topics):
                if not t or len(t) > 255:
                    raise InvalidArgument(f"messageScan.topics[{i}]", "must be 1..255 bytes")
            topics = frozenset(t.encode() if isinstance(t, str) else t for t in raw.topics)
        caching = raw.caching
        if caching is None or caching < 1:
            caching = self.limits.default_caching
        caching = min(caching, self.limits.max_list_messages)
        return ScanSpec(start, stop, topics, reverse, caching)

    def messageScannerGet(self, id: Any) -> Any:
        scanner = self.scanners.get(id)
        got = self._read(scanner, 1)
        return self._with_extras(scanner.queue, got)[0] if got.rows else self._t.TMessage()

    def messageScannerGetList(self, id: Any, nbMessages: Any) -> MessageRows | list[Any]:
        """The next messages, as rows the Thrift boundary encodes as ``list<TMessage>`` (as
        TMessage objects when the queue has messages with keys or properties)."""
        n = validation.batch_size(nbMessages, self.limits.max_list_messages)
        scanner = self.scanners.get(id)
        extras = self._has_extras(scanner.queue)
        # encoded by the store reader, when the reply is binary and no message has extras
        got = self._read(scanner, n, encoded=self.encoded_replies and not extras)
        if not got.rows:
            self.scanners.finish(id, "it reached its end")
            return got
        # the first message with extras may have come during the read
        if extras or self._has_extras(scanner.queue):
            return self._with_extras(scanner.queue, got)
        return got

    def _has_extras(self, queue: str) -> bool:
        """Whether any message of ``queue`` has a key or properties."""
        meta = self.store.get_queue(queue)
        return self.extras is not None and meta is not None and self.extras.has_any(meta)

    def _with_extras(self, queue: str, got: MessageRows) -> list[Any]:
        messages = got.to_messages(self._t)
        meta = self.store.get_queue(queue)
        if self.extras is not None and meta is not None:
            self.extras.attach(meta, messages)
        return messages

    def findMessagesByKey(self, queueName: Any, key: Any, limit: Any) -> list[Any]:
        meta = self._queue(queueName)
        if isinstance(key, str):
            key = key.encode()
        if not isinstance(key, bytes) or not 0 < len(key) <= MAX_KEY_BYTES:
            raise InvalidArgument("key", f"must be 1..{MAX_KEY_BYTES} bytes")
        n = validation.batch_size(limit, self.limits.max_list_messages, "limit")
        if self.extras is None:
            return []
        out = []
        for pid, (ts, seq) in self.extras.lookup(meta, key, n):
            at = MessageId(ts, seq)
            reader = self.store.reader(
                meta, pid, after_for_start(at, False), rowkey.next_id(at),
                reverse=False, topics=None,
            )  # fmt: skip
            try:
                rows = reader.read(1).rows
            finally:
                reader.close()
            if rows:
                out.extend(self._with_extras(meta.name, MessageRows(pid, rows)))
        return out

    def _read(self, scanner: Scanner, n: int, encoded: bool = False) -> MessageRows:
        if scanner.busy:
            raise InvalidArgument("id", "the scanner is in use by another call")
        scanner.busy = True
        try:
            stats = self.stats
            if stats is None:
                return scanner.next_rows(n, self.limits.max_response_bytes, encoded)
            began = time.perf_counter()
            got = scanner.next_rows(n, self.limits.max_response_bytes, encoded)
            stats.scan_latency.observe(time.perf_counter() - began)
            rows = got.rows
            if rows:
                counters = stats.queue(scanner.queue)
                counters.read_messages += len(rows)
                counters.read_bytes += (
                    rows.bodies
                    if isinstance(rows, EncodedRows)
                    else sum(map(len, map(_BODY, rows)))
                )
            return got
        finally:
            scanner.busy = False
            self.scanners.done_reading(scanner)

    def messageScannerClose(self, id: Any) -> None:
        self.scanners.close(id)
