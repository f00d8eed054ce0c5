// hqueue_producer: reads messages from stdin, one per line, and puts them in batches
// (putMessages, or putMessagesWithPid with --partition). Each batch is acknowledged once it is
// durable; the batch order is kept within a partition.
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

  hqx::Gateway gw(o);
  size_t batches = 0;
  for (size_t i = 0; i < messages.size(); i += o.batch) {
    auto end = messages.begin() + std::min(messages.size(), i + o.batch);
    std::vector<hqueue::TMessage> batch(messages.begin() + i, end);
    if (o.partition >= 0) gw->putMessagesWithPid(queue, static_cast<int16_t>(o.partition), batch);
    else gw->putMessages(queue, batch);
    ++batches;
  }
  std::cerr << "put " << messages.size() << " message(s) in " << batches << " batch(es)\n";
  return hqx::EXIT_OK;
}

}  // namespace

int main(int argc, char** argv) {
  return hqx::run("hqueue_producer", USAGE, argc, argv, "--batch --partition ", produce);
}
