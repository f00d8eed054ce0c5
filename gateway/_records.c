/*
 * _records: the embedded store's put records (gateway/store/embedded/records.py says why).
 *
 * A record is one RocksDB entry holding consecutive messages of one put in one partition,
 * keyed by the row key of its first message (gateway/_rowkey.h); message i has the first id
 * plus i. Its value:
 *   u8 0 (a per-row value starts with its topic length, 1..255: 0 tells the layouts apart),
 *   u8 version (1), u32 LE count (>= 1), count x u32 LE offset of each message from the
 *   value's start, then per message u8 topic length, topic, body (up to the next offset).
 *
 * wal_records(partition, timestamp, sequence, topics, values, max_count, max_bytes)
 *     -> (cells, records)
 *   The records of a put whose first id is (timestamp, sequence), at most ``max_count``
 *   messages and (unless one message is larger) ``max_bytes`` of topics and bodies each, as
 *   the log's cells (gateway/_wal.c's format: u8 key length, key, u32 LE value length,
 *   value), so put_wal_cells applies and replays them unchanged; and how many there are.
 * scan_records(items, held, lower, upper, topics, limit, budget, rows, max_bytes, reverse,
 *              marks=None)
 *     -> (status, key, size, budget, held, taken, last, bodies)
 *   The scan loop over RocksDB entries (per-row values or records), message by message:
 *   appends (timestamp, sequence, topic, body) to ``rows`` (a list; a bytearray: the
 *   message as a TMessage of the binary protocol, the scan reply's element, and ``limit``
 *   counts the messages this call adds rather than the list's length) for every message whose key is
 *   in [lower, upper) and whose topic is in ``topics`` (None: all), in key order or, when
 *   ``reverse``, newest first. ``held`` (an entry from an earlier call, or None) is looked
 *   at before ``items``. An entry below ``lower`` (forward) or at or above ``upper``
 *   (reverse) is skipped, so a scan may start at the record holding its first message.
 *   status: 0 ``items`` ended; 1 a message out of range (the range ended); 2 rows reached
 *   ``limit`` or the bodies ``max_bytes`` (key: the last row's); 3 ``budget`` messages in
 *   range examined (key: the last examined). size: bytes of topics and bodies appended (+1
 *   each); held: on 2 and 3, the record entry it stopped in (None for a row); taken: the
 *   messages this call appended, last: the key of the last of them (None if none), bodies:
 *   their bodies' bytes. ``marks`` (a bytearray, with a bytearray ``rows``): the page's
 *   segments are marked there as messages are appended (gateway/_marks.h), for merge_encoded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_marks.h"
#include "_rowkey.h"
#include "_spans.h"
#include "_thriftbuf.h"

#define RECORD_MARK 0
#define RECORD_VERSION 1
#define RECORD_HEAD 6 /* mark, version, count */

static void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The id ``n`` after (ts, seq): the sequence carries into the next millisecond. */
static void nth_id(uint64_t ts, unsigned seq, uint64_t n, uint64_t *out_ts, unsigned *out_seq)
{
    uint64_t s = (uint64_t)seq + n;
    *out_ts = ts + s / (HQ_MAX_SEQUENCE + 1);
    *out_seq = (unsigned)(s % (HQ_MAX_SEQUENCE + 1));
}

/* ---- encoding ----------------------------------------------------------------------------- */

/* gateway._wirecheck's Spans (gateway/_spans.h), found at import: a put's topics and values
 * as extract_put gives them, copied from without an object per message. */
static PyTypeObject *spans_type;

static PyObject *wal_records(PyObject *self, PyObject *args)
{
    (void)self;
    int partition, sequence;
    long long timestamp;
    PyObject *topics_obj, *values_obj;
    HqStrings topics, values;
    Py_ssize_t max_count, max_bytes;
    if (!PyArg_ParseTuple(args, "iLiOOnn", &partition, &timestamp, &sequence, &topics_obj,
                          &values_obj, &max_count, &max_bytes))
        return NULL;
    if (hq_strings_of(topics_obj, spans_type, &topics, "topics") < 0 ||
        hq_strings_of(values_obj, spans_type, &values, "values") < 0)
        return NULL;
    if (partition < 0 || partition > HQ_MAX_PARTITION_ID || sequence < 0 ||
        sequence > HQ_MAX_SEQUENCE || timestamp < 0 || max_count < 1 || max_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "partition, timestamp, sequence or caps out of range");
        return NULL;
    }
    Py_ssize_t n = hq_strings_count(&topics);
    if (hq_strings_count(&values) != n) {
        PyErr_SetString(PyExc_ValueError, "topics and values differ in length");
        return NULL;
    }
    /* first pass: sizes, and where each record starts (nothing here runs Python code, so the
     * lists cannot change before the second) */
    Py_ssize_t total = 0, records = 0, in_record = 0, data = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t tl, vl;
        if (!hq_string_at(&topics, i, &tl) || !hq_string_at(&values, i, &vl) || tl > 255 ||
            vl > (Py_ssize_t)UINT32_MAX / 2) {
            PyErr_SetString(PyExc_TypeError, "topics must be bytes of at most 255, values bytes");
            return NULL;
        }
        Py_ssize_t entry = 1 + tl + vl;
        if (in_record == 0 || in_record >= max_count || data + entry > max_bytes) {
            records++;
            total += 1 + HQ_KEY_LENGTH + 4 + RECORD_HEAD;
            in_record = 0;
            data = 0;
        }
        if (data + entry + RECORD_HEAD + 4 * (in_record + 1) > (Py_ssize_t)UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "a record would pass 4 GiB");
            return NULL;
        }
        in_record++;
        data += entry;
        total += 4 + entry;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (!out)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t i = 0;
    while (i < n) {
        /* the messages of this record: [i, j) */
        Py_ssize_t j = i, size = 0;
        while (j < n) {
            Py_ssize_t tl, vl;
            hq_string_at(&topics, j, &tl);
            hq_string_at(&values, j, &vl);
            Py_ssize_t entry = 1 + tl + vl;
            if (j > i && (j - i >= max_count || size + entry > max_bytes))
                break;
            size += entry;
            j++;
        }
        Py_ssize_t count = j - i;
        uint64_t ts;
        unsigned seq;
        nth_id((uint64_t)timestamp, (unsigned)sequence, (uint64_t)i, &ts, &seq);
        *p++ = HQ_KEY_LENGTH;
        hq_key_encode(p, partition, ts, seq);
        p += HQ_KEY_LENGTH;
        uint32_t head = (uint32_t)(RECORD_HEAD + 4 * count);
        put_le32(p, (uint32_t)(head + size));
        p += 4;
        unsigned char *value = p;
        value[0] = RECORD_MARK;
        value[1] = RECORD_VERSION;
        put_le32(value + 2, (uint32_t)count);
        unsigned char *table = value + RECORD_HEAD, *q = value + head;
        for (Py_ssize_t k = i; k < j; k++) {
            Py_ssize_t tl, vl;
            const char *t = hq_string_at(&topics, k, &tl), *v = hq_string_at(&values, k, &vl);
            put_le32(table, (uint32_t)(q - value));
            table += 4;
            *q++ = (unsigned char)tl;
            memcpy(q, t, (size_t)tl);
            q += tl;
            memcpy(q, v, (size_t)vl);
            q += vl;
        }
        p = q;
        i = j;
    }
    return Py_BuildValue("(Nn)", out, records);
}

/* ---- scanning ----------------------------------------------------------------------------- */

typedef struct {
    PyObject *topics, *rows, *last_topic, *last_ts; /* last_ts: the int of ``ts`` below */
    long long ts;
    Py_ssize_t limit, budget, max_bytes, size;
    const char *lower, *upper;
    Py_ssize_t lower_len, upper_len;
    uint8_t at[HQ_KEY_LENGTH]; /* the key of the last message looked at */
    /* rows is a bytearray: messages are appended as TMessages (gateway/_thriftbuf.h) */
    int encoded;
    Py_ssize_t used;  /* bytes of the bytearray in use (it is grown ahead) */
    Py_ssize_t taken, bodies; /* messages taken, and their bodies' bytes, by this call */
    int have_last;
    uint8_t last[HQ_KEY_LENGTH]; /* the key of the last message taken */
    PyObject *marks; /* a bytearray of the page's marks (gateway/_marks.h), or NULL */
    int reverse;
} Scan;

/* Room for n more bytes (one message's) in an encoded read's bytearray. It grows once for
 * the rest of the read at this message's size (as many messages as the limit and max_bytes
 * still let in, at most RESERVE_AHEAD bytes), later by at least a quarter; what is left over
 * is trimmed at the end. Doubling from 64 KiB copied a page of 1000 messages of 100 bytes
 * 1.4 times over as it grew (perf: 2-3 % of the gateway's CPU on an 8-partition read). */
#define RESERVE_AHEAD ((Py_ssize_t)8 << 20)

static int sink_reserve(Scan *s, Py_ssize_t n)
{
    Py_ssize_t have = PyByteArray_GET_SIZE(s->rows);
    if (s->used + n <= have)
        return 0;
    Py_ssize_t left = s->limit - s->taken; /* this message included */
    Py_ssize_t share = n - TMESSAGE_OVERHEAD + 1; /* what it counts against max_bytes */
    Py_ssize_t by_bytes = (s->max_bytes - s->size) / share + 1;
    if (by_bytes < left)
        left = by_bytes;
    Py_ssize_t ahead = left > RESERVE_AHEAD / n ? RESERVE_AHEAD : left * n;
    if (ahead < have / 4)
        ahead = have / 4;
    if (ahead < n)
        ahead = n;
    return PyByteArray_Resize(s->rows, s->used + ahead);
}

static int cmp_key(const uint8_t *k, const char *b, Py_ssize_t bl)
{
    int c = memcmp(k, b, (size_t)(bl < HQ_KEY_LENGTH ? bl : HQ_KEY_LENGTH));
    if (c)
        return c;
    return HQ_KEY_LENGTH < bl ? -1 : HQ_KEY_LENGTH > bl;
}

enum { GO_ON = -1, ENDED = 0, OUT_OF_RANGE = 1, FULL = 2, BUDGET = 3, FAILED = 4 };

/* The ints of sequence numbers, made once each (at most 32768 of them, ~1 MiB): a borrowed
 * reference, NULL with an exception set when one cannot be made. */
static PyObject *sequence_ints[HQ_MAX_SEQUENCE + 1];

static PyObject *sequence_int(int seq)
{
    PyObject *n = sequence_ints[seq];
    if (!n)
        n = sequence_ints[seq] = PyLong_FromLong(seq);
    return n;
}

/* One message taken into an encoded read's bytearray, as a TMessage: limit, size, budget.
 * With no topic filter it needs no topic object (take's check of the last topic went). */
static int take_encoded(Scan *s, long long ts, int seq, const uint8_t *topic, Py_ssize_t tl,
                        const uint8_t *body, Py_ssize_t bl)
{
    if (sink_reserve(s, TMESSAGE_OVERHEAD + tl + bl) < 0)
        return FAILED;
    Out o = {PyByteArray_AS_STRING(s->rows), s->used, PyByteArray_GET_SIZE(s->rows)};
    int partition = (s->at[HQ_KEY_PARTITION_AT] << 8) | s->at[HQ_KEY_PARTITION_AT + 1];
    put_tmessage(&o, ts, seq, partition, (const char *)topic, tl, (const char *)body, bl);
    if (s->marks &&
        hq_mark_message(s->marks, s->used, o.len, ts, seq, tl, partition, s->reverse) < 0)
        return FAILED;
    s->used = o.len;
    s->taken++;
    s->bodies += bl;
    s->have_last = 1;
    memcpy(s->last, s->at, HQ_KEY_LENGTH);
    s->size += 1 + tl + bl;
    if (s->taken >= s->limit || s->size >= s->max_bytes)
        return FULL;
    return --s->budget <= 0 ? BUDGET : GO_ON;
}

/* One message in range (key in s->at): the topic filter, the row, limit, size and budget. */
static int take(Scan *s, long long ts, int seq, const uint8_t *topic, Py_ssize_t tl,
                const uint8_t *body, Py_ssize_t bl)
{
    if (s->encoded && s->topics == Py_None)
        return take_encoded(s, ts, seq, topic, tl, body, bl);
    PyObject *t;
    if (s->last_topic && PyBytes_GET_SIZE(s->last_topic) == tl &&
        memcmp(PyBytes_AS_STRING(s->last_topic), topic, (size_t)tl) == 0) {
        t = s->last_topic;
        Py_INCREF(t);
    } else {
        t = PyBytes_FromStringAndSize((const char *)topic, tl);
        if (!t)
            return FAILED;
        Py_XSETREF(s->last_topic, t);
        Py_INCREF(t);
    }
    int wanted = 1;
    if (s->topics != Py_None) {
        wanted = PySet_Contains(s->topics, t);
        if (wanted < 0) {
            Py_DECREF(t);
            return FAILED;
        }
    }
    if (wanted && s->encoded) {
        Py_DECREF(t);
        return take_encoded(s, ts, seq, topic, tl, body, bl);
    } else if (wanted) {
        /* The messages of a put share their millisecond, and sequences repeat from one
         * millisecond to the next: their ints are shared, not made per row (a row's tuple and
         * body are what is left to allocate; Py_BuildValue's format parsing went too). */
        if (!s->last_ts || s->ts != ts) {
            PyObject *n = PyLong_FromLongLong(ts);
            if (!n) {
                Py_DECREF(t);
                return FAILED;
            }
            Py_XSETREF(s->last_ts, n);
            s->ts = ts;
        }
        PyObject *seq_int = sequence_int(seq);
        PyObject *value = seq_int ? PyBytes_FromStringAndSize((const char *)body, bl) : NULL;
        PyObject *row = value ? PyTuple_New(4) : NULL;
        if (!row) {
            Py_XDECREF(value);
            Py_DECREF(t);
            return FAILED;
        }
        Py_INCREF(s->last_ts);
        Py_INCREF(seq_int);
        PyTuple_SET_ITEM(row, 0, s->last_ts);
        PyTuple_SET_ITEM(row, 1, seq_int);
        PyTuple_SET_ITEM(row, 2, t);
        PyTuple_SET_ITEM(row, 3, value);
        /* ints and bytes only: never part of a cycle, so the cycle collector need not walk
         * it (it did, at every collection the rows' allocations set off: 10 % of a merged
         * read's CPU) */
        PyObject_GC_UnTrack(row);
        if (PyList_Append(s->rows, row) < 0) {
            Py_DECREF(row);
            return FAILED;
        }
        Py_DECREF(row);
        s->taken++;
        s->bodies += bl;
        s->have_last = 1;
        memcpy(s->last, s->at, HQ_KEY_LENGTH);
        s->size += 1 + tl + bl;
        if (PyList_GET_SIZE(s->rows) >= s->limit || s->size >= s->max_bytes)
            return FULL;
    } else {
        Py_DECREF(t);
    }
    return --s->budget <= 0 ? BUDGET : GO_ON;
}

static int malformed(void)
{
    PyErr_SetString(PyExc_ValueError, "a stored row key, cell or record is malformed");
    return FAILED;
}

/* Where the range stands for the key in s->at: -1 before it (in scan order), 0 in, 1 past. */
static int place(const Scan *s, int reverse)
{
    if (cmp_key(s->at, s->lower, s->lower_len) < 0)
        return reverse ? 1 : -1;
    if (cmp_key(s->at, s->upper, s->upper_len) >= 0)
        return reverse ? -1 : 1;
    return 0;
}

static int scan_row(Scan *s, const uint8_t *key, const uint8_t *c, Py_ssize_t cl, int reverse)
{
    if (cl < 1 || 1 + (Py_ssize_t)c[0] > cl)
        return malformed();
    memcpy(s->at, key, HQ_KEY_LENGTH);
    int where = place(s, reverse);
    if (where)
        return where > 0 ? OUT_OF_RANGE : GO_ON;
    long long ts;
    int seq;
    hq_key_decode(key, &ts, &seq);
    return take(s, ts, seq, c + 1, c[0], c + 1 + c[0], cl - 1 - c[0]);
}

/* The key of message ``i`` of a record whose first id is (ts0, seq0). */
static void record_key(uint8_t *k, int partition, long long ts0, int seq0, uint32_t i)
{
    uint64_t ts;
    unsigned seq;
    nth_id((uint64_t)ts0, (unsigned)seq0, i, &ts, &seq);
    hq_key_encode(k, partition, ts, seq);
}

/* The first message of a record (of ``count``) whose key is at or above ``bound``: its keys
 * grow with the index, so a bisection finds it without reading a message. */
static uint32_t record_first_at(int partition, long long ts0, int seq0, uint32_t count,
                                const char *bound, Py_ssize_t bound_len)
{
    uint32_t lo = 0, hi = count;
    uint8_t k[HQ_KEY_LENGTH];
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        record_key(k, partition, ts0, seq0, mid);
        if (cmp_key(k, bound, bound_len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int scan_record(Scan *s, const uint8_t *key, const uint8_t *v, Py_ssize_t vl, int reverse)
{
    if (vl < RECORD_HEAD || v[1] != RECORD_VERSION)
        return malformed();
    uint32_t count = get_le32(v + 2);
    if (count < 1 || (uint64_t)RECORD_HEAD + 4 * (uint64_t)count > (uint64_t)vl)
        return malformed();
    const uint8_t *table = v + RECORD_HEAD;
    uint64_t first = RECORD_HEAD + 4 * (uint64_t)count;
    long long ts0;
    int seq0;
    hq_key_decode(key, &ts0, &seq0);
    int partition = (key[HQ_KEY_PARTITION_AT] << 8) | key[HQ_KEY_PARTITION_AT + 1];
    /* The messages in [lower, upper): [lo, hi) by index, found by bisection over their keys
     * rather than by comparing every message's key with both bounds (two memcmp a message,
     * 5 % of a read's CPU: a page's first and last records straddle its bounds). Messages
     * outside are not read. */
    uint32_t lo = record_first_at(partition, ts0, seq0, count, s->lower, s->lower_len);
    uint32_t hi = record_first_at(partition, ts0, seq0, count, s->upper, s->upper_len);
    if (hi < lo)
        hi = lo;
    for (uint32_t n = 0; n < hi - lo; n++) {
        uint32_t i = reverse ? hi - 1 - n : lo + n;
        uint64_t at = get_le32(table + 4 * i);
        uint64_t end = i + 1 < count ? get_le32(table + 4 * (i + 1)) : (uint64_t)vl;
        if (at < first || end > (uint64_t)vl || at >= end || at + 1 + v[at] > end)
            return malformed();
        uint64_t ts;
        unsigned seq;
        nth_id((uint64_t)ts0, (unsigned)seq0, i, &ts, &seq);
        hq_key_encode(s->at, partition, ts, seq);
        const uint8_t *m = v + at;
        int r = take(s, (long long)ts, (int)seq, m + 1, m[0], m + 1 + m[0],
                     (Py_ssize_t)(end - at) - 1 - m[0]);
        if (r != GO_ON)
            return r;
    }
    /* Past the range in scan order: the scan ends at the first message beyond it (s->at says
     * which); otherwise s->at is the record's last message in scan order, as if each message
     * had been looked at. */
    if (!reverse && hi < count) {
        record_key(s->at, partition, ts0, seq0, hi);
        return OUT_OF_RANGE;
    }
    if (reverse && lo > 0) {
        record_key(s->at, partition, ts0, seq0, lo - 1);
        return OUT_OF_RANGE;
    }
    record_key(s->at, partition, ts0, seq0, reverse ? 0 : count - 1);
    return GO_ON;
}

/* One entry: a (key, value) pair from RocksDB. */
static int scan_entry(Scan *s, PyObject *item, int reverse)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
        !PyBytes_Check(PyTuple_GET_ITEM(item, 0)) || !PyBytes_Check(PyTuple_GET_ITEM(item, 1))) {
        PyErr_SetString(PyExc_TypeError, "items must yield (bytes, bytes) pairs");
        return FAILED;
    }
    PyObject *k = PyTuple_GET_ITEM(item, 0), *v = PyTuple_GET_ITEM(item, 1);
    if (PyBytes_GET_SIZE(k) != HQ_KEY_LENGTH || PyBytes_GET_SIZE(v) < 1)
        return malformed();
    const uint8_t *key = (const uint8_t *)PyBytes_AS_STRING(k);
    const uint8_t *value = (const uint8_t *)PyBytes_AS_STRING(v);
    if (value[0] != RECORD_MARK)
        return scan_row(s, key, value, PyBytes_GET_SIZE(v), reverse);
    /* a record starting at or past the upper bound holds nothing in range */
    if (cmp_key(key, s->upper, s->upper_len) >= 0) {
        memcpy(s->at, key, HQ_KEY_LENGTH);
        return reverse ? GO_ON : OUT_OF_RANGE;
    }
    return scan_record(s, key, value, PyBytes_GET_SIZE(v), reverse);
}

static PyObject *scan_records(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *items, *held, *lower, *upper, *topics, *rows, *marks = Py_None;
    Py_ssize_t limit, budget, max_bytes;
    int reverse;
    if (!PyArg_ParseTuple(args, "OOSSOnnOnp|O", &items, &held, &lower, &upper, &topics, &limit,
                          &budget, &rows, &max_bytes, &reverse, &marks))
        return NULL;
    int encoded = PyByteArray_CheckExact(rows);
    if (!encoded && !PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "rows must be a list or a bytearray");
        return NULL;
    }
    if (marks != Py_None && (!encoded || !PyByteArray_CheckExact(marks) || marks == rows)) {
        PyErr_SetString(PyExc_TypeError, "marks must be None, or a bytearray of its own when "
                                         "rows is a bytearray");
        return NULL;
    }
    if (topics != Py_None && !PyAnySet_Check(topics)) {
        PyErr_SetString(PyExc_TypeError, "topics must be a set, a frozenset or None");
        return NULL;
    }
    Scan s = {topics, rows, NULL, NULL, 0, limit, budget, max_bytes, 0,
              PyBytes_AS_STRING(lower), PyBytes_AS_STRING(upper),
              PyBytes_GET_SIZE(lower), PyBytes_GET_SIZE(upper), {0},
              encoded, encoded ? PyByteArray_GET_SIZE(rows) : 0, 0, 0, 0, {0},
              marks == Py_None ? NULL : marks, reverse};
    int status = GO_ON, seen = 0;
    PyObject *item = NULL;
    if (held != Py_None) {
        item = held;
        Py_INCREF(item);
    }
    for (;;) {
        if (!item) {
            item = PyIter_Next(items);
            if (!item) {
                status = PyErr_Occurred() ? FAILED : ENDED;
                break;
            }
        }
        seen = 1;
        status = scan_entry(&s, item, reverse);
        if (status != GO_ON)
            break;
        Py_CLEAR(item);
    }
    Py_XDECREF(s.last_topic);
    Py_XDECREF(s.last_ts);
    if (encoded && PyByteArray_Resize(rows, s.used) < 0) /* the room grown ahead goes */
        status = FAILED;
    if (status == FAILED) {
        Py_XDECREF(item);
        return NULL;
    }
    PyObject *keep = Py_None;
    if ((status == FULL || status == BUDGET) &&
        PyBytes_AS_STRING(PyTuple_GET_ITEM(item, 1))[0] == RECORD_MARK)
        keep = item;
    PyObject *at = seen ? PyBytes_FromStringAndSize((const char *)s.at, HQ_KEY_LENGTH) : Py_None;
    PyObject *last = s.have_last ? PyBytes_FromStringAndSize((const char *)s.last, HQ_KEY_LENGTH)
                                 : Py_None;
    PyObject *result = NULL;
    if (at && last)
        result = Py_BuildValue("(iOnnOnOn)", status, at, s.size, s.budget, keep, s.taken, last,
                               s.bodies);
    if (seen)
        Py_XDECREF(at);
    if (s.have_last)
        Py_XDECREF(last);
    Py_XDECREF(item);
    return result;
}

static PyMethodDef methods[] = {
    {"wal_records", wal_records, METH_VARARGS,
     "wal_records(partition, timestamp, sequence, topics, values, max_count, max_bytes) -> "
     "(cells, records)"},
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(items, held, lower, upper, topics, limit, budget, rows, max_bytes, reverse, "
     "marks=None) -> (status, key, size, budget, held, taken, last, bodies)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records", "The embedded store's put records.", -1, methods,
};

PyMODINIT_FUNC PyInit__records(void)
{
    spans_type = hq_spans_import();
    if (!spans_type)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddIntConstant(m, "RECORD_VERSION", RECORD_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
