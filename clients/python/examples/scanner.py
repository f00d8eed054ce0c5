"""Scans a queue (or one --partition) with ``Queue.scan`` and prints one message per line:
PARTITION <tab> TIMESTAMP_MS <tab> SEQUENCE <tab> TOPIC <tab> VALUE (\\xNN-escaped, or hex).

    python clients/python/examples/scanner.py --topic clicks --reverse q1
"""

from __future__ import annotations

import sys

import hqueue
from _common import EXIT_OK, format_message, parser, run


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    p.add_argument("--reverse", action="store_true", help="newest first")
    args = p.parse_args()

    def body() -> int:
        count = 0
        with hqueue.Connection(
            args.host, args.port, framed=args.framed, compact=args.compact, timeout=args.timeout
        ) as conn:
            scan = conn.queue(args.queue).scan(
                topics=args.topic,
                reverse=args.reverse,
                partitions=args.partition,
                batch_size=args.batch,
            )
            out = sys.stdout
            for m in scan:
                out.write(format_message(m, args.hex) + "\n")
                count += 1
        print(f"read {count} message(s)", file=sys.stderr)
        return EXIT_OK

    return run("scanner.py", body)


if __name__ == "__main__":
    sys.exit(main())
