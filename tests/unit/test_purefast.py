"""The pure-Python twins (gateway/purefast/) answer exactly as the C fast paths do.

The other unit tests check whichever implementation gateway/fast.py chose against thriftpy2
(scripts/test-all runs them in both modes); these compare the two directly, on valid and on
mangled bytes, where thriftpy2 has no opinion. Those that load the C are marked ``c_only``: the
pure-Python pass deselects them (tests/conftest.py); without the compiled extensions in the C
pass they fail, naming the build command.
"""

from __future__ import annotations

import importlib
import os
import struct
import subprocess
import sys
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from thriftpy2.protocol import TBinaryProtocol, TCompactProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TMemoryBuffer

from gateway import purefast as py
from gateway import rowkey
from gateway.rowkey import MAX_SEQUENCE

T = hqueue_thrift()
LIMITS = (4 * 1024 * 1024, 100_000, 801_024)
C_MODULES = (
    "gateway._wirecheck",
    "gateway._wal",
    "gateway._records",
    "gateway._merge",
    "gateway.store._hbasecodec",
)


# the pure-Python pass must not load the C (the gateway would not either): it deselects these;
# the C pass of scripts/test-all runs the comparisons
c_only = pytest.mark.c_only


def _c(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(
            f"{module} is not built ({exc}): run `python setup.py build_ext --inplace` "
            "(scripts/test-all's pip install -e builds it)",
            pytrace=False,
        )


def outcome(fn: Any, *args: Any) -> Any:
    """What a call returns, or the type and message of what it raises."""
    try:
        return ("ok", fn(*args))
    except (ValueError, TypeError) as exc:
        return (type(exc).__name__, str(exc))


def scanned(fn: Any, data: bytes, compact: bool, limits: tuple[int, int, int]) -> Any:
    """scan's outcome without its state (opaque, each implementation's own)."""
    got = outcome(fn, data, compact, None, *limits)
    if got[0] == "ok":
        status, n, _, name = got[1]
        return status, n, name
    return got


def accepted(data: bytes) -> bool:
    """Whether scan() takes ``data`` as one whole binary message (extract_put's and
    decode_rows_reply's precondition: the C trusts what scan() checked)."""
    got = scanned(py.scan, data, False, LIMITS)
    return got[0] == 0 and got[1] == len(data)


def encode(compact: bool, method: str, **args: Any) -> bytes:
    buf = TMemoryBuffer()
    proto = TCompactProtocol(buf) if compact else TBinaryProtocol(buf)
    proto.write_message_begin(method, TMessageType.CALL, 7)
    getattr(T.HQueueService, method + "_args")(**args).write(proto)
    proto.write_message_end()
    return buf.getvalue()


messages = st.lists(
    st.builds(
        lambda t, v, p: T.TMessage(topic=t, value=v, partitionID=p),
        st.binary(max_size=20),
        st.binary(max_size=300),
        st.none() | st.integers(0, 100),
    ),
    max_size=12,
)


def mangle(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    b = bytearray(data)
    for at, value in edits:
        if b:
            b[at % len(b)] = value
    return bytes(b[:cut] if cut is not None else b)


edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4)
cuts = st.none() | st.integers(0, 2_000)
PUT_METHODS = {
    "putMessages": (False, False),
    "putMessagesWithPid": (True, False),
    "putMessage": (False, True),
    "putMessageWithPid": (True, True),
}


def put_request(compact: bool, method: str, batch: list[Any]) -> bytes:
    with_pid, single = PUT_METHODS[method]
    args: dict[str, Any] = {"queueName": b"q1"}
    if with_pid:
        args["partitionID"] = 3
    if single:
        args["tMessage"] = batch[0] if batch else T.TMessage(topic=b"t", value=b"v")
    else:
        args["tMessages"] = batch
    return encode(compact, method, **args)


@c_only
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.booleans(),
    st.sampled_from(sorted(PUT_METHODS)),
    messages,
    edits,
    cuts,
    st.lists(st.integers(0, 2_000), max_size=6),
)
def test_scan_twin(
    compact: bool, method: str, batch: list, ed: list, cut: Any, steps: list
) -> None:
    c = _c("gateway._wirecheck")
    data = mangle(put_request(compact, method, batch), ed, cut)
    assert scanned(py.scan, data, compact, LIMITS) == scanned(c.scan, data, compact, LIMITS)
    # resumed in pieces: the same answers at every step (the states are each one's own)
    cs = ps = None
    for end in [*sorted(set(steps)), len(data)]:
        a = outcome(c.scan, data[:end], compact, cs, *LIMITS)
        b = outcome(py.scan, data[:end], compact, ps, *LIMITS)
        assert a[0] == b[0]
        if a[0] != "ok":
            assert a == b
            return
        (s1, n1, cs, name1), (s2, n2, ps, name2) = a[1], b[1]
        assert (s1, n1, name1) == (s2, n2, name2)
        if s1 == 0:
            return


@c_only
@settings(max_examples=300)
@given(st.booleans(), st.binary(max_size=200), st.integers(0, 50))
def test_scan_twin_on_noise(compact: bool, data: bytes, limit: int) -> None:
    c = _c("gateway._wirecheck")
    lim = (limit, limit, limit)
    assert scanned(py.scan, data, compact, lim) == scanned(c.scan, data, compact, lim)


@c_only
@settings(max_examples=300)
@given(st.sampled_from(sorted(PUT_METHODS)), messages, edits, cuts, st.integers(0, 300))
def test_extract_put_twin(method: str, batch: list, ed: list, cut: Any, max_value: int) -> None:
    c = _c("gateway._wirecheck")
    with_pid, single = PUT_METHODS[method]
    data = mangle(put_request(False, method, batch), ed, cut)
    assume(accepted(data))  # the C's precondition: a whole message scan() accepted
    got_c = outcome(c.extract_put, data, with_pid, single, max_value)
    got_py = outcome(py.extract_put, data, with_pid, single, max_value)
    assert got_py == got_c  # the C's topics and values are Spans: equal to the twin's lists
    if got_c[0] == "ok" and got_c[1] is not None:
        # and the records the C writes from the Spans are the twin's from the lists
        records = _c("gateway._records").wal_records
        caps = (3, 1 + max_value)
        assert records(1, 2, 3, *got_c[1][3:], *caps) == py.wal_records(
            1, 2, 3, *got_py[1][3:], *caps
        )


rows = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1),
        st.integers(-40000, 40000),
        st.binary(max_size=30),
        st.binary(max_size=60),
    ),
    max_size=12,
)


@c_only
@given(rows, st.integers(-40000, 40000), st.booleans(), st.integers(-(2**31), 2**31 - 1))
def test_encode_messages_reply_twin(rs: list, partition: int, per_row: bool, seqid: int) -> None:
    c = _c("gateway._wirecheck")
    parts: Any = [partition + i for i in range(len(rs))] if per_row else partition
    assert outcome(py.encode_messages_reply, b"m", seqid, parts, rs) == outcome(
        c.encode_messages_reply, b"m", seqid, parts, rs
    )


@c_only
@given(
    st.lists(
        st.tuples(st.binary(max_size=14), st.binary(max_size=20), st.binary(max_size=40)),
        max_size=10,
    ),
    st.binary(max_size=10),
    edits,
    cuts,
)
def test_hbase_codec_twin(cells: list, prefix: bytes, ed: list, cut: Any) -> None:
    c = _c("gateway.store._hbasecodec")
    keys, topics, values = ([r[i] for r in cells] for i in range(3))
    call = c.encode_mutate_rows(b"t", prefix, keys, topics, values)
    assert py.encode_mutate_rows(b"t", prefix, keys, topics, values) == call
    import happybase  # noqa: F401 - loads Hbase_thrift
    import Hbase_thrift as H

    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin("scannerGetList", TMessageType.REPLY, 3)
    results = [H.TRowResult(row=k, columns={prefix + t: H.TCell(value=v)}) for k, t, v in cells]
    H.Hbase.scannerGetList_result(success=results).write(proto)
    reply = mangle(buf.getvalue(), ed, cut)
    assume(accepted(reply))  # the C's precondition: a whole message scan() accepted
    n = len(prefix)
    assert outcome(py.decode_rows_reply, reply, n) == outcome(c.decode_rows_reply, reply, n)


@c_only
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.integers(0, 5), st.integers(0, 3), st.binary(max_size=3), st.binary(max_size=5)
            ),
            max_size=6,
        ),
        max_size=5,
    ),
    st.lists(st.booleans(), min_size=5, max_size=5),
    st.integers(0, 40),
    st.integers(0, 60),
    st.booleans(),
    st.lists(st.integers(0, 7), min_size=5, max_size=5),
)
def test_merge_rows_twin(
    bufs: list, more: list, n: int, max_bytes: int, reverse: bool, starts: list
) -> None:
    c = _c("gateway._merge")
    bufs = [sorted(b, reverse=reverse) for b in bufs]
    more = more[: len(bufs)]
    starts = [min(s, len(b)) for s, b in zip(starts, bufs, strict=False)]
    parts = [7 - i for i in range(len(bufs))]
    got = py.merge_rows(bufs, starts, more, parts, n, max_bytes, reverse)
    assert got == c.merge_rows(bufs, starts, more, parts, n, max_bytes, reverse)
    rows, _, taken, _, _ = got
    used = {id(r) for b, s, t in zip(bufs, starts, taken, strict=True) for r in b[s : s + t]}
    assert {id(r) for r in rows} == used  # only rows from each start on, and those taken


@c_only
def test_merge_rows_refuses_a_start_outside_its_buffer() -> None:
    for impl in (py, _c("gateway._merge")):
        with pytest.raises(ValueError, match="start is outside"):
            impl.merge_rows([[(1, 0, b"t", b"v")]], [2], [False], [0], 10, 100, False)


def tmessage(ts: int, seq: int, part: int, topic: bytes, value: bytes) -> bytes:
    """One TMessage as gateway/_thriftbuf.h put_tmessage writes it (checked below against
    encode_messages_reply)."""
    return (
        struct.pack(">BhBhqBhhBBhh", 12, 1, 10, 1, ts, 6, 2, seq, 0, 6, 2, part)
        + struct.pack(">Bhi", 11, 3, len(topic)) + topic
        + struct.pack(">Bhi", 11, 4, len(value)) + value + b"\0"
    )  # fmt: skip


def test_tmessage_is_what_the_gateway_encodes() -> None:
    from gateway.fast import encode_messages_reply

    one = encode_messages_reply(b"m", 1, 3, [(1 << 40, 7, b"tp", b"value")])
    none = encode_messages_reply(b"m", 1, 3, [])
    assert one[len(none) - 1 : -1] == tmessage(1 << 40, 7, 3, b"tp", b"value")


ROW_LISTS = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 5), st.integers(0, 3), st.binary(max_size=3), st.binary(max_size=5)
        ),
        max_size=6,
    ),
    max_size=5,
)


FIVE_FLAGS = st.lists(st.booleans(), min_size=5, max_size=5)
FIVE_STARTS = st.lists(st.integers(0, 7), min_size=5, max_size=5)


def _parts(out: list) -> list[tuple[str, bytes]]:
    return [(type(p).__name__, bytes(p)) for p in out]


@c_only
@given(
    ROW_LISTS, FIVE_FLAGS, st.integers(0, 40), st.integers(0, 60), st.booleans(), FIVE_STARTS,
    st.sampled_from([0, 41, 90, 1 << 30]),
)  # fmt: skip
def test_merge_encoded_twin_and_merge_rows_agree(
    bufs: list, more: list, n: int, max_bytes: int, reverse: bool, starts: list, view_bytes: int
) -> None:
    """merge_encoded (C and twin) takes the messages merge_rows takes, in its order, and says
    where each buffer goes on; runs of view_bytes or more come as views of their page, shorter
    ones copied into one bytearray, the same parts from both."""
    c = _c("gateway._merge")
    bufs = [sorted(b, reverse=reverse) for b in bufs]
    more = more[: len(bufs)]
    starts = [min(s, len(b)) for s, b in zip(starts, bufs, strict=False)]
    parts = [7 - i for i in range(len(bufs))]
    encoded = [[tmessage(*r[:2], p, *r[2:]) for r in b] for b, p in zip(bufs, parts, strict=True)]
    pages = [bytearray(b"junk" + b"".join(e)) for e in encoded]  # offsets need not be 0
    offsets = [4 + sum(map(len, e[:s])) for e, s in zip(encoded, starts, strict=True)]
    counts = [len(b) - s for b, s in zip(bufs, starts, strict=True)]
    answers = []
    for impl in (py, c):
        out = [bytearray(b"head")]
        got = impl.merge_encoded(
            pages, offsets, counts, more, out, n, max_bytes, reverse, view_bytes
        )
        answers.append((_parts(out), got))
        for part in out[1:]:  # views of long runs; short runs copied, several to a bytearray
            assert len(part) >= view_bytes if isinstance(part, memoryview) else view_bytes > 0
    assert answers[0] == answers[1]
    got_parts, (taken, new_offsets, sizes, lasts, bodies) = answers[0]
    out = b"".join(p for _, p in got_parts)
    rows, row_parts, row_taken, row_bytes, _ = c.merge_rows(
        bufs, starts, more, parts, n, max_bytes, reverse
    )
    merged = [tmessage(*r[:2], p, *r[2:]) for r, p in zip(rows, row_parts, strict=True)]
    assert out == b"head" + b"".join(merged)
    assert taken == row_taken and sizes == row_bytes
    assert bodies == sum(len(r[3]) for r in rows)
    for e, s, t, off, last in zip(encoded, starts, taken, new_offsets, lasts, strict=True):
        assert off == 4 + sum(map(len, e[: s + t]))
        assert last == (4 + sum(map(len, e[: s + t - 1])) if t else -1)


@c_only
@given(st.binary(max_size=60), st.integers(0, 3), st.integers(0, 70))
def test_merge_encoded_refuses_what_is_not_its_count_of_tmessages(
    junk: bytes, count: int, cut: int
) -> None:
    """Bytes that are not ``count`` whole TMessages: the same ValueError from C and twin, and
    nothing appended; never a read past the buffer."""
    c = _c("gateway._merge")
    good = tmessage(5, 1, 0, b"t", b"v" * 9) * 2
    for page in (bytearray(junk), bytearray(good[:cut] + junk)):
        answers = []
        for impl in (py, c):
            out: list = []
            got = outcome(impl.merge_encoded, [page], [0], [count], [False], out, 9, 999, False, 0)
            answers.append((got, _parts(out)))
        assert answers[0] == answers[1]
        if answers[0][0][0] != "ok":
            assert answers[0] == (("ValueError", answers[0][0][1]), [])


@c_only
def test_merge_encoded_refuses_bad_arguments() -> None:
    for impl in (py, _c("gateway._merge")):
        page = bytearray(tmessage(1, 0, 0, b"t", b"v"))
        with pytest.raises(ValueError, match="offset is outside"):
            impl.merge_encoded([page], [99], [1], [False], [], 5, 99, False, 0)
        with pytest.raises(ValueError, match="differ in length"):
            impl.merge_encoded([page], [0, 0], [1], [False], [], 5, 99, False, 0)
        with pytest.raises(ValueError, match="last part must not be"):
            impl.merge_encoded([page], [0], [1], [False], [page], 5, 99, False, 1 << 20)


@c_only
@given(st.integers(0, 32767), st.integers(0, 2**62), st.integers(0, 32767), st.integers(0, 70000))
def test_consecutive_keys_twin(partition: int, ts: int, seq: int, count: int) -> None:
    c = _c("gateway._wal")
    assert py.consecutive_keys(partition, ts, seq, count) == c.consecutive_keys(
        partition, ts, seq, count
    )


@c_only
@given(
    st.lists(
        st.tuples(st.binary(max_size=14), st.binary(max_size=20), st.binary(max_size=40)),
        max_size=10,
    ),
    edits,
    cuts,
)
def test_wal_cells_twin(cells: list, ed: list, cut: Any) -> None:
    c = _c("gateway._wal")
    keys, topics, values = ([r[i] for r in cells] for i in range(3))
    data = c.wal_cells(keys, topics, values)
    assert py.wal_cells(keys, topics, values) == data
    data = mangle(data, ed, cut)
    got_c: list = []
    got_py: list = []
    assert outcome(py.put_wal_cells, lambda *a: got_py.append(a), 1, data) == outcome(
        c.put_wal_cells, lambda *a: got_c.append(a), 1, data
    )
    assert got_py == got_c


@st.composite
def stored_entries(draw: Any) -> tuple[int, list[tuple[bytes, bytes]]]:
    """(partition, entries) as RocksDB holds them: records of puts (of gateway._records'
    wal_records, with small caps) and rows of one message each, in key order."""
    c = _c("gateway._records")
    partition = draw(st.integers(0, 2))
    ts, seq = draw(st.integers(0, 4)), draw(st.integers(MAX_SEQUENCE - 6, MAX_SEQUENCE))
    out: list[tuple[bytes, bytes]] = []
    for _ in range(draw(st.integers(0, 4))):
        n = draw(st.integers(1, 8))
        if draw(st.booleans()):
            topics = [draw(st.sampled_from([b"a", b"bb", b""])) for _ in range(n)]
            values = [draw(st.binary(max_size=6)) for _ in range(n)]
            caps = draw(st.integers(1, 5)), draw(st.integers(1, 30))
            cells, records = c.wal_records(partition, ts, seq, topics, values, *caps)
            assert py.wal_records(partition, ts, seq, topics, values, *caps) == (cells, records)
            put = py.put_wal_cells(lambda k, v, into: into.append((k, v)), out, cells)
            assert put == records
        else:
            n = 1
            out.append((rowkey.encode(partition, ts, seq), b"\x01a" + draw(st.binary(max_size=4))))
        ts, seq = rowkey.nth_id(rowkey.MessageId(ts, seq), n + draw(st.integers(0, 2)))
    return partition, out


bounds = st.tuples(st.integers(0, 6), st.integers(0, MAX_SEQUENCE), st.booleans())


@c_only
@settings(max_examples=300, deadline=None)
@given(
    stored_entries(),
    st.none() | bounds,
    st.none() | bounds,
    st.booleans(),
    st.none() | st.frozensets(st.sampled_from([b"a", b"bb", b""]), max_size=2),
    st.integers(1, 10),
    st.integers(1, 20),
    st.sampled_from([1 << 62, 3, 12]),
    edits,
)
def test_records_twin(
    stored: Any, lo: Any, hi: Any, reverse: bool, topics: Any, limit: int, budget: int,
    max_bytes: int, ed: list,
) -> None:  # fmt: skip
    c = _c("gateway._records")
    partition, items = stored
    lower = rowkey.partition_start(partition)
    if lo is not None:
        lower = rowkey.encode(partition, lo[0], lo[1]) + (b"\x00" if lo[2] else b"")
    upper = rowkey.partition_end(partition)
    if hi is not None:
        upper = rowkey.encode(partition, hi[0], hi[1]) + (b"\x00" if hi[2] else b"")
    if reverse:
        items = items[::-1]
    held = items[0] if items and ed else None  # an entry handed over from an earlier call
    if ed and items:  # and a damaged one
        k, v = items[-1]
        items = [*items[:-1], (k, mangle(v, ed, None))]
    args = (lower, upper, topics, limit, budget)
    rows_c: list = []
    rows_py: list = []
    a = outcome(c.scan_records, iter(items), held, *args, rows_c, max_bytes, reverse)
    b = outcome(py.scan_records, iter(items), held, *args, rows_py, max_bytes, reverse)
    assert (a, rows_c) == (b, rows_py)
    # encoded reads: the same messages as TMessages, the same answer
    enc_c, enc_py = bytearray(), bytearray()
    a2 = outcome(c.scan_records, iter(items), held, *args, enc_c, max_bytes, reverse)
    b2 = outcome(py.scan_records, iter(items), held, *args, enc_py, max_bytes, reverse)
    assert (a2, enc_c) == (b2, enc_py)
    assert a2 == a
    if a[0] == "ok":
        assert enc_c == b"".join(py.tmessage(ts, sq, partition, t, v) for ts, sq, t, v in rows_c)


def test_the_pure_python_gateway_imports_no_c_extension() -> None:
    """With HQUEUE_PUREPYTHON=1 the whole gateway (both stores, the server, the scanners)
    imports without loading one of the gateway's C extensions; without it, it loads them."""
    code = (
        "import sys, gateway.main, gateway.app, gateway.server, gateway.store.embedded,"
        " gateway.store.hbase, gateway.store.hbase_scans, gateway.scanners, gateway.fast\n"
        "so = sorted(n for n, m in sys.modules.items() if n.split('.')[0] in ('gateway', 'hqueue')"
        " and (getattr(m, '__file__', None) or '').endswith(('.so', '.pyd')))\n"
        "print(' '.join(so) or '-')"
    )
    env = dict(os.environ)
    for value in ("1", ""):
        env["HQUEUE_PUREPYTHON"] = value
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        loaded = out.stdout.split()
        if value:
            assert loaded == ["-"], f"C extensions imported with HQUEUE_PUREPYTHON=1: {loaded}"
        elif all(_importable(m) for m in C_MODULES):
            assert set(C_MODULES) <= set(loaded)


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


@c_only
def test_the_facade_binds_the_c_functions_themselves() -> None:
    """No hop per call: in the C mode gateway.fast's names are the extension's functions."""
    from gateway import fast

    for module in C_MODULES:
        c = _c(module)
        for name in dir(c):
            # every function and type; the constants of gateway/_rowkey.h are test_limits'
            if not name.startswith("_") and callable(getattr(c, name)):
                assert getattr(fast, name) is getattr(c, name), name
