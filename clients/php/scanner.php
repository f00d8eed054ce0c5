<?php
/**
 * scanner.php: opens a scanner (the whole queue merged in MessageID order, or one partition
 * with --partition), reads it with messageScannerGetList until the empty list (which also
 * frees it on the gateway) and prints one message per line:
 *   PARTITION <tab> TIMESTAMP_MS <tab> SEQUENCE <tab> TOPIC <tab> VALUE
 * Topics and values are printed with \xNN escapes, or hex-encoded with --hex.
 *
 *   php scanner.php --port 9190 --topic clicks --reverse q1
 */

namespace HQueueExamples;

require __DIR__ . '/common.php';
registerAutoload();

$usage = "[--host H] [--port P] [--framed] [--compact] [--accel] [--hex] [--batch N] "
    . "[--partition P]\n       [--topic T]... [--reverse] QUEUE";

exit(run('scanner.php', $usage,
    ['--batch' => true, '--partition' => true, '--topic' => true, '--reverse' => false],
    function (array $opts, array $args): int {
        if (count($args) !== 1) {
            throw new UsageError('expected one QUEUE argument');
        }
        $batchSize = intArg($opts, '--batch', 1, 1000000, 1000);
        $partition = intArg($opts, '--partition', 0, \HQueue\Constant::get('MAX_PARTITION_ID'));
        $hex = !empty($opts['--hex']);

        [$client, $transport] = connect($opts);
        $scan = new \HQueue\TMessageScan(['caching' => $batchSize]);
        if (!empty($opts['--topic'])) {
            $scan->topics = $opts['--topic'];
        }
        if (!empty($opts['--reverse'])) {
            $scan->reversed = true;
        }
        $id = $partition === null ? $client->queueScannerOpen($args[0], $scan)
                                  : $client->messageScannerOpen($args[0], $partition, $scan);
        $count = 0;
        try {
            while ($batch = $client->messageScannerGetList($id, $batchSize)) {
                foreach ($batch as $m) {
                    echo formatMessage($m, $hex), "\n";
                }
                $count += count($batch);
            }
            // the empty list ended the scan and freed the scanner on the gateway
        } catch (\HQueue\IllegalArgument | \HQueue\IOError $e) {
            try {
                $client->messageScannerClose($id);  // give it back before reporting
            } catch (\Exception $ignored) {
            }
            throw $e;
        }
        $transport->close();
        fwrite(STDERR, "read $count message(s)\n");
        return EXIT_OK;
    }));
