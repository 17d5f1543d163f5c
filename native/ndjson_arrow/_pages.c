/*
 * Arrow string column -> Parquet data page bodies (v1, PLAIN values, RLE/bit-packed definition
 * levels), with the column's statistics, in one pass over the rows.
 *
 * Why: Arrow's Parquet writer spends ~8 ns per row per nullable column building, re-deriving and
 * run-length encoding definition levels, whatever the column holds. A table of many sparse keys
 * (500 columns, 3 % of them set per row) is then written at a few MB/s. A nullable column's levels
 * are exactly its validity bitmap (max definition level 1, bit width 1, LSB first), so here they
 * are one copy of the bitmap, and the rest of the cost follows the values that are there.
 *
 * The page bodies are uncompressed; the caller compresses them and writes the page headers and
 * the footer (glue_processor/parquet_writer.py). The GIL is released while encoding.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* errors of the encoding pass */
enum { E_NOMEM = -1, E_OFFSETS = -2 };

typedef struct {
    uint8_t *p;
    size_t len, cap;
} Out;

static int out_reserve(Out *o, size_t extra) {
    if (o->len + extra <= o->cap) return 0;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + extra) cap *= 2;
    uint8_t *p = realloc(o->p, cap);
    if (!p) return -1;
    o->p = p;
    o->cap = cap;
    return 0;
}

/* One Arrow string array (a chunk of the column). */
typedef struct {
    const int32_t *offsets; /* from the array's offset */
    const uint8_t *data;
    const uint8_t *valid; /* NULL: every value is set */
    int64_t bit0;         /* the array's offset, for the bitmap */
    int64_t length;
    Py_buffer views[3];
    int nviews;
} Chunk;

typedef struct {
    int64_t rows, nulls;
    size_t at, len; /* the body's place in the output buffer */
} Page;

typedef struct {
    Out levels, values, out;
    Page *pages;
    Py_ssize_t npages, cap_pages;
    int64_t page_rows, page_nulls;
    int64_t nulls, value_bytes, page_bytes;
    const uint8_t *min, *max;
    int32_t min_len, max_len;
} Job;

static int less(const uint8_t *a, int32_t an, const uint8_t *b, int32_t bn) {
    int c = memcmp(a, b, (size_t)(an < bn ? an : bn));
    return c < 0 || (c == 0 && an < bn);
}

/* 8 bits of a bitmap from bit `pos` (any alignment); bit pos + 7 must be in the bitmap. */
static inline unsigned byte_at(const uint8_t *bits, int64_t pos) {
    int sh = (int)(pos & 7);
    const uint8_t *p = bits + (pos >> 3);
    return sh ? (unsigned)((p[0] >> sh) | (p[1] << (8 - sh))) & 0xFF : p[0];
}

static inline void put_bit(uint8_t *dst, int64_t d, int value) {
    if ((d & 7) == 0) dst[d / 8] = 0;
    if (value) dst[d / 8] |= (uint8_t)(1u << (d & 7));
}

/* Appends bits [first, first + n) of bitmap `src` to the page's level bits. */
static int add_bits(Job *j, const uint8_t *src, int64_t first, int64_t n) {
    int64_t have = j->page_rows; /* bits already in j->levels */
    if (out_reserve(&j->levels, (size_t)((have + n + 7) / 8 - (int64_t)j->levels.len) + 8)) return -1;
    uint8_t *dst = j->levels.p;
    int64_t i = 0;
    for (; i < n && ((have + i) & 7); i++) put_bit(dst, have + i, (src[(first + i) >> 3] >> ((first + i) & 7)) & 1);
    int64_t whole = (n - i) / 8, d = (have + i) / 8, s = first + i;
    if ((s & 7) == 0) {
        memcpy(dst + d, src + s / 8, (size_t)whole);
    } else {
        for (int64_t g = 0; g < whole; g++) dst[d + g] = (uint8_t)byte_at(src, s + 8 * g);
    }
    for (i += whole * 8; i < n; i++) put_bit(dst, have + i, (src[(first + i) >> 3] >> ((first + i) & 7)) & 1);
    j->levels.len = (size_t)((have + n + 7) / 8);
    return 0;
}

static int set_bits(Job *j, int64_t n, int value) {
    int64_t have = j->page_rows;
    if (out_reserve(&j->levels, (size_t)((have + n + 7) / 8 - (int64_t)j->levels.len) + 8)) return -1;
    uint8_t *dst = j->levels.p;
    int64_t i = 0;
    for (; i < n && ((have + i) & 7); i++) put_bit(dst, have + i, value);
    int64_t whole = (n - i) / 8;
    memset(dst + (have + i) / 8, value ? 0xFF : 0, (size_t)whole);
    for (i += whole * 8; i < n; i++) put_bit(dst, have + i, value);
    j->levels.len = (size_t)((have + n + 7) / 8);
    return 0;
}

static inline int add_value(Job *j, const Chunk *c, int64_t i) {
    int32_t a = c->offsets[i], b = c->offsets[i + 1];
    if (a > b || a < c->offsets[0] || b > c->offsets[c->length]) return E_OFFSETS;
    int32_t n = b - a;
    const uint8_t *v = c->data + a;
    j->value_bytes += n;
    if (out_reserve(&j->values, 4 + (size_t)n)) return E_NOMEM;
    memcpy(j->values.p + j->values.len, &n, 4); /* little-endian hosts only (x86-64, aarch64) */
    memcpy(j->values.p + j->values.len + 4, v, (size_t)n);
    j->values.len += 4 + (size_t)n;
    if (!j->min || less(v, n, j->min, j->min_len)) j->min = v, j->min_len = n;
    if (!j->max || less(j->max, j->max_len, v, n)) j->max = v, j->max_len = n;
    return 0;
}

static void put_varint(uint8_t *dst, size_t *at, uint64_t v) {
    while (v >= 0x80) {
        dst[(*at)++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    dst[(*at)++] = (uint8_t)v;
}

/* The page so far becomes a body: [levels length][levels: one RLE run when all are equal, else
 * one bit-packed run of the bits][PLAIN values]. */
static int end_page(Job *j) {
    int64_t n = j->page_rows;
    if (!n) return 0;
    if (j->npages == j->cap_pages) {
        Py_ssize_t cap = j->cap_pages ? j->cap_pages * 2 : 4;
        Page *p = realloc(j->pages, (size_t)cap * sizeof(Page));
        if (!p) return -1;
        j->pages = p;
        j->cap_pages = cap;
    }
    if (out_reserve(&j->out, 4 + 10 + 1 + j->levels.len + j->values.len)) return -1;
    uint8_t *dst = j->out.p;
    size_t at0 = j->out.len, at = at0 + 4;
    if (j->page_nulls == 0 || j->page_nulls == n) {
        put_varint(dst, &at, (uint64_t)n << 1);
        dst[at++] = j->page_nulls == 0 ? 1 : 0;
    } else {
        int64_t groups = (n + 7) / 8;
        put_varint(dst, &at, ((uint64_t)groups << 1) | 1);
        memcpy(dst + at, j->levels.p, (size_t)groups);
        if (n & 7) dst[at + groups - 1] &= (uint8_t)((1u << (n & 7)) - 1); /* padding values are 0 */
        at += (size_t)groups;
    }
    uint32_t levels = (uint32_t)(at - at0 - 4);
    memcpy(dst + at0, &levels, 4);
    if (j->values.len) memcpy(dst + at, j->values.p, j->values.len); /* none yet: NULL */
    at += j->values.len;
    j->pages[j->npages++] = (Page){n, j->page_nulls, at0, at - at0};
    j->out.len = at;
    j->nulls += j->page_nulls;
    j->levels.len = j->values.len = 0;
    j->page_rows = j->page_nulls = 0;
    return 0;
}

/* Rows [from, to) of a chunk into the current page. */
static int add_rows(Job *j, const Chunk *c, int64_t from, int64_t to) {
    int64_t n = to - from;
    int e;
    if (!c->valid) {
        if (set_bits(j, n, 1)) return -1;
        for (int64_t i = from; i < to; i++)
            if ((e = add_value(j, c, i))) return e;
        j->page_rows += n;
        return 0;
    }
    if (add_bits(j, c->valid, c->bit0 + from, n)) return -1;
    int64_t set = 0, i = from;
    for (; i + 8 <= to; i += 8) { /* a byte of the bitmap at a time: a sparse column skips its NULLs */
        /* the offsets of a sparse column are read a few per cache line: fetch them ahead, or each
         * value waits for memory */
        __builtin_prefetch(c->offsets + i + 2048);
        unsigned b = byte_at(c->valid, c->bit0 + i);
        while (b) {
            int k = __builtin_ctz(b);
            if ((e = add_value(j, c, i + k))) return e;
            set++;
            b &= b - 1;
        }
    }
    for (; i < to; i++) {
        int64_t pos = c->bit0 + i;
        if ((c->valid[pos >> 3] >> (pos & 7)) & 1) {
            if ((e = add_value(j, c, i))) return e;
            set++;
        }
    }
    j->page_rows += n;
    j->page_nulls += n - set;
    return 0;
}

/* Every chunk's rows, a page ending once its values reach page_bytes (Arrow's default: 1 MiB). */
static int encode(Job *j, const Chunk *chunks, Py_ssize_t nchunks) {
    for (Py_ssize_t k = 0; k < nchunks; k++) {
        const Chunk *c = &chunks[k];
        int64_t i = 0;
        while (i < c->length) {
            /* the rows that fit in this page: their values and 4-byte lengths up to page_bytes (a
             * bound: a NULL row has no length), found by a binary search on the offsets */
            int64_t room = j->page_bytes - (int64_t)j->values.len;
            int64_t lo = i + 1, hi = c->length;
#define PLAIN_BYTES(to) ((int64_t)c->offsets[to] - c->offsets[i] + 4 * ((to) - i))
            if (PLAIN_BYTES(hi) > room) {
                while (lo < hi) {
                    int64_t mid = lo + (hi - lo) / 2;
                    if (PLAIN_BYTES(mid) >= room) hi = mid;
                    else lo = mid + 1;
                }
            }
#undef PLAIN_BYTES
            int e = add_rows(j, c, i, hi);
            if (e) return e;
            i = hi;
            if ((int64_t)j->values.len >= j->page_bytes && end_page(j)) return -1;
        }
    }
    return end_page(j);
}

static void release(Chunk *chunks, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++)
        for (int v = 0; v < chunks[k].nviews; v++) PyBuffer_Release(&chunks[k].views[v]);
    free(chunks);
}

/* (offsets, data, validity, offset, length) -> a checked Chunk */
static int chunk_of(PyObject *spec, Chunk *c) {
    PyObject *offsets_o, *data_o, *valid_o;
    Py_ssize_t offset, length;
    if (!PyArg_ParseTuple(spec, "OOOnn", &offsets_o, &data_o, &valid_o, &offset, &length)) return -1;
    if (offset < 0 || length < 0) {
        PyErr_SetString(PyExc_ValueError, "negative offset or length");
        return -1;
    }
    PyObject *objs[3] = {offsets_o, data_o, valid_o};
    for (int v = 0; v < 3; v++) {
        if (objs[v] == Py_None && v == 2) break;
        if (PyObject_GetBuffer(objs[v], &c->views[v], PyBUF_SIMPLE)) return -1;
        c->nviews++;
    }
    Py_buffer *ov = &c->views[0], *dv = &c->views[1];
    if ((size_t)ov->len < (size_t)(offset + length + 1) * 4 || (c->nviews == 3 && c->views[2].len * 8 < offset + length)) {
        PyErr_SetString(PyExc_ValueError, "buffers are shorter than offset + length");
        return -1;
    }
    const int32_t *offs = (const int32_t *)ov->buf + offset;
    if (offs[0] < 0 || offs[length] > dv->len || offs[0] > offs[length]) {
        PyErr_SetString(PyExc_ValueError, "offsets out of the data buffer");
        return -1;
    }
    c->offsets = offs;
    c->data = (const uint8_t *)dv->buf;
    c->valid = c->nviews == 3 ? (const uint8_t *)c->views[2].buf : NULL;
    c->bit0 = offset;
    c->length = length;
    return 0;
}

static PyObject *encode_strings(PyObject *self, PyObject *args) {
    PyObject *specs;
    Py_ssize_t page_bytes;
    if (!PyArg_ParseTuple(args, "On", &specs, &page_bytes)) return NULL;
    if (page_bytes < 1) return PyErr_Format(PyExc_ValueError, "page_bytes must be positive");
    PyObject *seq = PySequence_Fast(specs, "chunks must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Chunk *chunks = calloc((size_t)(n ? n : 1), sizeof(Chunk));
    if (!chunks) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n; k++)
        if (chunk_of(PySequence_Fast_GET_ITEM(seq, k), &chunks[k])) {
            release(chunks, n);
            Py_DECREF(seq);
            return NULL;
        }
    Job j = {.page_bytes = page_bytes};
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = encode(&j, chunks, n);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL, *pages = NULL;
    if (failed) {
        if (failed == E_OFFSETS) PyErr_SetString(PyExc_ValueError, "offsets out of the data buffer");
        else PyErr_NoMemory();
        goto done;
    }
    pages = PyList_New(j.npages);
    if (!pages) goto done;
    for (Py_ssize_t p = 0; p < j.npages; p++) {
        Page *pg = &j.pages[p];
        PyObject *item = Py_BuildValue("(y#LL)", (const char *)j.out.p + pg->at, (Py_ssize_t)pg->len,
                                       (long long)pg->rows, (long long)pg->nulls);
        if (!item) goto done;
        PyList_SET_ITEM(pages, p, item);
    }
    PyObject *mn = j.min ? PyBytes_FromStringAndSize((const char *)j.min, j.min_len) : (Py_INCREF(Py_None), Py_None);
    PyObject *mx = j.max ? PyBytes_FromStringAndSize((const char *)j.max, j.max_len) : (Py_INCREF(Py_None), Py_None);
    if (mn && mx) result = Py_BuildValue("(OLOOL)", pages, (long long)j.nulls, mn, mx, (long long)j.value_bytes);
    Py_XDECREF(mn);
    Py_XDECREF(mx);
done:
    Py_XDECREF(pages);
    free(j.out.p);
    free(j.levels.p);
    free(j.values.p);
    free(j.pages);
    release(chunks, n);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_strings", encode_strings, METH_VARARGS,
     "encode_strings(chunks, page_bytes, /)\n--\n\n"
     "Parquet v1 data page bodies of a string column given as Arrow arrays, each\n"
     "(offsets, data, validity or None, offset, length):\n"
     "([(body, rows, nulls), ...], nulls, min, max, value_bytes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_pages", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__pages(void) { return PyModule_Create(&module); }
