"""What the tests of the perf probes (tests/perf/) share: a probe's command line refused."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest


def refused_by_name(
    main: Callable[[], None],
    argv: list[str],
    named: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``main`` run with ``argv`` exits as argparse refuses (code 2), naming ``named``."""
    monkeypatch.setattr(sys, "argv", ["probe", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert named in capsys.readouterr().err
