/*
 * _wirecheck: finds where one Thrift message ends in a byte buffer and checks that it is sane
 * before thriftpy2 decodes it.
 *
 * Why: thriftpy2's decoders trust the wire. A list whose element type reads no bytes (STOP,
 * VOID) makes its skip loop spin 2^31 times holding the GIL; a length prefix of 2 GiB is
 * allocated before a byte arrives; a list of a billion one-byte elements becomes a billion
 * Python objects. This scanner walks the message structure (field headers, lengths, container
 * headers; never the contents of strings) and refuses invalid types, negative sizes, strings
 * and containers over the limits, too many values in total, and nesting deeper than 64.
 *
 * It is resumable: when the buffer ends mid-message it returns how many bytes it needs at the
 * least, and an opaque state to continue from, so a message trickling in is walked once.
 *
 * scan(buffer, compact, state, max_string, max_container, max_values)
 *   -> (0, end, None, name)         a whole valid message occupies buffer[0:end]
 *   -> (1, need, state, name|None)  incomplete; call again once len(buffer) >= need
 *   raises ValueError(reason)       the bytes are not a message we accept
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "_thriftbuf.h"
#include "_spans.h"

#define MAX_DEPTH 64
/* a step of the walk, inlined into it: see walk() */
#define HQ_STEP static inline __attribute__((always_inline))

enum { F_STRUCT = 1, F_LIST = 2, F_MAP = 3 };

typedef struct {
    uint8_t kind;
    uint8_t t1; /* list element type, map key type */
    uint8_t t2; /* map value type */
    uint8_t phase; /* map: 0 = next is a key, 1 = next is a value */
    int64_t remaining; /* list elements / map entries left */
} Frame;

typedef struct {
    int64_t pos;
    int64_t values;
    int64_t name_off;
    int64_t name_len;
    int32_t depth;
    int32_t header_done;
    Frame frames[MAX_DEPTH];
} State;

typedef struct {
    const uint8_t *buf;
    int64_t len;
    int64_t max_string;
    int64_t max_container;
    int64_t max_values;
    int64_t need; /* set when a step does not fit: bytes needed in total */
    const char *error;
    char message[160];
} Ctx;

/* Step results */
#define OK 0
#define MORE 1
#define BAD 2
#define STOP 3 /* a struct's end */

static int bad(Ctx *c, const char *fmt, long long a)
{
    PyOS_snprintf(c->message, sizeof c->message, fmt, a);
    c->error = c->message;
    return BAD;
}

static int more(Ctx *c, int64_t need)
{
    c->need = need;
    return MORE;
}

/* Reads an unsigned varint of at most max_bytes at *at. */
static int varint(Ctx *c, int64_t *at, int max_bytes, uint64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*at + i >= c->len)
            return more(c, *at + i + 1);
        uint8_t b = c->buf[*at + i];
        if (shift == 63 && b > 1) /* bits past the 64th: thriftpy2 would decode >= 2^64 */
            return bad(c, "varint over 64 bits (byte 0x%llx)", b);
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *at += i + 1;
            *out = v;
            return OK;
        }
        shift += 7;
    }
    return bad(c, "varint longer than %lld bytes", max_bytes);
}

/* A zigzag varint's raw value must fit its type: thriftpy2's pure-Python compact decoder turns
 * any varint into a Python int, so an i32 could arrive as 2^34 and an i16 partition id as 70000,
 * and be used (or stored) as such. */
static int varint_within(Ctx *c, int64_t *at, int max_bytes, uint64_t max, const char *what)
{
    uint64_t v;
    int r = varint(c, at, max_bytes, &v);
    if (r != OK)
        return r;
    if (v > max) {
        PyOS_snprintf(c->message, sizeof c->message, "%s varint 0x%llx is out of range", what,
                      (unsigned long long)v);
        c->error = c->message;
        return BAD;
    }
    return OK;
}

HQ_STEP int check_size(Ctx *c, int64_t size, int64_t limit, const char *what)
{
    if (size < 0)
        return bad(c, "negative size %lld", (long long)size);
    if (size > limit) {
        PyOS_snprintf(c->message, sizeof c->message, "%s of %lld is over the limit of %lld", what,
                      (long long)size, (long long)limit);
        c->error = c->message;
        return BAD;
    }
    return OK;
}

HQ_STEP int push(Ctx *c, State *s, uint8_t kind, uint8_t t1, uint8_t t2, int64_t remaining)
{
    if (s->depth >= MAX_DEPTH)
        return bad(c, "nesting deeper than %lld", MAX_DEPTH);
    Frame *f = &s->frames[s->depth++];
    f->kind = kind;
    f->t1 = t1;
    f->t2 = t2;
    f->phase = 0;
    f->remaining = remaining;
    return OK;
}

/* The message header ends at p: the arguments struct starts there, once p bytes are in. */
static int begin_arguments(Ctx *c, State *s, int64_t p)
{
    if (p > c->len)
        return more(c, p);
    s->pos = p;
    s->header_done = 1;
    return push(c, s, F_STRUCT, 0, 0, 0);
}

/* ---- binary protocol ------------------------------------------------------------------ */

static int binary_type_ok(uint8_t t)
{
    switch (t) {
    case 2: case 3: case 4: case 6: case 8: case 10: case 11: case 12: case 13: case 14: case 15:
        return 1;
    default:
        return 0;
    }
}

/* The value of type t starting at *at: scalars and strings are consumed whole, containers
 * and structs push a frame. Nothing is committed unless the whole step fits. */
HQ_STEP int binary_value(Ctx *c, State *s, uint8_t t, int64_t *at, int in_field)
{
    (void)in_field; /* a binary field's value is encoded like any other value */
    int64_t p = *at;
    switch (t) {
    case 2: case 3: p += 1; break;
    case 6: p += 2; break;
    case 8: p += 4; break;
    case 4: case 10: p += 8; break;
    case 11: {
        if (p + 4 > c->len)
            return more(c, p + 4);
        int32_t n = be32(c->buf + p);
        if (check_size(c, n, c->max_string, "string") != OK)
            return BAD;
        p += 4 + (int64_t)n;
        break;
    }
    case 12:
        if (push(c, s, F_STRUCT, 0, 0, 0) != OK)
            return BAD;
        break;
    case 14: case 15: {
        if (p + 5 > c->len)
            return more(c, p + 5);
        uint8_t et = c->buf[p];
        int32_t n = be32(c->buf + p + 1);
        if (check_size(c, n, c->max_container, "list") != OK)
            return BAD;
        if (n > 0 && !binary_type_ok(et))
            return bad(c, "invalid list element type %lld", et);
        p += 5;
        if (p > c->len)
            return more(c, p);
        if (push(c, s, F_LIST, et, 0, n) != OK)
            return BAD;
        break;
    }
    case 13: {
        if (p + 6 > c->len)
            return more(c, p + 6);
        uint8_t kt = c->buf[p], vt = c->buf[p + 1];
        int32_t n = be32(c->buf + p + 2);
        if (check_size(c, n, c->max_container, "map") != OK)
            return BAD;
        if (n > 0 && (!binary_type_ok(kt) || !binary_type_ok(vt)))
            return bad(c, "invalid map key or value type %lld", kt * 256 + vt);
        p += 6;
        if (push(c, s, F_MAP, kt, vt, n) != OK)
            return BAD;
        break;
    }
    default:
        return bad(c, "invalid type %lld", t);
    }
    if (p > c->len) {
        if (t == 12 || t == 13 || t == 14 || t == 15)
            s->depth--; /* undo the push: the step is retried whole */
        return more(c, p);
    }
    *at = p;
    return OK;
}

static int binary_header(Ctx *c, State *s)
{
    int64_t p = 0;
    if (c->len < 4)
        return more(c, 4);
    int32_t first = be32(c->buf);
    int64_t name_len;
    if (first < 0) { /* strict: version | type, name, seqid */
        if (((uint32_t)first & 0xffff0000u) != 0x80010000u)
            return bad(c, "bad protocol version 0x%llx", (uint32_t)first);
        if (c->len < 8)
            return more(c, 8);
        name_len = be32(c->buf + 4);
        if (check_size(c, name_len, 4096, "method name") != OK)
            return BAD;
        s->name_off = 8;
        p = 8 + name_len + 4;
    } else { /* old style: name, type, seqid */
        name_len = first;
        if (check_size(c, name_len, 4096, "method name") != OK)
            return BAD;
        s->name_off = 4;
        p = 4 + name_len + 1 + 4;
    }
    s->name_len = name_len;
    return begin_arguments(c, s, p);
}

HQ_STEP int binary_field(Ctx *c, int64_t *at, uint8_t *type)
{
    if (*at >= c->len)
        return more(c, *at + 1);
    uint8_t t = c->buf[*at];
    if (t == 0)
        return STOP;
    if (!binary_type_ok(t))
        return bad(c, "invalid field type %lld", t);
    if (*at + 3 > c->len)
        return more(c, *at + 3);
    *at += 3; /* type, i16 field id */
    *type = t;
    return OK;
}

/* ---- compact protocol ----------------------------------------------------------------- */

/* compact type ids: 1/2 bool, 3 byte, 4 i16, 5 i32, 6 i64, 7 double, 8 binary, 9 list,
 * 10 set, 11 map, 12 struct */
HQ_STEP int compact_value(Ctx *c, State *s, uint8_t t, int64_t *at, int in_field)
{
    int64_t p = *at;
    uint64_t v;
    int r;
    switch (t) {
    case 1: case 2:
        if (!in_field)
            p += 1; /* a bool element is a byte; a bool field carries it in its type */
        break;
    case 3: p += 1; break;
    case 4: if ((r = varint_within(c, &p, 3, 0xffffu, "i16")) != OK) return r; break;
    case 5: if ((r = varint_within(c, &p, 5, 0xffffffffu, "i32")) != OK) return r; break;
    case 6: if ((r = varint_within(c, &p, 10, UINT64_MAX, "i64")) != OK) return r; break;
    case 7: p += 8; break;
    case 8:
        if ((r = varint(c, &p, 5, &v)) != OK)
            return r;
        if (check_size(c, (int64_t)v, c->max_string, "string") != OK)
            return BAD;
        p += (int64_t)v;
        break;
    case 12:
        if (push(c, s, F_STRUCT, 0, 0, 0) != OK)
            return BAD;
        break;
    case 9: case 10: {
        if (p >= c->len)
            return more(c, p + 1);
        uint8_t h = c->buf[p++];
        uint8_t et = h & 0x0f;
        int64_t n = h >> 4;
        if (n == 15) {
            if ((r = varint(c, &p, 5, &v)) != OK)
                return r;
            n = (int64_t)v;
        }
        if (check_size(c, n, c->max_container, "list") != OK)
            return BAD;
        if (n > 0 && (et < 1 || et > 12))
            return bad(c, "invalid list element type %lld", et);
        if (p > c->len)
            return more(c, p);
        if (push(c, s, F_LIST, et, 0, n) != OK)
            return BAD;
        break;
    }
    case 11: {
        if ((r = varint(c, &p, 5, &v)) != OK)
            return r;
        int64_t n = (int64_t)v;
        if (check_size(c, n, c->max_container, "map") != OK)
            return BAD;
        uint8_t kt = 0, vt = 0;
        if (n > 0) {
            if (p >= c->len)
                return more(c, p + 1);
            kt = c->buf[p] >> 4;
            vt = c->buf[p] & 0x0f;
            p++;
            if (kt < 1 || kt > 12 || vt < 1 || vt > 12)
                return bad(c, "invalid map key or value type %lld", kt * 16 + vt);
        }
        if (push(c, s, F_MAP, kt, vt, n) != OK)
            return BAD;
        break;
    }
    default:
        return bad(c, "invalid type %lld", t);
    }
    if (p > c->len) {
        if (t == 9 || t == 10 || t == 11 || t == 12)
            s->depth--;
        return more(c, p);
    }
    *at = p;
    return OK;
}

static int compact_header(Ctx *c, State *s)
{
    int64_t p = 0;
    uint64_t v;
    int r;
    if (c->len < 2)
        return more(c, 2);
    if (c->buf[0] != 0x82)
        return bad(c, "bad compact protocol id 0x%llx", c->buf[0]);
    if ((c->buf[1] & 0x1f) != 1)
        return bad(c, "bad compact protocol version %lld", c->buf[1] & 0x1f);
    p = 2;
    if ((r = varint_within(c, &p, 5, 0xffffffffu, "seqid")) != OK)
        return r;
    if ((r = varint(c, &p, 5, &v)) != OK) /* name length */
        return r;
    if (check_size(c, (int64_t)v, 4096, "method name") != OK)
        return BAD;
    s->name_off = p;
    s->name_len = (int64_t)v;
    p += (int64_t)v;
    return begin_arguments(c, s, p);
}

HQ_STEP int compact_field(Ctx *c, int64_t *at, uint8_t *type)
{
    if (*at >= c->len)
        return more(c, *at + 1);
    uint8_t b = c->buf[*at];
    if (b == 0)
        return STOP;
    int64_t p = *at + 1;
    if ((b >> 4) == 0) { /* long form: a zigzag varint field id follows */
        int r = varint_within(c, &p, 3, 0xffffu, "field id");
        if (r != OK)
            return r;
    }
    *at = p;
    *type = b & 0x0f;
    return OK;
}

/* ---- the walk, shared by both protocols ------------------------------------------------ */

typedef int (*header_fn)(Ctx *, State *);
typedef int (*field_fn)(Ctx *, int64_t *, uint8_t *);
typedef int (*value_fn)(Ctx *, State *, uint8_t, int64_t *, int);

/* Consumes one step (a field, a list element, a map key or value) at a time; a step that does
 * not fit in the buffer is not committed, so the walk resumes exactly there. */
/* Inlined, with the HQ_STEP functions, into scan() once per protocol: called through
 * function pointers, a 1000-message put's scan took 29 us in binary and 35 us in compact;
 * specialised per protocol by the compiler, 11-12 us and 20-21 us (timeit, AMD EPYC VM). */
HQ_STEP int walk(Ctx *c, State *s, header_fn header, field_fn field, value_fn value)
{
    if (!s->header_done) {
        int r = header(c, s);
        if (r != OK)
            return r;
    }
    while (s->depth > 0) {
        Frame *f = &s->frames[s->depth - 1];
        int64_t at = s->pos;
        int r;
        if (f->kind == F_STRUCT) {
            uint8_t t = 0;
            r = field(c, &at, &t);
            if (r == STOP) {
                s->pos = at + 1;
                s->depth--;
                continue;
            }
            if (r == OK)
                r = value(c, s, t, &at, 1);
        } else {
            if (f->remaining == 0) {
                s->depth--;
                continue;
            }
            uint8_t phase = f->phase;
            int64_t remaining = f->remaining;
            uint8_t t = (f->kind == F_MAP && phase) ? f->t2 : f->t1;
            if (f->kind == F_MAP)
                f->phase ^= 1;
            if (f->kind == F_LIST || phase)
                f->remaining--;
            r = value(c, s, t, &at, 0);
            if (r != OK) {
                f->phase = phase;
                f->remaining = remaining;
            }
        }
        if (r != OK)
            return r;
        s->pos = at;
        if (++s->values > c->max_values)
            return bad(c, "more than %lld values in one request", c->max_values);
    }
    return OK;
}

/* ---- Python binding ------------------------------------------------------------------- */

static PyObject *scan(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    int compact;
    PyObject *state_obj;
    long long max_string, max_container, max_values;
    if (!PyArg_ParseTuple(args, "y*pOLLL", &view, &compact, &state_obj, &max_string,
                          &max_container, &max_values))
        return NULL;

    State s;
    if (state_obj == Py_None) {
        memset(&s, 0, sizeof s);
    } else {
        char *raw;
        Py_ssize_t n;
        if (PyBytes_AsStringAndSize(state_obj, &raw, &n) < 0 || n != (Py_ssize_t)sizeof s) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "state must be a value scan() returned");
            return NULL;
        }
        memcpy(&s, raw, sizeof s);
    }
    Ctx c;
    memset(&c, 0, sizeof c);
    c.buf = (const uint8_t *)view.buf;
    c.len = view.len;
    c.max_string = max_string;
    c.max_container = max_container;
    c.max_values = max_values;

    int r = compact ? walk(&c, &s, compact_header, compact_field, compact_value)
                    : walk(&c, &s, binary_header, binary_field, binary_value);

    PyObject *name = Py_None;
    Py_INCREF(Py_None);
    if (s.header_done && s.name_off + s.name_len <= c.len) {
        Py_DECREF(Py_None);
        name = PyBytes_FromStringAndSize((const char *)c.buf + s.name_off, s.name_len);
    }
    PyBuffer_Release(&view);
    if (name == NULL)
        return NULL;
    if (r == BAD) {
        Py_DECREF(name);
        PyErr_SetString(PyExc_ValueError, c.error);
        return NULL;
    }
    if (r == OK)
        return Py_BuildValue("(iLOO)", 0, (long long)s.pos, Py_None, name);
    PyObject *state = PyBytes_FromStringAndSize((const char *)&s, sizeof s);
    if (state == NULL) {
        Py_DECREF(name);
        return NULL;
    }
    PyObject *result = Py_BuildValue("(iLNN)", 1, (long long)c.need, state, name);
    return result;
}

/* ---- the put fast path -------------------------------------------------------------- */

/* extract_put(message, with_pid, single, max_value)
 *   -> (seqid, queue, pid | None, topics, values), or None when the message needs the generic
 *      path (a message's own partitionID or id, unknown fields, a value over max_value, an
 *      empty or long topic: the generic path then answers exactly as it always does).
 * ``message`` is one whole binary-protocol put request that scan() accepted. Puts are most of
 * a queue's traffic; this spares them building a Python object per message and field: topics
 * and values are Spans (gateway/_spans.h) over ``message`` (over a copy when it is not bytes),
 * which wal_records copies from straight into the log record. */

/* A Spans' table while it is filled: HqSpans in an Out (gateway/_thriftbuf.h), whose
 * PyMem_Realloc'd bytes are aligned for them. */
static int table_add(Out *t, int64_t at, int64_t len)
{
    if (out_grow(t, (Py_ssize_t)sizeof(HqSpan)) < 0)
        return -1;
    HqSpan *span = (HqSpan *)(t->p + t->len);
    span->at = at;
    span->len = len;
    t->len += (Py_ssize_t)sizeof(HqSpan);
    return 0;
}

/* A Spans over buffer taking the table's spans (the table is left empty). */
static PyObject *table_spans(Out *t, PyObject *buffer, int share)
{
    Py_ssize_t count = t->len / (Py_ssize_t)sizeof(HqSpan);
    PyObject *s = hq_spans_new(buffer, (HqSpan *)t->p, count, share);
    t->p = NULL;
    t->len = t->cap = 0;
    return s;
}

/* A TMessage at r->pos; appends its topic and value. 1 ok, 0 generic path, -1 Python error. */
static int rd_message(Reader *r, int with_pid, int64_t max_value, Out *topics, Out *values)
{
    int64_t topic_at = -1, topic_len = 0, value_at = -1, value_len = 0;
    for (;;) {
        uint8_t ft;
        int16_t fid = 0;
        if (!rd_field(r, &ft, &fid))
            return 0;
        if (ft == 0)
            break;
        if (fid == 3 && ft == 11) {
            if (!rd_str(r, &topic_at, &topic_len))
                return 0;
        } else if (fid == 4 && ft == 11) {
            if (!rd_str(r, &value_at, &value_len))
                return 0;
        } else if (fid == 2 && ft == 6 && with_pid) {
            r->pos += 2; /* overridden by the call's partitionID */
        } else {
            return 0;
        }
    }
    if (topic_at < 0 || value_at < 0 || topic_len < 1 || topic_len > 255 || value_len > max_value)
        return 0;
    if (table_add(topics, topic_at, topic_len) < 0 || table_add(values, value_at, value_len) < 0)
        return -1;
    return 1;
}

static PyObject *extract_put(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    int with_pid, single;
    long long max_value;
    if (!PyArg_ParseTuple(args, "y*ppL", &view, &with_pid, &single, &max_value))
        return NULL;
    Reader r = {(const uint8_t *)view.buf, view.len, 0};
    PyObject *result = NULL, *queue = NULL, *pid = NULL, *buffer = NULL;
    PyObject *topic_spans = NULL, *value_spans = NULL;
    Out topics = {NULL, 0, 0}, values = {NULL, 0, 0};
    int32_t seqid = 0;
    int error = 0, have_list = 0; /* error: a Python exception is set */

    /* header */
    if (!rd_need(&r, 4))
        goto done;
    int32_t first = be32(r.buf);
    if (first < 0) {
        if (!rd_need(&r, 8))
            goto done;
        r.pos = 8 + (int64_t)be32(r.buf + 4);
    } else {
        r.pos = 4 + (int64_t)first + 1;
    }
    if (!rd_need(&r, 4))
        goto done;
    seqid = be32(r.buf + r.pos);
    r.pos += 4;

    /* arguments */
    for (;;) {
        uint8_t ft;
        int16_t fid = 0;
        if (!rd_field(&r, &ft, &fid))
            goto done;
        if (ft == 0)
            break;
        int msgs_fid = with_pid ? 3 : 2;
        if (fid == 1 && ft == 11) {
            int64_t at, n;
            if (!rd_str(&r, &at, &n))
                goto done;
            Py_XDECREF(queue);
            queue = PyBytes_FromStringAndSize((const char *)r.buf + at, n);
            if (!queue) {
                error = 1;
                goto done;
            }
        } else if (with_pid && fid == 2 && ft == 6) {
            if (!rd_need(&r, 2))
                goto done;
            Py_XDECREF(pid);
            pid = PyLong_FromLong((int16_t)((r.buf[r.pos] << 8) | r.buf[r.pos + 1]));
            if (!pid) {
                error = 1;
                goto done;
            }
            r.pos += 2;
        } else if (fid == msgs_fid && single && ft == 12) {
            int m = rd_message(&r, with_pid, max_value, &topics, &values);
            if (m <= 0) {
                error = m < 0;
                goto done;
            }
            have_list = 1;
        } else if (fid == msgs_fid && !single && (ft == 15 || ft == 14)) {
            if (!rd_need(&r, 5) || r.buf[r.pos] != 12)
                goto done;
            int32_t n = be32(r.buf + r.pos + 1);
            r.pos += 5;
            /* sized once: each message takes a byte at least, so no more than are left */
            Py_ssize_t room = (n < r.len - r.pos ? n : (Py_ssize_t)(r.len - r.pos)) *
                              (Py_ssize_t)sizeof(HqSpan);
            if (room > 0 && (out_grow(&topics, room) < 0 || out_grow(&values, room) < 0)) {
                error = 1;
                goto done;
            }
            for (int32_t i = 0; i < n; i++) {
                int m = rd_message(&r, with_pid, max_value, &topics, &values);
                if (m <= 0) {
                    error = m < 0;
                    goto done;
                }
            }
            have_list = 1;
        } else {
            if (!rd_skip(&r, ft, 0))
                goto done;
        }
    }
    if (queue && have_list && (!with_pid || pid)) {
        /* the spans point into the message: it must be immutable, so bytes or a copy */
        if (PyBytes_Check(view.obj)) {
            buffer = view.obj;
            Py_INCREF(buffer);
        } else {
            buffer = PyBytes_FromStringAndSize(view.buf, view.len);
        }
        if (buffer) {
            topic_spans = table_spans(&topics, buffer, 1); /* topics repeat: share them */
            value_spans = topic_spans ? table_spans(&values, buffer, 0) : NULL;
        }
        if (!value_spans) {
            error = 1;
            goto done;
        }
        result = Py_BuildValue("(iOOOO)", seqid, queue, pid ? pid : Py_None, topic_spans,
                               value_spans);
        if (!result)
            error = 1;
    }

done:
    if (!result && !error) { /* not a shape the fast path takes: let the generic path say */
        result = Py_None;
        Py_INCREF(result);
    }
    Py_XDECREF(queue);
    Py_XDECREF(pid);
    Py_XDECREF(buffer);
    Py_XDECREF(topic_spans);
    Py_XDECREF(value_spans);
    PyMem_Free(topics.p);
    PyMem_Free(values.p);
    PyBuffer_Release(&view);
    return result;
}

/* A timestamp's int passes 2**30: PyLong_AsLong (64 bits here) reads it in a short loop where
 * PyLong_AsLongLong goes through _PyLong_AsByteArray. */
#if LONG_MAX >= INT64_MAX
#define AS_INT64(o) ((long long)PyLong_AsLong(o))
#else
#define AS_INT64(o) PyLong_AsLongLong(o)
#endif

/* ---- the scan fast path ------------------------------------------------------------- */

/* encode_messages_reply(name, seqid, partitions, rows) -> bytes
 * The whole binary-protocol REPLY of a method returning list<TMessage> (messageScannerGetList):
 * rows are (timestamp, sequence, topic, value) tuples, partitions one int for all rows or a
 * list aligned with them. Spares a Python TMessage and TMessageID per message. */


static PyObject *encode_messages_reply(PyObject *self, PyObject *args)
{
    (void)self;
    const char *name;
    Py_ssize_t name_len;
    int seqid;
    PyObject *partitions, *rows;
    if (!PyArg_ParseTuple(args, "y#iOO!", &name, &name_len, &seqid, &partitions, &PyList_Type,
                          &rows))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    int one_partition = PyLong_Check(partitions);
    if (!one_partition && (!PyList_Check(partitions) || PyList_GET_SIZE(partitions) != n)) {
        PyErr_SetString(PyExc_TypeError, "partitions must be an int or a list as long as rows");
        return NULL;
    }
    long partition = one_partition ? PyLong_AsLong(partitions) : 0;
    if (partition == -1 && PyErr_Occurred())
        return NULL;

    /* First pass: check the rows and size the reply exactly, so it is written once, straight
     * into the bytes object returned (no growing buffer copied at the end). */
    Py_ssize_t total = 4 + 4 + name_len + 4 + 3 + 1 + 4 + 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 4) {
            PyErr_SetString(PyExc_TypeError, "a row must be (timestamp, sequence, topic, value)");
            return NULL;
        }
        PyObject *topic = PyTuple_GET_ITEM(row, 2), *value = PyTuple_GET_ITEM(row, 3);
        if (!PyBytes_Check(topic) || !PyBytes_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "topic and value must be bytes");
            return NULL;
        }
        /* ints only: reading another object's value could run Python code that changes rows */
        if (!PyLong_Check(PyTuple_GET_ITEM(row, 0)) || !PyLong_Check(PyTuple_GET_ITEM(row, 1)) ||
            (!one_partition && !PyLong_Check(PyList_GET_ITEM(partitions, i)))) {
            PyErr_SetString(PyExc_TypeError, "timestamps, sequences and partitions must be ints");
            return NULL;
        }
        total += TMESSAGE_OVERHEAD + PyBytes_GET_SIZE(topic) + PyBytes_GET_SIZE(value);
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, total);
    if (!result)
        return NULL;
    Out o = {PyBytes_AS_STRING(result), 0, total};
    put32(&o, (int32_t)0x80010002); /* version 1, REPLY */
    put32(&o, (int32_t)name_len);
    memcpy(o.p + o.len, name, (size_t)name_len);
    o.len += name_len;
    put32(&o, seqid);
    put_field(&o, 15, 0); /* success: list<TMessage> */
    put8(&o, 12);
    put32(&o, (int32_t)n);
    /* the rows of a put share their timestamp's int: read it once while it repeats */
    PyObject *last_ts = NULL;
    long long ts = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        PyObject *topic = PyTuple_GET_ITEM(row, 2), *value = PyTuple_GET_ITEM(row, 3);
        PyObject *ts_int = PyTuple_GET_ITEM(row, 0);
        if (ts_int != last_ts) {
            ts = AS_INT64(ts_int);
            if (ts == -1 && PyErr_Occurred())
                goto fail;
            last_ts = ts_int;
        }
        long seq = PyLong_AsLong(PyTuple_GET_ITEM(row, 1));
        if (seq == -1 && PyErr_Occurred())
            goto fail;
        long p = partition;
        if (!one_partition) {
            p = PyLong_AsLong(PyList_GET_ITEM(partitions, i));
            if (p == -1 && PyErr_Occurred())
                goto fail;
        }
        Py_ssize_t tl = PyBytes_GET_SIZE(topic), vl = PyBytes_GET_SIZE(value);
        if (o.len + TMESSAGE_OVERHEAD + tl + vl > total - 1) {
            PyErr_SetString(PyExc_RuntimeError, "the rows changed while encoded");
            goto fail;
        }
        put_tmessage(&o, ts, seq, p, PyBytes_AS_STRING(topic), tl, PyBytes_AS_STRING(value), vl);
    }
    put8(&o, 0); /* end of the result struct */
    assert(o.len == total);
    return result;
fail:
    Py_DECREF(result);
    return NULL;
}
static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, compact, state, max_string, max_container, max_values) -> "
     "(0, end, None, name) | (1, need, state, name)"},
    {"encode_messages_reply", encode_messages_reply, METH_VARARGS,
     "encode_messages_reply(name, seqid, partitions, rows) -> bytes"},
    {"extract_put", extract_put, METH_VARARGS,
     "extract_put(message, with_pid, single, max_value) -> "
     "(seqid, queue, pid, topics, values) | None"},
    {"total_bytes", hq_total_bytes, METH_O,
     "total_bytes(strings) -> int: the bytes of extract_put's topics or values (no object "
     "per item), or of any iterable of sized items"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wirecheck",
    "Checks Thrift messages (binary and compact protocols) before they are decoded.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__wirecheck(void)
{
    if (PyType_Ready(&HqSpans_Type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    /* for gateway._records; Python code meets a Spans only as extract_put's result (it has no
     * constructor and is no name of the module: the twin's results are lists) */
    PyObject *capsule = PyCapsule_New(&HqSpans_Type, HQ_SPANS_CAPSULE, NULL);
    if (!capsule || PyModule_AddObject(m, "_spans_type", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
