"""Tokenizer and parser for the HQueue shell's Ruby-like command syntax (seed 4.1).

One line is one command::

    create 'q1', 32, 86400, {'hbase.hqueue.partitionsPerRegion' => '4'}

A command is a bare word followed by arguments: quoted strings, integers, bare words (taken as
strings) and ``{key => value, ...}`` hashes. Commas between arguments are optional and the
arguments may be wrapped in parentheses, as Ruby allows. Text is never evaluated.

The seed was published through a word processor, so its quotes are typographic and not even
paired (U+2018 ... U+2032 around ``q1``, U+2019 ... U+2032 around ``4``): any quote of the single
family (' U+2018 U+2019 U+2032) closes any other of that family, likewise for the double family
(" U+201C U+201D U+2033). A prompt pasted along with a command
(``hqueue> `` or ``hqueue(main):013:0> ``) is skipped, so examples can be copied verbatim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SINGLE_QUOTES = "'\u2018\u2019\u2032"  # ' and the left, right quotation marks and prime
DOUBLE_QUOTES = '"\u201c\u201d\u2033'  # " and the left, right double quotation marks and prime
COMMAS = ",\uff0c"  # the full-width comma slips in with Chinese input methods

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\"}
# a bullet and/or prompt copied from the seed along with the command
_PROMPT = re.compile(r"\s*(?:\u2022\s*)?(?:hqueue(?:\([^)]*\)[:\d]*)?\s*>\s*)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-:/]*")
_INT = re.compile(r"[+-]?\d+")

Value = str | int | dict[str, str]


class ParseError(ValueError):
    """A line that is not a valid command; ``column`` is 1-based, ``hint`` an optional usage."""

    def __init__(self, message: str, line: str, column: int, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.hint = hint

    def __str__(self) -> str:
        return f"column {self.column}: {self.message}"

    def pretty(self, lineno: int | None = None) -> str:
        """The message, the line with a caret under the offending column, and the hint."""
        where = f"line {lineno}, " if lineno is not None else ""
        line = self.line.rstrip("\r\n").expandtabs(1)
        text = f"{where}{self}\n  {line}\n  {' ' * (self.column - 1)}^"
        return f"{text}\n{self.hint}" if self.hint else text


@dataclass(frozen=True)
class Token:
    kind: str  # WORD, STRING, INT, COMMA, ARROW, LBRACE, RBRACE, LPAREN, RPAREN, END
    value: str | int | None
    column: int  # 1-based
    text: str  # the source text, for error messages


@dataclass(frozen=True)
class Argument:
    value: Value
    column: int
    quoted: bool = False  # False for bare words, so a UI can tell `q1` from `'q1'`

    @property
    def kind(self) -> str:
        if isinstance(self.value, dict):
            return "hash"
        return "integer" if isinstance(self.value, int) else "string"


@dataclass(frozen=True)
class Command:
    name: str
    args: list[Argument] = field(default_factory=list)
    column: int = 1
    line: str = ""


def tokenize(line: str) -> list[Token]:
    """Split ``line`` into tokens, ending with an END token; raises ParseError."""
    tokens: list[Token] = []
    pos = 0
    prompt = _PROMPT.match(line)
    if prompt:
        pos = prompt.end()
    n = len(line)
    while pos < n:
        ch = line[pos]
        col = pos + 1
        if ch.isspace():
            pos += 1
        elif ch == "#":  # a comment runs to the end of the line
            break
        elif ch in SINGLE_QUOTES or ch in DOUBLE_QUOTES:
            value, end = _read_string(line, pos)
            tokens.append(Token("STRING", value, col, line[pos:end]))
            pos = end
        elif ch in COMMAS:
            tokens.append(Token("COMMA", ",", col, ch))
            pos += 1
        elif line.startswith("=>", pos):
            tokens.append(Token("ARROW", "=>", col, "=>"))
            pos += 2
        elif ch in "{}()":
            kind = {"{": "LBRACE", "}": "RBRACE", "(": "LPAREN", ")": "RPAREN"}[ch]
            tokens.append(Token(kind, ch, col, ch))
            pos += 1
        elif m := _INT.match(line, pos):
            end = m.end()
            if end < n and (line[end].isalnum() or line[end] == "_"):
                raise ParseError(f"invalid number {_word_at(line, pos)!r}", line, col)
            tokens.append(Token("INT", int(m.group()), col, m.group()))
            pos = end
        elif m := _WORD.match(line, pos):
            tokens.append(Token("WORD", m.group(), col, m.group()))
            pos = m.end()
        else:
            raise ParseError(f"unexpected character {ch!r}", line, col)
    tokens.append(Token("END", None, n + 1, "end of line"))
    return tokens


def _word_at(line: str, pos: int) -> str:
    end = pos
    while end < len(line) and not line[end].isspace() and line[end] not in COMMAS + "{}()":
        end += 1
    return line[pos:end]


def _read_string(line: str, start: int) -> tuple[str, int]:
    """The string opened at ``start`` and the index just past its closing quote."""
    family = SINGLE_QUOTES if line[start] in SINGLE_QUOTES else DOUBLE_QUOTES
    out: list[str] = []
    pos = start + 1
    while pos < len(line):
        ch = line[pos]
        if ch in family:
            return "".join(out), pos + 1
        if ch == "\\" and pos + 1 < len(line):
            nxt = line[pos + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                pos += 2
                continue
            if nxt in SINGLE_QUOTES or nxt in DOUBLE_QUOTES:
                out.append(nxt)
                pos += 2
                continue
            if nxt == "x" and re.fullmatch(r"[0-9A-Fa-f]{2}", line[pos + 2 : pos + 4]):
                byte = int(line[pos + 2 : pos + 4], 16)
                # \x80-\xff mean raw bytes: kept as surrogate escapes so that encoding with
                # "surrogateescape" gives back exactly that byte
                out.append(chr(byte) if byte < 0x80 else chr(0xDC00 + byte))
                pos += 4
                continue
        out.append(ch)  # an unknown escape keeps its backslash, like Ruby's single quotes
        pos += 1
    raise ParseError("unterminated string", line, start + 1)


class _Parser:
    def __init__(self, line: str) -> None:
        self.line = line
        self.tokens = tokenize(line)
        self.i = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind != "END":
            self.i += 1
        return tok

    def error(self, message: str, tok: Token) -> ParseError:
        return ParseError(message, self.line, tok.column)

    def command(self) -> Command | None:
        head = self.take()
        if head.kind == "END":
            return None
        if head.kind != "WORD":
            raise self.error(f"expected a command name, got {head.text!r}", head)
        paren = self.peek().kind == "LPAREN"
        if paren:
            self.take()
        args: list[Argument] = []
        closer = "RPAREN" if paren else "END"
        while self.peek().kind != closer:
            if paren and self.peek().kind == "END":
                raise self.error("missing ')'", self.peek())
            if args and self.peek().kind == "COMMA":
                self.take()
                if self.peek().kind == closer:
                    raise self.error("expected an argument after ','", self.peek())
            args.append(self.argument())
        if paren:
            self.take()
            tail = self.peek()
            if tail.kind != "END":
                raise self.error(f"unexpected {tail.text!r} after ')'", tail)
        return Command(str(head.value), args, head.column, self.line)

    def argument(self) -> Argument:
        tok = self.peek()
        if tok.kind == "LBRACE":
            return Argument(self.hash(), tok.column)
        self.take()
        if tok.kind == "STRING":
            return Argument(str(tok.value), tok.column, quoted=True)
        if tok.kind == "INT":
            assert isinstance(tok.value, int)
            return Argument(tok.value, tok.column)
        if tok.kind == "WORD":
            return Argument(str(tok.value), tok.column)
        if tok.kind == "END":
            raise self.error("expected an argument, got end of line", tok)
        raise self.error(f"expected an argument, got {tok.text!r}", tok)

    def hash(self) -> dict[str, str]:
        self.take()  # {
        result: dict[str, str] = {}
        while True:
            tok = self.peek()
            if tok.kind == "RBRACE":
                self.take()
                return result
            if tok.kind == "END":
                raise self.error("unterminated hash: missing '}'", tok)
            if result and tok.kind == "COMMA":  # optional, like between arguments
                self.take()
                if self.peek().kind == "RBRACE":  # a trailing comma, as Ruby allows
                    continue
            key_tok = self.peek()
            key = self.scalar("hash key")
            arrow = self.take()
            if arrow.kind != "ARROW":
                raise self.error(f"expected '=>' after hash key, got {arrow.text!r}", arrow)
            value = self.scalar("hash value")
            if key in result:
                raise self.error(f"duplicate hash key {key!r}", key_tok)
            result[key] = value

    def scalar(self, what: str) -> str:
        tok = self.take()
        if tok.kind in ("STRING", "INT", "WORD"):
            # config maps are map<string, string>: 32 and '32' mean the same
            return str(tok.value)
        if tok.kind == "END":
            raise self.error(f"expected a {what}, got end of line", tok)
        raise self.error(f"expected a {what}, got {tok.text!r}", tok)


def parse(line: str) -> Command | None:
    """Parse one line; None for a blank or comment line. Raises ParseError."""
    return _Parser(line).command()
