/*
 * kafka_handoff.producer._fastencode: the producer's per-record helpers, in C (the record batch encoding
 * itself is protocol/_fastrecords.c's encode_records).
 *
 * murmur2(data) -> int   (Kafka's Utils.murmur2, a signed 32-bit result; see partitioner.py)
 * untrack(obj), track(obj) -> None   (take an object out of / back into the cyclic garbage collector)
 * make_entry(future_type, key, value, timestamp, headers, callback) -> entry
 *     (key, value, timestamp, headers, future_type(), callback), the tuple and the new future untracked;
 *     future_type None: no future (None in its place)
 * record_metadata(md_type, topic, partition, base_offset, log_append_ms, entries) -> list
 *     a batch's RecordMetadata tuples for the completion thread, untracked (see producer.py _complete)
 * append_values(entries, values, keys, start, timestamp, callback, room, overhead) -> (count, size)
 *     the bulk append of ``Producer.send_many``: from ``values[start]`` on, appends untracked entries
 *     (key, value, timestamp, None, None, callback) to the list ``entries`` while their estimated sizes
 *     (``overhead`` + key and value lengths) add up to at most ``room``; stops early at an item that is not
 *     bytes or None (the caller converts it).  ``keys`` is None or a list as long as ``values``.
 *
 * The producer untracks each record's future and entry tuple in send(): with hundreds of thousands of
 * records queued, the collector otherwise spends more time walking them than the producer spends sending.
 * They cannot be part of garbage cycles while untracked (the future only refers to its result and error;
 * anything that could make it part of a cycle -- waiters, done callbacks -- first creates its condition,
 * which puts it back under the collector's control).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Kafka's murmur2 (seed 0x9747b28c), as partitioner.murmur2 computes it. */
static PyObject *murmur2(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *data = (const uint8_t *)view.buf;
    Py_ssize_t length = view.len;
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t words = length / 4;
    for (Py_ssize_t i = 0; i < words; i++) {
        const uint8_t *b = data + 4 * i;
        uint32_t k = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = data + (length & ~(Py_ssize_t)3);
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

static PyObject *untrack(PyObject *module, PyObject *obj)
{
    if (PyObject_IS_GC(obj))
        PyObject_GC_UnTrack(obj);
    Py_RETURN_NONE;
}

static PyObject *track(PyObject *module, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && !PyObject_GC_IsTracked(obj))
        PyObject_GC_Track(obj);
    Py_RETURN_NONE;
}

static PyObject *make_entry(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "make_entry(future_type, key, value, timestamp, headers, callback) takes 6 arguments");
        return NULL;
    }
    PyObject *future;
    if (args[0] == Py_None) {
        future = Py_NewRef(Py_None);
    } else {
        future = PyObject_CallNoArgs(args[0]);
        if (future == NULL)
            return NULL;
        if (PyObject_IS_GC(future) && PyObject_GC_IsTracked(future))
            PyObject_GC_UnTrack(future);
    }
    PyObject *entry = PyTuple_New(6);
    if (entry == NULL) {
        Py_DECREF(future);
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        Py_INCREF(args[1 + i]);
        PyTuple_SET_ITEM(entry, i, args[1 + i]);
    }
    PyTuple_SET_ITEM(entry, 4, future); /* steals the new reference */
    Py_INCREF(args[5]);
    PyTuple_SET_ITEM(entry, 5, args[5]);
    if (PyObject_GC_IsTracked(entry))
        PyObject_GC_UnTrack(entry);
    return entry;
}


static PyObject *append_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "append_values(entries, values, keys, start, timestamp, callback, room, "
                                         "overhead) takes 8 arguments");
        return NULL;
    }
    PyObject *entries = args[0], *values = args[1], *keys = args[2], *timestamp = args[4], *callback = args[5];
    if (!PyList_Check(entries) || !PyList_Check(values) || (keys != Py_None && !PyList_Check(keys))) {
        PyErr_SetString(PyExc_TypeError, "append_values: entries, values (and keys) must be lists");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[3]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t room = PyLong_AsSsize_t(args[6]);
    if (room == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t overhead = PyLong_AsSsize_t(args[7]);
    if (overhead == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (keys != Py_None && PyList_GET_SIZE(keys) != n) {
        PyErr_SetString(PyExc_ValueError, "append_values: keys and values differ in length");
        return NULL;
    }
    Py_ssize_t used = 0, i = start;
    for (; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(values, i);
        PyObject *key = keys == Py_None ? Py_None : PyList_GET_ITEM(keys, i);
        Py_ssize_t size = overhead;
        if (value != Py_None) {
            if (!PyBytes_CheckExact(value))
                break;
            size += PyBytes_GET_SIZE(value);
        }
        if (key != Py_None) {
            if (!PyBytes_CheckExact(key))
                break;
            size += PyBytes_GET_SIZE(key);
        }
        if (used + size > room)
            break;
        PyObject *entry = PyTuple_New(6);
        if (entry == NULL)
            return NULL;
        PyTuple_SET_ITEM(entry, 0, Py_NewRef(key));
        PyTuple_SET_ITEM(entry, 1, Py_NewRef(value));
        PyTuple_SET_ITEM(entry, 2, Py_NewRef(timestamp));
        PyTuple_SET_ITEM(entry, 3, Py_NewRef(Py_None));
        PyTuple_SET_ITEM(entry, 4, Py_NewRef(Py_None));
        PyTuple_SET_ITEM(entry, 5, Py_NewRef(callback));
        if (PyObject_GC_IsTracked(entry))
            PyObject_GC_UnTrack(entry);
        int rc = PyList_Append(entries, entry);
        Py_DECREF(entry);
        if (rc < 0)
            return NULL;
        used += size;
    }
    return Py_BuildValue("(nn)", i - start, used);
}


/* record_metadata(md_type, topic, partition, base_offset, log_append_ms, entries) -> list of md_type tuples
   (topic, partition, offset, timestamp), untracked: offset base_offset + i (-1 when base_offset < 0),
   timestamp log_append_ms when >= 0, else the entry's own (entries[i][2]). */
static PyObject *record_metadata(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "record_metadata(md_type, topic, partition, base_offset, log_append_ms, entries) takes 6 "
                        "arguments");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_metadata: md_type must be a tuple subclass");
        return NULL;
    }
    PyTypeObject *md = (PyTypeObject *)args[0];
    PyObject *topic = args[1], *partition = args[2], *entries = args[5];
    long long base = PyLong_AsLongLong(args[3]);
    if (base == -1 && PyErr_Occurred())
        return NULL;
    long long append_ms = PyLong_AsLongLong(args[4]);
    if (append_ms == -1 && PyErr_Occurred())
        return NULL;
    if (!PyList_Check(entries)) {
        PyErr_SetString(PyExc_TypeError, "record_metadata: entries must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(entries);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    PyObject *append_ts = NULL, *minus_one = NULL;
    if (append_ms >= 0 && (append_ts = PyLong_FromLongLong(append_ms)) == NULL)
        goto error;
    if ((minus_one = PyLong_FromLong(-1)) == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ts;
        if (append_ts != NULL) {
            ts = Py_NewRef(append_ts);
        } else {
            PyObject *entry = PyList_GET_ITEM(entries, i);
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 3) {
                PyErr_SetString(PyExc_TypeError, "record_metadata: an entry must be a tuple of 3 or more items");
                goto error;
            }
            ts = Py_NewRef(PyTuple_GET_ITEM(entry, 2));
        }
        PyObject *offset = base >= 0 ? PyLong_FromLongLong(base + i) : Py_NewRef(minus_one);
        if (offset == NULL) {
            Py_DECREF(ts);
            goto error;
        }
        PyObject *t = md->tp_alloc(md, 4);
        if (t == NULL) {
            Py_DECREF(ts);
            Py_DECREF(offset);
            goto error;
        }
        PyTuple_SET_ITEM(t, 0, Py_NewRef(topic));
        PyTuple_SET_ITEM(t, 1, Py_NewRef(partition));
        PyTuple_SET_ITEM(t, 2, offset);
        PyTuple_SET_ITEM(t, 3, ts);
        if (PyObject_GC_IsTracked(t))
            PyObject_GC_UnTrack(t);
        PyList_SET_ITEM(out, i, t);
    }
    Py_XDECREF(append_ts);
    Py_DECREF(minus_one);
    return out;
error:
    Py_XDECREF(append_ts);
    Py_XDECREF(minus_one);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"make_entry", (PyCFunction)(void (*)(void))make_entry, METH_FASTCALL,
     "make_entry(future_type, key, value, timestamp, headers, callback) -> untracked entry with a new future"},
    {"append_values", (PyCFunction)(void (*)(void))append_values, METH_FASTCALL,
     "append_values(entries, values, keys, start, timestamp, callback, room, overhead) -> (count, size)"},
    {"record_metadata", (PyCFunction)(void (*)(void))record_metadata, METH_FASTCALL,
     "record_metadata(md_type, topic, partition, base_offset, log_append_ms, entries) -> untracked metadata list"},
    {"untrack", (PyCFunction)untrack, METH_O, "untrack(obj): remove obj from the cyclic garbage collector"},
    {"track", (PyCFunction)track, METH_O, "track(obj): put obj back under the cyclic garbage collector"},
    {"murmur2", (PyCFunction)murmur2, METH_O, "murmur2(data) -> Kafka's murmur2 hash as a signed 32-bit int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafka_handoff.producer._fastencode",
    .m_doc = "The producer's per-record helpers (see batch.py, future.py, partitioner.py).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__fastencode(void) { return PyModule_Create(&moduledef); }
