<?php
/**
 * What the hqueue PHP examples share: class loading for Debian's php-thrift and the generated
 * stubs, command-line options, a connection to the gateway with the transport/protocol the
 * gateway was started with, message formatting, and failures turned into messages and exit
 * codes (the same codes as the `hqueue` toolkit).
 */

namespace HQueueExamples;

use Thrift\Exception\TApplicationException;
use Thrift\Exception\TException;
use Thrift\Exception\TTransportException;
use Thrift\Protocol\TBinaryProtocol;
use Thrift\Protocol\TBinaryProtocolAccelerated;
use Thrift\Protocol\TCompactProtocol;
use Thrift\Transport\TBufferedTransport;
use Thrift\Transport\TFramedTransport;
use Thrift\Transport\TSocket;

const EXIT_OK = 0;
const EXIT_REFUSED = 1;      // the gateway said the request is wrong (IllegalArgument)
const EXIT_USAGE = 2;        // bad command line or bad input
const EXIT_UNAVAILABLE = 3;  // no gateway, a broken connection, or the gateway's own failure

class UsageError extends \Exception
{
}

/*
 * Debian installs the Thrift PHP library as /usr/lib/php/<Subdir>/*.php, without the Thrift/
 * folder its own ThriftClassLoader expects: map Thrift\X\Y to <lib>/X/Y.php ourselves.
 * HQUEUE_THRIFT_PHP_LIB points elsewhere (e.g. a Composer vendor/apache/thrift/lib/php/lib).
 */
function registerAutoload(): void
{
    $lib = rtrim(getenv('HQUEUE_THRIFT_PHP_LIB') ?: '/usr/lib/php', '/');
    if (!is_file("$lib/Transport/TSocket.php")) {
        fwrite(STDERR, "the Thrift PHP library is missing from $lib: apt-get install php-thrift "
            . "(or set HQUEUE_THRIFT_PHP_LIB)\n");
        exit(EXIT_UNAVAILABLE);
    }
    $roots = ['Thrift\\' => "$lib/", 'HQueue\\' => __DIR__ . '/gen-php/HQueue/'];
    spl_autoload_register(function (string $class) use ($roots): void {
        foreach ($roots as $prefix => $dir) {
            if (strncmp($class, $prefix, strlen($prefix)) === 0) {
                $file = $dir . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
                if (is_file($file)) {
                    require_once $file;
                }
                return;
            }
        }
    });
}

/**
 * Parses "--flag value" / "--switch" options. $spec maps each accepted flag to true when it
 * takes a value, false for a switch. Returns [options, positional arguments].
 */
function parseArgs(array $argv, array $spec): array
{
    $spec += ['--host' => true, '--port' => true, '--framed' => false, '--compact' => false,
              '--accel' => false, '--hex' => false, '--timeout' => true,
              '--tls-ca' => true, '--tls-cert' => true, '--tls-key' => true];
    $opts = ['--host' => '127.0.0.1', '--port' => '9190', '--timeout' => '30'];
    $args = [];
    for ($i = 1; $i < count($argv); $i++) {
        $a = $argv[$i];
        if (strlen($a) > 1 && $a[0] === '-') {
            if (!array_key_exists($a, $spec)) {
                throw new UsageError("unknown option $a");
            }
            if ($spec[$a]) {
                if ($i + 1 >= count($argv)) {
                    throw new UsageError("$a needs a value");
                }
                $value = $argv[++$i];
                if ($a === '--topic') {
                    $opts[$a][] = $value;
                } else {
                    $opts[$a] = $value;
                }
            } else {
                $opts[$a] = true;
            }
        } else {
            $args[] = $a;
        }
    }
    intArg($opts, '--port', 0, 65535);
    intArg($opts, '--timeout', 1, 86400);
    if (!empty($opts['--accel']) && !empty($opts['--compact'])) {
        throw new UsageError('--accel speeds up the binary protocol only; drop --compact or --accel');
    }
    return [$opts, $args];
}

function intArg(array $opts, string $flag, int $low, int $high, ?int $default = null): ?int
{
    if (!isset($opts[$flag])) {
        return $default;
    }
    $text = (string)$opts[$flag];
    if (!preg_match('/^-?[0-9]+$/', $text) || (int)$text < $low || (int)$text > $high) {
        throw new UsageError("$flag must be an integer in $low..$high, got '$text'");
    }
    return (int)$text;
}

function fromHex(string $hex, string $what): string
{
    if ($hex === '') {
        return '';
    }
    if (strlen($hex) % 2 !== 0 || !ctype_xdigit($hex)) {
        throw new UsageError("$what is not an even number of hex digits: '$hex'");
    }
    return hex2bin($hex);
}

/** Printable ASCII as is, anything else as \xNN (a backslash as \\). */
function escape(string $bytes): string
{
    return preg_replace_callback('/[^\x20-\x5b\x5d-\x7e]/', function ($m) {
        return $m[0] === '\\' ? '\\\\' : sprintf('\\x%02x', ord($m[0]));
    }, $bytes);
}

/** PARTITION <tab> TIMESTAMP_MS <tab> SEQUENCE <tab> TOPIC <tab> VALUE */
function formatMessage(\HQueue\TMessage $m, bool $hex): string
{
    $f = $hex ? 'bin2hex' : 'HQueueExamples\escape';
    return implode("\t", [$m->partitionID, $m->id->timestamp, $m->id->sequenceID,
                          $f($m->topic), $f($m->value)]);
}

/** Opens a connection; returns [client, transport]. */
function connect(array $opts): array
{
    $host = $opts['--host'];
    if (!empty($opts['--tls-ca'])) {
        // php-thrift has no TLS socket: a TSocket whose open() connects with TLS instead
        $ssl = ['cafile' => $opts['--tls-ca'], 'verify_peer' => true, 'verify_peer_name' => true,
                'peer_name' => $host];
        if (!empty($opts['--tls-cert'])) {
            $ssl['local_cert'] = $opts['--tls-cert'];
            $ssl['local_pk'] = $opts['--tls-key'] ?? $opts['--tls-cert'];
        }
        foreach (['--tls-ca', '--tls-cert', '--tls-key'] as $flag) {
            if (!empty($opts[$flag]) && !is_readable($opts[$flag])) {
                throw new UsageError("$flag: cannot read " . $opts[$flag]);
            }
        }
        $socket = new class($host, (int)$opts['--port'], $ssl) extends TSocket {
            private $ssl;

            public function __construct(string $host, int $port, array $ssl)
            {
                parent::__construct($host, $port);
                $this->ssl = $ssl;
            }

            public function open()
            {
                $timeout = $this->sendTimeoutSec_ + ($this->sendTimeoutUsec_ / 1000000);
                $this->handle_ = @stream_socket_client(
                    "tls://{$this->host_}:{$this->port_}", $errno, $errstr, $timeout,
                    STREAM_CLIENT_CONNECT, stream_context_create(['ssl' => $this->ssl])
                );
                if ($this->handle_ === false) {
                    $why = $errstr ?: (error_get_last()['message'] ?? 'unknown error');
                    throw new TTransportException(
                        "TLS connection to {$this->host_}:{$this->port_} failed: $why",
                        TTransportException::NOT_OPEN
                    );
                }
            }
        };
    } elseif (!empty($opts['--tls-cert'])) {
        throw new UsageError('--tls-cert needs --tls-ca');
    } else {
        $socket = new TSocket($host, (int)$opts['--port']);
    }
    $ms = 1000 * (int)$opts['--timeout'];
    $socket->setSendTimeout($ms);
    $socket->setRecvTimeout($ms);  // php-thrift's default is 750 ms
    $transport = empty($opts['--framed']) ? new TBufferedTransport($socket, 8192, 8192)
                                          : new TFramedTransport($socket);
    if (!empty($opts['--compact'])) {
        $protocol = new TCompactProtocol($transport);
    } elseif (!empty($opts['--accel'])) {
        if (!function_exists('thrift_protocol_write_binary')) {
            throw new UsageError('--accel needs the thrift_protocol extension: '
                . 'php -d extension=thrift_protocol.so ...');
        }
        $protocol = new TBinaryProtocolAccelerated($transport, true, true);
    } else {
        $protocol = new TBinaryProtocol($transport, true, true);
    }
    $transport->open();
    return [new \HQueue\HQueueServiceClient($protocol), $transport];
}

/** Runs $body(opts, args) and turns every failure into a message on stderr and an exit code. */
function run(string $program, string $usage, array $spec, callable $body): int
{
    global $argv;
    $opts = ['--host' => '?', '--port' => '?'];
    try {
        [$opts, $args] = parseArgs($argv, $spec);
        return $body($opts, $args);
    } catch (UsageError $e) {
        fwrite(STDERR, "$program: {$e->getMessage()}\nusage: $program $usage\n");
        return EXIT_USAGE;
    } catch (\HQueue\IllegalArgument $e) {
        fwrite(STDERR, "$program: the gateway refused an argument: {$e->message}\n");
        return EXIT_REFUSED;
    } catch (\HQueue\IOError $e) {
        fwrite(STDERR, "$program: the gateway failed (retry later): {$e->message}\n");
        return EXIT_UNAVAILABLE;
    } catch (TTransportException $e) {
        fwrite(STDERR, "$program: connection to gateway {$opts['--host']}:{$opts['--port']} failed: "
            . "{$e->getMessage()} (is it running, with the same --framed/--compact?)\n");
        return EXIT_UNAVAILABLE;
    } catch (TApplicationException $e) {
        fwrite(STDERR, "$program: the gateway answered with an application error: {$e->getMessage()}\n");
        return EXIT_UNAVAILABLE;
    } catch (TException $e) {
        if (strncmp($e->getMessage(), 'TSocket', 7) === 0) {  // php-thrift's socket errors
            fwrite(STDERR, "$program: connection to gateway {$opts['--host']}:{$opts['--port']} "
                . "failed: {$e->getMessage()}\n");
            return EXIT_UNAVAILABLE;
        }
        fwrite(STDERR, "$program: thrift error (is --framed/--compact the gateway's?): "
            . get_class($e) . " {$e->getMessage()}\n");
        return EXIT_UNAVAILABLE;
    }
}
