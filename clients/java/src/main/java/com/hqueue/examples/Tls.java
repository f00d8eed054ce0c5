package com.hqueue.examples;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import java.util.Collection;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.TTransportException;

/**
 * TLS to the gateway from PEM files, as the other languages take them: --tls-ca (trusted CA),
 * optionally --tls-cert and --tls-key (a client certificate and its unencrypted PKCS#8 key, for
 * a gateway requiring mutual TLS). The gateway's certificate must name --host.
 */
final class Tls {
  private Tls() {}

  static TSocket connect(Common.Options o, String host, int port, int timeoutMs)
      throws TTransportException, Common.UsageError {
    SSLContext ctx = context(o);
    try {
      SSLSocket s = (SSLSocket) ctx.getSocketFactory().createSocket();
      SSLParameters params = s.getSSLParameters();
      params.setEndpointIdentificationAlgorithm("HTTPS"); // check the name, not only the CA
      params.setProtocols(new String[] {"TLSv1.3", "TLSv1.2"});
      s.setSSLParameters(params);
      s.setTcpNoDelay(true);
      s.setSoTimeout(timeoutMs);
      s.connect(new InetSocketAddress(host, port), timeoutMs);
      s.startHandshake();
      return new TSocket(s);
    } catch (IOException e) {
      throw new TTransportException(TTransportException.NOT_OPEN, "TLS: " + e.getMessage(), e);
    }
  }

  private static SSLContext context(Common.Options o) throws Common.UsageError {
    try {
      CertificateFactory cf = CertificateFactory.getInstance("X.509");
      KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
      trust.load(null, null);
      int i = 0;
      for (Certificate c : certificates(cf, o.get("--tls-ca", ""), "--tls-ca")) {
        trust.setCertificateEntry("ca" + i++, c);
      }
      TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      tmf.init(trust);
      KeyManagerFactory kmf = null;
      if (o.has("--tls-cert")) {
        Collection<? extends Certificate> chain = certificates(cf, o.get("--tls-cert", ""), "--tls-cert");
        PrivateKey key = privateKey(o.get("--tls-key", o.get("--tls-cert", "")));
        KeyStore keys = KeyStore.getInstance(KeyStore.getDefaultType());
        keys.load(null, null);
        keys.setKeyEntry("me", key, new char[0], chain.toArray(new Certificate[0]));
        kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(keys, new char[0]);
      }
      SSLContext ctx = SSLContext.getInstance("TLS");
      ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
      return ctx;
    } catch (GeneralSecurityException | IOException e) {
      throw new Common.UsageError("cannot load the TLS files: " + e.getMessage());
    }
  }

  private static Collection<? extends Certificate> certificates(
      CertificateFactory cf, String path, String flag) throws Common.UsageError, GeneralSecurityException {
    try {
      return cf.generateCertificates(new ByteArrayInputStream(Files.readAllBytes(Path.of(path))));
    } catch (IOException e) {
      throw new Common.UsageError(flag + ": cannot read " + path);
    }
  }

  private static PrivateKey privateKey(String path) throws Common.UsageError, GeneralSecurityException {
    String pem;
    try {
      pem = Files.readString(Path.of(path));
    } catch (IOException e) {
      throw new Common.UsageError("--tls-key: cannot read " + path);
    }
    int start = pem.indexOf("-----BEGIN PRIVATE KEY-----");
    int end = pem.indexOf("-----END PRIVATE KEY-----");
    if (start < 0 || end < 0) {
      throw new Common.UsageError("--tls-key: expected an unencrypted PKCS#8 key (BEGIN PRIVATE KEY)");
    }
    byte[] der = Base64.getMimeDecoder().decode(pem.substring(start + 27, end));
    PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(der);
    for (String algorithm : new String[] {"EC", "RSA", "Ed25519"}) {
      try {
        return KeyFactory.getInstance(algorithm).generatePrivate(spec);
      } catch (GeneralSecurityException e) {
        // try the next algorithm
      }
    }
    throw new Common.UsageError("--tls-key: not an EC, RSA or Ed25519 key");
  }
}
