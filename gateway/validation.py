"""Argument checks at the Thrift boundary; every failure names the argument it is about."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import InvalidArgument
from .rowkey import MAX_PARTITIONS, MAX_SEQUENCE, MAX_TIMESTAMP, MessageId

QUEUE_NAME = re.compile(rb"[A-Za-z0-9_.\-]{1,128}\Z")
# "." and ".." match QUEUE_NAME but name a directory itself or its parent wherever a queue
# name becomes a path (HBase table directories, export folders): refused everywhere.
_RESERVED_NAMES = frozenset([b".", b".."])
# ASCII digits only: str.isdigit() also accepts '²' or '٣', which int() then refuses (or
# reads as another number). 18 digits keep every value an int64.
_CONFIG_INT = re.compile(r"\s*([0-9]{1,18})\s*", re.ASCII)
MAX_TOPIC_BYTES = 255
MAX_TTL_SECONDS = 2**31 - 1

_INT_KEYS = {
    "hbase.hqueue.partitionsPerRegion": 1,
    "hbase.hregion.memstore.flush.size": 1,
    "hbase.hregion.majorcompaction": 0,
    "hbase.hstore.compaction.min": 2,
    "hbase.hstore.compaction.max": 2,
    "hbase.hstore.blockingStoreFiles": 1,
}
_COMPRESSION = {"NONE", "GZ", "SNAPPY", "LZ4", "LZO", "ZSTD", "BZIP2"}
# The configuration keys of the seed (HQueue Toolkit, section 4.1).
CONFIG_KEYS = frozenset([*_INT_KEYS, "hbase.hqueue.compression"])


def queue_name(raw: Any, argument: str = "queueName") -> str:
    if isinstance(raw, str):
        raw = raw.encode()
    if not isinstance(raw, bytes) or not QUEUE_NAME.match(raw):
        raise InvalidArgument(argument, f"must match [A-Za-z0-9_.-]{{1,128}}, got {_show(raw)}")
    if raw in _RESERVED_NAMES:
        raise InvalidArgument(argument, f"{_show(raw)} is reserved (it names a directory)")
    return raw.decode()


def partition(raw: Any, partitions: int, argument: str = "partitionID") -> int:
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise InvalidArgument(argument, f"must be an integer, got {_show(raw)}")
    if not 0 <= raw < partitions:
        raise InvalidArgument(
            argument, f"{raw} is out of range: the queue has partitions 0..{partitions - 1}"
        )
    return raw


def partition_count(raw: Any) -> int:
    if not isinstance(raw, int) or not 1 <= raw <= MAX_PARTITIONS:
        raise InvalidArgument("partitionCount", f"must be 1..{MAX_PARTITIONS}, got {_show(raw)}")
    return raw


def ttl_seconds(raw: Any) -> int:
    if not isinstance(raw, int) or not 0 < raw <= MAX_TTL_SECONDS:
        raise InvalidArgument("ttlSeconds", f"must be > 0 seconds, got {_show(raw)}")
    return raw


def queue_config(raw: Mapping[Any, Any] | None, partitions: int) -> dict[str, str]:
    """The seed's configuration keys with checked values; unknown keys are refused."""
    config: dict[str, str] = {}
    for key, value in (raw or {}).items():
        k = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
        v = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        argument = f"config[{k!r}]"
        if k in _INT_KEYS:
            digits = _CONFIG_INT.fullmatch(v)
            if digits is None or int(digits.group(1)) < _INT_KEYS[k]:
                raise InvalidArgument(
                    argument,
                    f"must be an integer >= {_INT_KEYS[k]} in ASCII digits, got {_show(v)}",
                )
            v = str(int(digits.group(1)))
        elif k == "hbase.hqueue.compression":
            if v.upper() not in _COMPRESSION:
                raise InvalidArgument(argument, f"must be one of {sorted(_COMPRESSION)}, got {v!r}")
            v = v.upper()
        else:
            raise InvalidArgument(
                "config", f"unknown key {k!r}; known keys: {', '.join(sorted(CONFIG_KEYS))}"
            )
        config[k] = v
    per_region = int(config.get("hbase.hqueue.partitionsPerRegion", "1"))
    if per_region > partitions:
        raise InvalidArgument(
            "config['hbase.hqueue.partitionsPerRegion']",
            f"{per_region} is more than the queue's {partitions} partitions",
        )
    lo = int(config.get("hbase.hstore.compaction.min", "2"))
    hi = int(config.get("hbase.hstore.compaction.max", str(max(lo, 10))))
    if lo > hi:
        raise InvalidArgument(
            "config['hbase.hstore.compaction.min']", f"{lo} is above compaction.max {hi}"
        )
    return config


def message_id(raw: Any, argument: str) -> MessageId | None:
    if raw is None:
        return None
    ts, seq = raw.timestamp, raw.sequenceID
    if ts is None:
        raise InvalidArgument(f"{argument}.timestamp", "must be set")
    if not isinstance(ts, int) or not 0 <= ts <= MAX_TIMESTAMP:
        raise InvalidArgument(
            f"{argument}.timestamp", f"must be 0..{MAX_TIMESTAMP} ms, got {_show(ts)}"
        )
    seq = 0 if seq is None else seq
    if not isinstance(seq, int) or not 0 <= seq <= MAX_SEQUENCE:
        raise InvalidArgument(f"{argument}.sequenceID", f"must be 0..{MAX_SEQUENCE}, got {seq}")
    return MessageId(ts, seq)


def batch_size(raw: Any, limit: int, argument: str = "nbMessages") -> int:
    if not isinstance(raw, int) or raw < 1:
        raise InvalidArgument(argument, f"must be >= 1, got {_show(raw)}")
    return min(raw, limit)


def _show(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 80 else text[:77] + "..."
