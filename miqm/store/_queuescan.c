/* Loading a queue file in C: the inner loop of QueueFile.scan (miqm/store/queues.py),
 * which stays the reference and takes every case this one hands back.
 *
 * A takeover with a deep queue reads every record header of its queue file, checks its
 * checksum and indexes it; a million records in Python cost seconds of failover. This
 * walks the records in one window of the file with the same rules: records of another
 * queue incarnation, of a checkpoint that never completed, that overrun the file or fail
 * their checksum are garbage; a delete mark that is valid and from a completed
 * checkpoint frees the record; every other record is live, marked in the space map and
 * returned. Record layout: see the queues module docstring and docs/store-format.md.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_crc32c.h"

#define BLOCK 512
#define REC_SIZE 92 /* the crc-covered header; the delete mark follows */
#define REC_HDR 108 /* header + delete mark */

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

PyDoc_STRVAR(scan_doc,
"scan_window(record_type, buf, s, b, nblocks, completed_cp, qid, space, garbage,\n"
"            max_cp, max_key) -> (records, b, max_cp, max_key)\n\n"
"Walk the queue file's records from block b, which starts at offset s of buf, while "
"they lie wholly inside buf. Live records come back as record_type(key, block, "
"nblocks, body_len, priority, msgid, correlid) and are marked in the space map "
"(bytearray); garbage blocks are appended to garbage. Returns where it stopped: at "
"nblocks, or at the first block whose record needs more of the file than buf holds "
"(the caller reads further, or takes that record itself).");

static PyObject *scan_window(PyObject *mod, PyObject *args)
{
    PyTypeObject *rtype;
    Py_buffer buf;
    PyObject *space, *garbage;
    Py_ssize_t s0;
    long long b, nblocks;
    unsigned long long completed, max_cp, max_key;
    unsigned long qid_here;
    if (!PyArg_ParseTuple(args, "O!y*nLLKkO!O!KK", &PyType_Type, &rtype, &buf, &s0, &b,
                          &nblocks, &completed, &qid_here, &PyByteArray_Type, &space,
                          &PyList_Type, &garbage, &max_cp, &max_key))
        return NULL;
    PyObject *out = NULL;
    if (!PyType_IsSubtype(rtype, &PyTuple_Type) || s0 < 0 || b < 0 ||
        nblocks > PyByteArray_GET_SIZE(space)) {
        PyErr_SetString(PyExc_ValueError, "scan_window: bad record type or bounds");
        goto fail;
    }
    out = PyList_New(0);
    if (out == NULL)
        goto fail;
    const uint8_t *data = buf.buf;
    Py_ssize_t len = buf.len;
    long long b0 = b;
    while (b < nblocks) {
        Py_ssize_t s = s0 + (Py_ssize_t)(b - b0) * BLOCK;
        if (s + REC_HDR > len)
            break; /* the caller reads the next window */
        const uint8_t *h = data + s;
        if (memcmp(h, "MIQR", 4) != 0) {
            b++;
            continue;
        }
        uint32_t crc = le32(h + 4);
        uint64_t key = le64(h + 8), cp = le64(h + 16);
        uint32_t qid = le32(h + 24), blen = le32(h + 28);
        uint8_t prio = h[32];
        uint64_t del_cp = le64(h + REC_SIZE);
        uint32_t del_crc = le32(h + REC_SIZE + 8);
        long long n = (REC_HDR + (long long)blen + BLOCK - 1) / BLOCK;
        if (cp > max_cp)
            max_cp = cp;
        if (b + n > nblocks || qid != qid_here || cp > completed) {
            PyObject *g = PyLong_FromLongLong(b);
            if (g == NULL || PyList_Append(garbage, g) < 0) {
                Py_XDECREF(g);
                goto fail;
            }
            Py_DECREF(g);
            b++;
            continue;
        }
        if (s + REC_HDR + (Py_ssize_t)blen > len)
            break; /* the record's body runs past the window: the caller takes it */
        uint32_t got = crc32c_extend(crc32c_extend(0, h + 8, REC_SIZE - 8), h + REC_HDR, blen);
        if (got != crc) {
            PyObject *g = PyLong_FromLongLong(b);
            if (g == NULL || PyList_Append(garbage, g) < 0) {
                Py_XDECREF(g);
                goto fail;
            }
            Py_DECREF(g);
            b++;
            continue;
        }
        if (del_cp) {
            if (del_cp > max_cp)
                max_cp = del_cp;
            uint8_t mark[20];
            memcpy(mark, h + 8, 8); /* key, del_cp, qid as the delete mark's crc covers */
            for (int i = 0; i < 8; i++)
                mark[8 + i] = (uint8_t)(del_cp >> (8 * i));
            memcpy(mark + 16, h + 24, 4);
            if (del_cp <= completed && crc32c(mark, sizeof mark) == del_crc) {
                b++; /* deleted: its blocks are free, later records may start inside */
                continue;
            }
        }
        memset(PyByteArray_AS_STRING(space) + b, 1, (size_t)n);
        if (key > max_key)
            max_key = key;
        PyObject *rec = rtype->tp_alloc(rtype, 7);
        if (rec == NULL)
            goto fail;
        PyObject *items[7] = {
            PyLong_FromUnsignedLongLong(key), PyLong_FromLongLong(b), PyLong_FromLongLong(n),
            PyLong_FromUnsignedLong(blen), PyLong_FromLong(prio),
            PyBytes_FromStringAndSize((const char *)h + 44, 24),
            PyBytes_FromStringAndSize((const char *)h + 68, 24),
        };
        int bad = 0;
        for (int i = 0; i < 7; i++) {
            if (items[i] == NULL)
                bad = 1;
            PyTuple_SET_ITEM(rec, i, items[i]); /* a NULL item is fine for the decref */
        }
        if (bad || PyList_Append(out, rec) < 0) {
            Py_DECREF(rec);
            goto fail;
        }
        Py_DECREF(rec);
        b += n;
    }
    PyBuffer_Release(&buf);
    return Py_BuildValue("NLKK", out, b, max_cp, max_key);
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"scan_window", scan_window, METH_VARARGS, scan_doc},
    {NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "miqm.store._queuescan",
    "Loading a queue file in C (see QueueFile.scan in miqm/store/queues.py).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__queuescan(void)
{
    crc_init();
    return PyModule_Create(&module);
}
