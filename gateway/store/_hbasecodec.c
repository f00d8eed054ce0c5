/*
 * _hbasecodec: the HBase store's fast codec for HBase Thrift1 (gateway/store/hbase.py,
 * gateway/store/hbase_scans.py): the bytes of a mutateRows call, and the rows of a
 * scannerGetList reply. Moved unchanged out of gateway/_wirecheck.c; the pure-Python twins are
 * in gateway/store/hbase_codec.py (HQUEUE_PUREPYTHON=1, see gateway/fast.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_rowkey.h"
#include "../_spans.h"
#include "../_thriftbuf.h"

/* gateway._wirecheck's Spans, found at import: a put off the wire's topics and values */
static PyTypeObject *spans_type;

static void put_bytes(Out *o, const char *p, Py_ssize_t n)
{
    put32(o, (int32_t)n);
    memcpy(o->p + o->len, p, (size_t)n);
    o->len += n;
}

/* encode_mutate_rows(table, prefix, keys, topics, values) -> bytes
 * The whole binary-protocol CALL of HBase Thrift1's mutateRows(tableName, rowBatches,
 * attributes={}), one BatchMutation per row with one Mutation: column = prefix + topic,
 * value, writeToWAL = true; the bytes thriftpy2 would write for the same objects. Spares two
 * Python structs per message and their encoding. keys: a list of bytes; topics and values:
 * lists of bytes or extract_put's Spans (read in place). */
static PyObject *encode_mutate_rows(PyObject *self, PyObject *args)
{
    (void)self;
    const char *table, *prefix;
    Py_ssize_t table_len, prefix_len;
    PyObject *keys, *topics_obj, *values_obj;
    HqStrings topics, values;
    if (!PyArg_ParseTuple(args, "y#y#O!OO", &table, &table_len, &prefix, &prefix_len,
                          &PyList_Type, &keys, &topics_obj, &values_obj))
        return NULL;
    if (hq_strings_of(topics_obj, spans_type, &topics, "topics") < 0 ||
        hq_strings_of(values_obj, spans_type, &values, "values") < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (hq_strings_count(&topics) != n || hq_strings_count(&values) != n) {
        PyErr_SetString(PyExc_ValueError, "keys, topics and values differ in length");
        return NULL;
    }
    static const char name[] = "mutateRows";
    Out o = {NULL, 0, 0};
    if (out_grow(&o, 64 + table_len + n * (48 + prefix_len)) < 0)
        return NULL;
    put32(&o, (int32_t)0x80010001); /* version 1, CALL */
    put_bytes(&o, name, (Py_ssize_t)(sizeof name - 1));
    put32(&o, 0); /* seqid */
    put_field(&o, 11, 1); /* tableName */
    put_bytes(&o, table, table_len);
    put_field(&o, 15, 2); /* rowBatches: list<BatchMutation> */
    put8(&o, 12);
    put32(&o, (int32_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        Py_ssize_t tl, vl;
        const char *t = hq_string_at(&topics, i, &tl), *v = hq_string_at(&values, i, &vl);
        if (!PyBytes_Check(k) || !t || !v) {
            PyErr_SetString(PyExc_TypeError, "keys, topics and values must be bytes");
            goto fail;
        }
        Py_ssize_t kl = PyBytes_GET_SIZE(k);
        if (out_grow(&o, 64 + kl + prefix_len + tl + vl) < 0)
            goto fail;
        put_field(&o, 11, 1); /* BatchMutation.row */
        put_bytes(&o, PyBytes_AS_STRING(k), kl);
        put_field(&o, 15, 2); /* mutations: list<Mutation> of one */
        put8(&o, 12);
        put32(&o, 1);
        put_field(&o, 2, 1); /* isDelete = false */
        put8(&o, 0);
        put_field(&o, 11, 2); /* column = prefix + topic */
        put32(&o, (int32_t)(prefix_len + tl));
        memcpy(o.p + o.len, prefix, (size_t)prefix_len);
        o.len += prefix_len;
        memcpy(o.p + o.len, t, (size_t)tl);
        o.len += tl;
        put_field(&o, 11, 3); /* value */
        put_bytes(&o, v, vl);
        put_field(&o, 2, 4); /* writeToWAL = true */
        put8(&o, 1);
        put8(&o, 0); /* end of Mutation */
        put8(&o, 0); /* end of BatchMutation */
    }
    if (out_grow(&o, 16) < 0)
        goto fail;
    put_field(&o, 13, 3); /* attributes: map<Text, Text>, empty */
    put8(&o, 11);
    put8(&o, 11);
    put32(&o, 0);
    put8(&o, 0); /* end of the arguments */
    PyObject *result = PyBytes_FromStringAndSize(o.p, o.len);
    PyMem_Free(o.p);
    return result;
fail:
    PyMem_Free(o.p);
    return NULL;
}

/* decode_rows_reply(message, prefix_len) -> (rows, row_count) | None
 * ``message`` is one whole binary-protocol REPLY of HBase Thrift1's scannerGetList that scan()
 * accepted. rows are (timestamp, sequence, topic, value) for every cell, topic = the column
 * without its first prefix_len bytes ("message:"); row_count counts the TRowResults. None
 * when anything is unusual (an exception in the reply, a row key that is not
 * ours, fields out of order): the caller then decodes it the generic way. */

/* One TCell: its value. 1 ok, 0 unusual. */
static int rd_cell(Reader *r, int64_t *at, int64_t *len)
{
    *at = -1;
    for (;;) {
        uint8_t ft;
        int16_t fid = 0;
        if (!rd_field(r, &ft, &fid))
            return 0;
        if (ft == 0)
            break;
        if (fid == 1 && ft == 11) {
            if (!rd_str(r, at, len))
                return 0;
        } else if (!rd_skip(r, ft, 1)) {
            return 0;
        }
    }
    return *at >= 0;
}

static PyObject *decode_rows_reply(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    Py_ssize_t prefix_len;
    if (!PyArg_ParseTuple(args, "y*n", &view, &prefix_len))
        return NULL;
    Reader rd = {(const uint8_t *)view.buf, view.len, 0}, *r = &rd;
    PyObject *rows = NULL, *last_topic = NULL, *result = NULL;
    int32_t row_count = 0;
    if (!rd_need(r, 8) || (uint32_t)be32(r->buf) != 0x80010002u)
        goto unusual;
    r->pos = 4;
    int64_t at, len;
    if (!rd_str(r, &at, &len) || !rd_need(r, 4))
        goto unusual;
    r->pos += 4; /* seqid */
    rows = PyList_New(0);
    if (!rows)
        goto error;
    for (;;) {
        uint8_t ft;
        int16_t fid = 0;
        if (!rd_field(r, &ft, &fid))
            goto unusual;
        if (ft == 0)
            break;
        if (fid != 0 || ft != 15 || !rd_need(r, 5) || r->buf[r->pos] != 12)
            goto unusual; /* an exception, or not list<TRowResult> */
        int32_t n = be32(r->buf + r->pos + 1);
        r->pos += 5;
        row_count += n;
        for (int32_t i = 0; i < n; i++) {
            int64_t row_at = -1, row_len = 0;
            for (;;) {
                if (!rd_field(r, &ft, &fid))
                    goto unusual;
                if (ft == 0)
                    break;
                if (fid == 1 && ft == 11) {
                    if (!rd_str(r, &row_at, &row_len) || row_len != HQ_KEY_LENGTH)
                        goto unusual;
                } else if (fid == 2 && ft == 13) {
                    if (row_at < 0 || !rd_need(r, 6) || r->buf[r->pos] != 11 ||
                        r->buf[r->pos + 1] != 12)
                        goto unusual;
                    int32_t m = be32(r->buf + r->pos + 2);
                    r->pos += 6;
                    long long ts;
                    int seq;
                    hq_key_decode(r->buf + row_at, &ts, &seq);
                    for (int32_t j = 0; j < m; j++) {
                        int64_t col_at, col_len, val_at, val_len;
                        if (!rd_str(r, &col_at, &col_len) || col_len <= prefix_len ||
                            !rd_cell(r, &val_at, &val_len))
                            goto unusual;
                        const char *tp = (const char *)r->buf + col_at + prefix_len;
                        Py_ssize_t tl = (Py_ssize_t)(col_len - prefix_len);
                        PyObject *topic;
                        if (last_topic && PyBytes_GET_SIZE(last_topic) == tl &&
                            memcmp(PyBytes_AS_STRING(last_topic), tp, (size_t)tl) == 0) {
                            topic = last_topic; /* topics repeat: share one object */
                            Py_INCREF(topic);
                        } else {
                            topic = PyBytes_FromStringAndSize(tp, tl);
                            if (!topic)
                                goto error;
                            Py_XDECREF(last_topic);
                            last_topic = topic;
                            Py_INCREF(last_topic);
                        }
                        PyObject *row = Py_BuildValue(
                            "(LiNy#)", ts, seq, topic, (const char *)r->buf + val_at,
                            (Py_ssize_t)val_len);
                        if (!row)
                            goto error;
                        int failed = PyList_Append(rows, row) < 0;
                        Py_DECREF(row);
                        if (failed)
                            goto error;
                    }
                } else if (!rd_skip(r, ft, 1)) {
                    goto unusual;
                }
            }
        }
    }
    if (r->pos != r->len)
        goto unusual;
    result = Py_BuildValue("(Ni)", rows, (int)row_count);
    rows = NULL;
    goto done;
unusual:
    result = Py_None;
    Py_INCREF(result);
error:
done:
    Py_XDECREF(rows);
    Py_XDECREF(last_topic);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_rows_reply", decode_rows_reply, METH_VARARGS,
     "decode_rows_reply(message, prefix_len) -> (rows, row_count) | None"},
    {"encode_mutate_rows", encode_mutate_rows, METH_VARARGS,
     "encode_mutate_rows(table, prefix, keys, topics, values) -> bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hbasecodec",
    "The HBase store's Thrift1 codec: mutateRows calls, scannerGetList replies.", -1, methods,
};

PyMODINIT_FUNC PyInit__hbasecodec(void)
{
    spans_type = hq_spans_import();
    if (!spans_type)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    /* the header's key length, for tests/unit/test_limits.py */
    if (m && PyModule_AddIntConstant(m, "KEY_LENGTH", HQ_KEY_LENGTH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
