/**
 * The service a subscriber serves (seed section 3.5.5). The gateway pushes batches of new
 * messages to it; a return of 0 acknowledges the batch, anything else asks for redelivery.
 */
include "hqueue.thrift"

namespace py hqueue_thrift.subscriber
namespace cpp hqueue.subscriber
namespace php HQueue.Subscriber
namespace java com.hqueue.thrift.generated.subscriber

service HQueueSubscriberService {
  i32 consumeMessages(1: list<hqueue.TMessage> messages)
}
