/*
 * Thrift's compact protocol, read and written generically (field id, type, value), for Parquet's
 * footers and page headers (glue_processor/write/thrift.py holds the data model).
 *
 * Why native: a footer of a wide file has tens of thousands of fields (500 columns x their
 * metadata), and the write stage decodes every part's footer and encodes one per output file; in
 * Python that cost ~0.1 s per part, more than copying the part's bytes.
 *
 * Values: STRUCT -> list of Field(id, type, value) (this module's type; encode also takes any
 * object with those attributes);
 * LIST/SET -> (element type, list); MAP -> (key type << 4 | value type, list of (key, value));
 * BINARY -> bytes; I16/I32/I64 -> int; DOUBLE -> float; BYTE -> int; TRUE/FALSE -> bool (a
 * struct's bool field keeps the type it was read with; encode picks it from the value).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

enum { CT_STOP, CT_TRUE, CT_FALSE, CT_BYTE, CT_I16, CT_I32, CT_I64, CT_DOUBLE, CT_BINARY, CT_LIST, CT_SET, CT_MAP, CT_STRUCT };
#define MAX_DEPTH 64

static PyObject *s_id, *s_type, *s_value;

/* -- Field: (id, type, value), mutable ------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    PyObject *id, *type, *value;
} FieldObject;

static PyTypeObject FieldType;

static PyObject *field_make(PyObject *id, PyObject *type, PyObject *value) {
    FieldObject *f = PyObject_GC_New(FieldObject, &FieldType);
    if (!f) return NULL;
    Py_INCREF(id);
    Py_INCREF(type);
    Py_INCREF(value);
    f->id = id;
    f->type = type;
    f->value = value;
    PyObject_GC_Track(f);
    return (PyObject *)f;
}

static PyObject *field_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"id", "type", "value", NULL};
    PyObject *id, *type, *value;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:Field", names, &id, &type, &value)) return NULL;
    return field_make(id, type, value);
}

static int field_traverse(FieldObject *f, visitproc visit, void *arg) {
    Py_VISIT(f->id);
    Py_VISIT(f->type);
    Py_VISIT(f->value);
    return 0;
}

static int field_clear(FieldObject *f) {
    Py_CLEAR(f->id);
    Py_CLEAR(f->type);
    Py_CLEAR(f->value);
    return 0;
}

static void field_dealloc(FieldObject *f) {
    PyObject_GC_UnTrack(f);
    field_clear(f);
    PyObject_GC_Del(f);
}

static PyObject *field_repr(FieldObject *f) { return PyUnicode_FromFormat("Field(id=%R, type=%R, value=%R)", f->id, f->type, f->value); }

static PyObject *field_richcompare(PyObject *a, PyObject *b, int op) {
    if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(b, &FieldType)) Py_RETURN_NOTIMPLEMENTED;
    FieldObject *x = (FieldObject *)a, *y = (FieldObject *)b;
    int eq = 1;
    PyObject *pairs[3][2] = {{x->id, y->id}, {x->type, y->type}, {x->value, y->value}};
    for (int i = 0; i < 3 && eq == 1; i++) eq = PyObject_RichCompareBool(pairs[i][0], pairs[i][1], Py_EQ);
    if (eq < 0) return NULL;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

/* id, type and value may be replaced but never deleted: every use of a Field reads all three */
static PyObject **field_slot(FieldObject *f, void *which) {
    return which == (void *)0 ? &f->id : which == (void *)1 ? &f->type : &f->value;
}

static PyObject *field_get(FieldObject *f, void *which) { return Py_NewRef(*field_slot(f, which)); }

static int field_set(FieldObject *f, PyObject *value, void *which) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a Field's id, type and value cannot be deleted");
        return -1;
    }
    Py_SETREF(*field_slot(f, which), Py_NewRef(value));
    return 0;
}

static PyGetSetDef field_getset[] = {
    {"id", (getter)field_get, (setter)field_set, "field id", (void *)0},
    {"type", (getter)field_get, (setter)field_set, "compact-protocol type", (void *)1},
    {"value", (getter)field_get, (setter)field_set, "the value", (void *)2},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FieldType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ndjson_arrow._thrift.Field",
    .tp_basicsize = sizeof(FieldObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Field(id, type, value): one field of a compact-protocol struct",
    .tp_new = field_new,
    .tp_dealloc = (destructor)field_dealloc,
    .tp_traverse = (traverseproc)field_traverse,
    .tp_clear = (inquiry)field_clear,
    .tp_repr = (reprfunc)field_repr,
    .tp_richcompare = field_richcompare,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_getset = field_getset,
};

/* -- decode -------------------------------------------------------------------------------- */
typedef struct {
    const uint8_t *p, *end;
    int depth;
} Reader;

static int fail(const char *what) {
    PyErr_Format(PyExc_ValueError, "compact protocol: %s", what);
    return -1;
}

static int read_byte(Reader *r, uint8_t *b) {
    if (r->p >= r->end) return fail("truncated");
    *b = *r->p++;
    return 0;
}

static int read_varint(Reader *r, uint64_t *v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t b;
        if (read_byte(r, &b)) return -1;
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = result;
            return 0;
        }
    }
    return fail("varint too long");
}

static int read_zigzag(Reader *r, int64_t *v) {
    uint64_t n;
    if (read_varint(r, &n)) return -1;
    *v = (int64_t)(n >> 1) ^ -(int64_t)(n & 1);
    return 0;
}

static PyObject *read_struct(Reader *r);

static PyObject *read_value(Reader *r, int type) {
    uint8_t b;
    uint64_t n;
    int64_t v;
    switch (type) {
    case CT_TRUE:
    case CT_FALSE: /* inside a container: one byte */
        if (read_byte(r, &b)) return NULL;
        return PyBool_FromLong(b == CT_TRUE);
    case CT_BYTE:
        if (read_byte(r, &b)) return NULL;
        return PyLong_FromLong((int8_t)b);
    case CT_I16:
    case CT_I32:
    case CT_I64:
        if (read_zigzag(r, &v)) return NULL;
        if ((type == CT_I16 && (v < INT16_MIN || v > INT16_MAX)) || (type == CT_I32 && (v < INT32_MIN || v > INT32_MAX)))
            return fail("an integer does not fit its type"), NULL; /* as encode refuses it */
        return PyLong_FromLongLong(v);
    case CT_DOUBLE: {
        double d;
        if (r->end - r->p < 8) return fail("truncated"), NULL;
        memcpy(&d, r->p, 8); /* little-endian hosts only (x86-64, aarch64) */
        r->p += 8;
        return PyFloat_FromDouble(d);
    }
    case CT_BINARY:
        if (read_varint(r, &n)) return NULL;
        if ((uint64_t)(r->end - r->p) < n) return fail("truncated"), NULL;
        r->p += n;
        return PyBytes_FromStringAndSize((const char *)r->p - n, (Py_ssize_t)n);
    case CT_LIST:
    case CT_SET: {
        if (read_byte(r, &b)) return NULL;
        uint64_t size = b >> 4;
        int elem = b & 0x0F;
        if (size == 15 && read_varint(r, &size)) return NULL;
        if (size > (uint64_t)(r->end - r->p)) return fail("list longer than its bytes"), NULL; /* >= 1 byte each */
        if (++r->depth > MAX_DEPTH) return fail("nested too deep"), NULL;
        PyObject *items = PyList_New((Py_ssize_t)size);
        if (!items) return NULL;
        for (uint64_t i = 0; i < size; i++) {
            PyObject *item = read_value(r, elem);
            if (!item) {
                Py_DECREF(items);
                return NULL;
            }
            PyList_SET_ITEM(items, (Py_ssize_t)i, item);
        }
        r->depth--;
        PyObject *out = Py_BuildValue("(iN)", elem, items);
        return out;
    }
    case CT_MAP: {
        if (read_varint(r, &n)) return NULL;
        uint8_t kv = 0;
        if (n && read_byte(r, &kv)) return NULL;
        if (n > (uint64_t)(r->end - r->p)) return fail("map longer than its bytes"), NULL;
        if (++r->depth > MAX_DEPTH) return fail("nested too deep"), NULL;
        PyObject *pairs = PyList_New((Py_ssize_t)n);
        if (!pairs) return NULL;
        for (uint64_t i = 0; i < n; i++) {
            PyObject *k = read_value(r, kv >> 4);
            PyObject *val = k ? read_value(r, kv & 0x0F) : NULL;
            PyObject *pair = val ? PyTuple_Pack(2, k, val) : NULL;
            Py_XDECREF(k);
            Py_XDECREF(val);
            if (!pair) {
                Py_DECREF(pairs);
                return NULL;
            }
            PyList_SET_ITEM(pairs, (Py_ssize_t)i, pair);
        }
        r->depth--;
        return Py_BuildValue("(iN)", kv, pairs);
    }
    case CT_STRUCT:
        return read_struct(r);
    default:
        PyErr_Format(PyExc_ValueError, "compact protocol: unknown type %d", type);
        return NULL;
    }
}

static PyObject *read_struct(Reader *r) {
    if (++r->depth > MAX_DEPTH) return fail("nested too deep"), NULL;
    PyObject *fields = PyList_New(0);
    if (!fields) return NULL;
    int64_t last = 0;
    for (;;) {
        uint8_t head;
        if (read_byte(r, &head)) goto error;
        int type = head & 0x0F;
        if (type == CT_STOP) break;
        int64_t fid;
        if (head >> 4) {
            fid = last + (head >> 4);
        } else if (read_zigzag(r, &fid)) {
            goto error;
        }
        if (fid < INT16_MIN || fid > INT16_MAX) { /* a field id is an i16 */
            fail("field id out of range");
            goto error;
        }
        PyObject *value = (type == CT_TRUE || type == CT_FALSE) ? PyBool_FromLong(type == CT_TRUE) : read_value(r, type);
        if (!value) goto error;
        PyObject *id_o = PyLong_FromLongLong(fid), *type_o = PyLong_FromLong(type);
        PyObject *field = id_o && type_o ? field_make(id_o, type_o, value) : NULL;
        Py_XDECREF(id_o);
        Py_XDECREF(type_o);
        Py_DECREF(value);
        if (!field) goto error;
        int rc = PyList_Append(fields, field);
        Py_DECREF(field);
        if (rc) goto error;
        last = fid;
    }
    r->depth--;
    return fields;
error:
    Py_DECREF(fields);
    return NULL;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    Reader r = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len, 0};
    /* tens of thousands of new container objects: the cyclic GC would scan them over and over */
    int was_enabled = PyGC_Disable();
    PyObject *out = read_struct(&r);
    if (was_enabled) PyGC_Enable();
    PyBuffer_Release(&view);
    return out;
}

/* -- encode -------------------------------------------------------------------------------- */
typedef struct {
    uint8_t *p;
    size_t len, cap;
    int depth;
} Writer;

static int put(Writer *w, const void *src, size_t n) {
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n) cap *= 2;
        uint8_t *p = PyMem_Realloc(w->p, cap);
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
    return 0;
}

static int put_byte(Writer *w, uint8_t b) { return put(w, &b, 1); }

static int put_varint(Writer *w, uint64_t v) {
    uint8_t buf[10];
    int n = 0;
    while (v >= 0x80) {
        buf[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    buf[n++] = (uint8_t)v;
    return put(w, buf, (size_t)n);
}

static int put_zigzag(Writer *w, int64_t v) { return put_varint(w, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }

static int long_of(PyObject *o, int64_t *v) {
    long long x = PyLong_AsLongLong(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    *v = x;
    return 0;
}

static int write_struct(Writer *w, PyObject *fields);

/* 0 when lo <= x <= hi, else an OverflowError (a reader would reject the value) */
static int in_range(int64_t x, int64_t lo, int64_t hi) {
    if (x >= lo && x <= hi) return 0;
    PyErr_Format(PyExc_OverflowError, "compact protocol: %lld does not fit its type", (long long)x);
    return -1;
}

/* a (type, items) pair as list/set/map values are held */
static int pair_of(PyObject *v, long *tag, PyObject **items) {
    if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 2 || !PyList_Check(PyTuple_GET_ITEM(v, 1))) {
        PyErr_SetString(PyExc_TypeError, "a list, set or map value is (type, list)");
        return -1;
    }
    *tag = PyLong_AsLong(PyTuple_GET_ITEM(v, 0));
    if (*tag == -1 && PyErr_Occurred()) return -1;
    *items = PyTuple_GET_ITEM(v, 1);
    return 0;
}

static int write_value(Writer *w, int type, PyObject *v) {
    int64_t x;
    switch (type) {
    case CT_TRUE:
    case CT_FALSE: {
        int t = PyObject_IsTrue(v);
        return t < 0 ? -1 : put_byte(w, t ? CT_TRUE : CT_FALSE);
    }
    case CT_BYTE:
        if (long_of(v, &x) || in_range(x, INT8_MIN, INT8_MAX)) return -1;
        return put_byte(w, (uint8_t)(int8_t)x);
    case CT_I16:
    case CT_I32:
    case CT_I64:
        if (long_of(v, &x)) return -1;
        if (type == CT_I16 && in_range(x, INT16_MIN, INT16_MAX)) return -1;
        if (type == CT_I32 && in_range(x, INT32_MIN, INT32_MAX)) return -1;
        return put_zigzag(w, x);
    case CT_DOUBLE: {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        return put(w, &d, 8);
    }
    case CT_BINARY: {
        char *s;
        Py_ssize_t n;
        if (PyBytes_AsStringAndSize(v, &s, &n)) return -1;
        return put_varint(w, (uint64_t)n) || put(w, s, (size_t)n) ? -1 : 0;
    }
    case CT_LIST:
    case CT_SET:
    case CT_MAP: {
        long tag;
        PyObject *items;
        if (pair_of(v, &tag, &items)) return -1;
        Py_ssize_t n = PyList_GET_SIZE(items);
        if (++w->depth > MAX_DEPTH) return fail("nested too deep");
        if (type == CT_MAP) {
            if (put_varint(w, (uint64_t)n) || (n && put_byte(w, (uint8_t)tag))) return -1;
        } else if (n < 15) {
            if (put_byte(w, (uint8_t)((n << 4) | (tag & 0x0F)))) return -1;
        } else if (put_byte(w, (uint8_t)(0xF0 | (tag & 0x0F))) || put_varint(w, (uint64_t)n)) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < n && i < PyList_GET_SIZE(items); i++) {
            PyObject *item = Py_NewRef(PyList_GET_ITEM(items, i)); /* held: see write_struct */
            int rc;
            if (type != CT_MAP) {
                rc = write_value(w, (int)(tag & 0x0F), item);
            } else if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
                PyErr_SetString(PyExc_TypeError, "a map's items are (key, value)");
                rc = -1;
            } else {
                rc = write_value(w, (int)(tag >> 4), PyTuple_GET_ITEM(item, 0)) ||
                     write_value(w, (int)(tag & 0x0F), PyTuple_GET_ITEM(item, 1));
            }
            Py_DECREF(item);
            if (rc) return -1;
        }
        if (PyList_GET_SIZE(items) != n) { /* its header already gave n */
            PyErr_SetString(PyExc_RuntimeError, "a list changed while it was encoded");
            return -1;
        }
        w->depth--;
        return 0;
    }
    case CT_STRUCT:
        return write_struct(w, v);
    default:
        PyErr_Format(PyExc_ValueError, "compact protocol: unknown type %d", type);
        return -1;
    }
}

static int write_struct(Writer *w, PyObject *fields) {
    if (!PyList_Check(fields)) {
        PyErr_SetString(PyExc_TypeError, "a struct is a list of fields");
        return -1;
    }
    if (++w->depth > MAX_DEPTH) return fail("nested too deep");
    int64_t last = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(fields); i++) {
        /* held while it is read: another object's attribute lookup may run code that changes the list */
        PyObject *f = Py_NewRef(PyList_GET_ITEM(fields, i)), *id_o, *type_o, *value;
        if (Py_IS_TYPE(f, &FieldType)) {
            FieldObject *fo = (FieldObject *)f;
            id_o = fo->id, type_o = fo->type, value = fo->value;
            Py_XINCREF(id_o);
            Py_XINCREF(type_o);
            Py_XINCREF(value);
            if (!id_o || !type_o || !value) PyErr_SetString(PyExc_AttributeError, "a field without id, type or value");
        } else {
            id_o = PyObject_GetAttr(f, s_id);
            type_o = id_o ? PyObject_GetAttr(f, s_type) : NULL;
            value = type_o ? PyObject_GetAttr(f, s_value) : NULL;
        }
        int64_t fid = 0, type = 0;
        int rc = !value || long_of(id_o, &fid) || long_of(type_o, &type);
        if (!rc && in_range(fid, INT16_MIN, INT16_MAX)) rc = 1; /* a field id is an i16 */
        Py_XDECREF(id_o);
        Py_XDECREF(type_o);
        if (!rc) {
            int wire = (int)type;
            if (type == CT_TRUE || type == CT_FALSE) {
                int t = PyObject_IsTrue(value);
                if (t < 0) rc = 1;
                wire = t ? CT_TRUE : CT_FALSE;
            }
            int64_t delta = fid - last;
            if (!rc) {
                if (delta > 0 && delta <= 15) rc = put_byte(w, (uint8_t)((delta << 4) | wire));
                else rc = put_byte(w, (uint8_t)wire) || put_zigzag(w, fid);
            }
            if (!rc && wire != CT_TRUE && wire != CT_FALSE) rc = write_value(w, wire, value);
            last = fid;
        }
        Py_XDECREF(value);
        Py_DECREF(f);
        if (rc) return -1;
    }
    w->depth--;
    return put_byte(w, CT_STOP);
}

static PyObject *encode(PyObject *self, PyObject *fields) {
    Writer w = {0};
    PyObject *out = NULL;
    if (!write_struct(&w, fields)) out = PyBytes_FromStringAndSize((const char *)w.p, (Py_ssize_t)w.len);
    PyMem_Free(w.p);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(data, /)\n--\n\nThe compact-protocol struct in data, as a list of Field(id, type, value)."},
    {"encode", encode, METH_O, "encode(fields, /)\n--\n\nA list of fields (.id, .type, .value) as a compact-protocol struct."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_thrift", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__thrift(void) {
    s_id = PyUnicode_InternFromString("id");
    s_type = PyUnicode_InternFromString("type");
    s_value = PyUnicode_InternFromString("value");
    if (!s_id || !s_type || !s_value || PyType_Ready(&FieldType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&FieldType);
    if (PyModule_AddObject(m, "Field", (PyObject *)&FieldType) < 0) {
        Py_DECREF(&FieldType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
