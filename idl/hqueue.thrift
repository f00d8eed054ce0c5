/**
 * hqueue gateway contract.
 *
 * The names, types and field ids of the seed (Taobao HQueue, section 3.5.5 and 4.5) are kept
 * exactly; clients in every language depend on them. New methods may be appended; existing
 * ones never change.
 *
 * Units: timestamps are milliseconds since the Unix epoch; TTLs are seconds.
 */
namespace py hqueue_thrift.gateway
namespace cpp hqueue
namespace php HQueue
namespace java com.hqueue.thrift.generated

typedef binary Text
typedef i32 ScannerID

/*
 * The limits of a MessageID and of a queue: a queue has 1..MAX_PARTITIONS partitions, so
 * partition ids are 0..MAX_PARTITION_ID, and sequence ids are 0..MAX_SEQUENCE within one
 * millisecond (the next id after MAX_SEQUENCE is sequence 0 of the next millisecond).
 * Python: hqueue_contract/limits.py; C: hqueue_contract/hqueue_limits.h.
 */
const i16 MAX_PARTITIONS = 32767
const i16 MAX_PARTITION_ID = 32766
const i16 MAX_SEQUENCE = 32767

/** MessageID: unique and strictly increasing within a partition. */
struct TMessageID {
  1: i64 timestamp,
  2: i16 sequenceID
}

/** A message. id and partitionID are set by the gateway on every returned message. */
struct TMessage {
  1: optional TMessageID id,
  2: optional i16 partitionID,
  3: binary topic,
  4: binary value,
  /** Set by the producer (1..255 bytes): findMessagesByKey finds the message by it. */
  5: optional binary key,
  /** User properties; the gateway adds dlq.* to dead letters. */
  6: optional map<string, binary> properties
}

/**
 * What a scanner reads: startMessageID inclusive, stopMessageID exclusive (in the order of the
 * scan: with reversed, start is the newest end), only the listed topics (none = all), newest
 * first when reversed, and caching as a hint for how many messages to read ahead.
 */
struct TMessageScan {
  1: optional TMessageID startMessageID,
  2: optional TMessageID stopMessageID,
  3: optional list<Text> topics,
  4: optional bool reversed,
  5: optional i32 caching
}

struct TQueueInfo {
  1: Text name,
  2: i16 partitionCount,
  3: i32 ttlSeconds,
  4: bool enabled,
  5: map<string, string> config
}

/** Our fault or the store's: retrying later may succeed. */
exception IOError {
  1: string message
}

/** The caller's fault: the message names the argument and says what is wrong. */
exception IllegalArgument {
  1: string message
}

// ---- subscriptions (seed 3.5), appended ----------------------------------------------------

/** A subscribed partition; startMessageID (inclusive) overrides the stored checkpoint. */
struct TSubscribedPartition {
  1: i16 partitionID,
  2: optional TMessageID startMessageID
}

/**
 * How a push subscriber's failed deliveries are retried: a failed batch again after
 * firstBackoffMs, doubling up to maxBackoffMs, then one message at a time; a message that failed
 * maxAttempts times goes to the dead-letter queue <queue>.dlq.<subscriber> and delivery goes on.
 * Defaults: 16 attempts, 100 ms, 10000 ms. maxAttempts 0 = retry forever (never dead-letter).
 */
struct TRetryPolicy {
  1: optional i32 maxAttempts,
  2: optional i32 firstBackoffMs,
  3: optional i32 maxBackoffMs
}

/** A member of a consumer group (a shared subscriber) and the partitions it has now. */
struct TGroupMember {
  1: Text memberID,
  /** host:port of a push member; unset for a pull member. */
  2: optional Text address,
  3: list<i16> partitions
}

/**
 * What a subscriber wants: no topics = every topic, no partitions = every partition. A partition
 * without a start resumes after its stored checkpoint, or takes only messages written from now
 * on when the subscriber has none yet.
 */
struct TSubscription {
  1: Text name,
  2: optional list<Text> topics,
  3: optional list<TSubscribedPartition> partitions,
  4: optional TRetryPolicy retryPolicy,
  /** At most this many messages per consumeMessages call (default: the gateway's). */
  5: optional i32 maxBatchMessages,
  /** A consumer group: every process subscribing under this name shares the partitions. */
  6: optional bool shared
}

/** One partition of a subscriber as the toolkit shows it. lagSeconds is in seconds. */
struct TPartitionProgress {
  1: i16 partitionID,
  2: optional TMessageID checkpoint,
  3: optional TMessageID newest,
  4: i64 lagMessages,
  5: bool lagMessagesCapped,
  6: double lagSeconds
}

/** A subscriber: address is unset while it is not connected (its workers are paused). */
struct TSubscriberInfo {
  1: Text name,
  2: optional Text address,
  3: list<Text> topics,
  4: list<TPartitionProgress> partitions,
  /** The live members of a shared subscriber (or the one live registration) and their partitions. */
  5: optional list<TGroupMember> members,
  /** Messages in the subscriber's dead-letter queue. */
  6: optional i64 deadLetters,
  7: optional bool shared,
  8: optional TRetryPolicy retryPolicy
}

/** A gateway of a cluster (issue 12): its address, what it owns and how busy it is. */
struct TGatewayInfo {
  1: optional Text address,             // its --advertise host:port
  2: optional string gatewayID,         // this process's member id in ZooKeeper
  3: optional bool leader,              // the member that assigns partitions
  4: optional i32 partitionsOwned,
  5: optional double putRate,           // messages/s put into its partitions (recent average)
  6: optional map<Text, list<i16>> partitions  // queue -> owned partition ids
}

service HQueueService {
  /** Opens a scanner on one partition. */
  ScannerID messageScannerOpen(1: Text queueName, 2: i16 partitionID, 3: TMessageScan messageScan)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** The next message; an empty TMessage (id unset) at the end. */
  TMessage messageScannerGet(1: ScannerID id)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Up to nbMessages messages; an empty list at the end, which also frees the scanner. */
  list<TMessage> messageScannerGetList(1: ScannerID id, 2: i32 nbMessages)
      throws (1: IOError io, 2: IllegalArgument ia)

  void messageScannerClose(1: ScannerID id)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Puts one message on a random partition (or tMessage.partitionID when set). */
  void putMessage(1: Text queueName, 2: TMessage tMessage)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Puts a batch in order: a message's own partitionID when set, else one random partition. */
  void putMessages(1: Text queueName, 2: list<TMessage> tMessages)
      throws (1: IOError io, 2: IllegalArgument ia)

  void putMessageWithPid(1: Text queueName, 2: i16 partitionID, 3: TMessage tMessage)
      throws (1: IOError io, 2: IllegalArgument ia)

  void putMessagesWithPid(1: Text queueName, 2: i16 partitionID, 3: list<TMessage> tMessages)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** host:port of the gateway serving each partition, in partition order. */
  list<Text> getQueueLocations(1: Text queueName)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Opens a scanner over all partitions, merged in MessageID order. */
  ScannerID queueScannerOpen(1: Text queueName, 2: TMessageScan messageScan)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Opens a scanner over the listed partitions, merged in MessageID order. */
  ScannerID combinedScannerOpen(1: Text queueName, 2: list<i16> partitionIDs, 3: TMessageScan messageScan)
      throws (1: IOError io, 2: IllegalArgument ia)

  void createQueue(1: Text queueName, 2: i16 partitionCount, 3: i32 ttlSeconds, 4: map<string, string> config)
      throws (1: IOError io, 2: IllegalArgument ia)

  void deleteQueue(1: Text queueName)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Deletes every message and keeps the partition layout. */
  void truncateQueue(1: Text queueName)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** A disabled queue refuses puts and scans until enabled again. */
  void disableQueue(1: Text queueName)
      throws (1: IOError io, 2: IllegalArgument ia)

  void enableQueue(1: Text queueName)
      throws (1: IOError io, 2: IllegalArgument ia)

  list<TQueueInfo> listQueues()
      throws (1: IOError io, 2: IllegalArgument ia)

  // ---- subscriptions (seed 3.5), appended --------------------------------------------------

  /**
   * Registers a live subscriber serving HQueueSubscriberService at address (host:port) and
   * returns a lease id. The lease lasts leaseSeconds unless renewed; when it ends the
   * subscriber's workers pause. Re-subscribing under the same name replaces the lease.
   */
  i64 subscribe(1: Text queueName, 2: TSubscription subscription, 3: Text address, 4: i32 leaseSeconds)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Extends a lease; false when it is gone (expired, replaced, gateway restarted): subscribe again. */
  bool renewSubscription(1: Text queueName, 2: Text subscriberName, 3: i64 leaseID)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Ends a lease at once (a clean stop); the subscriber and its checkpoints stay. */
  void unsubscribe(1: Text queueName, 2: Text subscriberName, 3: i64 leaseID)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Creates a subscriber (no address yet) starting from now, or from the given starts. */
  void addSubscriber(1: Text queueName, 2: TSubscription subscription)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Deletes a subscriber and its checkpoints; its workers stop. */
  void deleteSubscriber(1: Text queueName, 2: Text subscriberName)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Every subscriber of a queue with its per-partition checkpoint, newest id and lag. */
  list<TSubscriberInfo> listSubscribers(1: Text queueName)
      throws (1: IOError io, 2: IllegalArgument ia)

  // ---- the gateway cluster (issue 12), appended ----------------------------------------------

  /**
   * Internal: a put forwarded by another gateway of the cluster to the partition's owner. The
   * receiver writes it only if it owns the partition (IOError otherwise, never forwarded again).
   */
  void forwardMessages(1: Text queueName, 2: i16 partitionID, 3: list<TMessage> tMessages)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** The live gateways of the cluster (one entry, this gateway, when it runs alone). */
  list<TGatewayInfo> listGateways()
      throws (1: IOError io, 2: IllegalArgument ia)

  /**
   * Moves up to maxMoves partitions between gateways to even out their put rates, keeping the
   * partition counts balanced; returns how many partitions it moved.
   */
  i32 balanceCluster(1: i32 maxMoves)
      throws (1: IOError io, 2: IllegalArgument ia)

  // ---- who may administer (issue 15), appended -----------------------------------------------

  /**
   * Presents an admin token (the gateway's --admin-token-file) for this connection: from then
   * on it may call createQueue, deleteQueue, truncateQueue, disableQueue, enableQueue and
   * deleteSubscriber. A wrong token is IllegalArgument (and is logged).
   */
  void authenticate(1: Text token)
      throws (1: IOError io, 2: IllegalArgument ia)

  // ---- consumers (MetaQ/RocketMQ features, issue 13), appended ----------------------------

  /** Like putMessagesWithPid, returning the assigned ids in order (partitionID -1: the gateway picks). */
  list<TMessageID> putMessagesReturningIds(1: Text queueName, 2: i16 partitionID, 3: list<TMessage> tMessages)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Messages put with this key, newest first (by MessageID; two partitions can hand out
   * the same MessageID, and then the lower partition comes first), from every partition,
   * within the queue's TTL. */
  list<TMessage> findMessagesByKey(1: Text queueName, 2: binary key, 3: i32 limit)
      throws (1: IOError io, 2: IllegalArgument ia)

  /**
   * Moves every partition's checkpoint to just before the first message at or after
   * timestampMs (forwards or backwards); live workers continue from there at once.
   */
  void resetSubscriber(1: Text queueName, 2: Text subscriberName, 3: i64 timestampMs)
      throws (1: IOError io, 2: IllegalArgument ia)

  /**
   * Long poll: messages of the partitions assigned to memberID, as soon as there are any, else
   * an empty list after maxWaitMs. A pull joins or renews the member.
   */
  list<TMessage> pullMessages(1: Text queueName, 2: Text subscriberName, 3: Text memberID, 4: i32 maxMessages, 5: i32 maxWaitMs)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Commits checkpoints up to and including each partition's startMessageID. */
  void ackMessages(1: Text queueName, 2: Text subscriberName, 3: Text memberID, 4: list<TSubscribedPartition> upTo)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Delivers the subscriber's dead letters (those there now) again, to that subscriber only; their count. */
  i64 replayDeadLetters(1: Text queueName, 2: Text subscriberName)
      throws (1: IOError io, 2: IllegalArgument ia)

  // ---- consumers in the gateway cluster (issue 13), appended -------------------------------

  /**
   * Internal: putMessagesReturningIds, or a put of messages with keys or properties, forwarded
   * by another gateway of the cluster to the partition's owner: the assigned ids in order. The
   * receiver writes it only if it owns the partition (IOError otherwise, never forwarded again).
   */
  list<TMessageID> forwardMessagesReturningIds(1: Text queueName, 2: i16 partitionID, 3: list<TMessage> tMessages)
      throws (1: IOError io, 2: IllegalArgument ia)

  /**
   * Internal: the part of a member's pullMessages that another gateway serves for the
   * partitions this one owns; it neither joins nor renews the member (the gateway the member
   * pulls through does).
   */
  list<TMessage> forwardPull(1: Text queueName, 2: Text subscriberName, 3: Text memberID, 4: i32 maxMessages, 5: i32 maxWaitMs)
      throws (1: IOError io, 2: IllegalArgument ia)

  /** Internal: ackMessages for the partitions this gateway owns, forwarded by another gateway. */
  void forwardAck(1: Text queueName, 2: Text subscriberName, 3: Text memberID, 4: list<TSubscribedPartition> upTo)
      throws (1: IOError io, 2: IllegalArgument ia)
}
