"""Push subscriptions (seed 3.5): the registry, and the workers that push new messages.

- :mod:`.registry`: the SubscriptionRegistry interface (and leases); :mod:`.zk_registry` and
  :mod:`.embedded_registry` implement it on ZooKeeper and in the gateway's store.
- :mod:`.scanner` (MessageScanner + bounded buffer), :mod:`.sender` (MessageSender),
  :mod:`.checkpoint` (CheckpointUpdater), :mod:`.workers` (worker per subscriber and partition,
  and the manager that follows the registry).
- :mod:`.service`: the gateway methods subscribe / renewSubscription / unsubscribe /
  addSubscriber / deleteSubscriber / listSubscribers.
"""
