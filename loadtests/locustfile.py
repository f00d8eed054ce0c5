"""Locust scenarios against the hqueue gateway: Thrift calls, not HTTP.

    locust -f loadtests/locustfile.py --headless -u 4 -r 4 -t 30s BatchPutUser \\
        --hq-gateway 127.0.0.1:9190 --hq-queue loadtest --hq-batch 100

``loadtests/run`` does the same in one command, starting a gateway if none is given, and
summarises the run (see ``loadtests/run --help``).

Scenarios are user classes; name one or more on the command line (all run when none is named):

* ``SinglePutUser``: ``putMessage``, one message per call; the gateway picks a random partition.
* ``BatchPutUser``: ``putMessagesWithPid`` of ``--hq-batch`` messages, partitions in turn.
* ``ScanUser``: ``messageScannerOpen`` on a partition (partitions in turn), then
  ``messageScannerGetList(--hq-scan-batch)`` until the empty list that ends the scan or
  ``--hq-scan-lists`` lists, then ``messageScannerClose`` if the scan did not end by itself.
  Scans read from the start of the partition; ``--hq-prefill`` stores messages to read first.
* ``MixedUser``: produce and consume. Three batched puts for every catch-up scan; the scan
  reads a partition from where this user's previous scan of it stopped (each user is an
  independent consumer of the whole queue, as a broadcast subscriber would be).
* ``SubscriberUser``: a push subscriber of the queue served in the locust process; each batch
  pushed to it is a ``push`` event (latency of its newest message) and counted. Run it beside
  a producing scenario.

Every Thrift call fires locust's request event (request type ``thrift``, name = the method,
response time in ms, response length = the bytes received for the call). IDL exceptions
(``IllegalArgument``, ``IOError``), ``TApplicationException`` and transport errors (refused,
reset, timed out, closed by the server) are all reported as failures. After any failure that is
not an answer from the gateway the connection is dropped and a new one opened by the next call:
thriftpy2 does not check sequence ids, so a late reply would otherwise be read as the next
call's. Opening a connection is reported too (name ``connect``).

Locust's statistics count requests; the messages the calls moved (put, scanned) are counted here
per method and written as JSON to ``--hq-stats-json`` when the test stops, with the test's start
and stop times and locust's final request figures (its CSVs are written every second, so the
last CSV may miss the last second of a run; this JSON does not).

Parameters (command line, or the environment variable in brackets):

  --hq-gateway HOST:PORT   [HQ_GATEWAY]        default 127.0.0.1:9190
  --hq-queue NAME          [HQ_QUEUE]          default loadtest; created if missing
  --hq-partitions N        [HQ_PARTITIONS]     partitions of a queue created here (default 8)
  --hq-batch N             [HQ_BATCH]          messages per batched put (default 100)
  --hq-message-bytes N     [HQ_MESSAGE_BYTES]  bytes per message body (default 100)
  --hq-topic TOPIC         [HQ_TOPIC]          default lt
  --hq-scan-batch N        [HQ_SCAN_BATCH]     messages per messageScannerGetList (default 1000)
  --hq-scan-lists N        [HQ_SCAN_LISTS]     lists read per scan at most (default 10)
  --hq-prefill N           [HQ_PREFILL]        messages stored per partition at test start
  --hq-framed, --hq-compact                    the gateway's transport and protocol
  --hq-timeout SECONDS     [HQ_TIMEOUT]        socket timeout per call (default 30)
  --hq-stats-json PATH     [HQ_STATS_JSON]     where to write the message counts
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hqueue.protocol import (
    connect,
    hqueue_thrift,
    parse_address,
)
from hqueue_contract.limits import MAX_SEQUENCE
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import RescheduleTask

# locust run by hand puts only this file's folder on sys.path; loadtests/run sets PYTHONPATH
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loadtests.locust_client import COUNTER, PUT_METHODS, ThriftClient
from loadtests.prepare import prepare_queue

log = logging.getLogger("hqueue.locust")


# -- parameters ------------------------------------------------------------------------------


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    group = parser.add_argument_group("hqueue", "the gateway and the workload")
    group.add_argument("--hq-gateway", env_var="HQ_GATEWAY", default="127.0.0.1:9190",
                       help="the gateway's host:port")  # fmt: skip
    group.add_argument("--hq-queue", env_var="HQ_QUEUE", default="loadtest",
                       help="queue to load; created if missing")  # fmt: skip
    group.add_argument("--hq-partitions", env_var="HQ_PARTITIONS", type=int, default=8,
                       help="partitions of a queue created by this run")  # fmt: skip
    group.add_argument("--hq-batch", env_var="HQ_BATCH", type=int, default=100,
                       help="messages per batched put")  # fmt: skip
    group.add_argument("--hq-message-bytes", env_var="HQ_MESSAGE_BYTES", type=int, default=100,
                       help="bytes per message body")  # fmt: skip
    group.add_argument("--hq-topic", env_var="HQ_TOPIC", default="lt", help="message topic")
    group.add_argument("--hq-scan-batch", env_var="HQ_SCAN_BATCH", type=int, default=1000,
                       help="messages per messageScannerGetList")  # fmt: skip
    group.add_argument("--hq-scan-lists", env_var="HQ_SCAN_LISTS", type=int, default=10,
                       help="lists read per scan at most")  # fmt: skip
    group.add_argument("--hq-prefill", env_var="HQ_PREFILL", type=int, default=0,
                       help="messages stored per partition when the test starts")  # fmt: skip
    group.add_argument("--hq-framed", env_var="HQ_FRAMED", action="store_true",
                       help="framed transport (as the gateway's --framed)")  # fmt: skip
    group.add_argument("--hq-compact", env_var="HQ_COMPACT", action="store_true",
                       help="compact protocol (as the gateway's --compact)")  # fmt: skip
    group.add_argument("--hq-timeout", env_var="HQ_TIMEOUT", type=float, default=30.0,
                       help="socket timeout per call, seconds")  # fmt: skip
    group.add_argument("--hq-stats-json", env_var="HQ_STATS_JSON", default="",
                       help="where the test's final figures go, as JSON")  # fmt: skip


class Settings:
    """The parsed ``--hq-*`` options, checked once per test."""

    def __init__(self, options: Any) -> None:
        self.host, self.port = parse_address(options.hq_gateway, argument="--hq-gateway")
        self.queue = options.hq_queue.encode()
        self.partitions = options.hq_partitions
        self.batch = options.hq_batch
        self.message_bytes = options.hq_message_bytes
        self.topic = options.hq_topic.encode()
        self.scan_batch = options.hq_scan_batch
        self.scan_lists = options.hq_scan_lists
        self.prefill = options.hq_prefill
        self.framed = bool(options.hq_framed)
        self.compact = bool(options.hq_compact)
        self.timeout = options.hq_timeout
        self.stats_json = options.hq_stats_json
        for name in ("partitions", "batch", "scan_batch", "scan_lists"):
            if getattr(self, name) < 1:
                raise ValueError(f"'--hq-{name.replace('_', '-')}' must be >= 1")
        if self.message_bytes < 0 or self.prefill < 0:
            raise ValueError("'--hq-message-bytes' and '--hq-prefill' must be >= 0")
        if not 0 < self.timeout <= 3600:
            raise ValueError("'--hq-timeout' must be in (0, 3600] seconds")

    def value(self, rng: random.Random) -> bytes:
        """A message body: random bytes, so that no layer can compress it away."""
        return rng.randbytes(self.message_bytes)


# -- users (scenarios) -----------------------------------------------------------------------


class ThriftUser(User):
    """A user with a :class:`ThriftClient` (``self.client``) and the run's settings."""

    abstract = True
    wait_time = constant(0)  # closed loop: each user calls as fast as the gateway answers

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.settings = settings_of(environment)
        self.client = ThriftClient(self.settings, environment.events.request)
        self.t = hqueue_thrift()
        self.rng = random.Random()
        s = self.settings
        # users start on different partitions so that a few of them spread over all
        self._pids: Iterator[int] = itertools.cycle(
            [(p + self.rng.randrange(s.partitions)) % s.partitions for p in range(s.partitions)]
        )

    def on_stop(self) -> None:
        self.client.close()

    def messages(self, n: int) -> list[Any]:
        s = self.settings
        return [self.t.TMessage(topic=s.topic, value=s.value(self.rng)) for _ in range(n)]


class SinglePutUser(ThriftUser):
    """One message per call: the cost of a call, and of the group commit, per message."""

    @task
    def put_one(self) -> None:
        msg = self.messages(1)[0]
        self.client.call("putMessage", self.settings.queue, msg)
        COUNTER.add("putMessage", 1)


class BatchPutUser(ThriftUser):
    """``--hq-batch`` messages per call, partitions in turn."""

    def on_start(self) -> None:
        # one prebuilt batch per user: the load is the gateway's, not the building of bodies
        self.batch = self.messages(self.settings.batch)

    @task
    def put_batch(self) -> None:
        self.client.call("putMessagesWithPid", self.settings.queue, next(self._pids), self.batch)
        COUNTER.add("putMessagesWithPid", len(self.batch))


def scan_partition(user: ThriftUser, pid: int, start: Any = None) -> list[Any]:
    """Opens a scanner on ``pid`` from ``start`` (a TMessageID, inclusive; None: the oldest),
    reads up to ``--hq-scan-lists`` lists, closes it unless the scan ended; returns the last
    list read that was not empty (to know where the scan stopped)."""
    s, t, client = user.settings, user.t, user.client
    scan = t.TMessageScan(startMessageID=start, caching=s.scan_batch)
    sid = client.call("messageScannerOpen", s.queue, pid, scan)
    generation = client.generation
    last: list[Any] = []
    try:
        for _ in range(s.scan_lists):
            batch = client.call("messageScannerGetList", sid, s.scan_batch)
            COUNTER.add("messageScannerGetList", len(batch))
            if not batch:
                sid = None  # the empty list ended the scan and freed the scanner
                break
            last = batch
    finally:
        # after a transport error the scanner is the old connection's; it expires by itself
        if sid is not None and client.connected and client.generation == generation:
            client.call("messageScannerClose", sid)
    return last


class ScanUser(ThriftUser):
    """Scans a partition from its oldest message, partitions in turn."""

    @task
    def scan(self) -> None:
        scan_partition(self, next(self._pids))


class MixedUser(ThriftUser):
    """Produces batches and consumes the queue: three puts for every catch-up scan."""

    def on_start(self) -> None:
        self.batch = self.messages(self.settings.batch)
        self.position: dict[int, Any] = {}  # partition -> the next TMessageID to read

    @task(3)
    def produce(self) -> None:
        self.client.call("putMessagesWithPid", self.settings.queue, next(self._pids), self.batch)
        COUNTER.add("putMessagesWithPid", len(self.batch))

    @task(1)
    def consume(self) -> None:
        pid = next(self._pids)
        last = scan_partition(self, pid, self.position.get(pid))
        if last:
            self.position[pid] = next_id(self.t, last[-1].id)


def next_id(t: Any, mid: Any) -> Any:
    """The smallest MessageID after ``mid`` (sequence ids are int16)."""
    if mid.sequenceID < MAX_SEQUENCE:
        return t.TMessageID(mid.timestamp, mid.sequenceID + 1)
    return t.TMessageID(mid.timestamp + 1, 0)


class PushCounter:
    """The listener of a SubscriberUser: every batch pushed to it is a request event of type
    ``push``, name ``consumeMessages``, whose response time is the push latency of the batch's
    newest message (now minus its MessageID timestamp, ms) and whose length is its bytes."""

    def __init__(self, request_event: Any) -> None:
        self.request_event = request_event

    def on_messages(self, messages: list[Any]) -> bool:
        now_ms = time.time() * 1000
        newest = max(m.id.timestamp for m in messages)
        self.request_event.fire(
            request_type="push",
            name="consumeMessages",
            response_time=max(0.0, now_ms - newest),
            response_length=sum(len(m.value) for m in messages),
            exception=None,
            context={},
        )
        COUNTER.add("consumeMessages", len(messages))
        return True


_SUBSCRIBER_IDS = itertools.count(1)


class SubscriberUser(User):
    """A push subscriber of ``--hq-queue`` (all partitions, all topics, new messages from its
    start), served in this process by ``subscriber_runtime`` and registered through the
    gateway. It does not call anything itself: run it beside ``BatchPutUser`` or ``MixedUser``
    so that something is produced. Unregisters (and removes its subscription) when it stops."""

    wait_time = constant(1)

    def on_start(self) -> None:
        from subscriber_runtime import Subscription, create_subscriber

        s = settings_of(self.environment)
        self.name = f"locust-{os.getpid()}-{next(_SUBSCRIBER_IDS)}"
        self.subscriber = create_subscriber(
            f"{s.host}:{s.port}",
            s.queue.decode(),
            Subscription(self.name),
            [PushCounter(self.environment.events.request)],
        )
        t0 = time.perf_counter()
        try:
            self.subscriber.start()
        except Exception as exc:  # reported, like any call that failed
            self.environment.events.request.fire(
                request_type="push", name="subscribe",
                response_time=(time.perf_counter() - t0) * 1000, response_length=0,
                exception=exc, context={},
            )  # fmt: skip
            raise RescheduleTask() from exc

    def on_stop(self) -> None:
        subscriber = getattr(self, "subscriber", None)
        if subscriber is not None:
            subscriber.stop("locust run ended")
            s = settings_of(self.environment)
            c = connect(s.host, s.port, framed=s.framed, compact=s.compact, timeout=s.timeout)
            try:  # a load test leaves no subscriptions behind
                c.deleteSubscriber(s.queue, self.name.encode())
            except Exception as exc:
                log.warning("deleting subscription %s: %s", self.name, exc)
            finally:
                c.close()

    @task
    def idle(self) -> None:
        """Pushes arrive on the subscriber's own server; nothing to call."""


# -- test start and stop ---------------------------------------------------------------------

_SETTINGS: dict[int, Settings] = {}


def settings_of(environment: Environment) -> Settings:
    key = id(environment)
    if key not in _SETTINGS:
        _SETTINGS[key] = Settings(environment.parsed_options)
    return _SETTINGS[key]


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    """Creates the queue if it is missing and stores ``--hq-prefill`` messages per partition."""
    s = settings_of(environment)
    s.partitions = prepare_queue(
        s.host, s.port, s.queue, s.partitions, prefill=s.prefill, topic=s.topic,
        message_bytes=s.message_bytes, framed=s.framed, compact=s.compact, timeout=s.timeout,
    )  # fmt: skip
    COUNTER.reset()


PERCENTILES = (0.5, 0.95, 0.99)


def final_requests(environment: Environment) -> list[dict[str, Any]]:
    """Locust's figures per method and in total (``Aggregated``) once every user stopped.

    Locust's CSV writer runs every second and is not called at the end, so its last CSV may
    miss up to a second of the run; these are complete."""
    stats = environment.stats
    entries = sorted(stats.entries.values(), key=lambda e: e.name)
    out = []
    for e in [*entries, stats.total]:
        out.append({
            "name": e.name if e is not stats.total else "Aggregated",
            "requests": e.num_requests,
            "failures": e.num_failures,
            "avg_ms": e.avg_response_time,
            "max_ms": e.max_response_time,
            "avg_bytes": e.avg_content_length,
            **{f"p{round(q * 100)}_ms": e.get_response_time_percentile(q) for q in PERCENTILES},
        })  # fmt: skip
    return out


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    COUNTER.stopped = time.time()
    path = settings_of(environment).stats_json
    if path:
        data = COUNTER.snapshot()
        data["put_messages"] = sum(v for k, v in data["messages"].items() if k in PUT_METHODS)
        data["requests"] = final_requests(environment)
        data["errors"] = [
            {"name": e.name, "error": str(e.error), "occurrences": e.occurrences}
            for e in environment.stats.errors.values()
        ]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        Path(tmp).write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
