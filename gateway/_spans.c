/*
 * _spans.c: the Spans type (gateway/_spans.h says why), linked into gateway._wirecheck.
 *
 * A drop-in for the list of bytes it replaces: len(), indexing (negative too) and slicing
 * (a Spans over the same buffer), iteration, ==/!= against a list or a Spans, item by item
 * (a tuple is not equal, as it is not to a list); unhashable, like a list. No methods
 * (index, count): nothing calls them on a put's values. It owns nothing a cycle could go through (bytes only),
 * so the cycle collector never sees it.
 */
#include "_spans.h"

#include <string.h>

PyObject *hq_spans_new(PyObject *buffer, HqSpan *spans, Py_ssize_t count, int share)
{
    assert(PyBytes_Check(buffer));
    HqSpans *s = PyObject_New(HqSpans, &HqSpans_Type);
    if (!s) {
        PyMem_Free(spans);
        return NULL;
    }
#ifndef NDEBUG
    for (Py_ssize_t i = 0; i < count; i++)
        assert(spans[i].at >= 0 && spans[i].len >= 0 &&
               spans[i].at + spans[i].len <= PyBytes_GET_SIZE(buffer));
#endif
    Py_INCREF(buffer);
    s->buffer = buffer;
    s->count = count;
    s->spans = spans;
    s->share = share;
    s->last = NULL;
    return (PyObject *)s;
}

static void spans_dealloc(HqSpans *s)
{
    Py_XDECREF(s->buffer);
    Py_XDECREF(s->last);
    PyMem_Free(s->spans);
    PyObject_Free(s);
}

static Py_ssize_t spans_length(HqSpans *s)
{
    return s->count;
}

static PyObject *spans_item(HqSpans *s, Py_ssize_t i)
{
    if (i < 0 || i >= s->count) {
        PyErr_SetString(PyExc_IndexError, "Spans index out of range");
        return NULL;
    }
    Py_ssize_t len;
    const char *p = hq_spans_at(s, i, &len);
    if (s->share && s->last && PyBytes_GET_SIZE(s->last) == len &&
        memcmp(PyBytes_AS_STRING(s->last), p, (size_t)len) == 0) {
        Py_INCREF(s->last);
        return s->last;
    }
    PyObject *b = PyBytes_FromStringAndSize(p, len);
    if (b && s->share) {
        Py_INCREF(b);
        Py_XSETREF(s->last, b);
    }
    return b;
}

static PyObject *spans_subscript(HqSpans *s, PyObject *key)
{
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        return spans_item(s, i < 0 ? i + s->count : i);
    }
    if (!PySlice_Check(key)) {
        PyErr_Format(PyExc_TypeError, "Spans indices must be integers or slices, not %.200s",
                     Py_TYPE(key)->tp_name);
        return NULL;
    }
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0)
        return NULL;
    Py_ssize_t n = PySlice_AdjustIndices(s->count, &start, &stop, step);
    HqSpan *spans = PyMem_Malloc(sizeof(HqSpan) * (size_t)(n ? n : 1));
    if (!spans)
        return PyErr_NoMemory();
    for (Py_ssize_t k = 0, i = start; k < n; k++, i += step)
        spans[k] = s->spans[i];
    return hq_spans_new(s->buffer, spans, n, s->share);
}

/* ==, != item by item against a list or a Spans; anything else is not equal. */
static PyObject *spans_richcompare(HqSpans *s, PyObject *other, int op)
{
    if ((op != Py_EQ && op != Py_NE) ||
        !(PyList_Check(other) || Py_IS_TYPE(other, &HqSpans_Type)))
        Py_RETURN_NOTIMPLEMENTED;
    int equal = 1;
    if (Py_IS_TYPE(other, &HqSpans_Type)) {
        HqSpans *o = (HqSpans *)other;
        equal = o->count == s->count;
        for (Py_ssize_t i = 0; equal && i < s->count; i++) {
            Py_ssize_t la, lb;
            const char *a = hq_spans_at(s, i, &la), *b = hq_spans_at(o, i, &lb);
            equal = la == lb && memcmp(a, b, (size_t)la) == 0;
        }
    } else {
        /* a list's items may run Python code when compared, which may change the list: its
         * size is read again at every step and each item is held while it is compared */
        for (Py_ssize_t i = 0; equal; i++) {
            Py_ssize_t size = PyList_GET_SIZE(other);
            if (i >= size || i >= s->count) {
                equal = size == s->count && i >= s->count;
                break;
            }
            PyObject *item = PyList_GET_ITEM(other, i);
            Py_ssize_t len;
            const char *p = hq_spans_at(s, i, &len);
            if (PyBytes_CheckExact(item)) {
                equal = PyBytes_GET_SIZE(item) == len &&
                        memcmp(PyBytes_AS_STRING(item), p, (size_t)len) == 0;
                continue;
            }
            Py_INCREF(item);
            PyObject *mine = PyBytes_FromStringAndSize(p, len);
            int r = mine ? PyObject_RichCompareBool(mine, item, Py_EQ) : -1;
            Py_XDECREF(mine);
            Py_DECREF(item);
            if (r < 0)
                return NULL;
            equal = r;
        }
    }
    if (equal == (op == Py_EQ))
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

PyObject *hq_total_bytes(PyObject *self, PyObject *strings)
{
    (void)self;
    Py_ssize_t total = 0;
    if (Py_IS_TYPE(strings, &HqSpans_Type)) { /* metrics on a put: no object per message */
        HqSpans *s = (HqSpans *)strings;
        for (Py_ssize_t i = 0; i < s->count; i++)
            total += s->spans[i].len;
        return PyLong_FromSsize_t(total);
    }
    PyObject *it = PyObject_GetIter(strings), *item;
    if (!it)
        return NULL;
    while ((item = PyIter_Next(it))) {
        Py_ssize_t n = PyObject_Size(item);
        Py_DECREF(item);
        if (n < 0) {
            Py_DECREF(it);
            return NULL;
        }
        total += n;
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? NULL : PyLong_FromSsize_t(total);
}

static PyObject *spans_repr(HqSpans *s)
{
    PyObject *items = PySequence_List((PyObject *)s);
    if (!items)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("Spans(%R)", items);
    Py_DECREF(items);
    return r;
}

static PySequenceMethods spans_as_sequence = {
    .sq_length = (lenfunc)spans_length,
    .sq_item = (ssizeargfunc)spans_item, /* iter() walks it; negative indexes come adjusted */
};

static PyMappingMethods spans_as_mapping = {
    .mp_length = (lenfunc)spans_length,
    .mp_subscript = (binaryfunc)spans_subscript,
};

PyTypeObject HqSpans_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gateway._wirecheck.Spans",
    .tp_basicsize = sizeof(HqSpans),
    .tp_dealloc = (destructor)spans_dealloc,
    .tp_repr = (reprfunc)spans_repr,
    .tp_as_sequence = &spans_as_sequence,
    .tp_as_mapping = &spans_as_mapping,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_SEQUENCE,
    .tp_doc = "Byte strings that are slices of one bytes object (made by extract_put): "
              "a read-only stand-in for a list of bytes.",
    .tp_richcompare = (richcmpfunc)spans_richcompare,
};
