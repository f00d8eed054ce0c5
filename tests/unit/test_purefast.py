"""The pure-Python twins (gateway/purefast/) of the wire's C paths (scan, extract_put, reply
encoding, the HBase codec) answer exactly as the C does; the store's twins are
test_purefast_store.py, the helpers both use tests/unit/twins.py.

The other unit tests check whichever implementation gateway/fast.py chose against thriftpy2
(scripts/test-all runs them in both modes); these compare the two directly, on valid and on
mangled bytes, where thriftpy2 has no opinion. Those that load the C are marked ``c_only``: the
pure-Python pass deselects them (tests/conftest.py); without the compiled extensions in the C
pass they fail, naming the build command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from hqueue.protocol import hqueue_thrift
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from thriftpy2.protocol import TBinaryProtocol, TCompactProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TMemoryBuffer

from gateway import purefast as py
from tests.unit.twins import c_only, cuts, edits, load_c, mangle, outcome

T = hqueue_thrift()
LIMITS = (4 * 1024 * 1024, 100_000, 801_024)
C_MODULES = (
    "gateway._wirecheck",
    "gateway._wal",
    "gateway._records",
    "gateway._merge",
    "gateway.store._hbasecodec",
)


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
    c = load_c("gateway._wirecheck")
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
    c = load_c("gateway._wirecheck")
    lim = (limit, limit, limit)
    assert scanned(py.scan, data, compact, lim) == scanned(c.scan, data, compact, lim)


@c_only
@settings(max_examples=300)
@given(st.sampled_from(sorted(PUT_METHODS)), messages, edits, cuts, st.integers(0, 300))
def test_extract_put_twin(method: str, batch: list, ed: list, cut: Any, max_value: int) -> None:
    c = load_c("gateway._wirecheck")
    with_pid, single = PUT_METHODS[method]
    data = mangle(put_request(False, method, batch), ed, cut)
    assume(accepted(data))  # the C's precondition: a whole message scan() accepted
    got_c = outcome(c.extract_put, data, with_pid, single, max_value)
    got_py = outcome(py.extract_put, data, with_pid, single, max_value)
    assert got_py == got_c  # the C's topics and values are Spans: equal to the twin's lists
    if got_c[0] == "ok" and got_c[1] is not None:
        # and the records the C writes from the Spans are the twin's from the lists
        records = load_c("gateway._records").wal_records
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
    c = load_c("gateway._wirecheck")
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
    c = load_c("gateway.store._hbasecodec")
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
        c = load_c(module)
        for name in dir(c):
            # every function and type; the constants of gateway/_rowkey.h are test_limits'
            if not name.startswith("_") and callable(getattr(c, name)):
                assert getattr(fast, name) is getattr(c, name), name
