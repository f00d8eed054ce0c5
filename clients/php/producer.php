<?php
/**
 * producer.php: reads messages from stdin, one per line (TOPIC<tab>VALUE, both hex-encoded
 * with --hex), and puts them in batches with putMessages (putMessagesWithPid with
 * --partition). A batch is acknowledged once durable; its order is kept within a partition.
 *
 *   printf 'clicks\thttp://example.com\n' | php producer.php --port 9190 q1
 *   php -d extension=thrift_protocol.so producer.php --accel --hex q1 < messages.hex
 */

namespace HQueueExamples;

require __DIR__ . '/common.php';
registerAutoload();

$usage = "[--host H] [--port P] [--framed] [--compact] [--accel] [--hex] [--batch N] "
    . "[--partition P] QUEUE\n  stdin: one message per line, TOPIC<tab>VALUE";

exit(run('producer.php', $usage, ['--batch' => true, '--partition' => true],
    function (array $opts, array $args): int {
        if (count($args) !== 1) {
            throw new UsageError('expected one QUEUE argument');
        }
        $batchSize = intArg($opts, '--batch', 1, 1000000, 1000);
        $partition = intArg($opts, '--partition', 0, \HQueue\Constant::get('MAX_PARTITION_ID'));
        $hex = !empty($opts['--hex']);

        // Read and check all of stdin before connecting: a bad line puts nothing.
        $messages = [];
        $n = 0;
        while (($line = fgets(STDIN)) !== false) {
            $n++;
            $line = substr($line, -1) === "\n" ? substr($line, 0, -1) : $line;
            $parts = explode("\t", $line, 2);
            if (count($parts) !== 2) {
                throw new UsageError("stdin line $n: expected TOPIC<tab>VALUE");
            }
            [$topic, $value] = $parts;
            $messages[] = new \HQueue\TMessage([
                'topic' => $hex ? fromHex($topic, "stdin line $n topic") : $topic,
                'value' => $hex ? fromHex($value, "stdin line $n value") : $value,
            ]);
        }

        [$client, $transport] = connect($opts);
        $batches = 0;
        foreach (array_chunk($messages, $batchSize) as $batch) {
            if ($partition === null) {
                $client->putMessages($args[0], $batch);
            } else {
                $client->putMessagesWithPid($args[0], $partition, $batch);
            }
            $batches++;
        }
        $transport->close();
        fwrite(STDERR, 'put ' . count($messages) . " message(s) in $batches batch(es)\n");
        return EXIT_OK;
    }));
