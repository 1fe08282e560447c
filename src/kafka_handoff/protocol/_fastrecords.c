/*
 * kafka_handoff.protocol._fastrecords: the per-record loops of the v2 record batch decoder and encoder, in C.
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

/* int64 addition that reports overflow (1) instead of wrapping: the compiler builtin where there is one
   (GCC, Clang), portable comparisons elsewhere (MSVC).  -DKAFKA_HANDOFF_PORTABLE_C forces the portable
   code (make test-portable-c builds that way); the module's OVERFLOW_CHECKS says which one was compiled. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(KAFKA_HANDOFF_PORTABLE_C)
#define KH_OVERFLOW_CHECKS "builtin"
Py_LOCAL_INLINE(int) kh_add_overflow_i64(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}
#else
#define KH_OVERFLOW_CHECKS "portable"
Py_LOCAL_INLINE(int) kh_add_overflow_i64(int64_t a, int64_t b, int64_t *out)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return 1;
    *out = a + b;
    return 0;
}
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
    if (!kh_add_overflow_i64(base, delta, &sum))
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

/* The bytes of a key or value whose length ``len`` was just read, at *p: *out is NULL for -1 (null), else
   the data, and *p moves past it.  -1 with an exception for another negative length (malformed) or data that
   runs past n (IndexError) -- the checks of records.py's loop, in its order. */
static inline int take_bytes(module_state *st, const uint8_t *buf, Py_ssize_t n, Py_ssize_t *p, int64_t len,
                             const char *what, const uint8_t **out)
{
    *out = NULL;
    if (len >= 0) {
        if (len > n - *p)
            return out_of_data();
        *out = buf + *p;
        *p += (Py_ssize_t)len;
        return 0;
    }
    if (len != -1)
        return malformed(st, "invalid %s length %lld", what, (long long)len);
    return 0;
}

static inline PyObject *new_bytes_or_none(const uint8_t *data, int64_t len)
{
    return data != NULL ? PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)len) : Py_NewRef(Py_None);
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
    const uint8_t *data;
    if (take_bytes(st, buf, n, &p, r->klen, "key", &data) < 0 ||
        (r->key = new_bytes_or_none(data, r->klen)) == NULL)
        return -1;
    if (read_zz(st, buf, n, &p, &r->vlen) < 0 || take_bytes(st, buf, n, &p, r->vlen, "value", &data) < 0 ||
        (r->value = new_bytes_or_none(data, r->vlen)) == NULL)
        goto fail;
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

/* The checks every decoding entry point starts with: its argument count, and configure() having run (it sets
   the record type and the malformed exception together). */
static int check_call(module_state *st, const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, expected, nargs);
        return -1;
    }
    if (st->record_type == NULL || st->malformed == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastrecords.configure() was not called");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* records_to_objects(buf, pos, count, base_offset, base_ts, ts_type, epoch, topic, partition, out) -> pos */

static PyObject *records_to_objects(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    module_state *st = get_state(module);
    if (check_call(st, "records_to_objects", nargs, 10) < 0)
        return NULL;
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
    if (check_call(st, "records_to_columns", nargs, 6) < 0)
        return NULL;
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
/* ColumnBuilder: records decoded straight into Arrow-layout buffers (no Python object per record)
 *
 * Per row: int64 offset and timestamp; key and value as Arrow binary (validity bit, int32 end offset, data
 * bytes); headers as an Arrow list (int32 end offset into the header rows).  Per header row: key as Arrow
 * string (int32 end offset, utf-8 data), value as Arrow binary (validity bit, int32 end offset, data).
 * Offsets buffers start with a 0.  All buffers are native-endian (Arrow's little-endian on the platforms
 * pyarrow supports).  The Python fallback (records._PyColumnBuilder) builds the same bytes. */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} gbuf;

static int gb_reserve(gbuf *b, Py_ssize_t extra)
{
    if (extra <= b->cap - b->len)
        return 0;
    if (extra > PY_SSIZE_T_MAX / 2 - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t cap = b->cap ? b->cap : 64;
    while (cap - b->len < extra)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int gb_put(gbuf *b, const void *data, Py_ssize_t n)
{
    if (gb_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->p + b->len, data, (size_t)n);
    b->len += n;
    return 0;
}

static inline int gb_i64(gbuf *b, int64_t v) { return gb_put(b, &v, 8); }
static inline int gb_i32(gbuf *b, int32_t v) { return gb_put(b, &v, 4); }

/* Set validity bit i (the buffer covers at least i bits after the call). */
static inline int gb_bit(gbuf *b, Py_ssize_t i, int valid)
{
    Py_ssize_t byte = i >> 3;
    if (byte >= b->len) {
        if (gb_reserve(b, byte + 1 - b->len) < 0)
            return -1;
        memset(b->p + b->len, 0, (size_t)(byte + 1 - b->len));
        b->len = byte + 1;
    }
    uint8_t mask = (uint8_t)(1u << (i & 7));
    if (valid)
        b->p[byte] |= (char)mask;
    else
        b->p[byte] &= (char)~mask;
    return 0;
}

enum { B_OFFSETS, B_TIMESTAMPS, B_KVALID, B_KOFF, B_KDATA, B_VVALID, B_VOFF, B_VDATA, B_HOFF,
       B_HKOFF, B_HKDATA, B_HVVALID, B_HVOFF, B_HVDATA, N_BUFS };

typedef struct {
    PyObject_HEAD
    Py_ssize_t rows, headers;
    gbuf b[N_BUFS];
} ColumnBuilder;

static inline int32_t last_i32(const gbuf *b) { int32_t v; memcpy(&v, b->p + b->len - 4, 4); return v; }

static int builder_init_buffers(ColumnBuilder *self)
{
    if (gb_i32(&self->b[B_KOFF], 0) < 0 || gb_i32(&self->b[B_VOFF], 0) < 0 || gb_i32(&self->b[B_HOFF], 0) < 0 ||
        gb_i32(&self->b[B_HKOFF], 0) < 0 || gb_i32(&self->b[B_HVOFF], 0) < 0)
        return -1;
    return 0;
}

static PyObject *builder_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "ColumnBuilder() takes no arguments");
        return NULL;
    }
    ColumnBuilder *self = (ColumnBuilder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if (builder_init_buffers(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void builder_dealloc(ColumnBuilder *self)
{
    for (int i = 0; i < N_BUFS; i++)
        PyMem_Free(self->b[i].p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Drop every row from `rows` (<= self->rows) on, the header rows they own and any part of an unfinished row. */
static void builder_cut(ColumnBuilder *self, Py_ssize_t rows)
{
    gbuf *b = self->b;
    self->rows = rows;
    b[B_OFFSETS].len = b[B_TIMESTAMPS].len = 8 * rows;
    b[B_KOFF].len = b[B_VOFF].len = b[B_HOFF].len = 4 * (rows + 1);
    Py_ssize_t bits = (rows + 7) >> 3;
    if (b[B_KVALID].len > bits)
        b[B_KVALID].len = bits;
    if (b[B_VVALID].len > bits)
        b[B_VVALID].len = bits;
    b[B_KDATA].len = last_i32(&b[B_KOFF]);
    b[B_VDATA].len = last_i32(&b[B_VOFF]);
    Py_ssize_t h = last_i32(&b[B_HOFF]);
    self->headers = h;
    b[B_HKOFF].len = b[B_HVOFF].len = 4 * (h + 1);
    Py_ssize_t hbits = (h + 7) >> 3;
    if (b[B_HVVALID].len > hbits)
        b[B_HVVALID].len = hbits;
    b[B_HKDATA].len = last_i32(&b[B_HKOFF]);
    b[B_HVDATA].len = last_i32(&b[B_HVOFF]);
}

static PyObject *builder_truncate(ColumnBuilder *self, PyObject *arg)
{
    Py_ssize_t rows = PyLong_AsSsize_t(arg);
    if (rows == -1 && PyErr_Occurred())
        return NULL;
    if (rows < 0) {
        PyErr_SetString(PyExc_ValueError, "negative row count");
        return NULL;
    }
    if (rows < self->rows)
        builder_cut(self, rows);
    Py_RETURN_NONE;
}

/* A read-only buffer that owns one builder buffer's memory (handed over by finish(): no copy). */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} OwnedBuffer;

static int owned_getbuffer(OwnedBuffer *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : (char *)"", self->len, 1, flags);
}

static void owned_dealloc(OwnedBuffer *self)
{
    PyMem_Free(self->p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs owned_as_buffer = {.bf_getbuffer = (getbufferproc)owned_getbuffer};

static PyTypeObject OwnedBuffer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_handoff.protocol._fastrecords.OwnedBuffer",
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of one decoded column buffer (read it through a memoryview).",
    .tp_as_buffer = &owned_as_buffer,
};

/* The first `len` bytes of b as a memoryview over memory taken from b (b is left empty). */
static PyObject *take_buffer(gbuf *b, Py_ssize_t len)
{
    OwnedBuffer *owner = PyObject_New(OwnedBuffer, &OwnedBuffer_Type);
    if (owner == NULL)
        return NULL;
    owner->p = b->p;
    owner->len = len;
    if (owner->p != NULL && b->cap - len > 4096 + len / 8) {
        char *shrunk = PyMem_Realloc(owner->p, (size_t)(len ? len : 1));
        if (shrunk != NULL)
            owner->p = shrunk;
    }
    b->p = NULL;
    b->len = b->cap = 0;
    PyObject *view = PyMemoryView_FromObject((PyObject *)owner);
    Py_DECREF(owner);
    return view;
}

/* A validity bitmap of n bits as bytes, or None when every bit is set. */
static PyObject *validity_of(const gbuf *b, Py_ssize_t n)
{
    Py_ssize_t full = n >> 3;
    const uint8_t *p = (const uint8_t *)b->p;
    int all = 1;
    for (Py_ssize_t i = 0; i < full && all; i++)
        all = p[i] == 0xFF;
    if (all && (n & 7)) {
        uint8_t mask = (uint8_t)((1u << (n & 7)) - 1);
        all = (p[full] & mask) == mask;
    }
    if (all)
        Py_RETURN_NONE;
    /* A new object (never the interpreter's shared one-byte bytes): bits past the last row are cleared in it
     * (a truncate may have left some set). */
    Py_ssize_t size = (n + 7) >> 3;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        return NULL;
    char *dst = PyBytes_AS_STRING(out);
    memcpy(dst, b->p, (size_t)size);
    if (n & 7)
        dst[full] &= (char)((1u << (n & 7)) - 1);
    return out;
}

/* finish() -> (rows, offsets, timestamps, key_validity, key_offsets, key_data, value_validity, value_offsets,
 *              value_data, header_offsets, header_count, header_key_offsets, header_key_data,
 *              header_value_validity, header_value_offsets, header_value_data)
 * Validity bitmaps are bytes (or None); the other buffers are read-only memoryviews over the builder's memory,
 * handed over without a copy: the builder is empty afterwards (and cannot be finished twice). */
static PyObject *builder_finish(ColumnBuilder *self, PyObject *Py_UNUSED(ignored))
{
    gbuf *b = self->b;
    Py_ssize_t n = self->rows, h = self->headers;
    if (b[B_KOFF].len == 0) {
        PyErr_SetString(PyExc_RuntimeError, "ColumnBuilder.finish() was already called");
        return NULL;
    }
    PyObject *items[16] = {NULL};
    items[0] = PyLong_FromSsize_t(n);
    items[3] = validity_of(&b[B_KVALID], n);
    items[6] = validity_of(&b[B_VVALID], n);
    items[10] = PyLong_FromSsize_t(h);
    items[13] = validity_of(&b[B_HVVALID], h);
    PyObject *result = PyTuple_New(16);
    int ok = result && items[0] && items[3] && items[6] && items[10] && items[13];
    if (ok) {
        struct { int slot, buf; Py_ssize_t len; } moves[] = {
            {1, B_OFFSETS, 8 * n}, {2, B_TIMESTAMPS, 8 * n}, {4, B_KOFF, 4 * (n + 1)},
            {5, B_KDATA, b[B_KDATA].len}, {7, B_VOFF, 4 * (n + 1)}, {8, B_VDATA, b[B_VDATA].len},
            {9, B_HOFF, 4 * (n + 1)}, {11, B_HKOFF, 4 * (h + 1)}, {12, B_HKDATA, b[B_HKDATA].len},
            {14, B_HVOFF, 4 * (h + 1)}, {15, B_HVDATA, b[B_HVDATA].len},
        };
        for (size_t i = 0; ok && i < sizeof moves / sizeof moves[0]; i++) {
            items[moves[i].slot] = take_buffer(&b[moves[i].buf], moves[i].len);
            ok = items[moves[i].slot] != NULL;
        }
    }
    if (!ok) {
        for (int j = 0; j < 16; j++)
            Py_XDECREF(items[j]);
        Py_XDECREF(result);
        return NULL;
    }
    for (int i = 0; i < 16; i++)
        PyTuple_SET_ITEM(result, i, items[i]);
    self->rows = self->headers = 0;
    for (int i = 0; i < N_BUFS; i++)
        self->b[i].len = 0;
    return result;
}

static PyObject *builder_get_rows(ColumnBuilder *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->rows);
}

static PyMethodDef builder_methods[] = {
    {"truncate", (PyCFunction)builder_truncate, METH_O, "truncate(rows): drop the rows from `rows` on."},
    {"finish", (PyCFunction)builder_finish, METH_NOARGS,
     "finish() -> tuple of the row count and buffers (see records.ColumnBuffers)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef builder_getset[] = {
    {"rows", (getter)builder_get_rows, NULL, "rows appended so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ColumnBuilder_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_handoff.protocol._fastrecords.ColumnBuilder",
    .tp_basicsize = sizeof(ColumnBuilder),
    .tp_dealloc = (destructor)builder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoded records in Arrow-layout buffers (see records_to_buffers).",
    .tp_methods = builder_methods,
    .tp_getset = builder_getset,
    .tp_new = builder_new,
};

/* Append a binary value (or null) to validity/offsets/data; the end offset must fit an int32. */
static inline int put_binary(gbuf *valid, gbuf *offs, gbuf *data, Py_ssize_t row, const uint8_t *p, int64_t len)
{
    if (gb_bit(valid, row, len >= 0) < 0)
        return -1;
    if (len > 0) {
        if (len > (int64_t)INT32_MAX - data->len) {
            PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of keys, values or headers in one fetch");
            return -1;
        }
        if (gb_put(data, p, (Py_ssize_t)len) < 0)
            return -1;
    }
    return gb_i32(offs, (int32_t)data->len);
}

/* Is buf[0:len] valid utf-8 the way Python's strict decoder sees it?  Raises its UnicodeDecodeError if not. */
static int check_utf8(const uint8_t *p, Py_ssize_t len)
{
    for (Py_ssize_t i = 0; i < len; i++) {
        if (p[i] >= 0x80) {
            PyObject *s = PyUnicode_DecodeUTF8((const char *)p, len, NULL);
            if (s == NULL)
                return -1;
            Py_DECREF(s);
            return 0;
        }
    }
    return 0;
}

/* One record into the builder (`keep`: store it; otherwise only validate).  Same reads, order and errors as
 * parse_record/records.py's loop. */
static int append_record(module_state *st, ColumnBuilder *bl, const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos,
                         int64_t base_offset, int has_min, int64_t min_offset, int64_t *off_delta,
                         int64_t *ts_delta, int *kept)
{
    gbuf *b = bl->b;
    Py_ssize_t p = *pos;
    int64_t len = 0, klen = 0, vlen = 0;
    if (read_zz(st, buf, n, &p, &len) < 0)
        return -1;
    Py_ssize_t fields_start = p;
    p += 1; /* attributes (unused) */
    if (read_zz(st, buf, n, &p, ts_delta) < 0 || read_zz(st, buf, n, &p, off_delta) < 0 ||
        read_zz(st, buf, n, &p, &klen) < 0)
        return -1;
    int keep = 1;
    if (has_min) {
        int64_t off;
        /* an overflowing offset is reported after the batch; keep the row until then */
        if (!kh_add_overflow_i64(base_offset, *off_delta, &off))
            keep = off >= min_offset;
    }
    Py_ssize_t row = bl->rows;
    const uint8_t *kp, *vp;
    if (take_bytes(st, buf, n, &p, klen, "key", &kp) < 0 ||
        (keep && put_binary(&b[B_KVALID], &b[B_KOFF], &b[B_KDATA], row, kp, klen) < 0))
        return -1;
    if (read_zz(st, buf, n, &p, &vlen) < 0 || take_bytes(st, buf, n, &p, vlen, "value", &vp) < 0 ||
        (keep && put_binary(&b[B_VVALID], &b[B_VOFF], &b[B_VDATA], row, vp, vlen) < 0))
        return -1;
    if (p >= n)
        return out_of_data();
    if (buf[p] == 0) {
        p += 1;
    } else {
        int64_t count = 0;
        if (read_zz(st, buf, n, &p, &count) < 0)
            return -1;
        if (count < 0)
            return malformed(st, "invalid negative header count %lld", (long long)count);
        for (int64_t i = 0; i < count; i++) {
            int64_t hk = 0, hv = 0;
            if (read_zz(st, buf, n, &p, &hk) < 0)
                return -1;
            if (hk < 0)
                return malformed(st, "invalid header key length %lld", (long long)hk);
            if (hk > n - p)
                return malformed(st, "header key extends past the end of the data");
            if (check_utf8(buf + p, (Py_ssize_t)hk) < 0)
                return -1;
            const uint8_t *hkp = buf + p;
            p += (Py_ssize_t)hk;
            if (read_zz(st, buf, n, &p, &hv) < 0)
                return -1;
            const uint8_t *hvp = NULL;
            if (hv >= 0) {
                if (hv > n - p)
                    return malformed(st, "header value extends past the end of the data");
                hvp = buf + p;
                p += (Py_ssize_t)hv;
            } else if (hv != -1) {
                return malformed(st, "invalid header value length %lld", (long long)hv);
            }
            if (keep) {
                Py_ssize_t h = bl->headers;
                if (hk > (int64_t)INT32_MAX - b[B_HKDATA].len) {
                    PyErr_SetString(PyExc_OverflowError,
                                    "more than 2 GiB of keys, values or headers in one fetch");
                    return -1;
                }
                if (gb_put(&b[B_HKDATA], hkp, (Py_ssize_t)hk) < 0 ||
                    gb_i32(&b[B_HKOFF], (int32_t)b[B_HKDATA].len) < 0 ||
                    put_binary(&b[B_HVVALID], &b[B_HVOFF], &b[B_HVDATA], h, hvp, hv) < 0)
                    return -1;
                bl->headers = h + 1;
            }
        }
    }
    if ((int64_t)(p - fields_start) != len) {
        PyObject *start = PyLong_FromSsize_t(fields_start);
        PyObject *length = start ? PyLong_FromLongLong(len) : NULL;
        PyObject *rec_end = length ? PyNumber_Add(start, length) : NULL;
        if (rec_end != NULL)
            malformed(st, "record length says it ends at byte %S but its fields end at byte %zd", rec_end, p);
        Py_XDECREF(start);
        Py_XDECREF(length);
        Py_XDECREF(rec_end);
        return -1;
    }
    if (keep) {
        if (bl->headers > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "more than 2**31 headers in one fetch");
            return -1;
        }
        if (gb_i32(&b[B_HOFF], (int32_t)bl->headers) < 0)
            return -1;
    }
    *kept = keep;
    *pos = p;
    return 0;
}

/* records_to_buffers(buf, pos, count, base_offset, base_ts, ts_override, min_offset, builder) -> pos
 *
 * One batch's records into a ColumnBuilder: offsets base_offset + delta, timestamps base_ts + delta (or
 * ts_override for every record when it is not None: LogAppendTime), records below min_offset (when not None)
 * left out.  On any error nothing of this batch stays in the builder.  Errors: those of records_to_objects
 * (same order), then records._Malformed when an offset (or a timestamp) is outside the int64 range. */
static PyObject *records_to_buffers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    module_state *st = get_state(module);
    if (check_call(st, "records_to_buffers", nargs, 8) < 0)
        return NULL;
    if (!PyObject_TypeCheck(args[7], &ColumnBuilder_Type)) {
        PyErr_SetString(PyExc_TypeError, "builder must be a ColumnBuilder");
        return NULL;
    }
    ColumnBuilder *bl = (ColumnBuilder *)args[7];
    if (bl->b[B_KOFF].len == 0) {
        PyErr_SetString(PyExc_RuntimeError, "ColumnBuilder.finish() was already called");
        return NULL;
    }
    int has_override = args[5] != Py_None, has_min = args[6] != Py_None;
    int64_t ts_override = 0, min_offset = 0;
    if (has_override) {
        ts_override = PyLong_AsLongLong(args[5]);
        if (ts_override == -1 && PyErr_Occurred())
            return NULL;
    }
    if (has_min) {
        min_offset = PyLong_AsLongLong(args[6]);
        if (min_offset == -1 && PyErr_Occurred())
            return NULL;
    }
    common_args a;
    if (parse_common(args, &a) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)a.view.buf;
    Py_ssize_t n = a.view.len, p = a.pos, start_rows = bl->rows;
    const char *overflow = NULL;
    gbuf *b = bl->b;
    for (Py_ssize_t i = 0; i < a.count; i++) {
        int64_t off_delta = 0, ts_delta = 0, offset, ts;
        int kept = 0;
        if (append_record(st, bl, buf, n, &p, a.base_offset, has_min, min_offset, &off_delta, &ts_delta,
                          &kept) < 0)
            goto fail;
        if (kh_add_overflow_i64(a.base_offset, off_delta, &offset)) {
            if (overflow == NULL)
                overflow = "a record's offset is outside the int64 range";
            offset = 0;
        }
        if (has_override) {
            ts = ts_override;
        } else if (kh_add_overflow_i64(a.base_ts, ts_delta, &ts)) {
            if (overflow == NULL)
                overflow = "a record's timestamp is outside the int64 range";
            ts = 0;
        }
        if (kept) {
            if (gb_i64(&b[B_OFFSETS], offset) < 0 || gb_i64(&b[B_TIMESTAMPS], ts) < 0)
                goto fail;
            bl->rows += 1;
        }
    }
    if (overflow != NULL) {
        malformed(st, "%s", overflow);
        goto fail;
    }
    PyBuffer_Release(&a.view);
    return PyLong_FromSsize_t(p);
fail:
    PyBuffer_Release(&a.view);
    /* a failed record may have left a key/value/headers behind without its row: back to the entry state */
    builder_cut(bl, start_rows);
    return NULL;
}

/* binary_list(validity, offsets, data, start, stop) -> list of bytes/None: rows start:stop of an Arrow binary
 * array (validity: None or a bitmap; offsets: int32).  What ColumnBuffers.to_lists uses for keys and values. */
static PyObject *binary_list(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "binary_list() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[3]), stop;
    if (start == -1 && PyErr_Occurred())
        return NULL;
    stop = PyLong_AsSsize_t(args[4]);
    if (stop == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer valid = {0}, offs, data;
    int has_valid = args[0] != Py_None;
    if (has_valid && PyObject_GetBuffer(args[0], &valid, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &offs, PyBUF_SIMPLE) < 0) {
        if (has_valid)
            PyBuffer_Release(&valid);
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &data, PyBUF_SIMPLE) < 0) {
        if (has_valid)
            PyBuffer_Release(&valid);
        PyBuffer_Release(&offs);
        return NULL;
    }
    PyObject *out = NULL;
    if (start < 0 || stop < start || (stop + 1) * 4 > offs.len || (has_valid && (stop + 7) / 8 > valid.len)) {
        PyErr_SetString(PyExc_ValueError, "rows out of range");
        goto done;
    }
    out = PyList_New(stop - start);
    if (out == NULL)
        goto done;
    const uint8_t *bits = (const uint8_t *)valid.buf;
    const char *ends = (const char *)offs.buf, *bytes = (const char *)data.buf;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *item;
        if (has_valid && !(bits[i >> 3] >> (i & 7) & 1)) {
            item = Py_NewRef(Py_None);
        } else {
            int32_t a, b;
            memcpy(&a, ends + 4 * i, 4);
            memcpy(&b, ends + 4 * (i + 1), 4);
            if (a < 0 || b < a || b > data.len) {
                PyErr_SetString(PyExc_ValueError, "binary offsets out of range");
                Py_CLEAR(out);
                goto done;
            }
            item = PyBytes_FromStringAndSize(bytes + a, b - a);
            if (item == NULL) {
                Py_CLEAR(out);
                goto done;
            }
        }
        PyList_SET_ITEM(out, i - start, item);
    }
done:
    if (has_valid)
        PyBuffer_Release(&valid);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&data);
    return out;
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
/* encoding: the per-record loop of the record batch encoder (records.py's _py_encode_records in C; the
 * producer's batches and RecordBatchBuilder both use it).
 *
 * encode_records(entries, base_timestamp, first_offset_delta=0) -> (records_bytes, max_timestamp)
 *
 * ``entries`` is a list of tuples whose first four items are (key, value, timestamp, headers): key and value
 * are bytes or None, timestamp an int, headers None or a sequence of (str, bytes-or-None) tuples.  Records get
 * offset deltas first_offset_delta, +1, +2, ...; each record is
 *
 *   length varint | attributes int8 (0) | timestampDelta varlong | offsetDelta varint |
 *   keyLength varint | key | valueLength varint | value | headerCount varint |
 *   (headerKeyLength varint, key utf-8, headerValueLength varint, value)*
 *
 * with zig-zag varints and -1 for a null key, value or header value.  Raises TypeError for an entry of the
 * wrong shape, OverflowError for a timestamp outside int64.
 */

static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline Py_ssize_t varint_size(int64_t v)
{
    uint64_t u = zigzag(v);
    Py_ssize_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline char *put_varint(char *p, int64_t v)
{
    uint64_t u = zigzag(v);
    while (u >= 0x80) {
        *p++ = (char)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (char)u;
    return p;
}

/* Size and pointer of a bytes-or-None item: returns -1 with an exception for other types. */
static int bytes_or_none(PyObject *obj, const char *what, const char **data, Py_ssize_t *len)
{
    if (obj == Py_None) {
        *data = NULL;
        *len = -1;
        return 0;
    }
    if (PyBytes_Check(obj)) {
        *data = PyBytes_AS_STRING(obj);
        *len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "record %s must be bytes or None, not %.100s", what, Py_TYPE(obj)->tp_name);
    return -1;
}

typedef struct {
    const char *key;
    Py_ssize_t key_len;
    const char *value;
    Py_ssize_t value_len;
    int64_t ts_delta;
    Py_ssize_t body;       /* record size without its length prefix */
    PyObject *headers;     /* owned: a tuple of (str, bytes | None) tuples, or NULL */
} rec_info;

/* Header bytes (without the count) of one record; *snapshot receives the headers as a new tuple (the one
   pass 2 writes: a tuple of tuples of str and bytes cannot change between the passes, whatever the caller's
   sequence does), *count their number.  -1 on error. */
static Py_ssize_t headers_size(PyObject *headers, PyObject **snapshot, Py_ssize_t *count)
{
    *snapshot = NULL;
    PyObject *seq = PySequence_Tuple(headers);
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "a record header must be a (str, bytes | None) tuple");
            return -1;
        }
        Py_ssize_t klen;
        if (PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &klen) == NULL) {
            Py_DECREF(seq);
            return -1;
        }
        const char *v;
        Py_ssize_t vlen;
        if (bytes_or_none(PyTuple_GET_ITEM(pair, 1), "header value", &v, &vlen) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        size += varint_size(klen) + klen + varint_size(vlen) + (vlen > 0 ? vlen : 0);
    }
    *snapshot = seq;
    *count = n;
    return size;
}

/* Writes the headers pass 1 measured (its snapshot: immutable, so the sizes still hold). */
static char *put_headers(char *p, PyObject *seq)
{
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    p = put_varint(p, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(seq, i);
        Py_ssize_t klen;
        const char *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &klen);
        const char *v;
        Py_ssize_t vlen;
        if (k == NULL || bytes_or_none(PyTuple_GET_ITEM(pair, 1), "header value", &v, &vlen) < 0)
            return NULL;
        p = put_varint(p, klen);
        memcpy(p, k, (size_t)klen);
        p += klen;
        p = put_varint(p, vlen);
        if (vlen > 0) {
            memcpy(p, v, (size_t)vlen);
            p += vlen;
        }
    }
    return p;
}

static PyObject *encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_records(entries, base_timestamp, first_offset_delta=0) takes 2 or 3 arguments");
        return NULL;
    }
    PyObject *entries = args[0];
    if (!PyList_Check(entries)) {
        PyErr_SetString(PyExc_TypeError, "entries must be a list");
        return NULL;
    }
    int overflow = 0;
    long long base_ts = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (overflow || (base_ts == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_OverflowError, "base timestamp out of int64 range");
        return NULL;
    }
    long long first_delta = 0;
    if (nargs == 3) {
        first_delta = PyLong_AsLongLongAndOverflow(args[2], &overflow);
        if (overflow || (first_delta == -1 && PyErr_Occurred()) || first_delta < 0 || first_delta > INT32_MAX) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_OverflowError, "first offset delta out of 0..2**31-1");
            return NULL;
        }
    }
    /* A snapshot of the list: turning a headers sequence into a tuple may run Python code (a custom
       sequence's __iter__), which could shrink or change the caller's list. */
    PyObject *snap = PyList_AsTuple(entries);
    if (snap == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(snap);
    rec_info stack_infos[256];
    rec_info *infos = n <= 256 ? stack_infos : PyMem_Malloc(sizeof(rec_info) * (size_t)n);
    if (infos == NULL) {
        Py_DECREF(snap);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++)
        infos[i].headers = NULL;
    PyObject *result = NULL;
    PyObject *out = NULL;
    long long max_ts = -1;
    Py_ssize_t total = 0;

    /* pass 1: sizes.  Keys, values and header snapshots are immutable objects kept alive by snap (and by
       infos[].headers), so pass 2 writes exactly what was measured. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyTuple_GET_ITEM(snap, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 4) {
            PyErr_SetString(PyExc_TypeError, "an entry must be a (key, value, timestamp, headers, ...) tuple");
            goto done;
        }
        rec_info *r = &infos[i];
        if (bytes_or_none(PyTuple_GET_ITEM(entry, 0), "key", &r->key, &r->key_len) < 0)
            goto done;
        if (bytes_or_none(PyTuple_GET_ITEM(entry, 1), "value", &r->value, &r->value_len) < 0)
            goto done;
        long long ts = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(entry, 2), &overflow);
        if (overflow || (ts == -1 && PyErr_Occurred())) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_OverflowError, "record timestamp out of int64 range");
            goto done;
        }
        if (ts > max_ts)
            max_ts = ts;
        r->ts_delta = (int64_t)((uint64_t)ts - (uint64_t)base_ts);
        PyObject *headers = PyTuple_GET_ITEM(entry, 3);
        Py_ssize_t hcount = 0, hsize = 0;
        if (headers != Py_None) {
            PyObject *hsnap = NULL;
            hsize = headers_size(headers, &hsnap, &hcount);
            if (hsize < 0)
                goto done;
            if (hcount > 0)
                r->headers = hsnap;
            else
                Py_DECREF(hsnap);
        }
        r->body = 1 + varint_size(r->ts_delta) + varint_size(first_delta + i) + varint_size(r->key_len) +
                  (r->key_len > 0 ? r->key_len : 0) + varint_size(r->value_len) +
                  (r->value_len > 0 ? r->value_len : 0) + varint_size(hcount) + hsize;
        total += varint_size(r->body) + r->body;
    }

    /* pass 2: write */
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        rec_info *r = &infos[i];
        p = put_varint(p, r->body);
        *p++ = 0; /* attributes */
        p = put_varint(p, r->ts_delta);
        p = put_varint(p, first_delta + i);
        p = put_varint(p, r->key_len);
        if (r->key_len > 0) {
            memcpy(p, r->key, (size_t)r->key_len);
            p += r->key_len;
        }
        p = put_varint(p, r->value_len);
        if (r->value_len > 0) {
            memcpy(p, r->value, (size_t)r->value_len);
            p += r->value_len;
        }
        if (r->headers == NULL) {
            *p++ = 0;
        } else {
            p = put_headers(p, r->headers);
            if (p == NULL)
                goto done;
        }
    }
    if (p != PyBytes_AS_STRING(out) + total) {
        PyErr_SetString(PyExc_RuntimeError, "record sizes changed while encoding");
        goto done;
    }
    result = Py_BuildValue("(OL)", out, max_ts);
done:
    Py_XDECREF(out);
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(infos[i].headers);
    if (infos != stack_infos)
        PyMem_Free(infos);
    Py_DECREF(snap);
    return result;
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
    {"records_to_buffers", (PyCFunction)(void (*)(void))records_to_buffers, METH_FASTCALL,
     "records_to_buffers(buf, pos, count, base_offset, base_ts, ts_override, min_offset, builder) -> pos\n"
     "Append one batch's records to a ColumnBuilder (Arrow-layout buffers); return the position after them."},
    {"binary_list", (PyCFunction)(void (*)(void))binary_list, METH_FASTCALL,
     "binary_list(validity, offsets, data, start, stop) -> list\n"
     "Rows start:stop of an Arrow binary array as bytes (None where the validity bit is clear)."},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     "encode_records(entries, base_timestamp, first_offset_delta=0) -> (records bytes, max timestamp)\n"
     "The records section (uncompressed) of a v2 record batch."},
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
    if (PyType_Ready(&ColumnBuilder_Type) < 0 || PyType_Ready(&OwnedBuffer_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "ColumnBuilder", (PyObject *)&ColumnBuilder_Type) < 0)
        return -1;
    if (PyModule_AddStringConstant(m, "OVERFLOW_CHECKS", KH_OVERFLOW_CHECKS) < 0)
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
