"""``hqueue-gateway --store memory``: the whole gateway over the memory store, as a process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import GatewayFactory
from tests.helpers import msg, scan_queue


def test_a_memory_gateway_serves_and_keeps_nothing_across_restarts(tmp_path: Path, T: Any) -> None:
    factory = GatewayFactory(tmp_path, store="memory")
    try:
        gw = factory()
        c = gw.client()
        c.createQueue(b"q", 2, 3600, {})
        c.putMessagesWithPid(b"q", 1, [msg(T, b"a", b"1"), msg(T, b"b", b"2")])
        c.putMessages(b"q", [msg(T, b"a", b"3", pid=0)])
        got = scan_queue(c, b"q")
        assert sorted((m.partitionID, m.value) for m in got) == [(0, b"3"), (1, b"1"), (1, b"2")]
        c.close()
        assert gw.stop() == 0
        assert not (tmp_path / "data0").exists()  # no files: --data-dir is not used
        c = gw.start().client()
        assert c.listQueues() == []
        c.close()
    finally:
        factory.close()
