/*
 * kafka_handoff.pipeline._avrodecode: a decoder of FLAT Avro records (registry-framed Kafka values) into Arrow
 * buffers, for parse_avro (pipeline/avro.py; its pure-Python twin is avro._py_decode, with the same results).
 *
 * decode(offsets, data, validity, offset, length, select, ops) reads the rows of one binary array (int32
 * offsets buffer, data buffer, validity bitmap or None, array offset, length) whose byte in `select` is 1: each
 * such value is a 5-byte Confluent header (magic byte, schema id: checked by the caller, skipped here) and one
 * Avro record of the writer schema described by `ops`, a sequence of (kind, union, keep, arg) per field:
 *   kind  K_NULL .. K_FIXED (below);
 *   union -1: not a union; 0: ["null", T]; 1: [T, "null"];
 *   keep  1: the field becomes an output column; 0: it is read and dropped;
 *   arg   K_ENUM: the number of symbols; K_FIXED: the size.
 * A row is ACCEPTED when its record decodes and fills the value exactly.  Otherwise its status (one byte per
 * row) says why, and its field index (int32 per row) where:
 *   S_TRUNCATED  the value ended inside the record;
 *   S_TRAILING   bytes left after the record;
 *   S_UNION      a union branch index other than 0 and 1;
 *   S_ENUM       an enum index out of range;
 *   S_UTF8       a string that is not strictly valid UTF-8 (what Python's bytes.decode refuses);
 *   S_LENGTH     a negative length;
 *   S_VARINT     a varint longer than 10 bytes, or an int outside int32.
 * The result is (status, field, accepted, columns): columns per kept field a tuple (validity bitmap or None,
 * null count, int32 offsets or None, values) holding the ACCEPTED rows only, in row order, in Arrow's layout
 * (bytes/string/fixed: offsets + data; boolean: a bitmap; int/enum: int32; long: int64; float: float32;
 * double: float64; null: no buffers).  The GIL is released while decoding.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
    K_NULL = 0, K_BOOL = 1, K_INT = 2, K_LONG = 3, K_FLOAT = 4, K_DOUBLE = 5, K_BYTES = 6, K_STRING = 7,
    K_ENUM = 8, K_FIXED = 9, K_COUNT = 10
};
enum { S_OK = 0, S_TRUNCATED = 1, S_TRAILING = 2, S_UNION = 3, S_ENUM = 4, S_UTF8 = 5, S_LENGTH = 6, S_VARINT = 7 };
static const size_t widths[K_COUNT] = {0, 0, 4, 8, 4, 8, 0, 0, 4, 0};

/* ------------------------------------------------------------------------------------------------------ */
/* An owned malloc'd block exporting the buffer protocol (read-only). */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
} OwnedBuffer;

static void owned_dealloc(OwnedBuffer *self)
{
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int owned_getbuffer(OwnedBuffer *self, Py_buffer *view, int flags)
{
    static char empty[8];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : empty, self->len, 1, flags);
}

static PyBufferProcs owned_as_buffer = {(getbufferproc)owned_getbuffer, NULL};

static PyTypeObject OwnedBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_handoff.pipeline._avrodecode.Buffer",
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A block of memory the decoder filled (read-only buffer protocol).",
};

typedef struct {
    char *p;
    size_t len, cap;
} grow_t;

static int grow_reserve(grow_t *g, size_t need)
{
    if (need <= g->cap)
        return 0;
    size_t cap = g->cap ? g->cap : 4096;
    while (cap < need)
        cap *= 2;
    char *p = realloc(g->p, cap);
    if (!p)
        return -1;
    memset(p + g->cap, 0, cap - g->cap);
    g->p = p;
    g->cap = cap;
    return 0;
}

static PyObject *grow_take(grow_t *g)
{
    OwnedBuffer *b = PyObject_New(OwnedBuffer, &OwnedBufferType);
    if (!b)
        return NULL;
    b->data = g->p;
    b->len = (Py_ssize_t)g->len;
    g->p = NULL;
    g->len = g->cap = 0;
    return (PyObject *)b;
}

/* ------------------------------------------------------------------------------------------------------ */
/* The decoder. */

typedef struct {
    int kind, uni, keep;
    long arg;
    grow_t validity, values, offsets;
    size_t nulls;
} op_t;

static inline int utf8_valid(const uint8_t *p, const uint8_t *e)
{
    while (p < e) {
        uint8_t b0 = *p;
        if (b0 < 0x80) {
            p++;
            continue;
        }
        int n = 0;
        if (b0 >= 0xC2 && b0 <= 0xDF) {
            n = (e - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
        } else if (b0 >= 0xE0 && b0 <= 0xEF) {
            if (e - p >= 3) {
                uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
                n = (p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80) ? 3 : 0;
            }
        } else if (b0 >= 0xF0 && b0 <= 0xF4) {
            if (e - p >= 4) {
                uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
                n = (p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80) ? 4 : 0;
            }
        }
        if (!n)
            return 0;
        p += n;
    }
    return 1;
}

/* A zigzag varint: 0 ok, else a status. */
static inline int read_long(const uint8_t **pp, const uint8_t *e, int64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
        if (p >= e)
            return S_TRUNCATED;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
        if (shift >= 70)
            return S_VARINT;
    }
    *pp = p;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return S_OK;
}

static inline void set_bit(grow_t *g, size_t i, int on)
{
    uint8_t *b = (uint8_t *)g->p + (i >> 3);
    if (on)
        *b |= (uint8_t)(1u << (i & 7));
    else
        *b &= (uint8_t)~(1u << (i & 7));
}

/* Decode one record into position `row` of the kept columns.  0 ok, else a status and *where = the field. */
static int decode_row(const uint8_t *p, const uint8_t *e, op_t *ops, Py_ssize_t nops, size_t row, Py_ssize_t *where,
                      int *oom)
{
    for (Py_ssize_t i = 0; i < nops; i++) {
        op_t *op = &ops[i];
        int st;
        int64_t v;
        *where = i;
        int present = 1;
        if (op->uni >= 0) {
            if ((st = read_long(&p, e, &v)) != S_OK)
                return st;
            if (v != 0 && v != 1)
                return S_UNION;
            present = (v == 0) == (op->uni == 1);
            if (op->keep) {
                set_bit(&op->validity, row, present);
            }
        }
        if (!present || op->kind == K_NULL) {
            if (op->keep) {
                /* keep the buffers in step: a zero value, or an empty slot */
                if (op->kind == K_BYTES || op->kind == K_STRING || op->kind == K_FIXED) {
                    uint32_t end = (uint32_t)op->values.len;
                    memcpy(op->offsets.p + 4 * (row + 1), &end, 4);
                } else if (op->kind == K_BOOL) {
                    set_bit(&op->values, row, 0);
                } else if (widths[op->kind]) {
                    memset(op->values.p + widths[op->kind] * row, 0, widths[op->kind]);
                }
            }
            continue;
        }
        switch (op->kind) {
        case K_BOOL:
            if (p >= e)
                return S_TRUNCATED;
            if (op->keep)
                set_bit(&op->values, row, *p != 0);
            p++;
            break;
        case K_INT:
        case K_ENUM:
            if ((st = read_long(&p, e, &v)) != S_OK)
                return st;
            if (v < INT32_MIN || v > INT32_MAX)
                return S_VARINT;
            if (op->kind == K_ENUM && (v < 0 || v >= op->arg))
                return S_ENUM;
            if (op->keep) {
                int32_t x = (int32_t)v;
                memcpy(op->values.p + 4 * row, &x, 4);
            }
            break;
        case K_LONG:
            if ((st = read_long(&p, e, &v)) != S_OK)
                return st;
            if (op->keep)
                memcpy(op->values.p + 8 * row, &v, 8);
            break;
        case K_FLOAT:
        case K_DOUBLE: {
            size_t w = widths[op->kind];
            if ((size_t)(e - p) < w)
                return S_TRUNCATED;
            if (op->keep)
                memcpy(op->values.p + w * row, p, w);
            p += w;
            break;
        }
        case K_BYTES:
        case K_STRING:
        case K_FIXED: {
            int64_t n;
            if (op->kind == K_FIXED) {
                n = op->arg;
            } else {
                if ((st = read_long(&p, e, &n)) != S_OK)
                    return st;
                if (n < 0)
                    return S_LENGTH;
            }
            if (e - p < n)
                return S_TRUNCATED;
            if (op->kind == K_STRING && !utf8_valid(p, p + n))
                return S_UTF8;
            if (op->keep) {
                if (op->values.len + (size_t)n > INT32_MAX) {
                    *oom = 2;
                    return S_TRUNCATED;
                }
                if (grow_reserve(&op->values, op->values.len + (size_t)n + 1) < 0) {
                    *oom = 1;
                    return S_TRUNCATED;
                }
                memcpy(op->values.p + op->values.len, p, (size_t)n);
                op->values.len += (size_t)n;
                uint32_t end = (uint32_t)op->values.len;
                memcpy(op->offsets.p + 4 * (row + 1), &end, 4);
            }
            p += n;
            break;
        }
        default:
            break;
        }
    }
    *where = -1;
    return p == e ? S_OK : S_TRAILING;
}

static PyObject *avro_decode(PyObject *module, PyObject *args)
{
    PyObject *o_offsets, *o_data, *o_validity, *o_select, *o_ops;
    Py_ssize_t offset, length;
    if (!PyArg_ParseTuple(args, "OOOnnOO:decode", &o_offsets, &o_data, &o_validity, &offset, &length, &o_select,
                          &o_ops))
        return NULL;
    Py_buffer b_offsets = {0}, b_data = {0}, b_validity = {0}, b_select = {0};
    PyObject *opseq = NULL, *result = NULL;
    op_t *ops = NULL;
    Py_ssize_t nops = 0;
    grow_t status = {0}, fieldidx = {0};
    if (offset < 0 || length < 0) {
        PyErr_SetString(PyExc_ValueError, "decode: negative offset or length");
        return NULL;
    }
    if (PyObject_GetBuffer(o_offsets, &b_offsets, PyBUF_SIMPLE) < 0)
        goto done;
    if (PyObject_GetBuffer(o_data, &b_data, PyBUF_SIMPLE) < 0)
        goto done;
    if (o_validity != Py_None && PyObject_GetBuffer(o_validity, &b_validity, PyBUF_SIMPLE) < 0)
        goto done;
    if (PyObject_GetBuffer(o_select, &b_select, PyBUF_SIMPLE) < 0)
        goto done;
    if (b_offsets.len < 4 * (offset + length + 1) || b_select.len < length ||
        (b_validity.obj && b_validity.len * 8 < offset + length)) {
        PyErr_SetString(PyExc_ValueError, "decode: a buffer is too short for the rows");
        goto done;
    }
    opseq = PySequence_Tuple(o_ops);
    if (!opseq)
        goto done;
    nops = PyTuple_GET_SIZE(opseq);
    ops = calloc((size_t)(nops ? nops : 1), sizeof(op_t));
    if (!ops) {
        PyErr_NoMemory();
        goto done;
    }
    size_t nsel = 0;
    for (Py_ssize_t r = 0; r < length; r++)
        nsel += ((const uint8_t *)b_select.buf)[r] != 0;
    for (Py_ssize_t i = 0; i < nops; i++) {
        op_t *op = &ops[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(opseq, i), "iiil:decode op", &op->kind, &op->uni, &op->keep, &op->arg))
            goto done;
        if (op->kind < 0 || op->kind >= K_COUNT || op->uni < -1 || op->uni > 1 ||
            (op->kind == K_FIXED && op->arg < 0) || (op->kind == K_ENUM && op->arg < 1)) {
            PyErr_Format(PyExc_ValueError, "decode: invalid op %zd", i);
            goto done;
        }
        if (!op->keep)
            continue;
        int bad = 0;
        if (op->uni >= 0)
            bad |= grow_reserve(&op->validity, nsel / 8 + 1);
        if (op->kind == K_BYTES || op->kind == K_STRING || op->kind == K_FIXED) {
            bad |= grow_reserve(&op->offsets, 4 * (nsel + 1));
            bad |= grow_reserve(&op->values, 64);
        } else if (op->kind == K_BOOL) {
            bad |= grow_reserve(&op->values, nsel / 8 + 1);
        } else if (widths[op->kind]) {
            bad |= grow_reserve(&op->values, widths[op->kind] * (nsel + 1));
        }
        if (bad) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (grow_reserve(&status, (size_t)length + 1) < 0 || grow_reserve(&fieldidx, 4 * ((size_t)length + 1)) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    status.len = (size_t)length;
    fieldidx.len = 4 * (size_t)length;
    size_t accepted = 0;
    int oom = 0, bad_offsets = 0;
    Py_BEGIN_ALLOW_THREADS
    const int32_t *offs = (const int32_t *)b_offsets.buf;
    const uint8_t *data = (const uint8_t *)b_data.buf;
    const uint8_t *valid = b_validity.obj ? (const uint8_t *)b_validity.buf : NULL;
    const uint8_t *sel = (const uint8_t *)b_select.buf;
    for (Py_ssize_t r = 0; r < length && !oom; r++) {
        if (!sel[r])
            continue;
        Py_ssize_t at = offset + r;
        int32_t lo, hi;
        memcpy(&lo, offs + at, 4);
        memcpy(&hi, offs + at + 1, 4);
        if (lo < 0 || hi < lo || hi > b_data.len || (valid && !(valid[at >> 3] >> (at & 7) & 1)) || hi - lo < 5) {
            bad_offsets = 1; /* the caller selects only non-null framed rows */
            break;
        }
        Py_ssize_t where = -1;
        int st = decode_row(data + lo + 5, data + hi, ops, nops, accepted, &where, &oom);
        if (oom)
            break;
        if (st != S_OK) {
            status.p[r] = (char)st;
            int32_t w = (int32_t)where;
            memcpy(fieldidx.p + 4 * r, &w, 4);
            for (Py_ssize_t j = 0; j < nops; j++) {
                if (ops[j].keep && ops[j].offsets.p)
                    ops[j].values.len = (size_t)((uint32_t *)ops[j].offsets.p)[accepted];
            }
            continue;
        }
        for (Py_ssize_t j = 0; j < nops; j++) {
            if (ops[j].keep && ops[j].uni >= 0 && !(((uint8_t *)ops[j].validity.p)[accepted >> 3] >> (accepted & 7) & 1))
                ops[j].nulls++;
        }
        accepted++;
    }
    Py_END_ALLOW_THREADS
    if (oom == 2) {
        PyErr_SetString(PyExc_OverflowError, "decode: a column exceeds 2 GiB (int32 offsets)");
        goto done;
    }
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    if (bad_offsets) {
        PyErr_SetString(PyExc_ValueError, "decode: a selected row is null, shorter than the header, or outside "
                                          "the data buffer");
        goto done;
    }
    PyObject *columns = PyList_New(0);
    if (!columns)
        goto done;
    for (Py_ssize_t i = 0; i < nops; i++) {
        op_t *op = &ops[i];
        if (!op->keep)
            continue;
        int var = op->kind == K_BYTES || op->kind == K_STRING || op->kind == K_FIXED;
        op->validity.len = (accepted + 7) / 8;
        if (var)
            op->offsets.len = 4 * (accepted + 1);
        else if (op->kind == K_BOOL)
            op->values.len = (accepted + 7) / 8;
        else
            op->values.len = widths[op->kind] * accepted;
        PyObject *validity = (op->uni >= 0 && op->nulls) ? grow_take(&op->validity) : Py_NewRef(Py_None);
        PyObject *offsets = var ? grow_take(&op->offsets) : Py_NewRef(Py_None);
        PyObject *values = op->kind == K_NULL ? Py_NewRef(Py_None) : grow_take(&op->values);
        PyObject *tup = (validity && offsets && values)
                            ? Py_BuildValue("(OnOO)", validity, (Py_ssize_t)op->nulls, offsets, values)
                            : NULL;
        Py_XDECREF(validity);
        Py_XDECREF(offsets);
        Py_XDECREF(values);
        if (!tup || PyList_Append(columns, tup) < 0) {
            Py_XDECREF(tup);
            Py_DECREF(columns);
            goto done;
        }
        Py_DECREF(tup);
    }
    PyObject *st_obj = grow_take(&status);
    PyObject *fi_obj = st_obj ? grow_take(&fieldidx) : NULL;
    if (!fi_obj) {
        Py_XDECREF(st_obj);
        Py_DECREF(columns);
        goto done;
    }
    result = Py_BuildValue("(NNnN)", st_obj, fi_obj, (Py_ssize_t)accepted, columns);
done:
    if (b_offsets.obj)
        PyBuffer_Release(&b_offsets);
    if (b_data.obj)
        PyBuffer_Release(&b_data);
    if (b_validity.obj)
        PyBuffer_Release(&b_validity);
    if (b_select.obj)
        PyBuffer_Release(&b_select);
    if (ops) {
        for (Py_ssize_t i = 0; i < nops; i++) {
            free(ops[i].validity.p);
            free(ops[i].values.p);
            free(ops[i].offsets.p);
        }
    }
    free(ops);
    free(status.p);
    free(fieldidx.p);
    Py_XDECREF(opseq);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", avro_decode, METH_VARARGS,
     "decode(offsets, data, validity, offset, length, select, ops) -> (status, field, accepted, columns): decode "
     "registry-framed flat Avro records (see the module doc)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafka_handoff.pipeline._avrodecode",
    .m_doc = "A decoder of flat Avro records into Arrow buffers (parse_avro's fast path).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__avrodecode(void)
{
    if (PyType_Ready(&OwnedBufferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    static const char *kinds[] = {"NULL", "BOOLEAN", "INT", "LONG", "FLOAT", "DOUBLE", "BYTES", "STRING", "ENUM",
                                  "FIXED"};
    for (int i = 0; i < K_COUNT; i++) {
        if (PyModule_AddIntConstant(m, kinds[i], i) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
