package com.hqueue.examples;

import com.hqueue.thrift.generated.TMessage;
import com.hqueue.thrift.generated.TSubscription;
import com.hqueue.thrift.generated.subscriber.HQueueSubscriberService;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;

/**
 * A push subscriber: serves HQueueSubscriberService (binary protocol, buffered transport, what
 * the gateway speaks to subscribers), prints each message of a batch as Scanner does and a
 * "batch N" line, and answers --status (0 acknowledges). With --gateway HOST:PORT --queue Q
 * --name S it registers through the gateway once listening ("registered lease N" on stderr),
 * renews the lease every third of --lease, subscribes again when the lease is gone, and on
 * SIGTERM/SIGINT unsubscribes ("unsubscribed") and stops. --shared joins the consumer group S.
 */
public final class Subscriber {
  static final String USAGE = "[--host H] [--port P] [--hex] [--status N] "
      + "[--gateway HOST:PORT --queue Q --name S [--shared] [--lease SECONDS]]";

  private Subscriber() {}

  public static void main(String[] argv) {
    System.exit(Common.run("Subscriber", USAGE, argv,
        List.of("--status", "--gateway", "--queue", "--name", "--lease"), List.of("--shared"),
        Subscriber::serve));
  }

  static final class Printer implements HQueueSubscriberService.Iface {
    private final boolean hex;
    private final int status;
    private final PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    Printer(boolean hex, int status) {
      this.hex = hex;
      this.status = status;
    }

    @Override
    public synchronized int consumeMessages(List<TMessage> messages) {
      for (TMessage m : messages) {
        out.println(Common.format(m, hex));
      }
      out.println("batch " + messages.size());
      out.flush();
      return status;
    }
  }

  /** The lease kept with the gateway; one thread renews, the shutdown hook ends it. */
  static final class Registration {
    private final Common.Options gatewayOptions = new Common.Options();
    private final ByteBuffer queue;
    private final TSubscription subscription = new TSubscription();
    private final String address;
    private final int lease;
    private Common.Gateway gateway;
    private long leaseId;
    private final CountDownLatch stopping = new CountDownLatch(1);
    private Thread renewer;

    Registration(Common.Options o, String address) throws Common.UsageError {
      String gw = o.get("--gateway", "");
      int colon = gw.lastIndexOf(':');
      if (colon < 0 || !o.has("--queue") || !o.has("--name")) {
        throw new Common.UsageError("--gateway HOST:PORT needs --queue and --name");
      }
      gatewayOptions.flags.put("--host", List.of(gw.substring(0, colon)));
      gatewayOptions.flags.put("--port", List.of(gw.substring(colon + 1)));
      gatewayOptions.flags.put("--timeout", List.of(o.get("--timeout", "30")));
      gatewayOptions.intValue("--port", 0, 1, 65535);
      queue = utf8(o.get("--queue", ""));
      subscription.setName(utf8(o.get("--name", "")));
      if (o.has("--shared")) {
        subscription.setShared(true);
      }
      lease = o.intValue("--lease", 10, 1, 3600);
      this.address = address;
    }

    private Common.Gateway gateway() throws Exception {
      if (gateway == null) {
        gateway = new Common.Gateway(gatewayOptions);
      }
      return gateway;
    }

    synchronized void subscribe() throws Exception {
      leaseId = gateway().client.subscribe(queue, subscription, utf8(address), lease);
      System.err.println("registered lease " + leaseId);
    }

    void start() throws Exception {
      subscribe();
      renewer = new Thread(this::renewLoop, "lease-renewer");
      renewer.setDaemon(true);
      renewer.start();
    }

    private void renewLoop() {
      long interval = lease * 1000L / 3;
      try {
        while (!stopping.await(interval, TimeUnit.MILLISECONDS)) {
          try {
            synchronized (this) {
              if (!gateway().client.renewSubscription(queue, subscription.name, leaseId)) {
                System.err.println("lease gone; subscribing again");
                subscribe();
              }
            }
            interval = lease * 1000L / 3;
          } catch (Exception e) {
            System.err.println("renewing failed (" + e + "); retrying");
            synchronized (this) {
              if (gateway != null) {
                gateway.close();
                gateway = null;
              }
            }
            interval = Math.min(1000L, lease * 1000L / 3);
          }
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }

    void stop() {
      stopping.countDown();
      synchronized (this) {
        try {
          gateway().client.unsubscribe(queue, subscription.name, leaseId);
          System.err.println("unsubscribed");
        } catch (Exception e) {
          System.err.println("unsubscribing failed (the lease will expire): " + e);
        }
      }
    }
  }

  static int serve(Common.Options o) throws Exception {
    if (!o.args.isEmpty()) {
      throw new Common.UsageError("unexpected argument " + o.args.get(0));
    }
    String host = o.get("--host", "127.0.0.1");
    int port = o.intValue("--port", 0, 0, 65535);
    int status = o.intValue("--status", 0, Integer.MIN_VALUE, Integer.MAX_VALUE);
    TServerSocket socket = new TServerSocket(
        new TServerSocket.ServerSocketTransportArgs().bindAddr(new InetSocketAddress(host, port)));
    int bound = socket.getServerSocket().getLocalPort();
    TServer server = new TThreadPoolServer(new TThreadPoolServer.Args(socket)
        .processor(new HQueueSubscriberService.Processor<>(new Printer(o.has("--hex"), status)))
        .protocolFactory(new TBinaryProtocol.Factory()));
    System.err.println("listening on " + bound);
    Registration registration =
        o.has("--gateway") ? new Registration(o, host + ":" + bound) : null;
    Thread serving = new Thread(server::serve, "server");
    serving.start();
    if (registration != null) {
      registration.start();
    }
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      if (registration != null) {
        registration.stop(); // the gateway stops pushing and writes the checkpoints
      }
      server.stop();
      stopped.countDown();
    }));
    serving.join();
    stopped.await(10, TimeUnit.SECONDS);
    return Common.EXIT_OK;
  }

  private static ByteBuffer utf8(String s) {
    return ByteBuffer.wrap(s.getBytes(StandardCharsets.UTF_8));
  }
}
