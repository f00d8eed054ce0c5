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


def test_the_running_gateway_collects_young_objects_less_often_and_freezes_start_up() -> None:
    """gateway.main.tune_gc (called once the gateway runs): the start-up heap goes to the
    permanent generation and gen-0 collections wait for GC_GEN0_THRESHOLD allocations; the
    older generations keep CPython's thresholds, and cycles are still collected."""
    probe = textwrap.dedent(
        """
        import gc
        from gateway.main import GC_GEN0_THRESHOLD, tune_gc
        before = gc.get_threshold()
        tune_gc()
        after = gc.get_threshold()
        print(after[0] == GC_GEN0_THRESHOLD, after[1:] == before[1:], gc.get_freeze_count() > 0)
        class Node: pass
        a = Node(); a.me = a
        del a
        print(gc.collect() >= 1)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True", "True"]
