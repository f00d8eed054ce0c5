"""What the friendly client's scan costs per message in its C codec, without a gateway:
``message_end`` (is the reply whole?) and ``decode_list_reply`` (its Messages), over one page
as the gateway encodes it.

    python -m tests.perf.scan_decode [--against OTHER_BUILD/_fastclient.so] [--value-bytes 100]
        [--rounds 7]

A page of 4096 messages (what ``Queue.scan`` asks per call; topic ``topic``, ``--value-bytes``
each, a millisecond per 1000) encoded by the gateway's own reply encoder. Prints ns per
message of each function (median over ``--rounds``, each the best of 3 of 20 calls; the
Messages made are dropped, as a caller that consumes them does; the cycle collector runs, as
in a caller: timeit would pause it). ``--against`` loads another
build of the extension for an A/B in one process, interleaved; both must decode the page
alike, or the probe stops.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import statistics
import timeit
from functools import partial
from pathlib import Path
from types import ModuleType

import hqueue.message

PAGE = 4096  # hqueue.queue.DEFAULT_SCAN_BATCH
CALLS = 20


def load(path: Path) -> ModuleType:
    """A build of hqueue._fastclient from ``path``, set up as hqueue.codec sets up its own:
    with its own Message type if it has one, else (a build from before it had one) with twins
    of the named tuples Message and MessageID: setup() gives the types it is handed a dealloc
    of its build's own, so shared types would free both builds' messages one build's way."""
    from hqueue.errors import InvalidArgument

    Message = collections.namedtuple("Message", ["topic", "value", "partition", "id"])
    MessageID = collections.namedtuple("MessageID", ["timestamp", "sequence"])
    assert MessageID._fields == hqueue.message.MessageID._fields

    spec = importlib.util.spec_from_file_location("hqueue._fastclient", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--against: {path} is not an extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.setup(getattr(module, "Message", Message), MessageID, InvalidArgument)
    return module


def decoded(module: ModuleType, reply: bytes) -> list[tuple[object, ...]]:
    """What ``module`` decodes ``reply`` to, as plain tuples (the builds' types differ)."""
    _, messages = module.decode_list_reply(reply)
    return [tuple(m) for m in messages]


def page(value_bytes: int) -> bytes:
    """A messageScannerGetList reply of PAGE messages, as the gateway writes it."""
    from gateway.fast import encode_messages_reply

    rows = [(1_700_000_000_000 + i // 1000, i % 1000, b"topic", b"x" * value_bytes)
            for i in range(PAGE)]  # fmt: skip
    return encode_messages_reply(b"messageScannerGetList", 7, 0, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another build's _fastclient .so, for an A/B")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if not 0 <= args.value_bytes <= 1 << 16:
        ap.error("--value-bytes must be 0..65536")
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if args.against is not None and not args.against.is_file():
        ap.error(f"--against: no file {args.against}")
    from hqueue import _fastclient

    builds = {"this build": _fastclient}
    if args.against is not None:
        builds[str(args.against)] = load(args.against)
    reply = page(args.value_bytes)
    if len({repr(decoded(m, reply)) for m in builds.values()}) != 1:
        raise SystemExit("the builds decode the page differently: no A/B of different outputs")
    figures: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):  # interleaved, so every build sees the same machine
        for fn in ("message_end", "decode_list_reply"):
            for name, module in builds.items():
                call = getattr(module, fn)
                timer = timeit.Timer(partial(call, reply), "gc.enable()")  # as in a caller
                best = min(timer.repeat(number=CALLS, repeat=3))
                figures.setdefault((fn, name), []).append(best / CALLS / PAGE * 1e9)
    for (fn, name), got in figures.items():
        shown = sorted(round(f, 1) for f in got)
        print(f"{fn:17} {name:40} {statistics.median(got):6.1f} ns/msg {shown}")
    if len(builds) == 2:
        for fn in ("message_end", "decode_list_reply"):
            # per round, then the median: the two builds of a round saw the same machine
            this, other = (figures[fn, name] for name in builds)
            ratios = sorted(round(a / b, 2) for a, b in zip(this, other, strict=True))
            print(f"{fn}: this build / other: {statistics.median(ratios):.2f} {ratios}")


if __name__ == "__main__":
    main()
