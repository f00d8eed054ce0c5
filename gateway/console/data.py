"""What the console shows and does, as plain dicts: one function per page, shared by the HTML
pages and the ``/api/`` JSON API. It calls the gateway's own service object in-process (no
Thrift hop), so every check and error message is the one Thrift clients get.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import validation
from ..errors import InvalidArgument
from ..keys import MAX_KEY_BYTES
from ..rowkey import MAX_PARTITIONS, MAX_SEQUENCE, MAX_TIMESTAMP, MessageId, previous_id
from ..scanners import Scanner, ScanSpec
from ..store.base import QueueMeta

if TYPE_CHECKING:
    from ..metrics import GatewayStats
    from ..monitor import Monitor
    from ..service import GatewayService

MAX_PAGE = 500
DEFAULT_PAGE = 50
SHOWN_BYTES = 1024  # a value is cut after this many bytes (text) or a quarter of it (hex)
_READ_BYTES = 16 * 1024 * 1024  # bodies read for one page at most
MAX_KEY_MATCHES = 1000  # messages of one key the key filter pages through


class NotFound(InvalidArgument):
    """The queue (or subscriber) named in the path does not exist: HTTP 404."""


@dataclass(frozen=True)
class Cursor:
    """Where a newest-first page ended: the last message shown. The next page starts just
    after it in (timestamp, sequence, partition) descending order, so no message is shown
    twice or skipped, however many arrive meanwhile."""

    timestamp: int
    sequence: int
    partition: int

    def __str__(self) -> str:
        return f"{self.timestamp}.{self.sequence}.{self.partition}"

    @classmethod
    def parse(cls, raw: str, argument: str = "before") -> Cursor:
        parts = raw.split(".")
        try:
            ts, seq, p = (int(x) for x in parts)
        except ValueError:
            raise InvalidArgument(
                argument, f"must be TIMESTAMP.SEQUENCE.PARTITION (integers), got {raw!r}"
            ) from None
        if not (0 <= ts <= MAX_TIMESTAMP and 0 <= seq <= MAX_SEQUENCE and 0 <= p < MAX_PARTITIONS):
            raise InvalidArgument(argument, f"is out of range: {raw!r}")
        return cls(ts, seq, p)


@dataclass(frozen=True)
class MessageFilter:
    topic: bytes | None = None
    partition: int | None = None
    since_ms: int | None = None  # inclusive
    until_ms: int | None = None  # exclusive
    key: bytes | None = None  # only the messages put with this key (findMessagesByKey)


def parse_time(raw: str | None, argument: str) -> int | None:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says otherwise)."""
    if raw is None or raw.strip() == "":
        return None
    raw = raw.strip()
    if raw.isdigit():
        return int(raw)
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidArgument(
            argument, f"must be milliseconds since the epoch or an ISO 8601 time, got {raw!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise InvalidArgument(argument, "must not be before 1970")
    return ms


def parse_int(raw: str | None, argument: str) -> int | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgument(argument, f"must be an integer, got {raw!r}") from None


def show_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def show_value(raw: bytes, limit: int = SHOWN_BYTES) -> dict[str, Any]:
    """A body as text when it is UTF-8, else as hex; long ones cut."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        cut = raw[: limit // 4]
        return {"encoding": "hex", "text": cut.hex(), "size": len(raw),
                "truncated": len(cut) < len(raw)}  # fmt: skip
    cut_text = text if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")
    return {"encoding": "utf-8", "text": cut_text, "size": len(raw),
            "truncated": len(raw) > limit}  # fmt: skip


class ConsoleData:
    def __init__(
        self,
        service: GatewayService,
        stats: GatewayStats | None = None,
        monitor: Monitor | None = None,
    ) -> None:
        self.service = service
        self.stats = stats
        self.monitor = monitor

    @property
    def store(self) -> Any:
        return self.service.store

    # -- queues ---------------------------------------------------------------------------

    def meta(self, name: str) -> QueueMeta:
        meta = self.store.get_queue(name)
        if meta is None:
            validation.queue_name(name, "queue")
            raise NotFound("queue", f"queue '{name}' does not exist")
        return meta

    def queues(self) -> list[dict[str, Any]]:
        return [self._queue(m) for m in sorted(self.store.list_queues(), key=lambda m: m.name)]

    def queue(self, name: str) -> dict[str, Any]:
        return self._queue(self.meta(name))

    def _queue(self, meta: QueueMeta) -> dict[str, Any]:
        rates = self.monitor.rate(meta.name) if self.monitor is not None else None
        totals = None
        if self.stats is not None and meta.name in self.stats.queues:
            c = self.stats.queues[meta.name]
            totals = {"put_messages": c.put_messages, "put_bytes": c.put_bytes,
                      "read_messages": c.read_messages, "read_bytes": c.read_bytes}  # fmt: skip
        return {
            "name": meta.name,
            "partitions": meta.partitions,
            "ttl_seconds": meta.ttl_seconds,
            "state": "enabled" if meta.enabled else "disabled",
            "config": dict(meta.config),
            "rates": rates,  # per second over the last sampling interval; None at first
            "totals": totals,  # since this gateway started
        }

    def create_queue(
        self, name: Any, partitions: Any, ttl_seconds: Any, config: Any = None
    ) -> dict[str, Any]:
        if not isinstance(name, str):
            raise InvalidArgument("name", "must be a string")
        self.service.createQueue(name.encode(), partitions, ttl_seconds, config or {})
        return self.queue(name)

    def act(self, name: str, action: str) -> None:
        """``truncate``, ``disable``, ``enable`` or ``delete`` the queue ``name``."""
        self.meta(name)
        method = {
            "truncate": self.service.truncateQueue,
            "disable": self.service.disableQueue,
            "enable": self.service.enableQueue,
            "delete": self.service.deleteQueue,
        }.get(action)
        if method is None:
            raise NotFound("action", f"unknown action {action!r}")
        method(name.encode())

    # -- messages -------------------------------------------------------------------------

    def messages(
        self,
        name: str,
        flt: MessageFilter,
        before: Cursor | None = None,
        limit: int = DEFAULT_PAGE,
    ) -> dict[str, Any]:
        """One page of messages, newest first, and the cursor of the next page (None: the
        last page)."""
        meta = self.meta(name)
        if not meta.enabled:
            raise InvalidArgument("queue", f"queue '{name}' is disabled: enable it to browse")
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidArgument("limit", f"must be 1..{MAX_PAGE}, got {limit}")
        if flt.key is not None and not 0 < len(flt.key) <= MAX_KEY_BYTES:
            raise InvalidArgument("key", f"must be 1..{MAX_KEY_BYTES} bytes")
        if flt.topic is not None and not 0 < len(flt.topic) <= 255:
            raise InvalidArgument("topic", "must be 1..255 bytes")
        partitions = list(range(meta.partitions))
        if flt.partition is not None:
            partitions = [validation.partition(flt.partition, meta.partitions, "partition")]
        # newest end (inclusive) and oldest end (exclusive) in MessageID terms
        start = None if flt.until_ms is None else _below(flt.until_ms)
        if before is not None:
            at = MessageId(before.timestamp, before.sequence)
            start = at if start is None else min(start, at)
        stop = None if not flt.since_ms else _below(flt.since_ms)
        page: list[dict[str, Any]] = []
        more = False
        if flt.key is not None:
            page, more = self._by_key(meta, flt, partitions, before, limit)
        elif start is None or stop is None or start > stop:
            spec = ScanSpec(
                start, stop, None if flt.topic is None else frozenset([flt.topic]), True,
                limit + 1,
            )  # fmt: skip
            scanner = Scanner(self.store, meta, partitions, spec)
            more = self._fill(scanner, page, before, limit, self._counters(name))
        nxt = None
        if more and page:
            last = page[-1]
            nxt = str(Cursor(last["id"]["timestamp"], last["id"]["sequence"], last["partition"]))
        return {"queue": name, "messages": page, "next": nxt}

    def _counters(self, name: str) -> Any:
        """The queue's read counters (``hqueue_read_*``): what the console reads counts there
        like any client's scan. None without metrics."""
        return None if self.stats is None else self.stats.queue(name)

    @staticmethod
    def _fill(
        scanner: Scanner,
        page: list[dict[str, Any]],
        before: Cursor | None,
        limit: int,
        counters: Any = None,
    ) -> bool:
        """Reads into ``page`` up to ``limit`` messages; True if there are more after them."""
        while True:
            got = scanner.next_rows(limit + 1 - len(page), _READ_BYTES)
            if not got.rows:
                return False
            if counters is not None:
                counters.read_messages += len(got.rows)
                counters.read_bytes += sum(len(r[3]) for r in got.rows)
            parts = got.partitions
            assert parts is not None  # rows were asked for, not encoded TMessages
            for i, (ts, seq, topic, value) in enumerate(got.rows):
                p = parts if isinstance(parts, int) else parts[i]
                if (
                    before is not None
                    and ts == before.timestamp
                    and seq == before.sequence
                    and p >= before.partition
                ):
                    continue  # shown on the page that ended at ``before``
                if len(page) == limit:
                    return True
                page.append(_row(p, ts, seq, topic, value))

    def _by_key(
        self,
        meta: QueueMeta,
        flt: MessageFilter,
        partitions: list[int],
        before: Cursor | None,
        limit: int,
    ) -> tuple[list[dict[str, Any]], bool]:
        """The messages put with ``flt.key`` (the newest ``MAX_KEY_MATCHES`` of them), with the
        other filters applied, newest first, paged by the same cursor."""
        found = self.service.findMessagesByKey(meta.name.encode(), flt.key, MAX_KEY_MATCHES)
        counters = self._counters(meta.name)
        if counters is not None and found:
            counters.read_messages += len(found)
            counters.read_bytes += sum(len(m.value) for m in found)
        wanted = set(partitions)
        rows = []
        for m in found:
            ts, seq, p = m.id.timestamp, m.id.sequenceID, m.partitionID
            if p not in wanted or (flt.topic is not None and m.topic != flt.topic):
                continue
            if (flt.since_ms is not None and ts < flt.since_ms) or (
                flt.until_ms is not None and ts >= flt.until_ms
            ):
                continue
            if before is not None and (ts, seq, p) >= (
                before.timestamp,
                before.sequence,
                before.partition,
            ):
                continue
            rows.append((ts, seq, p, m))
        rows.sort(key=lambda r: r[:3], reverse=True)
        page = [_row(p, ts, seq, m.topic, m.value, m.key) for ts, seq, p, m in rows[:limit]]
        return page, len(rows) > limit

    # -- subscribers ----------------------------------------------------------------------

    def subscribers(self, name: str) -> list[dict[str, Any]]:
        meta = self.meta(name)
        out = []
        for info in self.service.listSubscribers(meta.name.encode()):
            sub = info.name.decode()
            history: list[dict[str, Any]] = []
            if self.monitor is not None:
                for s in self.monitor.lags.get((meta.name, sub), ()):
                    history.append({"time": s.time, "messages": s.messages,
                                    "capped": s.capped, "seconds": s.seconds})  # fmt: skip
            out.append(
                {
                    "name": sub,
                    "address": None if info.address is None else info.address.decode(),
                    "connected": info.address is not None,
                    "topics": [t.decode("utf-8", "replace") for t in info.topics],
                    "partitions": [
                        {
                            "partition": p.partitionID,
                            "checkpoint": _id(p.checkpoint),
                            "newest": _id(p.newest),
                            "lag_messages": p.lagMessages,
                            "lag_capped": p.lagMessagesCapped,
                            "lag_seconds": p.lagSeconds,
                        }
                        for p in info.partitions
                    ],
                    "lag_messages": sum(p.lagMessages for p in info.partitions),
                    "lag_seconds": max((p.lagSeconds for p in info.partitions), default=0.0),
                    "history": history,
                }
            )
        return out

    # -- gateways -------------------------------------------------------------------------

    def gateways(self) -> dict[str, Any]:
        service = self.service
        listed = None
        list_gateways = getattr(service, "listGateways", None)  # the cluster's (issue 12)
        if list_gateways is not None:
            listed = [_plain(g) for g in list_gateways()]
        queues = []
        for meta in sorted(self.store.list_queues(), key=lambda m: m.name):
            owners: dict[str, list[int]] = {}
            for p, address in enumerate(service.getQueueLocations(meta.name.encode())):
                owners.setdefault(address.decode(), []).append(p)
            queues.append(
                {
                    "name": meta.name,
                    "partitions": meta.partitions,
                    "owners": [
                        {"address": a, "partitions": ps, "ranges": _ranges(ps)}
                        for a, ps in sorted(owners.items())
                    ],
                }
            )
        return {"this": service.advertise, "gateways": listed, "queues": queues}


def _row(
    p: int, ts: int, seq: int, topic: bytes, value: bytes, key: bytes | None = None
) -> dict[str, Any]:
    row = {
        "partition": p,
        "id": {"timestamp": ts, "sequence": seq},
        "time": show_time(ts),
        "topic": topic.decode("utf-8", "replace"),
        "value": show_value(value),
    }
    if key is not None:
        row["key"] = key.decode("utf-8", "replace")
    return row


def _below(ms: int) -> MessageId:
    """The newest MessageID strictly before millisecond ``ms``."""
    return previous_id(MessageId(ms, 0)) or MessageId(0, 0)


def _id(raw: Any) -> dict[str, int] | None:
    return None if raw is None else {"timestamp": raw.timestamp, "sequence": raw.sequenceID}


def _ranges(ps: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out = []
    start = prev = ps[0]
    for p in [*ps[1:], None]:
        if p is not None and p == prev + 1:
            prev = p
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if p is not None:
            start = prev = p
    return ", ".join(out)


def _plain(value: Any) -> Any:
    """A Thrift struct (or anything) as JSON-able data."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if hasattr(value, "thrift_spec"):
        return {k: _plain(v) for k, v in vars(value).items()}
    return value
