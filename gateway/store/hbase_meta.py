"""The HBase store's metadata table, ``<namespace>:hqueue_meta`` (family ``m``).

Rows, one kind per first byte (queue names come from [A-Za-z0-9_.-], so they never collide):

* ``<queue>``, column ``m:json``: the queue's metadata as JSON, ``state`` ``creating`` (the
  name is claimed with check-and-put, so one creator wins) or ``ready``;
* ``\\x00generation``, column ``m:generation``: an atomic counter for queue generations;
* ``\\x01<namespace>\\x00<key>``, column ``m:record``: the store's small records
  (:meth:`gateway.store.base.PartitionStore.get_record` and friends);
* ``\\x02gateway``, column ``m:gateway``: who serves this namespace (JSON: a lone gateway's
  lease, or the mark of a gateway cluster), see :mod:`gateway.cluster.exclusive`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgument
from ..ids import wall_clock_ms
from .base import QueueMeta

log = logging.getLogger(__name__)

FAMILY = b"m"
_JSON = b"m:json"
_GENERATION_ROW = b"\x00generation"
_GENERATION = b"m:generation"
_RECORD = b"m:record"
_GATEWAY_ROW = b"\x02gateway"
_GATEWAY = b"m:gateway"
_STALE_CLAIM_MS = 120_000  # a "creating" row older than this was left by a crash


class MetaTable:
    """``call(fn)`` runs ``fn(thrift1_client)`` on a pooled connection (HBase faults become
    StoreError); ``hbase`` is happybase's loaded Hbase.thrift module."""

    def __init__(self, call: Callable[[Any], Any], hbase: Any, table: bytes) -> None:
        self._call = call
        self._hbase = hbase
        self.table = table

    # -- queues ---------------------------------------------------------------------------

    def queues(self) -> dict[str, QueueMeta]:
        """Every ready queue."""
        spec = self._hbase.TScan(columns=[_JSON], caching=1000)
        rows = self._call(lambda c: scan_all(c, self.table, spec))
        out = {}
        for r in rows:
            meta = _decode(r.row.decode(), r.columns[_JSON].value)
            if meta is not None:
                out[meta.name] = meta
        return out

    def read(self, name: str) -> QueueMeta | None:
        raw = self._get(name.encode(), _JSON)
        return None if raw is None else _decode(name, raw)

    def claim(self, name: str) -> None:
        """Takes the queue's name with a "creating" row (check-and-put: one creator wins)."""
        claim = json.dumps({"state": "creating", "since_ms": wall_clock_ms()}).encode()
        row = name.encode()
        put = self._hbase.Mutation(column=_JSON, value=claim)
        if self._call(lambda c: c.checkAndPut(self.table, row, _JSON, None, put, {})):
            return
        raw = self._get(row, _JSON)
        current = json.loads(raw) if raw else {}
        if current.get("state") == "creating":
            if wall_clock_ms() - current.get("since_ms", 0) < _STALE_CLAIM_MS:
                raise InvalidArgument("queueName", f"queue '{name}' is being created")
            log.warning("taking over the stale creation of queue %s", name)
            self._call(lambda c: c.mutateRow(self.table, row, [put], {}))
            return
        raise InvalidArgument("queueName", f"queue '{name}' already exists")

    def next_generation(self) -> int:
        return int(
            self._call(lambda c: c.atomicIncrement(self.table, _GENERATION_ROW, _GENERATION, 1))
        )

    def save(self, meta: QueueMeta) -> None:
        value = meta.to_json(state="ready")
        self._put(meta.name.encode(), _JSON, value)

    def delete(self, name: str) -> None:
        self._delete(name.encode())

    # -- who serves the namespace ----------------------------------------------------------

    def gateway_lease(self) -> bytes | None:
        return self._get(_GATEWAY_ROW, _GATEWAY)

    def swap_gateway_lease(self, expected: bytes | None, value: bytes) -> bool:
        """Check-and-put: writes ``value`` only if the cell still holds ``expected``."""
        put = self._hbase.Mutation(column=_GATEWAY, value=value)
        return bool(
            self._call(
                lambda c: c.checkAndPut(self.table, _GATEWAY_ROW, _GATEWAY, expected, put, {})
            )
        )

    # -- records --------------------------------------------------------------------------

    def get_record(self, namespace: str, key: str) -> bytes | None:
        return self._get(_record_row(namespace, key), _RECORD)

    def put_record(self, namespace: str, key: str, value: bytes) -> None:
        self._put(_record_row(namespace, key), _RECORD, value)

    def delete_record(self, namespace: str, key: str) -> None:
        self._delete(_record_row(namespace, key))

    def list_records(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        base = _record_row(namespace, "")
        start = _record_row(namespace, prefix)
        stop = base[:-1] + b"\x01"  # just past every "\x01<namespace>\x00..."
        spec = self._hbase.TScan(startRow=start, stopRow=stop, columns=[_RECORD], caching=1000)
        rows = self._call(lambda c: scan_all(c, self.table, spec))
        encoded = prefix.encode()
        skip = len(base)
        return [
            (r.row[skip:].decode(), r.columns[_RECORD].value)
            for r in rows
            if r.row[skip:].startswith(encoded)
        ]

    # -- rows -----------------------------------------------------------------------------

    def _get(self, row: bytes, column: bytes) -> bytes | None:
        rows = self._call(lambda c: c.getRowWithColumns(self.table, row, [column], {}))
        return rows[0].columns[column].value if rows else None

    def _put(self, row: bytes, column: bytes, value: bytes) -> None:
        put = self._hbase.Mutation(column=column, value=value)
        self._call(lambda c: c.mutateRow(self.table, row, [put], {}))

    def _delete(self, row: bytes) -> None:
        self._call(lambda c: c.deleteAllRow(self.table, row, {}))


def scan_all(client: Any, table: bytes, spec: Any) -> list[Any]:
    """Every TRowResult a Thrift1 scan yields (for small tables: metadata)."""
    sid = client.scannerOpenWithScan(table, spec, {})
    try:
        out: list[Any] = []
        while batch := client.scannerGetList(sid, 1000):
            out.extend(batch)
        return out
    finally:
        client.scannerClose(sid)


def _record_row(namespace: str, key: str) -> bytes:
    return b"\x01" + namespace.encode() + b"\x00" + key.encode()


def _decode(name: str, raw: bytes) -> QueueMeta | None:
    d = json.loads(raw)
    return QueueMeta.from_json(name, d) if d.get("state") == "ready" else None
