"""Listeners the subscription tests load into subscriber processes (``--listener tests.x:y``).

Each writes one JSON line per batch to ``$HQ_TEST_OUT``: its tag and the batch's messages as
``[partition, timestamp, sequence, topic, value]``, so a test can check order, completeness and
which listener saw a batch first.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import gevent

_lock = threading.Lock()


def _write(tag: str, messages: list[Any]) -> None:
    line = json.dumps(
        {
            "tag": tag,
            "messages": [
                [
                    m.partition,
                    m.id.timestamp,
                    m.id.sequence,
                    m.topic.decode(),
                    m.value.decode(),
                    None if m.key is None else m.key.decode(),
                    {k: v.decode() for k, v in (m.properties or {}).items()},
                ]
                for m in messages
            ],
        }
    )
    with _lock, open(os.environ["HQ_TEST_OUT"], "a") as out:
        out.write(line + "\n")


class First:
    def on_messages(self, messages: list[Any]) -> None:
        _write("first", messages)


class Second:
    def on_messages(self, messages: list[Any]) -> None:
        _write("second", messages)


class FailThrice:
    """Fails the first three batches it sees (raise, return False, return 7), then records."""

    def __init__(self) -> None:
        self.calls = 0

    def on_messages(self, messages: list[Any]) -> Any:
        self.calls += 1
        _write(f"attempt{self.calls}", messages)
        if self.calls == 1:
            raise RuntimeError("listener failure 1")
        if self.calls == 2:
            return False
        if self.calls == 3:
            return 7
        _write("ok", messages)
        return None


class Stall:
    """Records the first batch, then never returns (a stalled subscriber)."""

    def on_messages(self, messages: list[Any]) -> None:
        _write("stalled", messages)
        gevent.sleep(3600)


class Poison:
    """Refuses every batch holding the value ``poison`` while the file ``$HQ_TEST_POISON``
    exists; records each delivery (tag ``delivery``) and each accepted batch (tag ``ok``)."""

    def on_messages(self, messages: list[Any]) -> Any:
        _write("delivery", messages)
        if any(m.value == b"poison" for m in messages) and os.path.exists(
            os.environ["HQ_TEST_POISON"]
        ):
            raise RuntimeError("cannot handle poison")
        _write("ok", messages)
        return None
