"""Admin calls among many column families must not stall everyone's puts.

RocksDB rewrites its OPTIONS file for every column family it creates or drops, which takes
tens of milliseconds with a hundred families; a truncate of a 16-partition queue does it 32
times. Done on the event loop, a concurrent producer's puts waited 0.7-1 s. The figure is
printed; the bound asserted is generous (the machine is shared) but far below that.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

WORST_PUT_BOUND = 0.5  # seconds; the aim is 0.25 s (printed figure), the old code took 0.7-1+ s
# On the loop, each of the 9 admin calls stalled the puts waiting then: 9 puts over the bound.
# The third worst put is judged, so that one scheduling hiccup of a loaded machine is not.
JUDGED = 3


@pytest.fixture
def store() -> str:
    return "embedded"  # the stall is RocksDB's (the HBase store's admin calls are remote)


def test_admin_calls_do_not_stall_puts(gateway: Any, T: Any) -> None:
    admin = gateway.client()
    for i in range(8):  # 128 column families
        admin.createQueue(f"bg{i}", 16, 3600, {})
    admin.createQueue("hot", 1, 3600, {})
    latencies: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        c = gateway.client()
        m = [T.TMessage(topic=b"t", value=b"x" * 100)]
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                c.putMessages("hot", m)
            except Exception as exc:
                errors.append(repr(exc))
                return
            latencies.append(time.monotonic() - t0)
            time.sleep(0.002)

    producer = threading.Thread(target=produce)
    producer.start()
    t0 = time.monotonic()
    rounds = 0
    try:
        for i in range(3):
            admin.truncateQueue(f"bg{i}")
            admin.createQueue(f"extra{i}", 16, 3600, {})
            admin.deleteQueue(f"extra{i}")
            rounds += 1
    finally:
        stop.set()
        producer.join(30)
    took = time.monotonic() - t0
    slowest = sorted(latencies, reverse=True)[:JUDGED]
    print(
        f"{rounds * 3} admin calls over 16-partition queues among 128 families took {took:.1f} s;"
        f" {len(latencies)} puts meanwhile, the slowest {[round(x * 1000) for x in slowest]} ms"
    )
    assert not errors, errors[:3]
    assert len(slowest) == JUDGED, f"only {len(latencies)} puts during the admin calls"
    judged = slowest[-1]
    assert judged < WORST_PUT_BOUND, f"{JUDGED} puts waited >= {judged:.2f} s for admin work"
    assert [q.name for q in admin.listQueues()] == [b"bg%d" % i for i in range(8)] + [b"hot"]
