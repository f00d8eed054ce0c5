"""``hqueue import``'s JSON Lines encoder (hqueue/toolkit/_fastjsonl.c and its twin
_purejsonl.py): both take exactly the same blocks and write the same bytes, and what they take
they encode exactly as the general path (``records.parse_json_line``, ``blocks.encode_records``)
would. On any other input, however mangled, both say None; the C never reads past its buffer
(a guard page after the block would crash the test)."""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import subprocess
import sys
import zlib
from typing import Any

import pytest
from hqueue.toolkit import _purejsonl
from hqueue.toolkit.blocks import BlockConfig, encode_records
from hqueue.toolkit.commands import ToolkitError
from hqueue.toolkit.records import parse_json_line
from hqueue_contract.limits import MAX_PARTITION_ID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    from hqueue.toolkit import _fastjsonl
except ImportError as exc:  # never a reason to skip: the C must be tested where it is shipped
    raise ImportError(
        f"hqueue.toolkit._fastjsonl is not built ({exc}): run "
        "`python setup.py build_ext --inplace` (scripts/test-all's pip install -e builds it)"
    ) from exc

Q = b"queue-\xc3\xa9"
Calls = list[tuple[int | None, bytes, Any]]


def both(block: bytes | memoryview, first: int = 0, batch: int = 3, by_topic: int = 0) -> Any:
    """The C's answer, after checking the twin gives the same one."""
    got = _fastjsonl.encode_block(block, first, Q, batch, by_topic)
    assert got == _purejsonl.encode_block(block, first, Q, batch, by_topic)
    return got


def reference(block: bytes, first: int, batch: int, by_topic: int) -> Calls:
    """What the general path sends for the same block: every line must parse."""
    lines = block.split(b"\n")
    if block.endswith(b"\n"):
        lines.pop()
    recs = [(first + k, parse_json_line(x, first + k + 1, False)) for k, x in enumerate(lines)]
    cfg = BlockConfig(Q, False, by_topic > 0, max(by_topic, 1), batch, True)
    return [(o.partition, o.payload, list(o.numbers)) for o in encode_records(cfg, recs).outs]


def per_partition(calls: Calls) -> dict[int | None, list[tuple[bytes, list[int]]]]:
    out: dict[int | None, list[tuple[bytes, list[int]]]] = {}
    for p, payload, numbers in calls:
        out.setdefault(p, []).append((payload, list(numbers)))
    return out


def agrees(block: bytes, first: int = 0, batch: int = 3, by_topic: int = 0) -> Any:
    """C == twin; and when they take the block, the general path sends the same calls, the
    partitions in ascending order."""
    got = both(block, first, batch, by_topic)
    if got is not None:
        assert per_partition(got) == per_partition(reference(block, first, batch, by_topic))
        parts = [p for p, _, _ in got]
        assert parts == sorted(parts, key=lambda p: -1 if p is None else p)
    return got


# -- generated lines of the common shape --------------------------------------------------------

_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
          "\r": "\\r", "\t": "\\t"}  # fmt: skip


@st.composite
def json_string(draw: Any, text: str) -> str:
    """``text`` as a JSON string, each character raw, short-escaped or \\u-escaped (a surrogate
    pair above U+FFFF), in either case of hex."""
    out = ['"']
    for ch in text:
        how = draw(st.sampled_from(["raw", "raw", "raw", "short", "u"]))
        if how == "short" and ch in _SHORT:
            out.append(_SHORT[ch])
        elif how == "u" or ch in _SHORT or ord(ch) < 0x20:
            units = (
                [ord(ch)]
                if ord(ch) < 0x10000
                else [0xD800 + ((ord(ch) - 0x10000) >> 10), 0xDC00 + ((ord(ch) - 0x10000) & 0x3FF)]
            )
            fmt = draw(st.sampled_from(["\\u{:04x}", "\\u{:04X}"]))
            out += [fmt.format(u) for u in units]
        else:
            out.append(ch)
    return "".join(out) + '"'


texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=30) | st.sampled_from(
    ["", "x" * 7, "y" * 8, "z" * 9, "\u00e9t\u00e9", "\U0001f600", '"\\/', "\x00\x1f\x7f",
     "long plain text, where the C reads 8 bytes at a time"]
)  # fmt: skip
blank = st.sampled_from(["", "", " ", "\t", "\r", "  "])


@st.composite
def line(draw: Any, partitioned: bool) -> str:
    topic = draw(texts.filter(lambda t: 1 <= len(t.encode()) <= 255))
    members = [("topic", draw(json_string(topic))), ("value", draw(json_string(draw(texts))))]
    if partitioned:
        members.append(("partition", str(draw(st.integers(0, 5) | st.just(MAX_PARTITION_ID)))))
    elif draw(st.booleans()):
        members.append(("partition", "null"))
    for name in ("timestamp", "sequence"):
        if draw(st.booleans()):
            ints = ["null", "0", "-7", "1765000000000", "123456789012345678901234567890"]
            members.append((name, draw(st.sampled_from(ints))))
    members = draw(st.permutations(members))
    b = lambda: draw(blank)  # noqa: E731
    body = ",".join(f'{b()}"{k}"{b()}:{b()}{v}{b()}' for k, v in members)
    return f"{b()}{{{body}}}{b()}"


@st.composite
def block(draw: Any) -> bytes:
    partitioned = draw(st.booleans())
    lines = draw(st.lists(line(partitioned), min_size=1, max_size=12))
    return ("\n".join(lines) + draw(st.sampled_from(["", "\n"]))).encode()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block(), st.integers(0, 10**12), st.integers(1, 5), st.sampled_from([0, 0, 1, 3, 7]))
def test_the_common_shape_is_taken_and_encoded_as_the_general_path_would(
    data: bytes, first: int, batch: int, by_topic: int
) -> None:
    got = agrees(data, first, batch, by_topic)
    assert got is not None
    assert sum(len(n) for _, _, n in got) == data.count(b"\n") + (not data.endswith(b"\n"))


# -- anything else ------------------------------------------------------------------------------

_NASTY = [b'"', b"\\", b"\n", b"\r", b"\x00", b"\x1f", b"\x7f", b"\x80", b"\xbf", b"\xc0", b"\xc3",
          b"\xe0", b"\xed", b"\xf0", b"\xf4", b"\xf5", b"\xff", b"{", b"}", b",", b":", b"u",
          b"0", b"-", b".", b"e", b"n", b" ", b"\\u", b"\\ud800", b"\\udc00", b"null",
          b'"key":"k",', b'"partition":1,', b'"topic":"t",']  # fmt: skip


@st.composite
def mangled(draw: Any) -> bytes:
    data = bytearray(draw(block()))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "replace", "delete", "cut"]))
        piece = draw(st.sampled_from(_NASTY) | st.binary(min_size=1, max_size=3))
        if op == "insert":
            data[at:at] = piece
        elif op == "replace":
            data[at : at + len(piece)] = piece
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 4))]
        else:
            del data[at:]
    return bytes(data)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mangled(), st.integers(1, 4), st.sampled_from([0, 2]))
def test_mangled_blocks_get_the_same_decision_and_what_is_taken_is_right(
    data: bytes, batch: int, by_topic: int
) -> None:
    agrees(data, 0, batch, by_topic)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_get_the_same_decision(data: bytes) -> None:
    agrees(data)


def _guarded(data: bytes) -> tuple[mmap.mmap, memoryview]:
    """``data`` ending exactly where an unreadable page begins."""
    page = mmap.PAGESIZE
    size = (len(data) // page + 2) * page
    m = mmap.mmap(-1, size)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    assert libc.mprotect(base + size - page, page, 0) == 0, os.strerror(ctypes.get_errno())
    start = size - page - len(data)
    m[start : start + len(data)] = data
    return m, memoryview(m)[start : start + len(data)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mangled())
def test_the_c_reads_nothing_past_the_block(data: bytes) -> None:
    for n in {len(data), len(data) // 2, max(len(data) - 1, 0)}:  # every kind of cut-off end
        m, view = _guarded(data[:n])
        try:
            assert _fastjsonl.encode_block(view, 0, Q, 3, 0) == _purejsonl.encode_block(
                data[:n], 0, Q, 3, 0
            )
        finally:
            view.release()
            m.close()


# -- the edges, one by one ------------------------------------------------------------------------


def one(text: str | bytes, **kw: Any) -> Any:
    data = text.encode() if isinstance(text, str) else text
    return agrees(data, **kw)


def value_of(text: str | bytes) -> bytes | None:
    got = one(text)
    if got is None:
        return None
    assert len(got) == 1
    payload = got[0][1]
    return payload[payload.rindex(b"\x0b\x00\x04") + 7 : -2]  # the one value's bytes


@pytest.mark.parametrize(
    "value, want",
    [
        ('"plain"', b"plain"),
        ('"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t"', b'a"b\\c/d\b\f\n\r\t'),
        ('"\\u00e9\\u00E9\u00e9"', "\u00e9\u00e9\u00e9".encode()),
        ('"\\u0000"', b"\x00"),
        ('"\\ud83d\\ude00"', "\U0001f600".encode()),
        ('"\\uD83D\\uDE00"', "\U0001f600".encode()),
        ('"' + "x" * 13 + '\\n"', b"x" * 13 + b"\n"),  # an escape after the 8-byte steps
        ('"\x7f"', b"\x7f"),
        ('"\\ud800"', None),  # lone high surrogate
        ('"\\udc00"', None),  # lone low surrogate
        ('"\\ud800\\u0041"', None),
        ('"\\ud800x"', None),
        ('"\\x41"', None),
        ('"\\u12"', None),
        ('"\\u12G4"', None),
        ('"a\tb"', None),  # a raw control character
        ('"abc', None),
        ("null", None),
        ("5", None),
        ('["v"]', None),
    ],
)
def test_strings(value: str, want: bytes | None) -> None:
    assert value_of('{"topic":"t","value":' + value + "}") == want


_ODD = [b"\x00", b"\x1f", b"\t", b"\x7f", b'"', b"\\x", b"\\n", b"\\u00e9", b"\x80", b"\xc3\xa9",
        b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"\xc3"]  # fmt: skip


@pytest.mark.parametrize("odd", _ODD)
def test_every_byte_is_looked_at_wherever_it_is(odd: bytes) -> None:
    """The C skips plain text 8 bytes at a time: an odd byte at any offset still counts."""
    for at in range(0, 26):
        text = b"a" * at + odd + b"b" * (25 - at)
        got = value_of(b'{"topic":"t","value":"' + text + b'"}')  # C == twin, checked
        try:
            want: bytes | None = json.loads(b'"' + text + b'"').encode()
        except (ValueError, UnicodeEncodeError):
            want = None
        if odd in (b"\x7f", b"\\n", b"\\u00e9", b"\xc3\xa9", b"\xf0\x9f\x98\x80"):
            assert got == want is not None
        else:
            assert got is None


@pytest.mark.parametrize(
    "raw, taken",
    [
        (b"\xc3\xa9", True),
        (b"\xe2\x82\xac", True),
        (b"\xf0\x9f\x98\x80", True),
        (b"\xef\xbf\xbf", True),
        (b"\xf4\x8f\xbf\xbf", True),  # U+10FFFF
        (b"\xc0\xaf", False),  # overlong
        (b"\xe0\x80\xaf", False),  # overlong
        (b"\xed\xa0\x80", False),  # an encoded surrogate (json.loads would take it)
        (b"\xf4\x90\x80\x80", False),  # past U+10FFFF
        (b"\xf5\x80\x80\x80", False),
        (b"\x80", False),
        (b"\xc3", False),  # cut short by the closing quote
        (b"\xe2\x82", False),
        (b"\xff", False),
    ],
)
def test_utf8_is_checked_strictly(raw: bytes, taken: bool) -> None:
    got = value_of(b'{"topic":"t","value":"' + raw + b'"}')
    assert got == (raw if taken else None)


@pytest.mark.parametrize(
    "text, taken",
    [
        ('{"topic":"t","value":"v"}', True),
        (' \t{ "value" : "v" , "topic" : "t" } \r', True),
        ('{"topic":"t","value":"v","partition":null,"timestamp":null,"sequence":-1}', True),
        ('{"topic":"t","value":"v","timestamp":1765000000000,"sequence":0}', True),
        (f'{{"topic":"t","value":"v","partition":{MAX_PARTITION_ID}}}', True),
        (f'{{"topic":"t","value":"v","partition":{MAX_PARTITION_ID + 1}}}', False),
        ('{"topic":"t","value":"v","partition":99999999999999999999999}', False),
        ('{"topic":"t","value":"v","partition":-0}', False),
        ('{"topic":"t","value":"v","partition":01}', False),
        ('{"topic":"t","value":"v","partition":1.0}', False),
        ('{"topic":"t","value":"v","partition":1e2}', False),
        ('{"topic":"t","value":"v","partition":"1"}', False),
        ('{"topic":"t","value":"v","partition":true}', False),
        ('{"topic":"t","value":"v","timestamp":"2026"}', False),
        ('{"topic":"t","value":"v","timestamp":1.5}', False),
        ('{"topic":"t","value":"v","key":"k"}', False),
        ('{"topic":"t","value_b64":"dg=="}', False),
        ('{"topic":"t","value":"v","color":1}', False),
        ('{"topic":"t","topic":"u","value":"v"}', False),  # json.loads would keep the last
        ('{"topic":"t","value":"v",}', False),
        ('{"topic":"t" "value":"v"}', False),
        ('{"topic":"t","value":"v"}x', False),
        ('{"topic":"t","value":"v"}}', False),
        ('{"t\\u006fpic":"t","value":"v"}', False),
        ('{"topic":"t"}', False),
        ('{"value":"v"}', False),
        ('{"topic":"","value":"v"}', False),
        ("{}", False),
        ("[]", False),
        ("", False),
        ("\ufeff" + '{"topic":"t","value":"v"}', False),
        ('{"topic":"' + "\u00e9" * 127 + '","value":"v"}', True),  # 254 bytes
        ('{"topic":"' + "\u00e9" * 128 + '","value":"v"}', False),  # 256 bytes
        ('{"topic":"' + "x" * 255 + '","value":"v"}', True),
        ('{"topic":"' + "\\u0078" * 256 + '","value":"v"}', False),  # 256 once decoded
    ],
)
def test_lines(text: str, taken: bool) -> None:
    assert (one(text) is not None) is taken


def test_a_block_is_all_or_nothing() -> None:
    good = '{"topic":"t","value":"v","partition":1}'
    assert one("\n".join([good] * 5)) is not None
    assert one("\n".join([good] * 5) + "\n") is not None
    assert one("\n".join([good, good, "", good])) is None  # an empty line
    assert one("\n".join([good] * 5) + "\n\n") is None
    assert one("\n".join([good, '{"topic":"t","value":"v"}'])) is None  # partition or not
    assert one("\n".join([good, '{"topic":"t","value":"v","partition":null}'])) is None
    assert one("\r\n".join([good] * 3) + "\r\n") is not None  # CRLF: the CR is a blank


def test_calls_numbers_and_partitions() -> None:
    rows = [{"topic": f"s{i % 5}", "value": str(i), "partition": (i * 7) % 3} for i in range(20)]
    data = "\n".join(json.dumps(r) for r in rows).encode()
    got = one(data, first=100, batch=4)
    assert [p for p, _, _ in got] == [0, 0, 1, 1, 2, 2]
    assert got[0][2] == range(100, 120, 3)[:4] and isinstance(got[0][2], range)
    assert [n for _, _, nums in got for n in nums] == sorted(
        range(100, 120), key=lambda n: ((n - 100) * 7 % 3, n)
    )
    by_topic = one("\n".join(json.dumps({"topic": r["topic"], "value": r["value"]})
                             for r in rows).encode(), by_topic=3)  # fmt: skip
    for p, _, nums in by_topic:
        assert all(zlib.crc32(f"s{n % 5}".encode()) % 3 == p for n in nums)
    random = one(b'{"topic":"t","value":"v"}\n' * 10, first=5, batch=4)
    assert [(p, n) for p, _, n in random] == [(None, range(5, 9)), (None, range(9, 13)),
                                               (None, range(13, 15))]  # blocks._spans  # fmt: skip


def test_a_long_line_with_escapes_at_the_end() -> None:
    value = "\u00e9" * 300_000 + "x" * 1_000_000 + "\\n\\u00e9\\ud83d\\ude00"
    got = value_of('{"topic":"t","value":"' + value + '"}\n')
    assert got == ("\u00e9" * 300_000 + "x" * 1_000_000 + "\n\u00e9\U0001f600").encode()


@pytest.mark.parametrize("impl", [_fastjsonl, _purejsonl], ids=["c", "python"])
def test_arguments_are_checked(impl: Any) -> None:
    good = b'{"topic":"t","value":"v"}'
    for args in [(good, 0, Q, 0, 0), (good, 0, Q, 1, -1), (good, 0, Q, 1, MAX_PARTITION_ID + 2),
                 (good, -1, Q, 1, 0)]:  # fmt: skip
        with pytest.raises(ValueError):
            impl.encode_block(*args)
    assert impl.encode_block(bytearray(good), 0, Q, 1, 0) == impl.encode_block(good, 0, Q, 1, 0)


def test_a_line_refused_here_is_refused_by_the_general_path_too() -> None:
    """The partition limit is the gateway's: the general path names the line."""
    line = b'{"topic":"t","value":"v","partition":%d}' % (MAX_PARTITION_ID + 1)
    with pytest.raises(
        ToolkitError, match=rf"'partition' must be an integer 0\.\.{MAX_PARTITION_ID}"
    ):
        parse_json_line(line, 1, False)


def test_the_switch_selects_the_twin() -> None:
    code = "import hqueue.toolkit.blocks as b; print(b.NATIVE, b.lines_impl.__name__)"
    env = dict(os.environ)
    for value, want in (("1", "False hqueue.toolkit._purejsonl"),
                        ("", "True hqueue.toolkit._fastjsonl")):  # fmt: skip
        env["HQUEUE_PUREPYTHON"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, timeout=60)  # fmt: skip
        assert out.stdout.strip() == want


def test_topic_lengths_count_bytes_not_characters() -> None:
    assert one('{"topic":"' + "\U0001f600" * 63 + '","value":"v"}') is not None  # 252 bytes
    assert one('{"topic":"' + "\U0001f600" * 64 + '","value":"v"}') is None  # 256 bytes


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300) | st.lists(st.sampled_from([b"\n", b"x" * 9, b""])).map(b"".join))
def test_lines_are_counted_alike(data: bytes) -> None:
    assert _fastjsonl.count_lines(data) == _purejsonl.count_lines(data) == data.count(b"\n")
