"""The state every part of :class:`gateway.service.GatewayService` shares (see service.py
for the parts): its collaborators, its limits, and the lookup of a call's queue."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import validation
from .errors import InvalidArgument
from .ids import PartitionIdAllocator, QueueSequence
from .scanners import ScannerRegistry
from .store.base import PartitionStore, QueueMeta

if TYPE_CHECKING:
    from .cluster.forward import Forwarder
    from .cluster.member import ClusterMember
    from .keys import MessageExtras
    from .metrics import GatewayStats
    from .subscriptions.service import SubscriptionService


@dataclass(frozen=True)
class ServiceLimits:
    max_value_bytes: int = 4 * 1024 * 1024
    max_batch_messages: int = 100_000
    max_list_messages: int = 100_000  # messageScannerGetList returns at most this many
    max_response_bytes: int = 16 * 1024 * 1024  # ... and stops adding once past this size
    default_caching: int = 1000


class _State:
    """The service's attributes, and what every part uses: the queue a call names."""

    def __init__(
        self,
        store: PartitionStore,
        scanners: ScannerRegistry,
        thrift: Any,
        *,
        advertise: str,
        limits: ServiceLimits | None = None,
    ) -> None:
        self.store = store
        self.scanners = scanners
        self.advertise = advertise
        self.limits = limits or ServiceLimits()
        self._allocators: dict[tuple[str, int], PartitionIdAllocator] = {}
        self._sequences: dict[str, QueueSequence] = {}  # shared by a queue's allocators
        self._t = thrift
        # Set by the gateway when subscriptions run: the subscription methods, and the hook
        # that wakes push workers once a put to (queue, partitions) is acknowledged.
        self.subscriptions: SubscriptionService | None = None
        self.after_put: Callable[[str, Iterable[int]], None] | None = None
        # Set by the gateway: message keys and properties (gateway.keys).
        self.extras: MessageExtras | None = None
        # Set by the gateway when replies are on the binary protocol: a scan of one partition
        # may hand its messages over already encoded (EncodedRows) by the store's reader.
        self.encoded_replies = False
        # Set when metrics or the console run: counted once per call (only the byte counts
        # look at each message: a sum of lengths in C).
        self.stats: GatewayStats | None = None
        # Set in a gateway cluster: who owns which partition, and the hop to the owner.
        self.cluster: ClusterMember | None = None
        self.forwarder: Forwarder | None = None
        self._floors: dict[tuple[str, int], int] = {}  # ids start at or above (ms)

    def _queue(self, raw: Any, *, writable: bool = False, enabled: bool = True) -> QueueMeta:
        name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        meta = self.store.get_queue(name) if isinstance(name, str) else None
        if meta is None:
            validation.queue_name(raw)
            raise InvalidArgument("queueName", f"queue '{name}' does not exist")
        if (enabled or writable) and not meta.enabled:
            raise InvalidArgument("queueName", f"queue '{name}' is disabled")
        return meta
