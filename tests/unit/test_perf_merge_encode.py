"""The merge probe (tests/perf/merge_encode.py): it refuses bad arguments by name, its pages
are what a merged scanner's cursors read (a mark per put), and it prints both ways and their
ratio."""

from __future__ import annotations

import sys

import pytest

from gateway import purefast
from tests.perf import merge_encode

from .probe_args import refused_by_name


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--rounds", "0"], "--rounds"),
        (["--partitions", "1"], "--partitions"),
        (["--partitions", "65"], "--partitions"),
        (["--value-bytes", "-1"], "--value-bytes"),
    ],
)
def test_bad_arguments_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    refused_by_name(merge_encode.main, argv, named, monkeypatch, capsys)


def test_the_pages_hold_their_puts_one_mark_each() -> None:
    read = merge_encode.pages(3, 10)
    puts = -(-merge_encode.PAGE // merge_encode.MESSAGES_PER_PUT)
    for p, (page, count, marks) in enumerate(read):
        assert count == merge_encode.PAGE and page.count(b"x" * 10) == count
        segments = list(purefast.MARK.iter_unpack(marks))
        assert len(segments) == puts  # each put's ids follow one another; the next put's do not
        assert segments[-1][0] == len(page) and {s[5] for s in segments} == {p}


def test_a_run_prints_both_ways_and_their_ratio(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["merge_encode", "--rounds", "1", "--partitions", "2"])
    merge_encode.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("walking every message") and " ns/msg [" in lines[0]
    assert lines[1].startswith("taking segments by marks") and " ns/msg [" in lines[1]
    assert lines[2].startswith("2 partitions, 8192 messages: marks / walk ")
    assert float(lines[2].rsplit(" ", 1)[1]) > 0
