package com.hqueue.examples;

import com.hqueue.thrift.generated.TMessage;
import com.hqueue.thrift.generated.TMessageScan;
import com.hqueue.thrift.generated.hqueueConstants;
import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.thrift.transport.TTransportException;

/**
 * Opens a scanner (the whole queue merged in MessageID order, or one partition with
 * --partition), reads it with messageScannerGetList until the empty list (which also frees it
 * on the gateway) and prints one message per line:
 * PARTITION \t TIMESTAMP_MS \t SEQUENCE \t TOPIC \t VALUE (\xNN-escaped, or hex with --hex).
 */
public final class Scanner {
  static final String USAGE = "[--host H] [--port P] [--framed] [--compact] [--hex] [--batch N] "
      + "[--partition P]\n       [--topic T]... [--reverse] QUEUE";

  private Scanner() {}

  public static void main(String[] argv) {
    System.exit(Common.run("Scanner", USAGE, argv, List.of("--batch", "--partition", "--topic"),
        List.of("--reverse"), Scanner::scan));
  }

  static int scan(Common.Options o) throws Exception {
    if (o.args.size() != 1) {
      throw new Common.UsageError("expected one QUEUE argument");
    }
    int batchSize = o.intValue("--batch", 1000, 1, 1_000_000);
    int partition = o.intValue("--partition", -1, 0, hqueueConstants.MAX_PARTITION_ID);
    boolean hex = o.has("--hex");
    ByteBuffer queue = ByteBuffer.wrap(o.args.get(0).getBytes(StandardCharsets.UTF_8));

    TMessageScan spec = new TMessageScan();
    spec.setCaching(batchSize);
    if (o.has("--topic")) {
      List<ByteBuffer> topics = new ArrayList<>();
      for (String t : o.all("--topic")) {
        topics.add(ByteBuffer.wrap(t.getBytes(StandardCharsets.UTF_8)));
      }
      spec.setTopics(topics);
    }
    if (o.has("--reverse")) {
      spec.setReversed(true);
    }

    int count = 0;
    Writer out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
    try (Common.Gateway gw = new Common.Gateway(o)) {
      int id = partition >= 0
          ? gw.client.messageScannerOpen(queue, (short) partition, spec)
          : gw.client.queueScannerOpen(queue, spec);
      try {
        for (;;) {
          List<TMessage> batch = gw.client.messageScannerGetList(id, batchSize);
          if (batch.isEmpty()) {
            break; // the end; the gateway has freed the scanner
          }
          for (TMessage m : batch) {
            out.write(Common.format(m, hex));
            out.write('\n');
          }
          count += batch.size();
        }
      } catch (TTransportException e) {
        throw e; // the connection is gone, and the scanner with it (the gateway expires it)
      } catch (Exception e) {
        try {
          gw.client.messageScannerClose(id); // give it back before reporting the failure
        } catch (Exception ignored) {
          // the original failure is the one to report
        }
        throw e;
      }
    }
    out.flush();
    System.err.println("read " + count + " message(s)");
    return Common.EXIT_OK;
  }
}
