"""The encoded-scan probe (tests/perf/scan_encode.py): it refuses bad arguments by name, and
an A/B of a build against itself reads the same bytes and prints both figures."""

from __future__ import annotations

import sys

import pytest

from gateway import _records  # type: ignore[attr-defined]
from tests.perf import scan_encode

from .probe_args import refused_by_name


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
    refused_by_name(scan_encode.main, argv, named, monkeypatch, capsys)


def test_an_ab_of_one_build_prints_both_and_their_ratio(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["scan_encode", "--rounds", "1", "--against", _records.__file__]
    monkeypatch.setattr(sys, "argv", argv)
    scan_encode.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("this build") and lines[1].startswith(_records.__file__)
    assert all(" ns/msg [" in line for line in lines[:2])
    assert lines[2].startswith("this build / other: ")
    assert float(lines[2].split(": ")[1]) > 0


def test_the_records_hold_every_message_once() -> None:
    rows = scan_encode.records(_records, 10)
    assert len(rows) == scan_encode.RECORDS
    page = scan_encode.reader(_records, rows, keep=True)()
    assert page.count(b"x" * 10) == scan_encode.RECORDS * scan_encode.MESSAGES_PER_RECORD
