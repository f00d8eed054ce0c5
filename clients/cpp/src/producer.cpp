// hqueue_producer: reads messages from stdin, one per line, and puts them in batches
// (putMessages, or putMessagesWithPid with --partition). Each batch is acknowledged once it is
// durable; the batch order is kept within a partition.
//
// With --partition, batches go straight to the gateway that owns the partition in a gateway
// cluster (getQueueLocations, asked once); when that gateway refuses (IOError: the partition
// moved) or cannot be reached, the locations are asked again and the batch is sent once more.
// Any gateway would forward it to the owner: routing saves that hop.
//
//   printf 'clicks\thttp://example.com\n' | hqueue_producer --port 9190 q1
//   printf '636c69636b73\t00ff\n' | hqueue_producer --hex --batch 500 q1
#include "common.h"

namespace {

const char* USAGE =
    "[--host H] [--port P] [--timeout S] [--framed] [--compact] [--hex] [--batch N] [--partition P] QUEUE\n"
    "  stdin: one message per line, TOPIC<tab>VALUE (both hex-encoded with --hex)";

int produce(const hqx::Options& o) {
  if (o.args.size() != 1) throw hqx::UsageError("expected one QUEUE argument");
  const std::string queue = o.args[0];

  // Read and check all of stdin before connecting: a bad line puts nothing.
  std::vector<hqueue::TMessage> messages;
  std::string line;
  for (long n = 1; std::getline(std::cin, line); ++n) {
    auto tab = line.find('\t');
    const std::string where = "stdin line " + std::to_string(n);
    if (tab == std::string::npos) throw hqx::UsageError(where + ": expected TOPIC<tab>VALUE");
    hqueue::TMessage m;
    std::string topic = line.substr(0, tab), value = line.substr(tab + 1);
    m.topic = o.hex ? hqx::fromHex(topic, where + " topic") : topic;
    m.value = o.hex ? hqx::fromHex(value, where + " value") : value;
    messages.push_back(std::move(m));
  }

  hqx::Gateway seed(o);
  std::unique_ptr<hqx::Gateway> owner;  // the partition's owner, when it is another gateway
  auto route = [&]() {
    owner.reset();
    std::vector<std::string> locations;
    seed->getQueueLocations(locations, queue);
    const std::string self = o.host + ":" + std::to_string(o.port);
    if (o.partition < static_cast<int>(locations.size())) {
      const std::string& where = locations[o.partition];
      auto colon = where.rfind(':');
      if (!where.empty() && where != self && colon != std::string::npos) {
        hqx::Options at = o;
        at.host = where.substr(0, colon);
        at.port = static_cast<int>(hqx::parseInt("owner port", where.substr(colon + 1), 1, 65535));
        owner = std::make_unique<hqx::Gateway>(at);
      }
    }
  };
  if (o.partition >= 0) route();
  size_t batches = 0;
  for (size_t i = 0; i < messages.size(); i += o.batch) {
    auto end = messages.begin() + std::min(messages.size(), i + o.batch);
    std::vector<hqueue::TMessage> batch(messages.begin() + i, end);
    if (o.partition < 0) {
      seed->putMessages(queue, batch);
    } else {
      const auto pid = static_cast<int16_t>(o.partition);
      try {
        (owner ? *owner : seed)->putMessagesWithPid(queue, pid, batch);
      } catch (const hqueue::IOError&) {
        route();  // the partition moved: ask again, send once more
        (owner ? *owner : seed)->putMessagesWithPid(queue, pid, batch);
      } catch (const apache::thrift::transport::TTransportException&) {
        if (!owner) throw;  // the seed itself is gone
        route();
        (owner ? *owner : seed)->putMessagesWithPid(queue, pid, batch);
      }
    }
    ++batches;
  }
  std::cerr << "put " << messages.size() << " message(s) in " << batches << " batch(es)\n";
  return hqx::EXIT_OK;
}

}  // namespace

int main(int argc, char** argv) {
  return hqx::run("hqueue_producer", USAGE, argc, argv, "--batch --partition ", produce);
}
