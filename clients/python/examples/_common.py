"""What the Python examples share: the gateway options, the line format, exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from hqueue import HQueueError, InvalidArgument, Message, ServerError, TransportError

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3  # as the `hqueue` toolkit


class UsageError(Exception):
    pass


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9190)
    p.add_argument("--framed", action="store_true", help="as the gateway's --framed")
    p.add_argument("--compact", action="store_true", help="as the gateway's --compact")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds")
    p.add_argument("--hex", action="store_true", help="topics and values hex-encoded")
    p.add_argument("--batch", type=positive, default=1000, help="messages per call")
    p.add_argument("--partition", type=int, help="only this partition")
    p.add_argument("queue")
    return p


def escape(data: bytes) -> str:
    """Printable ASCII as is, anything else as \\xNN (a backslash as \\\\)."""
    return "".join(
        "\\\\" if b == 0x5C else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in data
    )


def format_message(m: Message, hex_: bool) -> str:
    """PARTITION <tab> TIMESTAMP_MS <tab> SEQUENCE <tab> TOPIC <tab> VALUE"""
    show: Callable[[bytes], str] = bytes.hex if hex_ else escape
    assert m.id is not None
    return f"{m.partition}\t{m.id.timestamp}\t{m.id.sequence}\t{show(m.topic)}\t{show(m.value)}"


def run(program: str, body: Callable[[], int]) -> int:
    try:
        return body()
    except UsageError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except InvalidArgument as exc:
        print(f"{program}: invalid argument: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except ServerError as exc:
        print(f"{program}: the gateway failed (retry later): {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except TransportError as exc:
        print(f"{program}: {exc} (is it running, with the same --framed/--compact?)",
              file=sys.stderr)  # fmt: skip
        return EXIT_UNAVAILABLE
    except HQueueError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
