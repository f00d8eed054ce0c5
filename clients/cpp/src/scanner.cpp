// hqueue_scanner: opens a scanner (the whole queue merged in MessageID order, or one
// partition with --partition), reads it with messageScannerGetList until the empty list (which
// also frees it on the gateway), and prints one message per line:
//   PARTITION <tab> TIMESTAMP_MS <tab> SEQUENCE <tab> TOPIC <tab> VALUE
// Topics and values are printed with \xNN escapes, or hex-encoded with --hex.
//
//   hqueue_scanner --port 9190 --topic clicks --reverse q1
#include "common.h"

namespace {

const char* USAGE =
    "[--host H] [--port P] [--timeout S] [--framed] [--compact] [--hex] [--batch N] [--partition P]\n"
    "       [--topic T]... [--reverse] QUEUE";

int scan(const hqx::Options& o) {
  if (o.args.size() != 1) throw hqx::UsageError("expected one QUEUE argument");
  hqx::Gateway gw(o);

  hqueue::TMessageScan spec;
  if (!o.topics.empty()) spec.__set_topics(o.topics);
  if (o.reverse) spec.__set_reversed(true);
  spec.__set_caching(o.batch);
  const int32_t id = o.partition >= 0
      ? gw->messageScannerOpen(o.args[0], static_cast<int16_t>(o.partition), spec)
      : gw->queueScannerOpen(o.args[0], spec);

  size_t count = 0;
  try {
    std::vector<hqueue::TMessage> batch;
    for (;;) {
      gw->messageScannerGetList(batch, id, o.batch);
      if (batch.empty()) break;  // the end; the gateway has freed the scanner
      for (const auto& m : batch) std::cout << hqx::formatMessage(m, o.hex) << "\n";
      count += batch.size();
    }
  } catch (const apache::thrift::transport::TTransportException&) {
    throw;  // the connection is gone, and the scanner with it (the gateway expires it)
  } catch (...) {
    try {
      gw->messageScannerClose(id);  // give the scanner back before reporting the failure
    } catch (...) {
    }
    throw;
  }
  std::cout.flush();
  std::cerr << "read " << count << " message(s)\n";
  return hqx::EXIT_OK;
}

}  // namespace

int main(int argc, char** argv) {
  return hqx::run("hqueue_scanner", USAGE, argc, argv, "--batch --partition --topic --reverse ",
                  scan);
}
