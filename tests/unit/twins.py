"""What the twin tests (test_purefast.py, test_purefast_store.py) share: loading a C
extension or failing with how to build it, a call's outcome, mangled bytes, and a TMessage
encoded by hand."""

from __future__ import annotations

import importlib
import struct
from typing import Any

import pytest
from hypothesis import strategies as st

# the pure-Python pass must not load the C (the gateway would not either): it deselects these;
# the C pass of scripts/test-all runs the comparisons
c_only = pytest.mark.c_only


def load_c(module: str) -> Any:
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


def mangle(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    b = bytearray(data)
    for at, value in edits:
        if b:
            b[at % len(b)] = value
    return bytes(b[:cut] if cut is not None else b)


edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4)
cuts = st.none() | st.integers(0, 2_000)


def tmessage(ts: int, seq: int, part: int, topic: bytes, value: bytes) -> bytes:
    """One TMessage as gateway/_thriftbuf.h put_tmessage writes it (test_purefast_store.py
    checks it against encode_messages_reply)."""
    return (
        struct.pack(">BhBhqBhhBBhh", 12, 1, 10, 1, ts, 6, 2, seq, 0, 6, 2, part)
        + struct.pack(">Bhi", 11, 3, len(topic)) + topic
        + struct.pack(">Bhi", 11, 4, len(value)) + value + b"\0"
    )  # fmt: skip
