"""Push workers and their manager: one worker per (live subscriber, partition).

:class:`WorkerManager` reacts to registry changes (and re-reads everything every few seconds):
a subscriber that is live gets a :class:`SubscriberRun` (a :class:`SubscriptionWorker` per
subscribed partition plus one :class:`~.checkpoint.CheckpointUpdater`); one that vanished has
its run stopped after a last checkpoint write, which is how its workers pause: nothing is
buffered for it while it is away, and it resumes from the checkpoint when it returns. A new
incarnation (the subscriber registered again) or a record changed by someone else restarts
the run from the registry.

Puts wake the scanners of their partitions through :meth:`WorkerManager.notify_put`, which the
service calls after the store acknowledged the put.

Shutdown order of a run: stop the senders and scanners (an unacknowledged batch is sent again
later), then write the checkpoints of what was acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import gevent
import gevent.event
from hqueue_contract.registry import REPLAY_PARTITION, dlq_name

from ..keys import Extras, MessageExtras
from ..metrics import GatewayStats
from ..store.base import PartitionStore, QueueMeta, Row
from . import groups
from .checkpoint import CheckpointUpdater
from .pull import PullWorker
from .registry import CheckpointConflict, Subscriber, SubscriptionRegistry
from .retry import DeadLetterSink
from .scanner import Id, MessageBuffer, MessageScanner
from .sender import MessageSender, SenderOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PushOptions:
    buffer_messages: int = 10_000  # per worker
    buffer_bytes: int = 8 * 1024 * 1024  # per worker
    sender: SenderOptions = field(default_factory=SenderOptions)
    checkpoint_interval: float = 1.0  # seconds
    resync_interval: float = 5.0  # seconds between full re-reads of the registry
    ack_timeout: float = 30.0  # seconds before pulled, unacknowledged messages go out again
    pull_lease: float = 30.0  # seconds a pull member stays in its group without pulling


def _extras_lookup(
    store: PartitionStore, queue: str, partition: int
) -> Callable[[list[Row]], list[Extras | None] | None]:
    """What a sender asks for the keys and properties of the rows it pushes."""
    extras = MessageExtras(store)

    def of(rows: list[Row]) -> list[Extras | None] | None:
        meta = store.get_queue(queue)
        if meta is None or not extras.has_any(meta):
            return None
        found = extras.get_many(meta, partition, [(r[0], r[1]) for r in rows])
        return [found.get((r[0], r[1])) for r in rows] if found else None

    return of


class SubscriptionWorker:
    """Scanner -> bounded buffer -> sender for one (subscriber, partition)."""

    def __init__(
        self,
        store: PartitionStore,
        sub: Subscriber,
        partition: int,
        options: PushOptions,
        dead_letter: DeadLetterSink | None = None,
        address: str | None = None,
    ) -> None:
        address = address or sub.address
        assert address is not None
        record = sub.record
        replay = partition == REPLAY_PARTITION and record.replay is not None
        # the replay of dead letters reads partition 0 of the dead-letter queue, up to the
        # last letter there when it was asked for (see :mod:`.retry`)
        queue = dlq_name(sub.queue, sub.name) if replay else sub.queue
        read = 0 if replay else partition
        checkpoint = (
            record.replay[0]
            if record.replay is not None and replay
            else (record.checkpoints.get(partition))
        )
        self.partition = partition
        self.queue = queue
        self.buffer = MessageBuffer(options.buffer_messages, options.buffer_bytes)
        self.scanner = MessageScanner(
            store,
            queue,
            read,
            checkpoint,
            None if replay else sub.topics,
            self.buffer,
            chunk=min(options.sender.batch_messages, options.buffer_messages),
        )
        if record.replay is not None and replay:
            self.scanner.stop_after(record.replay[1])
        self.sender = MessageSender(
            address, sub.queue, sub.name, read, self.buffer, checkpoint, options.sender,
            policy=record.retry, max_batch=record.max_batch, dead_letter=dead_letter,
            source_partition=partition,
        )  # fmt: skip
        self.sender.extras_of = _extras_lookup(store, queue, read)
        self._greenlets: list[gevent.Greenlet] = []

    @property
    def wake(self) -> gevent.event.Event:
        return self.scanner.wake

    @property
    def acked(self) -> Id | None:
        return self.sender.acked

    def start(self) -> None:
        self._greenlets = [gevent.spawn(self.scanner.run), gevent.spawn(self.sender.run)]

    def stop(self) -> None:
        gevent.killall(self._greenlets)


class SubscriberRun:
    """The workers and checkpoint updater of one incarnation of a live subscriber."""

    def __init__(
        self,
        store: PartitionStore,
        registry: SubscriptionRegistry,
        sub: Subscriber,
        partitions: Iterable[int],
        options: PushOptions,
        on_conflict: Callable[[], None],
        dead_letter: DeadLetterSink | None = None,
    ) -> None:
        self.sub = sub
        wanted = list(partitions)
        self.workers: dict[int, SubscriptionWorker | PullWorker] = {}
        # a consumer group: each partition goes to one member (.groups); else all to one
        self.assignment = groups.assign(wanted, sub.members) if sub.record.shared else {}
        if sub.record.shared:
            for p, member in self.assignment.items():
                if member.address is None:
                    self.workers[p] = PullWorker(store, sub, p, options)
                else:
                    self.workers[p] = SubscriptionWorker(
                        store, sub, p, options, dead_letter, member.address
                    )
        else:
            if sub.record.replay is not None:
                wanted.append(REPLAY_PARTITION)
            for p in wanted:
                self.workers[p] = SubscriptionWorker(store, sub, p, options, dead_letter)
        self.updater = CheckpointUpdater(
            registry,
            sub.queue,
            sub.name,
            sub.version,
            self.progress,
            on_conflict,
            interval=options.checkpoint_interval,
            epoch=sub.record.epoch,
        )
        self._updater: gevent.Greenlet | None = None

    @property
    def version(self) -> int:
        return self.updater.version

    def progress(self) -> dict[int, Id | None]:
        return {p: w.acked for p, w in self.workers.items()}

    def start(self) -> None:
        for worker in self.workers.values():
            worker.start()
        self._updater = gevent.spawn(self.updater.run)
        if self.sub.record.shared:
            log.info(
                "delivering %s to group %s: %s", self.sub.queue, self.sub.name,
                {m.id: sorted(p for p, a in self.assignment.items() if a is m)
                 for m in self.sub.members},
            )  # fmt: skip
        else:
            log.info(
                "pushing %s to subscriber %s at %s (partitions %s)",
                self.sub.queue, self.sub.name, self.sub.address, sorted(self.workers),
            )  # fmt: skip

    def stop(self, *, flush: bool) -> None:
        for worker in self.workers.values():
            worker.stop()
        if self._updater is not None:
            self._updater.kill()
        if flush:
            try:
                self.updater.flush()
            except CheckpointConflict:
                pass
            except Exception:
                log.exception("final checkpoint of %s/%s failed", self.sub.queue, self.sub.name)


class WorkerManager:
    def __init__(
        self,
        store: PartitionStore,
        registry: SubscriptionRegistry,
        options: PushOptions,
        owns: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.options = options
        # In a gateway cluster a partition is pushed only by its owner (HQueue pushed from the
        # region's coprocessor); alone, this gateway pushes every partition.
        self.owns = owns
        self._runs: dict[tuple[str, str], SubscriberRun] = {}
        # (queue, partition) -> wake-up events of the scanners reading it
        self._wakers: dict[tuple[str, int], list[gevent.event.Event]] = {}
        self._dirty: set[tuple[str | None, str | None]] = set()
        self._kick = gevent.event.Event()
        self._loop: gevent.Greenlet | None = None
        # Set by the gateway: where messages that used up their attempts go (.retry).
        self.dead_letter: DeadLetterSink | None = None
        self.stats: GatewayStats | None = None  # set when metrics run: deliveries, retries

    def start(self) -> None:
        self.registry.start(self.changed)
        self._loop = gevent.spawn(self._reconcile_loop)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.kill()
        for run in list(self._runs.values()):
            run.stop(flush=True)
        self._runs.clear()
        self._wakers.clear()
        self.registry.stop()

    # -- events ---------------------------------------------------------------------------

    def changed(self, queue: str | None, name: str | None) -> None:
        """Registry callback: never blocks, the reconcile loop does the work."""
        self._dirty.add((queue, name))
        self._kick.set()

    def notify_put(self, queue: str, partitions: Iterable[int]) -> None:
        """Called after a put to ``queue`` was acknowledged: wake the partitions' scanners."""
        wakers = self._wakers
        if not wakers:
            return
        for p in partitions:
            for event in wakers.get((queue, p), ()):
                event.set()

    def runs(self) -> dict[tuple[str, str], SubscriberRun]:
        return dict(self._runs)

    def pull_workers(self, queue: str, name: str, member: str) -> list[PullWorker] | None:
        """The pull workers of a group member's partitions; None while the running
        assignment does not know the member yet."""
        run = self._runs.get((queue, name))
        if run is None or not any(m.id == member for m in run.sub.members):
            return None
        return [
            w
            for p, w in sorted(run.workers.items())
            if isinstance(w, PullWorker) and run.assignment[p].id == member
        ]

    # -- reconciling ----------------------------------------------------------------------

    def _reconcile_loop(self) -> None:
        self._dirty.add((None, None))
        while True:
            if not self._kick.wait(self.options.resync_interval):
                self._dirty.add((None, None))
            self._kick.clear()
            dirty, self._dirty = self._dirty, set()
            try:
                self._reconcile(dirty)
            except gevent.GreenletExit:
                raise
            except Exception:
                log.exception("reconciling subscriptions failed; retrying")
                self._dirty |= dirty
                gevent.sleep(1.0)
                self._kick.set()

    def _reconcile(self, dirty: set[tuple[str | None, str | None]]) -> None:
        if (None, None) in dirty:
            queues = set(self.registry.queues()) | {q for q, _ in self._runs}
            targets: set[tuple[str | None, str | None]] = {(q, None) for q in queues}
        else:
            targets = set(dirty)
        for queue, name in sorted(targets, key=lambda t: (t[0] or "", t[1] or "")):
            assert queue is not None
            if name is None:
                found = {s.name: s for s in self.registry.list(queue)}
                names = set(found) | {n for q, n in self._runs if q == queue}
                for n in sorted(names):
                    self._apply(queue, n, found.get(n))
            else:
                self._apply(queue, name, self.registry.get(queue, name))

    def _apply(self, queue: str, name: str, sub: Subscriber | None) -> None:
        key = (queue, name)
        run = self._runs.get(key)
        meta = self.store.get_queue(queue)
        wanted = sub is not None and sub.live and meta is not None
        if run is not None and not run.updater.conflicted and wanted:
            assert sub is not None and meta is not None
            same = (
                run.sub.incarnation == sub.incarnation
                and run.sub.address == sub.address
                and run.sub.topics == sub.topics
                and run.sub.record.partitions == sub.record.partitions
                and run.sub.record.epoch == sub.record.epoch  # reset or replay asked for
                and run.sub.record.retry == sub.record.retry
                and run.sub.record.max_batch == sub.record.max_batch
                and run.sub.record.shared == sub.record.shared
                and run.sub.members == sub.members  # a group's membership changed
                and set(run.workers) - {REPLAY_PARTITION} == set(self._partitions(sub, meta))
            )  # a record changed by someone else shows as a conflict at the next write
            if same:
                return
        if run is not None:
            # a record of a newer registration must not be overwritten (checkpoints written
            # meanwhile by other gateways of a cluster, same epoch, are merged)
            flush = (
                sub is not None
                and not run.updater.conflicted
                and (run.version == sub.version or run.sub.record.epoch == sub.record.epoch)
            )
            self._stop_run(key, run, flush=flush)
            if flush:
                sub = self.registry.get(queue, name)  # read again: our flush bumped the version
                wanted = sub is not None and sub.live and meta is not None
        if not wanted:
            return
        assert sub is not None and meta is not None
        partitions = self._partitions(sub, meta)
        if not partitions:
            return
        new = SubscriberRun(
            self.store, self.registry, sub, partitions, self.options, lambda: self.changed(*key),
            self.dead_letter,
        )  # fmt: skip
        self._runs[key] = new
        if self.stats is not None:
            counters = self.stats.subscriber(queue, name)
            for worker in new.workers.values():
                if isinstance(worker, SubscriptionWorker):
                    worker.sender.counters = counters
        for worker in new.workers.values():
            self._wakers.setdefault((worker.queue, worker.scanner.partition), []).append(
                worker.wake
            )
        new.start()

    def _partitions(self, sub: Subscriber, meta: QueueMeta) -> list[int]:
        owns = self.owns
        return [
            p
            for p in sub.record.partitions
            if p < meta.partitions and (owns is None or owns(meta.name, p))
        ]

    def reconcile_queue(self, queue: str) -> None:
        """Brings the queue's runs in line with ownership now (blocking: a partition that
        moved away has its workers stopped and its checkpoint written on return)."""
        self._reconcile({(queue, None)})

    def _stop_run(self, key: tuple[str, str], run: SubscriberRun, *, flush: bool) -> None:
        if self._runs.get(key) is run:
            del self._runs[key]
        for worker in run.workers.values():
            slot = (worker.queue, worker.scanner.partition)
            events = self._wakers.get(slot)
            if events is not None:
                events[:] = [e for e in events if e is not worker.wake]
                if not events:
                    del self._wakers[slot]
        run.stop(flush=flush)
        log.info("stopped pushing %s to subscriber %s", key[0], key[1])
