<?php
/**
 * consumer.php: a pull consumer, the way PHP consumes (it cannot easily serve Thrift for push):
 * pullMessages (a long poll) -> print each message -> ackMessages, in a loop. Every process
 * pulling under one SUBSCRIBER name with its own --member shares the queue's partitions (a
 * consumer group); what is pulled and not acknowledged is delivered again after the gateway's
 * --ack-timeout. One message per line, as scanner.php prints them:
 *   PARTITION <tab> TIMESTAMP_MS <tab> SEQUENCE <tab> TOPIC <tab> VALUE
 * It stops after --count messages (default: never) or on SIGTERM/SIGINT (after acknowledging
 * what it printed), and says "pulling" on stderr once it has joined the group.
 *
 *   php consumer.php --port 9190 --member web-1 q1 billing
 */

namespace HQueueExamples;

require __DIR__ . '/common.php';
registerAutoload();

$usage = "[--host H] [--port P] [--framed] [--compact] [--accel] [--hex] [--member ID]\n"
    . "       [--batch N] [--wait MS] [--count N] QUEUE SUBSCRIBER";

exit(run('consumer.php', $usage,
    ['--member' => true, '--batch' => true, '--wait' => true, '--count' => true],
    function (array $opts, array $args): int {
        if (count($args) !== 2) {
            throw new UsageError('expected QUEUE and SUBSCRIBER arguments');
        }
        [$queue, $subscriber] = $args;
        $member = $opts['--member'] ?? (gethostname() . '-' . getmypid());
        $batch = intArg($opts, '--batch', 1, 100000, 100);
        $waitMs = intArg($opts, '--wait', 0, 300000, 5000);
        $limit = intArg($opts, '--count', 1, PHP_INT_MAX);
        $hex = !empty($opts['--hex']);
        if ($waitMs + 5000 > 1000 * (int)$opts['--timeout']) {
            $opts['--timeout'] = (string)intdiv($waitMs + 5999, 1000) + 1;  // outlive the poll
        }
        $stop = false;
        if (function_exists('pcntl_async_signals')) {
            pcntl_async_signals(true);
            pcntl_signal(SIGTERM, function () use (&$stop) { $stop = true; });
            pcntl_signal(SIGINT, function () use (&$stop) { $stop = true; });
        }

        [$client, $transport] = connect($opts);
        // the first pull joins the group (creating it, from new messages on, if needed)
        $messages = $client->pullMessages($queue, $subscriber, $member, $batch, 0);
        fwrite(STDERR, "pulling $queue as $subscriber/$member\n");
        $count = 0;
        while (!$stop && ($limit === null || $count < $limit)) {
            if (!$messages) {
                $messages = $client->pullMessages($queue, $subscriber, $member, $batch, $waitMs);
            }
            if (!$messages) {
                continue;
            }
            $last = [];  // partition -> the last id handled
            foreach ($messages as $m) {
                echo formatMessage($m, $hex), "\n";
                $last[$m->partitionID] = $m->id;
            }
            fflush(STDOUT);
            $upTo = [];
            foreach ($last as $p => $id) {
                $upTo[] = new \HQueue\TSubscribedPartition(
                    ['partitionID' => $p, 'startMessageID' => $id]);
            }
            $client->ackMessages($queue, $subscriber, $member, $upTo);
            $count += count($messages);
            $messages = [];
        }
        $transport->close();
        fwrite(STDERR, "consumed $count message(s)\n");
        return EXIT_OK;
    }));
