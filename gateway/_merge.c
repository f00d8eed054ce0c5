/*
 * _merge: the k-way merge of the gateway's merged scans (gateway/scanners.py). Moved unchanged
 * out of gateway/_wirecheck.c; its pure-Python twin is gateway/purefast.py's merge_rows
 * (HQUEUE_PUREPYTHON=1, see gateway/fast.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

static PyMethodDef methods[] = {
    {"merge_rows", merge_rows, METH_VARARGS,
     "merge_rows(buffers, starts, more, partitions, n, max_bytes, reverse) -> "
     "(rows, parts, taken, taken_bytes, size)"},
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
