"""The request scanner (gateway/_wirecheck.c, ``scan``)."""

from __future__ import annotations

from typing import Any

from .common import MAX_DEPTH, _be32

# ---- the request scanner (gateway/_wirecheck.c, scan) -------------------------------------

_F_STRUCT, _F_LIST, _F_MAP = 1, 2, 3
_BINARY_TYPES = frozenset((2, 3, 4, 6, 8, 10, 11, 12, 13, 14, 15))


class _More(Exception):
    def __init__(self, need: int) -> None:
        self.need = need


class _Bad(Exception):
    pass


class _State:
    __slots__ = ("depth_frames", "header_done", "name_len", "name_off", "pos", "values")

    def __init__(self) -> None:
        self.pos = 0
        self.values = 0
        self.name_off = 0
        self.name_len = 0
        self.header_done = False
        # frames: [kind, t1, t2, phase, remaining]
        self.depth_frames: list[list[int]] = []

    def copy(self) -> _State:
        s = _State()
        s.pos, s.values, s.name_off, s.name_len = (
            self.pos,
            self.values,
            self.name_off,
            self.name_len,
        )
        s.header_done = self.header_done
        s.depth_frames = [list(f) for f in self.depth_frames]
        return s


class _Scan:
    def __init__(
        self, buf: bytes, max_string: int, max_container: int, max_values: int, s: _State
    ) -> None:
        self.buf = buf
        self.len = len(buf)
        self.max_string = max_string
        self.max_container = max_container
        self.max_values = max_values
        self.s = s

    def varint(self, at: int, max_bytes: int) -> tuple[int, int]:
        v = 0
        shift = 0
        for i in range(max_bytes):
            if at + i >= self.len:
                raise _More(at + i + 1)
            b = self.buf[at + i]
            if shift == 63 and b > 1:
                raise _Bad(f"varint over 64 bits (byte 0x{b:x})")
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v & 0xFFFFFFFFFFFFFFFF, at + i + 1
            shift += 7
        raise _Bad(f"varint longer than {max_bytes} bytes")

    def varint_within(self, at: int, max_bytes: int, limit: int, what: str) -> int:
        v, at = self.varint(at, max_bytes)
        if v > limit:
            raise _Bad(f"{what} varint 0x{v:x} is out of range")
        return at

    @staticmethod
    def check_size(size: int, limit: int, what: str) -> None:
        if size < 0:
            raise _Bad(f"negative size {size}")
        if size > limit:
            raise _Bad(f"{what} of {size} is over the limit of {limit}")

    def push(self, kind: int, t1: int, t2: int, remaining: int) -> None:
        if len(self.s.depth_frames) >= MAX_DEPTH:
            raise _Bad(f"nesting deeper than {MAX_DEPTH}")
        self.s.depth_frames.append([kind, t1, t2, 0, remaining])

    def begin_arguments(self, p: int) -> None:
        if p > self.len:
            raise _More(p)
        self.s.pos = p
        self.s.header_done = True
        self.push(_F_STRUCT, 0, 0, 0)

    # binary protocol
    def binary_value(self, t: int, p: int, in_field: bool) -> int:
        buf, n_ = self.buf, self.len
        pushed = False
        if t in (2, 3):
            p += 1
        elif t == 6:
            p += 2
        elif t == 8:
            p += 4
        elif t in (4, 10):
            p += 8
        elif t == 11:
            if p + 4 > n_:
                raise _More(p + 4)
            n = _be32(buf, p)
            self.check_size(n, self.max_string, "string")
            p += 4 + n
        elif t == 12:
            self.push(_F_STRUCT, 0, 0, 0)
            pushed = True
        elif t in (14, 15):
            if p + 5 > n_:
                raise _More(p + 5)
            et = buf[p]
            n = _be32(buf, p + 1)
            self.check_size(n, self.max_container, "list")
            if n > 0 and et not in _BINARY_TYPES:
                raise _Bad(f"invalid list element type {et}")
            p += 5
            if p > n_:
                raise _More(p)
            self.push(_F_LIST, et, 0, n)
            pushed = True
        elif t == 13:
            if p + 6 > n_:
                raise _More(p + 6)
            kt, vt = buf[p], buf[p + 1]
            n = _be32(buf, p + 2)
            self.check_size(n, self.max_container, "map")
            if n > 0 and (kt not in _BINARY_TYPES or vt not in _BINARY_TYPES):
                raise _Bad(f"invalid map key or value type {kt * 256 + vt}")
            p += 6
            self.push(_F_MAP, kt, vt, n)
            pushed = True
        else:
            raise _Bad(f"invalid type {t}")
        if p > n_:
            if pushed:
                self.s.depth_frames.pop()
            raise _More(p)
        return p

    def binary_header(self) -> None:
        if self.len < 4:
            raise _More(4)
        first = _be32(self.buf, 0)
        if first < 0:
            if (first & 0xFFFF0000) != 0x80010000:
                raise _Bad(f"bad protocol version 0x{first & 0xFFFFFFFF:x}")
            if self.len < 8:
                raise _More(8)
            name_len = _be32(self.buf, 4)
            self.check_size(name_len, 4096, "method name")
            self.s.name_off = 8
            p = 8 + name_len + 4
        else:
            name_len = first
            self.check_size(name_len, 4096, "method name")
            self.s.name_off = 4
            p = 4 + name_len + 1 + 4
        self.s.name_len = name_len
        self.begin_arguments(p)

    def binary_field(self, at: int) -> tuple[int, int] | None:
        if at >= self.len:
            raise _More(at + 1)
        t = self.buf[at]
        if t == 0:
            return None
        if t not in _BINARY_TYPES:
            raise _Bad(f"invalid field type {t}")
        if at + 3 > self.len:
            raise _More(at + 3)
        return t, at + 3

    # compact protocol
    def compact_value(self, t: int, p: int, in_field: bool) -> int:
        pushed = False
        if t in (1, 2):
            if not in_field:
                p += 1
        elif t == 3:
            p += 1
        elif t == 4:
            p = self.varint_within(p, 3, 0xFFFF, "i16")
        elif t == 5:
            p = self.varint_within(p, 5, 0xFFFFFFFF, "i32")
        elif t == 6:
            p = self.varint_within(p, 10, 0xFFFFFFFFFFFFFFFF, "i64")
        elif t == 7:
            p += 8
        elif t == 8:
            v, p = self.varint(p, 5)
            self.check_size(v, self.max_string, "string")
            p += v
        elif t == 12:
            self.push(_F_STRUCT, 0, 0, 0)
            pushed = True
        elif t in (9, 10):
            if p >= self.len:
                raise _More(p + 1)
            h = self.buf[p]
            p += 1
            et = h & 0x0F
            n = h >> 4
            if n == 15:
                n, p = self.varint(p, 5)
            self.check_size(n, self.max_container, "list")
            if n > 0 and not 1 <= et <= 12:
                raise _Bad(f"invalid list element type {et}")
            if p > self.len:
                raise _More(p)
            self.push(_F_LIST, et, 0, n)
            pushed = True
        elif t == 11:
            n, p = self.varint(p, 5)
            self.check_size(n, self.max_container, "map")
            kt = vt = 0
            if n > 0:
                if p >= self.len:
                    raise _More(p + 1)
                kt = self.buf[p] >> 4
                vt = self.buf[p] & 0x0F
                p += 1
                if not (1 <= kt <= 12 and 1 <= vt <= 12):
                    raise _Bad(f"invalid map key or value type {kt * 16 + vt}")
            self.push(_F_MAP, kt, vt, n)
            pushed = True
        else:
            raise _Bad(f"invalid type {t}")
        if p > self.len:
            if pushed:
                self.s.depth_frames.pop()
            raise _More(p)
        return p

    def compact_header(self) -> None:
        if self.len < 2:
            raise _More(2)
        if self.buf[0] != 0x82:
            raise _Bad(f"bad compact protocol id 0x{self.buf[0]:x}")
        if (self.buf[1] & 0x1F) != 1:
            raise _Bad(f"bad compact protocol version {self.buf[1] & 0x1F}")
        p = self.varint_within(2, 5, 0xFFFFFFFF, "seqid")
        v, p = self.varint(p, 5)
        self.check_size(v, 4096, "method name")
        self.s.name_off = p
        self.s.name_len = v
        self.begin_arguments(p + v)

    def compact_field(self, at: int) -> tuple[int, int] | None:
        if at >= self.len:
            raise _More(at + 1)
        b = self.buf[at]
        if b == 0:
            return None
        p = at + 1
        if (b >> 4) == 0:
            p = self.varint_within(p, 3, 0xFFFF, "field id")
        return b & 0x0F, p

    def walk(self, compact: bool) -> None:
        s = self.s
        if compact:
            header, field, value = self.compact_header, self.compact_field, self.compact_value
        else:
            header, field, value = self.binary_header, self.binary_field, self.binary_value
        if not s.header_done:
            header()
        frames = s.depth_frames
        while frames:
            f = frames[-1]
            at = s.pos
            if f[0] == _F_STRUCT:
                got = field(at)
                if got is None:
                    s.pos = at + 1
                    frames.pop()
                    continue
                t, at = got
                at = value(t, at, True)
            else:
                if f[4] == 0:
                    frames.pop()
                    continue
                phase, remaining = f[3], f[4]
                t = f[2] if (f[0] == _F_MAP and phase) else f[1]
                if f[0] == _F_MAP:
                    f[3] ^= 1
                if f[0] == _F_LIST or phase:
                    f[4] -= 1
                try:
                    at = value(t, at, False)
                except (_More, _Bad):
                    f[3], f[4] = phase, remaining
                    raise
            s.pos = at
            s.values += 1
            if s.values > self.max_values:
                raise _Bad(f"more than {self.max_values} values in one request")


def scan(
    buffer: bytes | bytearray | memoryview,
    compact: bool,
    state: Any,
    max_string: int,
    max_container: int,
    max_values: int,
) -> tuple[int, int, Any, bytes | None]:
    """gateway/_wirecheck.c's scan: (0, end, None, name) for a whole valid message in
    buffer[0:end], (1, need, state, name|None) when more bytes are needed, ValueError else.
    The state is this twin's own (a snapshot, as the C's bytes are)."""
    buf = bytes(buffer)
    if state is None:
        s = _State()
    elif isinstance(state, _State):
        s = state.copy()
    else:
        raise TypeError("state must be a value scan() returned")
    c = _Scan(buf, max_string, max_container, max_values, s)
    need = -1
    error: str | None = None
    try:
        c.walk(compact)
    except _More as more:
        need = more.need
    except _Bad as bad:
        error = str(bad)
    name = None
    if s.header_done and s.name_off + s.name_len <= len(buf):
        name = buf[s.name_off : s.name_off + s.name_len]
    if error is not None:
        raise ValueError(error)
    if need < 0:
        return 0, s.pos, None, name
    return 1, need, s, name
