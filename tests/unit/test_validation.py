import pytest

from gateway import validation
from gateway.errors import InvalidArgument


@pytest.mark.parametrize("name", [b"q", b"a" * 128, b"Q_1.x-y", "str_ok"])
def test_good_queue_names(name: object) -> None:
    assert validation.queue_name(name)


@pytest.mark.parametrize("name", [b"", b"a" * 129, b"bad name", b"sl/ash", b"\xff", None, 5])
def test_bad_queue_names_name_the_argument(name: object) -> None:
    with pytest.raises(InvalidArgument, match=r"^queueName: "):
        validation.queue_name(name)


def test_config_accepts_the_seed_keys() -> None:
    cfg = validation.queue_config(
        {
            "hbase.hqueue.partitionsPerRegion": "4",
            "hbase.hregion.memstore.flush.size": "134217728",
            "hbase.hregion.majorcompaction": "0",
            "hbase.hstore.compaction.min": "16",
            "hbase.hstore.compaction.max": "32",
            "hbase.hqueue.compression": "lz4",
            "hbase.hstore.blockingStoreFiles": "64",
        },
        partitions=32,
    )
    assert cfg["hbase.hqueue.compression"] == "LZ4"
    assert cfg["hbase.hqueue.partitionsPerRegion"] == "4"


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"hbase.unknown": "1"}, "unknown key 'hbase.unknown'"),
        ({"hbase.hqueue.partitionsPerRegion": "x"}, "partitionsPerRegion"),
        ({"hbase.hqueue.partitionsPerRegion": "64"}, "more than the queue's 32 partitions"),
        ({"hbase.hqueue.compression": "RAR"}, "compression"),
        ({"hbase.hstore.compaction.min": "40", "hbase.hstore.compaction.max": "32"}, "above"),
    ],
)
def test_config_rejects_with_the_key_named(config: dict, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        validation.queue_config(config, partitions=32)


@pytest.mark.parametrize("count", [0, -1, 32768, None])
def test_partition_count_range(count: object) -> None:
    with pytest.raises(InvalidArgument, match="partitionCount"):
        validation.partition_count(count)


def test_partition_out_of_range_says_the_range() -> None:
    with pytest.raises(InvalidArgument, match=r"partitionID: 4 is out of range: .*0\.\.3"):
        validation.partition(4, 4)
