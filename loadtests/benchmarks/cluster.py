"""Section ``cluster``: put rate through 1, 2 and 3 gateways over one HBase, failover time after
kill -9 (p50/p99), and failed puts during a rolling restart. Alone::

    python -m loadtests.benchmarks.cluster [--runs 3] [--trials 10] [--duration 5]

Starts a local HBase (scripts/hbase-local) and uses its ZooKeeper for the cluster; gateways run
as processes on 127.0.0.1 with ``--zookeeper-session-timeout SESSION``. Producers are processes
using the friendly client (``hqueue.Connection``: puts routed to each partition's owner),
batches of 1000 x 100 B. On one 2-core machine the gateways, HBase and the producers share the
two cores: expect no linear scaling here (see docs/SCALING.md for what a real cluster does).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loadtests.benchmarks import charts
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.hbase import LocalHBase
from loadtests.benchmarks.servers import ROOT, free_port  # the repository
from loadtests.benchmarks.stats import fmt_num

SESSION = 4.0  # seconds: the shortest HBase's embedded ZooKeeper grants (2 x its 2 s tick)


class ClusterGateway:
    def __init__(self, store: str, zookeeper: str, port: int | None = None) -> None:
        self.store = store
        self.zookeeper = zookeeper
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ClusterGateway:
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the process writes it
            prefix="bench-cluster-gw-", suffix=".log", delete=False
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--port", str(self.port), "--store", self.store,
             "--zookeeper", self.zookeeper, "--zookeeper-session-timeout", str(SESSION),
             "--advertise", self.address, "--log-level", "WARNING"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        from hqueue.protocol import connect

        deadline = time.monotonic() + 120
        while True:
            try:
                connect("127.0.0.1", self.port, timeout=30).listQueues()
                return self
            except Exception as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"gateway did not start: {exc}\n{Path(self.log.name).read_text()[-3000:]}"
                    ) from exc
                time.sleep(0.2)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def cluster(url: str, zk: str, n: int) -> Iterator[list[ClusterGateway]]:
    ns = f"b_{uuid.uuid4().hex[:8]}"
    store = f"{url}&namespace={ns}"
    gws = [ClusterGateway(store, f"{zk}/{ns}") for _ in range(n)]
    threads = [threading.Thread(target=g.start) for g in gws]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        yield gws
    finally:
        for g in gws:
            g.kill()


def owners(address: str, queue: str) -> list[str]:
    from hqueue.protocol import connect

    c = connect(*_split(address), timeout=30)
    try:
        return [x.decode() for x in c.getQueueLocations(queue.encode())]
    finally:
        c.close()


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def new_queue(gws: list[ClusterGateway], partitions: int) -> str:
    from hqueue.protocol import connect

    name = f"q_{uuid.uuid4().hex[:8]}"
    c = connect("127.0.0.1", gws[0].port, timeout=60)
    c.createQueue(name.encode(), partitions, 86400, {})
    c.close()
    wait_balanced(gws, name, partitions)
    return name


def wait_balanced(gws: list[ClusterGateway], queue: str, partitions: int) -> None:
    live = {g.address for g in gws}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            o = owners(next(iter(live)), queue)
            counts = [o.count(a) for a in live]
            if set(o) <= live and max(counts) - min(counts) <= 1:
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{queue} not balanced over {sorted(live)}")


def _produce(
    address: str, queue: str, partitions: list[int], seconds: float, out: Any, routed: bool = True
) -> None:
    import hqueue
    from hqueue.protocol import hqueue_thrift

    conn = hqueue.Connection(*_split(address), timeout=30)
    q = conn.queue(queue)
    batch = [("t", b"x" * 100)] * 1000
    raw = [hqueue_thrift().TMessage(topic=b"t", value=b"x" * 100)] * 1000
    sent = 0
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        p = partitions[i % len(partitions)]
        if routed:
            q.put_many(batch, partition=p)
        else:  # to this gateway whoever owns p: it forwards what it does not own
            conn.call("putMessagesWithPid", q.name, p, raw)
        sent += len(batch)
        i += 1
    out.put(sent)


def hop_cost(gws: list[ClusterGateway], queue: str, seconds: float) -> dict[str, float]:
    """One producer on the partitions gateway 0 does not own: routed to their owner, or sent
    to gateway 0, which forwards every batch (the hop)."""
    mine = [p for p, a in enumerate(owners(gws[0].address, queue)) if a != gws[0].address]
    rates = {}
    for routed in (True, False):
        out: Any = mp.Queue()
        proc = mp.Process(target=_produce, args=(gws[0].address, queue, mine, seconds, out, routed))
        proc.start()
        rates["routed" if routed else "forwarded"] = out.get(timeout=seconds + 120) / seconds
        proc.join()
    return rates


def put_rate(gws: list[ClusterGateway], queue: str, partitions: int, producers: int,
             seconds: float) -> float:  # fmt: skip
    out: Any = mp.Queue()
    procs = []
    for i in range(producers):
        mine = list(range(i, partitions, producers))
        args = (gws[i % len(gws)].address, queue, mine, seconds, out)
        procs.append(mp.Process(target=_produce, args=args))
    for p in procs:
        p.start()
    total = sum(out.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def failover_times(url: str, zk: str, trials: int, say: Any) -> list[float]:
    """kill -9 of partition 0's owner -> the first acknowledged put on partition 0."""
    import hqueue
    from hqueue.errors import HQueueError

    times = []
    with cluster(url, zk, 3) as gws:
        queue = new_queue(gws, 3)
        for trial in range(trials):
            victim = next(g for g in gws if g.address == owners(gws[0].address, queue)[0])
            seed = next(g for g in gws if g is not victim)
            conn = hqueue.Connection(*_split(seed.address), timeout=30)
            q = conn.queue(queue)
            q.put("t", b"warm", partition=0)
            killed = time.monotonic()
            victim.kill()
            while True:
                try:
                    q.put("t", b"after", partition=0)
                    break
                except HQueueError:
                    time.sleep(0.02)
            times.append(time.monotonic() - killed)
            conn.close()
            say(f"  failover trial {trial + 1}: {times[-1]:.2f} s")
            victim.start()  # back on its port, as a new member
            wait_balanced(gws, queue, 3)
    return times


def rolling_restart(url: str, zk: str, seconds_between: float) -> dict[str, Any]:
    """Two routed producers (retrying an IOError once) while each of 3 gateways restarts."""
    import hqueue
    from hqueue.errors import HQueueError

    stats: dict[str, Any] = {"puts": 0, "retried": 0, "failed": 0, "errors": []}
    stop = threading.Event()

    def produce(address: str) -> None:
        conn = hqueue.Connection(*_split(address), timeout=30)
        q = conn.queue(queue)
        i = 0
        while not stop.is_set():
            for attempt in (1, 2):
                try:
                    q.put_many([("t", b"x" * 100)] * 100, partition=i % 6)
                    stats["puts"] += 1
                    break
                except HQueueError as exc:
                    stats["retried" if attempt == 1 else "failed"] += 1
                    if len(stats["errors"]) < 20:
                        stats["errors"].append(f"attempt {attempt}: {exc}")
            i += 1
        conn.close()

    with cluster(url, zk, 3) as gws:
        queue = new_queue(gws, 6)
        threads = [threading.Thread(target=produce, args=(g.address,)) for g in gws[:2]]
        for t in threads:
            t.start()
        for g in gws:
            time.sleep(seconds_between)
            g.stop()
            wait_balanced([x for x in gws if x is not g], queue, 6)
            g.start()
            wait_balanced(gws, queue, 6)
        time.sleep(seconds_between)
        stop.set()
        for t in threads:
            t.join()
    return stats


def measure(runs: int, trials: int, seconds: float, say: Any = print) -> dict[str, Any]:
    results: dict[str, Any] = {"session_timeout_s": SESSION, "rates": {}}
    hbase = LocalHBase()
    with hbase as url:
        zk = f"127.0.0.1:{hbase.ports[0]}"  # the cluster uses HBase's own ZooKeeper
        # the three clusters side by side, their runs interleaved, after a warm-up of HBase
        with cluster(url, zk, 1) as one, cluster(url, zk, 2) as two, cluster(url, zk, 3) as three:
            sizes = {1: one, 2: two, 3: three}
            queues = {n: new_queue(gws, 6) for n, gws in sizes.items()}
            say("  warming HBase up (10 s of puts)")
            put_rate(one, queues[1], 6, 3, 10.0)
            runs_by_n: dict[int, list[float]] = {1: [], 2: [], 3: []}
            for _ in range(runs):
                for n, gws in sizes.items():
                    runs_by_n[n].append(put_rate(gws, queues[n], 6, 3, seconds))
            hops = [hop_cost(two, queues[2], seconds) for _ in range(runs)]
            results["hop"] = {
                k: statistics.median(h[k] for h in hops) for k in ("routed", "forwarded")
            }
            say(f"  one producer, routed vs forwarded: {results['hop']}")
        for n, rates in runs_by_n.items():
            results["rates"][n] = {"runs": rates, "median": statistics.median(rates)}
            say(f"  {n} gateway(s): {statistics.median(rates):,.0f} msgs/s (median of {runs})")
        times = failover_times(url, zk, trials, say)
        results["failover_s"] = {
            "trials": times,
            "p50": statistics.median(times),
            "p99": max(times) if len(times) < 100 else statistics.quantiles(times, n=100)[98],
        }
        results["rolling_restart"] = rolling_restart(url, zk, 2.0)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--duration", type=float, default=5.0)
    args = p.parse_args()
    print(json.dumps(measure(args.runs, args.trials, args.duration), indent=1))
    return 0


def run(ctx: Context) -> Result:
    trials = 3 if ctx.quick else 10
    seconds = max(ctx.duration, 2.0)
    r = measure(ctx.runs, trials, seconds, ctx.say)
    rates = r["rates"]
    table = [["gateways", "puts/s (median)", "vs 1 gateway"]]
    base = rates[1]["median"]
    for n in (1, 2, 3):
        m = rates[n]["median"]
        table.append([str(n), fmt_num(m), f"{m / base:.2f}"])
    hop = r["hop"]
    table.append(
        [
            "1 producer, routed / forwarded",
            f"{fmt_num(hop['routed'])} / {fmt_num(hop['forwarded'])}",
            f"{hop['forwarded'] / hop['routed']:.2f}",
        ]
    )
    f = r["failover_s"]
    rr = r["rolling_restart"]
    table.append(["failover p50 / p99", f"{f['p50']:.2f} s / {f['p99']:.2f} s",
                  f"{len(f['trials'])} trials, session {r['session_timeout_s']:g} s"])  # fmt: skip
    table.append(["rolling restart", f"{rr['failed']} failed of {rr['puts']} puts",
                  f"{rr['retried']} retried once"])  # fmt: skip
    chart = charts.bars(
        ctx.chart("cluster"),
        "Aggregate put rate through N gateways over one HBase",
        [f"{n} gateway(s)" for n in (1, 2, 3)],
        {"friendly client, routed": [rates[n]["median"] for n in (1, 2, 3)]},
        "messages/s",
        note=f"3 producer processes, 1000 x 100 B per call, 6 partitions; median of "
        f"{ctx.runs} runs of {seconds:g} s; one local HBase; all on one 2-core machine",
    )
    return Result(
        data=r,
        table=table,
        charts=[chart.name],
        summary="Gateways, HBase (master, region server, ZooKeeper and two Thrift servers in one "
        "JVM) and the producers share the machine's two cores, so more gateways cannot add "
        "throughput here; the rows show what forwarding-free routing costs and what a move "
        "costs, not scaling. Failover: kill -9 of partition 0's owner until the first "
        "acknowledged put on partition 0 through another gateway (session timeout + "
        "reassignment + claim). Rolling restart: two producers routing by locations, retrying "
        "an IOError once, while each of the 3 gateways gets SIGTERM and starts again.",
        verdict=f"failover p50 {f['p50']:.1f} s, p99 {f['p99']:.1f} s; "
        f"{rr['failed']} failed puts in a rolling restart",
    )


SECTION = Section("cluster", "Gateway cluster over HBase", run, requires=("java", "mvn"), minutes=6)


if __name__ == "__main__":
    sys.exit(main())
