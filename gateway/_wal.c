/*
 * _wal: the C parts of the embedded store's write-ahead log (gateway/store/wal.py).
 *
 * wal_cells(keys, topics, values) -> bytes
 *   The rows of one partition as the log stores them: for every row, u8 key length, key,
 *   u32 (little-endian) cell length, cell, where a cell is what RocksDB stores under the key
 *   (u8 topic length, topic, value).
 * put_wal_cells(put, handle, cells) -> int
 *   Calls put(key, cell, handle) (the store's WriteBatch.put) for every row of ``cells``, a
 *   buffer made by wal_cells; returns the row count. The same code applies a put and replays
 *   one after a crash. Malformed bytes raise ValueError.
 * Syncer()
 *   A thread of its own that runs fdatasync, so a put can start the sync of its log record
 *   and go on filling RocksDB's memtable meanwhile: a Python thread would first need the GIL,
 *   which the memtable write holds. kick(fds) starts one sync of those descriptors;
 *   fileno() is an eventfd that becomes readable when it is over; finish() then returns its
 *   errno (0 when it worked), or None if it is not over yet. close() stops the thread.
 * consecutive_keys(partition, timestamp, sequence, count)
 *   The row keys of a put (the HBase and memory stores' rows; the embedded store's records
 *   are gateway/_records.c's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "_rowkey.h"

/* ---- cells ------------------------------------------------------------------------------ */

static PyObject *wal_cells(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *keys, *topics, *values;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &keys, &PyList_Type, &topics,
                          &PyList_Type, &values))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(topics) != n || PyList_GET_SIZE(values) != n) {
        PyErr_SetString(PyExc_ValueError, "keys, topics and values differ in length");
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i), *t = PyList_GET_ITEM(topics, i),
                 *v = PyList_GET_ITEM(values, i);
        if (!PyBytes_Check(k) || !PyBytes_Check(t) || !PyBytes_Check(v) ||
            PyBytes_GET_SIZE(k) > 255 || PyBytes_GET_SIZE(t) > 255 ||
            PyBytes_GET_SIZE(v) > (Py_ssize_t)UINT32_MAX - 256) {
            PyErr_SetString(PyExc_TypeError,
                            "keys and topics must be bytes of at most 255, values bytes");
            return NULL;
        }
        total += 1 + PyBytes_GET_SIZE(k) + 4 + 1 + PyBytes_GET_SIZE(t) + PyBytes_GET_SIZE(v);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (!out)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i), *t = PyList_GET_ITEM(topics, i),
                 *v = PyList_GET_ITEM(values, i);
        size_t kl = (size_t)PyBytes_GET_SIZE(k), tl = (size_t)PyBytes_GET_SIZE(t),
               vl = (size_t)PyBytes_GET_SIZE(v);
        uint32_t cl = (uint32_t)(1 + tl + vl);
        *p++ = (unsigned char)kl;
        memcpy(p, PyBytes_AS_STRING(k), kl);
        p += kl;
        p[0] = (unsigned char)cl;
        p[1] = (unsigned char)(cl >> 8);
        p[2] = (unsigned char)(cl >> 16);
        p[3] = (unsigned char)(cl >> 24);
        p += 4;
        *p++ = (unsigned char)tl;
        memcpy(p, PyBytes_AS_STRING(t), tl);
        p += tl;
        memcpy(p, PyBytes_AS_STRING(v), vl);
        p += vl;
    }
    return out;
}

static PyObject *put_wal_cells(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *put, *handle;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "OOy*", &put, &handle, &view))
        return NULL;
    const unsigned char *p = view.buf, *end = p + view.len;
    Py_ssize_t count = 0;
    while (p < end) {
        size_t kl = *p++;
        if ((size_t)(end - p) < kl + 4)
            goto malformed;
        const unsigned char *key = p;
        p += kl;
        size_t cl = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
        p += 4;
        if ((size_t)(end - p) < cl || cl < 1 || (size_t)p[0] + 1 > cl)
            goto malformed;
        PyObject *k = PyBytes_FromStringAndSize((const char *)key, (Py_ssize_t)kl);
        PyObject *c = k ? PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)cl) : NULL;
        p += cl;
        if (!c) {
            Py_XDECREF(k);
            PyBuffer_Release(&view);
            return NULL;
        }
        PyObject *call_args[3] = {k, c, handle};
        PyObject *r = PyObject_Vectorcall(put, call_args, 3, NULL);
        Py_DECREF(k);
        Py_DECREF(c);
        if (!r) {
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(r);
        count++;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(count);
malformed:
    PyBuffer_Release(&view);
    PyErr_Format(PyExc_ValueError, "malformed log cells after %zd rows", count);
    return NULL;
}

/* ---- Syncer ----------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int efd;
    int *fds; /* what the pending sync covers */
    Py_ssize_t nfds;
    int pending; /* kicked, not yet taken by the thread */
    int busy; /* kicked, finish() not yet called after it ended */
    int error; /* errno of the last sync that ended */
    int stop;
    int running;
} Syncer;

static void *syncer_main(void *arg)
{
    Syncer *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->pending && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->pending)
            break;
        s->pending = 0;
        int *fds = s->fds;
        Py_ssize_t n = s->nfds;
        s->fds = NULL;
        s->nfds = 0;
        pthread_mutex_unlock(&s->mu);
        int err = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (fdatasync(fds[i]) != 0 && !err)
                err = errno;
        free(fds);
        pthread_mutex_lock(&s->mu);
        s->error = err;
        uint64_t one = 1;
        if (write(s->efd, &one, sizeof one) < 0) {
            /* an eventfd counter cannot overflow at one write per sync */
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int Syncer_init(Syncer *s, PyObject *args, PyObject *kw)
{
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, ":Syncer", names))
        return -1;
    if (s->running) {
        PyErr_SetString(PyExc_RuntimeError, "Syncer is already running");
        return -1;
    }
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->fds = NULL;
    s->nfds = s->pending = s->busy = s->error = s->stop = 0;
    int rc = pthread_create(&s->thread, NULL, syncer_main, s);
    if (rc != 0) {
        close(s->efd);
        s->efd = -1;
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    s->running = 1;
    return 0;
}

static PyObject *Syncer_kick(Syncer *s, PyObject *arg)
{
    if (!s->running) {
        PyErr_SetString(PyExc_ValueError, "the syncer is closed");
        return NULL;
    }
    if (s->busy) {
        PyErr_SetString(PyExc_RuntimeError, "a sync is already running");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(arg, "kick() takes a sequence of file descriptors");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int *fds = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!fds) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (fd < 0 || fd > INT32_MAX) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "file descriptors must be >= 0");
            free(fds);
            Py_DECREF(seq);
            return NULL;
        }
        fds[i] = (int)fd;
    }
    Py_DECREF(seq);
    pthread_mutex_lock(&s->mu);
    s->fds = fds;
    s->nfds = n;
    s->pending = 1;
    s->busy = 1;
    pthread_mutex_unlock(&s->mu);
    /* signalled after the unlock: woken while we still held the mutex, the sync thread would
     * run only to block on it again (two context switches per put on a busy machine; the
     * profile showed the event loop 20 % of its time in this call) */
    pthread_cond_signal(&s->cv);
    Py_RETURN_NONE;
}

static PyObject *Syncer_finish(Syncer *s, PyObject *unused)
{
    (void)unused;
    uint64_t count;
    if (!s->running || !s->busy || read(s->efd, &count, sizeof count) != sizeof count)
        Py_RETURN_NONE;
    pthread_mutex_lock(&s->mu);
    int err = s->error;
    s->busy = 0;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLong(err);
}

static PyObject *Syncer_fileno(Syncer *s, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(s->efd);
}

static void syncer_stop(Syncer *s)
{
    if (!s->running)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(s->thread, NULL);
    Py_END_ALLOW_THREADS
    s->running = 0;
    free(s->fds);
    s->fds = NULL;
    close(s->efd);
    s->efd = -1;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

static PyObject *Syncer_close(Syncer *s, PyObject *unused)
{
    (void)unused;
    syncer_stop(s);
    Py_RETURN_NONE;
}

static void Syncer_dealloc(Syncer *s)
{
    syncer_stop(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef syncer_methods[] = {
    {"kick", (PyCFunction)Syncer_kick, METH_O, "kick(fds) starts one fdatasync of every fd"},
    {"finish", (PyCFunction)Syncer_finish, METH_NOARGS,
     "finish() -> errno of the sync that ended (0: it worked), or None if none has"},
    {"fileno", (PyCFunction)Syncer_fileno, METH_NOARGS,
     "fileno() -> the eventfd that is readable once a sync has ended"},
    {"close", (PyCFunction)Syncer_close, METH_NOARGS, "close() stops the thread"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SyncerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gateway._wal.Syncer",
    .tp_basicsize = sizeof(Syncer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A thread that runs fdatasync on request and signals an eventfd when done.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Syncer_init,
    .tp_dealloc = (destructor)Syncer_dealloc,
    .tp_methods = syncer_methods,
};

/* ---- the embedded store's cells ------------------------------------------------------- */

/* consecutive_keys(partition, timestamp, sequence, count) -> [row key, ...]
 * The row keys (int16 partition + int64 ms + int16 sequence, big-endian) of ``count``
 * consecutive ids from (timestamp, sequence), the sequence carrying into the next millisecond
 * after HQ_MAX_SEQUENCE: gateway.rowkey.consecutive_keys without a Python object per step. */
static PyObject *consecutive_keys(PyObject *self, PyObject *args)
{
    (void)self;
    int partition, sequence;
    long long timestamp;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "iLin", &partition, &timestamp, &sequence, &count))
        return NULL;
    if (partition < 0 || partition > HQ_MAX_PARTITION_ID + 1 || sequence < 0 ||
        sequence > HQ_MAX_SEQUENCE || count < 0 ||
        timestamp < 0) {
        PyErr_SetString(PyExc_ValueError, "partition, timestamp, sequence or count out of range");
        return NULL;
    }
    PyObject *keys = PyList_New(count);
    if (!keys)
        return NULL;
    uint64_t ts = (uint64_t)timestamp;
    unsigned seq = (unsigned)sequence;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyBytes_FromStringAndSize(NULL, HQ_KEY_LENGTH);
        if (!key) {
            Py_DECREF(keys);
            return NULL;
        }
        hq_key_encode((uint8_t *)PyBytes_AS_STRING(key), partition, ts, seq);
        PyList_SET_ITEM(keys, i, key);
        hq_next_id(&ts, &seq);
    }
    return keys;
}

static PyMethodDef methods[] = {
    {"wal_cells", wal_cells, METH_VARARGS, "wal_cells(keys, topics, values) -> bytes"},
    {"put_wal_cells", put_wal_cells, METH_VARARGS, "put_wal_cells(put, handle, cells) -> int"},
    {"consecutive_keys", consecutive_keys, METH_VARARGS,
     "consecutive_keys(partition, timestamp, sequence, count) -> [row key, ...]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wal", "The C parts of the embedded store's write-ahead log.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__wal(void)
{
    if (PyType_Ready(&SyncerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    /* the header's numbers, for tests/unit/test_limits.py */
    if (PyModule_AddIntConstant(m, "KEY_LENGTH", HQ_KEY_LENGTH) < 0 ||
        PyModule_AddIntConstant(m, "MAX_SEQUENCE", HQ_MAX_SEQUENCE) < 0 ||
        PyModule_AddIntConstant(m, "MAX_PARTITION_ID", HQ_MAX_PARTITION_ID) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&SyncerType);
    if (PyModule_AddObject(m, "Syncer", (PyObject *)&SyncerType) < 0) {
        Py_DECREF(&SyncerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
