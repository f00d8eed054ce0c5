"""The limits of a MessageID live in one place per language (Python :mod:`hqueue_contract.limits`,
C ``hqueue_contract/hqueue_limits.h``, the IDL's consts for the generated clients) and both sides
of the wire hold to them: partition ids 0..32766 (a queue has 1..32767 partitions), sequence ids
0..32767 within a millisecond. The row key's layout lives in ``gateway/rowkey.py`` and, for C,
``gateway/_rowkey.h``."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hqueue import Connection, InvalidArgument, _purecodec
from hqueue_contract.limits import MAX_PARTITION_ID, MAX_PARTITIONS, MAX_SEQUENCE
from hqueue_contract.protocol import hqueue_thrift

from gateway import fast, rowkey, validation
from gateway.errors import InvalidArgument as GatewayInvalidArgument
from subscriber_runtime.subscription import Subscription

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "clients" / "python" / "hqueue_contract"
LIMITS = CONTRACT / "limits.py"
LIMITS_H = CONTRACT / "hqueue_limits.h"
ROWKEY = ROOT / "gateway" / "rowkey.py"
SOURCES = [
    ROOT / "gateway",
    ROOT / "clients" / "python" / "hqueue",
    ROOT / "clients" / "python" / "hqueue_contract",
    ROOT / "clients" / "python" / "examples",
    ROOT / "subscriber_runtime",
    ROOT / "loadtests",
]
# Hand-written code of the other languages (the generated stubs take the IDL's consts).
C_LIKE_SOURCES = [
    (ROOT / "gateway", ("*.c", "*.h")),
    (ROOT / "clients" / "python", ("*.c", "*.h")),
    (ROOT / "clients" / "cpp" / "src", ("*.cpp", "*.h")),
    (
        ROOT / "clients" / "java" / "src" / "main" / "java" / "com" / "hqueue" / "examples",
        ("*.java",),
    ),
    (ROOT / "clients" / "php", ("*.php",)),
]
GENERATED = ("gen-cpp", "gen-php", "generated")
# Files allowed to restate the row key's struct for now (none left): the test fails once one
# no longer does, so an entry goes with the copy it names.
PENDING_KEY_STRUCTS: set[Path] = set()
# Not copies: the HBase benchmark's happybase baseline is an application writing to HBase with
# keys of its own (the same shape, so the comparison is fair); loadtests/ imports no gateway
# module (tests/unit/test_package_direction.py).
OWN_KEY_STRUCTS = {ROOT / "loadtests" / "benchmarks" / "hbase.py"}


def limit_numbers(source: str) -> list[tuple[int, str]]:
    """(line, text) of every Python number token that is a limit (comments and docstrings are
    not number tokens)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [
        (tok.start[0], tok.line.strip())
        for tok in tokens
        if tok.type == tokenize.NUMBER
        and tok.string.lower() in ("32767", "32766", "0x7fff", "0x7ffe")
    ]


_STRUCT_CALLS = {"Struct", "pack", "unpack", "pack_into", "unpack_from", "iter_unpack", "calcsize"}


def key_structs(source: str) -> list[tuple[int, str]]:
    """(line, format) of every struct format handed to the struct module that lays out a row
    key: an int16, an int64 and an int16 in a row, whatever the byte order or case."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in _STRUCT_CALLS or not node.args:
            continue
        fmt = node.args[0]
        if isinstance(fmt, ast.Constant) and isinstance(fmt.value, (str, bytes)):
            text = fmt.value if isinstance(fmt.value, str) else fmt.value.decode("latin-1")
            if re.search(r"h\s*q\s*h", text.lower()):
                found.append((node.lineno, text))
    return found


def c_code(source: str) -> str:
    """C, C++, Java or PHP source without its comments (string literals stay: a number in an
    error message is a copy too)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", source, flags=re.DOTALL)


def c_like_files() -> list[Path]:
    files = []
    for folder, patterns in C_LIKE_SOURCES:
        for pattern in patterns:
            files += [p for p in folder.rglob(pattern) if not set(p.parts) & set(GENERATED)]
    return sorted(set(files))


def test_the_numbers_are_written_once() -> None:
    """No Python code but limits.py spells 32767 or 32766 (comments and docstrings may)."""
    found = []
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            if path == LIMITS:
                continue
            for line, text in limit_numbers(path.read_text()):
                found.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert not found, "use hqueue_contract.limits:\n" + "\n".join(found)
    assert (MAX_PARTITIONS, MAX_PARTITION_ID, MAX_SEQUENCE) == (32767, 32766, 32767)
    assert rowkey.MAX_PARTITIONS == MAX_PARTITIONS and rowkey.MAX_SEQUENCE == MAX_SEQUENCE


def test_the_row_key_struct_is_written_once() -> None:
    """No Python code but rowkey.py builds a row key's struct (use rowkey.KEY, encode, decode)."""
    found, pending = [], set()
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            if path == ROWKEY or path in OWN_KEY_STRUCTS:
                continue
            for line, fmt in key_structs(path.read_text()):
                if path in PENDING_KEY_STRUCTS:
                    pending.add(path)
                else:
                    found.append(f"{path.relative_to(ROOT)}:{line}: {fmt!r}")
    assert not found, "use gateway.rowkey:\n" + "\n".join(found)
    assert pending == PENDING_KEY_STRUCTS, (
        f"no longer restates the key, drop it: {PENDING_KEY_STRUCTS - pending}"
    )


def test_the_checks_find_what_they_look_for() -> None:
    """The checks above read code, not text: a copy in a comment or docstring passes, one in
    code fails, whatever its spelling."""
    code = (
        'import struct\nK = struct.Struct("!H Q H")\nP = struct.pack(">hqh", 1, 2, 3)\nN = 0x7FFF\n'
    )
    assert [line for line, _ in key_structs(code)] == [2, 3]
    assert [line for line, _ in limit_numbers(code)] == [4]
    prose = '"""struct.Struct(">hqh") of 32767"""\n# struct.pack(">hqh", 32766)\nX = ">hqh"\n'
    assert key_structs(prose) == [] and limit_numbers(prose) == []
    assert re.search(r"\b3276[67]\b", c_code("/* 32767 */ int x; // 32766\n")) is None
    assert re.search(r"\b3276[67]\b", c_code('f("0..32766");'))


def test_the_numbers_are_written_once_in_c_and_the_other_languages() -> None:
    """In hand-written C, C++, Java and PHP only hqueue_limits.h spells them; the rest take
    its names (C) or the IDL's consts (the generated clients'), comments aside."""
    files = c_like_files()
    assert LIMITS_H in files and ROOT / "gateway" / "_rowkey.h" in files
    assert ROOT / "clients" / "cpp" / "src" / "common.h" in files
    found = []
    for path in files:
        if path == LIMITS_H:
            continue
        code = c_code(path.read_text())
        for m in re.finditer(r"\b(3276[67]|0x7ff[fe])\b", code, flags=re.IGNORECASE):
            found.append(f"{path.relative_to(ROOT)}:{code.count(chr(10), 0, m.start()) + 1}")
    assert not found, "use hqueue_limits.h or the IDL's consts:\n" + "\n".join(found)


def test_the_c_and_idl_limits_are_the_contract_numbers() -> None:
    header = LIMITS_H.read_text()
    defined = {m[1]: int(m[2]) for m in re.finditer(r"#define (HQ_\w+) (\d+)", header)}
    assert defined == {
        "HQ_MAX_PARTITIONS": MAX_PARTITIONS,
        "HQ_MAX_PARTITION_ID": MAX_PARTITION_ID,
        "HQ_MAX_SEQUENCE": MAX_SEQUENCE,
    }
    T = hqueue_thrift()
    assert (T.MAX_PARTITIONS, T.MAX_PARTITION_ID, T.MAX_SEQUENCE) == (
        MAX_PARTITIONS,
        MAX_PARTITION_ID,
        MAX_SEQUENCE,
    )


def test_the_c_client_codec_has_the_same_partition_limit() -> None:
    assert _purecodec.MAX_PARTITION == MAX_PARTITION_ID
    for name, include in [
        ("_fastclient.c", '"../hqueue_contract/hqueue_limits.h"'),
        ("toolkit/_fastjsonl.c", '"../../hqueue_contract/hqueue_limits.h"'),
    ]:
        source = (ROOT / "clients" / "python" / "hqueue" / name).read_text()
        assert f"#include {include}" in source, name
        assert "#define MAX_PARTITION HQ_MAX_PARTITION_ID" in source, name
    if not fast.PURE_PYTHON:
        from hqueue import _fastclient
        from hqueue.toolkit import _fastjsonl

        with pytest.raises(ValueError, match=f"0..{MAX_PARTITION_ID}$"):
            _fastclient.encode_put_lists(0, b"q", MAX_PARTITIONS, [], [], 0)
        with pytest.raises(ValueError, match=f"1..{MAX_PARTITIONS}$"):
            _fastjsonl.encode_block(b"", 0, b"q", 1, MAX_PARTITIONS + 1)


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
        "HQ_KEY_TIMESTAMP_AT": rowkey.TIMESTAMP_AT,
        "HQ_KEY_SEQUENCE_AT": rowkey.SEQUENCE_AT,
    }
    assert '#include "../clients/python/hqueue_contract/hqueue_limits.h"' in header
    for name in ("_wal.c", "store/_hbasecodec.c"):
        source = (ROOT / "gateway" / name).read_text()
        assert '_rowkey.h"' in source, name
    if not fast.PURE_PYTHON:  # the C modules are not even imported in pure mode
        from gateway import _wal
        from gateway.store import _hbasecodec

        assert (_wal.KEY_LENGTH, _wal.MAX_SEQUENCE, _wal.MAX_PARTITION_ID) == (
            rowkey.KEY_LENGTH,
            MAX_SEQUENCE,
            MAX_PARTITION_ID,
        )
        assert _hbasecodec.KEY_LENGTH == rowkey.KEY_LENGTH
