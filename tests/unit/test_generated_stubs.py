"""The committed Thrift stubs of every client language match a fresh generation from idl/."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_committed_stubs_match_idl() -> None:
    if shutil.which("thrift") is None:
        pytest.fail(
            "the Apache Thrift compiler `thrift` is not on PATH; install it with "
            "`apt-get install thrift-compiler` (this test never skips)",
            pytrace=False,
        )
    proc = subprocess.run(
        [str(ROOT / "clients" / "generate"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, (
        "the committed stubs are out of date with idl/: run clients/generate and commit\n"
        + proc.stdout
        + proc.stderr
    )
