"""Never silent: who serves an HBase namespace, recorded in its metadata table.

Two gateways over one HBase without ZooKeeper would each allocate MessageIDs for the same
partitions and overwrite each other's rows. So a gateway started without ``--zookeeper`` takes
an exclusive lease on its namespace (check-and-put on the ``\\x02gateway`` row of
``hqueue_meta``) and renews it; a second one refuses to start and says to use ``--zookeeper``.
A gateway cluster marks the row instead (renewed by its leader), so a lone gateway refuses to
start beside a cluster, and a cluster refuses to start beside a lone gateway. An entry whose
holder stopped renewing is free after ``ttl`` seconds (compared with the wall clock: clocks of
the machines must agree within a few seconds for this guard, which is not the cluster's
fencing; see :mod:`gateway.cluster.lease` for that).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import gevent

from ..errors import StoreError
from ..ids import wall_clock_ms

log = logging.getLogger(__name__)

TTL = 30.0  # seconds


class NamespaceTaken(StoreError):
    pass


class NamespaceLease:
    """``meta`` is the HBase store's :class:`~gateway.store.hbase_meta.MetaTable`."""

    def __init__(
        self,
        meta: Any,
        *,
        mode: str,
        advertise: str,
        namespace: str,
        zookeeper: str = "",
        ttl: float = TTL,
    ) -> None:
        assert mode in ("single", "cluster")
        self.meta = meta
        self.mode = mode
        self.advertise = advertise
        self.namespace = namespace
        self.zookeeper = zookeeper
        self.ttl = ttl
        self.holder = uuid.uuid4().hex[:12]
        self.lost = False  # a lone gateway whose lease someone else took must stop writing
        self._current: bytes | None = None
        self._renewer: gevent.Greenlet | None = None

    def acquire(self) -> None:
        """Takes (or, for a cluster, marks) the namespace; raises NamespaceTaken."""
        for _ in range(10):
            raw = self.meta.gateway_lease()
            self._refuse_if_taken(raw)
            if self.meta.swap_gateway_lease(raw, self._value()):
                self._current = self._value_written
                return
        raise StoreError("could not record this gateway in hqueue_meta (contended)")

    def start_renewing(self, when: Callable[[], bool] | None = None) -> None:
        """Renews every ttl/3 s (a cluster's mark: only while ``when()``, i.e. by its leader)."""
        self._renewer = gevent.spawn(self._renew_loop, when)

    def stop(self, *, release: bool = True) -> None:
        if self._renewer is not None:
            self._renewer.kill()
            self._renewer = None
        if release and self.mode == "single" and self._current is not None and not self.lost:
            try:  # a clean stop frees the namespace at once
                self.meta.swap_gateway_lease(self._current, b"{}")
            except StoreError as exc:
                log.warning("releasing the namespace lease: %s", exc)

    def renew(self) -> None:
        raw = self._current
        if self.meta.swap_gateway_lease(raw, self._value()):
            self._current = self._value_written
            return
        current = self.meta.gateway_lease()
        if _lease(current).get("holder") == self.holder:
            # Our own later value: a renewal that HBase applied but whose answer was lost (the
            # call timed out while HBase restarted). Nobody took the namespace; go on from it.
            if self.meta.swap_gateway_lease(current, self._value()):
                self._current = self._value_written
                return
            current = self.meta.gateway_lease()
        if self.mode == "cluster":  # the leader changed: take the mark over if it is ours
            self._refuse_if_taken(current)
            if self.meta.swap_gateway_lease(current, self._value()):
                self._current = self._value_written
            return
        self.lost = True
        raise NamespaceTaken(
            f"another gateway took namespace '{self.namespace}' ({_describe(current)}); this "
            "gateway stops writing"
        )

    def _renew_loop(self, when: Callable[[], bool] | None) -> None:
        while True:
            gevent.sleep(self.ttl / 3)
            if when is not None and not when():
                continue
            try:
                self.renew()
            except NamespaceTaken as exc:
                log.error("%s", exc)
                return
            except StoreError as exc:
                log.warning("renewing the namespace lease failed: %s", exc)

    def check(self) -> None:
        if self.lost:
            raise StoreError(
                f"this gateway lost its exclusive lease on namespace '{self.namespace}'"
            )

    def _value(self) -> bytes:
        self._value_written = json.dumps(
            {
                "mode": self.mode,
                "holder": self.holder,
                "advertise": self.advertise,
                "zookeeper": self.zookeeper,
                "expires_ms": wall_clock_ms() + int(self.ttl * 1000),
            },
            sort_keys=True,
        ).encode()
        return self._value_written

    def _refuse_if_taken(self, raw: bytes | None) -> None:
        d = _lease(raw)
        if not d or d.get("expires_ms", 0) <= wall_clock_ms() or d.get("holder") == self.holder:
            return
        same_gateway = d.get("mode") == "single" and d.get("advertise") == self.advertise
        if self.mode == "single" and same_gateway:
            return  # the same gateway restarted (two cannot listen on one address)
        if self.mode == "cluster" and d.get("mode") == "cluster":
            return  # another member of our cluster renews it
        if d.get("mode") == "cluster":
            raise NamespaceTaken(
                f"HBase namespace '{self.namespace}' is served by a gateway cluster "
                f"(ZooKeeper {d.get('zookeeper')}); start this gateway with "
                f"--zookeeper {d.get('zookeeper')} to join it"
            )
        raise NamespaceTaken(
            f"another gateway ({d.get('advertise')}) serves HBase namespace "
            f"'{self.namespace}' without ZooKeeper; two gateways over one HBase must form a "
            "cluster: start every gateway with --zookeeper HOST:PORT[/CHROOT] (or wait "
            f"{self.ttl:g} s after the other one died)"
        )


def _lease(raw: bytes | None) -> dict[str, Any]:
    """The \\x02gateway cell's record ({} for none)."""
    return json.loads(raw) if raw else {}


def _describe(raw: bytes | None) -> str:
    d = _lease(raw)
    return f"{d.get('mode')} mode, {d.get('advertise')}" if d else "nobody"
