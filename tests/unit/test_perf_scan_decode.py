"""The client decode probe (tests/perf/scan_decode.py): it refuses bad arguments by name, its
page is a whole gateway reply, and an A/B of a build against itself prints both figures of
both functions and their ratios."""

from __future__ import annotations

import sys

import pytest
from hqueue import _fastclient  # type: ignore[attr-defined]

from tests.perf import scan_decode

from .probe_args import refused_by_name

pytestmark = pytest.mark.c_only  # the probe times the C codec itself


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--rounds", "0"], "--rounds"),
        (["--value-bytes", "-1"], "--value-bytes"),
        (["--against", "/no/such/file.so"], "--against"),
    ],
)
def test_bad_arguments_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    refused_by_name(scan_decode.main, argv, named, monkeypatch, capsys)


def test_the_page_is_a_whole_reply_of_every_message() -> None:
    reply = scan_decode.page(10)
    end, messages = _fastclient.decode_list_reply(reply)
    assert end == len(reply) == _fastclient.message_end(reply)
    assert len(messages) == scan_decode.PAGE and {m.value for m in messages} == {b"x" * 10}


def test_an_ab_of_one_build_prints_both_and_their_ratios(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["scan_decode", "--rounds", "1", "--against", _fastclient.__file__]
    monkeypatch.setattr(sys, "argv", argv)
    scan_decode.main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:4]] == ["message_end"] * 2 + [
        "decode_list_reply"
    ] * 2
    assert all(" ns/msg [" in line for line in lines[:4])
    assert lines[4].startswith("message_end: this build / other: ")
    assert lines[5].startswith("decode_list_reply: this build / other: ")
    for line in lines[4:6]:  # "...: <median> [<each round's ratio>]"
        median, rounds = line.rsplit(": ", 1)[1].split(" ", 1)
        assert float(median) > 0 and float(rounds.strip("[]")) == float(median)  # one round
