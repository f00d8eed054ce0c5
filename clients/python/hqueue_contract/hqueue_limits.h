/*
 * hqueue_limits.h: the limits of a MessageID and of a queue in C, the twin of limits.py (the
 * one place each language spells them). The gateway's row key (gateway/_rowkey.h) and the
 * Python client's C codecs include it; tests/unit/test_limits.py checks these numbers against
 * limits.py and that no other C file spells them. Plain numbers, so that HQ_STR can put them
 * into error messages.
 */
#ifndef HQUEUE_LIMITS_H
#define HQUEUE_LIMITS_H

#define HQ_MAX_PARTITIONS 32767   /* a queue has 1..HQ_MAX_PARTITIONS partitions */
#define HQ_MAX_PARTITION_ID 32766 /* so partition ids are 0..HQ_MAX_PARTITION_ID */
#define HQ_MAX_SEQUENCE 32767     /* sequence ids are 0..HQ_MAX_SEQUENCE within a millisecond */

#define HQ_STR_(x) #x
#define HQ_STR(x) HQ_STR_(x) /* HQ_STR(HQ_MAX_PARTITION_ID) is "32766" */

#endif
