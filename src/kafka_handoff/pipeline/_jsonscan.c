/*
 * kafka_handoff.pipeline._jsonscan: a strict scanner of FLAT JSON objects with a known schema, for the native
 * JSON parse of parse_json (pipeline/transform.py).
 *
 * scan(chunks, names, kinds) reads the rows of binary arrays (each chunk: int32 offsets buffer, data buffer,
 * validity bitmap or None, array offset, length) and, per row, either ACCEPTS it -- one JSON object filling the
 * whole value, whose schema fields are all null, absent or of their kind -- or REFUSES it.  It accepts only
 * what pyarrow.json (the value wrapped as {"v":<value>}, explicit schema, unexpected fields ignored) parses to
 * the same values, and refuses whenever in doubt: the caller sends refused rows down the old path, so a
 * refusal is always correct, only slower.  Refused: null rows; any byte before "{" or after "}"; whitespace
 * other than space and tab (so every row holding \n or \r); a key with a backslash, or with bytes that are not
 * strictly valid UTF-8; a schema key twice; a value of the wrong kind; an integer with a fraction, an
 * exponent, a leading zero or out of its type's range; a string with a control byte, an invalid escape, a
 * lone surrogate or bytes that are not strictly valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF);
 * in values of unknown keys the same for strings, and numbers that are not strict JSON or may not fit a
 * double; nesting deeper than MAX_DEPTH.
 *
 * The result is (mask, accepted, fields): mask is one byte per row (1 accepted), accepted the number of
 * accepted rows, and fields per schema field a tuple (validity bitmap or None, null count, int32 offsets or
 * None, values) holding the ACCEPTED rows only, in row order, in Arrow's layout (strings: offsets + UTF-8 data;
 * integers: little-endian values of their width; booleans: a bitmap).  The buffers are objects exporting the
 * buffer protocol (pyarrow.py_buffer wraps them without a copy).  The GIL is released while scanning.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { K_STRING = 0, K_INT8 = 1, K_INT16 = 2, K_INT32 = 3, K_INT64 = 4, K_BOOL = 5, K_COUNT = 6 };
static const size_t widths[K_COUNT] = {0, 1, 2, 4, 8, 0};
#define MAX_DEPTH 32

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
    .tp_name = "kafka_handoff.pipeline._jsonscan.Buffer",
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A block of memory the scanner filled (read-only buffer protocol).",
};

/* ------------------------------------------------------------------------------------------------------ */
/* Growable byte blocks (malloc/realloc: usable without the GIL). */

typedef struct {
    char *p;
    size_t len, cap;
    int zero; /* zero new bytes (bitmaps) */
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
    if (g->zero)
        memset(p + g->cap, 0, cap - g->cap);
    g->p = p;
    g->cap = cap;
    return 0;
}

/* Take g's block as an OwnedBuffer of g->len bytes (needs the GIL). */
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
/* The scan. */

typedef struct {
    int kind;
    const char *name;
    size_t name_len;
    int plain_name; /* the name's bytes are all plain: its JSON key is the same bytes, unescaped */
    grow_t validity, values, offsets;
    size_t nulls;
    /* the row being scanned: 0 absent, 1 null, 2 a value */
    int state;
    int64_t ival;
} field_t;

typedef struct {
    const uint8_t *p, *e;
} cursor_t;

/* 1 for the bytes a string holds as they are: 0x20..0x7F but '"' and '\\'. */
static uint8_t plain[256];

static void init_tables(void)
{
    for (int i = 0x20; i < 0x80; i++)
        plain[i] = 1;
    plain['"'] = plain['\\'] = 0;
}

static inline void skip_ws(cursor_t *c)
{
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

/* Length of the strictly valid UTF-8 sequence at p (first byte >= 0x80), or 0. */
static inline int utf8_len(const uint8_t *p, const uint8_t *e)
{
    uint8_t b0 = p[0];
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        return (e - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (b0 >= 0xE0 && b0 <= 0xEF) {
        if (e - p < 3)
            return 0;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b0 == 0xE0)
            lo = 0xA0;
        else if (b0 == 0xED)
            hi = 0x9F;
        return (p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80) ? 3 : 0;
    }
    if (b0 >= 0xF0 && b0 <= 0xF4) {
        if (e - p < 4)
            return 0;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b0 == 0xF0)
            lo = 0x90;
        else if (b0 == 0xF4)
            hi = 0x8F;
        return (p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80) ? 4 : 0;
    }
    return 0;
}

static inline int hex4(const uint8_t *p, const uint8_t *e, uint32_t *out)
{
    if (e - p < 4)
        return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t ch = p[i];
        uint32_t d;
        if (ch >= '0' && ch <= '9')
            d = ch - '0';
        else if (ch >= 'a' && ch <= 'f')
            d = ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F')
            d = ch - 'A' + 10;
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* Scan a JSON string, c->p just past the opening quote.  out != NULL: append the decoded UTF-8 to out
 * (its capacity must hold the rest of the row).  allow_escapes == 0: refuse a backslash (keys).
 * Returns 0 (c->p past the closing quote) or -1 (refuse). */
static int scan_string(cursor_t *c, grow_t *out, int allow_escapes)
{
    const uint8_t *p = c->p, *e = c->e;
    const uint8_t *run = p;
    for (;;) {
        /* 8 plain bytes at a time: none below 0x20, none >= 0x80, no '"', no '\\' */
        while (e - p >= 8) {
            uint64_t x;
            memcpy(&x, p, 8);
            const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
            uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
            uint64_t special = ((x - ones * 0x20) | (q - ones) | (b - ones) | x) & highs;
            /* (x - 0x20 per byte borrows only through bytes < 0x20; any byte >= 0x80 sets its own high bit) */
            if (special)
                break;
            p += 8;
        }
        while (p < e && plain[*p])
            p++;
        if (p >= e)
            return -1;
        uint8_t ch = *p;
        if (ch == '"') {
            if (out) {
                memcpy(out->p + out->len, run, (size_t)(p - run));
                out->len += (size_t)(p - run);
            }
            c->p = p + 1;
            return 0;
        }
        if (ch >= 0x80) {
            int n = utf8_len(p, e);
            if (!n)
                return -1;
            p += n;
            continue;
        }
        if (ch < 0x20 || !allow_escapes)
            return -1;
        /* an escape: flush the plain run, decode */
        if (out) {
            memcpy(out->p + out->len, run, (size_t)(p - run));
            out->len += (size_t)(p - run);
        }
        if (e - p < 2)
            return -1;
        uint8_t esc = p[1];
        uint32_t cp;
        p += 2;
        switch (esc) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (hex4(p, e, &cp) < 0)
                return -1;
            p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return -1; /* a lone low surrogate */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, e, &lo) < 0)
                    return -1;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            break;
        default:
            return -1;
        }
        if (out) {
            uint8_t *w = (uint8_t *)out->p + out->len;
            if (cp < 0x80) {
                w[0] = (uint8_t)cp;
                out->len += 1;
            } else if (cp < 0x800) {
                w[0] = (uint8_t)(0xC0 | cp >> 6);
                w[1] = (uint8_t)(0x80 | (cp & 0x3F));
                out->len += 2;
            } else if (cp < 0x10000) {
                w[0] = (uint8_t)(0xE0 | cp >> 12);
                w[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
                w[2] = (uint8_t)(0x80 | (cp & 0x3F));
                out->len += 3;
            } else {
                w[0] = (uint8_t)(0xF0 | cp >> 18);
                w[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
                w[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
                w[3] = (uint8_t)(0x80 | (cp & 0x3F));
                out->len += 4;
            }
        }
        run = p;
    }
}

static inline int literal(cursor_t *c, const char *word, size_t n)
{
    if ((size_t)(c->e - c->p) < n || memcmp(c->p, word, n) != 0)
        return -1;
    c->p += n;
    return 0;
}

/* A number in an unknown field: strict JSON grammar, and small enough for any double parser (at most 20
 * integer digits, 20 fraction digits, an exponent of at most 3 digits below 200 in magnitude). */
static int skip_number(cursor_t *c)
{
    const uint8_t *p = c->p, *e = c->e;
    if (p < e && *p == '-')
        p++;
    if (p >= e)
        return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        const uint8_t *s = p;
        while (p < e && *p >= '0' && *p <= '9')
            p++;
        if (p - s > 20)
            return -1;
    } else {
        return -1;
    }
    if (p < e && *p == '.') {
        p++;
        const uint8_t *s = p;
        while (p < e && *p >= '0' && *p <= '9')
            p++;
        if (p == s || p - s > 20)
            return -1;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        const uint8_t *s = p;
        int v = 0;
        while (p < e && *p >= '0' && *p <= '9')
            v = v * 10 + (*p++ - '0');
        if (p == s || p - s > 3 || v >= 200)
            return -1;
    }
    c->p = p;
    return 0;
}

/* After a member of an object or array: its closing byte `close` (0: consumed, the container ends), or a
 * comma and the whitespace after it (1: another member follows); -1 for anything else. */
static int after_member(cursor_t *c, char close)
{
    skip_ws(c);
    if (c->p >= c->e)
        return -1;
    if (*c->p == close) {
        c->p++;
        return 0;
    }
    if (*c->p != ',')
        return -1;
    c->p++;
    skip_ws(c);
    return 1;
}

/* At an object's or array's opening byte: step in (-1 beyond MAX_DEPTH); 0 when it closes at once with
 * `close` (consumed), 1 when a member follows. */
static int open_container(cursor_t *c, int depth, char close)
{
    if (depth >= MAX_DEPTH)
        return -1;
    c->p++;
    skip_ws(c);
    if (c->p < c->e && *c->p == close) {
        c->p++;
        return 0;
    }
    return 1;
}

static int skip_value(cursor_t *c, int depth)
{
    if (c->p >= c->e)
        return -1;
    switch (*c->p) {
    case '"':
        c->p++;
        return scan_string(c, NULL, 1);
    case 't':
        return literal(c, "true", 4);
    case 'f':
        return literal(c, "false", 5);
    case 'n':
        return literal(c, "null", 4);
    case '{': {
        int open = open_container(c, depth, '}');
        if (open <= 0)
            return open;
        for (;;) {
            if (c->p >= c->e || *c->p != '"')
                return -1;
            c->p++;
            if (scan_string(c, NULL, 1) < 0)
                return -1;
            skip_ws(c);
            if (c->p >= c->e || *c->p != ':')
                return -1;
            c->p++;
            skip_ws(c);
            if (skip_value(c, depth + 1) < 0)
                return -1;
            int more = after_member(c, '}');
            if (more <= 0)
                return more;
        }
    }
    case '[': {
        int open = open_container(c, depth, ']');
        if (open <= 0)
            return open;
        for (;;) {
            if (skip_value(c, depth + 1) < 0)
                return -1;
            int more = after_member(c, ']');
            if (more <= 0)
                return more;
        }
    }
    default:
        return skip_number(c);
    }
}

/* An integer of `kind`: -?(0|[1-9][0-9]*) in range. */
static int scan_int(cursor_t *c, int kind, int64_t *out)
{
    static const uint64_t limits[K_COUNT] = {0, 127, 32767, 2147483647, 9223372036854775807ULL, 0};
    const uint8_t *p = c->p, *e = c->e;
    int neg = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= e)
        return -1;
    uint64_t v = 0;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        const uint8_t *s = p;
        while (p < e && *p >= '0' && *p <= '9') {
            if (p - s >= 19)
                return -1; /* 20+ digits: beyond int64 */
            v = v * 10 + (uint64_t)(*p - '0');
            p++;
        }
    } else {
        return -1;
    }
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9')))
        return -1;
    uint64_t limit = limits[kind] + (uint64_t)neg;
    if (v > limit)
        return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    c->p = p;
    return 0;
}

static inline void set_bit(grow_t *g, size_t i) { ((uint8_t *)g->p)[i >> 3] |= (uint8_t)(1u << (i & 7)); }

/* Scan one row; 1 accept (fields' row state filled, string bytes appended), 0 refuse. */
static int scan_row(const uint8_t *p, const uint8_t *e, field_t *fields, Py_ssize_t nf)
{
    Py_ssize_t next = 0; /* the field expected next (keys mostly come in the same order) */
    cursor_t c = {p, e};
    for (Py_ssize_t i = 0; i < nf; i++)
        fields[i].state = 0;
    if (e - p < 2 || *p != '{' || e[-1] != '}')
        return 0;
    c.p++;
    skip_ws(&c);
    if (c.p < c.e && *c.p == '}') {
        c.p++;
        return c.p == c.e;
    }
    for (;;) {
        if (c.p >= c.e || *c.p != '"')
            return 0;
        const uint8_t *key = ++c.p;
        field_t *f = NULL;
        field_t *guess = &fields[next];
        size_t glen = guess->name_len;
        if (guess->plain_name && (size_t)(c.e - c.p) > glen && c.p[glen] == '"' &&
            memcmp(c.p, guess->name, glen) == 0) {
            /* the key expected next (the bytes up to the quote are its name: plain, so a valid key) */
            f = guess;
            next = next + 1 < nf ? next + 1 : 0;
            c.p += glen + 1;
        } else if (scan_string(&c, NULL, 0) < 0) {
            return 0;
        }
        size_t klen = (size_t)(c.p - 1 - key);
        skip_ws(&c);
        if (c.p >= c.e || *c.p != ':')
            return 0;
        c.p++;
        skip_ws(&c);
        for (Py_ssize_t k = 0; k < nf && !f; k++) {
            Py_ssize_t i = next + k < nf ? next + k : next + k - nf;
            if (fields[i].name_len == klen && (klen == 0 || (fields[i].name[0] == (char)key[0] &&
                                                              memcmp(fields[i].name, key, klen) == 0))) {
                f = &fields[i];
                next = i + 1 < nf ? i + 1 : 0;
                break;
            }
        }
        if (!f) {
            if (skip_value(&c, 1) < 0)
                return 0;
        } else {
            if (f->state != 0)
                return 0; /* a duplicate key */
            if (c.p >= c.e)
                return 0;
            if (*c.p == 'n') {
                if (literal(&c, "null", 4) < 0)
                    return 0;
                f->state = 1;
            } else if (f->kind == K_STRING) {
                if (*c.p != '"')
                    return 0;
                c.p++;
                if (grow_reserve(&f->values, f->values.len + (size_t)(c.e - c.p)) < 0)
                    return -1;
                if (scan_string(&c, &f->values, 1) < 0)
                    return 0;
                f->state = 2;
            } else if (f->kind == K_BOOL) {
                if (*c.p == 't') {
                    if (literal(&c, "true", 4) < 0)
                        return 0;
                    f->ival = 1;
                } else {
                    if (literal(&c, "false", 5) < 0)
                        return 0;
                    f->ival = 0;
                }
                f->state = 2;
            } else {
                if (scan_int(&c, f->kind, &f->ival) < 0)
                    return 0;
                f->state = 2;
            }
        }
        skip_ws(&c);
        if (c.p >= c.e)
            return 0;
        if (*c.p == '}') {
            c.p++;
            return c.p == c.e;
        }
        if (*c.p != ',')
            return 0;
        c.p++;
        skip_ws(&c);
    }
}

/* Record the accepted row number k (0-based among accepted rows); -1 out of memory. */
static int commit_row(field_t *fields, Py_ssize_t nf, size_t k)
{
    for (Py_ssize_t i = 0; i < nf; i++) {
        field_t *f = &fields[i];
        if (grow_reserve(&f->validity, (k >> 3) + 1) < 0)
            return -1;
        if (f->state == 2)
            set_bit(&f->validity, k);
        else
            f->nulls++;
        if (f->kind == K_STRING) {
            if (grow_reserve(&f->offsets, 4 * (k + 2)) < 0)
                return -1;
            /* offsets[k] was written by the previous row (or is 0) */
            ((int32_t *)f->offsets.p)[k + 1] = (int32_t)f->values.len;
        } else if (f->kind == K_BOOL) {
            if (grow_reserve(&f->values, (k >> 3) + 1) < 0)
                return -1;
            if (f->state == 2 && f->ival)
                set_bit(&f->values, k);
        } else {
            size_t w = widths[f->kind];
            if (grow_reserve(&f->values, w * (k + 1)) < 0)
                return -1;
            int64_t v = f->state == 2 ? f->ival : 0;
            char *dst = f->values.p + w * k;
            switch (w) {
            case 1: { int8_t x = (int8_t)v; memcpy(dst, &x, 1); break; }
            case 2: { int16_t x = (int16_t)v; memcpy(dst, &x, 2); break; }
            case 4: { int32_t x = (int32_t)v; memcpy(dst, &x, 4); break; }
            default: memcpy(dst, &v, 8); break;
            }
        }
    }
    return 0;
}

typedef struct {
    Py_buffer offsets, data, validity;
    int has_validity;
    Py_ssize_t offset, length;
} chunk_t;

static void release_chunks(chunk_t *chunks, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (chunks[i].offsets.obj)
            PyBuffer_Release(&chunks[i].offsets);
        if (chunks[i].data.obj)
            PyBuffer_Release(&chunks[i].data);
        if (chunks[i].has_validity && chunks[i].validity.obj)
            PyBuffer_Release(&chunks[i].validity);
    }
}

static void free_fields(field_t *fields, Py_ssize_t nf)
{
    for (Py_ssize_t i = 0; i < nf; i++) {
        free(fields[i].validity.p);
        free(fields[i].values.p);
        free(fields[i].offsets.p);
    }
}

static PyObject *jsonscan_scan(PyObject *module, PyObject *args)
{
    PyObject *chunk_list, *names, *kinds;
    if (!PyArg_ParseTuple(args, "OOO:scan", &chunk_list, &names, &kinds))
        return NULL;
    PyObject *cseq = PySequence_Fast(chunk_list, "scan: chunks must be a sequence");
    if (!cseq)
        return NULL;
    /* tuples (copies): the names' bytes are read without the GIL */
    PyObject *nseq = PySequence_Tuple(names);
    PyObject *kseq = nseq ? PySequence_Tuple(kinds) : NULL;
    Py_ssize_t nc = PySequence_Fast_GET_SIZE(cseq);
    Py_ssize_t nf = nseq ? PySequence_Fast_GET_SIZE(nseq) : 0;
    chunk_t *chunks = NULL;
    field_t *fields = NULL;
    grow_t mask = {NULL, 0, 0, 1};
    PyObject *result = NULL;
    int oom = 0;
    size_t accepted = 0;
    if (!kseq)
        goto done;
    if (PySequence_Fast_GET_SIZE(kseq) != nf || nf == 0) {
        PyErr_SetString(PyExc_ValueError, "scan: names and kinds must be non-empty and of the same length");
        goto done;
    }
    fields = calloc((size_t)nf, sizeof(field_t));
    chunks = calloc((size_t)(nc ? nc : 1), sizeof(chunk_t));
    if (!fields || !chunks) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *name = PySequence_Fast_GET_ITEM(nseq, i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "scan: names must be bytes");
            goto done;
        }
        fields[i].name = PyBytes_AS_STRING(name);
        fields[i].name_len = (size_t)PyBytes_GET_SIZE(name);
        fields[i].plain_name = 1;
        for (size_t j = 0; j < fields[i].name_len; j++)
            fields[i].plain_name &= plain[(uint8_t)fields[i].name[j]];
        long kind = PyLong_AsLong(PySequence_Fast_GET_ITEM(kseq, i));
        if (kind == -1 && PyErr_Occurred())
            goto done;
        if (kind < 0 || kind >= K_COUNT) {
            PyErr_Format(PyExc_ValueError, "scan: unknown kind %ld", kind);
            goto done;
        }
        fields[i].kind = (int)kind;
    }
    size_t total = 0;
    for (Py_ssize_t i = 0; i < nc; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(cseq, i);
        PyObject *o, *d, *v;
        chunk_t *ch = &chunks[i];
        if (!PyArg_ParseTuple(item, "OOOnn:scan chunk", &o, &d, &v, &ch->offset, &ch->length))
            goto done;
        if (ch->offset < 0 || ch->length < 0) {
            PyErr_SetString(PyExc_ValueError, "scan: negative offset or length");
            goto done;
        }
        if (PyObject_GetBuffer(o, &ch->offsets, PyBUF_SIMPLE) < 0)
            goto done;
        if (PyObject_GetBuffer(d, &ch->data, PyBUF_SIMPLE) < 0)
            goto done;
        if (v != Py_None) {
            ch->has_validity = 1;
            if (PyObject_GetBuffer(v, &ch->validity, PyBUF_SIMPLE) < 0)
                goto done;
            if (ch->validity.len * 8 < ch->offset + ch->length) {
                PyErr_SetString(PyExc_ValueError, "scan: the validity bitmap is too short");
                goto done;
            }
        }
        if (ch->offsets.len < 4 * (ch->offset + ch->length + 1)) {
            PyErr_SetString(PyExc_ValueError, "scan: the offsets buffer is too short");
            goto done;
        }
        total += (size_t)ch->length;
    }
    if (grow_reserve(&mask, total ? total : 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    mask.len = total;
    for (Py_ssize_t i = 0; i < nf; i++) {
        /* sized for every row accepted: only the string data grows while scanning */
        field_t *f = &fields[i];
        f->validity.zero = 1;
        f->values.zero = f->kind == K_BOOL;
        size_t values = f->kind == K_STRING ? 16 * total : f->kind == K_BOOL ? total / 8 : widths[f->kind] * total;
        if (grow_reserve(&f->validity, total / 8 + 1) < 0 || grow_reserve(&f->values, values + 8) < 0 ||
            (f->kind == K_STRING && grow_reserve(&f->offsets, 4 * (total + 1)) < 0)) {
            PyErr_NoMemory();
            goto done;
        }
        if (f->kind == K_STRING)
            memset(f->offsets.p, 0, 4);
    }
    int bad_offsets = 0;
    Py_BEGIN_ALLOW_THREADS
    size_t row = 0;
    for (Py_ssize_t i = 0; i < nc && !oom && !bad_offsets; i++) {
        chunk_t *ch = &chunks[i];
        const int32_t *offs = (const int32_t *)ch->offsets.buf;
        const uint8_t *data = (const uint8_t *)ch->data.buf;
        const uint8_t *valid = ch->has_validity ? (const uint8_t *)ch->validity.buf : NULL;
        for (Py_ssize_t r = 0; r < ch->length; r++, row++) {
            Py_ssize_t at = ch->offset + r;
            if (valid && !(valid[at >> 3] >> (at & 7) & 1))
                continue; /* null: refused */
            int32_t lo, hi;
            memcpy(&lo, offs + at, 4);
            memcpy(&hi, offs + at + 1, 4);
            if (lo < 0 || hi < lo || hi > ch->data.len) {
                bad_offsets = 1;
                break;
            }
            int ok = scan_row(data + lo, data + hi, fields, nf);
            if (ok < 0) {
                oom = 1;
                break;
            }
            if (ok) {
                for (Py_ssize_t j = 0; j < nf; j++) {
                    if (fields[j].kind == K_STRING && fields[j].values.len > INT32_MAX)
                        ok = 0; /* beyond int32 offsets: leave the rest to the old path */
                }
            }
            if (!ok) {
                /* roll the strings back to the last committed row's end */
                for (Py_ssize_t j = 0; j < nf; j++) {
                    if (fields[j].kind == K_STRING)
                        fields[j].values.len = (size_t)((int32_t *)fields[j].offsets.p)[accepted];
                }
                continue;
            }
            if (commit_row(fields, nf, accepted) < 0) {
                oom = 1;
                break;
            }
            mask.p[row] = 1;
            accepted++;
        }
    }
    Py_END_ALLOW_THREADS
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    if (bad_offsets) {
        PyErr_SetString(PyExc_ValueError, "scan: the offsets are not within the data buffer");
        goto done;
    }
    PyObject *out_fields = PyList_New(nf);
    if (!out_fields)
        goto done;
    for (Py_ssize_t i = 0; i < nf; i++) {
        field_t *f = &fields[i];
        f->validity.len = (accepted + 7) / 8;
        if (f->kind == K_STRING) {
            f->offsets.len = 4 * (accepted + 1);
        } else if (f->kind == K_BOOL) {
            f->values.len = (accepted + 7) / 8;
        } else {
            f->values.len = widths[f->kind] * accepted;
        }
        PyObject *validity = f->nulls ? grow_take(&f->validity) : Py_NewRef(Py_None);
        PyObject *offsets = f->kind == K_STRING ? grow_take(&f->offsets) : Py_NewRef(Py_None);
        PyObject *values = grow_take(&f->values);
        PyObject *tup = (validity && offsets && values)
                            ? Py_BuildValue("(OnOO)", validity, (Py_ssize_t)f->nulls, offsets, values)
                            : NULL;
        Py_XDECREF(validity);
        Py_XDECREF(offsets);
        Py_XDECREF(values);
        if (!tup) {
            Py_DECREF(out_fields);
            goto done;
        }
        PyList_SET_ITEM(out_fields, i, tup);
    }
    PyObject *mask_obj = grow_take(&mask);
    if (!mask_obj) {
        Py_DECREF(out_fields);
        goto done;
    }
    result = Py_BuildValue("(NnN)", mask_obj, (Py_ssize_t)accepted, out_fields);
done:
    if (chunks)
        release_chunks(chunks, nc);
    free(chunks);
    if (fields)
        free_fields(fields, nf);
    free(fields);
    free(mask.p);
    Py_XDECREF(kseq);
    Py_XDECREF(nseq);
    Py_DECREF(cseq);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", jsonscan_scan, METH_VARARGS,
     "scan(chunks, names, kinds) -> (mask, accepted, fields): scan flat JSON objects (see the module doc)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafka_handoff.pipeline._jsonscan",
    .m_doc = "A strict scanner of flat JSON objects with a known schema (the native JSON parse's fast path).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__jsonscan(void)
{
    init_tables();
    if (PyType_Ready(&OwnedBufferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    if (PyModule_AddIntConstant(m, "STRING", K_STRING) < 0 || PyModule_AddIntConstant(m, "INT8", K_INT8) < 0 ||
        PyModule_AddIntConstant(m, "INT16", K_INT16) < 0 || PyModule_AddIntConstant(m, "INT32", K_INT32) < 0 ||
        PyModule_AddIntConstant(m, "INT64", K_INT64) < 0 || PyModule_AddIntConstant(m, "BOOLEAN", K_BOOL) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
