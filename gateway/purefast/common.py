"""What the twins share: the row type, the Thrift limits and integer layouts, and the binary
reader both codecs use (gateway/_thriftbuf.h)."""

from __future__ import annotations

import struct

Row = tuple[int, int, bytes, bytes]

MAX_DEPTH = 64

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_LE32 = struct.Struct("<I")


def _be32(buf: bytes, p: int) -> int:
    return _I32.unpack_from(buf, p)[0]  # type: ignore[no-any-return]


# ---- the binary reader both codecs share (gateway/_thriftbuf.h) ----------------------------


class _Truncated(Exception):
    """The C reader's 0: truncated or unusual; the caller takes its generic path."""


class _Reader:
    __slots__ = ("buf", "len", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.len = len(buf)
        self.pos = 0

    def need(self, n: int) -> bool:
        return self.pos + n <= self.len

    def str_at(self) -> tuple[int, int]:
        """A binary string at pos: (offset, length)."""
        if not self.need(4):
            raise _Truncated
        n = _be32(self.buf, self.pos)
        self.pos += 4
        if n < 0 or not self.need(n):
            raise _Truncated
        at = self.pos
        self.pos += n
        return at, n

    def field(self) -> tuple[int, int]:
        """A field header: (type, id); type 0 at the end of a struct (id 0 then)."""
        if not self.need(1):
            raise _Truncated
        t = self.buf[self.pos]
        self.pos += 1
        if t == 0:
            return 0, 0
        if not self.need(2):
            raise _Truncated
        fid = _I16.unpack_from(self.buf, self.pos)[0]
        self.pos += 2
        return t, fid

    def skip(self, t: int, depth: int) -> None:
        """Skips one value of binary type t."""
        if depth > MAX_DEPTH:
            raise _Truncated
        buf = self.buf
        if t in (2, 3):
            self.pos += 1
        elif t == 6:
            self.pos += 2
        elif t == 8:
            self.pos += 4
        elif t in (4, 10):
            self.pos += 8
        elif t == 11:
            if not self.need(4):
                raise _Truncated
            self.pos += 4 + _be32(buf, self.pos)
        elif t == 12:
            while True:
                if not self.need(1):
                    raise _Truncated
                ft = buf[self.pos]
                self.pos += 1
                if ft == 0:
                    break
                self.pos += 2
                self.skip(ft, depth + 1)
        elif t in (14, 15):
            if not self.need(5):
                raise _Truncated
            et = buf[self.pos]
            n = _be32(buf, self.pos + 1)
            self.pos += 5
            for _ in range(n):
                self.skip(et, depth + 1)
        elif t == 13:
            if not self.need(6):
                raise _Truncated
            kt, vt = buf[self.pos], buf[self.pos + 1]
            n = _be32(buf, self.pos + 2)
            self.pos += 6
            for _ in range(n):
                self.skip(kt, depth + 1)
                self.skip(vt, depth + 1)
        else:
            raise _Truncated
        if self.pos > self.len:
            raise _Truncated
