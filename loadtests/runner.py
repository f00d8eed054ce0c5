"""``loadtests/run``: one headless locust scenario against a gateway, summarised.

    loadtests/run                                   # BatchPutUser, 4 users, 10 s, own gateway
    loadtests/run --scenario mixed -u 8 -t 30s
    loadtests/run --scenario scan --gateway 127.0.0.1:9190 --queue q1

Without ``--gateway`` it starts ``python -m gateway`` on the embedded store in a temporary
directory (or ``--data-dir``, which is then kept) on a port the OS picks, and stops it at the
end. Locust runs as its own process (``python -m locust -f loadtests/locustfile.py
--headless``), bounded in users, spawn rate and duration, and writes its CSVs to
``loadtests/results/<scenario>_*.csv`` (or ``--csv PREFIX``). The summary (per method:
requests/s, messages/s, p50/p95/p99 in ms, failures) is printed and written next to the CSVs as
``PREFIX_summary.json``.

The exit status is non-zero when locust failed, when any request failed (transport errors
included), or when no request was made at all.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hqueue.protocol import parse_address

from loadtests.benchmarks.servers import Server, start_gateway
from loadtests.prepare import prepare_queue

ROOT = Path(__file__).resolve().parent.parent
LOCUSTFILE = ROOT / "loadtests" / "locustfile.py"
RESULTS = ROOT / "loadtests" / "results"

SCENARIOS = {
    "single": "SinglePutUser",
    "batch": "BatchPutUser",
    "scan": "ScanUser",
    "mixed": "MixedUser",
    # producers and push subscribers, one of each per two users (locust spreads users evenly)
    "push": "BatchPutUser SubscriberUser",
}
MAX_USERS = 256
MAX_DURATION_S = 3600


def parse_duration(text: str) -> int:
    """'30s', '2m', '1h30m' or a plain number of seconds -> seconds."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    if not m or not any(m.groups()):
        raise argparse.ArgumentTypeError(f"'--duration' must look like 30s, 2m or 1h, got {text!r}")
    h, mi, s = (int(g or 0) for g in m.groups())
    return h * 3600 + mi * 60 + s


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadtests/run",
        description="Run one headless locust scenario against the hqueue gateway and summarise "
        "it. Arguments after '--' go to locust unchanged.",
    )
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="batch",
                   help="single: putMessage; batch: putMessagesWithPid; scan: open/getList/close; "
                   "mixed: produce and consume (default %(default)s)")  # fmt: skip
    p.add_argument("-u", "--users", type=int, default=4, help="concurrent users (default 4)")
    p.add_argument("-r", "--spawn-rate", type=float, default=0.0,
                   help="users started per second (default: all at once)")  # fmt: skip
    p.add_argument("-t", "--duration", type=parse_duration, default=10,
                   help="how long the load lasts: 30s, 2m, ... (default 10s)")  # fmt: skip
    p.add_argument("--gateway", metavar="HOST:PORT",
                   help="load this gateway instead of starting one")  # fmt: skip
    p.add_argument("--data-dir", type=Path,
                   help="the started gateway's data dir, kept (default: a temp dir)")  # fmt: skip
    p.add_argument("--queue", default="loadtest", help="queue to load, created if missing")
    p.add_argument("--partitions", type=int, default=8, help="partitions of a new queue (8)")
    p.add_argument("--batch", type=int, default=100, help="messages per batched put (100)")
    p.add_argument("--message-bytes", type=int, default=100, help="bytes per message (100)")
    p.add_argument("--scan-batch", type=int, default=1000,
                   help="messages per messageScannerGetList (1000)")  # fmt: skip
    p.add_argument("--scan-lists", type=int, default=10, help="lists per scan at most (10)")
    p.add_argument("--prefill", type=int,
                   help="messages stored per partition before the load (default: 5000 for the "
                   "scan scenario, else 0)")  # fmt: skip
    p.add_argument("--csv", metavar="PREFIX", type=Path,
                   help="locust's CSV prefix (default loadtests/results/<scenario>)")  # fmt: skip
    p.add_argument("--stop-timeout", type=float, default=10.0,
                   help="seconds users get to finish their call at the end (10)")  # fmt: skip
    p.add_argument("locust_args", nargs=argparse.REMAINDER,
                   help="after '--': more arguments for locust")  # fmt: skip
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not 1 <= args.users <= MAX_USERS:
        p.error(f"'--users' must be 1..{MAX_USERS}, got {args.users}")
    if args.spawn_rate < 0:
        p.error("'--spawn-rate' must be >= 0")
    if not 1 <= args.duration <= MAX_DURATION_S:
        p.error(f"'--duration' must be 1 s..{MAX_DURATION_S} s, got {args.duration} s")
    for name in ("partitions", "batch", "scan_batch", "scan_lists"):
        if getattr(args, name) < 1:
            p.error(f"'--{name.replace('_', '-')}' must be >= 1")
    if args.message_bytes < 0:
        p.error("'--message-bytes' must be >= 0")
    if args.gateway:
        try:
            parse_address(args.gateway, argument="--gateway")
        except ValueError as exc:
            p.error(str(exc))
        if args.data_dir:
            p.error("'--data-dir' is for the gateway started here; not with '--gateway'")
    if args.locust_args[:1] == ["--"]:
        args.locust_args = args.locust_args[1:]
    distributed = {"--processes", "--master", "--worker"}
    if any(a.split("=", 1)[0] in distributed for a in args.locust_args):
        # the locustfile counts messages in its own process: workers' counts would be lost
        p.error("locust's distributed modes (--processes, --master, --worker) are not supported")
    if args.prefill is None:
        args.prefill = 5000 if args.scenario == "scan" else 0
    if args.prefill < 0:
        p.error("'--prefill' must be >= 0")


def locust_command(args: argparse.Namespace, gateway: str, prefix: Path, stats: Path) -> list[str]:
    return [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "-u", str(args.users), "-r", str(args.spawn_rate or args.users),
        "-t", f"{args.duration}s", "--stop-timeout", f"{args.stop_timeout:g}",
        "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING",
        "--hq-gateway", gateway, "--hq-queue", args.queue,
        "--hq-partitions", str(args.partitions), "--hq-batch", str(args.batch),
        "--hq-message-bytes", str(args.message_bytes),
        "--hq-scan-batch", str(args.scan_batch), "--hq-scan-lists", str(args.scan_lists),
        "--hq-prefill", str(args.prefill), "--hq-stats-json", str(stats),
        *args.locust_args, *SCENARIOS[args.scenario].split(),
    ]  # fmt: skip


def summarise(counts: dict[str, Any]) -> dict[str, Any]:
    """Per method and in total: requests, failures, requests/s, messages/s, percentiles (ms).

    From the locustfile's JSON (``--hq-stats-json``): locust's final figures (its percentiles
    are rounded: whole ms up to 100 ms, 2 significant digits above) and the messages each
    method moved, over the test's wall-clock time from its start to its stop event."""
    elapsed = counts["stopped_unix"] - counts["started_unix"]
    messages: dict[str, int] = counts.get("messages", {})
    out: dict[str, Any] = {"elapsed_s": elapsed, "methods": [], "total": None}
    for row in counts.get("requests", []):
        entry = dict(row)
        entry["requests_per_s"] = row["requests"] / elapsed if elapsed > 0 else math.nan
        if row["name"] == "Aggregated":
            entry["messages"] = sum(messages.values())
            entry["put_messages"] = counts.get("put_messages", 0)
            out["total"] = entry
        else:
            entry["messages"] = messages.get(row["name"], 0)
            out["methods"].append(entry)
        entry["messages_per_s"] = entry["messages"] / elapsed if elapsed > 0 else math.nan
    return out


def format_summary(summary: dict[str, Any]) -> str:
    head = (f"{'method':<24} {'requests':>9} {'fail':>5} {'req/s':>9} {'msgs/s':>10} "
            f"{'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7}")  # fmt: skip
    lines = [head, "-" * len(head)]
    rows = list(summary["methods"])
    if summary["total"] is not None:
        rows.append(summary["total"])
    for e in rows:
        lines.append(
            f"{e['name']:<24} {e['requests']:>9} {e['failures']:>5} {e['requests_per_s']:>9.1f} "
            f"{e['messages_per_s']:>10.0f} {e['p50_ms']:>7g} {e['p95_ms']:>7g} {e['p99_ms']:>7g}"
        )
    return "\n".join(lines)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    prefix = (args.csv or RESULTS / args.scenario).resolve()
    prefix.parent.mkdir(parents=True, exist_ok=True)
    stats_json = Path(f"{prefix}_messages.json")
    for old in prefix.parent.glob(f"{prefix.name}_*"):
        old.unlink()  # a stale CSV must never pass for this run's
    signal.signal(signal.SIGTERM, _on_sigterm)

    def say(msg: str) -> None:
        print(f"run: {msg}", file=sys.stderr, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="hqueue-run-"))
    server: Server | None = None
    try:
        if args.gateway:
            gateway = args.gateway
        else:
            server = start_gateway(workdir, data=args.data_dir)
            gateway = f"127.0.0.1:{server.port}"
            say(f"started a gateway on {gateway} (embedded store in "
                f"{args.data_dir or 'a temp dir'}; log {server.log})")  # fmt: skip
        # the queue and its prefill are made before locust starts: its run time counts from
        # its start, and a new HBase table alone can take seconds
        host, port = parse_address(gateway, argument="--gateway")
        try:
            args.partitions = prepare_queue(
                host, port, args.queue.encode(), args.partitions, prefill=args.prefill,
                topic=b"lt", message_bytes=args.message_bytes,
            )  # fmt: skip
            args.prefill = 0
        except Exception as exc:  # locust tries again, and reports each failure it meets
            say(f"could not prepare queue {args.queue} ({exc}); running locust anyway")
        cmd = locust_command(args, gateway, prefix, stats_json)
        say(f"{args.scenario}: {args.users} users for {args.duration} s against {gateway}")
        timeout = args.duration + args.stop_timeout + 120  # start-up, prefill, shutdown
        try:
            proc = subprocess.run(cmd, cwd=ROOT, timeout=timeout, check=False)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            say(f"locust did not finish within {timeout:g} s")
            rc = -1
        if server is not None and server.proc.poll() is not None:
            say(f"the gateway died:\n{server.log_tail()}")
            rc = rc or 1
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    stats_csv = Path(f"{prefix}_stats.csv")
    if not stats_csv.exists():
        say(f"locust wrote no {stats_csv} (exit {rc})")
        return rc or 1
    try:
        counts = json.loads(stats_json.read_text())
    except (OSError, ValueError) as exc:
        say(f"locust's run left no complete {stats_json} ({exc}; exit {rc})")
        return rc or 1
    summary = summarise(counts)
    summary.update(
        scenario=args.scenario, users=args.users, duration_s=args.duration, gateway=gateway,
        batch=args.batch, message_bytes=args.message_bytes, locust_exit=rc,
        finished_unix=time.time(),
    )  # fmt: skip
    Path(f"{prefix}_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(format_summary(summary))
    say(f"CSVs and summary: {prefix}_*")
    total = summary["total"]
    if rc != 0:
        say(f"locust exited with {rc}")
        return rc if rc > 0 else 1
    if total is None or total["requests"] == 0:
        say("no request was made")
        return 1
    if total["failures"]:
        say(f"{total['failures']} request(s) failed: see {prefix}_failures.csv")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
