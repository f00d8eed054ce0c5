"""The state every part of the HBase store shares (see hbase.py for the parts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
import gevent.lock
import happybase

from . import hbase_schema as schema
from .base import QueueMeta
from .hbase_calls import _admin_idl
from .hbase_meta import MetaTable
from .hbase_scans import ResidentScans

if TYPE_CHECKING:
    from .hbase_writes import _Lane


class _State:
    """The HBase store's attributes, and the parts' methods the other parts call."""

    def __init__(self, address: schema.HBaseAddress, *, meta_refresh: float = 2.0) -> None:
        self.address = address
        self.meta_refresh = meta_refresh
        self._pool: happybase.ConnectionPool | None = None
        self._hbase: Any = None  # happybase's loaded Hbase.thrift (Thrift1), set by start
        self._admin_idl = _admin_idl()
        self._admin_client: Any = None
        self._admin_lock = gevent.lock.RLock()  # admin changes one at a time, in this gateway
        self._queues: dict[str, QueueMeta] = {}
        self._lanes: dict[tuple[bytes, int], _Lane] = {}
        self._refresher: gevent.Greenlet | None = None
        self._scans: ResidentScans | None = None
        self._meta: MetaTable | None = None
        self._meta_table = schema.table_name(address.namespace, schema.META_TABLE)
        # In a gateway cluster: raises StoreError unless this gateway may write the partition
        # now (it owns it and its lease holds). Called right before a write is sent and again
        # once HBase acknowledged it, so nothing is acknowledged after the lease ran out.
        self.guard: Callable[[str, int], None] | None = None
        # (queue, generation) -> True, or when a missing table of keys was last seen
        self._keys_tables: dict[tuple[str, int], bool | float] = {}

    # The parts call these of each other; each is defined in the module named.

    def _call(self, fn: Any) -> Any:  # hbase_calls.py
        raise NotImplementedError

    def _admin(self, method: str, *args: Any, argument: str | None = None) -> Any:
        raise NotImplementedError  # hbase_calls.py

    def _drop_table(self, table: Any) -> None:  # hbase_calls.py
        raise NotImplementedError

    def _make_namespace(self, ns: str) -> None:  # hbase_calls.py
        raise NotImplementedError
