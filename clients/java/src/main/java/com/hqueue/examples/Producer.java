package com.hqueue.examples;

import com.hqueue.thrift.generated.IOError;
import com.hqueue.thrift.generated.TMessage;
import com.hqueue.thrift.generated.hqueueConstants;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.thrift.transport.TTransportException;

/**
 * Reads messages from stdin, one per line (TOPIC&lt;tab&gt;VALUE, both hex-encoded with --hex),
 * and puts them in batches with putMessages (putMessagesWithPid with --partition). A batch is
 * acknowledged once durable; its order is kept within a partition.
 *
 * <p>With --partition, batches go straight to the gateway that owns the partition in a gateway
 * cluster (getQueueLocations); when it refuses (IOError: the partition moved) or cannot be
 * reached, the locations are asked again and the batch is sent once more. Any gateway would
 * forward the batch to the owner: routing saves that hop.
 *
 * <pre>
 *   printf 'clicks\thttp://example.com\n' | java -cp target/hqueue-examples.jar \
 *       com.hqueue.examples.Producer --port 9190 q1
 * </pre>
 */
public final class Producer {
  static final String USAGE = "[--host H] [--port P] [--framed] [--compact] [--hex] [--batch N] "
      + "[--partition P] QUEUE\n  stdin: one message per line, TOPIC<tab>VALUE";

  private Producer() {}

  public static void main(String[] argv) {
    System.exit(Common.run("Producer", USAGE, argv, List.of("--batch", "--partition"), List.of(),
        Producer::produce));
  }

  static int produce(Common.Options o) throws Exception {
    if (o.args.size() != 1) {
      throw new Common.UsageError("expected one QUEUE argument");
    }
    int batchSize = o.intValue("--batch", 1000, 1, 1_000_000);
    int partition = o.intValue("--partition", -1, 0, hqueueConstants.MAX_PARTITION_ID);
    boolean hex = o.has("--hex");
    String queue = o.args.get(0);

    // Read and check all of stdin before connecting: a bad line puts nothing. Without --hex
    // the text is taken as ISO-8859-1, which maps each byte to one char and back unchanged.
    List<TMessage> messages = new ArrayList<>();
    BufferedReader in = new BufferedReader(
        new InputStreamReader(System.in, StandardCharsets.ISO_8859_1));
    String line;
    for (int n = 1; (line = in.readLine()) != null; n++) {
      int tab = line.indexOf('\t');
      String where = "stdin line " + n;
      if (tab < 0) {
        throw new Common.UsageError(where + ": expected TOPIC<tab>VALUE");
      }
      String topic = line.substring(0, tab);
      String value = line.substring(tab + 1);
      TMessage m = new TMessage();
      m.setTopic(hex ? Common.fromHex(topic, where + " topic")
          : topic.getBytes(StandardCharsets.ISO_8859_1));
      m.setValue(hex ? Common.fromHex(value, where + " value")
          : value.getBytes(StandardCharsets.ISO_8859_1));
      messages.add(m);
    }

    int batches = 0;
    ByteBuffer name = Common.bytes(queue.getBytes(StandardCharsets.UTF_8));
    try (Common.Gateway seed = new Common.Gateway(o)) {
      Common.Gateway owner = partition >= 0 ? route(o, seed, name, partition) : null;
      try {
        for (int i = 0; i < messages.size(); i += batchSize) {
          List<TMessage> batch = messages.subList(i, Math.min(messages.size(), i + batchSize));
          if (partition < 0) {
            seed.client.putMessages(name, batch);
          } else {
            try {
              (owner != null ? owner : seed).client.putMessagesWithPid(name, (short) partition,
                  batch);
            } catch (IOError | TTransportException e) {
              if (e instanceof TTransportException && owner == null) {
                throw e; // the seed itself is gone
              }
              if (owner != null) {
                owner.close();
              }
              owner = route(o, seed, name, partition); // the partition moved: ask, send again
              (owner != null ? owner : seed).client.putMessagesWithPid(name, (short) partition,
                  batch);
            }
          }
          batches++;
        }
      } finally {
        if (owner != null) {
          owner.close();
        }
      }
    }
    System.err.println("put " + messages.size() + " message(s) in " + batches + " batch(es)");
    return Common.EXIT_OK;
  }

  /** A connection to the partition's owner, or null when the seed gateway owns it. */
  static Common.Gateway route(Common.Options o, Common.Gateway seed, ByteBuffer queue,
      int partition) throws Exception {
    List<ByteBuffer> locations = seed.client.getQueueLocations(queue);
    if (partition >= locations.size()) {
      return null;
    }
    String where = StandardCharsets.UTF_8.decode(locations.get(partition).duplicate()).toString();
    String self = o.get("--host", "127.0.0.1") + ":" + o.get("--port", "9190");
    int colon = where.lastIndexOf(':');
    if (where.isEmpty() || where.equals(self) || colon < 0) {
      return null;
    }
    return new Common.Gateway(o, where.substring(0, colon),
        Integer.parseInt(where.substring(colon + 1)));
  }
}
