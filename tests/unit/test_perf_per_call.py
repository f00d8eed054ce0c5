"""The per-call probe's arithmetic and its arguments (tests/perf/per_call.py; the probe itself
starts gateways and is run by hand, docs/BENCHMARKS.md says how)."""

from __future__ import annotations

import sys

import pytest

from tests.perf import per_call


def test_fit_splits_a_call_into_its_fixed_and_per_message_parts() -> None:
    sizes = [1, 10, 100, 1000]
    fixed, per_message = per_call.fit(sizes, [300 + 0.5 * n for n in sizes])
    assert fixed == pytest.approx(300)
    assert per_message == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--sizes", "1,x"], "--sizes"),
        (["--sizes", "0,10"], "--sizes"),
        (["--sizes", "20000"], "--sizes"),
        (["--stores", "embedded,hbase"], "--stores"),
        (["--runs", "0"], "--runs"),
    ],
)
def test_bad_arguments_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    monkeypatch.setattr(sys, "argv", ["per_call", *argv])
    started: list[str] = []
    monkeypatch.setattr(per_call, "probe", lambda store, *rest: started.append(store))
    with pytest.raises(SystemExit) as exc:
        per_call.main()
    assert exc.value.code == 2
    assert named in capsys.readouterr().err
    assert started == []  # nothing ran before the refusal
