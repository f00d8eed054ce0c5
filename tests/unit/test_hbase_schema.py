"""The HBase layout: addresses, split keys and descriptors (the key arithmetic of reversed
scans is the row key's: tests/unit/test_rowkey.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidArgument
from gateway.store import hbase_schema as schema
from gateway.store.hbase import _admin_idl


def test_address_defaults_and_options() -> None:
    a = schema.HBaseAddress.parse("hbase://db1:9090")
    assert (a.host, a.port, a.admin_host, a.admin_port) == ("db1", 9090, "db1", 9091)
    assert (a.framed, a.compact, a.namespace, a.pool_size, a.timeout) == (
        False, False, "hqueue", 16, 10.0,
    )  # fmt: skip
    b = schema.HBaseAddress.parse(
        "hbase://h:1?admin=a:2&transport=framed&protocol=compact&namespace=q_1&pool=4&timeout=2.5"
    )
    assert (b.admin_host, b.admin_port, b.framed, b.compact) == ("a", 2, True, True)
    assert (b.namespace, b.pool_size, b.timeout) == ("q_1", 4, 2.5)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://h:1", "expected hbase://HOST:PORT"),
        ("hbase://h:1?colour=red", "unknown parameter(s) colour"),
        ("hbase://h:1?admin=nope", "admin must be HOST:PORT"),
        ("hbase://h:1?transport=udp", "transport must be buffered or framed"),
        ("hbase://h:1?protocol=json", "protocol must be binary or compact"),
        ("hbase://h:1?pool=0", "pool must be > 0"),
        ("hbase://h:1?timeout=soon", "timeout must be a number"),
        ("hbase://h:1?namespace=a:b", "namespace must be letters"),
    ],
)
def test_bad_addresses_name_the_problem(url: str, problem: str) -> None:
    with pytest.raises(
        ValueError, match="--store: " + problem.replace("(", r"\(").replace(")", r"\)")
    ):
        schema.HBaseAddress.parse(url)


def test_split_keys_fall_on_partition_boundaries() -> None:
    assert schema.split_keys(1, 1) == []
    assert schema.split_keys(4, 1) == [b"\x00\x01", b"\x00\x02", b"\x00\x03"]
    assert schema.split_keys(5, 2) == [b"\x00\x02", b"\x00\x04"]
    assert schema.split_keys(300, 256) == [b"\x01\x00"]


def test_too_many_regions_is_the_callers_to_fix() -> None:
    schema.check_regions(4096, {}, 4096)
    with pytest.raises(InvalidArgument, match=r"config: 32767 partitions .* 32767 regions"):
        schema.check_regions(32767, {}, 4096)
    schema.check_regions(32767, {"hbase.hqueue.partitionsPerRegion": "8"}, 4096)


def test_names_hbase_refuses() -> None:
    schema.check_queue_name("orders.v2-eu_1")
    for bad in (".hidden", "-x", schema.META_TABLE):
        with pytest.raises(InvalidArgument, match="queueName"):
            schema.check_queue_name(bad)


def test_descriptor_carries_the_seed_settings() -> None:
    admin: Any = _admin_idl()
    config = {
        "hbase.hqueue.partitionsPerRegion": "4",
        "hbase.hregion.memstore.flush.size": "67108864",
        "hbase.hstore.blockingStoreFiles": "20",
        "hbase.hstore.compaction.min": "3",
        "hbase.hqueue.compression": "lz4",
    }
    d = schema.table_descriptor(admin, "ns", "q", 600, config)
    assert (d.tableName.ns, d.tableName.qualifier) == (b"ns", b"q")
    (family,) = d.columns
    assert (family.name, family.maxVersions, family.timeToLive) == (b"message", 1, 600)
    assert family.compressionType == admin.TCompressionAlgorithm.LZ4
    assert family.configuration == {
        "hbase.hstore.blockingStoreFiles": "20",
        "hbase.hstore.compaction.min": "3",
    }
    assert d.attributes[b"MEMSTORE_FLUSHSIZE"] == b"67108864"
    assert d.attributes[b"SPLIT_POLICY"].endswith(b"KeyPrefixRegionSplitPolicy")
    assert d.attributes[b"KeyPrefixRegionSplitPolicy.prefix_length"] == b"2"
    one = schema.table_descriptor(admin, "ns", "q", 600, {})
    assert one.attributes[b"SPLIT_POLICY"].endswith(b"DisabledRegionSplitPolicy")


def test_first_line_of_an_hbase_error_takes_bytes_and_text() -> None:
    """Thrift1's IOError carries bytes (formatting it raised TypeError), Thrift2's text."""
    from gateway.store.hbase import _first_line

    assert _first_line(b"org.apache.hadoop.hbase.TableNotFoundException: t\n\tat x") == (
        "org.apache.hadoop.hbase.TableNotFoundException: t"
    )
    assert _first_line("  refused\nmore") == "refused"
    assert _first_line(None) == ""
