"""The subscriber runtime as a library (seed 4.4: ``queue.create_subscriber(...)``) and its
start / stop / kill lifecycle, run in a program of its own (it needs gevent's monkey-patching,
which a test process must not do)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GatewayFactory
from tests.integration.conftest import Registry

pytestmark = [pytest.mark.slow, pytest.mark.subscriptions]

PROGRAM = r"""
from gevent import monkey

monkey.patch_all()

import json
import sys
import time

import gevent
import hqueue
from hqueue.protocol import connect, hqueue_thrift

from subscriber_runtime import BlackHoleListener, Queue, Subscription

gateway, queue_name, zookeeper = sys.argv[1], sys.argv[2], sys.argv[3] or None
T = hqueue_thrift()
host, port = gateway.rsplit(":", 1)
client = connect(host, int(port))
client.createQueue(queue_name.encode(), 2, 3600, {})


def wait(predicate, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        gevent.sleep(0.02)


def info(name):
    return next(i for i in client.listSubscribers(queue_name.encode()) if i.name == name.encode())


# seed 4.4: the client's queue creates the subscriber
connection = hqueue.Connection(host, int(port))
received = []
hole = BlackHoleListener()
subscription = Subscription("lib", topics=["t"]).add_partitions({0: None})
subscriber = connection.queue(queue_name).create_subscriber(
    subscription, [hole, received.extend], zookeeper=zookeeper, session_timeout=4,
    lease_seconds=4,
)
subscriber.start()
client.putMessagesWithPid(
    queue_name.encode(), 0, [T.TMessage(topic=b"t", value=b"%d" % i) for i in range(100)]
)
client.putMessagesWithPid(queue_name.encode(), 0, [T.TMessage(topic=b"other", value=b"x")])
client.putMessagesWithPid(queue_name.encode(), 1, [T.TMessage(topic=b"t", value=b"y")])
wait(lambda: len(received) >= 100, "100 messages")
gevent.sleep(0.3)
live_address = info("lib").address.decode()
subscriber.stop("the test is done")
# a clean stop unregisters at once and the gateway writes the last checkpoint
wait(lambda: info("lib").address is None, "the clean stop to unregister", 5)
wait(lambda: info("lib").partitions[0].lagMessages == 0, "the final checkpoint", 5)

queue = Queue(queue_name, gateway, zookeeper=zookeeper)  # the runtime's own facade
killed = queue.create_subscriber(Subscription("lib2"), [BlackHoleListener()],
                                 session_timeout=4, lease_seconds=4)
killed.start()
wait(lambda: info("lib2").address is not None, "lib2 to register")
started = time.monotonic()
killed.kill()
wait(lambda: info("lib2").address is None, "the killed subscriber to vanish", 15)
print(json.dumps({
    "received": [m.value.decode() for m in received],
    "partitions": sorted({m.partition for m in received}),
    "black_hole": hole.count,
    "live_address": live_address,
    "subscriber_address": subscriber.address,
    "vanished_after_kill_s": time.monotonic() - started,
}))
"""


def test_library_lifecycle(
    start_gateway: GatewayFactory, registry: Registry, queue_name: str, tmp_path: Path
) -> None:
    gw = start_gateway(*registry.gateway_flags())
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    done = subprocess.run(
        [sys.executable, str(script), gw.address, queue_name, registry.zk_hosts or ""],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["received"] == [str(i) for i in range(100)]
    assert result["partitions"] == [0] and result["black_hole"] == 100
    assert result["live_address"] == result["subscriber_address"]
    # ZooKeeper: the session closes with the process's client; embedded: the lease (4 s) ends
    assert result["vanished_after_kill_s"] < (2 if registry.mode == "zookeeper" else 8)
