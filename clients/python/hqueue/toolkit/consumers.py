"""Toolkit operations for consumers: dead letters, replaying them, rewinding a subscriber,
finding messages by key. Same conventions as :mod:`.commands` (a client in, data or text out)."""

from __future__ import annotations

import datetime
import re
from typing import Any

from hqueue_contract.registry import dlq_name

from hqueue.protocol import hqueue_thrift

from .commands import (
    FOLLOW_BATCH,
    Client,
    ToolkitError,
    _check_subscriber,
    _name,
    _read,
    parse_message_id,
    to_bytes,
)
from .display import DEFAULT_VALUE_LIMIT, format_message, format_messages, render_bytes

# "latest" is any time after every stored message: the gateway then keeps each partition at
# its newest message (see SubscriptionService.reset).
LATEST_MS = 2**62
_EPOCH_MS = re.compile(r"\d+\Z")


def parse_time(text: str) -> int:
    """``--to`` of reset_subscriber as ms since the epoch: ``earliest``, ``latest``, epoch ms,
    a MessageID ``TS.SEQ`` (its timestamp), or ISO 8601 (no zone: UTC)."""
    t = text.strip()
    if t == "earliest":
        return 0
    if t == "latest":
        return LATEST_MS
    if _EPOCH_MS.match(t):
        return int(t)
    mid = parse_message_id(t, "--to")
    if mid is not None:
        return mid[0]
    try:
        moment = datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ToolkitError(
            f"'--to' must be earliest, latest, epoch ms, TS.SEQ or ISO 8601, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def reset_subscriber(client: Client, queue: str, subscriber: str, to: str) -> str:
    _check_subscriber(subscriber)
    ms = parse_time(to)
    client.resetSubscriber(_name(queue), to_bytes(subscriber), ms)
    where = "its newest messages" if ms == LATEST_MS else f"{to}"
    return f"subscriber '{subscriber}' of queue '{queue}' reset to {where}"


def dead_letters(client: Client, queue: str, subscriber: str, limit: int = 1000) -> list[Any]:
    """The subscriber's dead letters, oldest first (none when it never had any)."""
    _check_subscriber(subscriber)
    dlq = dlq_name(queue, subscriber)
    scan = hqueue_thrift().TMessageScan(caching=min(limit, FOLLOW_BATCH))
    try:
        return _read(client, dlq, 0, scan, limit)
    except hqueue_thrift().IllegalArgument as exc:
        if "does not exist" in str(exc.message):
            return []
        raise


def format_dead_letters(messages: list[Any], value_limit: int = DEFAULT_VALUE_LIMIT) -> str:
    """Each dead letter as a message line, then where it came from and why it failed."""
    if not messages:
        return "no dead letters"
    lines = []
    for m in messages:
        props = {
            (k.decode() if isinstance(k, bytes) else k): v for k, v in (m.properties or {}).items()
        }

        where, mid, attempts, error = (
            render_bytes(props.get(name, b"-"), 200)
            for name in ("dlq.partition", "dlq.id", "dlq.attempts", "dlq.error")
        )
        lines.append(format_message(m, value_limit))
        lines.append(f"    from partition {where} id {mid} after {attempts} attempts: {error}")
    return "\n".join(lines)


def replay_dead_letters(client: Client, queue: str, subscriber: str) -> str:
    _check_subscriber(subscriber)
    n = client.replayDeadLetters(_name(queue), to_bytes(subscriber))
    return f"{n} dead letter(s) of '{subscriber}' on '{queue}' will be delivered again"


def find_by_key(client: Client, queue: str, key: str, limit: int = 100) -> list[Any]:
    """The messages put with ``key``, newest first, every partition, within the TTL."""
    if not key:
        raise ToolkitError("'key' must not be empty")
    if limit < 1:
        raise ToolkitError(f"'limit' must be >= 1, got {limit}")
    return list(client.findMessagesByKey(_name(queue), to_bytes(key), limit))


def format_found(queue: str, key: str, messages: list[Any]) -> str:
    if not messages:
        return f"no message of queue '{queue}' has the key {key!r} (within its TTL)"
    return format_messages(messages)
