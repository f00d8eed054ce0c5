/*
 * _spans.h: Spans, an immutable sequence of byte strings that are slices of one bytes object.
 *
 * Why: extract_put (gateway/_wirecheck.c) used to make a bytes object per message value, only
 * for wal_records (gateway/_records.c) to copy it into the log record and the put to free it
 * again: about a tenth of the event loop's CPU on a put of 1000 small messages. A Spans holds
 * a reference to the request's bytes and a table of (offset, length) pairs instead; len(),
 * indexing, slicing and iteration give bytes as a list would (a put's other consumers, the
 * HBase and memory stores, the cluster's forwarder, metrics, take it unchanged), and
 * wal_records copies straight from the table. It keeps the request alive only as long as it
 * lives itself: for the length of the put.
 *
 * The type is made in gateway/_spans.c, linked into gateway._wirecheck; another extension
 * reaches it through the capsule HQ_SPANS_CAPSULE (hq_spans_import below).
 */
#ifndef HQUEUE_SPANS_H
#define HQUEUE_SPANS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define HQ_SPANS_CAPSULE "gateway._wirecheck._spans_type"

typedef struct {
    Py_ssize_t at, len; /* of one string in the buffer */
} HqSpan;

typedef struct {
    PyObject_HEAD
    PyObject *buffer;  /* the bytes the strings are in (immutable, so the spans stay valid) */
    Py_ssize_t count;
    HqSpan *spans;     /* count of them, PyMem_Malloc'd, each within buffer */
    int share;         /* topics repeat: an item equal to the last one made is that object */
    PyObject *last;    /* the last item made, when share */
} HqSpans;

/* gateway/_spans.c; only gateway._wirecheck links it */
extern PyTypeObject HqSpans_Type;
/* A Spans over ``buffer`` (a bytes object) taking ``spans`` (PyMem_Malloc'd; freed with it,
 * also on failure). Spans outside the buffer are a caller's bug: checked only by assert. */
PyObject *hq_spans_new(PyObject *buffer, HqSpan *spans, Py_ssize_t count, int share);

/* total_bytes(strings) -> int, gateway._wirecheck's: the bytes of all the strings (a Spans'
 * from its table; any other iterable: len() of each item, as sum(map(len, ...))). */
PyObject *hq_total_bytes(PyObject *self, PyObject *strings);

/* Another extension's way to the type (NULL, exception set, if gateway._wirecheck fails). */
static inline PyTypeObject *hq_spans_import(void)
{
    /* PyCapsule_Import walks attributes from the package: it imports no submodule itself */
    PyObject *m = PyImport_ImportModule("gateway._wirecheck");
    if (!m)
        return NULL;
    Py_DECREF(m);
    return (PyTypeObject *)PyCapsule_Import(HQ_SPANS_CAPSULE, 0);
}

/* The i-th string of a Spans, without making an object. */
static inline const char *hq_spans_at(const HqSpans *s, Py_ssize_t i, Py_ssize_t *len)
{
    *len = s->spans[i].len;
    return PyBytes_AS_STRING(s->buffer) + s->spans[i].at;
}

/* A put's topics or values as a C function takes them: a list of bytes, or a Spans (of the
 * type ``spans_type``, hq_spans_import's). */
typedef struct {
    PyObject *list;
    const HqSpans *spans;
} HqStrings;

/* 0, or -1 with TypeError naming ``what`` when ``o`` is neither. */
static inline int hq_strings_of(PyObject *o, PyTypeObject *spans_type, HqStrings *s,
                                const char *what)
{
    s->list = PyList_Check(o) ? o : NULL;
    s->spans = Py_IS_TYPE(o, spans_type) ? (const HqSpans *)o : NULL;
    if (s->list || s->spans)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s must be a list or extract_put's Spans, not %.200s", what,
                 Py_TYPE(o)->tp_name);
    return -1;
}

static inline Py_ssize_t hq_strings_count(const HqStrings *s)
{
    return s->list ? PyList_GET_SIZE(s->list) : s->spans->count;
}

/* String i: its bytes and length; NULL (and length 0) when a list's item is not bytes. No
 * Python code runs here, so a caller that checked every item once may trust them after. */
static inline const char *hq_string_at(const HqStrings *s, Py_ssize_t i, Py_ssize_t *len)
{
    if (s->spans)
        return hq_spans_at(s->spans, i, len);
    PyObject *b = PyList_GET_ITEM(s->list, i);
    if (!PyBytes_Check(b)) {
        *len = 0;
        return NULL;
    }
    *len = PyBytes_GET_SIZE(b);
    return PyBytes_AS_STRING(b);
}

#endif
