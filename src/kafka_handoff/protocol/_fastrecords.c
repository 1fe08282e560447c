/*
 * kafka_handoff.protocol._fastrecords: the per-record loop of the v2 record batch decoder, in C.
 *
 * This is a drop-in replacement for records.py's _records_to_objects / _records_to_columns (same arguments,
 * same return value, same errors).  Only the loop over the records of ONE batch lives here; the batch framing,
 * CRC check, decompression, control batches, transaction filtering and start_offset stay in Python.
 *
 * Error contract (records.py turns these into CorruptRecordError with topic/partition/offset):
 *   - IndexError("a record extends past the end of the data") when a read runs past the buffer -- exactly
 *     where the Python loop would raise IndexError;
 *   - records._Malformed (configured via configure()) with the same messages as the Python loop;
 *   - UnicodeDecodeError from the strict utf-8 decoding of a header key.
 * Like the Python loop, a record may be parsed across the end of its batch (the caller's end check reports
 * that), and every value is the one Python computes: varints are read as (up to) 10-byte zig-zag varlongs
 * truncated to 64 bits, and offset/timestamp sums that overflow int64 become Python ints.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#ifdef Py_T_OBJECT_EX
#define FR_OBJECT_EX Py_T_OBJECT_EX
#define FR_READONLY Py_READONLY
#else
#define FR_OBJECT_EX T_OBJECT_EX
#define FR_READONLY READONLY
#endif

#define N_FIELDS 11
enum {
    F_TOPIC, F_PARTITION, F_OFFSET, F_TIMESTAMP, F_TIMESTAMP_TYPE, F_KEY, F_VALUE, F_HEADERS,
    F_LEADER_EPOCH, F_KEY_SIZE, F_VALUE_SIZE
};
static const char *const field_names[N_FIELDS] = {
    "topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers",
    "leader_epoch", "serialized_key_size", "serialized_value_size",
};

typedef struct {
    PyObject *malformed;          /* records._Malformed */
    PyTypeObject *record_type;    /* ConsumerRecord */
    Py_ssize_t offsets[N_FIELDS]; /* slot offsets of the fields in a ConsumerRecord */
    int untrack;                  /* untrack new records from the cyclic GC */
    PyObject *s_offsets, *s_timestamps, *s_keys, *s_values, *s_headers; /* interned attribute names */
} module_state;

static module_state *get_state(PyObject *module) { return (module_state *)PyModule_GetState(module); }

/* ------------------------------------------------------------------------------------------------------ */
/* errors */

static int out_of_data(void)
{
    PyErr_SetString(PyExc_IndexError, "a record extends past the end of the data");
    return -1;
}

static int malformed(module_state *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (msg != NULL) {
        PyErr_SetObject(st->malformed, msg);
        Py_DECREF(msg);
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------------------ */
/* varints */

static int read_zz_slow(module_state *st, const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= n || p < 0)
            return out_of_data();
        uint8_t b = buf[p++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)((result >> 1) ^ (0 - (result & 1)));
            *pos = p;
            return 0;
        }
        shift += 7;
        if (shift > 63)
            return malformed(st, "varint is longer than 10 bytes");
    }
}

/* One- and two-byte varints inline, the rest out of line. */
static inline int read_zz(module_state *st, const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos, int64_t *out)
{
    Py_ssize_t p = *pos;
    if (p < n) {
        uint8_t b = buf[p];
        if (b < 0x80) {
            *out = (int64_t)((b >> 1) ^ (0 - (b & 1)));
            *pos = p + 1;
            return 0;
        }
        if (p + 1 < n && buf[p + 1] < 0x80) {
            uint32_t u = (uint32_t)(b & 0x7F) | ((uint32_t)buf[p + 1] << 7);
            *out = (int64_t)(u >> 1) ^ (0 - (int64_t)(u & 1));
            *pos = p + 2;
            return 0;
        }
    }
    return read_zz_slow(st, buf, n, pos, out);
}

/* base + delta as a Python int (a Python int sum when int64 overflows, as in the pure-Python decoder). */
static PyObject *add_i64(int64_t base, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *a = PyLong_FromLongLong(base);
    PyObject *b = a ? PyLong_FromLongLong(delta) : NULL;
    PyObject *r = b ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* ------------------------------------------------------------------------------------------------------ */
/* one record */

typedef struct {
    int64_t ts_delta, off_delta, klen, vlen;
    PyObject *key, *value, *headers; /* new references (None/() for null/empty) */
} parsed_record;

static void clear_record(parsed_record *r)
{
    Py_CLEAR(r->key);
    Py_CLEAR(r->value);
    Py_CLEAR(r->headers);
}

static PyObject *read_headers(module_state *st, const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos)
{
    int64_t count = 0;
    if (read_zz(st, buf, n, pos, &count) < 0)
        return NULL;
    if (count < 0) {
        malformed(st, "invalid negative header count %lld", (long long)count);
        return NULL;
    }
    /* A header takes at least two bytes: a count that cannot fit is read one by one (as Python does) so that
     * the same error surfaces; otherwise the tuple is allocated at once. */
    int sized = count <= (n - *pos) / 2;
    PyObject *acc = sized ? PyTuple_New((Py_ssize_t)count) : PyList_New(0);
    if (acc == NULL)
        return NULL;
    Py_ssize_t p = *pos;
    for (int64_t i = 0; i < count; i++) {
        int64_t klen = 0, vlen = 0;
        if (read_zz(st, buf, n, &p, &klen) < 0)
            goto fail;
        if (klen < 0) {
            malformed(st, "invalid header key length %lld", (long long)klen);
            goto fail;
        }
        if (klen > n - p) {
            malformed(st, "header key extends past the end of the data");
            goto fail;
        }
        PyObject *hkey = PyUnicode_DecodeUTF8((const char *)buf + p, (Py_ssize_t)klen, NULL);
        if (hkey == NULL)
            goto fail;
        p += (Py_ssize_t)klen;
        if (read_zz(st, buf, n, &p, &vlen) < 0) {
            Py_DECREF(hkey);
            goto fail;
        }
        PyObject *hvalue;
        if (vlen >= 0) {
            if (vlen > n - p) {
                Py_DECREF(hkey);
                malformed(st, "header value extends past the end of the data");
                goto fail;
            }
            hvalue = PyBytes_FromStringAndSize((const char *)buf + p, (Py_ssize_t)vlen);
            if (hvalue == NULL) {
                Py_DECREF(hkey);
                goto fail;
            }
            p += (Py_ssize_t)vlen;
        } else if (vlen == -1) {
            hvalue = Py_NewRef(Py_None);
        } else {
            Py_DECREF(hkey);
            malformed(st, "invalid header value length %lld", (long long)vlen);
            goto fail;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(hkey);
            Py_DECREF(hvalue);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, hkey);
        PyTuple_SET_ITEM(pair, 1, hvalue);
        if (sized) {
            PyTuple_SET_ITEM(acc, (Py_ssize_t)i, pair);
        } else {
            int rc = PyList_Append(acc, pair);
            Py_DECREF(pair);
            if (rc < 0)
                goto fail;
        }
    }
    *pos = p;
    if (sized)
        return acc;
    PyObject *tuple = PyList_AsTuple(acc);
    Py_DECREF(acc);
    return tuple;
fail:
    Py_DECREF(acc);
    return NULL;
}

/* Parse the record at *pos (the same reads, in the same order, as records.py's loop). */
static int parse_record(module_state *st, const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos, parsed_record *r)
{
    Py_ssize_t p = *pos;
    int64_t len = 0;
    r->key = r->value = r->headers = NULL;
    if (read_zz(st, buf, n, &p, &len) < 0)
        return -1;
    Py_ssize_t fields_start = p;
    p += 1; /* attributes (unused) */
    if (read_zz(st, buf, n, &p, &r->ts_delta) < 0 || read_zz(st, buf, n, &p, &r->off_delta) < 0 ||
        read_zz(st, buf, n, &p, &r->klen) < 0)
        return -1;
    if (r->klen >= 0) {
        if (r->klen > n - p)
            return out_of_data();
        r->key = PyBytes_FromStringAndSize((const char *)buf + p, (Py_ssize_t)r->klen);
        if (r->key == NULL)
            return -1;
        p += (Py_ssize_t)r->klen;
    } else if (r->klen == -1) {
        r->key = Py_NewRef(Py_None);
    } else {
        return malformed(st, "invalid key length %lld", (long long)r->klen);
    }
    if (read_zz(st, buf, n, &p, &r->vlen) < 0)
        goto fail;
    if (r->vlen >= 0) {
        if (r->vlen > n - p) {
            out_of_data();
            goto fail;
        }
        r->value = PyBytes_FromStringAndSize((const char *)buf + p, (Py_ssize_t)r->vlen);
        if (r->value == NULL)
            goto fail;
        p += (Py_ssize_t)r->vlen;
    } else if (r->vlen == -1) {
        r->value = Py_NewRef(Py_None);
    } else {
        malformed(st, "invalid value length %lld", (long long)r->vlen);
        goto fail;
    }
    if (p >= n) {
        out_of_data();
        goto fail;
    }
    if (buf[p] == 0) {
        r->headers = PyTuple_New(0);
        p += 1;
    } else {
        r->headers = read_headers(st, buf, n, &p);
    }
    if (r->headers == NULL)
        goto fail;
    /* The record length: Python compares positions as unbounded ints; so do we on the (error) path. */
    if ((int64_t)(p - fields_start) != len) {
        PyObject *start = PyLong_FromSsize_t(fields_start);
        PyObject *length = start ? PyLong_FromLongLong(len) : NULL;
        PyObject *rec_end = length ? PyNumber_Add(start, length) : NULL;
        if (rec_end != NULL)
            malformed(st, "record length says it ends at byte %S but its fields end at byte %zd", rec_end, p);
        Py_XDECREF(start);
        Py_XDECREF(length);
        Py_XDECREF(rec_end);
        goto fail;
    }
    *pos = p;
    return 0;
fail:
    clear_record(r);
    return -1;
}

/* ------------------------------------------------------------------------------------------------------ */
/* argument helpers */

typedef struct {
    Py_buffer view;
    Py_ssize_t pos, count;
    int64_t base_offset, base_ts;
} common_args;

static int parse_common(PyObject *const *args, common_args *a)
{
    if (PyObject_GetBuffer(args[0], &a->view, PyBUF_SIMPLE) < 0)
        return -1;
    a->pos = PyLong_AsSsize_t(args[1]);
    if (a->pos == -1 && PyErr_Occurred())
        goto fail;
    a->count = PyLong_AsSsize_t(args[2]);
    if (a->count == -1 && PyErr_Occurred())
        goto fail;
    a->base_offset = PyLong_AsLongLong(args[3]);
    if (a->base_offset == -1 && PyErr_Occurred())
        goto fail;
    a->base_ts = PyLong_AsLongLong(args[4]);
    if (a->base_ts == -1 && PyErr_Occurred())
        goto fail;
    if (a->pos < 0) {
        PyErr_SetString(PyExc_ValueError, "negative position");
        goto fail;
    }
    return 0;
fail:
    PyBuffer_Release(&a->view);
    return -1;
}

/* ------------------------------------------------------------------------------------------------------ */
/* records_to_objects(buf, pos, count, base_offset, base_ts, ts_type, epoch, topic, partition, out) -> pos */

static PyObject *records_to_objects(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    module_state *st = get_state(module);
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "records_to_objects() takes 10 arguments (%zd given)", nargs);
        return NULL;
    }
    if (st->record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastrecords.configure() was not called");
        return NULL;
    }
    PyObject *ts_type = args[5], *epoch = args[6], *topic = args[7], *partition = args[8], *out = args[9];
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out must be a list");
        return NULL;
    }
    common_args a;
    if (parse_common(args, &a) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)a.view.buf;
    Py_ssize_t n = a.view.len, p = a.pos;
    PyTypeObject *type = st->record_type;
    const Py_ssize_t *off = st->offsets;
    for (Py_ssize_t i = 0; i < a.count; i++) {
        parsed_record r;
        if (parse_record(st, buf, n, &p, &r) < 0)
            goto fail;
        PyObject *offset = add_i64(a.base_offset, r.off_delta);
        PyObject *timestamp = offset ? add_i64(a.base_ts, r.ts_delta) : NULL;
        PyObject *ksize = timestamp ? PyLong_FromLongLong(r.klen) : NULL;
        PyObject *vsize = ksize ? PyLong_FromLongLong(r.vlen) : NULL;
        PyObject *rec = vsize ? type->tp_alloc(type, 0) : NULL;
        if (rec == NULL) {
            Py_XDECREF(offset);
            Py_XDECREF(timestamp);
            Py_XDECREF(ksize);
            Py_XDECREF(vsize);
            clear_record(&r);
            goto fail;
        }
        char *base = (char *)rec;
#define SET(field, value) (*(PyObject **)(base + off[field]) = (value))
        SET(F_TOPIC, Py_NewRef(topic));
        SET(F_PARTITION, Py_NewRef(partition));
        SET(F_OFFSET, offset);
        SET(F_TIMESTAMP, timestamp);
        SET(F_TIMESTAMP_TYPE, Py_NewRef(ts_type));
        SET(F_KEY, r.key);
        SET(F_VALUE, r.value);
        SET(F_HEADERS, r.headers);
        SET(F_LEADER_EPOCH, Py_NewRef(epoch));
        SET(F_KEY_SIZE, ksize);
        SET(F_VALUE_SIZE, vsize);
#undef SET
        if (st->untrack)
            PyObject_GC_UnTrack(rec);
        int rc = PyList_Append(out, rec);
        Py_DECREF(rec);
        if (rc < 0)
            goto fail;
    }
    PyBuffer_Release(&a.view);
    return PyLong_FromSsize_t(p);
fail:
    PyBuffer_Release(&a.view);
    return NULL;
}

/* ------------------------------------------------------------------------------------------------------ */
/* records_to_columns(buf, pos, count, base_offset, base_ts, cols) -> pos */

static PyObject *get_list(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v != NULL && !PyList_Check(v)) {
        PyErr_Format(PyExc_TypeError, "RecordColumns.%U must be a list", name);
        Py_CLEAR(v);
    }
    return v;
}

static PyObject *records_to_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    module_state *st = get_state(module);
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "records_to_columns() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    if (st->malformed == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastrecords.configure() was not called");
        return NULL;
    }
    PyObject *lists[5] = {NULL, NULL, NULL, NULL, NULL};
    PyObject *names[5] = {st->s_offsets, st->s_timestamps, st->s_keys, st->s_values, st->s_headers};
    for (int j = 0; j < 5; j++) {
        lists[j] = get_list(args[5], names[j]);
        if (lists[j] == NULL) {
            for (int k = 0; k < j; k++)
                Py_DECREF(lists[k]);
            return NULL;
        }
    }
    PyObject *result = NULL;
    common_args a;
    if (parse_common(args, &a) < 0)
        goto done;
    const uint8_t *buf = (const uint8_t *)a.view.buf;
    Py_ssize_t n = a.view.len, p = a.pos;
    for (Py_ssize_t i = 0; i < a.count; i++) {
        parsed_record r;
        if (parse_record(st, buf, n, &p, &r) < 0)
            goto fail;
        PyObject *offset = add_i64(a.base_offset, r.off_delta);
        PyObject *timestamp = offset ? add_i64(a.base_ts, r.ts_delta) : NULL;
        if (timestamp == NULL) {
            Py_XDECREF(offset);
            clear_record(&r);
            goto fail;
        }
        PyObject *row[5] = {offset, timestamp, r.key, r.value, r.headers};
        int rc = 0;
        for (int j = 0; j < 5; j++) {
            if (rc == 0)
                rc = PyList_Append(lists[j], row[j]);
            Py_DECREF(row[j]);
        }
        if (rc < 0)
            goto fail;
    }
    result = PyLong_FromSsize_t(p);
fail:
    PyBuffer_Release(&a.view);
done:
    for (int j = 0; j < 5; j++)
        Py_DECREF(lists[j]);
    return result;
}

/* ------------------------------------------------------------------------------------------------------ */
/* configure(record_type, malformed, untrack) */

static PyObject *configure(PyObject *module, PyObject *args)
{
    module_state *st = get_state(module);
    PyObject *type_obj, *malformed_cls;
    int untrack = 0;
    if (!PyArg_ParseTuple(args, "O!O|p:configure", &PyType_Type, &type_obj, &malformed_cls, &untrack))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)type_obj;
    if (!PyExceptionClass_Check(malformed_cls)) {
        PyErr_SetString(PyExc_TypeError, "malformed must be an exception class");
        return NULL;
    }
    /* Records are built as object.__new__(type) + slot stores: every field must be a plain writable object
     * slot inside the instance, and instances must be plain fixed-size objects. */
    if (type->tp_itemsize != 0 || type->tp_dictoffset != 0 || type->tp_new != PyBaseObject_Type.tp_new) {
        PyErr_Format(PyExc_TypeError, "%s is not a plain __slots__ class", type->tp_name);
        return NULL;
    }
    Py_ssize_t offsets[N_FIELDS];
    for (int i = 0; i < N_FIELDS; i++) {
        PyObject *descr = PyObject_GetAttrString(type_obj, field_names[i]);
        PyMemberDef *m = NULL;
        if (descr == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return NULL;
            PyErr_Clear();
        } else {
            if (PyObject_TypeCheck(descr, &PyMemberDescr_Type))
                m = ((PyMemberDescrObject *)descr)->d_member;
            Py_DECREF(descr); /* the class keeps the descriptor (and its PyMemberDef) alive */
        }
        if (m == NULL) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, field_names[i]);
            return NULL;
        }
        if (m->type != FR_OBJECT_EX || (m->flags & FR_READONLY) || m->offset <= 0 ||
            m->offset + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a writable object slot", type->tp_name,
                         field_names[i]);
            return NULL;
        }
        offsets[i] = m->offset;
    }
    memcpy(st->offsets, offsets, sizeof offsets);
    Py_INCREF(type);
    Py_XSETREF(st->record_type, type);
    Py_INCREF(malformed_cls);
    Py_XSETREF(st->malformed, malformed_cls);
    st->untrack = untrack;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------------------ */
/* module */

static PyMethodDef methods[] = {
    {"records_to_objects", (PyCFunction)(void (*)(void))records_to_objects, METH_FASTCALL,
     "records_to_objects(buf, pos, count, base_offset, base_ts, ts_type, epoch, topic, partition, out) -> pos\n"
     "Append one batch's records to out as ConsumerRecord objects; return the position after them."},
    {"records_to_columns", (PyCFunction)(void (*)(void))records_to_columns, METH_FASTCALL,
     "records_to_columns(buf, pos, count, base_offset, base_ts, cols) -> pos\n"
     "Append one batch's records to the lists of a RecordColumns; return the position after them."},
    {"configure", configure, METH_VARARGS,
     "configure(record_type, malformed, untrack=False)\n"
     "Set the record class (a __slots__ dataclass with ConsumerRecord's fields) and the exception raised for "
     "malformed records; untrack=True keeps new records out of the cyclic garbage collector."},
    {NULL, NULL, 0, NULL},
};

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *st = get_state(m);
    Py_VISIT(st->malformed);
    Py_VISIT(st->record_type);
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state *st = get_state(m);
    Py_CLEAR(st->malformed);
    Py_CLEAR(st->record_type);
    Py_CLEAR(st->s_offsets);
    Py_CLEAR(st->s_timestamps);
    Py_CLEAR(st->s_keys);
    Py_CLEAR(st->s_values);
    Py_CLEAR(st->s_headers);
    return 0;
}

static void module_free(void *m) { module_clear((PyObject *)m); }

static int module_exec(PyObject *m)
{
    module_state *st = get_state(m);
    st->s_offsets = PyUnicode_InternFromString("offsets");
    st->s_timestamps = PyUnicode_InternFromString("timestamps");
    st->s_keys = PyUnicode_InternFromString("keys");
    st->s_values = PyUnicode_InternFromString("values");
    st->s_headers = PyUnicode_InternFromString("headers");
    if (!st->s_offsets || !st->s_timestamps || !st->s_keys || !st->s_values || !st->s_headers)
        return -1;
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafka_handoff.protocol._fastrecords",
    .m_doc = "The per-record loop of the v2 record batch decoder (see records.py).",
    .m_size = sizeof(module_state),
    .m_methods = methods,
    .m_slots = slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__fastrecords(void) { return PyModuleDef_Init(&moduledef); }
