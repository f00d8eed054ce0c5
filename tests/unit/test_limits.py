"""The limits of a MessageID live in one place, :mod:`hqueue_contract.limits`, and both sides of
the wire hold to them: partition ids 0..32766 (a queue has 1..32767 partitions), sequence ids
0..32767 within a millisecond."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hqueue import Connection, InvalidArgument, _purecodec
from hqueue_contract.limits import MAX_PARTITION_ID, MAX_PARTITIONS, MAX_SEQUENCE

from gateway import fast, rowkey, validation
from gateway.errors import InvalidArgument as GatewayInvalidArgument
from subscriber_runtime.subscription import Subscription

ROOT = Path(__file__).resolve().parents[2]
LIMITS = ROOT / "clients" / "python" / "hqueue_contract" / "limits.py"
SOURCES = [
    ROOT / "gateway",
    ROOT / "clients" / "python" / "hqueue",
    ROOT / "clients" / "python" / "hqueue_contract",
    ROOT / "subscriber_runtime",
]


def test_the_numbers_are_written_once() -> None:
    """No Python code but limits.py spells 32767 or 32766 (comments and docstrings may)."""
    found = []
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            if path == LIMITS:
                continue
            tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
            for tok in tokens:
                if tok.type == tokenize.NUMBER and tok.string in ("32767", "32766", "0x7fff"):
                    found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.line.strip()}")
    assert not found, "use hqueue_contract.limits:\n" + "\n".join(found)
    assert (MAX_PARTITIONS, MAX_PARTITION_ID, MAX_SEQUENCE) == (32767, 32766, 32767)
    assert rowkey.MAX_PARTITIONS == MAX_PARTITIONS and rowkey.MAX_SEQUENCE == MAX_SEQUENCE


def test_the_c_client_codec_has_the_same_partition_limit() -> None:
    source = (ROOT / "clients" / "python" / "hqueue" / "_fastclient.c").read_text()
    match = re.search(r"#define MAX_PARTITION (\d+)", source)
    assert match and int(match.group(1)) == MAX_PARTITION_ID
    assert _purecodec.MAX_PARTITION == MAX_PARTITION_ID
    source = (ROOT / "clients" / "python" / "hqueue" / "toolkit" / "_fastjsonl.c").read_text()
    ids = re.search(r"#define MAX_PARTITION (\d+)", source)
    counts = re.search(r"#define MAX_PARTITIONS (\d+)", source)
    assert ids and int(ids.group(1)) == MAX_PARTITION_ID
    assert counts and int(counts.group(1)) == MAX_PARTITIONS


def test_the_c_row_keys_carry_after_the_last_sequence() -> None:
    keys = fast.consecutive_keys(MAX_PARTITION_ID, 7, MAX_SEQUENCE, 2)
    assert [rowkey.decode(k) for k in keys] == [
        (MAX_PARTITION_ID, 7, MAX_SEQUENCE),
        (MAX_PARTITION_ID, 8, 0),
    ]


def test_the_gateway_takes_exactly_the_partition_counts_of_the_contract() -> None:
    assert validation.partition_count(MAX_PARTITIONS) == MAX_PARTITIONS
    with pytest.raises(GatewayInvalidArgument):
        validation.partition_count(MAX_PARTITIONS + 1)


CLIENT_CALLS: list[tuple[Callable[[Connection, int], Any], str]] = [
    (lambda c, p: c.queue("q").put("t", b"v", partition=p), "partition"),
    (lambda c, p: c.queue("q").put_many([("t", b"v")], partition=p), "partition"),
    (lambda c, p: c.queue("q").scan(partitions=p), "partitions"),
    (lambda c, p: c.queue("q").scan(partitions=[0, p]), "partitions[1]"),
]


@pytest.mark.parametrize(("call", "argument"), CLIENT_CALLS)
def test_the_client_refuses_a_partition_id_the_gateway_would(
    call: Callable[[Connection, int], Any], argument: str
) -> None:
    """Partition id 32767 does not exist in any queue: refused before anything is sent (the
    connection's port 1 has nothing listening, so a call that got as far would fail
    differently). A message's own partition is checked by the codecs:
    tests/unit/test_fastclient.py's BAD_ITEMS."""
    conn = Connection("127.0.0.1", 1, timeout=1)
    with pytest.raises(InvalidArgument) as info:
        result = call(conn, MAX_PARTITIONS)
        list(result) if result is not None and hasattr(result, "__iter__") else None
    assert info.value.argument == argument, str(info.value)
    assert f"0..{MAX_PARTITION_ID}" in str(info.value)


def test_a_subscription_takes_the_contract_limits() -> None:
    sub = Subscription("s", partitions={MAX_PARTITION_ID: (5, MAX_SEQUENCE)})
    assert sub.partitions == {MAX_PARTITION_ID: (5, MAX_SEQUENCE)}
    with pytest.raises(ValueError, match=f"0..{MAX_PARTITION_ID}"):
        Subscription("s", partitions=[MAX_PARTITIONS])
    with pytest.raises(ValueError, match=f"0..{MAX_SEQUENCE}"):
        Subscription("s", partitions={0: (5, MAX_SEQUENCE + 1)})


def test_the_c_row_key_header_has_the_contract_numbers() -> None:
    """gateway/_rowkey.h is the one C codec of the row key; its numbers are the contract's and
    rowkey.py's, as written and as compiled into the modules that include it."""
    header = (ROOT / "gateway" / "_rowkey.h").read_text()
    defined = {m[1]: int(m[2]) for m in re.finditer(r"#define (HQ_\w+) (\d+)", header)}
    assert defined == {
        "HQ_KEY_LENGTH": rowkey.KEY_LENGTH,
        "HQ_KEY_PARTITION_AT": 0,
        "HQ_KEY_TIMESTAMP_AT": 2,
        "HQ_KEY_SEQUENCE_AT": 10,
        "HQ_MAX_SEQUENCE": MAX_SEQUENCE,
        "HQ_MAX_PARTITION_ID": MAX_PARTITION_ID,
    }
    for name in ("_wal.c", "store/_hbasecodec.c"):
        source = (ROOT / "gateway" / name).read_text()
        assert '_rowkey.h"' in source, name
        assert not re.search(r"\b3276[67]\b", source.split("*/", 1)[-1]), name
    if not fast.PURE_PYTHON:  # the C modules are not even imported in pure mode
        from gateway import _wal
        from gateway.store import _hbasecodec

        assert (_wal.KEY_LENGTH, _wal.MAX_SEQUENCE, _wal.MAX_PARTITION_ID) == (
            rowkey.KEY_LENGTH,
            MAX_SEQUENCE,
            MAX_PARTITION_ID,
        )
        assert _hbasecodec.KEY_LENGTH == rowkey.KEY_LENGTH
