"""``hqueue-gateway``: runs the gateway in the foreground until SIGTERM or SIGINT.

Shutdown order: stop accepting and reading requests, let in-flight calls finish, stop the
scanner registry, then close the store (which syncs what is pending).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import sys
from collections.abc import Sequence
from typing import Any

# the libraries of pyproject.toml's `gateway` extra (import names), which a client-only
# install lacks
GATEWAY_EXTRA = frozenset(
    {"rocksdict", "happybase", "kazoo", "prometheus_client", "flask", "zlib_ng"}
)


def build_parser() -> argparse.ArgumentParser:
    """The flags of every GatewayConfig setting (gateway.config: names, defaults and units are
    written there once), plus --log-level."""
    from .config import BYTES, GENERAL, SECONDS, default_text, settings

    p = argparse.ArgumentParser(
        prog="hqueue-gateway",
        description="Serve the hqueue Thrift API (HQueueService) over an embedded store "
        "or Apache HBase.",
    )
    groups: dict[str, Any] = {GENERAL: p}
    for s in settings():
        fl = s.flag
        group = groups.get(fl.group) or groups.setdefault(fl.group, p.add_argument_group(fl.group))
        shown = default_text(s)
        text = fl.help + (f" (default {shown})" if shown else "")
        if s.type is bool:
            group.add_argument(s.name, action="store_true", default=s.default, help=text)
            continue
        group.add_argument(
            s.name,
            type=fl.type or s.type,
            default=s.default,
            metavar=fl.metavar or {SECONDS: SECONDS, BYTES: "BYTES"}.get(fl.unit or ""),
            choices=fl.choices,
            help=text.replace("%", "%%"),
        )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def _check_security(parser: argparse.ArgumentParser, config: Any) -> None:
    from .auth import AdminPolicy
    from .tls import TLSConfigError

    try:
        config.tls.check()
        AdminPolicy.from_options(config.admin_identities, config.admin_token_file)
    except (TLSConfigError, ValueError) as exc:
        parser.error(str(exc))
    if config.admin_identities is not None and config.tls.client_ca is None:
        parser.error(
            "--admin-identities needs --tls-client-ca (identities come from client "
            "certificates); without mutual TLS use --admin-token-file"
        )


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    from .config import settings

    for s in settings():
        value = getattr(args, s.dest)
        if value is None or s.check is None:
            continue
        if s.check == "positive" and value <= 0:
            parser.error(f"{s.name} must be > 0 seconds")
        if s.check == "count" and value < 1:
            parser.error(f"{s.name} must be >= 1")
        if s.check == "port" and not 0 <= value < 65536:
            parser.error(f"{s.name} must be 0..65535, got {value}")
    if args.max_pending_request_bytes < args.max_request_bytes:
        parser.error("--max-pending-request-bytes must be at least --max-request-bytes")
    if args.max_request_bytes < args.max_value_bytes + 4096:
        parser.error("--max-request-bytes must exceed --max-value-bytes by at least 4096")
    if args.store not in ("embedded", "memory"):
        from .store.hbase_schema import HBaseAddress

        try:
            HBaseAddress.parse(args.store)
        except ValueError as exc:
            parser.error(str(exc))
    if args.advertise:
        from hqueue_contract.protocol import parse_address

        try:
            parse_address(args.advertise, argument="--advertise")
        except ValueError as exc:
            parser.error(str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    # gevent at the edge: patch once, first thing, before anything imports ssl or opens
    # sockets or threads. Checking the arguments already imports thriftpy2 (and with it ssl)
    # for --store hbase://... and --advertise, and builds TLS contexts for --tls-*: patched
    # after that, those modules would keep the blocking ssl and socket.
    from gevent import monkey

    monkey.patch_all()

    try:
        # the flags come from gateway.config, which imports the gateway's own modules
        parser = build_parser()
        from .app import Gateway
        from .config import from_values
    except ModuleNotFoundError as exc:  # `pip install hqueue` is the client side only
        if (exc.name or "").split(".")[0] not in GATEWAY_EXTRA:
            raise
        print(
            f"hqueue-gateway: {exc.name} is not installed; the gateway needs the 'gateway' "
            "extra: pip install 'hqueue[gateway]'",
            file=sys.stderr,
        )
        return 2
    args = parser.parse_args(argv)
    _check(parser, args)
    config = from_values(vars(args))
    _check_security(parser, config)

    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    tune_malloc()
    gateway = Gateway(config)
    try:
        gateway.start()
    except Exception as exc:
        logging.getLogger("gateway").error("cannot start: %s", exc, exc_info=True)
        return 1
    tune_gc()
    gateway.run_until_signal()
    return 0


# A gen-0 collection every 100,000 container allocations, not CPython's 700: a scan reply of
# 4096 messages makes a row tuple per message (untracked at once, but counted at allocation),
# so at 700 the collector ran about six times per reply and walked the reply's lists each
# time: 8-10 % of the gateway's CPU on merged scans (perf, docs/BENCHMARKS.md). Cyclic garbage
# waits a little longer for its collection; the gateway makes little of it.
GC_GEN0_THRESHOLD = 100_000


def tune_gc() -> None:
    """Once the gateway runs: what start-up allocated (modules, config, the store's tables)
    goes to the collector's permanent generation, so full collections no longer walk it, and
    young collections run less often (see GC_GEN0_THRESHOLD)."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


# glibc's malloc serves blocks up to this size from its heaps, where freed memory is used again,
# instead of mapping each one afresh: RocksDB's memtables take their memory in 1 MiB blocks, and
# glibc mapped every block with mmap and unmapped it when its memtable was flushed, so each
# message's bytes landed on a page the kernel had to fault in and zero (strace: 69 such maps in
# 4 s of one producer's puts; perf stat: 35.6-37.8k page faults in 8 s of them, 20.3-23.6k with
# this). 32 MiB is the most glibc takes; larger blocks are mapped as before.
MMAP_THRESHOLD = 32 << 20
# ... and keeps up to this much freed memory at the top of its heap instead of handing it back
# at once: with the mmap threshold set, glibc's trim threshold stays at its 128 KiB default, so
# every scan reply (and each merged cursor's page buffer, about 0.5 MiB) that was freed gave its
# pages back and the next one faulted them in afresh (perf of an 8-partition read: page faults
# about an eighth of the gateway's CPU). Three interleaved pairs of `tests.perf.server_cpu read8
# read1 --sides lean`: 0.24-0.30 -> 0.15-0.18 us per message merged, 0.21-0.30 -> 0.11-0.12 one
# partition. At most this much more stays resident while idle.
TRIM_THRESHOLD = 8 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def tune_malloc() -> bool:
    """Before the store opens: sets glibc's mmap and trim thresholds (see MMAP_THRESHOLD and
    TRIM_THRESHOLD). Whether they were set (False where the C library has no ``mallopt`` or
    ignores it, as musl's does)."""
    try:  # the process's own symbols: find_library("c") would run ldconfig at every start
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


if __name__ == "__main__":
    sys.exit(main())
