/*
 * libFuzzer harness of the Thrift compact-protocol codec (ndjson_arrow/_thrift.c, compiled in with
 * AddressSanitizer and UBSan; the Python runtime it needs is embedded, uninstrumented).
 *
 * Every input is decoded; what decodes must encode back to bytes that decode to the same fields,
 * and encode to the same bytes again (a fixed point), so decode and encode agree on every value
 * either accepts. Python objects the codec leaks are caught by counting the interpreter's
 * allocated blocks over repeated runs of the same input (LeakSanitizer sees C allocations).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

PyMODINIT_FUNC PyInit__thrift(void);
PyAPI_FUNC(Py_ssize_t) _Py_GetAllocatedBlocks(void); /* sys.getallocatedblocks() */

static PyObject *decode, *encode;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            PyErr_Print();                                                                         \
            fprintf(stderr, "check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    PyImport_AppendInittab("_thrift", PyInit__thrift);
    Py_InitializeEx(0);
    PyObject *module = PyImport_ImportModule("_thrift");
    CHECK(module != NULL);
    decode = PyObject_GetAttrString(module, "decode");
    encode = PyObject_GetAttrString(module, "encode");
    CHECK(decode && encode);
    Py_DECREF(module);
    return 0;
}

static void round_trip(const uint8_t *data, size_t n) {
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)n);
    CHECK(bytes != NULL);
    PyObject *fields = PyObject_CallOneArg(decode, bytes);
    Py_DECREF(bytes);
    if (!fields) { /* refused: it must say why with a ValueError */
        CHECK(PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_OverflowError));
        PyErr_Clear();
        return;
    }
    PyObject *once = PyObject_CallOneArg(encode, fields);
    CHECK(once != NULL);
    PyObject *again = PyObject_CallOneArg(decode, once);
    CHECK(again != NULL);
    PyObject *twice = PyObject_CallOneArg(encode, again);
    CHECK(twice != NULL);
    CHECK(PyBytes_GET_SIZE(once) == PyBytes_GET_SIZE(twice));
    CHECK(memcmp(PyBytes_AS_STRING(once), PyBytes_AS_STRING(twice), (size_t)PyBytes_GET_SIZE(once)) == 0);
    Py_DECREF(fields);
    Py_DECREF(once);
    Py_DECREF(again);
    Py_DECREF(twice);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    round_trip(data, n); /* the first run may fill the interpreter's caches and free lists */
    Py_ssize_t before = _Py_GetAllocatedBlocks();
    for (int i = 0; i < 3; i++) round_trip(data, n);
    CHECK(_Py_GetAllocatedBlocks() <= before);
    return 0;
}
