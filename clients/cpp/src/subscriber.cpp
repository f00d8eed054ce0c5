// hqueue_subscriber: a subscriber server implementing HQueueSubscriberService. The gateway
// pushes batches of new messages to consumeMessages; this one prints each message (same
// format as hqueue_scanner) and a "batch N" line per call, then answers --status (0
// acknowledges the batch, anything else asks for redelivery).
//
// It prints "listening on HOST:PORT" on stderr once it accepts connections (--port 0 picks a
// free port). TThreadedServer: one thread per connected gateway.
#include <mutex>

#include <thrift/concurrency/ThreadFactory.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TServerSocket.h>

#include "HQueueSubscriberService.h"
#include "common.h"

namespace {

const char* USAGE = "[--host H] [--port P] [--framed] [--compact] [--hex] [--status N]";

class PrintingSubscriber : public hqueue::subscriber::HQueueSubscriberServiceIf {
 public:
  PrintingSubscriber(bool hex, int32_t status) : hex_(hex), status_(status) {}

  int32_t consumeMessages(const std::vector<hqueue::TMessage>& messages) override {
    std::lock_guard<std::mutex> lock(mutex_);  // one batch's lines stay together
    for (const auto& m : messages) std::cout << hqx::formatMessage(m, hex_) << "\n";
    std::cout << "batch " << messages.size() << std::endl;  // flushed: readers see it now
    return status_;
  }

 private:
  std::mutex mutex_;
  const bool hex_;
  const int32_t status_;
};

class ReadyServerSocket : public apache::thrift::transport::TServerSocket {
 public:
  using TServerSocket::TServerSocket;
  void listen() override {
    TServerSocket::listen();
    std::cerr << "listening on " << getPort() << std::endl;
  }
};

int serve(const hqx::Options& o) {
  using namespace apache::thrift;
  if (!o.args.empty()) throw hqx::UsageError("unexpected argument " + o.args[0]);

  auto handler = std::make_shared<PrintingSubscriber>(o.hex, o.status);
  auto processor = std::make_shared<hqueue::subscriber::HQueueSubscriberServiceProcessor>(handler);
  auto socket = std::make_shared<ReadyServerSocket>(o.host, o.port);
  std::shared_ptr<transport::TTransportFactory> transports;
  if (o.framed) transports = std::make_shared<transport::TFramedTransportFactory>();
  else transports = std::make_shared<transport::TBufferedTransportFactory>();
  std::shared_ptr<protocol::TProtocolFactory> protocols;
  if (o.compact) protocols = std::make_shared<protocol::TCompactProtocolFactory>();
  else protocols = std::make_shared<protocol::TBinaryProtocolFactory>();

  server::TThreadedServer server(processor, socket, transports, protocols);
  server.serve();
  return hqx::EXIT_OK;
}

}  // namespace

int main(int argc, char** argv) {
  return hqx::run("hqueue_subscriber", USAGE, argc, argv, "--status ", serve);
}
