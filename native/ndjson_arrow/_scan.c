/*
 * Python binding of the NDJSON scanner (scan_core.h holds the scanner; see ndjson_arrow/__init__.py
 * for the contract). No Python object is touched while scanning: the GIL is released for the
 * whole pass, over a private copy of the text when the caller's buffer is writable.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h>
#include <sys/random.h>

#include "frame_core.h"
#include "scan_core.h"

/* Memory the scan allocated, handed to Python as it is: a read-only buffer that frees it. */
typedef struct {
    PyObject_HEAD void *p;
    Py_ssize_t len;
} Owned;

static void owned_dealloc(Owned *o) {
    free(o->p);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int owned_getbuffer(Owned *o, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)o, o->p, o->len, 1, flags);
}

static PyBufferProcs owned_buffer = {.bf_getbuffer = (getbufferproc)owned_getbuffer};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ndjson_arrow._scan.Buffer",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &owned_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of a scan's result (read-only buffer).",
};

/* A buffer owning ``*p`` (which becomes NULL: the caller no longer frees it), or NULL. */
static PyObject *own(void **p, size_t len) {
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (!o) return NULL;
    o->p = *p;
    o->len = (Py_ssize_t)len;
    *p = NULL;
    return (PyObject *)o;
}

static PyObject *bytes_of(const void *p, size_t n) {
    return PyBytes_FromStringAndSize(n ? (const char *)p : "", (Py_ssize_t)n);
}

/* A column as Arrow's (offsets, data, validity or None, null count), or None when every value is
 * NULL. The buffers move to Python. */
static PyObject *column_result(Scan *s, Key *key) {
    if (s->rows == 0 || key->ncells == 0) Py_RETURN_NONE;
    int32_t *offsets;
    uint8_t *valid;
    if (column_build(s, key, &offsets, &valid) || (!key->data.p && !(key->data.p = malloc(1)))) return PyErr_NoMemory();
    int64_t rows = s->rows;
    PyObject *validity = valid ? own((void **)&valid, ((size_t)rows + 7) >> 3) : Py_NewRef(Py_None);
    PyObject *offs = own((void **)&offsets, ((size_t)rows + 1) * sizeof(int32_t));
    PyObject *data = own((void **)&key->data.p, key->data.len);
    free(offsets); /* still ours if own() failed */
    free(valid);
    if (!validity || !offs || !data) {
        Py_XDECREF(validity);
        Py_XDECREF(offs);
        Py_XDECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NNNL)", offs, data, validity, (long long)(rows - key->ncells));
}

/* The extra list as (row offsets, row validity, null rows, key offsets, key bytes, value offsets,
 * value bytes, entries), or None when empty. */
static PyObject *extra_result(Scan *s) {
    ExtraParts x;
    int got = extra_build(s, &x);
    if (got == 0) Py_RETURN_NONE;
    if (got == -1) return PyErr_NoMemory();
    if (got == -2) {
        PyErr_SetString(PyExc_OverflowError, "extra values over 2 GiB in one chunk");
        return NULL;
    }
    int64_t rows = s->rows;
    PyObject *result = Py_BuildValue(
        "(NNLNNNNn)", bytes_of(x.row_off, ((size_t)rows + 1) * sizeof(int32_t)),
        bytes_of(x.valid, ((size_t)rows + 7) >> 3), (long long)x.nulls,
        bytes_of(x.key_off, ((size_t)x.entries + 1) * sizeof(int32_t)), bytes_of(x.kdata, x.kl),
        bytes_of(x.val_off, ((size_t)x.entries + 1) * sizeof(int32_t)), bytes_of(x.vdata, x.vl), (Py_ssize_t)x.entries);
    extra_free(&x);
    return result;
}

static PyObject *scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *names_[] = {"", "", "", "first_line", "max_cells", NULL};
    Py_buffer view;
    PyObject *known;
    Py_ssize_t room;
    long long first_line = 1, max_cells = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*On|$LL", names_, &view, &known, &room, &first_line, &max_cells))
        return NULL;
    Scan s;
    uint8_t *copy = NULL;
    int ready = 0;
    PyObject *result = NULL, *names = NULL, *columns = NULL, *bad = NULL, *extra = NULL, *lines = NULL;
    PyObject *seq = PySequence_Fast(known, "known keys must be a sequence of str");
    if (!seq) goto out;
    if (view.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "scan takes at most 2 GiB at a time");
        goto out;
    }
    if (first_line < 1 || first_line > INT64_MAX - (long long)view.len - 1) {
        PyErr_SetString(PyExc_OverflowError, "first_line must be at least 1, and the text's line numbers fit in 64 bits");
        goto out;
    }
    if (scan_init(&s, room, max_cells, first_line)) {
        PyErr_NoMemory();
        goto out;
    }
    ready = 1;
    Py_ssize_t nknown = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < nknown; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t n;
        const char *name = PyUnicode_Check(item) ? PyUnicode_AsUTF8AndSize(item, &n) : NULL;
        if (!name) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "known keys must be str");
            goto out;
        }
        int got = scan_add_known(&s, (const uint8_t *)name, (size_t)n);
        if (got == -2) {
            PyErr_Format(PyExc_ValueError, "known key %R given twice", item);
            goto out;
        }
        if (got) {
            PyErr_NoMemory();
            goto out;
        }
    }
    const uint8_t *data = view.buf;
    if (!view.readonly && view.len) { /* the caller may write to it while the GIL is released */
        copy = malloc((size_t)view.len);
        if (!copy) {
            PyErr_NoMemory();
            goto out;
        }
        memcpy(copy, view.buf, (size_t)view.len);
        data = copy;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = scan_run(&s, data, (size_t)view.len);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto out;
    }
    names = PyList_New(0);
    columns = PyList_New(0);
    bad = PyList_New(0);
    if (!names || !columns || !bad) goto out;
    for (ptrdiff_t k = 0; k < s.nkeys; k++) {
        Key *key = &s.keys[k];
        if (key->spilled) continue;
        if (k >= s.known) {
            PyObject *name = PyUnicode_DecodeUTF8(key->name, (Py_ssize_t)key->name_len, "strict");
            if (!name || PyList_Append(names, name)) {
                Py_XDECREF(name);
                goto out;
            }
            Py_DECREF(name);
        }
        PyObject *col = column_result(&s, key);
        if (!col || PyList_Append(columns, col)) {
            Py_XDECREF(col);
            goto out;
        }
        Py_DECREF(col);
    }
    for (size_t i = 0; i < s.nbad; i += 4) {
        PyObject *t = Py_BuildValue("(LLLL)", (long long)s.bad[i], (long long)s.bad[i + 1], (long long)s.bad[i + 2],
                                    (long long)s.bad[i + 3]);
        if (!t || PyList_Append(bad, t)) {
            Py_XDECREF(t);
            goto out;
        }
        Py_DECREF(t);
    }
    extra = extra_result(&s);
    if (!extra) goto out;
    lines = own((void **)&s.lines, (size_t)s.rows * sizeof(int64_t));
    if (!lines) goto out;
    result = Py_BuildValue("(OOOLOOnLK)", names, columns, lines, (long long)s.rows, bad, extra, (Py_ssize_t)s.consumed,
                           (long long)s.next_line, (unsigned long long)s.probes);
out:
    Py_XDECREF(seq);
    Py_XDECREF(names);
    Py_XDECREF(columns);
    Py_XDECREF(bad);
    Py_XDECREF(extra);
    Py_XDECREF(lines);
    if (ready) scan_free(&s);
    free(copy);
    PyBuffer_Release(&view);
    return result;
}


/* -- the framer: JSON documents that are not NDJSON, as NDJSON (frame_core.h) ---------------- */
typedef struct {
    PyObject_HEAD
    Frame frame;
    int ready;
} FramerObject;

static int framer_init(FramerObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"max_record", "first_line", NULL};
    Py_ssize_t max_record;
    long long first_line = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|L", names, &max_record, &first_line)) return -1;
    if (max_record < 1 || first_line < 1) {
        PyErr_SetString(PyExc_ValueError, "max_record and first_line must be at least 1");
        return -1;
    }
    if (self->ready) frame_free(&self->frame);
    frame_init(&self->frame, (size_t)max_record, first_line);
    self->ready = 1;
    return 0;
}

static void framer_dealloc(FramerObject *self) {
    if (self->ready) frame_free(&self->frame);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* (records, starts, longs): the complete records so far, a line each; the int64 start line of each;
 * (line, size, head) of each record over max_record */
static PyObject *framer_take(FramerObject *self) {
    Frame *f = &self->frame;
    if (f->nomem) return PyErr_NoMemory();
    PyObject *longs = PyList_New(0);
    if (!longs) return NULL;
    for (size_t i = 0; i < f->nlongs; i++) {
        LongRecord *l = &f->longs[i];
        PyObject *t = Py_BuildValue("(Lny#)", (long long)l->line, (Py_ssize_t)l->size,
                                    (const char *)(f->heads.p ? f->heads.p + l->heads_at : (uint8_t *)""), (Py_ssize_t)l->head);
        if (!t || PyList_Append(longs, t)) {
            Py_XDECREF(t);
            Py_DECREF(longs);
            return NULL;
        }
        Py_DECREF(t);
    }
    PyObject *result = Py_BuildValue("(NNN)", bytes_of(f->out.p, f->done), bytes_of(f->starts, f->nstarts * sizeof(int64_t)), longs);
    if (result) frame_take(f);
    return result;
}

static PyObject *framer_feed(FramerObject *self, PyObject *arg) {
    if (!self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Framer not initialised");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)) return NULL;
    /* the GIL stays held: the framer's state belongs to this object, and another thread could feed it */
    frame_feed(&self->frame, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return framer_take(self);
}

static PyObject *framer_finish(FramerObject *self, PyObject *unused) {
    if (!self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Framer not initialised");
        return NULL;
    }
    frame_finish(&self->frame);
    return framer_take(self);
}

static PyObject *framer_open_array(FramerObject *self, void *unused) {
    return PyLong_FromLongLong(self->ready ? (long long)frame_open_array(&self->frame) : 0);
}

static PyMemberDef framer_members[] = {
    {"line", T_LONGLONG, offsetof(FramerObject, frame) + offsetof(Frame, line), READONLY, "the line the next byte is on"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef framer_getset[] = {
    {"open_array", (getter)framer_open_array, NULL, "the line of the top-level array the text is inside (0: none)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef framer_methods[] = {
    {"feed", (PyCFunction)framer_feed, METH_O, "feed(block) -> (records, starts, longs): see ndjson_arrow.Framer"},
    {"finish", (PyCFunction)framer_finish, METH_NOARGS, "finish() -> (records, starts, longs): the text ended"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FramerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ndjson_arrow._scan.Framer",
    .tp_basicsize = sizeof(FramerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Framer(max_record, first_line=1): a JSON document's records, a line each (see ndjson_arrow)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)framer_init,
    .tp_dealloc = (destructor)framer_dealloc,
    .tp_methods = framer_methods,
    .tp_members = framer_members,
    .tp_getset = framer_getset,
};

static PyObject *sniff(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)) return NULL;
    int got = frame_sniff(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong(got);
}

/* LF bytes in p[0..n): a loop the compiler turns into vector compares (SSE2 is baseline x86-64) */
__attribute__((optimize("O3"))) static size_t count_lf(const uint8_t *p, size_t n) {
    size_t count = 0;
    while (n) {
        size_t block = n < 255 * 16 ? n : 255 * 16; /* a byte counter per lane holds 255 */
        uint8_t lanes[16] = {0};
        for (size_t i = 0; i + 16 <= block; i += 16)
            for (int k = 0; k < 16; k++) lanes[k] += p[i + k] == '\n';
        for (int k = 0; k < 16; k++) count += lanes[k];
        for (size_t i = block & ~(size_t)15; i < block; i++) count += p[i] == '\n';
        p += block;
        n -= block;
    }
    return count;
}

static PyObject *newlines(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start = 0, end = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, "y*|nn", &view, &start, &end)) return NULL;
    if (end > view.len) end = view.len;
    if (start < 0) start = 0;
    size_t count = 0;
    if (start < end) {
        Py_BEGIN_ALLOW_THREADS
        count = count_lf((const uint8_t *)view.buf + start, (size_t)(end - start));
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyLong_FromSize_t(count);
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_VARARGS | METH_KEYWORDS,
     "scan(data, known, room, *, first_line=1, max_cells=0)\n"
     "-> (new_keys, columns, lines, rows, bad, extra, consumed, next_line, probes)\n\n"
     "NDJSON bytes -> string columns; see ndjson_arrow.scan for the contract."},
    {"sniff", sniff, METH_O,
     "sniff(head) -> 1 (a JSON document: an array, or a first object past its line unless a cut line "
     "before whole ones: frame_core.h, frame_sniff), 0 (NDJSON), -1 (unknown yet)"},
    {"newlines", newlines, METH_VARARGS,
     "newlines(data, start=0, end=len(data)) -> int\n\nHow many LF bytes data[start:end] holds (no copy)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_scan", .m_doc = NULL, .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    uint64_t seed[2];
    if (getrandom(seed, sizeof(seed), 0) != (ssize_t)sizeof(seed)) {
        PyErr_SetString(PyExc_OSError, "no random bytes for the scanner's hash key");
        return NULL;
    }
    scan_seed(seed[0], seed[1]);
    if (PyType_Ready(&OwnedType) < 0 || PyType_Ready(&FramerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Framer", (PyObject *)&FramerType)) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) || PyModule_AddIntConstant(m, "MAX_LINE_KEYS", MAX_LINE_KEYS) ||
        PyModule_AddIntConstant(m, "MAX_SCAN_KEYS", MAX_SCAN_KEYS)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
