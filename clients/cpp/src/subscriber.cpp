// hqueue_subscriber: a subscriber server implementing HQueueSubscriberService. The gateway
// pushes batches of new messages to consumeMessages; this one prints each message (same
// format as hqueue_scanner) and a "batch N" line per call, then answers --status (0
// acknowledges the batch, anything else asks for redelivery).
//
// It prints "listening on HOST:PORT" on stderr once it accepts connections (--port 0 picks a
// free port). TThreadedServer: one thread per connected gateway.
//
// With --gateway HOST:PORT --queue Q --name S it registers itself: subscribe(Q, {S, shared},
// "HOST:PORT", --lease) once listening ("registered lease N" on stderr), renews the lease every
// third of it (subscribing again when the gateway answers that it is gone), and on SIGTERM or
// SIGINT unsubscribes and stops cleanly (exit 0). --shared joins the consumer group S.
#include <csignal>
#include <condition_variable>
#include <mutex>
#include <pthread.h>
#include <thread>

#include <thrift/concurrency/ThreadFactory.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TServerSocket.h>

#include "HQueueSubscriberService.h"
#include "common.h"

namespace {

const char* USAGE =
    "[--host H] [--port P] [--framed] [--compact] [--hex] [--status N] "
    "[--gateway HOST:PORT --queue Q --name S [--shared] [--lease SECONDS]]";

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

// Keeps the subscriber registered with the gateway while it runs (see the top of the file).
class Registration {
 public:
  explicit Registration(const hqx::Options& o) : o_(o) {
    auto colon = o.gateway.rfind(':');
    if (colon == std::string::npos) throw hqx::UsageError("--gateway must be HOST:PORT");
    host_ = o.gateway.substr(0, colon);
    port_ = static_cast<int>(hqx::parseInt("--gateway port", o.gateway.substr(colon + 1), 1, 65535));
    if (o.queue.empty() || o.name.empty()) throw hqx::UsageError("--gateway needs --queue and --name");
  }

  // Called once the server listens on `port`; registers, then renews on a thread of its own.
  void start(int port) {
    address_ = o_.host + ":" + std::to_string(port);
    subscribe();  // the first registration's failure is the program's failure
    thread_ = std::thread([this] { renewLoop(); });
  }

  // Stops renewing and ends the lease at once (the gateway writes the checkpoints).
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    try {
      if (lease_ != 0) connection().unsubscribe(o_.queue, o_.name, lease_);
      std::cerr << "unsubscribed" << std::endl;
    } catch (const std::exception& e) {
      std::cerr << "unsubscribing failed (the lease will expire): " << e.what() << std::endl;
    }
  }

 private:
  hqueue::HQueueServiceClient& connection() {
    if (!gateway_) gateway_ = std::make_unique<hqx::Gateway>(o_, host_, port_);
    return *gateway_->client;
  }

  void subscribe() {
    hqueue::TSubscription s;
    s.name = o_.name;
    if (o_.shared) {
      s.__set_shared(true);
    }
    lease_ = connection().subscribe(o_.queue, s, address_, o_.lease);
    std::cerr << "registered lease " << lease_ << std::endl;
  }

  void renewLoop() {
    auto interval = std::chrono::milliseconds(o_.lease * 1000 / 3);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
      lock.unlock();
      try {
        if (!connection().renewSubscription(o_.queue, o_.name, lease_)) {
          std::cerr << "lease gone; subscribing again" << std::endl;
          subscribe();
        }
        interval = std::chrono::milliseconds(o_.lease * 1000 / 3);
      } catch (const std::exception& e) {
        std::cerr << "renewing failed (" << e.what() << "); retrying" << std::endl;
        gateway_.reset();  // a new connection next time
        interval = std::chrono::milliseconds(std::min(1000, o_.lease * 1000 / 3));
      }
      lock.lock();
    }
  }

  const hqx::Options o_;
  std::string host_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<hqx::Gateway> gateway_;  // used by one thread at a time
  int64_t lease_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

class ReadyServerSocket : public apache::thrift::transport::TServerSocket {
 public:
  ReadyServerSocket(const std::string& host, int port, Registration* registration)
      : TServerSocket(host, port), registration_(registration) {}
  void listen() override {
    TServerSocket::listen();
    std::cerr << "listening on " << getPort() << std::endl;
    if (registration_ != nullptr) registration_->start(getPort());
  }

 private:
  Registration* registration_;
};

int serve(const hqx::Options& o) {
  using namespace apache::thrift;
  if (!o.args.empty()) throw hqx::UsageError("unexpected argument " + o.args[0]);

  std::unique_ptr<Registration> registration;
  if (!o.gateway.empty()) registration = std::make_unique<Registration>(o);
  // SIGTERM/SIGINT are taken by a thread of their own (sigwait), blocked everywhere else, so
  // stopping is ordinary code: unsubscribe, then stop the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto handler = std::make_shared<PrintingSubscriber>(o.hex, o.status);
  auto processor = std::make_shared<hqueue::subscriber::HQueueSubscriberServiceProcessor>(handler);
  auto socket = std::make_shared<ReadyServerSocket>(o.host, o.port, registration.get());
  std::shared_ptr<transport::TTransportFactory> transports;
  if (o.framed) transports = std::make_shared<transport::TFramedTransportFactory>();
  else transports = std::make_shared<transport::TBufferedTransportFactory>();
  std::shared_ptr<protocol::TProtocolFactory> protocols;
  if (o.compact) protocols = std::make_shared<protocol::TCompactProtocolFactory>();
  else protocols = std::make_shared<protocol::TBinaryProtocolFactory>();

  server::TThreadedServer server(processor, socket, transports, protocols);
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::cerr << "stopping on signal " << sig << std::endl;
    if (registration) registration->stop();
    server.stop();
  });
  stopper.detach();  // ends with the process; serve() returns after server.stop()
  server.serve();
  std::cerr << "stopped" << std::endl;
  return hqx::EXIT_OK;
}

}  // namespace

int main(int argc, char** argv) {
  return hqx::run("hqueue_subscriber", USAGE, argc, argv,
                  "--status --gateway --queue --name --shared --lease ", serve);
}
