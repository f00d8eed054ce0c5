package com.hqueue.examples;

import com.hqueue.thrift.generated.HQueueService;
import com.hqueue.thrift.generated.IOError;
import com.hqueue.thrift.generated.IllegalArgument;
import com.hqueue.thrift.generated.TMessage;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.thrift.TApplicationException;
import org.apache.thrift.TException;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.protocol.TCompactProtocol;
import org.apache.thrift.protocol.TProtocol;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.TTransport;
import org.apache.thrift.transport.TTransportException;
import org.apache.thrift.transport.layered.TFramedTransport;

/**
 * What the Java examples share: options, a connection speaking the gateway's transport and
 * protocol, message formatting, and failures turned into messages and exit codes (the same
 * codes as the {@code hqueue} toolkit).
 */
final class Common {
  static final int EXIT_OK = 0;
  static final int EXIT_REFUSED = 1; // the gateway said the request is wrong (IllegalArgument)
  static final int EXIT_USAGE = 2; // bad command line or bad input
  static final int EXIT_UNAVAILABLE = 3; // no gateway, a broken connection, its own failure

  private Common() {}

  static final class UsageError extends Exception {
    UsageError(String message) {
      super(message);
    }
  }

  /** Parsed command line: flags (a list per flag, for repeated ones) and positional args. */
  static final class Options {
    final Map<String, List<String>> flags = new HashMap<>();
    final List<String> args = new ArrayList<>();

    String get(String flag, String fallback) {
      List<String> v = flags.get(flag);
      return v == null ? fallback : v.get(v.size() - 1);
    }

    boolean has(String flag) {
      return flags.containsKey(flag);
    }

    List<String> all(String flag) {
      return flags.getOrDefault(flag, List.of());
    }

    int intValue(String flag, int fallback, long low, long high) throws UsageError {
      String text = get(flag, null);
      if (text == null) {
        return fallback;
      }
      try {
        long v = Long.parseLong(text);
        if (v >= low && v <= high) {
          return (int) v;
        }
      } catch (NumberFormatException e) {
        // reported below
      }
      throw new UsageError(flag + " must be an integer in " + low + ".." + high + ", got '" + text + "'");
    }
  }

  /** {@code valued} lists the flags that take a value, {@code switches} those that do not. */
  static Options parse(String[] argv, List<String> valued, List<String> switches) throws UsageError {
    List<String> withValue = new ArrayList<>(
        List.of("--host", "--port", "--timeout", "--tls-ca", "--tls-cert", "--tls-key"));
    withValue.addAll(valued);
    List<String> bare = new ArrayList<>(List.of("--framed", "--compact", "--hex"));
    bare.addAll(switches);
    Options o = new Options();
    for (int i = 0; i < argv.length; i++) {
      String a = argv[i];
      if (a.length() > 1 && a.startsWith("-")) {
        if (withValue.contains(a)) {
          if (i + 1 >= argv.length) {
            throw new UsageError(a + " needs a value");
          }
          o.flags.computeIfAbsent(a, k -> new ArrayList<>()).add(argv[++i]);
        } else if (bare.contains(a)) {
          o.flags.computeIfAbsent(a, k -> new ArrayList<>()).add("");
        } else {
          throw new UsageError("unknown option " + a);
        }
      } else {
        o.args.add(a);
      }
    }
    o.intValue("--port", 0, 0, 65535);
    o.intValue("--timeout", 0, 1, 86400);
    return o;
  }

  private static final char[] HEX = "0123456789abcdef".toCharArray();

  static String toHex(byte[] bytes) {
    StringBuilder sb = new StringBuilder(bytes.length * 2);
    for (byte b : bytes) {
      sb.append(HEX[(b >> 4) & 15]).append(HEX[b & 15]);
    }
    return sb.toString();
  }

  static byte[] fromHex(String hex, String what) throws UsageError {
    if (hex.length() % 2 != 0) {
      throw new UsageError(what + " has an odd number of hex digits");
    }
    byte[] out = new byte[hex.length() / 2];
    for (int i = 0; i < out.length; i++) {
      int hi = Character.digit(hex.charAt(2 * i), 16);
      int lo = Character.digit(hex.charAt(2 * i + 1), 16);
      if (hi < 0 || lo < 0) {
        throw new UsageError(what + " is not hex: '" + hex + "'");
      }
      out[i] = (byte) (hi * 16 + lo);
    }
    return out;
  }

  /** Printable ASCII as is, anything else as \xNN (a backslash as \\). */
  static String escape(byte[] bytes) {
    StringBuilder sb = new StringBuilder();
    for (byte b : bytes) {
      int c = b & 0xff;
      if (c == '\\') {
        sb.append("\\\\");
      } else if (c >= 0x20 && c < 0x7f) {
        sb.append((char) c);
      } else {
        sb.append(String.format("\\x%02x", c));
      }
    }
    return sb.toString();
  }

  /** PARTITION \t TIMESTAMP_MS \t SEQUENCE \t TOPIC \t VALUE. */
  static String format(TMessage m, boolean hex) {
    byte[] topic = m.getTopic();
    byte[] value = m.getValue();
    return m.getPartitionID() + "\t" + m.getId().getTimestamp() + "\t" + m.getId().getSequenceID()
        + "\t" + (hex ? toHex(topic) : escape(topic)) + "\t" + (hex ? toHex(value) : escape(value));
  }

  static ByteBuffer bytes(byte[] b) {
    return ByteBuffer.wrap(b);
  }

  /** A connected client and the transport to close when done. */
  static final class Gateway implements AutoCloseable {
    final TTransport transport;
    final HQueueService.Client client;

    Gateway(Options o) throws TTransportException, UsageError {
      this(o, o.get("--host", "127.0.0.1"), o.intValue("--port", 9190, 0, 65535));
    }

    /** The gateway at host:port, with the transport, protocol and timeout of the options. */
    Gateway(Options o, String host, int port) throws TTransportException, UsageError {
      int timeoutMs = 1000 * o.intValue("--timeout", 30, 1, 86400);
      TSocket socket = o.has("--tls-ca") ? Tls.connect(o, host, port, timeoutMs)
          : new TSocket(host, port, timeoutMs);
      if (!o.has("--tls-ca") && o.has("--tls-cert")) {
        throw new UsageError("--tls-cert needs --tls-ca");
      }
      // TSocket buffers its streams itself: that is the "buffered" transport
      TTransport t = o.has("--framed") ? new TFramedTransport(socket) : socket;
      if (!t.isOpen()) { // a TLS socket is connected already
        t.open();
      }
      TProtocol p = o.has("--compact") ? new TCompactProtocol(t) : new TBinaryProtocol(t);
      transport = t;
      client = new HQueueService.Client(p);
    }

    @Override
    public void close() {
      transport.close();
    }
  }

  interface Body {
    int run(Options o) throws Exception;
  }

  /** Parses, runs, and maps every failure to a message on stderr and an exit code. */
  static int run(String program, String usage, String[] argv, List<String> valued,
      List<String> switches, Body body) {
    Options o = null;
    try {
      o = parse(argv, valued, switches);
      return body.run(o);
    } catch (UsageError e) {
      System.err.println(program + ": " + e.getMessage() + "\nusage: " + program + " " + usage);
      return EXIT_USAGE;
    } catch (IllegalArgument e) {
      System.err.println(program + ": the gateway refused an argument: " + e.getMessage());
      return EXIT_REFUSED;
    } catch (IOError e) {
      System.err.println(program + ": the gateway failed (retry later): " + e.getMessage());
      return EXIT_UNAVAILABLE;
    } catch (TTransportException e) {
      String where = o == null ? "" : o.get("--host", "127.0.0.1") + ":" + o.get("--port", "9190");
      System.err.println(program + ": connection to gateway " + where + " failed: " + e.getMessage()
          + " (is it running, with the same --framed/--compact?)");
      return EXIT_UNAVAILABLE;
    } catch (TApplicationException e) {
      System.err.println(program + ": the gateway answered with an application error: "
          + e.getMessage());
      return EXIT_UNAVAILABLE;
    } catch (TException e) {
      System.err.println(program + ": thrift error (is --framed/--compact the gateway's?): " + e);
      return EXIT_UNAVAILABLE;
    } catch (Exception e) {
      System.err.println(program + ": " + e);
      return EXIT_UNAVAILABLE;
    }
  }
}
