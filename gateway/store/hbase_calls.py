"""The HBase store's calls to HBase: Thrift1 (happybase's pool) for data and metadata, the
Thrift2 admin service (``hbase_admin.thrift``) for tables and namespaces; HBase's faults
become StoreError (or InvalidArgument, where a setting of the caller's was refused)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
import happybase
import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory, TCompactProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TException
from thriftpy2.transport import TBufferedTransportFactory, TFramedTransportFactory

from ..errors import HQueueError, InvalidArgument, StoreError
from . import hbase_schema as schema
from .hbase_meta import FAMILY as META_FAMILY

if TYPE_CHECKING:
    from .hbase_state import _State
else:
    _State = object  # the mixins below are put together by HBaseStore (hbase.py)


def _admin_idl() -> Any:
    path = Path(__file__).with_name("hbase_admin.thrift")
    return thriftpy2.load(str(path), module_name="hqueue_hbase_admin_thrift")


class _Calls(_State):
    # -- HBase calls ----------------------------------------------------------------------

    def _call(self, fn: Any) -> Any:
        """Runs ``fn(thrift1_client)`` on a pooled connection; HBase faults -> StoreError."""
        pool = self._pool
        if pool is None:
            raise StoreError("the HBase store is not started")
        try:
            with pool.connection(timeout=self.address.timeout) as conn:
                try:
                    return fn(conn.client)
                except (gevent.GreenletExit, gevent.Timeout):
                    # interrupted mid-call: an answer may still be on its way and would be
                    # read as the answer to the next call on this pooled connection (happybase
                    # refreshes it only after Thrift and socket errors)
                    conn._refresh_thrift_client()
                    raise
        except HQueueError:
            raise
        except self._hbase.IllegalArgument as exc:
            raise StoreError(f"HBase refused the call: {exc.message}") from exc
        except self._hbase.IOError as exc:
            raise StoreError(f"HBase: {_first_line(exc.message)}") from exc
        except happybase.pool.NoConnectionsAvailable as exc:
            raise StoreError(
                f"all {self.address.pool_size} HBase connections busy for "
                f"{self.address.timeout:g} s"
            ) from exc
        except (TException, OSError) as exc:  # socket timeouts are OSErrors
            raise StoreError(f"HBase Thrift at {self.address.host}:{self.address.port}: "
                             f"{exc or type(exc).__name__}") from exc  # fmt: skip

    def _admin(self, method: str, *args: Any, argument: str | None = None) -> Any:
        """Calls the Thrift2 admin service. ``argument`` names the caller's argument to blame
        when HBase refuses a setting (an unsupported compression, say)."""
        a = self.address
        with self._admin_lock:
            try:
                if self._admin_client is None:
                    self._admin_client = make_client(
                        self._admin_idl.THBaseService,
                        a.admin_host,
                        a.admin_port,
                        timeout=int(max(a.timeout, 60.0) * 1000),  # table admin takes seconds
                        trans_factory=TFramedTransportFactory()
                        if a.framed
                        else TBufferedTransportFactory(),
                        proto_factory=TCompactProtocolFactory()
                        if a.compact
                        else TBinaryProtocolFactory(),
                    )
                return getattr(self._admin_client, method)(*args)
            except self._admin_idl.TIOError as exc:
                message = _first_line(exc.message or "")
                if argument and ("ompression" in message or "DoNotRetryIOException" in message):
                    raise InvalidArgument(argument, f"HBase refused it: {message}") from exc
                raise StoreError(f"HBase {method}: {message}") from exc
            except (TException, OSError) as exc:
                if self._admin_client is not None:
                    self._admin_client.close()
                    self._admin_client = None
                raise StoreError(
                    f"HBase Thrift2 at {a.admin_host}:{a.admin_port} ({method}): "
                    f"{exc or type(exc).__name__}"
                ) from exc

    def _table_name_of(self, queue: str) -> Any:
        return self._admin_idl.TTableName(
            ns=self.address.namespace.encode(), qualifier=queue.encode()
        )

    def _drop_table(self, table: Any) -> None:
        if not self._admin("tableExists", table):
            return
        if self._admin("isTableEnabled", table):
            self._admin("disableTable", table)
        self._admin("deleteTable", table)

    def _make_namespace(self, ns: str) -> None:
        try:
            self._admin("getNamespaceDescriptor", ns)
        except StoreError as exc:
            if "NamespaceNotFound" not in str(exc):
                raise
            try:
                self._admin("createNamespace", self._admin_idl.TNamespaceDescriptor(name=ns))
            except StoreError as exc2:
                if "NamespaceExist" not in str(exc2):  # another gateway starting made it
                    raise

    def _ensure_namespace(self) -> None:
        self._make_namespace(self.address.namespace)
        meta = self._table_name_of(schema.META_TABLE)
        if not self._admin("tableExists", meta):
            family = self._admin_idl.TColumnFamilyDescriptor(name=META_FAMILY, maxVersions=1)
            desc = self._admin_idl.TTableDescriptor(tableName=meta, columns=[family])
            try:
                self._admin("createTable", desc, None)
            except StoreError:
                if not self._admin("tableExists", meta):  # another gateway won the race
                    raise


def _first_line(message: str | bytes | None) -> str:
    """The first line of an HBase error (Thrift1 sends it as bytes, Thrift2 as text)."""
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    return (message or "").strip().split("\n", 1)[0][:500]
