"""hqueue: a distributed, persistent message queue on HBase, served through Thrift."""

__version__ = "0.1.0"
