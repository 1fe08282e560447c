/*
 * kafka_handoff.producer._fastencode: the producer's per-record helpers, in C (the record batch encoding
 * itself is protocol/_fastrecords.c's encode_records).
 *
 * murmur2(data) -> int   (Kafka's Utils.murmur2, a signed 32-bit result; see partitioner.py)
 * fnv1a(data) -> int     (librdkafka's rd_fnv1a, unsigned; see partitioner.py)
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
#include <time.h>
#include <structmember.h>

/* Kafka's murmur2 (seed 0x9747b28c), as partitioner.murmur2 computes it (the unsigned bits). */
static inline uint32_t murmur2_raw(const uint8_t *data, Py_ssize_t length)
{
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
    return h;
}

/* librdkafka's rd_crc32: the CRC-32 of zlib (reflected polynomial 0xEDB88320), table-driven. */
static uint32_t crc32_table[256];

static void crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc32_table[i] = c;
    }
}

static inline uint32_t crc32_raw(const uint8_t *data, Py_ssize_t length)
{
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < length; i++)
        c = crc32_table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* librdkafka's rd_fnv1a: 32-bit FNV-1a, then the absolute value of it as a signed int (see partitioner.py). */
static inline uint32_t fnv1a_raw(const uint8_t *data, Py_ssize_t length)
{
    uint32_t h = 0x811C9DC5u;
    for (Py_ssize_t i = 0; i < length; i++) {
        h ^= data[i];
        h *= 0x01000193u;
    }
    if (h & 0x80000000u)
        h = 0u - h;
    return h;
}

static PyObject *murmur2(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = murmur2_raw((const uint8_t *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

static PyObject *fnv1a(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = fnv1a_raw((const uint8_t *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong((unsigned long)h);
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


/* ================================================================================ the send fast path
 *
 * set_future_type(type, pending, finished): the RecordFuture class (producer/future.py) and the PENDING /
 *     FINISHED state constants of concurrent.futures; new_future() and SendPath create RecordFutures
 *     without running __init__ (object.__new__, then the six slots set directly, as __init__ sets them).
 * new_future() -> a new pending RecordFuture, untracked by the collector (as future.new_future).
 * complete_futures(lock, futures, results, error) -> list of indices
 *     future.complete_all's loop: under ``lock`` (the module-wide creation lock), every RecordFuture
 *     without a condition that is pending gets results[i] (or, when results is None, ``error``) and
 *     FINISHED; returns the indices of the other non-None futures (the caller completes them the ordinary
 *     way).
 * complete_lazy(lock, entries, lazy) -> list of indices, or None (an entry has a callback)
 *     complete_futures for an acknowledged batch without building its metadata (see the function).
 * SendPath(producer, accumulator, slow, with_future, types=None, in_txn=None, append_slow=None): a callable with
 *     Producer.send's signature that appends the common record -- bytes-or-None key and value, no headers, no serializers, the topic's
 *     partition count known, the partition's open batch with room, the accumulator's lock free -- to the
 *     open batch in one call and returns its future (None when with_future is false: send_nowait).  Every
 *     other case, and every case in doubt, calls ``slow`` (the Python method) with the same arguments.
 *     The checks and updates are those of Producer.send/_prepare and RecordAccumulator.append's fast path;
 *     they run under the accumulator's lock, taken without blocking (if the network thread holds it, the
 *     slow path waits for it), and no Python code runs while it is held.  ``types`` (_TopicInfo,
 *     ProducerBatch, BuiltInPartitioner): their __slots__ are read directly (else through getattr).  The
 *     accumulator's lock, queues and topics, the producer's background queue, max record size,
 *     serializers, transaction manager, partitioner.ignore.keys and partitioner (its code) are taken once,
 *     at construction (they are never replaced).  ``in_txn``: TxnState.IN_TRANSACTION, required with a transactional producer
 *     (a record takes the C path only in that state, where TransactionManager.check_send passes).
 *     ``append_slow(topic, partition, entry, size)`` (optional, Producer._append_entry): called with a
 *     record that passed every check but does not fit the open batch (or found the lock busy), instead of
 *     ``slow``: the accumulator's ordinary append, without send()'s checks again.
 */

static PyTypeObject *fut_type = NULL;
static PyObject *st_pending = NULL, *st_finished = NULL;
enum { F_STATE, F_RESULT, F_EXCEPTION, F_COND, F_WAITERS, F_CALLBACKS, F_INDEX, F_TS, F_COUNT };
static Py_ssize_t fut_off[F_COUNT];
static const char *const fut_slot_names[F_COUNT] = {"_state",          "_value",          "_exception",
                                                    "_cond",           "_waiters_list",   "_callbacks_list",
                                                    "_lazy_index",     "_lazy_timestamp"};
static PyObject *empty_tuple = NULL;

#define SLOT(obj, i) (*(PyObject **)((char *)(obj) + fut_off[i]))

static PyObject *set_future_type(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "set_future_type(type, pending, finished)");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    Py_ssize_t offs[F_COUNT];
    for (int i = 0; i < F_COUNT; i++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, fut_slot_names[i]);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "set_future_type: %s is not a __slots__ member of %s",
                         fut_slot_names[i], type->tp_name);
            return NULL;
        }
        offs[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    memcpy(fut_off, offs, sizeof(offs));
    Py_XSETREF(fut_type, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(st_pending, Py_NewRef(args[1]));
    Py_XSETREF(st_finished, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* A pending RecordFuture with the slots __init__ would set, out of the collector's sight. */
static PyObject *make_future(void)
{
    if (fut_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_future_type() was not called");
        return NULL;
    }
    /* tp_alloc without object.__new__'s instance-dict set-up: the (inherited) __dict__ stays unmade until
       someone stores an attribute that is not a slot (CPython handles such objects everywhere: it is what
       PyType_GenericNew makes). */
    PyObject *f = fut_type->tp_alloc(fut_type, 0);
    if (f == NULL)
        return NULL;
    SLOT(f, F_STATE) = Py_NewRef(st_pending);
    for (int i = F_RESULT; i < F_COUNT; i++)
        SLOT(f, i) = Py_NewRef(Py_None);
    if (PyObject_IS_GC(f) && PyObject_GC_IsTracked(f))
        PyObject_GC_UnTrack(f);
    return f;
}

static PyObject *new_future(PyObject *module, PyObject *unused) { return make_future(); }

static PyObject *str_acquire, *str_release, *str_empty;

static int same_state(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (a == NULL || !PyUnicode_Check(a))
        return 0;
    return PyUnicode_Compare(a, b) == 0;
}

/* A new empty list, with ``lock`` acquired (it may block, releasing the GIL); NULL with an exception and the
 * lock not held on failure.  complete_futures and complete_lazy collect the futures they leave to Python in it. */
static PyObject *new_list_locked(PyObject *lock)
{
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    PyObject *r = PyObject_CallMethodNoArgs(lock, str_acquire);
    if (r == NULL) {
        Py_DECREF(list);
        return NULL;
    }
    Py_DECREF(r);
    return list;
}

/* The other half of new_list_locked: release ``lock`` and return ``list`` (NULL, the list dropped, when
   ``failed`` -- an exception is set -- or the release fails). */
static PyObject *release_list(PyObject *lock, PyObject *list, int failed)
{
    /* (The failure's exception is set aside while the lock's release, Python code, runs.) */
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    if (failed)
        PyErr_Fetch(&type, &value, &tb);
    PyObject *r = PyObject_CallMethodNoArgs(lock, str_release);
    if (failed) {
        if (r == NULL) { /* the release's own error wins */
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        } else {
            PyErr_Restore(type, value, tb);
        }
    }
    if (r == NULL || failed) {
        Py_XDECREF(r);
        Py_DECREF(list);
        return NULL;
    }
    Py_DECREF(r);
    return list;
}

static PyObject *complete_futures(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "complete_futures(lock, futures, results, error) takes 4 arguments");
        return NULL;
    }
    PyObject *lock = args[0], *futures = args[1], *results = args[2], *error = args[3];
    if (!PyList_Check(futures) || (results != Py_None && !PyList_Check(results))) {
        PyErr_SetString(PyExc_TypeError, "complete_futures: futures (and results) must be lists");
        return NULL;
    }
    if (results != Py_None && PyList_GET_SIZE(results) < PyList_GET_SIZE(futures)) {
        PyErr_SetString(PyExc_ValueError, "complete_futures: fewer results than futures");
        return NULL;
    }
    PyObject *slow = new_list_locked(lock);
    if (slow == NULL)
        return NULL;
    /* The lists' sizes are read again on every step: acquiring the lock may have released the GIL (or run
       Python code), and the old values the slot stores below drop could run a finalizer; either can change
       the lists. */
    int failed = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(futures); i++) {
        if (results != Py_None && i >= PyList_GET_SIZE(results)) {
            PyErr_SetString(PyExc_ValueError, "complete_futures: fewer results than futures");
            failed = 1;
            break;
        }
        PyObject *f = PyList_GET_ITEM(futures, i);
        if (f == Py_None)
            continue;
        if (fut_type != NULL && Py_IS_TYPE(f, fut_type) && SLOT(f, F_COND) == Py_None) {
            if (same_state(SLOT(f, F_STATE), st_pending)) {
                if (results != Py_None)
                    Py_SETREF(SLOT(f, F_RESULT), Py_NewRef(PyList_GET_ITEM(results, i)));
                else
                    Py_SETREF(SLOT(f, F_EXCEPTION), Py_NewRef(error));
                Py_SETREF(SLOT(f, F_STATE), Py_NewRef(st_finished));
            }
            continue;
        }
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(slow, index) < 0) {
            Py_XDECREF(index);
            failed = 1;
            break;
        }
        Py_DECREF(index);
    }
    return release_list(lock, slow, failed);
}

/* complete_lazy(lock, entries, lazy) -> list of indices: complete_futures for one acknowledged batch
   without building its RecordMetadata: under ``lock``, every pending RecordFuture without a condition among
   the entries' futures (entries[i][4]) gets ``lazy`` (the batch's shared future._LazyResult) as its value,
   its index i and its record's timestamp (entries[i][2]), and FINISHED; RecordFuture._result builds the
   metadata from them when it is first read.  Returns the indices of the other non-None futures, or None
   (having changed nothing) when an entry has a callback (entries[i][5]): callbacks need the metadata now. */
static PyObject *complete_lazy(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "complete_lazy(lock, entries, lazy) takes 3 arguments");
        return NULL;
    }
    PyObject *lock = args[0], *entries = args[1], *lazy = args[2];
    if (!PyList_Check(entries)) {
        PyErr_SetString(PyExc_TypeError, "complete_lazy: entries must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(entries);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 6) {
            PyErr_SetString(PyExc_TypeError, "complete_lazy: an entry must be a tuple of 6 or more items");
            return NULL;
        }
        if (PyTuple_GET_ITEM(e, 5) != Py_None)
            Py_RETURN_NONE;
    }
    PyObject *slow = new_list_locked(lock);
    if (slow == NULL)
        return NULL;
    /* Checked again under the lock: acquiring it may have released the GIL (or run Python code), and the
       entries may have changed meanwhile.  No Python code runs during this check. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 6) {
            PyErr_SetString(PyExc_TypeError, "complete_lazy: an entry must be a tuple of 6 or more items");
            return release_list(lock, slow, 1);
        }
        if (PyTuple_GET_ITEM(e, 5) != Py_None) {
            PyObject *released = release_list(lock, slow, 0);
            if (released == NULL)
                return NULL;
            Py_DECREF(released);
            Py_RETURN_NONE;
        }
    }
    /* The size is read on every step: an old value a slot store below drops could run a finalizer. */
    int failed = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries) && !failed; i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 6) {
            PyErr_SetString(PyExc_TypeError, "complete_lazy: an entry must be a tuple of 6 or more items");
            failed = 1;
            break;
        }
        PyObject *f = PyTuple_GET_ITEM(e, 4);
        if (f == Py_None)
            continue;
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL) {
            failed = 1;
            break;
        }
        if (fut_type != NULL && Py_IS_TYPE(f, fut_type) && SLOT(f, F_COND) == Py_None) {
            if (same_state(SLOT(f, F_STATE), st_pending)) {
                Py_SETREF(SLOT(f, F_RESULT), Py_NewRef(lazy));
                Py_SETREF(SLOT(f, F_INDEX), Py_NewRef(index));
                Py_SETREF(SLOT(f, F_TS), Py_NewRef(PyTuple_GET_ITEM(e, 2)));
                Py_SETREF(SLOT(f, F_STATE), Py_NewRef(st_finished));
            }
        } else if (PyList_Append(slow, index) < 0) {
            failed = 1;
        }
        Py_DECREF(index);
    }
    return release_list(lock, slow, failed);
}

/* ---------------------------------------------------------------- SendPath */
enum { A_TOPIC, A_VALUE, A_KEY, A_PARTITION, A_HEADERS, A_TIMESTAMP, A_CALLBACK, A_COUNT };
static PyObject *arg_names[A_COUNT];
static const char *const arg_cnames[A_COUNT] = {"topic",   "value",     "key",     "partition",
                                                "headers", "timestamp", "callback"};
/* interned attribute names */
static PyObject *n_closed, *n_txn, *n_fatal, *n_unreported, *n_background, *n_partition_counts,
    *n_key_serializer, *n_value_serializer, *n_max_record_size, *n_ignore_keys, *n_partitioner_code, *n_lock, *n_topics,
    *n_batches, *n_open_batch, *n_partitioner, *n_num_partitions, *n_tps, *n_closed_attr, *n_size, *n_limit,
    *n_entries, *n_produced, *n_switch_bytes, *n_state;

/* Where an attribute of a __slots__ class lives, to read it without the attribute machinery (~10x faster);
   objects of another type go through PyObject_GetAttr/SetAttr. */
typedef struct {
    PyTypeObject *type; /* borrowed from SendPathObject.types; NULL: always use the attribute machinery */
    Py_ssize_t off;
    PyObject *name;
} slotref;

static void resolve_slot(PyTypeObject *type, PyObject *name, slotref *ref)
{
    ref->type = NULL;
    ref->off = 0;
    ref->name = name;
    if (type == NULL)
        return;
    PyObject *descr = _PyType_Lookup(type, name); /* borrowed */
    if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
        ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX) {
        ref->type = type;
        ref->off = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
}

/* New reference, or NULL with an exception. */
static inline PyObject *get_slot(PyObject *obj, const slotref *ref)
{
    if (Py_TYPE(obj) == ref->type) {
        PyObject *v = *(PyObject **)((char *)obj + ref->off);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, ref->name);
}

static inline int set_slot(PyObject *obj, const slotref *ref, PyObject *value)
{
    if (Py_TYPE(obj) == ref->type) {
        PyObject **p = (PyObject **)((char *)obj + ref->off);
        PyObject *old = *p;
        *p = Py_NewRef(value);
        Py_XDECREF(old); /* an int: no code runs */
        return 0;
    }
    return PyObject_SetAttr(obj, ref->name, value);
}

enum {
    S_OPEN_BATCH, S_PARTITIONER, S_NUM_PARTITIONS, S_TPS, /* _TopicInfo */
    S_CLOSED, S_SIZE, S_LIMIT, S_ENTRIES,                /* ProducerBatch */
    S_PRODUCED, S_SWITCH_BYTES,                          /* BuiltInPartitioner */
    S_COUNT
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *pdict;      /* the producer's __dict__ */
    PyObject *adict;      /* the accumulator's __dict__ */
    PyObject *slow;       /* the Python method (bound) */
    PyObject *append_slow; /* Producer._append_entry (bound) or NULL: see sendpath_vectorcall */
    PyObject *lock;       /* the accumulator's _lock, _topics, _batches (never replaced) */
    PyObject *topics;
    PyObject *batches;
    PyObject *background; /* the producer's _background queue (never replaced) */
    PyObject *acquire;    /* bound methods: lock.acquire, lock.release, background.empty */
    PyObject *release;
    PyObject *empty;
    PyObject *txn;        /* the TransactionManager and TxnState.IN_TRANSACTION, or NULL (no transactions) */
    PyObject *in_txn;
    int serializers;      /* a key or value serializer is configured: always the Python path */
    PyObject *types;      /* (_TopicInfo, ProducerBatch, BuiltInPartitioner) or None */
    long long max_record_size;
    long long last_ms;    /* the last "now" timestamp and its int object (records of one ms share it) */
    PyObject *last_ts;
    int ignore_keys;
    int partitioner;      /* Producer._partitioner_code (partitioner.partitioner_code), 0x10 without it */
    int with_future;
    slotref slots[S_COUNT];
} SendPathObject;

static int sendpath_traverse(SendPathObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->pdict);
    Py_VISIT(self->adict);
    Py_VISIT(self->slow);
    Py_VISIT(self->append_slow);
    Py_VISIT(self->lock);
    Py_VISIT(self->topics);
    Py_VISIT(self->batches);
    Py_VISIT(self->background);
    Py_VISIT(self->types);
    Py_VISIT(self->last_ts);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->empty);
    Py_VISIT(self->txn);
    Py_VISIT(self->in_txn);
    return 0;
}

static int sendpath_clear(SendPathObject *self)
{
    Py_CLEAR(self->pdict);
    Py_CLEAR(self->adict);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->append_slow);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->topics);
    Py_CLEAR(self->batches);
    Py_CLEAR(self->background);
    Py_CLEAR(self->types);
    Py_CLEAR(self->last_ts);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->empty);
    Py_CLEAR(self->txn);
    Py_CLEAR(self->in_txn);
    for (int i = 0; i < S_COUNT; i++)
        self->slots[i].type = NULL;
    return 0;
}

static void sendpath_dealloc(SendPathObject *self)
{
    PyObject_GC_UnTrack(self);
    sendpath_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A dict item (borrowed; NULL without an exception when absent). */
static inline PyObject *item(PyObject *dict, PyObject *name) { return PyDict_GetItemWithError(dict, name); }

/* A slot (or attribute) as a C long long; -1 with an exception on error. */
static int long_slot(PyObject *obj, const slotref *ref, long long *out)
{
    PyObject *v = get_slot(obj, ref);
    if (v == NULL)
        return -1;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    Py_DECREF(v);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "SendPath: an accumulator size is out of range");
        return -1;
    }
    return 0;
}

static int set_long_slot(PyObject *obj, const slotref *ref, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int rc = set_slot(obj, ref, v);
    Py_DECREF(v);
    return rc;
}

static long long now_ms(void)
{
    struct timespec ts;
#if defined(_WIN32)
    timespec_get(&ts, TIME_UTC); /* C11; MSVC has no clock_gettime */
#else
    clock_gettime(CLOCK_REALTIME, &ts);
#endif
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The fast path proper.  Returns 1 with *out set (the future or None), 0 for "take the slow path" (no
   exception), 2 for "the record passed every check and its entry is made, but it does not fit the open batch
   (or the lock is busy)": *out is the entry, *part_out its partition (-1: sticky), *size_out its size
   estimate (only with append_slow); -1 on error. */
static int sendpath_fast(SendPathObject *self, PyObject **a, PyObject **out, long *part_out,
                         Py_ssize_t *size_out)
{
    PyObject *topic = a[A_TOPIC];
    PyObject *value = a[A_VALUE] ? a[A_VALUE] : Py_None;
    PyObject *key = a[A_KEY] ? a[A_KEY] : Py_None;
    PyObject *partition = a[A_PARTITION] ? a[A_PARTITION] : Py_None;
    PyObject *timestamp = a[A_TIMESTAMP] ? a[A_TIMESTAMP] : Py_None;
    PyObject *callback = a[A_CALLBACK] ? a[A_CALLBACK] : Py_None;
    const slotref *sl = self->slots;
    if (topic == NULL || !PyUnicode_CheckExact(topic))
        return 0;
    if (a[A_HEADERS] != NULL && a[A_HEADERS] != Py_None)
        return 0;
    Py_ssize_t size = 12; /* RECORD_OVERHEAD_ESTIMATE (batch.py) */
    if (value != Py_None) {
        if (!PyBytes_CheckExact(value))
            return 0;
        size += PyBytes_GET_SIZE(value);
    }
    if (key != Py_None) {
        if (!PyBytes_CheckExact(key))
            return 0;
        size += PyBytes_GET_SIZE(key);
    }
    if (timestamp != Py_None) {
        if (!PyLong_CheckExact(timestamp))
            return 0;
        int overflow = 0;
        long long ts = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
        if (ts == -1 && PyErr_Occurred())
            return -1;
        if (overflow || ts < 0)
            return 0;
    }
    if (partition != Py_None && !PyLong_CheckExact(partition))
        return 0;
    if (size > self->max_record_size || self->serializers)
        return 0;

    /* The producer's state (Producer.send's checks and _prepare's). */
    PyObject *d = self->pdict;
    if (item(d, n_closed) != Py_False || item(d, n_fatal) != Py_None ||
        (!self->with_future && item(d, n_unreported) != Py_None))
        return PyErr_Occurred() ? -1 : 0;
    if (self->txn != NULL) { /* TransactionManager.check_send passes only in this state */
        PyObject *state = PyObject_GetAttr(self->txn, n_state);
        if (state == NULL)
            return -1;
        Py_DECREF(state);
        if (state != self->in_txn)
            return 0;
    }
    PyObject *counts = item(d, n_partition_counts);
    if (counts == NULL || !PyDict_Check(counts))
        return PyErr_Occurred() ? -1 : 0;
    PyObject *count_obj = item(counts, topic);
    if (count_obj == NULL || !PyLong_CheckExact(count_obj))
        return PyErr_Occurred() ? -1 : 0;
    long num_partitions = PyLong_AsLong(count_obj);
    if (num_partitions == -1 && PyErr_Occurred())
        return -1;
    if (num_partitions <= 0)
        return 0;
    long part = -1; /* -1: the sticky partition */
    if (partition != Py_None) {
        int overflow = 0;
        part = PyLong_AsLongAndOverflow(partition, &overflow);
        if (part == -1 && PyErr_Occurred())
            return -1;
        if (overflow || part < 0 || part >= num_partitions)
            return 0; /* the slow path raises the error */
    } else if (!self->ignore_keys) {
        /* partitioner.key_partitioner's choice: 0x10 no key is sticky, 0x20 an empty key too. */
        int code = self->partitioner;
        const uint8_t *kb = (const uint8_t *)"";
        Py_ssize_t kn = 0;
        if (key != Py_None) {
            kb = (const uint8_t *)PyBytes_AS_STRING(key);
            kn = PyBytes_GET_SIZE(key);
        }
        if ((key == Py_None && (code & 0x10)) || (kn == 0 && (code & 0x20))) {
            part = -1;
        } else {
            switch (code & 0xF) {
            case 0:
                part = (long)((murmur2_raw(kb, kn) & 0x7FFFFFFFu) % (uint32_t)num_partitions);
                break;
            case 1:
                part = (long)(crc32_raw(kb, kn) % (uint32_t)num_partitions);
                break;
            case 2:
                part = (long)(fnv1a_raw(kb, kn) % (uint32_t)num_partitions);
                break;
            default:
                return 0; /* random: the Python path draws it */
            }
        }
    }
    PyObject *r = PyObject_CallNoArgs(self->empty);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    if (r != Py_True)
        return 0;

    /* The entry (and its future), made before the lock is taken: allocating may run the collector. */
    PyObject *future = Py_None;
    if (self->with_future) {
        future = make_future();
        if (future == NULL)
            return -1;
    } else {
        Py_INCREF(future);
    }
    PyObject *ts_obj;
    if (timestamp != Py_None) {
        ts_obj = Py_NewRef(timestamp);
    } else {
        long long now = now_ms();
        if (self->last_ts == NULL || now != self->last_ms) {
            PyObject *fresh = PyLong_FromLongLong(now);
            if (fresh == NULL) {
                Py_DECREF(future);
                return -1;
            }
            Py_XSETREF(self->last_ts, fresh);
            self->last_ms = now;
        }
        ts_obj = Py_NewRef(self->last_ts);
    }
    PyObject *entry = PyTuple_New(6);
    if (entry == NULL) {
        Py_DECREF(future);
        Py_DECREF(ts_obj);
        return -1;
    }
    PyTuple_SET_ITEM(entry, 0, Py_NewRef(key));
    PyTuple_SET_ITEM(entry, 1, Py_NewRef(value));
    PyTuple_SET_ITEM(entry, 2, ts_obj);
    PyTuple_SET_ITEM(entry, 3, Py_NewRef(Py_None));
    PyTuple_SET_ITEM(entry, 4, Py_NewRef(future));
    PyTuple_SET_ITEM(entry, 5, Py_NewRef(callback));
    if (PyObject_GC_IsTracked(entry))
        PyObject_GC_UnTrack(entry);

    /* The accumulator's lock, without blocking. */
    r = PyObject_CallOneArg(self->acquire, Py_False);
    if (r == NULL) {
        Py_DECREF(entry);
        Py_DECREF(future);
        return -1;
    }
    Py_DECREF(r);
    if (r != Py_True) {
        Py_DECREF(future); /* the entry holds it */
        if (self->append_slow != NULL) {
            *out = entry;
            *part_out = part;
            *size_out = size;
            return 2;
        }
        Py_DECREF(entry);
        return 0;
    }
    /* Under the lock: RecordAccumulator.append's fast path.  No Python code runs until the release. */
    int rc = 0;
    PyObject *last = NULL, *pt = NULL, *entries = NULL, *v;
    PyObject *info = item(self->topics, topic);
    if (info == NULL || item(self->adict, n_closed) != Py_False) {
        rc = PyErr_Occurred() ? -1 : 0;
        goto unlock;
    }
    long long bsize, blimit, produced = 0, switch_bytes = 0;
    if (part < 0) {
        last = get_slot(info, &sl[S_OPEN_BATCH]);
        if (last == NULL) {
            rc = -1;
            goto unlock;
        }
        if (last == Py_None)
            goto unlock;
    } else {
        long long info_parts;
        if (long_slot(info, &sl[S_NUM_PARTITIONS], &info_parts) < 0) {
            rc = -1;
            goto unlock;
        }
        if (part >= info_parts)
            goto unlock;
        PyObject *tps = get_slot(info, &sl[S_TPS]);
        if (tps == NULL) {
            rc = -1;
            goto unlock;
        }
        if (!PyTuple_Check(tps) || PyTuple_GET_SIZE(tps) <= part) {
            Py_DECREF(tps);
            goto unlock;
        }
        PyObject *dq = item(self->batches, PyTuple_GET_ITEM(tps, part));
        Py_DECREF(tps);
        if (dq == NULL) {
            rc = PyErr_Occurred() ? -1 : 0;
            goto unlock;
        }
        Py_ssize_t dq_len = PyObject_Length(dq);
        if (dq_len < 0) {
            rc = -1;
            goto unlock;
        }
        if (dq_len == 0)
            goto unlock;
        last = PySequence_GetItem(dq, dq_len - 1);
        if (last == NULL) {
            rc = -1;
            goto unlock;
        }
    }
    v = get_slot(last, &sl[S_CLOSED]);
    if (v == NULL) {
        rc = -1;
        goto unlock;
    }
    Py_DECREF(v);
    if (v != Py_False)
        goto unlock;
    if (long_slot(last, &sl[S_SIZE], &bsize) < 0 || long_slot(last, &sl[S_LIMIT], &blimit) < 0) {
        rc = -1;
        goto unlock;
    }
    if (bsize + size > blimit)
        goto unlock;
    if (part < 0) {
        pt = get_slot(info, &sl[S_PARTITIONER]);
        if (pt == NULL || long_slot(pt, &sl[S_PRODUCED], &produced) < 0 ||
            long_slot(pt, &sl[S_SWITCH_BYTES], &switch_bytes) < 0) {
            rc = -1;
            goto unlock;
        }
        if (produced + size >= switch_bytes)
            goto unlock;
    }
    entries = get_slot(last, &sl[S_ENTRIES]);
    if (entries == NULL) {
        rc = -1;
        goto unlock;
    }
    if (!PyList_CheckExact(entries))
        goto unlock;
    if (PyList_Append(entries, entry) < 0 || set_long_slot(last, &sl[S_SIZE], bsize + size) < 0 ||
        (pt != NULL && set_long_slot(pt, &sl[S_PRODUCED], produced + size) < 0)) {
        rc = -1; /* (an allocation failure: the record may be in the batch; the caller sees the error) */
        goto unlock;
    }
    rc = 1;
unlock:
    Py_XDECREF(entries);
    Py_XDECREF(pt);
    Py_XDECREF(last);
    {
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        r = PyObject_CallNoArgs(self->release);
        if (r == NULL) {
            Py_XDECREF(exc_type);
            Py_XDECREF(exc_value);
            Py_XDECREF(exc_tb);
            Py_DECREF(entry);
            Py_DECREF(future);
            return -1;
        }
        Py_DECREF(r);
        PyErr_Restore(exc_type, exc_value, exc_tb);
    }
    if (rc == 1) {
        Py_DECREF(entry);
        *out = future;
        return 1;
    }
    Py_DECREF(future); /* the entry holds it */
    if (rc == 0 && self->append_slow != NULL) {
        *out = entry;
        *part_out = part;
        *size_out = size;
        return 2;
    }
    Py_DECREF(entry);
    return rc;
}

static PyObject *sendpath_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SendPathObject *self = (SendPathObject *)self_;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *a[A_COUNT] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (nargs <= A_COUNT) {
        for (Py_ssize_t i = 0; i < nargs; i++)
            a[i] = args[i];
        Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
        int ok = 1;
        for (Py_ssize_t j = 0; j < nkw && ok; j++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, j);
            int idx = -1;
            for (int k = 0; k < A_COUNT; k++) {
                if (name == arg_names[k]) {
                    idx = k;
                    break;
                }
            }
            if (idx < 0) {
                for (int k = 0; k < A_COUNT; k++) {
                    if (PyUnicode_Check(name) && PyUnicode_Compare(name, arg_names[k]) == 0) {
                        idx = k;
                        break;
                    }
                }
            }
            if (idx < 0 || a[idx] != NULL)
                ok = 0;
            else
                a[idx] = args[nargs + j];
        }
        if (ok) {
            PyObject *out = NULL;
            long part = -1;
            Py_ssize_t size = 0;
            int rc = sendpath_fast(self, a, &out, &part, &size);
            if (rc == 1)
                return out;
            if (rc < 0)
                return NULL;
            if (rc == 2) {
                /* Checked and made: the accumulator's ordinary append takes the entry (a new or full
                   batch, or the lock busy), without send()'s Python checks again. */
                PyObject *p = part < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(part);
                PyObject *sz = PyLong_FromSsize_t(size);
                PyObject *res = NULL;
                if (p != NULL && sz != NULL) {
                    PyObject *cargs[4] = {a[A_TOPIC], p, out, sz};
                    res = PyObject_Vectorcall(self->append_slow, cargs, 4, NULL);
                }
                Py_XDECREF(p);
                Py_XDECREF(sz);
                Py_DECREF(out);
                return res;
            }
        }
    }
    return PyObject_Vectorcall(self->slow, args, nargs, kwnames);
}

static PyObject *sendpath_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *producer, *accumulator, *slow, *types = Py_None, *in_txn = Py_None, *append_slow = Py_None;
    int with_future;
    if (!PyArg_ParseTuple(args, "OOOp|OOO:SendPath", &producer, &accumulator, &slow, &with_future, &types,
                          &in_txn, &append_slow))
        return NULL;
    if (with_future && fut_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SendPath: set_future_type() was not called");
        return NULL;
    }
    if (types != Py_None && (!PyTuple_Check(types) || PyTuple_GET_SIZE(types) != 3 ||
                             !PyType_Check(PyTuple_GET_ITEM(types, 0)) ||
                             !PyType_Check(PyTuple_GET_ITEM(types, 1)) ||
                             !PyType_Check(PyTuple_GET_ITEM(types, 2)))) {
        PyErr_SetString(PyExc_TypeError,
                        "SendPath: types must be (_TopicInfo, ProducerBatch, BuiltInPartitioner) or None");
        return NULL;
    }
    SendPathObject *self = (SendPathObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = sendpath_vectorcall;
    self->slow = Py_NewRef(slow);
    self->append_slow = append_slow != Py_None ? Py_NewRef(append_slow) : NULL;
    self->types = Py_NewRef(types);
    self->with_future = with_future;
    if ((self->pdict = PyObject_GenericGetDict(producer, NULL)) == NULL ||
        (self->adict = PyObject_GenericGetDict(accumulator, NULL)) == NULL)
        goto error;
    PyObject *lock = item(self->adict, n_lock), *topics = item(self->adict, n_topics);
    PyObject *batches = item(self->adict, n_batches), *background = item(self->pdict, n_background);
    PyObject *limit = item(self->pdict, n_max_record_size), *ignore = item(self->pdict, n_ignore_keys);
    PyObject *txn = item(self->pdict, n_txn), *ks = item(self->pdict, n_key_serializer);
    PyObject *vs = item(self->pdict, n_value_serializer);
    if (lock == NULL || topics == NULL || batches == NULL || background == NULL || limit == NULL ||
        ignore == NULL || txn == NULL || ks == NULL || vs == NULL || !PyDict_Check(topics) ||
        !PyDict_Check(batches) || (txn != Py_None && in_txn == Py_None)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "SendPath: not a Producer and its RecordAccumulator");
        goto error;
    }
    self->serializers = ks != Py_None || vs != Py_None;
    if (txn != Py_None) {
        self->txn = Py_NewRef(txn);
        self->in_txn = Py_NewRef(in_txn);
    }
    self->lock = Py_NewRef(lock);
    self->topics = Py_NewRef(topics);
    self->batches = Py_NewRef(batches);
    self->background = Py_NewRef(background);
    if ((self->acquire = PyObject_GetAttr(lock, str_acquire)) == NULL ||
        (self->release = PyObject_GetAttr(lock, str_release)) == NULL ||
        (self->empty = PyObject_GetAttr(background, str_empty)) == NULL)
        goto error;
    self->max_record_size = PyLong_AsLongLong(limit);
    if (self->max_record_size == -1 && PyErr_Occurred())
        goto error;
    if ((self->ignore_keys = PyObject_IsTrue(ignore)) < 0)
        goto error;
    PyObject *code = item(self->pdict, n_partitioner_code);
    self->partitioner = 0x10; /* Java's default (murmur2_random) when the producer has no code */
    if (code != NULL) {
        long c = PyLong_AsLong(code);
        if (c == -1 && PyErr_Occurred())
            goto error;
        self->partitioner = (int)c;
    } else if (PyErr_Occurred()) {
        goto error;
    }
    PyTypeObject *info_t = NULL, *batch_t = NULL, *pt_t = NULL;
    if (types != Py_None) {
        info_t = (PyTypeObject *)PyTuple_GET_ITEM(types, 0);
        batch_t = (PyTypeObject *)PyTuple_GET_ITEM(types, 1);
        pt_t = (PyTypeObject *)PyTuple_GET_ITEM(types, 2);
    }
    resolve_slot(info_t, n_open_batch, &self->slots[S_OPEN_BATCH]);
    resolve_slot(info_t, n_partitioner, &self->slots[S_PARTITIONER]);
    resolve_slot(info_t, n_num_partitions, &self->slots[S_NUM_PARTITIONS]);
    resolve_slot(info_t, n_tps, &self->slots[S_TPS]);
    resolve_slot(batch_t, n_closed_attr, &self->slots[S_CLOSED]);
    resolve_slot(batch_t, n_size, &self->slots[S_SIZE]);
    resolve_slot(batch_t, n_limit, &self->slots[S_LIMIT]);
    resolve_slot(batch_t, n_entries, &self->slots[S_ENTRIES]);
    resolve_slot(pt_t, n_produced, &self->slots[S_PRODUCED]);
    resolve_slot(pt_t, n_switch_bytes, &self->slots[S_SWITCH_BYTES]);
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

/* What introspection sees (inspect.signature follows __wrapped__, help() reads __doc__): the Python method. */
static PyObject *sendpath_wrapped(SendPathObject *self, void *closure) { return Py_NewRef(self->slow); }

static PyObject *sendpath_slow_attr(SendPathObject *self, void *closure)
{
    return PyObject_GetAttrString(self->slow, (const char *)closure);
}

static PyGetSetDef sendpath_getset[] = {
    {"__wrapped__", (getter)sendpath_wrapped, NULL, "the Python method this fast path stands for", NULL},
    {"__doc__", (getter)sendpath_slow_attr, NULL, NULL, "__doc__"},
    {"__name__", (getter)sendpath_slow_attr, NULL, NULL, "__name__"},
    {"__qualname__", (getter)sendpath_slow_attr, NULL, NULL, "__qualname__"},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SendPathType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kafka_handoff.producer._fastencode.SendPath",
    .tp_basicsize = sizeof(SendPathObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "SendPath(producer, accumulator, slow, with_future, types=None, in_txn=None, append_slow=None)",
    .tp_new = sendpath_new,
    .tp_traverse = (traverseproc)sendpath_traverse,
    .tp_clear = (inquiry)sendpath_clear,
    .tp_dealloc = (destructor)sendpath_dealloc,
    .tp_vectorcall_offset = offsetof(SendPathObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getset = sendpath_getset,
};

static PyMethodDef methods[] = {
    {"make_entry", (PyCFunction)(void (*)(void))make_entry, METH_FASTCALL,
     "make_entry(future_type, key, value, timestamp, headers, callback) -> untracked entry with a new future"},
    {"append_values", (PyCFunction)(void (*)(void))append_values, METH_FASTCALL,
     "append_values(entries, values, keys, start, timestamp, callback, room, overhead) -> (count, size)"},
    {"record_metadata", (PyCFunction)(void (*)(void))record_metadata, METH_FASTCALL,
     "record_metadata(md_type, topic, partition, base_offset, log_append_ms, entries) -> untracked metadata list"},
    {"untrack", (PyCFunction)untrack, METH_O, "untrack(obj): remove obj from the cyclic garbage collector"},
    {"track", (PyCFunction)track, METH_O, "track(obj): put obj back under the cyclic garbage collector"},
    {"set_future_type", (PyCFunction)(void (*)(void))set_future_type, METH_FASTCALL,
     "set_future_type(RecordFuture, PENDING, FINISHED): the future class SendPath and new_future create"},
    {"new_future", (PyCFunction)new_future, METH_NOARGS, "new_future() -> a pending RecordFuture, untracked"},
    {"complete_lazy", (PyCFunction)(void (*)(void))complete_lazy, METH_FASTCALL,
     "complete_lazy(lock, entries, lazy) -> indices of the futures left to complete"},
    {"complete_futures", (PyCFunction)(void (*)(void))complete_futures, METH_FASTCALL,
     "complete_futures(lock, futures, results, error) -> indices of the futures left to complete"},
    {"murmur2", (PyCFunction)murmur2, METH_O, "murmur2(data) -> Kafka's murmur2 hash as a signed 32-bit int"},
    {"fnv1a", (PyCFunction)fnv1a, METH_O, "fnv1a(data) -> librdkafka's FNV-1a hash (unsigned)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafka_handoff.producer._fastencode",
    .m_doc = "The producer's per-record helpers (see batch.py, future.py, partitioner.py).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__fastencode(void)
{
#define INTERN(var, text)                                                                                        \
    if ((var = PyUnicode_InternFromString(text)) == NULL)                                                        \
        return NULL;
    crc32_init();
    INTERN(str_acquire, "acquire");
    INTERN(str_release, "release");
    INTERN(str_empty, "empty");
    INTERN(n_closed, "_closed");
    INTERN(n_txn, "_txn");
    INTERN(n_fatal, "_fatal");
    INTERN(n_unreported, "_unreported");
    INTERN(n_background, "_background");
    INTERN(n_partition_counts, "_partition_counts");
    INTERN(n_key_serializer, "_key_serializer");
    INTERN(n_value_serializer, "_value_serializer");
    INTERN(n_max_record_size, "_max_record_size");
    INTERN(n_ignore_keys, "_ignore_keys");
    INTERN(n_partitioner_code, "_partitioner_code");
    INTERN(n_lock, "_lock");
    INTERN(n_topics, "_topics");
    INTERN(n_batches, "_batches");
    INTERN(n_open_batch, "open_batch");
    INTERN(n_partitioner, "partitioner");
    INTERN(n_num_partitions, "num_partitions");
    INTERN(n_tps, "tps");
    INTERN(n_closed_attr, "closed");
    INTERN(n_size, "size");
    INTERN(n_limit, "limit");
    INTERN(n_entries, "entries");
    INTERN(n_produced, "produced");
    INTERN(n_switch_bytes, "switch_bytes");
    INTERN(n_state, "state");
    for (int i = 0; i < A_COUNT; i++)
        INTERN(arg_names[i], arg_cnames[i]);
#undef INTERN
    if ((empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    if (PyType_Ready(&SendPathType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&moduledef);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "SendPath", (PyObject *)&SendPathType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
