/*
 * _fastjsonl: `hqueue import`'s common JSON Lines shape straight to put requests, in C.
 *
 * Why: decoding a block into Python objects (msgspec structs, then lists of topics and values,
 * grouped and handed to the client's encoder) cost the importer about 1.2 us of CPU per
 * message, more than the gateway needs to store it; on a small machine the import could not
 * keep up with the lean put rate. Here a block of lines becomes whole putMessagesWithPid /
 * putMessages calls with no Python object per line, and the parsing and writing run without
 * the GIL, so the sender threads keep sending meanwhile.
 *
 * encode_block(block, first, queue, batch_size, topic_partitions)
 *     -> [(partition | None, request bytes, record numbers: range | list)] | None
 * count_lines(block) -> the newlines in it
 *
 * None means "not the common shape": the caller takes the general path, which accepts the
 * rest of the format and names the line of an error. This module only decides what it is sure
 * of; hqueue/toolkit/_purejsonl.py is its twin (the same grammar, decisions and bytes,
 * HQUEUE_PUREPYTHON=1 selects it) and documents the grammar; tests/unit/test_fastjsonl.py
 * compares the two and both against the general path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../../hqueue_contract/hqueue_limits.h"

#define MAX_PARTITION HQ_MAX_PARTITION_ID
#define MAX_PARTITIONS HQ_MAX_PARTITIONS
#define MAX_TOPIC 255 /* bytes, as records._check_topic */

typedef struct {
    const char *t, *v; /* in the block, or in the scratch buffer when the string had escapes */
    Py_ssize_t tl, vl;
    int part; /* -1: none given */
} Line;

typedef struct {
    char *buf; /* decoded strings with escapes; never longer than the block, never moved */
    Py_ssize_t used, cap;
} Scratch;

/* ---- one line ---------------------------------------------------------------------------- */

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

static inline int hex4(const uint8_t *p, const uint8_t *end, unsigned *out)
{
    if (end - p < 4)
        return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

/* The length of the UTF-8 sequence at p (RFC 3629: no overlong forms, no surrogates, nothing
 * past U+10FFFF), 0 if it is not one. */
static inline int utf8_len(const uint8_t *p, const uint8_t *end)
{
    uint8_t c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF)
        return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[2] & 0xC0) != 0x80)
            return 0;
        uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return p[1] >= lo && p[1] <= hi ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return p[1] >= lo && p[1] <= hi ? 4 : 0;
    }
    return 0;
}

static inline char *put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* The rest of an escaped string into the scratch buffer (decoding never lengthens: two bytes
 * \n become one, six \uXXXX at most three, twelve for a surrogate pair four). *pp is at a
 * backslash; [start, *pp) is plain text already checked. 1 ok (*pp after the closing quote),
 * 0 not ours (or no memory: the general path may still take it). */
static int escaped(const uint8_t **pp, const uint8_t *start, const uint8_t *end, Scratch *s,
                   const char **out, Py_ssize_t *outlen)
{
    if (!s->buf) {
        s->buf = PyMem_RawMalloc((size_t)(s->cap ? s->cap : 1));
        if (!s->buf)
            return 0;
    }
    const uint8_t *p = *pp;
    char *o0 = s->buf + s->used, *o = o0;
    memcpy(o, start, (size_t)(p - start));
    o += p - start;
    while (p < end) {
        uint8_t c = *p;
        if (c == '"') {
            *out = o0;
            *outlen = o - o0;
            s->used += *outlen;
            *pp = p + 1;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c < 0x80 && c != '\\') {
            *o++ = (char)c;
            p++;
            continue;
        }
        if (c >= 0x80) {
            int n = utf8_len(p, end);
            if (!n)
                return 0;
            memcpy(o, p, (size_t)n);
            o += n;
            p += n;
            continue;
        }
        if (end - p < 2)
            return 0;
        uint8_t e = p[1];
        p += 2;
        switch (e) {
        case '"': case '\\': case '/': *o++ = (char)e; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (!hex4(p, end, &cp))
                return 0;
            p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return 0; /* a lone low surrogate */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, end, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return 0; /* a high surrogate not followed by a low one */
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            o = put_utf8(o, cp);
            break;
        }
        default:
            return 0;
        }
    }
    return 0; /* the line ended inside the string */
}

/* Whether the 8 bytes at p are all plain ASCII text (no quote, backslash, control character or
 * byte >= 0x80): values are mostly that, and 8 at a time is several times faster than one. */
static inline int plain8(const uint8_t *p)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t x, q, b;
    memcpy(&x, p, 8);
    q = x ^ (ones * '"');
    b = x ^ (ones * '\\');
    /* a zero byte of q or b, a byte below 0x20, a byte >= 0x80 (each test exact as a whole) */
    return ((((q - ones) & ~q) | ((b - ones) & ~b) | ((x - ones * 0x20) & ~x) | x) & highs) == 0;
}

/* A string; *pp is after its opening quote. Without escapes it stays where it is in the block.
 * 1 ok (*pp after the closing quote), 0 not ours. */
static inline int string(const uint8_t **pp, const uint8_t *end, Scratch *s, const char **out,
                         Py_ssize_t *outlen)
{
    const uint8_t *start = *pp, *p = start;
    for (;;) {
        while (end - p >= 8 && plain8(p))
            p += 8;
        if (p >= end)
            return 0;
        uint8_t c = *p;
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            p++;
        } else if (c == '"') {
            *out = (const char *)start;
            *outlen = p - start;
            *pp = p + 1;
            return 1;
        } else if (c >= 0x80) {
            int n = utf8_len(p, end);
            if (!n)
                return 0;
            p += n;
        } else if (c == '\\') {
            *pp = p;
            return escaped(pp, start, end, s, out, outlen);
        } else {
            return 0; /* a control character: not JSON */
        }
    }
}

/* A JSON integer, -?(0|[1-9][0-9]*); *value is its magnitude, capped at cap+1. */
static inline int integer(const uint8_t **pp, const uint8_t *end, int *negative, long *value,
                          long cap)
{
    const uint8_t *p = *pp;
    *negative = p < end && *p == '-';
    if (*negative)
        p++;
    if (p >= end || *p < '0' || *p > '9')
        return 0;
    long v = 0;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            if (v <= cap)
                v = v * 10 + (*p - '0');
            p++;
        }
    }
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
        return 0; /* a float: the general path decides */
    *value = v > cap ? cap + 1 : v;
    *pp = p;
    return 1;
}

static inline int is_null(const uint8_t **pp, const uint8_t *end)
{
    if (end - *pp >= 4 && memcmp(*pp, "null", 4) == 0) {
        *pp += 4;
        return 1;
    }
    return 0;
}

enum { F_TOPIC = 1, F_VALUE = 2, F_PARTITION = 4, F_TIMESTAMP = 8, F_SEQUENCE = 16 };

static inline int name_is(const uint8_t **pp, const uint8_t *end, const char *name,
                          Py_ssize_t len, int flag)
{
    if (end - *pp < len || memcmp(*pp, name, (size_t)len) != 0)
        return 0;
    *pp += len;
    return flag;
}

/* A member's name and its closing quote; 0 if it is none of ours. */
static inline int field_name(const uint8_t **pp, const uint8_t *end)
{
    switch (*pp < end ? **pp : 0) {
    case 't': {
        int f = name_is(pp, end, "topic\"", 6, F_TOPIC);
        return f ? f : name_is(pp, end, "timestamp\"", 10, F_TIMESTAMP);
    }
    case 'v': return name_is(pp, end, "value\"", 6, F_VALUE);
    case 'p': return name_is(pp, end, "partition\"", 10, F_PARTITION);
    case 's': return name_is(pp, end, "sequence\"", 9, F_SEQUENCE);
    default: return 0;
    }
}

/* One line [p, end) of the common shape into *line. 1 ok, 0 not ours. */
static int parse_line(const uint8_t *p, const uint8_t *end, Line *line, Scratch *s)
{
    int seen = 0;
    line->part = -1;
    p = skip_ws(p, end);
    if (p >= end || *p++ != '{')
        return 0;
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end || *p++ != '"')
            return 0;
        int f = field_name(&p, end);
        if (!f || (seen & f))
            return 0; /* unknown, escaped or repeated: the general path says which */
        seen |= f;
        p = skip_ws(p, end);
        if (p >= end || *p++ != ':')
            return 0;
        p = skip_ws(p, end);
        if (p >= end)
            return 0;
        if (f == F_TOPIC || f == F_VALUE) {
            if (*p++ != '"')
                return 0;
            if (f == F_TOPIC ? !string(&p, end, s, &line->t, &line->tl)
                             : !string(&p, end, s, &line->v, &line->vl))
                return 0;
        } else if (!is_null(&p, end)) {
            int negative;
            long v;
            if (!integer(&p, end, &negative, &v, MAX_PARTITION))
                return 0;
            if (f == F_PARTITION) {
                if (negative || v > MAX_PARTITION)
                    return 0;
                line->part = (int)v;
            }
        }
        p = skip_ws(p, end);
        if (p >= end)
            return 0;
        if (*p == '}')
            break;
        if (*p++ != ',')
            return 0;
    }
    p = skip_ws(p + 1, end);
    if (p != end || (seen & (F_TOPIC | F_VALUE)) != (F_TOPIC | F_VALUE))
        return 0;
    return line->tl >= 1 && line->tl <= MAX_TOPIC && line->vl <= INT32_MAX;
}

/* ---- the block ----------------------------------------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_of(const char *p, Py_ssize_t n) /* zlib.crc32 */
{
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++)
        c = crc_table[(c ^ (uint8_t)p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

typedef struct {
    int part;            /* -1: putMessages */
    Py_ssize_t lo, hi;   /* into the order of lines */
    Py_ssize_t step;     /* record numbers evenly spaced by step, 0 if not */
    Py_ssize_t size;     /* request bytes */
    char *out;           /* the request's bytes object's buffer */
} Call;

typedef struct {
    Line *lines;
    Py_ssize_t n;
    Py_ssize_t *order; /* line indices, grouped by partition (ascending), file order inside */
    Call *calls;
    Py_ssize_t ncalls;
    Scratch scratch;
} Block;

static void block_free(Block *b)
{
    PyMem_RawFree(b->lines);
    PyMem_RawFree(b->order);
    PyMem_RawFree(b->calls);
    PyMem_RawFree(b->scratch.buf);
}

/* Lines parsed into b->lines. 1 ok, 0 not ours (or no memory). */
static int parse_block(Block *b, const uint8_t *buf, Py_ssize_t len)
{
    Py_ssize_t cap = 1;
    for (const uint8_t *q = buf, *end = buf + len; (q = memchr(q, '\n', (size_t)(end - q))); q++)
        cap++;
    b->lines = PyMem_RawMalloc(sizeof(Line) * (size_t)cap);
    if (!b->lines)
        return 0;
    b->scratch.cap = len;
    const uint8_t *p = buf, *end = buf + len;
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *stop = nl ? nl : end;
        if (stop == p || !parse_line(p, stop, &b->lines[b->n], &b->scratch))
            return 0; /* an empty line, or not the common shape */
        b->n++;
        p = stop + 1;
    }
    return b->n > 0;
}

static inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t b) { return (a + b - 1) / b; }

/* The calls of order[lo, hi) (one partition, or all without one), batch_size at most each and
 * evenly filled (blocks._spans). */
static void add_calls(Block *b, int part, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t batch_size,
                      Py_ssize_t queue_len)
{
    Py_ssize_t n = hi - lo, calls = ceil_div(n, batch_size), step = ceil_div(n, calls);
    for (Py_ssize_t a = 0; a < n; a += step) {
        Call *c = &b->calls[b->ncalls++];
        c->part = part;
        c->lo = lo + a;
        c->hi = lo + (a + step < n ? a + step : n);
        c->size = 8 + (part < 0 ? 11 : 18) + 4 + 3 + 4 + queue_len + (part < 0 ? 0 : 5) + 8 + 1;
        for (Py_ssize_t i = c->lo; i < c->hi; i++) {
            Line *l = &b->lines[b->order[i]];
            c->size += 15 + l->tl + l->vl;
        }
        c->step = 1;
        if (c->hi - c->lo > 1) {
            c->step = b->order[c->lo + 1] - b->order[c->lo];
            for (Py_ssize_t i = c->lo + 2; i < c->hi && c->step; i++)
                if (b->order[i] - b->order[i - 1] != c->step)
                    c->step = 0;
        }
    }
}

/* Lines grouped into calls. 1 ok, 0 not ours (some lines with a partition, some without), -1
 * no memory. */
static int plan_calls(Block *b, Py_ssize_t batch_size, int topic_partitions, Py_ssize_t queue_len)
{
    Py_ssize_t n = b->n, given = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        given += b->lines[i].part >= 0;
    if (given && given != n)
        return 0;
    b->order = PyMem_RawMalloc(sizeof(Py_ssize_t) * (size_t)n);
    b->calls = PyMem_RawMalloc(sizeof(Call) * (size_t)n); /* at most one call per line */
    if (!b->order || !b->calls)
        return -1;
    if (!given && !topic_partitions) { /* putMessages: the gateway picks the partitions */
        for (Py_ssize_t i = 0; i < n; i++)
            b->order[i] = i;
        add_calls(b, -1, 0, n, batch_size, queue_len);
        return 1;
    }
    if (!given) { /* --partition-by-topic */
        const char *last = NULL;
        Py_ssize_t last_len = -1;
        int last_part = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            Line *l = &b->lines[i];
            if (l->tl != last_len || memcmp(l->t, last, (size_t)l->tl) != 0) {
                last = l->t;
                last_len = l->tl;
                last_part = (int)(crc32_of(l->t, l->tl) % (uint32_t)topic_partitions);
            }
            l->part = last_part;
        }
    }
    int maxp = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (b->lines[i].part > maxp)
            maxp = b->lines[i].part;
    Py_ssize_t *start = PyMem_RawCalloc((size_t)maxp + 2, sizeof(Py_ssize_t));
    if (!start)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) /* a counting sort: stable, so file order per partition */
        start[b->lines[i].part + 1]++;
    for (int p = 0; p <= maxp; p++)
        start[p + 1] += start[p];
    for (Py_ssize_t i = 0; i < n; i++)
        b->order[start[b->lines[i].part]++] = i;
    /* start[p] is now where partition p ends */
    Py_ssize_t lo = 0;
    for (int p = 0; p <= maxp; p++) {
        if (start[p] > lo)
            add_calls(b, p, lo, start[p], batch_size, queue_len);
        lo = start[p];
    }
    PyMem_RawFree(start);
    return 1;
}

/* ---- writing the calls (binary protocol, as thriftpy2's client writes them) ---------------- */

static inline char *w8(char *o, uint8_t v)
{
    *o++ = (char)v;
    return o;
}
static inline char *w16(char *o, int v)
{
    o[0] = (char)((unsigned)v >> 8);
    o[1] = (char)v;
    return o + 2;
}
static inline char *w32(char *o, uint32_t v)
{
    o[0] = (char)(v >> 24);
    o[1] = (char)(v >> 16);
    o[2] = (char)(v >> 8);
    o[3] = (char)v;
    return o + 4;
}
static inline char *wfield(char *o, uint8_t type, int id) { return w16(w8(o, type), id); }
static inline char *wbytes(char *o, const char *p, Py_ssize_t n)
{
    o = w32(o, (uint32_t)n);
    memcpy(o, p, (size_t)n);
    return o + n;
}

static char *write_call(const Block *b, const Call *c, const char *queue, Py_ssize_t queue_len)
{
    const char *name = c->part < 0 ? "putMessages" : "putMessagesWithPid";
    char *o = c->out;
    o = w32(o, 0x80010001u); /* strict binary, version 1, CALL */
    o = wbytes(o, name, (Py_ssize_t)strlen(name));
    o = w32(o, 0); /* seqid */
    o = wbytes(wfield(o, 11, 1), queue, queue_len); /* queueName */
    if (c->part >= 0)
        o = w16(wfield(o, 6, 2), c->part); /* partitionID */
    o = wfield(o, 15, c->part < 0 ? 2 : 3); /* tMessages: list<TMessage> */
    o = w32(w8(o, 12), (uint32_t)(c->hi - c->lo));
    for (Py_ssize_t i = c->lo; i < c->hi; i++) {
        const Line *l = &b->lines[b->order[i]];
        o = wbytes(wfield(o, 11, 3), l->t, l->tl);
        o = wbytes(wfield(o, 11, 4), l->v, l->vl);
        o = w8(o, 0);
    }
    return w8(o, 0); /* end of the arguments */
}

static PyObject *numbers_of(const Block *b, const Call *c, Py_ssize_t first)
{
    Py_ssize_t a = first + b->order[c->lo], z = first + b->order[c->hi - 1];
    if (c->step)
        return PyObject_CallFunction((PyObject *)&PyRange_Type, "nnn", a, z + 1, c->step);
    PyObject *out = PyList_New(c->hi - c->lo);
    if (!out)
        return NULL;
    for (Py_ssize_t i = c->lo; i < c->hi; i++) {
        PyObject *v = PyLong_FromSsize_t(first + b->order[i]);
        if (!v) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i - c->lo, v);
    }
    return out;
}

static PyObject *encode_block(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    Py_ssize_t first, batch_size, queue_len;
    const char *queue;
    int topic_partitions;
    if (!PyArg_ParseTuple(args, "y*ny#ni", &view, &first, &queue, &queue_len, &batch_size,
                          &topic_partitions))
        return NULL;
    PyObject *result = NULL, **payloads = NULL;
    Block b = {0};
    if (batch_size < 1 || batch_size > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "batch_size must be 1..2147483647");
        goto done;
    }
    if (topic_partitions < 0 || topic_partitions > MAX_PARTITIONS) {
        PyErr_SetString(PyExc_ValueError, "topic_partitions must be 0 (none) or 1.." HQ_STR(HQ_MAX_PARTITIONS));
        goto done;
    }
    if (first < 0 || queue_len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "first must be >= 0 and the queue under 2 GiB");
        goto done;
    }
    int planned;
    Py_BEGIN_ALLOW_THREADS
    planned = parse_block(&b, view.buf, view.len) ? plan_calls(&b, batch_size, topic_partitions,
                                                                queue_len)
                                                   : 0;
    Py_END_ALLOW_THREADS
    if (planned < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (planned == 0) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    payloads = PyMem_Calloc((size_t)b.ncalls, sizeof(PyObject *));
    if (!payloads) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < b.ncalls; i++) {
        if (!(payloads[i] = PyBytes_FromStringAndSize(NULL, b.calls[i].size)))
            goto done;
        b.calls[i].out = PyBytes_AS_STRING(payloads[i]);
    }
    int miscounted = 0;
    Py_BEGIN_ALLOW_THREADS /* the bytes objects are ours alone until returned */
    for (Py_ssize_t i = 0; i < b.ncalls; i++)
        miscounted |= write_call(&b, &b.calls[i], queue, queue_len) !=
                      b.calls[i].out + b.calls[i].size;
    Py_END_ALLOW_THREADS
    if (miscounted) {
        PyErr_SetString(PyExc_SystemError, "_fastjsonl: request size miscounted");
        goto done;
    }
    PyObject *list = PyList_New(b.ncalls);
    if (!list)
        goto done;
    for (Py_ssize_t i = 0; i < b.ncalls; i++) {
        const Call *c = &b.calls[i];
        PyObject *nums = numbers_of(&b, c, first);
        PyObject *item = nums ? c->part < 0 ? Py_BuildValue("(OON)", Py_None, payloads[i], nums)
                                            : Py_BuildValue("(iON)", c->part, payloads[i], nums)
                              : NULL;
        if (!item) {
            Py_DECREF(list);
            goto done;
        }
        PyList_SET_ITEM(list, i, item);
    }
    result = list;
done:
    if (payloads) {
        for (Py_ssize_t i = 0; i < b.ncalls; i++)
            Py_XDECREF(payloads[i]);
        PyMem_Free(payloads);
    }
    block_free(&b);
    PyBuffer_Release(&view);
    return result;
}

/* bytes.count(b"\n") looks at one byte at a time; memchr is several times faster, and a block's
 * lines are counted once more before it is parsed (blocks.read_blocks numbers them) */
static PyObject *count_lines(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    Py_ssize_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    const char *q = view.buf, *end = q + view.len;
    while ((q = memchr(q, '\n', (size_t)(end - q)))) {
        n++;
        q++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"count_lines", count_lines, METH_VARARGS, "count_lines(block) -> the newlines in it"},
    {"encode_block", encode_block, METH_VARARGS,
     "encode_block(block, first, queue, batch_size, topic_partitions) -> "
     "[(partition | None, bytes, range | list)] | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastjsonl",
    "hqueue import's common JSON Lines shape to put requests, without the GIL.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastjsonl(void)
{
    crc_init();
    return PyModule_Create(&module);
}
