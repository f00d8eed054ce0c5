"""How hqueue lays queues out in HBase: table names, region split keys, table and family
settings from a queue's configuration (the seed's toolkit keys).

One table per queue, ``<namespace>:<queue>``, with one family, ``message``: VERSIONS=1, TTL =
the queue's, qualifier = topic, value = body. Row keys are the shared keys of
:mod:`gateway.rowkey`. Tables are pre-split on partition boundaries and never split inside a
partition.

Message keys and properties (``PartitionStore.put_extras``) of a queue are in a table of their
own, ``<namespace>_keys:<queue>`` (a namespace apart, so no queue name can collide with it),
made on the queue's first message with a key or properties and dropped on truncate and delete.
One family, ``x``, TTL = the queue's (HBase expires them with the messages), column ``x:v``:

* ``E`` + partition(2) + timestamp(8) + sequence(2): the message's encoded key and properties;
* ``K`` + len(key)(1) + key + ~timestamp(8) + ~sequence(2) + partition(2), empty: the index
  (inverted ids, so a key's messages come newest first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .. import rowkey
from ..errors import InvalidArgument

FAMILY = b"message"
COLUMN_PREFIX = FAMILY + b":"
META_TABLE = "hqueue_meta"

# A region per partition by default; with more partitions per region, regions may only split
# on a partition boundary (the first two bytes of the key).
_NO_SPLITS = "org.apache.hadoop.hbase.regionserver.DisabledRegionSplitPolicy"
_PREFIX_SPLITS = "org.apache.hadoop.hbase.regionserver.KeyPrefixRegionSplitPolicy"
# Family-level HBase settings the seed's toolkit accepts as queue configuration.
_FAMILY_CONFIG = (
    "hbase.hregion.majorcompaction",
    "hbase.hstore.compaction.min",
    "hbase.hstore.compaction.max",
    "hbase.hstore.blockingStoreFiles",
)


@dataclass(frozen=True)
class HBaseAddress:
    """Where HBase's Thrift servers listen and how to talk to them (``--store hbase://...``)."""

    host: str
    port: int  # Thrift1 (happybase): data and metadata
    admin_host: str
    admin_port: int  # Thrift2: creating pre-split tables, truncating with splits kept
    framed: bool = False
    compact: bool = False
    namespace: str = "hqueue"
    pool_size: int = 16
    timeout: float = 10.0  # seconds, per HBase call
    max_regions: int = 4096  # per queue; more would swamp a small cluster's region servers

    @classmethod
    def parse(cls, url: str, argument: str = "--store") -> HBaseAddress:
        """``hbase://HOST:PORT[?admin=HOST:PORT&transport=buffered|framed&protocol=binary|compact
        &namespace=NS&pool=N&timeout=SECONDS&max_regions=N]``; admin defaults to PORT+1."""
        parts = urlsplit(url)
        if parts.scheme != "hbase" or not parts.hostname:
            raise ValueError(f"{argument}: expected hbase://HOST:PORT, got {url!r}")
        try:
            port = parts.port or 9090
        except ValueError:
            raise ValueError(f"{argument}: bad port in {url!r}") from None
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        unknown = set(query) - {
            "admin", "transport", "protocol", "namespace", "pool", "timeout", "max_regions"
        }  # fmt: skip
        if unknown:
            raise ValueError(f"{argument}: unknown parameter(s) {', '.join(sorted(unknown))}")
        admin_host, admin_port = parts.hostname, port + 1
        if "admin" in query:
            host, _, p = query["admin"].rpartition(":")
            if not host or not p.isdigit() or not 0 < int(p) < 65536:
                raise ValueError(f"{argument}: admin must be HOST:PORT, got {query['admin']!r}")
            admin_host, admin_port = host, int(p)
        transport = query.get("transport", "buffered")
        protocol = query.get("protocol", "binary")
        if transport not in ("buffered", "framed"):
            raise ValueError(f"{argument}: transport must be buffered or framed")
        if protocol not in ("binary", "compact"):
            raise ValueError(f"{argument}: protocol must be binary or compact")
        namespace = query.get("namespace", "hqueue")
        if not namespace.replace("_", "a").isalnum():
            raise ValueError(f"{argument}: namespace must be letters, digits and '_'")

        def number(name: str, default: float, kind: type = int) -> Any:
            try:
                value = kind(query.get(name, default))
            except ValueError:
                raise ValueError(f"{argument}: {name} must be a number") from None
            if value <= 0:
                raise ValueError(f"{argument}: {name} must be > 0")
            return value

        return cls(
            parts.hostname, port, admin_host, admin_port,
            framed=transport == "framed", compact=protocol == "compact", namespace=namespace,
            pool_size=number("pool", 16), timeout=number("timeout", 10.0, float),
            max_regions=number("max_regions", 4096),
        )  # fmt: skip


KEYS_FAMILY = b"x"
KEYS_COLUMN = b"x:v"


def keys_namespace(namespace: str) -> str:
    return f"{namespace}_keys"


def keys_table_descriptor(admin: Any, namespace: str, queue: str, ttl: int) -> Any:
    """The Thrift2 TTableDescriptor of a queue's table of keys and properties."""
    family = admin.TColumnFamilyDescriptor(name=KEYS_FAMILY, maxVersions=1, timeToLive=ttl)
    name = admin.TTableName(ns=keys_namespace(namespace).encode(), qualifier=queue.encode())
    return admin.TTableDescriptor(tableName=name, columns=[family])


def table_name(namespace: str, queue: str) -> bytes:
    return f"{namespace}:{queue}".encode()


def check_queue_name(name: str) -> None:
    """HBase refuses some names our queue names allow; say so before touching HBase."""
    if name[0] in ".-":
        raise InvalidArgument("queueName", "HBase table names cannot start with '.' or '-'")
    if name == META_TABLE:
        raise InvalidArgument("queueName", f"'{META_TABLE}' is reserved for queue metadata")


def partitions_per_region(config: Mapping[str, str]) -> int:
    return int(config.get("hbase.hqueue.partitionsPerRegion", "1"))


def split_keys(partitions: int, per_region: int) -> list[bytes]:
    """Region boundaries: the start key of every ``per_region``-th partition after the first."""
    return [rowkey.partition_start(p) for p in range(per_region, partitions, per_region)]


def check_regions(partitions: int, config: Mapping[str, str], max_regions: int) -> None:
    regions = -(-partitions // partitions_per_region(config))
    if regions > max_regions:
        raise InvalidArgument(
            "config",
            f"{partitions} partitions at hbase.hqueue.partitionsPerRegion="
            f"{partitions_per_region(config)} make {regions} regions; this store allows "
            f"{max_regions} per queue: raise hbase.hqueue.partitionsPerRegion",
        )


def table_descriptor(
    admin: Any, namespace: str, queue: str, ttl: int, config: Mapping[str, str]
) -> Any:
    """A Thrift2 TTableDescriptor for the queue (``admin`` is the loaded admin IDL module)."""
    family_config = {k: config[k] for k in _FAMILY_CONFIG if k in config}
    family = admin.TColumnFamilyDescriptor(
        name=FAMILY, maxVersions=1, timeToLive=ttl, configuration=family_config or None
    )
    compression = config.get("hbase.hqueue.compression")
    if compression:
        family.compressionType = getattr(admin.TCompressionAlgorithm, compression.upper())
    per_region = partitions_per_region(config)
    attributes = {b"SPLIT_POLICY": (_NO_SPLITS if per_region == 1 else _PREFIX_SPLITS).encode()}
    if per_region > 1:
        attributes[b"KeyPrefixRegionSplitPolicy.prefix_length"] = b"%d" % rowkey.PARTITION.size
    flush = config.get("hbase.hregion.memstore.flush.size")
    if flush:
        attributes[b"MEMSTORE_FLUSHSIZE"] = flush.encode()
    name = admin.TTableName(ns=namespace.encode(), qualifier=queue.encode())
    return admin.TTableDescriptor(tableName=name, columns=[family], attributes=attributes)
