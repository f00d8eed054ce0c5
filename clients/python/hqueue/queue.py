"""A :class:`Queue`: puts (routed to each partition's owner), scans, batches, push
subscribers and pull consumers of one queue, through one :class:`~hqueue.Connection`."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from hqueue_contract.limits import MAX_PARTITION_ID

from . import codec, fastpath, protocol
from .arguments import Bytes, _bytes, _int, _message_id
from .batch import Batch
from .errors import InvalidArgument, ServerError, TransportError
from .message import KeyedMessage, Message, MessageID, keyed_from_thrift
from .scan import ScanIterator, read_pages

if TYPE_CHECKING:  # types only: the runtime is imported by Queue.create_subscriber, when called
    from typing_extensions import Unpack  # typing's since 3.11; for the checker only

    from subscriber_runtime.listeners import Listener
    from subscriber_runtime.options import SubscriberOptions
    from subscriber_runtime.subscriber import Subscriber
    from subscriber_runtime.subscription import Subscription

    from .connection import Connection, QueueInfo

DEFAULT_BATCH_SIZE = 1000
# Messages a scan asks for per call. A call costs the gateway about 70 us whatever it carries
# (a request to decode, a reply to send, a turn of the event loop): at 1000 that was a fifth of
# its CPU per message read. 4096 is about 0.5 MiB of 100-byte messages, half what Kafka's
# consumer fetches per partition by default; the gateway stops a reply past 16 MiB whatever
# is asked.
DEFAULT_SCAN_BATCH = 4096


def _own_partitions(messages: Sequence[Any]) -> bool:
    """Whether any item names its own partition (a Message's, a 3-tuple's third)."""
    for m in messages:
        if isinstance(m, Message):
            if m.partition is not None:
                return True
        elif isinstance(m, (tuple, list)) and len(m) == 3 and m[2] is not None:
            return True
    return False


class Queue:
    """One queue, used through one :class:`Connection`. ``zookeeper`` (``host:port/chroot``)
    is where its :meth:`create_subscriber` registers subscribers unless told otherwise (None:
    through the gateway)."""

    def __init__(
        self, connection: Connection, name: Bytes, *, zookeeper: str | None = None
    ) -> None:
        self.connection = connection
        self.name = _bytes("name", name)
        if not self.name:
            raise InvalidArgument("name", "must not be empty")
        self.zookeeper = zookeeper

    def __repr__(self) -> str:
        return f"<hqueue.Queue {self.name.decode(errors='replace')!r} on {self.connection!r}>"

    def _tmessage(
        self,
        argument: str,
        item: Any,
        partition: int | None = None,
        key: Bytes | None = None,
        properties: dict[str, bytes] | None = None,
    ) -> Any:
        if isinstance(item, Message):
            topic, value, partition = item.topic, item.value, item.partition
        elif isinstance(item, (tuple, list)) and len(item) in (2, 3):
            topic, value = item[0], item[1]
            if len(item) == 3:
                partition = item[2]
        else:
            raise InvalidArgument(
                argument, f"must be a Message or a (topic, value[, partition]) tuple, got {item!r}"
            )
        if partition is not None:
            _int(f"{argument}.partition", partition, 0, MAX_PARTITION_ID)
        return protocol.hqueue_thrift().TMessage(
            topic=_bytes(f"{argument}.topic", topic),
            value=_bytes(f"{argument}.value", value),
            partitionID=partition,
            key=None if key is None else _bytes(f"{argument}.key", key),
            properties=properties or None,
        )

    def put(
        self,
        topic: Bytes,
        value: Bytes,
        partition: int | None = None,
        *,
        key: Bytes | None = None,
        properties: dict[str, bytes] | None = None,
    ) -> None:
        """Puts one message on ``partition``, or a random one. Returns once it is durable.
        ``key`` (1..255 bytes) finds it again with :meth:`find_by_key`."""
        message = self._tmessage("message", (topic, value), None, key, properties)
        if partition is None:
            self.connection.call("putMessage", self.name, message)
        else:
            _int("partition", partition, 0, MAX_PARTITION_ID)
            self._routed("putMessageWithPid", partition, message)

    def put_many(
        self,
        messages: Iterable[Message | tuple[Bytes, Bytes] | tuple[Bytes, Bytes, int]],
        partition: int | None = None,
        batch_size: int | None = None,
    ) -> int:
        """Puts messages in order and returns how many. Each item is a :class:`Message` or a
        ``(topic, value[, partition])`` tuple. With ``partition`` all go there; otherwise an
        item's own partition, else one random partition per batch. ``batch_size`` splits a
        long iterable into several calls (order is kept only within one partition)."""
        if partition is not None:
            _int("partition", partition, 0, MAX_PARTITION_ID)
        if batch_size is not None:
            _int("batch_size", batch_size, 1, 2**31 - 1)
        if batch_size is None and isinstance(messages, (list, tuple)):
            return self._put_batch(partition, messages, 0) if messages else 0
        sent = 0
        items = iter(messages)
        while chunk := list(itertools.islice(items, batch_size)):
            sent += self._put_batch(partition, chunk, sent)
        return sent

    def put_lists(
        self,
        topics: Bytes | Sequence[Bytes],
        values: Sequence[Bytes],
        partition: int | None = None,
        batch_size: int | None = None,
    ) -> int:
        """Puts ``values`` in order, all under one topic (``topics`` a bytes or str) or
        each under its own (``topics`` a list as long as ``values``); otherwise as
        :meth:`put_many`. The fastest way to send many messages through one connection."""
        if partition is not None:
            _int("partition", partition, 0, MAX_PARTITION_ID)
        if batch_size is not None:
            _int("batch_size", batch_size, 1, 2**31 - 1)
        if isinstance(values, (bytes, str)) or not isinstance(values, Sequence):
            raise InvalidArgument("values", "must be a list of values")
        one = isinstance(topics, (bytes, str))
        if not one and len(topics) != len(values):
            raise InvalidArgument("topics", "must be one topic or as many as the values")
        step = batch_size or max(len(values), 1)
        sent = 0
        for at in range(0, len(values), step):
            vs = values[at : at + step]
            ts = topics if one else topics[at : at + step]  # type: ignore[index]
            sent += self._put_lists(partition, ts, vs, at)
        return sent

    def _put_batch(self, partition: int | None, messages: Sequence[Any], base: int) -> int:
        """One call putting ``messages`` (``messages[base]`` is the first, for errors) on
        ``partition`` (through its owner), or each message's own, else a random one."""
        conn = self.connection
        generic = conn.compact or (
            partition is None and _own_partitions(messages) and conn.clustered(self.name)
        )  # several owners in one call: the generic path splits it (see _send)
        if generic:
            batch = []
            for i, item in enumerate(messages):
                tm = self._tmessage(f"messages[{base + i}]", item)
                if partition is not None:
                    tm.partitionID = None
                batch.append(tm)
            return self._send(batch, partition)
        pid = -1 if partition is None else partition
        request = codec.encode_put(0, self.name, pid, messages, base)
        self._put_encoded(partition, request)
        return len(messages)

    def _put_lists(
        self, partition: int | None, topics: Any, values: Sequence[Any], base: int
    ) -> int:
        pid = -1 if partition is None else partition
        # encoded (and checked) here on both paths, so errors name the same arguments
        request = codec.encode_put_lists(0, self.name, pid, topics, values, base)
        if self.connection.compact:
            one = isinstance(topics, (bytes, str))
            pairs = [(topics if one else topics[i], v) for i, v in enumerate(values)]
            return self._put_batch(partition, pairs, base)
        self._put_encoded(partition, request)
        return len(values)

    def _put_encoded(self, partition: int | None, request: bytes) -> None:
        """Sends a put encoded by :mod:`hqueue.codec`: to the partition's owner (as
        :meth:`_routed` does), or to this connection's gateway for a random partition."""
        conn = self.connection
        method = "putMessages" if partition is None else "putMessagesWithPid"
        target = conn if partition is None else conn.owner(self.name, partition)
        try:
            ch = fastpath.channel(target)  # connects: a dead owner fails here (routed around)
            if ch is None:  # not a socket client (a test's stand-in): decode and go generic
                args = fastpath.generic_args(method, request)
                if partition is None:
                    conn.call(method, self.name, args.tMessages)
                else:
                    self._routed(method, partition, args.tMessages)
                return
            fastpath.call(target, ch, method, request, fastpath.void_reply)
        except TransportError:
            if partition is not None:
                conn.avoid(target.address)
                conn.forget_locations(self.name)
            raise
        except ServerError:
            if partition is not None:
                conn.forget_locations(self.name)
            raise

    def _send(self, batch: list[Any], partition: int | None) -> int:
        if (
            partition is None
            and any(m.partitionID is not None for m in batch)
            and self.connection.clustered(self.name)
        ):  # each partition's messages straight to its owner
            by_partition: dict[int | None, list[Any]] = {}
            for m in batch:
                by_partition.setdefault(m.partitionID, []).append(m)
            for p, group in by_partition.items():
                for m in group:
                    m.partitionID = None
                self._send(group, p)
            return len(batch)
        if partition is None:
            self.connection.call("putMessages", self.name, batch)
            return len(batch)
        self._routed("putMessagesWithPid", partition, batch)
        return len(batch)

    def _routed(self, method: str, partition: int, payload: Any) -> None:
        """A put sent to the partition's owner; a refusal or a lost owner refreshes the map
        (the caller decides whether to retry: a failed put may or may not be stored)."""
        conn = self.connection
        target = conn.owner(self.name, partition)
        try:
            target.call(method, self.name, partition, payload)
        except TransportError:
            conn.avoid(target.address)
            conn.forget_locations(self.name)
            raise
        except ServerError:
            conn.forget_locations(self.name)
            raise

    def scan(
        self,
        *,
        start: MessageID | tuple[int, int] | Message | None = None,
        stop: MessageID | tuple[int, int] | Message | None = None,
        topics: Iterable[Bytes] | None = None,
        reverse: bool = False,
        partitions: int | Sequence[int] | None = None,
        batch_size: int = DEFAULT_SCAN_BATCH,
        limit: int | None = None,
    ) -> ScanIterator:
        """Messages from ``start`` (inclusive) to ``stop`` (exclusive), in MessageID order
        (newest first with ``reverse``; then ``start`` is the newer end).

        ``partitions``: None scans the whole queue, an int one partition, a list those
        partitions merged. ``topics`` keeps only those topics. ``batch_size`` messages are
        fetched per call; ``limit`` stops after that many.

        The gateway-side scanner is opened on the first ``next()`` and closed when the
        iteration ends, breaks or raises (as with happybase, consume the iterator while the
        connection is yours, e.g. inside the pool's ``with``).
        """
        _int("batch_size", batch_size, 1, 2**31 - 1)
        if limit is not None:
            _int("limit", limit, 0, 2**63 - 1)
        t = protocol.hqueue_thrift()
        topic_list = None
        if topics is not None:
            if isinstance(topics, (bytes, str)):
                raise InvalidArgument("topics", "must be a list of topics, not one topic")
            topic_list = [_bytes(f"topics[{i}]", x) for i, x in enumerate(topics)]
        spec = t.TMessageScan(
            startMessageID=_message_id("start", start),
            stopMessageID=_message_id("stop", stop),
            topics=topic_list,
            reversed=bool(reverse),
            caching=batch_size,
        )
        if partitions is None:
            opener: tuple[Any, ...] = ("queueScannerOpen", self.name, spec)
        elif isinstance(partitions, int):
            _int("partitions", partitions, 0, MAX_PARTITION_ID)
            opener = ("messageScannerOpen", self.name, partitions, spec)
        else:
            pids = [
                _int(f"partitions[{i}]", p, 0, MAX_PARTITION_ID) for i, p in enumerate(partitions)
            ]
            if not pids:
                raise InvalidArgument("partitions", "must not be empty")
            opener = ("combinedScannerOpen", self.name, pids, spec)
        return ScanIterator.over(read_pages(self.connection, opener, batch_size, limit))

    def batch(self, batch_size: int = DEFAULT_BATCH_SIZE, partition: int | None = None) -> Batch:
        """A :class:`~hqueue.batch.Batch` that sends its puts ``batch_size`` at a time (to
        ``partition``, else each message's own, else one random partition per call)."""
        if partition is not None:
            _int("partition", partition, 0, MAX_PARTITION_ID)
        return Batch(self, batch_size, partition)

    def locations(self) -> list[str]:
        """``host:port`` of the gateway serving each partition, in partition order."""
        return [
            x.decode() if isinstance(x, bytes) else x
            for x in self.connection.call("getQueueLocations", self.name)
        ]

    def info(self) -> QueueInfo:
        for info in self.connection.queues():
            if info.name.encode() == self.name:
                return info
        raise InvalidArgument("queueName", f"no queue named {self.name!r}")

    def truncate(self) -> None:
        """Deletes every message and keeps the partitions."""
        self.connection.truncate_queue(self.name)

    def create_subscriber(
        self,
        subscription: Subscription,
        listeners: Iterable[Listener],
        **options: Unpack[SubscriberOptions],
    ) -> Subscriber:
        """A push subscriber of this queue (seed 4.4's ``queue.createSubscriber``), not
        started yet: a :class:`subscriber_runtime.Subscriber` for ``subscription`` calling
        ``listeners`` in order for every batch (a ``list[hqueue.Message]``). It registers
        through this connection's gateways, or in ZooKeeper with
        ``zookeeper="host:port/chroot"`` (default: the queue's); it reaches the gateway with
        this connection's TLS unless ``tls`` is given. The options are the
        :class:`~subscriber_runtime.options.SubscriberOptions`. It runs on gevent:
        monkey-patch first (see :mod:`subscriber_runtime`)."""
        from subscriber_runtime import Subscriber  # the runtime (gevent) only when wanted

        if options.get("zookeeper") is None:
            options["zookeeper"] = self.zookeeper
        if options.get("tls") is None:
            options["tls"] = self.connection.tls
        return Subscriber(
            self.connection.addresses, self.name.decode(), subscription, list(listeners),
            **options,
        )  # fmt: skip

    # -- consumers (issue 13) -----------------------------------------------------------------

    def pull(
        self, subscriber: Bytes, member: Bytes, max_messages: int = 100, max_wait_ms: int = 5000
    ) -> list[KeyedMessage]:
        """Long poll as ``member`` of the pull group ``subscriber``: the messages of the member's
        partitions as soon as there are any, else ``[]`` after ``max_wait_ms``. The first pull
        creates the group (from new messages on) or joins it. Call :meth:`ack` after handling
        them; what stays unacknowledged is delivered again after the gateway's ack timeout.
        In a gateway cluster a failed gateway is replaced by another (see
        :meth:`Connection.consumer_call`)."""
        _int("max_messages", max_messages, 1, 100_000)
        _int("max_wait_ms", max_wait_ms, 0, 300_000)
        got = self.connection.consumer_call(
            self.name, "pullMessages", self.name, _bytes("subscriber", subscriber),
            _bytes("member", member), max_messages, max_wait_ms,
        )  # fmt: skip
        return keyed_from_thrift(got)

    def ack(
        self, subscriber: Bytes, member: Bytes, messages: Iterable[Message | KeyedMessage]
    ) -> None:
        """Acknowledges ``messages`` (pulled by ``member``): per partition, up to the last."""
        t = protocol.hqueue_thrift()
        last: dict[int, Any] = {}
        for i, m in enumerate(messages):
            if m.partition is None or m.id is None:
                raise InvalidArgument(f"messages[{i}]", "must be a pulled message")
            if m.partition not in last or m.id > last[m.partition]:
                last[m.partition] = m.id
        up_to = [
            t.TSubscribedPartition(partitionID=p, startMessageID=t.TMessageID(*mid))
            for p, mid in sorted(last.items())
        ]
        self.connection.consumer_call(
            self.name, "ackMessages", self.name, _bytes("subscriber", subscriber),
            _bytes("member", member), up_to,
        )  # fmt: skip

    def find_by_key(self, key: Bytes, limit: int = 100) -> list[KeyedMessage]:
        """Messages put with ``key``, newest first, from every partition."""
        _int("limit", limit, 1, 100_000)
        got = self.connection.call("findMessagesByKey", self.name, _bytes("key", key), limit)
        return keyed_from_thrift(got)
