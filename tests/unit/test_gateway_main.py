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


def test_glibc_serves_blocks_up_to_the_mmap_threshold_from_its_heap() -> None:
    """gateway.main.tune_malloc (called before the store opens): RocksDB's 1 MiB memtable
    blocks, and anything up to MMAP_THRESHOLD, come from malloc's heaps (reused once freed)
    rather than from an mmap each; larger blocks are still mapped. mallinfo2's ``hblks``
    counts the mapped blocks. Freed memory at the top of the heap stays up to TRIM_THRESHOLD
    (``keepcost``: what a trim would hand back), and more than that is handed back."""
    probe = textwrap.dedent(
        """
        import ctypes
        from gateway.main import MMAP_THRESHOLD, TRIM_THRESHOLD, tune_malloc

        class Info(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in (
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
            ).split()]

        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = Info
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = (ctypes.c_size_t,)
        libc.free.argtypes = (ctypes.c_void_p,)

        def mapped(size):
            before = libc.mallinfo2().hblks
            block = libc.malloc(size)
            now = libc.mallinfo2().hblks
            libc.free(block)
            return now > before

        def kept(size):  # a block at the top of the heap, touched, freed: still there?
            block = libc.malloc(size)
            ctypes.memset(block, 1, size)
            libc.free(block)
            return libc.mallinfo2().keepcost >= size

        print(tune_malloc())
        print(mapped(1 << 20), mapped(MMAP_THRESHOLD // 2), mapped(2 * MMAP_THRESHOLD))
        print(kept(TRIM_THRESHOLD // 2), kept(3 * TRIM_THRESHOLD))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "False", "True", "True", "False"]
