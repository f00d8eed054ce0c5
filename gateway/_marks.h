/*
 * _marks.h: the marks of an encoded page, what spares a merged scan's merge a walk over every
 * message it takes (gateway/_records.c writes them, gateway/_merge.c reads them).
 *
 * A merged scan's cursor buffers a page of TMessages (gateway/_thriftbuf.h put_tmessage) per
 * partition, and merge_encoded takes each partition's run: its messages before the smallest
 * head of the others. Finding where a run ends read every message's header and its last byte,
 * a chain of dependent loads over a page written a while before: 17 % of the gateway's CPU on
 * an 8-partition read (perf, AMD EPYC VM, 2026-12-07).
 *
 * A mark describes a segment: messages that lie one after the other in the page, of
 * consecutive MessageIDs (each the last one's next, or previous in a reverse scan: a put's
 * messages), one partition and one topic length. From the head of a segment, its last id
 * says how many messages are left in it and whether they all come before another partition's
 * head; the bytes left say their topic and value bytes (each TMessage is TMESSAGE_OVERHEAD
 * bytes more); the topic length their values' bytes. The marks live in a bytearray beside the
 * page, in this process only (host byte order). Every message of the page is in exactly one
 * segment, so a page has at most a mark per message: 32 bytes against a TMessage's 40 or more
 * (a page holds at most the scan's caching in messages).
 */
#ifndef HQ_MARKS_H
#define HQ_MARKS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_rowkey.h"

typedef struct {
    int64_t end;     /* where the segment's last message ends in the page */
    int64_t last_at; /* where it begins */
    int64_t last_ts; /* its id */
    int32_t last_seq;
    int16_t tl;   /* every message's topic length */
    int16_t part; /* the partition */
} HqMark;

/* A MessageID as one number: consecutive ids differ by one (the sequence carries into the
 * next millisecond). */
static inline int64_t hq_linear_id(int64_t ts, int32_t seq)
{
    return ts * (HQ_MAX_SEQUENCE + 1) + seq;
}

/* Marks the message just appended to the page at [at, end): it extends the last segment or
 * begins one. 0, or -1 with MemoryError set. */
static inline int hq_mark_message(PyObject *marks, Py_ssize_t at, Py_ssize_t end, int64_t ts,
                                  int32_t seq, Py_ssize_t tl, int part, int reverse)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(marks);
    if (size >= (Py_ssize_t)sizeof(HqMark)) {
        char *back = PyByteArray_AS_STRING(marks) + size - sizeof(HqMark);
        HqMark m;
        memcpy(&m, back, sizeof m);
        int64_t step = reverse ? -1 : 1;
        if (m.end == at && m.tl == tl && m.part == part &&
            hq_linear_id(ts, seq) == hq_linear_id(m.last_ts, m.last_seq) + step) {
            m.end = end;
            m.last_at = at;
            m.last_ts = ts;
            m.last_seq = seq;
            memcpy(back, &m, sizeof m);
            return 0;
        }
    }
    if (PyByteArray_Resize(marks, size + (Py_ssize_t)sizeof(HqMark)) < 0)
        return -1;
    HqMark m = {end, at, ts, seq, (int16_t)tl, (int16_t)part};
    memcpy(PyByteArray_AS_STRING(marks) + size, &m, sizeof m);
    return 0;
}

#endif
