"""The subscriber runtime (seed 3.5.2, 4.4): receive pushed messages from an hqueue gateway.

Usage (under gevent: monkey-patch first)::

    from gevent import monkey; monkey.patch_all()
    from subscriber_runtime import Queue, Subscription, PrintListener

    queue = Queue("q1", gateway="127.0.0.1:9190")            # zookeeper="zk:2181/hq" optional
    sub = queue.create_subscriber(Subscription("s1", topics=["t"], partitions=[0, 1]),
                                  [PrintListener()])
    sub.start()
    ...
    sub.stop("done")

Or as a process: ``hqueue-subscriber --gateway H:P --queue Q --name S``.
"""

from typing import Any

# Loaded on first use, so that ``hqueue-subscriber`` can monkey-patch before anything imports
# thriftpy2 or opens a socket (importing a module must never have that side effect).
_EXPORTS = {
    "BlackHoleListener": "listeners",
    "JsonLinesListener": "listeners",
    "MessageListener": "listeners",
    "PrintListener": "listeners",
    "load_listener": "listeners",
    "Queue": "subscriber",
    "Subscriber": "subscriber",
    "create_subscriber": "subscriber",
    "SubscriberOptions": "options",
    "Subscription": "subscription",
    # Subscription(retry=...): the record's type, from hqueue_contract.registry (it was
    # importable only as hqueue.subscriptions.RetryPolicy before the contract package)
    "RetryPolicy": "subscription",
    "parse_partitions": "subscription",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'subscriber_runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
