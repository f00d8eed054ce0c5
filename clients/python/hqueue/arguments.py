"""Argument checks of the client's calls: each error names the argument and says why
(:class:`~hqueue.errors.InvalidArgument`), as the gateway's do."""

from __future__ import annotations

from typing import Any

from hqueue_contract.limits import MAX_SEQUENCE

from . import protocol
from .errors import InvalidArgument
from .message import Message

Bytes = bytes | str


def _bytes(argument: str, value: Bytes) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgument(argument, f"must be bytes or str, got {type(value).__name__}")


def _int(argument: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(argument, f"must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgument(argument, f"must be {low}..{high}, got {value}")
    return value


def _message_id(argument: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, Message):
        value = value.id
    try:
        timestamp, sequence = value
    except (TypeError, ValueError):
        raise InvalidArgument(
            argument, f"must be a MessageID or (timestamp, sequence), got {value!r}"
        ) from None
    return protocol.hqueue_thrift().TMessageID(
        timestamp=_int(f"{argument}.timestamp", timestamp, 0, 2**63 - 1),
        sequenceID=_int(f"{argument}.sequence", sequence, 0, MAX_SEQUENCE),
    )
