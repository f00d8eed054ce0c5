"""Forwarding a put to the gateway that owns its partition: one hop, over pooled connections.

A gateway of a cluster takes any call; a put for a partition owned elsewhere goes to the owner
as ``forwardMessages`` (which the owner writes only if it still owns the partition, and never
forwards again) and is acknowledged when the owner acknowledged it. Connections are kept per
owner address, one call at a time each (thriftpy2 clients do not match replies to calls).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from hqueue_contract.protocol import closed_by_peer
from thriftpy2.protocol import TCompactProtocolFactory
from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory  # type: ignore[attr-defined]
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TException
from thriftpy2.transport.buffered import TCyBufferedTransportFactory
from thriftpy2.transport.framed import TCyFramedTransportFactory

from ..errors import InvalidArgument, NotOwner, StoreError, Unwritten

log = logging.getLogger(__name__)

_IDLE_PER_ADDRESS = 8


class Forwarder:
    def __init__(
        self,
        thrift: Any,
        *,
        framed: bool,
        compact: bool,
        timeout: float = 30.0,
        tls: Any = None,  # an ssl.SSLContext (gateway.tls.client_context) or None: plain TCP
    ) -> None:
        self._tls = tls
        self._t = thrift
        self._framed = framed
        self._compact = compact
        self.timeout = timeout  # seconds
        self._idle: dict[str, list[Any]] = {}

    def forward(
        self,
        address: str,
        queue: str,
        partition: int,
        topics: Sequence[bytes],
        values: Sequence[bytes],
    ) -> None:
        message = self._t.TMessage
        messages = [message(topic=t, value=v) for t, v in zip(topics, values, strict=True)]
        with self._client(address) as client:
            try:
                client.forwardMessages(queue.encode(), partition, messages)
            except self._t.IOError as exc:
                raise _io_error(f"owner {address}", exc.message) from exc
            except self._t.IllegalArgument as exc:
                raise InvalidArgument("tMessages", f"refused by the owner: {exc.message}") from exc

    def forward_returning_ids(
        self, address: str, queue: str, partition: int, messages: list[Any]
    ) -> list[tuple[int, int]]:
        """A put whose messages carry keys or properties, or whose ids are wanted: whole
        TMessages to the owner (``forwardMessagesReturningIds``); the ids it assigned."""
        ids = self.call(address, "forwardMessagesReturningIds", queue.encode(), partition,
                        messages, argument="tMessages")  # fmt: skip
        return [(i.timestamp, i.sequenceID) for i in ids]

    def call(self, address: str, method: str, *args: Any, argument: str = "request") -> Any:
        """Any method on the gateway at ``address``; its IOError is a StoreError here, its
        IllegalArgument an InvalidArgument."""
        with self._client(address) as client:
            try:
                return getattr(client, method)(*args)
            except self._t.IOError as exc:
                raise _io_error(address, exc.message) from exc
            except self._t.IllegalArgument as exc:
                raise InvalidArgument(argument, f"refused by the owner: {exc.message}") from exc

    @contextlib.contextmanager
    def _client(self, address: str) -> Iterator[Any]:
        idle = self._idle.setdefault(address, [])
        client = idle.pop() if idle else None
        while client is not None and closed_by_peer(client):
            client.close()  # the owner restarted since: its old connections are gone
            client = idle.pop() if idle else None
        try:
            if client is None:
                client = self._connect(address)
            yield client
        except (InvalidArgument, StoreError):
            if client is not None:
                self._keep(idle, client)  # an answer: the connection is fine
            raise
        except (TException, OSError) as exc:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
            raise StoreError(
                f"forwarding to the owner at {address} failed: {type(exc).__name__}: {exc}"
            ) from exc
        except BaseException:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
            raise
        else:
            self._keep(idle, client)

    def _connect(self, address: str) -> Any:
        """A new connection to ``address``; Unwritten when it cannot be made (nothing sent)."""
        host, _, port = address.rpartition(":")
        try:
            return make_client(
                self._t.HQueueService,
                host,
                int(port),
                timeout=int(self.timeout * 1000),
                ssl_context=self._tls,
                trans_factory=TCyFramedTransportFactory()
                if self._framed
                else TCyBufferedTransportFactory(),
                proto_factory=TCompactProtocolFactory()
                if self._compact
                else TCyBinaryProtocolFactory(),
            )
        except (TException, OSError) as exc:
            raise Unwritten(
                f"forwarding to the owner at {address} failed: {type(exc).__name__}: {exc}"
            ) from exc

    @staticmethod
    def _keep(idle: list[Any], client: Any) -> None:
        if len(idle) < _IDLE_PER_ADDRESS:
            idle.append(client)
        else:
            client.close()

    def close(self) -> None:
        for clients in self._idle.values():
            for client in clients:
                with contextlib.suppress(Exception):
                    client.close()
        self._idle.clear()


def _io_error(where: str, message: str) -> StoreError:
    """The owner's IOError: NotOwner when it refused the put for not owning its partition."""
    cls = NotOwner if message.startswith(NotOwner.MARK) else StoreError
    return cls(f"{where}: {message}")


def forward_messages(
    thrift: Any, topics: Sequence[bytes], values: Sequence[bytes], extras: dict[int, Any] | None
) -> list[Any]:
    """The TMessages of a group that goes to its owner whole: with each message's key and
    properties (``extras``: index in the group -> :class:`gateway.keys.Extras`)."""
    out = []
    for i, (topic, value) in enumerate(zip(topics, values, strict=True)):
        m = thrift.TMessage(topic=topic, value=value)
        ex = extras.get(i) if extras else None
        if ex:
            m.key = ex.key
            m.properties = dict(ex.properties) or None
        out.append(m)
    return out


def forward_first_id(
    forwarder: Forwarder,
    address: str,
    queue: str,
    partition: int,
    messages: list[Any],
    firsts: dict[int, tuple[int, int]],
) -> None:
    """Forwards a whole group to the owner and records the first id it assigned (the owner
    gives one partition's group consecutive ids)."""
    ids = forwarder.forward_returning_ids(address, queue, partition, messages)
    if len(ids) != len(messages):
        raise StoreError(f"owner {address} answered {len(ids)} ids for {len(messages)} messages")
    if ids:
        firsts[partition] = ids[0]
