/*
 * _fastclient: the Python client's hot paths in C, binary protocol only.
 *
 * Why: thriftpy2 builds, checks and encodes a TMessage object per message of a put, and a
 * TMessage and TMessageID per message of a scan reply, which the client then copied into its
 * own Message: the friendly client spent 3-4 us per message in Python while the gateway needs
 * well under one. Here a put request is written straight from (topic, value) items, and a scan
 * reply is read straight into hqueue.Message objects (this module's Message type: see below).
 * The bytes written are exactly the
 * bytes thriftpy2 writes for the same call (tests/unit/test_fastclient.py compares them);
 * hqueue/_purecodec.py is the same codec in Python (HQUEUE_PUREPYTHON=1 selects it).
 *
 * Message(topic, value, partition=None, id=None)   what hqueue.Message is when this is built
 * setup(Message, MessageID, InvalidArgument)   once, before anything else
 * encode_put(seqid, queue, partition, messages, base_index) -> bytes
 * encode_put_lists(seqid, queue, partition, topics, values, base_index) -> bytes
 * decode_list_reply(buffer) -> (end, [Message]) | 0 (incomplete) | -1 (not a plain list reply)
 * message_end(buffer) -> end | 0 (incomplete); ValueError when it is not a Thrift message
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../hqueue_contract/hqueue_limits.h"

#define MAX_DEPTH 64
#define MAX_PARTITION HQ_MAX_PARTITION_ID

static PyTypeObject *MessageType = NULL;   /* what decode_list_reply makes */
static PyTypeObject *MessageIDType = NULL;
static PyObject *InvalidArgument = NULL;
static int plain_ids = 0;                   /* MessageIDs are a tuple's items only */
static PyTypeObject *OwnMessage = NULL;     /* this module's Message type */

/* A tuple type whose instances hold nothing but the items: no __dict__ (a reference cycle
 * could go through it) and no __weakref__ or other slot (alloc_tuple leaves them unzeroed),
 * kept inline or, on newer Pythons, managed before the object. */
static int plain(PyTypeObject *type)
{
    unsigned long managed = 0;
#ifdef Py_TPFLAGS_MANAGED_DICT
    managed |= Py_TPFLAGS_MANAGED_DICT;
#endif
#ifdef Py_TPFLAGS_MANAGED_WEAKREF
    managed |= Py_TPFLAGS_MANAGED_WEAKREF;
#endif
    return type->tp_dictoffset == 0 && type->tp_weaklistoffset == 0 &&
           (type->tp_flags & managed) == 0 &&
           type->tp_basicsize == PyTuple_Type.tp_basicsize &&
           type->tp_itemsize == PyTuple_Type.tp_itemsize;
}

/* What the codec puts in a Message or a MessageID: bytes, ints and None, which hold no other
 * object, and a MessageID of two such. */
static int leaf(PyObject *o)
{
    return o == Py_None || PyBytes_CheckExact(o) || PyLong_CheckExact(o);
}

static int leaf_id(PyObject *o)
{
    return Py_TYPE(o) == MessageIDType && Py_SIZE(o) == 2 && leaf(PyTuple_GET_ITEM(o, 0)) &&
           leaf(PyTuple_GET_ITEM(o, 1));
}

/* Whether a tuple holds only leaves and leaf MessageIDs. */
static int leaves_only(PyObject *op)
{
    for (Py_ssize_t i = 0; i < Py_SIZE(op); i++) {
        PyObject *o = PyTuple_GET_ITEM(op, i);
        if (o && !leaf(o) && !leaf_id(o))
            return 0;
    }
    return 1;
}

/* How a plain Message or MessageID is freed. Left to CPython, an instance of a tuple type
 * written in Python goes through subtype_dealloc (which looks for a finalizer, slots, a
 * __dict__ and weak references, then finds the base's dealloc) and then tuple's own, each
 * with the trashcan that guards deep nesting: near half of decoding a page and dropping it
 * (tests/perf/scan_decode). A plain type's instances have none of those, and the items the
 * codec puts in them (bytes, ints, None, a MessageID of two ints) cannot nest, so they are
 * freed here in one step; an instance built in Python around something else is freed as
 * tuple frees it, trashcan included. As the dealloc of a heap type, it drops the instance's
 * reference to its type, also when subtype_dealloc calls it for an instance of a subclass
 * (which then leaves that to it). */
static void plain_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (leaves_only(op)) {
        for (Py_ssize_t i = Py_SIZE(op); --i >= 0;)
            Py_XDECREF(PyTuple_GET_ITEM(op, i));
        tp->tp_free(op);
        Py_DECREF(tp);
        return;
    }
    /* tuple's dealloc keeps its trashcan for tuple's own instances: this is ours */
    Py_TRASHCAN_BEGIN(op, plain_dealloc)
    PyTuple_Type.tp_dealloc(op);
    Py_DECREF(tp);
    Py_TRASHCAN_END
}

/* Frees a plain type's instances by plain_dealloc (once: a type that is no longer plain,
 * or was never, keeps CPython's). Only a heap type (a class written in Python): the
 * instances of a static one hold no reference to it. */
static void free_plainly(PyTypeObject *type)
{
    if (plain(type) && (type->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
        type->tp_dealloc != plain_dealloc && type->tp_finalize == NULL && type->tp_del == NULL)
        type->tp_dealloc = plain_dealloc;
}

/* ---- Message ----------------------------------------------------------------------------
 *
 * What a scan hands out, one per message: made and freed by the hundred thousand a second, so
 * it is as small as it can be. A named tuple of four (topic, value, partition, MessageID) cost
 * three objects per message made and freed (the Message, its MessageID, and the value); this is
 * one object and its value: the id is kept as two C integers and made into a MessageID the
 * first time it is asked for (then kept), as confluent-kafka keeps an offset. It behaves as the
 * named tuple did (fields by name and by index, unpacking, equality and hash as a tuple of its
 * four fields, pickling; hqueue/message.py adds _replace, _asdict and the rest), except that it
 * is not a tuple.
 *
 * It is a GC type, since Python code may build one around anything, but what the codec makes
 * holds only bytes and ints and cannot be in a cycle: those are never tracked (tracking them
 * and their young collections were a tenth of decoding a page), nor are ones built in Python
 * from such leaves. */

typedef struct {
    PyObject_HEAD
    PyObject *topic, *value, *partition;
    PyObject *id; /* NULL: not made yet, it is (ts, seq) */
    int64_t ts;
    int32_t seq;
    int32_t tracked; /* by the cycle collector: built in Python around something else */
} MessageObject;

#define MSG(o) ((MessageObject *)(o))

/* A new MessageID (ts, seq) with a given timestamp object; steals ts's reference. */
static PyObject *new_message_id(PyObject *ts, int seq);

static PyObject *msg_get_id(PyObject *op, void *closure)
{
    (void)closure;
    MessageObject *m = MSG(op);
    if (!m->id) {
        PyObject *ts = PyLong_FromLongLong(m->ts);
        PyObject *id = ts ? new_message_id(ts, m->seq) : NULL;
        if (!id)
            return NULL;
        if (m->id) { /* made meanwhile: the allocation ran a collection, and a finalizer */
            Py_DECREF(id);
        } else {
            m->id = id;
            if (!plain_ids && !m->tracked) { /* an id with a __dict__: a cycle could close */
                m->tracked = 1;
                PyObject_GC_Track(op);
            }
        }
    }
    Py_INCREF(m->id);
    return m->id;
}

static PyObject *msg_field(PyObject *op, Py_ssize_t i)
{
    MessageObject *m = MSG(op);
    PyObject *f = i == 0 ? m->topic : i == 1 ? m->value : i == 2 ? m->partition : NULL;
    if (i == 3)
        return msg_get_id(op, NULL);
    Py_INCREF(f);
    return f;
}

/* The message as the tuple of its four fields. */
static PyObject *msg_tuple(PyObject *op)
{
    PyObject *id = msg_get_id(op, NULL);
    if (!id)
        return NULL;
    MessageObject *m = MSG(op);
    PyObject *t = PyTuple_Pack(4, m->topic, m->value, m->partition, id);
    Py_DECREF(id);
    return t;
}

static int holds_leaves(MessageObject *m)
{
    PyObject *fields[3] = {m->topic, m->value, m->partition};
    for (int i = 0; i < 3; i++)
        if (!leaf(fields[i]) && !PyUnicode_CheckExact(fields[i]))
            return 0;
    return !m->id || leaf(m->id) || (plain_ids && leaf_id(m->id));
}

static PyObject *msg_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"topic", "value", "partition", "id", NULL};
    PyObject *topic, *value, *partition = Py_None, *id = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OO:Message", kwlist, &topic, &value,
                                     &partition, &id))
        return NULL;
    PyObject *op = type->tp_alloc(type, 0); /* zeroed and tracked */
    if (!op)
        return NULL;
    MessageObject *m = MSG(op);
    Py_INCREF(topic);
    Py_INCREF(value);
    Py_INCREF(partition);
    Py_INCREF(id);
    m->topic = topic;
    m->value = value;
    m->partition = partition;
    m->id = id;
    m->tracked = 1;
    if (type == OwnMessage && holds_leaves(m)) {
        PyObject_GC_UnTrack(op); /* no cycle can go through it */
        m->tracked = 0;
    }
    return op;
}

static int msg_traverse(PyObject *op, visitproc visit, void *arg)
{
    MessageObject *m = MSG(op);
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(m->topic);
    Py_VISIT(m->value);
    Py_VISIT(m->partition);
    Py_VISIT(m->id);
    return 0;
}

/* An untracked message holds leaves only and is freed in one step; a tracked one (built in
 * Python around something else, which could be another message, and so on, deeply) goes
 * through the trashcan, which keeps a long chain from overflowing the C stack. As the dealloc
 * of a heap type it drops the instance's reference to its type (for a subclass too:
 * subtype_dealloc leaves that to a heap base's dealloc). */
static void msg_free(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    MessageObject *m = MSG(op);
    Py_XDECREF(m->topic);
    Py_XDECREF(m->value);
    Py_XDECREF(m->partition);
    Py_XDECREF(m->id);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static void msg_dealloc(PyObject *op)
{
    if (!MSG(op)->tracked) {
        msg_free(op);
        return;
    }
    PyObject_GC_UnTrack(op);
    Py_TRASHCAN_BEGIN(op, msg_dealloc)
    msg_free(op);
    Py_TRASHCAN_END
}

static Py_ssize_t msg_len(PyObject *op)
{
    (void)op;
    return 4;
}

static PyObject *msg_item(PyObject *op, Py_ssize_t i)
{
    if (i < 0 || i >= 4) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return NULL;
    }
    return msg_field(op, i);
}

static PyObject *msg_subscript(PyObject *op, PyObject *key)
{
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        return msg_item(op, i < 0 ? i + 4 : i);
    }
    PyObject *t = msg_tuple(op); /* a slice, or an error worded as a tuple's */
    if (!t)
        return NULL;
    PyObject *r = PyObject_GetItem(t, key);
    Py_DECREF(t);
    return r;
}

static PyObject *msg_iter(PyObject *op)
{
    PyObject *t = msg_tuple(op);
    if (!t)
        return NULL;
    PyObject *it = PyObject_GetIter(t);
    Py_DECREF(t);
    return it;
}

static int is_message(PyObject *o)
{
    return OwnMessage && PyObject_TypeCheck(o, OwnMessage);
}

/* Equal, and ordered, as the tuples of their fields; a message equals such a tuple too (as a
 * named tuple did). Two decoded messages compare their ids without making them. */
static PyObject *msg_richcompare(PyObject *a, PyObject *b, int op)
{
    if (!is_message(b) && !PyTuple_Check(b))
        Py_RETURN_NOTIMPLEMENTED;
    if ((op == Py_EQ || op == Py_NE) && is_message(b) && !MSG(a)->id && !MSG(b)->id) {
        MessageObject *x = MSG(a), *y = MSG(b);
        int eq = x->ts == y->ts && x->seq == y->seq;
        PyObject *xs[3] = {x->topic, x->value, x->partition};
        PyObject *ys[3] = {y->topic, y->value, y->partition};
        for (int i = 0; eq && i < 3; i++) {
            eq = PyObject_RichCompareBool(xs[i], ys[i], Py_EQ);
            if (eq < 0)
                return NULL;
        }
        return PyBool_FromLong(op == Py_EQ ? eq : !eq);
    }
    PyObject *ta = msg_tuple(a);
    PyObject *tb = ta ? (is_message(b) ? msg_tuple(b) : (Py_INCREF(b), b)) : NULL;
    PyObject *r = tb ? PyObject_RichCompare(ta, tb, op) : NULL;
    Py_XDECREF(ta);
    Py_XDECREF(tb);
    return r;
}

static Py_hash_t msg_hash(PyObject *op)
{
    PyObject *t = msg_tuple(op);
    if (!t)
        return -1;
    Py_hash_t h = PyObject_Hash(t);
    Py_DECREF(t);
    return h;
}

/* Pickled as Message(*fields), with a subclass instance's __dict__ as its state. */
static PyObject *msg_reduce(PyObject *op, PyObject *unused)
{
    (void)unused;
    PyObject *t = msg_tuple(op);
    if (!t)
        return NULL;
    PyObject *state = NULL;
    if (Py_TYPE(op) != OwnMessage && !(state = PyObject_GetAttrString(op, "__dict__"))) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            Py_DECREF(t);
            return NULL;
        }
        PyErr_Clear(); /* a subclass with __slots__ = () */
    }
    if (state && (!PyDict_Check(state) || !PyDict_GET_SIZE(state)))
        Py_CLEAR(state);
    if (state)
        return Py_BuildValue("(ONN)", (PyObject *)Py_TYPE(op), t, state);
    return Py_BuildValue("(ON)", (PyObject *)Py_TYPE(op), t);
}

static PyObject *msg_get(PyObject *op, void *closure)
{
    return msg_field(op, (Py_ssize_t)(intptr_t)closure);
}

static PyGetSetDef msg_getset[] = {
    {"topic", msg_get, NULL, "the message's topic (bytes)", (void *)0},
    {"value", msg_get, NULL, "the message's value (bytes)", (void *)1},
    {"partition", msg_get, NULL, "its partition (an int), or None", (void *)2},
    {"id", msg_get_id, NULL, "its MessageID, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef msg_methods[] = {
    {"__reduce__", msg_reduce, METH_NOARGS, "pickles as Message(*fields)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot msg_slots[] = {
    {Py_tp_doc, "Message(topic, value, partition=None, id=None)\n--\n\nSee hqueue.message."},
    {Py_tp_new, msg_new},
    {Py_tp_dealloc, msg_dealloc},
    {Py_tp_traverse, msg_traverse},
    {Py_tp_richcompare, msg_richcompare},
    {Py_tp_hash, msg_hash},
    {Py_tp_iter, msg_iter},
    {Py_tp_getset, msg_getset},
    {Py_tp_methods, msg_methods},
    {Py_sq_length, msg_len},
    {Py_sq_item, msg_item},
    {Py_mp_length, msg_len},
    {Py_mp_subscript, msg_subscript},
    {0, NULL},
};

static PyType_Spec msg_spec = {
    "hqueue.message.Message", sizeof(MessageObject), 0,
    /* SEQUENCE: matched by a sequence pattern (case (topic, value, p, id)), as a tuple is */
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_SEQUENCE, msg_slots,
};

static PyObject *setup(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *m, *mid, *ia;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyType_Type, &m, &PyType_Type, &mid, &ia))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)mid, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "MessageID must be a tuple type");
        return NULL;
    }
    Py_INCREF(m);
    Py_INCREF(mid);
    Py_INCREF(ia);
    Py_XSETREF(MessageType, (PyTypeObject *)m);
    Py_XSETREF(MessageIDType, (PyTypeObject *)mid);
    Py_XSETREF(InvalidArgument, ia);
    plain_ids = plain((PyTypeObject *)mid);
    free_plainly(MessageIDType);
    Py_RETURN_NONE;
}

static int ready(void)
{
    if (MessageType && MessageIDType && InvalidArgument)
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "hqueue._fastclient.setup() was not called");
    return 0;
}

/* ---- errors naming the argument, as hqueue.arguments._int and _bytes word them -------------- */

static void invalid(const char *prefix, Py_ssize_t index, const char *field, PyObject *reason)
{
    if (!reason)
        return;
    PyObject *arg;
    if (index < 0) /* one argument, not an element of a list */
        arg = PyUnicode_FromString(prefix);
    else
        arg = field ? PyUnicode_FromFormat("%s[%zd].%s", prefix, index, field)
                    : PyUnicode_FromFormat("%s[%zd]", prefix, index);
    if (arg) {
        PyObject *exc = PyObject_CallFunctionObjArgs(InvalidArgument, arg, reason, NULL);
        if (exc) {
            PyErr_SetObject(InvalidArgument, exc);
            Py_DECREF(exc);
        }
        Py_DECREF(arg);
    }
    Py_DECREF(reason);
}

/* ---- the put request -------------------------------------------------------------------- */

typedef struct {
    const char *t, *v;
    Py_ssize_t tl, vl;
    int pid; /* -1: none */
} Item;

typedef struct {
    Item *items;
    Py_ssize_t n;
    PyObject *keep; /* bytes made from bytearray/memoryview items, alive until the end */
} Items;

/* topic or value: bytes, str (UTF-8) or any buffer (bytearray, memoryview). 0 ok, -1 error */
static int text(Items *it, PyObject *o, const char **p, Py_ssize_t *n, const char *prefix,
                Py_ssize_t index, const char *field)
{
    if (PyBytes_Check(o)) {
        *p = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyUnicode_Check(o)) {
        *p = PyUnicode_AsUTF8AndSize(o, n); /* cached in the str, alive as long as it is */
        return *p ? 0 : -1;
    }
    if (PyByteArray_Check(o) || PyMemoryView_Check(o)) {
        PyObject *b = PyBytes_FromObject(o);
        if (!b)
            return -1;
        if (!it->keep && !(it->keep = PyList_New(0))) {
            Py_DECREF(b);
            return -1;
        }
        int failed = PyList_Append(it->keep, b) < 0;
        Py_DECREF(b);
        if (failed)
            return -1;
        *p = PyBytes_AS_STRING(b);
        *n = PyBytes_GET_SIZE(b);
        return 0;
    }
    invalid(prefix, index, field,
            PyUnicode_FromFormat("must be bytes or str, got %s", Py_TYPE(o)->tp_name));
    return -1;
}

static int partition_of(PyObject *o, int *pid, const char *prefix, Py_ssize_t index)
{
    if (o == Py_None) {
        *pid = -1;
        return 0;
    }
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        invalid(prefix, index, "partition",
                PyUnicode_FromFormat("must be an int, got %s", Py_TYPE(o)->tp_name));
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < 0 || v > MAX_PARTITION) {
        invalid(prefix, index, "partition",
                PyUnicode_FromFormat("must be 0..%d, got %S", MAX_PARTITION, o));
        return -1;
    }
    *pid = (int)v;
    return 0;
}

static void items_free(Items *it)
{
    PyMem_Free(it->items);
    Py_XDECREF(it->keep);
}

typedef struct {
    char *p;
} W;

static inline void w8(W *w, uint8_t v) { *w->p++ = (char)v; }
static inline void w16(W *w, int v)
{
    w8(w, (uint8_t)((unsigned)v >> 8));
    w8(w, (uint8_t)v);
}
static inline void w32(W *w, int32_t v)
{
    uint32_t u = (uint32_t)v;
    w8(w, (uint8_t)(u >> 24));
    w8(w, (uint8_t)(u >> 16));
    w8(w, (uint8_t)(u >> 8));
    w8(w, (uint8_t)u);
}
static inline void wfield(W *w, uint8_t type, int id)
{
    w8(w, type);
    w16(w, id);
}
static inline void wbytes(W *w, const char *p, Py_ssize_t n)
{
    w32(w, (int32_t)n);
    memcpy(w->p, p, (size_t)n);
    w->p += n;
}

/* The whole CALL of putMessages(queue, msgs) (partition < 0) or putMessagesWithPid(queue,
 * partition, msgs), as thriftpy2's TClient writes it. */
static PyObject *write_put(int seqid, const char *queue, Py_ssize_t queue_len, int partition,
                           Items *it)
{
    const char *name = partition < 0 ? "putMessages" : "putMessagesWithPid";
    Py_ssize_t name_len = (Py_ssize_t)strlen(name);
    Py_ssize_t size = 8 + name_len + 4 + 3 + 4 + queue_len + (partition < 0 ? 0 : 5) + 8 + 1;
    for (Py_ssize_t i = 0; i < it->n; i++) {
        Item *m = &it->items[i];
        if (m->tl > INT32_MAX || m->vl > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a topic or value over 2 GiB");
            return NULL;
        }
        size += 15 + m->tl + m->vl + (m->pid >= 0 && partition < 0 ? 5 : 0);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (!out)
        return NULL;
    W w = {PyBytes_AS_STRING(out)};
    w32(&w, (int32_t)0x80010001); /* strict binary, version 1, CALL */
    wbytes(&w, name, name_len);
    w32(&w, seqid);
    wfield(&w, 11, 1); /* queueName */
    wbytes(&w, queue, queue_len);
    if (partition >= 0) {
        wfield(&w, 6, 2); /* partitionID */
        w16(&w, partition);
    }
    wfield(&w, 15, partition < 0 ? 2 : 3); /* tMessages: list<TMessage> */
    w8(&w, 12);
    w32(&w, (int32_t)it->n);
    for (Py_ssize_t i = 0; i < it->n; i++) {
        Item *m = &it->items[i];
        if (m->pid >= 0 && partition < 0) {
            wfield(&w, 6, 2); /* the message's own partitionID */
            w16(&w, m->pid);
        }
        wfield(&w, 11, 3);
        wbytes(&w, m->t, m->tl);
        wfield(&w, 11, 4);
        wbytes(&w, m->v, m->vl);
        w8(&w, 0);
    }
    w8(&w, 0); /* end of the arguments */
    if (w.p != PyBytes_AS_STRING(out) + size) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "_fastclient: put size miscounted");
        return NULL;
    }
    return out;
}

static int check_partition_arg(int partition)
{
    if (partition < -1 || partition > MAX_PARTITION) {
        PyErr_SetString(PyExc_ValueError, "partition must be -1 (none) or 0.." HQ_STR(HQ_MAX_PARTITION_ID));
        return -1;
    }
    return 0;
}

static PyObject *encode_put(PyObject *self, PyObject *args)
{
    (void)self;
    int seqid, partition;
    const char *queue;
    Py_ssize_t queue_len, base;
    PyObject *messages;
    if (!PyArg_ParseTuple(args, "iy#iOn", &seqid, &queue, &queue_len, &partition, &messages,
                          &base))
        return NULL;
    if (!ready() || check_partition_arg(partition) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(messages, "messages must be a sequence");
    if (!seq)
        return NULL;
    Items it = {NULL, PySequence_Fast_GET_SIZE(seq), NULL};
    PyObject *result = NULL;
    PyObject **objs = PySequence_Fast_ITEMS(seq);
    it.items = PyMem_Malloc(sizeof(Item) * (size_t)(it.n ? it.n : 1));
    if (!it.items) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < it.n; i++) {
        PyObject *o = objs[i];
        Py_ssize_t idx = base + i, n;
        PyObject *t, *v, *p = Py_None;
        if (is_message(o)) {
            t = MSG(o)->topic;
            v = MSG(o)->value;
            p = MSG(o)->partition;
        } else if (PyObject_TypeCheck(o, MessageType) && PyTuple_Check(o) &&
                   PyTuple_GET_SIZE(o) >= 3) { /* another Message type: a named tuple (tests') */
            t = PyTuple_GET_ITEM(o, 0);
            v = PyTuple_GET_ITEM(o, 1);
            p = PyTuple_GET_ITEM(o, 2);
        } else if ((PyTuple_Check(o) || PyList_Check(o)) && (n = PySequence_Fast_GET_SIZE(o)) >= 2 &&
                   n <= 3) {
            PyObject **f = PySequence_Fast_ITEMS(o);
            t = f[0];
            v = f[1];
            if (n == 3)
                p = f[2];
        } else {
            invalid("messages", idx, NULL,
                    PyUnicode_FromFormat(
                        "must be a Message or a (topic, value[, partition]) tuple, got %R", o));
            goto done;
        }
        /* the pointers stay valid: seq holds the items (and they their fields) until the
         * end of this call, and nothing below runs Python code that could change them */
        Item *m = &it.items[i];
        if (partition_of(p, &m->pid, "messages", idx) < 0 ||
            text(&it, t, &m->t, &m->tl, "messages", idx, "topic") < 0 ||
            text(&it, v, &m->v, &m->vl, "messages", idx, "value") < 0)
            goto done;
    }
    result = write_put(seqid, queue, queue_len, partition, &it);
done:
    items_free(&it);
    Py_DECREF(seq);
    return result;
}

static PyObject *encode_put_lists(PyObject *self, PyObject *args)
{
    (void)self;
    int seqid, partition;
    const char *queue;
    Py_ssize_t queue_len, base;
    PyObject *topics, *values;
    if (!PyArg_ParseTuple(args, "iy#iOOn", &seqid, &queue, &queue_len, &partition, &topics,
                          &values, &base))
        return NULL;
    if (!ready() || check_partition_arg(partition) < 0)
        return NULL;
    int one_topic = PyBytes_Check(topics) || PyUnicode_Check(topics);
    PyObject *vseq = PySequence_Fast(values, "values must be a sequence");
    if (!vseq)
        return NULL;
    PyObject *tseq = NULL, *result = NULL;
    Items it = {NULL, PySequence_Fast_GET_SIZE(vseq), NULL};
    if (!one_topic) {
        tseq = PySequence_Fast(topics, "topics must be a sequence or one topic");
        if (!tseq)
            goto done;
        if (PySequence_Fast_GET_SIZE(tseq) != it.n) {
            PyObject *exc = PyObject_CallFunction(
                InvalidArgument, "ss", "topics", "must be one topic or as many as the values");
            if (exc) {
                PyErr_SetObject(InvalidArgument, exc);
                Py_DECREF(exc);
            }
            goto done;
        }
    }
    it.items = PyMem_Malloc(sizeof(Item) * (size_t)(it.n ? it.n : 1));
    if (!it.items) {
        PyErr_NoMemory();
        goto done;
    }
    const char *t1 = NULL;
    Py_ssize_t t1l = 0;
    if (one_topic && text(&it, topics, &t1, &t1l, "topic", -1, NULL) < 0)
        goto done;
    PyObject **vs = PySequence_Fast_ITEMS(vseq);
    PyObject **ts = tseq ? PySequence_Fast_ITEMS(tseq) : NULL;
    for (Py_ssize_t i = 0; i < it.n; i++) {
        Item *m = &it.items[i];
        m->pid = -1;
        if (one_topic) {
            m->t = t1;
            m->tl = t1l;
        } else if (text(&it, ts[i], &m->t, &m->tl, "topics", base + i, NULL) < 0) {
            goto done;
        }
        if (text(&it, vs[i], &m->v, &m->vl, "values", base + i, NULL) < 0)
            goto done;
    }
    result = write_put(seqid, queue, queue_len, partition, &it);
done:
    items_free(&it);
    Py_XDECREF(tseq);
    Py_DECREF(vseq);
    return result;
}

/* ---- reading replies --------------------------------------------------------------------- */

typedef struct {
    const uint8_t *buf;
    Py_ssize_t len, pos;
    int incomplete; /* a read ran past the end: more bytes may make it whole */
} R;

static inline int need(R *r, Py_ssize_t n)
{
    if (r->pos + n <= r->len)
        return 1;
    r->incomplete = 1;
    return 0;
}

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     p[3]);
}

static inline int64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

/* A string's offset and length. 1 ok, 0 short or bad. */
static int rstr(R *r, Py_ssize_t *at, Py_ssize_t *n)
{
    if (!need(r, 4))
        return 0;
    int32_t len = be32(r->buf + r->pos);
    if (len < 0)
        return 0;
    r->pos += 4;
    if (!need(r, len))
        return 0;
    *at = r->pos;
    *n = len;
    r->pos += len;
    return 1;
}

/* One field header: type (0 = the struct's end) and id. */
static int rfield(R *r, uint8_t *type, int *id)
{
    if (!need(r, 1))
        return 0;
    *type = r->buf[r->pos++];
    if (*type == 0)
        return 1;
    if (!need(r, 2))
        return 0;
    *id = (int16_t)((r->buf[r->pos] << 8) | r->buf[r->pos + 1]);
    r->pos += 2;
    return 1;
}

/* The gateway writes every TMessage of a scan reply the same way (gateway/_thriftbuf.h
 * put_tmessage): id {1: i64 timestamp, 2: i16 sequence}, 2: i16 partitionID, 3: topic,
 * 4: value, in that order, nothing else. A struct at r->pos laid out so: its length (40 bytes
 * and its topic and value), 0 otherwise (the generic walk reads it: another server's layout,
 * or not all of it received yet). Bytes that match are what the generic walk would read as
 * these fields, so either way gives the same message. The per-field loop was a tenth of a
 * scan's client CPU, walked twice (message_end, then decode_list_reply). */
#define TMESSAGE_FIXED 40
static inline Py_ssize_t tmessage_len(const R *r)
{
    static const uint8_t head[] = {12, 0, 1, 10, 0, 1};
    const uint8_t *m = r->buf + r->pos;
    Py_ssize_t room = r->len - r->pos;
    if (room < TMESSAGE_FIXED || memcmp(m, head, sizeof head) != 0 || m[14] != 6 ||
        m[15] != 0 || m[16] != 2 || m[19] != 0 || m[20] != 6 || m[21] != 0 || m[22] != 2 ||
        m[25] != 11 || m[26] != 0 || m[27] != 3)
        return 0;
    int32_t tl = be32(m + 28);
    if (tl < 0 || tl > room - TMESSAGE_FIXED)
        return 0;
    const uint8_t *v = m + 32 + tl;
    if (v[0] != 11 || v[1] != 0 || v[2] != 4)
        return 0;
    int32_t vl = be32(v + 3);
    if (vl < 0 || vl > room - TMESSAGE_FIXED - tl || v[7 + vl] != 0)
        return 0;
    return TMESSAGE_FIXED + (Py_ssize_t)tl + vl;
}

static int rskip(R *r, uint8_t t, int depth)
{
    if (depth > MAX_DEPTH)
        return 0;
    switch (t) {
    case 2: case 3: return need(r, 1) ? (r->pos += 1, 1) : 0;
    case 6: return need(r, 2) ? (r->pos += 2, 1) : 0;
    case 8: return need(r, 4) ? (r->pos += 4, 1) : 0;
    case 4: case 10: return need(r, 8) ? (r->pos += 8, 1) : 0;
    case 11: {
        Py_ssize_t at, n;
        return rstr(r, &at, &n);
    }
    case 12:
        for (;;) {
            uint8_t ft;
            int fid;
            if (!rfield(r, &ft, &fid))
                return 0;
            if (ft == 0)
                return 1;
            if (!rskip(r, ft, depth + 1))
                return 0;
        }
    case 14: case 15: {
        if (!need(r, 5))
            return 0;
        uint8_t et = r->buf[r->pos];
        int32_t n = be32(r->buf + r->pos + 1);
        if (n < 0)
            return 0;
        r->pos += 5;
        for (int32_t i = 0; i < n; i++) {
            Py_ssize_t len = et == 12 ? tmessage_len(r) : 0;
            if (len)
                r->pos += len;
            else if (!rskip(r, et, depth + 1))
                return 0;
        }
        return 1;
    }
    case 13: {
        if (!need(r, 6))
            return 0;
        uint8_t kt = r->buf[r->pos], vt = r->buf[r->pos + 1];
        int32_t n = be32(r->buf + r->pos + 2);
        if (n < 0)
            return 0;
        r->pos += 6;
        for (int32_t i = 0; i < n; i++)
            if (!rskip(r, kt, depth + 1) || !rskip(r, vt, depth + 1))
                return 0;
        return 1;
    }
    default:
        return 0;
    }
}

/* The message header: strict binary only (what thriftpy2 and Apache Thrift servers write).
 * *mtype gets the message type. 1 ok, 0 short or not ours. */
static int rheader(R *r, int *mtype)
{
    if (!need(r, 4))
        return 0;
    uint32_t first = (uint32_t)be32(r->buf);
    if ((first & 0xffff0000u) != 0x80010000u)
        return 0;
    *mtype = (int)(first & 0xff);
    r->pos = 4;
    Py_ssize_t at, n;
    if (!rstr(r, &at, &n) || !need(r, 4))
        return 0;
    r->pos += 4; /* seqid: one call at a time per connection, in order */
    return 1;
}

static PyObject *message_end(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    R r = {(const uint8_t *)view.buf, view.len, 0, 0};
    int mtype = 0;
    int ok = rheader(&r, &mtype) && rskip(&r, 12, 0);
    PyBuffer_Release(&view);
    if (ok)
        return PyLong_FromSsize_t(r.pos);
    if (r.incomplete)
        return PyLong_FromLong(0);
    PyErr_SetString(PyExc_ValueError, "the reply is not a binary-protocol Thrift message");
    return NULL;
}

/* A Message or MessageID holds only bytes, ints, None and (a Message) its MessageID: it can be
 * in no reference cycle, so the cycle collector need not follow it. Left tracked, the
 * thousands of tuples of a page trigger young collections that walk them all, a good part of
 * a scan's time; CPython untracks such tuples itself, but only once a collection has looked
 * at them. So a plain tuple type's instances are allocated untracked (tp_alloc would zero
 * and track them, to be untracked at once: a tenth of decoding a page, per
 * tests/perf/scan_decode). Other tuple types (a subclass without __slots__) get tp_alloc's
 * zeroed, tracked instances: their __dict__ could close a cycle.
 *
 * A plain one is not a Python object until every one of its n items is set (not zeroed). */
static PyObject *alloc_tuple(PyTypeObject *type, Py_ssize_t n, int is_plain)
{
    if (!is_plain)
        return type->tp_alloc(type, n);
    return (PyObject *)PyObject_GC_NewVar(PyTupleObject, type, n);
}

/* Sequence numbers repeat across milliseconds (a put of n messages uses 0..n-1): the first
 * SEQ_INTS are made once and shared, as CPython shares 0..256. */
#define SEQ_INTS 4096
static PyObject *seq_ints[SEQ_INTS];

static PyObject *seq_int(int seq)
{
    if (seq < 0 || seq >= SEQ_INTS)
        return PyLong_FromLong(seq);
    if (!seq_ints[seq] && !(seq_ints[seq] = PyLong_FromLong(seq)))
        return NULL;
    Py_INCREF(seq_ints[seq]);
    return seq_ints[seq];
}

static PyObject *new_message_id(PyObject *ts, int seq)
{
    PyObject *s = seq_int(seq);
    PyObject *id = s ? alloc_tuple(MessageIDType, 2, plain_ids) : NULL;
    if (!id) {
        Py_DECREF(ts);
        Py_XDECREF(s);
        return NULL;
    }
    PyTuple_SET_ITEM(id, 0, ts);
    PyTuple_SET_ITEM(id, 1, s);
    return id;
}

/* A new MessageID (ts, seq); NULL with a Python error. The messages of one millisecond share
 * their timestamp object (*last_ts, whose value is *last_ts_value). */
static PyObject *message_id(int64_t ts, int seq, PyObject **last_ts, int64_t *last_ts_value)
{
    PyObject *t;
    if (*last_ts && *last_ts_value == ts) {
        t = *last_ts;
        Py_INCREF(t);
    } else {
        t = PyLong_FromLongLong(ts);
        if (!t)
            return NULL;
        Py_INCREF(t);
        Py_XSETREF(*last_ts, t);
        *last_ts_value = ts;
    }
    return new_message_id(t, seq);
}

/* A decoded message: this module's Message with its id left as (ts, seq), or (for another
 * Message type, as tests set up) that type called with the four fields. Steals the references
 * it is given. */
static PyObject *new_message(PyObject *topic, PyObject *value, PyObject *partition, int have_id,
                             int64_t ts, int seq, PyObject **last_ts, int64_t *last_ts_value)
{
    if (MessageType == OwnMessage) {
        MessageObject *m = PyObject_GC_New(MessageObject, OwnMessage); /* untracked */
        if (!m) {
            Py_DECREF(topic);
            Py_DECREF(value);
            Py_DECREF(partition);
            return NULL;
        }
        m->topic = topic;
        m->value = value;
        m->partition = partition;
        m->id = have_id ? NULL : (Py_INCREF(Py_None), Py_None);
        m->ts = ts;
        m->seq = seq;
        m->tracked = 0;
        return (PyObject *)m;
    }
    PyObject *id = have_id ? message_id(ts, seq, last_ts, last_ts_value)
                           : (Py_INCREF(Py_None), Py_None);
    PyObject *m = id ? PyObject_CallFunctionObjArgs((PyObject *)MessageType, topic, value,
                                                    partition, id, NULL)
                     : NULL;
    Py_DECREF(topic);
    Py_DECREF(value);
    Py_DECREF(partition);
    Py_XDECREF(id);
    return m;
}

/* 1 and the message in *out, 0 short or unusual, -1 Python error */
static int rmessage(R *r, PyObject **out, PyObject **last_topic, PyObject **last_ts,
                    int64_t *last_ts_value)
{
    int64_t ts = 0;
    int seq = 0, pid = -1, have_id = 0;
    Py_ssize_t t_at = -1, t_len = 0, v_at = -1, v_len = 0;
    Py_ssize_t fixed = tmessage_len(r);
    if (fixed) {
        const uint8_t *m = r->buf + r->pos;
        ts = be64(m + 6);
        seq = (int16_t)((m[17] << 8) | m[18]);
        pid = (int16_t)((m[23] << 8) | m[24]);
        have_id = 1;
        t_at = r->pos + 32;
        t_len = be32(m + 28);
        v_at = t_at + t_len + 7;
        v_len = be32(m + 32 + t_len + 3);
        r->pos += fixed;
    }
    while (!fixed) {
        uint8_t ft;
        int fid = 0;
        if (!rfield(r, &ft, &fid))
            return 0;
        if (ft == 0)
            break;
        if (fid == 1 && ft == 12) {
            int have_ts = 0, have_seq = 0;
            for (;;) {
                uint8_t it;
                int iid = 0;
                if (!rfield(r, &it, &iid))
                    return 0;
                if (it == 0)
                    break;
                if (iid == 1 && it == 10) {
                    if (!need(r, 8))
                        return 0;
                    ts = be64(r->buf + r->pos);
                    r->pos += 8;
                    have_ts = 1;
                } else if (iid == 2 && it == 6) {
                    if (!need(r, 2))
                        return 0;
                    seq = (int16_t)((r->buf[r->pos] << 8) | r->buf[r->pos + 1]);
                    r->pos += 2;
                    have_seq = 1;
                } else if (!rskip(r, it, 2)) {
                    return 0;
                }
            }
            if (!have_ts || !have_seq)
                return 0; /* a partial id: let thriftpy2 say what it is */
            have_id = 1;
        } else if (fid == 2 && ft == 6) {
            if (!need(r, 2))
                return 0;
            pid = (int16_t)((r->buf[r->pos] << 8) | r->buf[r->pos + 1]);
            r->pos += 2;
        } else if (fid == 3 && ft == 11) {
            if (!rstr(r, &t_at, &t_len))
                return 0;
        } else if (fid == 4 && ft == 11) {
            if (!rstr(r, &v_at, &v_len))
                return 0;
        } else if (!rskip(r, ft, 1)) {
            return 0;
        }
    }
    if (t_at < 0 || v_at < 0)
        return 0;
    PyObject *topic;
    const char *tp = (const char *)r->buf + t_at;
    if (*last_topic && PyBytes_GET_SIZE(*last_topic) == t_len &&
        memcmp(PyBytes_AS_STRING(*last_topic), tp, (size_t)t_len) == 0) {
        topic = *last_topic; /* topics repeat: share one object */
        Py_INCREF(topic);
    } else {
        topic = PyBytes_FromStringAndSize(tp, t_len);
        if (!topic)
            return -1;
        Py_XSETREF(*last_topic, topic);
        Py_INCREF(topic);
    }
    PyObject *value = PyBytes_FromStringAndSize((const char *)r->buf + v_at, v_len);
    PyObject *partition = pid >= 0 ? PyLong_FromLong(pid) : (Py_INCREF(Py_None), Py_None);
    if (!value || !partition) {
        Py_DECREF(topic);
        Py_XDECREF(value);
        Py_XDECREF(partition);
        return -1;
    }
    PyObject *m = new_message(topic, value, partition, have_id, ts, seq, last_ts, last_ts_value);
    if (!m)
        return -1;
    *out = m;
    return 1;
}

static PyObject *decode_list_reply(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    if (!ready()) {
        PyBuffer_Release(&view);
        return NULL;
    }
    R rd = {(const uint8_t *)view.buf, view.len, 0, 0}, *r = &rd;
    PyObject *out = NULL, *last_topic = NULL, *last_ts = NULL, *result = NULL;
    int64_t last_ts_value = 0;
    int mtype = 0, have_list = 0;
    if (!rheader(r, &mtype))
        goto stop;
    if (mtype != 2)
        goto unusual; /* an EXCEPTION (TApplicationException) */
    for (;;) {
        uint8_t ft;
        int fid = 0;
        if (!rfield(r, &ft, &fid))
            goto stop;
        if (ft == 0)
            break;
        if (fid != 0 || ft != 15)
            goto unusual; /* a declared exception: thriftpy2 decodes and raises it */
        if (!need(r, 5))
            goto stop;
        if (r->buf[r->pos] != 12)
            goto unusual;
        int32_t n = be32(r->buf + r->pos + 1);
        if (n < 0 || out)
            goto unusual;
        r->pos += 5;
        /* Filled in place (a slot not reached stays NULL, which freeing it allows), and not
         * tracked meanwhile: each young collection the page's messages trigger would walk the
         * whole list again. A message read here takes 15 bytes or more (a topic, a value, the
         * end): no more can be in the bytes there are, whatever the count claims. */
        Py_ssize_t room = (r->len - r->pos) / 15;
        if (!(out = PyList_New(n < room ? n : room)))
            goto error;
        PyObject_GC_UnTrack(out);
        for (int32_t i = 0; i < n; i++) {
            PyObject *m = NULL;
            int got = rmessage(r, &m, &last_topic, &last_ts, &last_ts_value);
            if (got < 0)
                goto error;
            if (got == 0)
                goto stop; /* short (the count was too large too) or unusual */
            if (i >= PyList_GET_SIZE(out)) { /* cannot happen, as said above */
                Py_DECREF(m);
                goto unusual;
            }
            PyList_SET_ITEM(out, i, m);
        }
        PyObject_GC_Track(out);
        have_list = 1;
    }
    if (!have_list)
        goto unusual;
    result = Py_BuildValue("(nO)", r->pos, out);
    goto done;
stop:
    if (r->incomplete) {
        result = PyLong_FromLong(0);
        goto done;
    }
unusual:
    result = PyLong_FromLong(-1);
    goto done;
error:
done:
    Py_XDECREF(out);
    Py_XDECREF(last_topic);
    Py_XDECREF(last_ts);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(Message, MessageID, InvalidArgument) -> None (and frees plain ones in one step)"},
    {"encode_put", encode_put, METH_VARARGS,
     "encode_put(seqid, queue, partition, messages, base_index) -> bytes"},
    {"encode_put_lists", encode_put_lists, METH_VARARGS,
     "encode_put_lists(seqid, queue, partition, topics, values, base_index) -> bytes"},
    {"decode_list_reply", decode_list_reply, METH_VARARGS,
     "decode_list_reply(buffer) -> (end, [Message]) | 0 | -1"},
    {"message_end", message_end, METH_VARARGS, "message_end(buffer) -> end | 0"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastclient",
    "The hqueue client's put encoder and scan decoder (binary protocol).", -1, methods,
};

PyMODINIT_FUNC PyInit__fastclient(void)
{
    PyObject *mod = PyModule_Create(&module);
    if (!mod)
        return NULL;
    PyObject *type = PyType_FromSpec(&msg_spec);
    if (!type || PyModule_AddObjectRef(mod, "Message", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(mod);
        return NULL;
    }
    Py_XSETREF(OwnMessage, (PyTypeObject *)type); /* keeps the reference made */
    return mod;
}
