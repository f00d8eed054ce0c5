"""The yardstick for ``hqueue import``: the same messages put with nothing else to do.

Reads the first --count records of a JSON Lines file, encodes them into put requests up front
(not timed), then sends them over --connections connections (one call in flight each, as the
importer does) and prints messages per second. Compare with the rate ``hqueue import`` prints
for the same file on the same gateway.

    python examples/observations/lean_put_rate.py --gateway 127.0.0.1:9190 obs /tmp/isd.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time

from hqueue.protocol import connect, parse_address
from hqueue.tls import TLS
from hqueue.toolkit.records import PutEncoder, parse_json_line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("queue")
    p.add_argument("file")
    p.add_argument("--gateway", default="127.0.0.1:9190")
    p.add_argument("--count", type=int, default=400_000)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--tls-ca", help="speak TLS to the gateway, trusting this CA")
    args = p.parse_args(argv)
    host, port = parse_address(args.gateway, argument="--gateway")
    with open(args.file, "rb") as f:
        records = [parse_json_line(line, n, False) for n, line in
                   enumerate(itertools.islice(f, args.count), 1)]  # fmt: skip
    enc = PutEncoder()
    name = args.queue.encode()
    requests = [
        enc.encode(name, None, records[i : i + args.batch_size])
        for i in range(0, len(records), args.batch_size)
    ]
    tls = TLS(ca=args.tls_ca).context() if args.tls_ca else None
    clients = [connect(host, port, tls=tls) for _ in range(args.connections)]

    def send(client: object, mine: list[bytes]) -> None:
        trans = client._oprot.trans  # type: ignore[attr-defined]
        for req in mine:
            trans.write(req)
            trans.flush()
            client._recv("putMessages")  # type: ignore[attr-defined]

    threads = [
        threading.Thread(target=send, args=(c, requests[i :: len(clients)]))
        for i, c in enumerate(clients)
    ]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - started
    print(f"lean put: {len(records)} messages in {seconds:.2f} s "
          f"({len(records) / seconds:,.0f} msgs/s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
