/*
 * _rowkey.h: the row key in C, the twin of gateway/rowkey.py (the one Python codec).
 *
 * Row key = partition id (int16 big-endian) + timestamp ms (int64 BE) + sequence id (int16 BE);
 * byte order is (partition, timestamp, sequence) order. The limits (HQ_MAX_SEQUENCE,
 * HQ_MAX_PARTITION_ID) are the contract's, from hqueue_contract/hqueue_limits.h;
 * tests/unit/test_limits.py checks every number here against rowkey.py.
 */
#ifndef HQUEUE_ROWKEY_H
#define HQUEUE_ROWKEY_H

#include <stdint.h>

#include "../clients/python/hqueue_contract/hqueue_limits.h"

#define HQ_KEY_LENGTH 12
#define HQ_KEY_PARTITION_AT 0
#define HQ_KEY_TIMESTAMP_AT 2
#define HQ_KEY_SEQUENCE_AT 10

/* Writes the HQ_KEY_LENGTH bytes of (partition, timestamp, sequence) at k. */
static inline void hq_key_encode(uint8_t *k, int partition, uint64_t ts, unsigned seq)
{
    k[HQ_KEY_PARTITION_AT] = (uint8_t)(partition >> 8);
    k[HQ_KEY_PARTITION_AT + 1] = (uint8_t)partition;
    for (int b = 0; b < 8; b++)
        k[HQ_KEY_TIMESTAMP_AT + b] = (uint8_t)(ts >> (56 - 8 * b));
    k[HQ_KEY_SEQUENCE_AT] = (uint8_t)(seq >> 8);
    k[HQ_KEY_SEQUENCE_AT + 1] = (uint8_t)seq;
}

/* The timestamp and sequence of the key at k, as int64 and int16 (what scans return). */
static inline void hq_key_decode(const uint8_t *k, long long *ts, int *seq)
{
    uint64_t t = 0;
    for (int i = HQ_KEY_TIMESTAMP_AT; i < HQ_KEY_TIMESTAMP_AT + 8; i++)
        t = (t << 8) | k[i];
    *ts = (long long)t;
    *seq = (int16_t)((k[HQ_KEY_SEQUENCE_AT] << 8) | k[HQ_KEY_SEQUENCE_AT + 1]);
}

/* The next id after (ts, seq): the sequence carries into the next millisecond. */
static inline void hq_next_id(uint64_t *ts, unsigned *seq)
{
    if (++*seq > HQ_MAX_SEQUENCE) {
        *seq = 0;
        ++*ts;
    }
}

#endif
