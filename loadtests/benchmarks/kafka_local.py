"""Apache Kafka on this machine, for the ``kafka`` benchmark baseline: one process in KRaft
mode (broker and controller), replication factor 1, loopback only, fresh storage per start.

    lib = resolve_jars()                       # mvn dependency:copy-dependencies, cached
    server = start_kafka(lib, workdir)         # a loadtests.benchmarks.servers.Server
    ... bootstrap = f"127.0.0.1:{server.port}"
    server.stop()

The jars of ``org.apache.kafka:kafka_2.13`` (and reload4j, so the broker can log) are
resolved by Maven from Maven Central into ``~/.m2`` and copied to
``~/.cache/hqueue-bench/kafka-<version>/lib`` once; later runs reuse them. Needs ``java``
(17) and ``mvn`` on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loadtests.benchmarks.servers import HOST, ROOT, Server, die_with_parent, free_port

KAFKA_VERSION = "3.9.1"
SCALA_VERSION = "2.13"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hqueue-bench"
START_TIMEOUT = 90.0  # a cold JVM on a busy 2-core machine

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>hqueue.bench</groupId>
  <artifactId>kafka-baseline</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-reload4j</artifactId>
      <version>1.7.36</version>
    </dependency>
  </dependencies>
</project>
"""

# what bin/kafka-server-start.sh passes, with a smaller heap for a shared 2-core machine
JVM_OPTS = [
    "-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]  # fmt: skip

LOG4J = """log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
"""


def resolve_jars(version: str = KAFKA_VERSION) -> Path:
    """The directory holding Kafka's jars, resolved with Maven on first use."""
    home = CACHE / f"kafka-{version}"
    lib = home / "lib"
    if (lib / f"kafka_{SCALA_VERSION}-{version}.jar").exists():
        return lib
    if not shutil.which("mvn"):
        raise RuntimeError("mvn is not on PATH: it resolves Kafka's jars from Maven Central")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(POM.format(scala=SCALA_VERSION, version=version))
    tmp = home / "lib.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(
        ["mvn", "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={tmp}"],
        cwd=home, check=True, timeout=1800,
    )  # fmt: skip
    shutil.rmtree(lib, ignore_errors=True)
    tmp.rename(lib)
    return lib


def start_kafka(lib: Path, workdir: Path, name: str = "kafka") -> Server:
    """Formats fresh storage under ``workdir`` and starts a one-node KRaft Kafka on free
    loopback ports; returns once a client can list its topics."""
    home = workdir / name
    home.mkdir(parents=True, exist_ok=True)
    port, controller = free_port(), free_port()
    props = home / "server.properties"
    props.write_text(
        "\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{HOST}:{controller}",
            f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={home / 'data'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            "",
        ])
    )  # fmt: skip
    (home / "log4j.properties").write_text(LOG4J)
    log4j = f"-Dlog4j.configuration=file:{home / 'log4j.properties'}"
    uuid = subprocess.run(
        ["java", "-cp", f"{lib}/*", log4j, "kafka.tools.StorageTool", "random-uuid"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    subprocess.run(
        ["java", "-cp", f"{lib}/*", log4j, "kafka.tools.StorageTool", "format",
         "-t", uuid, "-c", str(props)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    log = workdir / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["java", *JVM_OPTS, log4j, "-cp", f"{lib}/*", "kafka.Kafka", str(props)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
            preexec_fn=die_with_parent,
        )  # fmt: skip
    server = Server(name, "kafka", proc, port, log, extra={"controller_port": controller})
    try:
        wait_ready(server)
    except BaseException:
        server.stop()
        raise
    return server


def admin_client(server: Server) -> Any:
    """A confluent-kafka AdminClient of ``server`` that does not log its reconnects (it
    outlives the broker until it is garbage-collected)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": f"{HOST}:{server.port}", "log_level": 0})


def wait_ready(server: Server, timeout: float = START_TIMEOUT) -> None:
    admin = admin_client(server)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"kafka exited with {server.proc.returncode}:\n{server.log_tail()}")
        try:
            admin.list_topics(timeout=2)
            return
        except Exception:
            time.sleep(0.5)
    raise RuntimeError(f"kafka did not come up in {timeout} s:\n{server.log_tail()}")


def create_topic(server: Server, topic: str, partitions: int, config: dict[str, str]) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(server)
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=config)])
    futures[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the leader is elected shortly after
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if (
            meta
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} has no leaders after 60 s")


if (
    __name__ == "__main__"
):  # python -m loadtests.benchmarks.kafka_local: resolve, start, wait for Ctrl-C
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="hqueue-kafka-"))
    s = start_kafka(resolve_jars(), d)
    print(f"kafka on {HOST}:{s.port} (data in {d}); Ctrl-C stops it", file=sys.stderr)
    try:
        s.proc.wait()
    except KeyboardInterrupt:
        s.stop()
        shutil.rmtree(d, ignore_errors=True)
