// What the hqueue C++ examples share: command-line options, a connection to the gateway with
// the transport/protocol the gateway was started with, the text formats of messages, and the
// mapping of failures to messages and exit codes (the same codes as the `hqueue` toolkit).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <thrift/Thrift.h>
#include <thrift/TApplicationException.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/protocol/TCompactProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSSLSocket.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include "HQueueService.h"
#include "hqueue_constants.h"

namespace hqx {

enum Exit { EXIT_OK = 0, EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_UNAVAILABLE = 3 };

// A bad command line or bad input: the message is printed, the exit code is EXIT_USAGE.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string host = "127.0.0.1";
  int port = 9190;
  bool framed = false;
  bool compact = false;
  bool hex = false;
  int batch = 1000;
  int partition = -1;  // -1: none given
  bool reverse = false;
  int status = 0;
  int timeout = 30;  // seconds, for connecting, sending and each answer
  std::string tlsCa;    // --tls-ca: speak TLS, trusting this CA (PEM)
  std::string tlsCert;  // --tls-cert/--tls-key: a client certificate (mutual TLS)
  std::string tlsKey;
  std::vector<std::string> topics;
  std::vector<std::string> args;  // positional arguments
  // hqueue_subscriber: register through this gateway (HOST:PORT) as subscriber `name` of `queue`
  std::string gateway;
  std::string queue;
  std::string name;
  bool shared = false;  // join the consumer group `name`
  int lease = 10;       // seconds
};

inline long parseInt(const std::string& flag, const std::string& text, long low, long high) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < low || v > high) {
    throw UsageError(flag + " must be an integer in " + std::to_string(low) + ".." +
                     std::to_string(high) + ", got '" + text + "'");
  }
  return v;
}

// Parses the flags every example understands; `allowed` lists the extra ones this one takes.
inline Options parseOptions(int argc, char** argv, const std::string& allowed) {
  Options o;
  auto takes = [&](const std::string& flag) {
    return allowed.find(flag + " ") != std::string::npos;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--host") o.host = value();
    else if (a == "--port") o.port = static_cast<int>(parseInt(a, value(), 0, 65535));
    else if (a == "--timeout") o.timeout = static_cast<int>(parseInt(a, value(), 1, 86400));
    else if (a == "--framed") o.framed = true;
    else if (a == "--compact") o.compact = true;
    else if (a == "--hex") o.hex = true;
    else if (a == "--tls-ca") o.tlsCa = value();
    else if (a == "--tls-cert") o.tlsCert = value();
    else if (a == "--tls-key") o.tlsKey = value();
    else if (a == "--batch" && takes(a)) o.batch = static_cast<int>(parseInt(a, value(), 1, 1000000));
    else if (a == "--partition" && takes(a)) o.partition = static_cast<int>(parseInt(a, value(), 0, hqueue::g_hqueue_constants.MAX_PARTITION_ID));
    else if (a == "--topic" && takes(a)) o.topics.push_back(value());
    else if (a == "--reverse" && takes(a)) o.reverse = true;
    else if (a == "--status" && takes(a)) o.status = static_cast<int>(parseInt(a, value(), -2147483648L, 2147483647L));
    else if (a == "--gateway" && takes(a)) o.gateway = value();
    else if (a == "--queue" && takes(a)) o.queue = value();
    else if (a == "--name" && takes(a)) o.name = value();
    else if (a == "--shared" && takes(a)) o.shared = true;
    else if (a == "--lease" && takes(a)) o.lease = static_cast<int>(parseInt(a, value(), 1, 3600));
    else if (a.size() > 1 && a[0] == '-') throw UsageError("unknown option " + a);
    else o.args.push_back(a);
  }
  return o;
}

inline std::string toHex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

inline std::string fromHex(const std::string& hex, const std::string& what) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw UsageError(what + " is not hex: '" + hex + "'");
  };
  if (hex.size() % 2) throw UsageError(what + " has an odd number of hex digits");
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    out.push_back(static_cast<char>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
  }
  return out;
}

// Printable ASCII as is, anything else as \xNN (and a backslash as \\): one message per line.
inline std::string escape(const std::string& bytes) {
  std::string out;
  char buf[5];
  for (unsigned char c : bytes) {
    if (c == '\\') out += "\\\\";
    else if (c >= 0x20 && c < 0x7f) out.push_back(static_cast<char>(c));
    else {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

// PARTITION <tab> TIMESTAMP <tab> SEQUENCE <tab> TOPIC <tab> VALUE
inline std::string formatMessage(const hqueue::TMessage& m, bool hex) {
  std::string line = std::to_string(m.partitionID) + "\t" + std::to_string(m.id.timestamp) +
                     "\t" + std::to_string(m.id.sequenceID) + "\t";
  line += hex ? toHex(m.topic) : escape(m.topic);
  line += "\t";
  line += hex ? toHex(m.value) : escape(m.value);
  return line;
}

using apache::thrift::protocol::TProtocol;
using apache::thrift::transport::TTransport;

inline std::shared_ptr<TTransport> wrapTransport(std::shared_ptr<TTransport> socket, bool framed) {
  using namespace apache::thrift::transport;
  if (framed) return std::make_shared<TFramedTransport>(socket);
  return std::make_shared<TBufferedTransport>(socket);
}

inline std::shared_ptr<TProtocol> makeProtocol(std::shared_ptr<TTransport> t, bool compact) {
  using namespace apache::thrift::protocol;
  if (compact) return std::make_shared<TCompactProtocol>(t);
  return std::make_shared<TBinaryProtocol>(t);
}

// A client of the gateway; owns its transport (closed by the destructor).
struct Gateway {
  std::shared_ptr<apache::thrift::transport::TSSLSocketFactory> sslFactory;
  std::shared_ptr<TTransport> transport;
  std::unique_ptr<hqueue::HQueueServiceClient> client;

  explicit Gateway(const Options& o) : Gateway(o, o.host, o.port) {}
  // `host`:`port` instead of --host/--port (hqueue_subscriber's --gateway)
  Gateway(const Options& o, const std::string& host, int port) {
    std::shared_ptr<apache::thrift::transport::TSocket> socket;
    if (o.tlsCa.empty()) {
      if (!o.tlsCert.empty()) throw UsageError("--tls-cert needs --tls-ca");
      socket = std::make_shared<apache::thrift::transport::TSocket>(host, port);
    } else {
      // verifies the gateway's certificate against --tls-ca and its name against --host
      using apache::thrift::transport::TSSLSocketFactory;
      auto factory = std::make_shared<TSSLSocketFactory>(apache::thrift::transport::TLSv1_2);
      factory->loadTrustedCertificates(o.tlsCa.c_str());
      factory->authenticate(true);
      if (!o.tlsCert.empty()) {
        factory->loadCertificate(o.tlsCert.c_str());
        factory->loadPrivateKey((o.tlsKey.empty() ? o.tlsCert : o.tlsKey).c_str());
      }
      sslFactory = factory;  // must outlive the socket
      socket = factory->createSocket(host, port);
    }
    socket->setConnTimeout(o.timeout * 1000);
    socket->setRecvTimeout(o.timeout * 1000);
    socket->setSendTimeout(o.timeout * 1000);
    transport = wrapTransport(socket, o.framed);
    transport->open();
    client = std::make_unique<hqueue::HQueueServiceClient>(makeProtocol(transport, o.compact));
  }
  ~Gateway() {
    try {
      transport->close();
    } catch (...) {
    }
  }
  hqueue::HQueueServiceClient* operator->() { return client.get(); }
};

// Runs `body` and turns every failure into a message on stderr and an exit code.
template <typename Body>
int run(const char* program, const char* usage, int argc, char** argv, const std::string& allowed,
        Body body) {
  // Thrift logs socket errors on stderr by itself; the messages below say it once, clearly.
  apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});
  Options o;
  try {
    o = parseOptions(argc, argv, allowed);
    return body(o);
  } catch (const UsageError& e) {
    std::cerr << program << ": " << e.what() << "\nusage: " << program << " " << usage << "\n";
    return EXIT_USAGE;
  } catch (const hqueue::IllegalArgument& e) {
    std::cerr << program << ": the gateway refused an argument: " << e.message << "\n";
    return EXIT_REFUSED;
  } catch (const hqueue::IOError& e) {
    std::cerr << program << ": the gateway failed (retry later): " << e.message << "\n";
    return EXIT_UNAVAILABLE;
  } catch (const apache::thrift::transport::TTransportException& e) {
    std::cerr << program << ": connection to gateway " << o.host << ":" << o.port
              << " failed: " << e.what()
              << " (is it running, with the same --framed/--compact?)\n";
    return EXIT_UNAVAILABLE;
  } catch (const apache::thrift::TApplicationException& e) {
    std::cerr << program << ": the gateway answered with an application error: " << e.what()
              << "\n";
    return EXIT_UNAVAILABLE;
  } catch (const apache::thrift::TException& e) {
    std::cerr << program << ": thrift error (is --framed/--compact the gateway's?): " << e.what()
              << "\n";
    return EXIT_UNAVAILABLE;
  }
}

}  // namespace hqx
