"""Memory a client can make the gateway hold, by what it sends, asks for or withholds.

Each test runs a real gateway process and watches its resident memory (psutil, by pid) while a
client on 127.0.0.1 does the damage; the figures measured are printed (``pytest -s``). Bounds
are generous (a busy 2-core machine, glibc keeping freed memory), but each test was run with
its safeguard removed and failed (see the commit that added it).
"""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest

from tests.integration.test_robustness import (
    MB,
    RssPeak,
)

MiB = 1 << 20


@pytest.fixture
def store() -> str:
    """Buffers and scanners live in the gateway whatever the store: the embedded one does."""
    return "embedded"


def rss(gw: Any) -> int:
    return int(psutil.Process(gw.pid).memory_info().rss)


def test_read_ahead_is_bounded_by_the_reply_cap(gateway: Any, T: Any) -> None:
    """messageScannerGetList(160) over 160 bodies of 1 MiB: the reply stops at 16 MiB, and the
    scanner must not have read (and kept) the other 144 MiB. It did: +191 MiB at the peak and
    +160 MiB held afterwards."""
    c = gateway.client()
    c.createQueue("q", 1, 3600, {})
    body = b"x" * MiB
    for _ in range(16):
        c.putMessages("q", [T.TMessage(topic=b"t", value=body)] * 10)
    sid = c.messageScannerOpen("q", 0, T.TMessageScan(caching=160))
    with RssPeak(gateway.pid) as peak:
        first = c.messageScannerGetList(sid, 160)
        del first[:]  # the client's copy is not the gateway's
        time.sleep(0.2)  # let the sampler see the settled state
        held = rss(gateway) - peak.base
    print(f"peak RSS growth {peak.growth / MB:.0f} MB, held after the reply {held / MB:.0f} MB")
    assert peak.growth < 100 * MB
    assert held < 60 * MB
    got = 0
    while batch := c.messageScannerGetList(sid, 160):
        got += len(batch)
    assert got == 160 - 16, "the rest is still there to read"
