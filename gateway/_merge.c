/*
 * _merge: the k-way merges of the gateway's merged scans (gateway/scanners.py): merge_rows over
 * the cursors' buffered row tuples, merge_encoded over their pages of encoded TMessages (what
 * the embedded store's readers append on the binary protocol). Their pure-Python twins are in
 * gateway/purefast/merge.py (HQUEUE_PUREPYTHON=1, see gateway/fast.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_marks.h"
#include "_rowkey.h"

/* A timestamp's int passes 2**30: PyLong_AsLong (64 bits here) reads it in a short loop where
 * PyLong_AsLongLong goes through _PyLong_AsByteArray. */
#if LONG_MAX >= INT64_MAX
#define AS_INT64(o) ((long long)PyLong_AsLong(o))
#else
#define AS_INT64(o) PyLong_AsLongLong(o)
#endif

/* ---- merged scans: the k-way merge of partitions' buffered rows ----------------------- */

/* merge_rows(buffers, starts, more, partitions, n, max_bytes, reverse)
 *   -> (rows, parts, taken, taken_bytes, size)
 * buffers: one list of rows (timestamp, sequence, topic, value) per partition, each in scan
 * order from starts[i] on (the rows before it were taken already: the scanners keep a list
 * and where it begins, and the merge copies no buffer); more[i]: whether partition i may have
 * rows beyond its buffer; partitions[i] its id.
 * Merges in (timestamp, sequence, partition) order (all three reversed with ``reverse``) until
 * n rows, until their topic and value bytes reach max_bytes, or until a buffer that may have
 * more runs dry (its next rows are unknown: the caller refills it and calls again). taken[i]
 * says how many rows of buffers[i] were used from starts[i] on, taken_bytes[i] their topic and value bytes,
 * size those of all. The gateway's scanners
 * interleave partitions message by message when a producer writes several within one
 * millisecond: a heap step per message in Python cost about a microsecond. Rows that come
 * one after the other from one partition (a put's run of ids) are taken as a run: the
 * heap is consulted at the run's ends only. */

typedef struct {
    long long ts;
    long seq;
    long part;
    Py_ssize_t cursor;
} MergeKey;

static int merge_less(const MergeKey *a, const MergeKey *b, int reverse)
{
    int c;
    if (a->ts != b->ts)
        c = a->ts < b->ts ? -1 : 1;
    else if (a->seq != b->seq)
        c = a->seq < b->seq ? -1 : 1;
    else if (a->part != b->part)
        c = a->part < b->part ? -1 : 1;
    else
        c = a->cursor < b->cursor ? -1 : (a->cursor > b->cursor);
    return reverse ? c > 0 : c < 0;
}

static void merge_sift_down(MergeKey *h, Py_ssize_t n, Py_ssize_t i, int reverse)
{
    for (;;) {
        Py_ssize_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && merge_less(&h[l], &h[m], reverse))
            m = l;
        if (r < n && merge_less(&h[r], &h[m], reverse))
            m = r;
        if (m == i)
            return;
        MergeKey t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* The timestamp int last read per cursor: the rows of one put share theirs (scan_records
 * makes one per millisecond), and reading a timestamp's int costs more than all the rest of
 * a row's merge step. */
typedef struct {
    PyObject *obj; /* borrowed: a row in the cursor's buffer holds it */
    long long value;
} LastTs;

/* The key of buffers[c][at]; 0 ok, -1 error (not a row tuple). */
static int merge_key(PyObject *buf, Py_ssize_t at, long part, Py_ssize_t c, MergeKey *k,
                     LastTs *last)
{
    PyObject *row = PyList_GET_ITEM(buf, at);
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < 4) {
        PyErr_SetString(PyExc_TypeError, "a row must be a (timestamp, sequence, topic, value) tuple");
        return -1;
    }
    PyObject *ts = PyTuple_GET_ITEM(row, 0);
    if (ts == last->obj) {
        k->ts = last->value;
    } else {
        k->ts = AS_INT64(ts);
        if (k->ts == -1 && PyErr_Occurred())
            return -1;
        last->obj = ts;
        last->value = k->ts;
    }
    k->seq = PyLong_AsLong(PyTuple_GET_ITEM(row, 1));
    if (k->seq == -1 && PyErr_Occurred())
        return -1;
    k->part = part;
    k->cursor = c;
    return 0;
}

static PyObject *merge_rows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buffers, *starts, *more, *partitions;
    Py_ssize_t n, max_bytes;
    int reverse;
    if (!PyArg_ParseTuple(args, "O!O!O!O!nnp", &PyList_Type, &buffers, &PyList_Type, &starts,
                          &PyList_Type, &more, &PyList_Type, &partitions, &n, &max_bytes,
                          &reverse))
        return NULL;
    Py_ssize_t k = PyList_GET_SIZE(buffers);
    if (PyList_GET_SIZE(starts) != k || PyList_GET_SIZE(more) != k ||
        PyList_GET_SIZE(partitions) != k) {
        PyErr_SetString(PyExc_ValueError, "buffers, starts, more and partitions differ in length");
        return NULL;
    }
    MergeKey *heap = PyMem_Malloc(sizeof(MergeKey) * (size_t)(k ? k : 1));
    Py_ssize_t *at = PyMem_Calloc((size_t)(k ? k : 1), sizeof(Py_ssize_t));
    Py_ssize_t *start = PyMem_Calloc((size_t)(k ? k : 1), sizeof(Py_ssize_t));
    LastTs *last = PyMem_Calloc((size_t)(k ? k : 1), sizeof(LastTs));
    Py_ssize_t *bytes_at = PyMem_Calloc((size_t)(k ? k : 1), sizeof(Py_ssize_t));
    PyObject *rows = PyList_New(0), *parts = PyList_New(0), *taken = NULL, *taken_bytes = NULL;
    PyObject *result = NULL;
    if (!heap || !at || !start || !last || !bytes_at || !rows || !parts) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t h = 0;
    for (Py_ssize_t c = 0; c < k; c++) {
        PyObject *buf = PyList_GET_ITEM(buffers, c);
        if (!PyList_Check(buf)) {
            PyErr_SetString(PyExc_TypeError, "buffers must be lists");
            goto done;
        }
        long part = PyLong_AsLong(PyList_GET_ITEM(partitions, c));
        if (part == -1 && PyErr_Occurred())
            goto done;
        Py_ssize_t first = PyLong_AsSsize_t(PyList_GET_ITEM(starts, c));
        if (first == -1 && PyErr_Occurred())
            goto done;
        if (first < 0 || first > PyList_GET_SIZE(buf)) {
            PyErr_SetString(PyExc_ValueError, "a start is outside its buffer");
            goto done;
        }
        at[c] = start[c] = first;
        if (first == PyList_GET_SIZE(buf))
            continue;
        if (merge_key(buf, first, part, c, &heap[h], &last[c]) < 0)
            goto done;
        h++;
    }
    for (Py_ssize_t i = h / 2 - 1; i >= 0; i--)
        merge_sift_down(heap, h, i, reverse);
    Py_ssize_t count = 0, size = 0;
    while (h > 0 && count < n && size < max_bytes) {
        Py_ssize_t c = heap[0].cursor;
        PyObject *buf = PyList_GET_ITEM(buffers, c);
        Py_ssize_t len = PyList_GET_SIZE(buf), end = len;
        /* The run of the top cursor: its rows before the smallest head of the others (a put's
         * messages come in runs of consecutive ids), found with a galloping search, so a row
         * inside a run costs no key and no heap step. */
        if (h > 1) {
            const MergeKey *runner = &heap[1];
            if (h > 2 && merge_less(&heap[2], runner, reverse))
                runner = &heap[2];
            MergeKey probe;
            Py_ssize_t lo = at[c], step = 1; /* lo: the last row known to come first */
            end = len;
            while (lo + step < len) {
                if (merge_key(buf, lo + step, heap[0].part, c, &probe, &last[c]) < 0)
                    goto done;
                if (!merge_less(&probe, runner, reverse)) {
                    end = lo + step;
                    break;
                }
                lo += step;
                step *= 2;
            }
            /* the first row after the run is in (lo, end]: bisect */
            Py_ssize_t hi = end;
            while (hi - lo > 1) {
                Py_ssize_t mid = lo + (hi - lo) / 2;
                if (merge_key(buf, mid, heap[0].part, c, &probe, &last[c]) < 0)
                    goto done;
                if (merge_less(&probe, runner, reverse))
                    lo = mid;
                else
                    hi = mid;
            }
            end = hi;
        }
        PyObject *part = PyList_GET_ITEM(partitions, c);
        Py_ssize_t i = at[c];
        while (i < end && count < n && size < max_bytes) {
            PyObject *row = PyList_GET_ITEM(buf, i);
            if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < 4) {
                PyErr_SetString(PyExc_TypeError,
                                "a row must be a (timestamp, sequence, topic, value) tuple");
                goto done;
            }
            PyObject *topic = PyTuple_GET_ITEM(row, 2), *value = PyTuple_GET_ITEM(row, 3);
            if (PyList_Append(rows, row) < 0 || PyList_Append(parts, part) < 0)
                goto done;
            Py_ssize_t tl = PyBytes_Check(topic) ? PyBytes_GET_SIZE(topic) : PyObject_Length(topic);
            Py_ssize_t vl = PyBytes_Check(value) ? PyBytes_GET_SIZE(value) : PyObject_Length(value);
            if (tl < 0 || vl < 0)
                goto done;
            size += tl + vl;
            bytes_at[c] += tl + vl;
            count++;
            i++;
        }
        at[c] = i;
        if (i < end)
            break; /* n rows or max_bytes */
        if (i < len) {
            if (merge_key(buf, i, heap[0].part, c, &heap[0], &last[c]) < 0)
                goto done;
            merge_sift_down(heap, h, 0, reverse);
            continue;
        }
        int may_have_more = PyObject_IsTrue(PyList_GET_ITEM(more, c));
        if (may_have_more < 0)
            goto done;
        if (may_have_more)
            break; /* its next rows are unknown: refill before going on */
        heap[0] = heap[--h];
        merge_sift_down(heap, h, 0, reverse);
    }
    taken = PyList_New(k);
    taken_bytes = PyList_New(k);
    if (!taken || !taken_bytes)
        goto done;
    for (Py_ssize_t c = 0; c < k; c++) {
        PyObject *v = PyLong_FromSsize_t(at[c] - start[c]);
        if (!v)
            goto done;
        PyList_SET_ITEM(taken, c, v);
        v = PyLong_FromSsize_t(bytes_at[c]);
        if (!v)
            goto done;
        PyList_SET_ITEM(taken_bytes, c, v);
    }
    result = Py_BuildValue("(OOOOn)", rows, parts, taken, taken_bytes, size);
done:
    PyMem_Free(heap);
    PyMem_Free(at);
    PyMem_Free(start);
    PyMem_Free(last);
    PyMem_Free(bytes_at);
    Py_XDECREF(rows);
    Py_XDECREF(parts);
    Py_XDECREF(taken);
    Py_XDECREF(taken_bytes);
    return result;
}

/* ---- merged scans over encoded pages ---------------------------------------------------- */

/* merge_encoded(buffers, offsets, counts, more, out, n, max_bytes, reverse, view_bytes,
 *               marks=None) -> (taken, offsets, sizes, lasts, bodies)
 * buffers: per partition, TMessages of the binary protocol one after the other (what a store
 * reader's read_encoded appended: gateway/_thriftbuf.h put_tmessage), the next one at
 * offsets[i], counts[i] of them left; more[i]: whether partition i may have messages beyond.
 * Takes the messages in (timestamp, sequence, partition) order (all three reversed with
 * ``reverse``), each as it is, until n messages, until their topic and value bytes reach
 * max_bytes, or until a buffer that may have more runs dry (as merge_rows), and appends them
 * to the list ``out`` (the reply's parts, in order): a partition's run (the messages before
 * the smallest head of the others) of ``view_bytes`` or more as a memoryview of its buffer (it
 * is sent from there: no copy), shorter runs copied into the bytearray at the end of ``out``
 * (a new one when the last part is not a bytearray). taken[i]: messages used from
 * buffers[i]; offsets[i]: where its next message begins; sizes[i]: the topic and value bytes
 * taken from it; lasts[i]: the offset of the last message taken from it, -1 if none; bodies:
 * the value bytes of all. A merged page costs no Python object per message. A buffer that does
 * not hold ``counts[i]`` well-formed messages from its offset raises ValueError, with nothing
 * appended.
 * marks (optional): per buffer, the bytearray of its marks that scan_records wrote
 * (gateway/_marks.h), or None. A segment that lies wholly in the run is taken without reading
 * its messages (the first and the last are checked); the answer is the same as without. */

typedef struct {
    const unsigned char *p; /* the buffer */
    Py_ssize_t len, at, left, size, last;
    const unsigned char *marks; /* its marks (gateway/_marks.h), or NULL */
    Py_ssize_t nmarks, mark;    /* how many; the first that may hold ``at`` */
} EncCursor;

typedef struct {
    Py_ssize_t cursor, from, to;
} EncRun;

#define TMESSAGE_BYTES 40 /* a TMessage's bytes besides its topic and value */

static inline uint32_t rd_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The message at cur->at: its key, its length and its topic and value bytes; -1 (ValueError
 * set) when it is not a whole TMessage within the buffer. */
static int enc_message(const EncCursor *cur, Py_ssize_t c, MergeKey *k, Py_ssize_t *len,
                       Py_ssize_t *tl_out, Py_ssize_t *vl_out)
{
    const unsigned char *m = cur->p + cur->at;
    Py_ssize_t room = cur->len - cur->at;
    if (room < 40 || m[0] != 12 || m[3] != 10 || m[25] != 11)
        goto bad;
    Py_ssize_t tl = (Py_ssize_t)rd_be32(m + 28);
    if (tl > room - 40 || m[32 + tl] != 11)
        goto bad;
    Py_ssize_t vl = (Py_ssize_t)rd_be32(m + 35 + tl);
    if (vl > room - 40 - tl || m[39 + tl + vl] != 0)
        goto bad;
    k->ts = (long long)hq_get_be64(m + 6);
    k->seq = (int16_t)(((unsigned)m[17] << 8) | m[18]);
    k->part = (int16_t)(((unsigned)m[23] << 8) | m[24]);
    k->cursor = c;
    *len = 40 + tl + vl;
    *tl_out = tl;
    *vl_out = vl;
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "a buffer does not hold the TMessages its count says");
    return -1;
}

static int bad_marks(void)
{
    PyErr_SetString(PyExc_ValueError, "a buffer's marks do not match its messages");
    return -1;
}

/* The rest of the segment holding the message at e->at (key ``head``, which comes before
 * ``runner``, the smallest head of the other buffers, NULL if none), taken whole when its last
 * message comes before ``runner`` too and the segment fits in ``room`` messages and under
 * ``room_bytes`` of topics and values (the message walk would take all of it then): 1 taken
 * (got: messages, their topic and value bytes, their values' bytes), 0 not (the walk goes on
 * message by message), -1 ValueError (marks that disagree with the buffer). */
static int take_segment(EncCursor *e, Py_ssize_t c, const MergeKey *head, const MergeKey *runner,
                        int reverse, Py_ssize_t room, Py_ssize_t room_bytes, Py_ssize_t got[3])
{
    HqMark m;
    while (e->mark < e->nmarks) {
        memcpy(&m, e->marks + (size_t)e->mark * sizeof m, sizeof m);
        if (m.end > e->at)
            break;
        e->mark++;
    }
    if (e->mark == e->nmarks)
        return 0;
    if (m.last_at < e->at || m.end > e->len || m.part != head->part)
        return bad_marks();
    MergeKey last = {m.last_ts, m.last_seq, m.part, c};
    if (runner && !merge_less(&last, runner, reverse))
        return 0;
    int64_t ahead = hq_linear_id(m.last_ts, m.last_seq) - hq_linear_id(head->ts, head->seq);
    if (reverse)
        ahead = -ahead;
    Py_ssize_t count = (Py_ssize_t)ahead + 1;
    Py_ssize_t bytes = (Py_ssize_t)(m.end - e->at) - TMESSAGE_BYTES * count;
    if (ahead < 0 || count > e->left || bytes < (Py_ssize_t)m.tl * count)
        return bad_marks();
    if (count > room || bytes >= room_bytes)
        return 0;
    EncCursor probe = *e; /* the last message: where the mark says, with its id */
    probe.at = (Py_ssize_t)m.last_at;
    MergeKey key;
    Py_ssize_t len, tl, vl;
    if (enc_message(&probe, c, &key, &len, &tl, &vl) < 0) {
        PyErr_Clear();
        return bad_marks();
    }
    if (key.ts != m.last_ts || key.seq != m.last_seq || key.part != m.part || tl != m.tl ||
        probe.at + len != m.end)
        return bad_marks();
    e->last = probe.at;
    e->at = (Py_ssize_t)m.end;
    e->left -= count;
    e->size += bytes;
    got[0] = count;
    got[1] = bytes;
    got[2] = bytes - (Py_ssize_t)m.tl * count;
    return 1;
}

/* Appends the runs to the parts list ``out``: a run of view_bytes or more as a memoryview of
 * its buffer, shorter ones copied (one after the other) into the bytearray ending ``out``. */
static int append_runs(PyObject *out, PyObject *buffers, const EncCursor *cur,
                       const EncRun *runs, Py_ssize_t nruns, Py_ssize_t view_bytes)
{
    for (Py_ssize_t r = 0; r < nruns;) {
        if (runs[r].to - runs[r].from >= view_bytes) {
            PyObject *whole = PyMemoryView_FromObject(PyList_GET_ITEM(buffers, runs[r].cursor));
            if (!whole)
                return -1;
            PyObject *part = PySequence_GetSlice(whole, runs[r].from, runs[r].to);
            Py_DECREF(whole);
            if (!part)
                return -1;
            int failed = PyList_Append(out, part);
            Py_DECREF(part);
            if (failed)
                return -1;
            r++;
            continue;
        }
        Py_ssize_t end = r, total = 0; /* the short runs from r on, copied together */
        while (end < nruns && runs[end].to - runs[end].from < view_bytes) {
            total += runs[end].to - runs[end].from;
            end++;
        }
        Py_ssize_t parts = PyList_GET_SIZE(out);
        PyObject *tail = parts ? PyList_GET_ITEM(out, parts - 1) : NULL;
        if (!tail || !PyByteArray_CheckExact(tail)) {
            tail = PyByteArray_FromStringAndSize(NULL, 0);
            if (!tail)
                return -1;
            int failed = PyList_Append(out, tail);
            Py_DECREF(tail); /* the list holds it */
            if (failed)
                return -1;
        }
        Py_ssize_t base = PyByteArray_GET_SIZE(tail);
        if (PyByteArray_Resize(tail, base + total) < 0)
            return -1;
        char *dst = PyByteArray_AS_STRING(tail) + base;
        for (; r < end; r++) {
            size_t len = (size_t)(runs[r].to - runs[r].from);
            memcpy(dst, cur[runs[r].cursor].p + runs[r].from, len);
            dst += len;
        }
    }
    return 0;
}

static PyObject *merge_encoded(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buffers, *offsets, *counts, *more, *out, *marks = Py_None;
    Py_ssize_t n, max_bytes, view_bytes;
    int reverse;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!nnpn|O", &PyList_Type, &buffers, &PyList_Type,
                          &offsets, &PyList_Type, &counts, &PyList_Type, &more, &PyList_Type,
                          &out, &n, &max_bytes, &reverse, &view_bytes, &marks))
        return NULL;
    Py_ssize_t k = PyList_GET_SIZE(buffers);
    if (PyList_GET_SIZE(offsets) != k || PyList_GET_SIZE(counts) != k ||
        PyList_GET_SIZE(more) != k || (marks != Py_None && (!PyList_Check(marks) ||
                                                             PyList_GET_SIZE(marks) != k))) {
        PyErr_SetString(PyExc_ValueError,
                        "buffers, offsets, counts, more and marks differ in length");
        return NULL;
    }
    size_t slots = (size_t)(k ? k : 1);
    Py_buffer *views = PyMem_Calloc(slots, sizeof(Py_buffer));
    Py_buffer *mark_views = PyMem_Calloc(slots, sizeof(Py_buffer));
    Py_ssize_t nmark_views = 0;
    EncCursor *cur = PyMem_Calloc(slots, sizeof(EncCursor));
    MergeKey *heap = PyMem_Malloc(sizeof(MergeKey) * slots);
    Py_ssize_t runs_cap = 64, nruns = 0, nviews = 0;
    EncRun *runs = PyMem_Malloc(sizeof(EncRun) * (size_t)runs_cap);
    PyObject *result = NULL, *taken = NULL, *offs = NULL, *sizes = NULL, *lasts = NULL;
    if (!views || !mark_views || !cur || !heap || !runs) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t h = 0;
    /* short runs are copied into out's last part: it must not be a buffer they come from */
    Py_ssize_t parts = PyList_GET_SIZE(out);
    PyObject *tail = parts ? PyList_GET_ITEM(out, parts - 1) : NULL;
    for (Py_ssize_t c = 0; c < k; c++) {
        PyObject *buf = PyList_GET_ITEM(buffers, c);
        if (buf == tail) {
            PyErr_SetString(PyExc_ValueError, "out's last part must not be one of the buffers");
            goto done;
        }
        if (PyObject_GetBuffer(buf, &views[c], PyBUF_SIMPLE) < 0)
            goto done;
        nviews = c + 1;
        cur[c].p = views[c].buf;
        cur[c].len = views[c].len;
        cur[c].last = -1;
        cur[c].at = PyLong_AsSsize_t(PyList_GET_ITEM(offsets, c));
        if (cur[c].at == -1 && PyErr_Occurred())
            goto done;
        cur[c].left = PyLong_AsSsize_t(PyList_GET_ITEM(counts, c));
        if (cur[c].left == -1 && PyErr_Occurred())
            goto done;
        if (cur[c].at < 0 || cur[c].at > cur[c].len || cur[c].left < 0) {
            PyErr_SetString(PyExc_ValueError, "an offset is outside its buffer");
            goto done;
        }
        PyObject *mk = marks == Py_None ? Py_None : PyList_GET_ITEM(marks, c);
        if (mk != Py_None) {
            if (PyObject_GetBuffer(mk, &mark_views[c], PyBUF_SIMPLE) < 0)
                goto done;
            nmark_views = c + 1;
            if (mark_views[c].len % (Py_ssize_t)sizeof(HqMark)) {
                bad_marks();
                goto done;
            }
            cur[c].marks = mark_views[c].buf;
            cur[c].nmarks = mark_views[c].len / (Py_ssize_t)sizeof(HqMark);
        }
        if (!cur[c].left)
            continue;
        Py_ssize_t len, tl, vl;
        if (enc_message(&cur[c], c, &heap[h], &len, &tl, &vl) < 0)
            goto done;
        h++;
    }
    for (Py_ssize_t i = h / 2 - 1; i >= 0; i--)
        merge_sift_down(heap, h, i, reverse);
    Py_ssize_t count = 0, size = 0, bodies = 0;
    while (h > 0 && count < n && size < max_bytes) {
        Py_ssize_t c = heap[0].cursor;
        EncCursor *e = &cur[c];
        const MergeKey *runner = NULL;
        if (h > 1) {
            runner = &heap[1];
            if (h > 2 && merge_less(&heap[2], runner, reverse))
                runner = &heap[2];
        }
        Py_ssize_t from = e->at;
        int head_moved = 0; /* heap[0] holds the key of a message after the run */
        for (int first = 1; e->left > 0 && count < n && size < max_bytes; first = 0) {
            MergeKey key;
            Py_ssize_t len, tl, vl;
            if (enc_message(e, c, &key, &len, &tl, &vl) < 0)
                goto done;
            if (!first && runner && !merge_less(&key, runner, reverse)) {
                heap[0] = key;
                head_moved = 1;
                break;
            }
            if (e->marks) {
                Py_ssize_t got[3];
                int took = take_segment(e, c, &key, runner, reverse, n - count, max_bytes - size,
                                        got);
                if (took < 0)
                    goto done;
                if (took) {
                    count += got[0];
                    size += got[1];
                    bodies += got[2];
                    continue;
                }
            }
            e->last = e->at;
            e->at += len;
            e->left--;
            e->size += tl + vl;
            size += tl + vl;
            bodies += vl;
            count++;
        }
        if (e->at > from) {
            if (nruns == runs_cap) {
                runs_cap *= 2;
                EncRun *grown = PyMem_Realloc(runs, sizeof(EncRun) * (size_t)runs_cap);
                if (!grown) {
                    PyErr_NoMemory();
                    goto done;
                }
                runs = grown;
            }
            runs[nruns++] = (EncRun){c, from, e->at};
        }
        if (head_moved) {
            merge_sift_down(heap, h, 0, reverse);
            continue;
        }
        if (e->left > 0)
            break; /* n messages or max_bytes */
        int may_have_more = PyObject_IsTrue(PyList_GET_ITEM(more, c));
        if (may_have_more < 0)
            goto done;
        if (may_have_more)
            break; /* its next messages are unknown: refill before going on */
        heap[0] = heap[--h];
        merge_sift_down(heap, h, 0, reverse);
    }
    if (append_runs(out, buffers, cur, runs, nruns, view_bytes) < 0)
        goto done;
    taken = PyList_New(k);
    offs = PyList_New(k);
    sizes = PyList_New(k);
    lasts = PyList_New(k);
    if (!taken || !offs || !sizes || !lasts)
        goto done;
    for (Py_ssize_t c = 0; c < k; c++) {
        Py_ssize_t was = PyLong_AsSsize_t(PyList_GET_ITEM(counts, c));
        PyObject *v[4] = {PyLong_FromSsize_t(was - cur[c].left), PyLong_FromSsize_t(cur[c].at),
                          PyLong_FromSsize_t(cur[c].size), PyLong_FromSsize_t(cur[c].last)};
        PyList_SET_ITEM(taken, c, v[0]);
        PyList_SET_ITEM(offs, c, v[1]);
        PyList_SET_ITEM(sizes, c, v[2]);
        PyList_SET_ITEM(lasts, c, v[3]);
        if (!v[0] || !v[1] || !v[2] || !v[3])
            goto done;
    }
    result = Py_BuildValue("(OOOOn)", taken, offs, sizes, lasts, bodies);
done:
    for (Py_ssize_t c = 0; c < nviews; c++)
        PyBuffer_Release(&views[c]);
    for (Py_ssize_t c = 0; c < nmark_views; c++)
        if (mark_views[c].obj)
            PyBuffer_Release(&mark_views[c]);
    PyMem_Free(views);
    PyMem_Free(mark_views);
    PyMem_Free(cur);
    PyMem_Free(heap);
    PyMem_Free(runs);
    Py_XDECREF(taken);
    Py_XDECREF(offs);
    Py_XDECREF(sizes);
    Py_XDECREF(lasts);
    return result;
}

static PyMethodDef methods[] = {
    {"merge_rows", merge_rows, METH_VARARGS,
     "merge_rows(buffers, starts, more, partitions, n, max_bytes, reverse) -> "
     "(rows, parts, taken, taken_bytes, size)"},
    {"merge_encoded", merge_encoded, METH_VARARGS,
     "merge_encoded(buffers, offsets, counts, more, out, n, max_bytes, reverse, view_bytes, "
     "marks=None) -> (taken, offsets, sizes, lasts, bodies)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_merge", "The k-way merge of merged scans' buffered rows.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__merge(void)
{
    return PyModule_Create(&module);
}
