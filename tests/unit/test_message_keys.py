"""Message keys and properties in the service, over the memory store: written before the rows,
attached to what scans return, found by key."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from hqueue.protocol import hqueue_thrift

from gateway.errors import StoreError
from gateway.keys import Extras, MessageExtras
from gateway.rowkey import MessageId
from gateway.scanners import ScannerRegistry
from gateway.service import GatewayService
from gateway.store.base import Extra, PutBatch, QueueMeta
from gateway.store.memory import MemoryStore

T = hqueue_thrift()


class Recording(MemoryStore):
    """Records the order of writes; ``put_extras`` fails while ``fail`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.fail = False

    def put(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> None:
        self.calls.append("rows")
        super().put(queue, batches)

    def put_extras(self, queue: QueueMeta, items: Sequence[Extra]) -> None:
        self.calls.append("extras")
        if self.fail:
            raise StoreError("the key index is down")
        super().put_extras(queue, items)


def service(store: MemoryStore) -> GatewayService:
    s = GatewayService(store, ScannerRegistry(), T, advertise="127.0.0.1:1")
    s.extras = MessageExtras(store)
    return s


def test_keys_are_written_before_the_rows_and_a_failed_index_write_stores_nothing() -> None:
    store = Recording()
    svc = service(store)
    svc.createQueue(b"q", 1, 3600, {})
    svc.putMessages(b"q", [T.TMessage(topic=b"t", value=b"plain")])
    assert store.calls == ["rows"]  # no key: no index write
    store.calls.clear()
    svc.putMessages(b"q", [T.TMessage(topic=b"t", value=b"v", key=b"k")])
    assert store.calls == ["extras", "rows"]
    store.fail = True
    with pytest.raises(StoreError):
        svc.putMessages(b"q", [T.TMessage(topic=b"t", value=b"lost", key=b"k2")])
    meta = store.get_queue("q")
    assert meta is not None
    reader = store.reader(meta, 0, None, None, reverse=False, topics=None)
    assert [r[3] for r in reader.read(10).rows] == [b"plain", b"v"]


def test_scans_and_lookups_carry_keys_and_properties() -> None:
    store = MemoryStore()
    svc = service(store)
    svc.createQueue(b"q", 2, 3600, {})
    svc.putMessagesWithPid(b"q", 0, [T.TMessage(topic=b"t", value=b"a")])
    svc.putMessagesWithPid(
        b"q", 1, [T.TMessage(topic=b"t", value=b"b", key=b"k", properties={"p": b"1"})]
    )
    time.sleep(0.005)  # a later millisecond: "c" is the newest, not tied with "b"
    svc.putMessagesWithPid(b"q", 0, [T.TMessage(topic=b"t", value=b"c", key=b"k")])
    sid = svc.queueScannerOpen(b"q", T.TMessageScan())
    got = {m.value: m for m in svc.messageScannerGetList(sid, 10)}
    assert got[b"a"].key is None and got[b"b"].key == b"k" and got[b"b"].properties == {"p": b"1"}
    assert [m.value for m in svc.findMessagesByKey(b"q", b"k", 10)] == [b"c", b"b"]
    meta = store.get_queue("q")
    assert meta is not None
    extras = MessageExtras(store)
    (found,) = [mid for p, mid in extras.lookup(meta, b"k", 10) if p == 1]
    assert extras.get(meta, 1, found) == Extras(b"k", {"p": b"1"})
    assert extras.get(meta, 1, (1, 0)) == Extras()
    assert store.get_extras(meta, 1, [MessageId(*found)])
