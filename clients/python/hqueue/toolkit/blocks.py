"""``hqueue import``'s hot path: JSON Lines parsed a block at a time and put requests encoded
from columns, in the importing process or in ``--workers`` processes.

A block is a run of whole lines (about ``batch_size`` lines per partition it will fill). The
common line shape (``{"topic": ..., "value": ...}``, an optional ``partition``, text without
anything unusual: the exact grammar is in :mod:`._purejsonl`) goes straight from the block's
bytes to whole put calls in C (:mod:`._fastjsonl`: no Python object per line, no GIL held;
``HQUEUE_PUREPYTHON=1`` selects its pure-Python twin). A block it does not take is
decoded in one call by ``msgspec`` (``Decoder.decode_lines`` into a typed struct: no dict per
line), its columns (topics, values, partitions) are checked with list-wide operations, the
records are grouped by partition (a stable sort of the line indices, so each partition keeps
file order), and each group is encoded into whole ``putMessagesWithPid``/``putMessages`` calls
by the client's codec (:func:`hqueue.codec.encode_put_lists`, in C when built). Only what is
unusual takes the per-line path: base64 fields, keys, a malformed line (the per-line parser
then names the line and the records before it are still sent), records already acknowledged
(``--resume``). That path is :func:`records.parse_json_line`, so both give the same records
and the same errors.

A block's result is picklable (bytes, ranges and lists): ``--workers N`` runs
:func:`encode_block` in a process pool and the importer sends the results in file order.
"""

from __future__ import annotations

import bisect
import importlib
import operator
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import IO, Annotated, Any

import msgspec
from hqueue_contract.limits import MAX_PARTITION_ID

from hqueue import codec

from .commands import ToolkitError
from .records import PutEncoder, Record, parse_json_line, tmessages

MIN_BLOCK_BYTES = 64 * 1024
MAX_BLOCK_BYTES = 32 * 1024 * 1024
DECODE_BYTES = 128 * 1024  # decoded in one C call at most (about 0.2-0.5 ms)


class _Line(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One JSON line of the common shape, as the fast path decodes it. Anything else (base64
    fields, a key, a partition given as a string or out of range, a missing field, a wrong
    type) fails the block's decode and sends the block down the per-line path, which accepts
    the rest of the format and names the line of an error."""

    topic: str
    value: str
    partition: Annotated[int, msgspec.Meta(ge=0, le=MAX_PARTITION_ID)] | None = None
    timestamp: Any = None  # written by export, ignored
    sequence: Any = None


def _load() -> tuple[ModuleType, bool]:
    if os.environ.get("HQUEUE_PUREPYTHON", "") not in ("", "0"):
        return importlib.import_module("hqueue.toolkit._purejsonl"), False
    try:
        return importlib.import_module("hqueue.toolkit._fastjsonl"), True
    except ImportError:  # not built (no compiler at install time): the twin does it
        return importlib.import_module("hqueue.toolkit._purejsonl"), False


lines_impl, NATIVE = _load()
_DECODER = msgspec.json.Decoder(_Line)
_TOPIC = operator.attrgetter("topic")
_VALUE = operator.attrgetter("value")
_PARTITION = operator.attrgetter("partition")


@dataclass(frozen=True)
class BlockConfig:
    queue: bytes
    keys: bool  # the IDL's TMessage has a key field
    by_topic: bool  # --partition-by-topic
    partitions: int
    batch_size: int
    binary: bool  # encode requests (else the records go to thriftpy2's compact protocol)
    acked_prefix: int = 0  # --resume: records below this are acknowledged ...
    acked_window: bytes = b""  # ... and these after it (one byte per record, 1 = acked)


@dataclass
class Out:
    """One call's worth: ``payload`` is the encoded request (binary protocol) or the records
    (compact); ``numbers`` the record numbers it carries (a range when they are evenly
    spaced, which the ack tracker marks in one slice)."""

    partition: int | None
    payload: bytes | list[Record]
    numbers: range | list[int]


@dataclass
class BlockResult:
    outs: list[Out]
    records: int  # records of the block that are sent (not skipped, before any error)
    error: ToolkitError | None = None


# -- reading blocks ----------------------------------------------------------------------------


def read_blocks(stream: IO[bytes], lines_per_block: int) -> Iterator[tuple[int, bytes, int]]:
    """(number of the block's first line, the block's bytes: whole lines, how many) until EOF.
    The block
    size in bytes follows the average line length so a block holds about
    ``lines_per_block`` lines."""
    first = 0
    target = MIN_BLOCK_BYTES
    carry = b""
    eof = False
    while not eof:
        chunk = stream.read(target)
        if not chunk:
            eof = True
            block = carry
        else:
            cut = chunk.rfind(b"\n") + 1
            if cut == 0:  # one line longer than the block so far: read on
                carry += chunk
                target = min(target * 2, MAX_BLOCK_BYTES)
                continue
            # one copy of the block's bytes (carry + chunk, then a slice of it, were two)
            block = (
                b"".join((carry, memoryview(chunk)[:cut])) if cut < len(chunk) or carry else chunk
            )
            carry = chunk[cut:]
        if not block:
            break
        lines = lines_impl.count_lines(block) + (not block.endswith(b"\n"))
        yield first, block, lines
        first += lines
        avg = max(len(block) // max(lines, 1), 1)
        target = max(MIN_BLOCK_BYTES, min(avg * lines_per_block, MAX_BLOCK_BYTES))


# -- one block -----------------------------------------------------------------------------------


def encode_block(
    cfg: BlockConfig, first: int, block: bytes, nlines: int | None = None
) -> BlockResult:
    """The calls of one block (``first`` numbers its first line, from 0; ``nlines`` its lines,
    counted here if not given)."""
    if nlines is None:
        nlines = block.count(b"\n") + (not block.endswith(b"\n"))
    if first + nlines <= cfg.acked_prefix:
        return BlockResult([], 0)  # all acknowledged already: not even parsed
    if _any_acked(cfg, first, nlines):
        return _slow(cfg, first, block)
    if cfg.binary:
        calls = lines_impl.encode_block(
            block, first, cfg.queue, cfg.batch_size, cfg.partitions if cfg.by_topic else 0
        )
        if calls is not None:
            return BlockResult([Out(p, payload, nums) for p, payload, nums in calls], nlines)
    try:
        lines = _decode(block)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _slow(cfg, first, block)
    if len(lines) != nlines:  # an empty line (decode_lines skips it): let the slow path say so
        return _slow(cfg, first, block)
    n = nlines
    topics: list[Any] = list(map(_TOPIC, lines))
    values: list[Any] = list(map(_VALUE, lines))
    lengths = list(map(len, topics))
    if (min(lengths) == 0 or max(lengths) > 63) and any(  # 64+ characters may be > 255 bytes
        not 0 < len(t.encode("utf-8", "surrogatepass")) < 256 for t in topics
    ):
        return _slow(cfg, first, block)
    parts: list[Any] = list(map(_PARTITION, lines))
    unset = parts.count(None)
    if unset == n:
        if cfg.by_topic:
            return _grouped(cfg, first, topics, values, _topic_partitions(cfg, topics))
        return BlockResult(_ungrouped(cfg, first, topics, values), n)
    if unset:
        return _slow(cfg, first, block)  # some with a partition, some without
    return _grouped(cfg, first, topics, values, parts)


_crc: dict[str, int] = {}  # topic -> crc32 of its UTF-8 (topics repeat: stations, devices)


def _topic_partitions(cfg: BlockConfig, topics: list[str]) -> list[int]:
    """``crc32(topic) % partitions`` of each topic (``--partition-by-topic``)."""
    if len(_crc) > 100_000:
        _crc.clear()
    for t in set(topics).difference(_crc):
        _crc[t] = zlib.crc32(t.encode("utf-8", "surrogatepass"))
    n = cfg.partitions
    return [c % n for c in map(_crc.__getitem__, topics)]


def _decode(block: bytes) -> list[_Line]:
    """The block's lines, decoded a piece of about ``DECODE_BYTES`` at a time: one C call
    holds the GIL, and the sender threads need it between calls to send the next request."""
    if len(block) <= DECODE_BYTES:
        return _DECODER.decode_lines(block)
    out: list[_Line] = []
    view = memoryview(block)
    start = 0
    while start < len(block):
        end = block.find(b"\n", start + DECODE_BYTES) + 1 or len(block)
        out += _DECODER.decode_lines(view[start:end])
        start = end
    return out


def _any_acked(cfg: BlockConfig, first: int, n: int) -> bool:
    if first < cfg.acked_prefix:
        return True
    lo = first - cfg.acked_prefix
    return lo < len(cfg.acked_window) and 1 in cfg.acked_window[lo : lo + n]


def _encode(
    cfg: BlockConfig, partition: int | None, topics: list[Any], values: list[Any]
) -> bytes | list[Record]:
    if not cfg.binary:
        return [Record(_b(t), _b(v), partition) for t, v in zip(topics, values, strict=True)]
    return codec.encode_put_lists(
        0, cfg.queue, -1 if partition is None else partition, topics, values, 0
    )


def _b(x: str | bytes) -> bytes:
    return x if isinstance(x, bytes) else x.encode("utf-8", "surrogatepass")


def _spans(n: int, size: int) -> list[tuple[int, int]]:
    """``n`` items in as few calls of at most ``size`` as possible, evenly filled."""
    calls = -(-n // size)
    step = -(-n // calls) if calls else 0
    return [(a, min(a + step, n)) for a in range(0, n, step)] if n else []


def _ungrouped(cfg: BlockConfig, first: int, topics: list[Any], values: list[Any]) -> list[Out]:
    return [
        Out(None, _encode(cfg, None, topics[a:b], values[a:b]), range(first + a, first + b))
        for a, b in _spans(len(topics), cfg.batch_size)
    ]


def _numbers(first: int, idx: list[int]) -> range | list[int]:
    if len(idx) > 1:
        step = idx[1] - idx[0]
        r = range(first + idx[0], first + idx[-1] + 1, step)
        if len(r) == len(idx) and idx == list(range(idx[0], idx[-1] + 1, step)):
            return r
    elif idx:
        return range(first + idx[0], first + idx[0] + 1)
    return [first + i for i in idx]


def _grouped(
    cfg: BlockConfig, first: int, topics: list[Any], values: list[Any], parts: list[int]
) -> BlockResult:
    order = sorted(range(len(parts)), key=parts.__getitem__)  # stable: file order per partition
    ordered = list(map(parts.__getitem__, order))
    outs: list[Out] = []
    i = 0
    n = len(order)
    while i < n:
        p = ordered[i]
        j = bisect.bisect_right(ordered, p, i)
        idx = order[i:j]
        for a, b in _spans(len(idx), cfg.batch_size):
            sub = idx[a:b]
            pick = operator.itemgetter(*sub)
            ts = [topics[sub[0]]] if len(sub) == 1 else list(pick(topics))
            vs = [values[sub[0]]] if len(sub) == 1 else list(pick(values))
            outs.append(Out(p, _encode(cfg, p, ts, vs), _numbers(first, sub)))
        i = j
    return BlockResult(outs, n)


def _slow(cfg: BlockConfig, first: int, block: bytes) -> BlockResult:
    """Line by line with the reference parser: records already acknowledged are skipped
    unparsed; at a bad line, the records before it are still encoded and the error returned."""
    recs: list[tuple[int, Record]] = []
    error: ToolkitError | None = None
    window = cfg.acked_window
    prefix = cfg.acked_prefix
    lines = block.split(b"\n")
    if block.endswith(b"\n"):
        lines.pop()
    for k, line in enumerate(lines):
        n = first + k
        i = n - prefix
        if i < 0 or (i < len(window) and window[i] == 1):
            continue
        if not line.strip():
            error = ToolkitError(f"line {n + 1}: empty line (every line must hold a message)")
            break
        try:
            recs.append((n, parse_json_line(line, n + 1, cfg.keys)))
        except ToolkitError as exc:
            error = exc
            break
        except UnicodeDecodeError as exc:
            error = ToolkitError(f"line {n + 1}: not UTF-8 ({exc.reason})")
            break
    result = encode_records(cfg, recs)
    result.error = error
    return result


def encode_records(cfg: BlockConfig, recs: list[tuple[int, Record]]) -> BlockResult:
    """The calls of numbered records (the per-line path, and CSV input)."""
    groups: dict[int | None, list[tuple[int, Record]]] = {}
    for n, r in recs:
        p = r.partition
        if p is None and cfg.by_topic:
            p = zlib.crc32(r.topic) % cfg.partitions
        groups.setdefault(p, []).append((n, r))
    encoder = PutEncoder() if cfg.binary else None
    outs: list[Out] = []
    for p, items in groups.items():
        for a, b in _spans(len(items), cfg.batch_size):
            chunk = items[a:b]
            rs = [r for _, r in chunk]
            nums = [n for n, _ in chunk]
            payload: bytes | list[Record]
            if encoder is None:
                payload = rs
            elif any(r.key is not None for r in rs):  # the client codec has no key field
                payload = encoder.encode(cfg.queue, p, rs)
            else:  # the same bytes as the reference encoder, in C
                payload = codec.encode_put_lists(
                    0, cfg.queue, -1 if p is None else p, [r.topic for r in rs],
                    [r.value for r in rs], 0,
                )  # fmt: skip
            outs.append(Out(p, payload, nums))
    return BlockResult(outs, len(recs))


def messages_of(out: Out) -> list[Any]:
    """The TMessages of a compact-protocol call."""
    assert isinstance(out.payload, list)
    return tmessages(out.payload)


# -- in a worker process -------------------------------------------------------------------------

_worker_cfg: BlockConfig | None = None


def worker_init(cfg: BlockConfig) -> None:
    global _worker_cfg
    _worker_cfg = cfg


def worker_encode(job: tuple[int, bytes, int]) -> BlockResult:
    assert _worker_cfg is not None
    return encode_block(_worker_cfg, *job)
