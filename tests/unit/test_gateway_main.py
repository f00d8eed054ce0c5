"""``hqueue-gateway``'s entry point: gevent patches before anything imports ssl."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

SPY = textwrap.dedent(
    """
    import sys
    import gevent.monkey

    def spy(*args, **kwargs):
        loaded = [m for m in ("ssl", "thriftpy2", "hqueue.protocol") if m in sys.modules]
        print("LOADED", ",".join(loaded) or "-")
        raise SystemExit(0)

    gevent.monkey.patch_all = spy
    from gateway.main import main
    main(sys.argv[1:])
    """
)


def test_monkey_patching_comes_before_ssl_is_imported() -> None:
    """The options that check addresses (an HBase store, --advertise) import thriftpy2, which
    imports ssl: the patch must come first, or those modules keep the blocking ssl."""
    out = subprocess.run(
        [sys.executable, "-c", SPY, "--store", "hbase://127.0.0.1:1", "--advertise", "h:1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "LOADED -" in out.stdout, out.stdout
