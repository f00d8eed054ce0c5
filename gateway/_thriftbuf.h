/*
 * _thriftbuf.h: the binary-protocol reader and writer the gateway's C fast paths share
 * (gateway/_wirecheck.c, the Thrift fast codec; gateway/store/_hbasecodec.c, the HBase codec).
 * Moved unchanged out of _wirecheck.c; every function is static, one copy per extension.
 */
#ifndef HQUEUE_THRIFTBUF_H
#define HQUEUE_THRIFTBUF_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_rowkey.h"

#ifndef MAX_DEPTH
#define MAX_DEPTH 64
#endif

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}


typedef struct {
    const uint8_t *buf;
    int64_t len;
    int64_t pos;
} Reader;

static inline int rd_need(Reader *r, int64_t n) { return r->pos + n <= r->len; }

/* A binary string at r->pos: its offset and length. 1 ok, 0 truncated. */
static inline int rd_str(Reader *r, int64_t *at, int64_t *len)
{
    if (!rd_need(r, 4))
        return 0;
    int64_t n = be32(r->buf + r->pos);
    r->pos += 4;
    if (n < 0 || !rd_need(r, n))
        return 0;
    *at = r->pos;
    *len = n;
    r->pos += n;
    return 1;
}

/* A field header: its type (0 at the end of a struct) and id. 1 ok, 0 truncated. */
static inline int rd_field(Reader *r, uint8_t *type, int16_t *id)
{
    if (!rd_need(r, 1))
        return 0;
    *type = r->buf[r->pos++];
    if (*type == 0)
        return 1;
    if (!rd_need(r, 2))
        return 0;
    *id = (int16_t)((r->buf[r->pos] << 8) | r->buf[r->pos + 1]);
    r->pos += 2;
    return 1;
}

/* Skips one value of binary type t (the message is already checked, so sizes are sane). */
static inline int rd_skip(Reader *r, uint8_t t, int depth)
{
    if (depth > MAX_DEPTH)
        return 0;
    switch (t) {
    case 2: case 3: r->pos += 1; break;
    case 6: r->pos += 2; break;
    case 8: r->pos += 4; break;
    case 4: case 10: r->pos += 8; break;
    case 11:
        if (!rd_need(r, 4))
            return 0;
        r->pos += 4 + (int64_t)be32(r->buf + r->pos);
        break;
    case 12:
        for (;;) {
            if (!rd_need(r, 1))
                return 0;
            uint8_t ft = r->buf[r->pos++];
            if (ft == 0)
                break;
            r->pos += 2;
            if (!rd_skip(r, ft, depth + 1))
                return 0;
        }
        break;
    case 14: case 15: {
        if (!rd_need(r, 5))
            return 0;
        uint8_t et = r->buf[r->pos];
        int32_t n = be32(r->buf + r->pos + 1);
        r->pos += 5;
        for (int32_t i = 0; i < n; i++)
            if (!rd_skip(r, et, depth + 1))
                return 0;
        break;
    }
    case 13: {
        if (!rd_need(r, 6))
            return 0;
        uint8_t kt = r->buf[r->pos], vt = r->buf[r->pos + 1];
        int32_t n = be32(r->buf + r->pos + 2);
        r->pos += 6;
        for (int32_t i = 0; i < n; i++)
            if (!rd_skip(r, kt, depth + 1) || !rd_skip(r, vt, depth + 1))
                return 0;
        break;
    }
    default:
        return 0;
    }
    return r->pos <= r->len;
}

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Out;

static inline int out_grow(Out *o, Py_ssize_t n)
{
    if (o->len + n <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + n)
        cap *= 2;
    char *p = PyMem_Realloc(o->p, (size_t)cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    o->p = p;
    o->cap = cap;
    return 0;
}

static inline void put8(Out *o, uint8_t v) { o->p[o->len++] = (char)v; }
static inline void put16(Out *o, int16_t v)
{
    put8(o, (uint8_t)((uint16_t)v >> 8));
    put8(o, (uint8_t)v);
}
static inline void put32(Out *o, int32_t v)
{
    for (int s = 24; s >= 0; s -= 8)
        put8(o, (uint8_t)((uint32_t)v >> s));
}
static inline void put64(Out *o, int64_t v)
{
    for (int s = 56; s >= 0; s -= 8)
        put8(o, (uint8_t)((uint64_t)v >> s));
}
static inline void put_field(Out *o, uint8_t type, int16_t id)
{
    put8(o, type);
    put16(o, id);
}

/* Bytes of one TMessage on the binary protocol past its topic and value. */
#define TMESSAGE_OVERHEAD 40

/* One TMessage (id {timestamp, sequence}, partitionID, topic, value) on the binary protocol;
 * o must have room for TMESSAGE_OVERHEAD + tl + vl more bytes. The scan replies' one encoder
 * (encode_messages_reply here, scan_records' encoded reads in gateway/_records.c). */
static inline void put_tmessage(Out *o, long long ts, long seq, long partition,
                                const char *topic, Py_ssize_t tl, const char *value,
                                Py_ssize_t vl)
{
    /* Written through a local pointer at fixed offsets, o->len once at the end: put8's
     * o->p[o->len++] made the compiler store and reload o->len after every byte (a char
     * store may alias it), a third of an encoded scan's CPU per message. The offsets are
     * the ones gateway/_merge.c and gateway/scanrows.py read. */
    unsigned char *d = (unsigned char *)o->p + o->len;
    uint64_t t = (uint64_t)ts;
    d[0] = 12, d[1] = 0, d[2] = 1; /* id: TMessageID */
    d[3] = 10, d[4] = 0, d[5] = 1;
    hq_put_be64(d + 6, t);
    d[14] = 6, d[15] = 0, d[16] = 2;
    d[17] = (unsigned char)((uint16_t)seq >> 8), d[18] = (unsigned char)seq;
    d[19] = 0;
    d[20] = 6, d[21] = 0, d[22] = 2; /* partitionID */
    d[23] = (unsigned char)((uint16_t)partition >> 8), d[24] = (unsigned char)partition;
    d[25] = 11, d[26] = 0, d[27] = 3; /* topic */
    hq_put_be32(d + 28, (uint32_t)tl);
    memcpy(d + 32, topic, (size_t)tl);
    d += 32 + tl;
    d[0] = 11, d[1] = 0, d[2] = 4; /* value */
    hq_put_be32(d + 3, (uint32_t)vl);
    memcpy(d + 7, value, (size_t)vl);
    d[7 + vl] = 0; /* end of TMessage */
    o->len += TMESSAGE_OVERHEAD + tl + vl;
}

#endif
