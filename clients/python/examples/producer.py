"""Reads messages from stdin, one per line (TOPIC<tab>VALUE, both hex-encoded with --hex), and
puts them with ``Queue.put_many`` in batches of --batch (to --partition, or one random
partition per batch). A batch is acknowledged once durable.

    printf 'clicks\\thttp://example.com\\n' | python clients/python/examples/producer.py q1
"""

from __future__ import annotations

import sys

import hqueue
from _common import EXIT_OK, UsageError, parser, run


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()

    def body() -> int:
        # read and check all of stdin before connecting: a bad line puts nothing
        messages: list[tuple[bytes, bytes]] = []
        for n, line in enumerate(sys.stdin.buffer.read().split(b"\n"), start=1):
            if not line and n > 1:
                continue  # the final newline
            topic, tab, value = line.partition(b"\t")
            if not tab:
                raise UsageError(f"stdin line {n}: expected TOPIC<tab>VALUE")
            if args.hex:
                try:
                    topic, value = bytes.fromhex(topic.decode()), bytes.fromhex(value.decode())
                except ValueError as exc:
                    raise UsageError(f"stdin line {n}: not hex: {exc}") from None
            messages.append((topic, value))
        with hqueue.Connection(
            args.host, args.port, framed=args.framed, compact=args.compact, timeout=args.timeout
        ) as conn:
            queue = conn.queue(args.queue)
            sent = queue.put_many(messages, partition=args.partition, batch_size=args.batch)
        print(f"put {sent} message(s)", file=sys.stderr)
        return EXIT_OK

    return run("producer.py", body)


if __name__ == "__main__":
    sys.exit(main())
