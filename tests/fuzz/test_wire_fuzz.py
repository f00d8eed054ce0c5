"""Fuzzing the request reader and the put extractor: mutated valid requests, cut at random.

Seeds: ``tests/fuzz/corpus`` (``python -m tests.fuzz.make_corpus`` writes them). Hypothesis
mutates a seed (bytes flipped, inserted, deleted, the tail cut, a varint made the largest one
its length allows, runs of 0xff/0x80 that make over-long ones), frames it or not, and feeds
it to :class:`gateway.wire.MessageReader` in random pieces. Properties:

- the reader ends every input with a message or a refusal (``BadRequest``/end of file), never
  another exception;
- a message it accepts decodes in thriftpy2 (or fails to decode with an ordinary error, which
  closes only that connection), and every integer decoded fits its declared Thrift type (the
  compact over-long varint that decoded to 2^64 fails this);
- when ``extract_put`` takes a put apart, thriftpy2 decodes the same queue, partition, topics
  and values.

Each test runs ``HQUEUE_FUZZ_EXAMPLES`` examples (300 by default); ``scripts/fuzz-wire`` runs
them again and again for ``--seconds`` (CI: 60).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from hqueue.protocol import hqueue_thrift
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from thriftpy2.protocol import TBinaryProtocol, TCompactProtocol
from thriftpy2.thrift import TType
from thriftpy2.transport import TMemoryBuffer, TTransportException

from gateway.fast import extract_put
from gateway.wire import BULK_METHODS, BadRequest, MessageReader, RequestLimits

CORPUS = Path(__file__).parent / "corpus"
SEEDS = {p.stem: p.read_bytes() for p in sorted(CORPUS.glob("*.bin"))}
EXAMPLES = int(os.environ.get("HQUEUE_FUZZ_EXAMPLES", "300"))
LIMITS = RequestLimits.for_batches(8 << 20, 1 << 20, 1000)
RANGES = {
    TType.BYTE: 8,
    TType.I16: 16,
    TType.I32: 32,
    TType.I64: 64,
}
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Pieces:
    """A socket whose recv() hands out ``data`` in the given pieces, then end of file."""

    def __init__(self, data: bytes, cuts: list[int]) -> None:
        edges = sorted({c for c in cuts if 0 < c < len(data)})
        self._chunks = [data[a:b] for a, b in zip([0, *edges], [*edges, len(data)], strict=True)]

    def recv(self, n: int) -> bytes:
        if not self._chunks:
            return b""
        chunk = self._chunks.pop(0)
        if len(chunk) > n:
            self._chunks.insert(0, chunk[n:])
            chunk = chunk[:n]
        return chunk

    def settimeout(self, timeout: float | None) -> None:
        pass


def mutate(data: bytes, ops: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, at, blob in ops:
        at = at % (len(out) + 1)
        if kind == 0 and at < len(out):
            out[at] ^= blob[0] if blob else 0xFF
        elif kind == 1:
            out[at:at] = blob
        elif kind == 2:
            del out[at : at + len(blob) + 1]
        elif kind == 3:
            out[at : at + len(blob)] = blob
        elif kind == 4:  # the varint starting here becomes the largest of 3, 5 or 10 bytes
            end = at
            while end < len(out) and out[end] & 0x80:
                end += 1
            out[at : end + 1] = b"\xff" * (2, 4, 9)[blob[0] % 3] + b"\x7f"
        else:
            del out[at:]
    return bytes(out)


blobs = st.one_of(
    st.binary(min_size=1, max_size=12),
    st.integers(1, 11).map(lambda n: b"\xff" * n),  # over-long varints
    st.integers(1, 11).map(lambda n: b"\x80" * n + b"\x02"),
)
ops = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1 << 16), blobs), max_size=6)
inputs = st.tuples(
    st.sampled_from(sorted(SEEDS)),
    ops,
    st.booleans(),  # framed
    st.lists(st.integers(0, 1 << 12), max_size=8),  # where the bytes arrive cut
)


def read_one(data: bytes, compact: bool, framed: bool, cuts: list[int]) -> tuple[bytes, bytes]:
    """Raises BadRequest / TTransportException(END_OF_FILE) for refused or cut inputs."""
    if framed:
        data = struct.pack(">i", len(data)) + data
    reader = MessageReader(
        Pieces(data, cuts),  # type: ignore[arg-type]
        framed=framed,
        compact=compact,
        limits=LIMITS,
    )
    return reader.next_message()


def decode(message: bytes, compact: bool) -> tuple[str, Any] | None:
    buf = TMemoryBuffer(message)
    proto = TCompactProtocol(buf) if compact else TBinaryProtocol(buf)
    name, _, _ = proto.read_message_begin()
    name = name.decode() if isinstance(name, bytes) else name
    args_cls = getattr(hqueue_thrift().HQueueService, f"{name}_args", None)
    if args_cls is None:
        return None  # unknown method: answered with TApplicationException
    args = args_cls()
    args.read(proto)
    return name, args


def check_ranges(value: Any, ttype: int, arg: Any, where: str) -> None:
    if value is None:
        return
    bits = RANGES.get(ttype)
    if bits is not None:
        assert -(1 << (bits - 1)) <= value < (1 << (bits - 1)), f"{where} = {value}"
    elif ttype == TType.STRUCT:
        for spec in value.thrift_spec.values():
            sub_arg = spec[2] if len(spec) > 3 else None
            check_ranges(getattr(value, spec[1]), spec[0], sub_arg, f"{where}.{spec[1]}")
    elif ttype in (TType.LIST, TType.SET):
        et, ea = arg if isinstance(arg, tuple) else (arg, None)
        for i, x in enumerate(value):
            check_ranges(x, et, ea, f"{where}[{i}]")
    elif ttype == TType.MAP:
        (kt, ka), (vt, va) = (a if isinstance(a, tuple) else (a, None) for a in arg)
        for k, v in value.items():
            check_ranges(k, kt, ka, f"{where}.key")
            check_ranges(v, vt, va, f"{where}[{k!r}]")


@FUZZ
@given(inputs)
def test_request_reader(case: tuple[str, list, bool, list[int]]) -> None:
    seed, changes, framed, cuts = case
    check_request(mutate(SEEDS[seed], changes), seed.endswith("compact"), framed, cuts)


@FUZZ
@given(inputs)
def test_put_extractor(case: tuple[str, list, bool, list[int]]) -> None:
    seed, changes, _, cuts = case
    if not seed.startswith("put") or seed.endswith("compact"):
        seed = "putMessages-binary"
    data = mutate(SEEDS[seed], changes)
    try:
        message, method = read_one(data, False, False, cuts)
    except TTransportException:
        return
    if method not in BULK_METHODS:
        return
    with_pid = method.endswith(b"WithPid")
    single = not method.startswith(b"putMessages")
    taken = extract_put(message, with_pid, single, 1 << 20)
    if taken is None:
        return
    _seqid, queue, pid, topics, values = taken
    decoded = decode(message, False)
    assert decoded is not None
    _, args = decoded
    assert queue == args.queueName
    if with_pid:
        assert pid == args.partitionID
    msgs = [args.tMessage] if single else args.tMessages
    assert topics == [m.topic for m in msgs]
    assert values == [m.value for m in msgs]


def check_request(data: bytes, compact: bool, framed: bool, cuts: list[int]) -> None:
    """The properties of :func:`test_request_reader` for one input."""
    try:
        message, _method = read_one(data, compact, framed, cuts)
    except BadRequest:
        return
    except TTransportException as exc:
        assert exc.type == TTransportException.END_OF_FILE, exc
        return
    try:
        decoded = decode(message, compact)
    except Exception:  # a decode error closes that one connection
        return
    if decoded is not None:
        name, args = decoded
        check_ranges(args, TType.STRUCT, None, name)


def test_every_varint_at_its_largest() -> None:
    """Deterministic sweep: every position of every compact seed made the start of the largest
    varint of 3, 5 or 10 bytes (random mutation rarely lands exactly on a varint)."""
    for seed, data in SEEDS.items():
        if not seed.endswith("compact"):
            continue
        for at in range(len(data)):
            for k in range(3):
                check_request(mutate(data, [(4, at, bytes([k]))]), True, False, [])
