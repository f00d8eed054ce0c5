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

/* v as 8 big-endian bytes at p: one byte swap and one store where the compiler knows how (a
 * loop of byte stores was most of the work of encoding a message's id in a scan). */
static inline void hq_put_be64(uint8_t *p, uint64_t v)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
    __builtin_memcpy(p, &v, 8);
#else
    for (int b = 0; b < 8; b++)
        p[b] = (uint8_t)(v >> (56 - 8 * b));
#endif
}

/* The 8 big-endian bytes at p. */
static inline uint64_t hq_get_be64(const uint8_t *p)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return __builtin_bswap64(v);
#else
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
#endif
}

/* v as 4 big-endian bytes at p. */
static inline void hq_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes the HQ_KEY_LENGTH bytes of (partition, timestamp, sequence) at k. */
static inline void hq_key_encode(uint8_t *k, int partition, uint64_t ts, unsigned seq)
{
    k[HQ_KEY_PARTITION_AT] = (uint8_t)(partition >> 8);
    k[HQ_KEY_PARTITION_AT + 1] = (uint8_t)partition;
    hq_put_be64(k + HQ_KEY_TIMESTAMP_AT, ts);
    k[HQ_KEY_SEQUENCE_AT] = (uint8_t)(seq >> 8);
    k[HQ_KEY_SEQUENCE_AT + 1] = (uint8_t)seq;
}

/* The timestamp and sequence of the key at k, as int64 and int16 (what scans return). */
static inline void hq_key_decode(const uint8_t *k, long long *ts, int *seq)
{
    *ts = (long long)hq_get_be64(k + HQ_KEY_TIMESTAMP_AT);
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
