/* The queue file's C parts: the inner loop of QueueFile.scan (loading a queue at start
 * or takeover) and the checkpoint's writing of message bodies held in memory. The Python
 * code in miqm/store/queues.py and qmstore.py (QueueManagerStore._write_queue) stays the
 * reference and the fallback; tests compare the results byte for byte.
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

#include "_cparts.h"
#include "_crc32c.h"

#define BLOCK 512
#define REC_SIZE 92 /* the crc-covered header; the delete mark follows */
#define REC_HDR 108 /* header + delete mark */

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

/* ------------------------------------------------------------------ checkpoint writes */

#define PRIOS 10

/* A message plan() gave its blocks, for encode_next() to encode without the GIL: the
 * bytes objects are held (immutable, so their contents can be read without the GIL). */
typedef struct {
    int64_t block;
    uint64_t key;
    long prio;
    double put_time;
    PyObject *mid, *cid, *body;
} Planned;

typedef struct {
    PyObject_HEAD
    PyObject *mem;     /* key -> MemMessage (not changed while the writer runs) */
    PyObject *kept;    /* what stays in memory: non-persistent or not indexed */
    PyObject *space;   /* the queue file's space map (bytearray) */
    PyObject *keys[PRIOS], *blocks[PRIOS]; /* the index arrays ('q') */
    Py_ssize_t head[PRIOS], cursor[PRIOS];
    Py_ssize_t pos;    /* PyDict_Next position in mem */
    Py_ssize_t hint;   /* QueueFile._hint */
    uint64_t seq;
    uint32_t qid;
    Py_ssize_t run_max;
    int done;
    Planned *planned;  /* plan(): every message to write, in allocation order */
    Py_ssize_t nplanned, plan_cap, encoded;
} PendingWriter;

static PyObject *s_persistent, *s_priority, *s_put_time, *s_msgid, *s_correlid, *s_body;

static int PendingWriter_init(PendingWriter *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"mem", "keys", "blocks", "head", "space", "hint", "seq", "qid",
                             "run_max", NULL};
    PyObject *mem, *keys, *blocks, *head, *space;
    Py_ssize_t hint, run_max;
    unsigned long long seq;
    unsigned long qid;
    if (self->mem != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PendingWriter is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOOO!nKkn", kwlist, &PyDict_Type, &mem,
                                     &keys, &blocks, &head, &PyByteArray_Type, &space, &hint,
                                     &seq, &qid, &run_max))
        return -1;
    for (int p = 0; p < PRIOS; p++) {
        PyObject *k = PySequence_GetItem(keys, p), *b = PySequence_GetItem(blocks, p);
        PyObject *h = PySequence_GetItem(head, p);
        Py_ssize_t hv = h ? PyNumber_AsSsize_t(h, PyExc_OverflowError) : -1;
        Py_XDECREF(h);
        if (k == NULL || b == NULL || (hv == -1 && PyErr_Occurred())) {
            Py_XDECREF(k);
            Py_XDECREF(b);
            return -1;
        }
        self->keys[p] = k;
        self->blocks[p] = b;
        self->head[p] = self->cursor[p] = hv;
    }
    self->kept = PyDict_New();
    if (self->kept == NULL)
        return -1;
    self->mem = Py_NewRef(mem);
    self->space = Py_NewRef(space);
    self->hint = hint;
    self->seq = seq;
    self->qid = (uint32_t)qid;
    self->run_max = run_max;
    return 0;
}

static void PendingWriter_dealloc(PendingWriter *self)
{
    Py_XDECREF(self->mem);
    Py_XDECREF(self->kept);
    Py_XDECREF(self->space);
    for (int p = 0; p < PRIOS; p++) {
        Py_XDECREF(self->keys[p]);
        Py_XDECREF(self->blocks[p]);
    }
    for (Py_ssize_t i = self->encoded; i < self->nplanned; i++) {
        Py_DECREF(self->planned[i].mid);
        Py_DECREF(self->planned[i].cid);
        Py_DECREF(self->planned[i].body);
    }
    PyMem_Free(self->planned);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* QueueFile.allocate: the first run of n free blocks from the hint, else grown from the
 * free tail; marks them used and moves the hint past them. */
static Py_ssize_t allocate_blocks(PendingWriter *self, Py_ssize_t n)
{
    Py_ssize_t len = PyByteArray_GET_SIZE(self->space);
    const char *sp = PyByteArray_AS_STRING(self->space);
    Py_ssize_t i = -1, zeros = 0;
    for (Py_ssize_t j = self->hint; j < len; j++) {
        zeros = sp[j] == 0 ? zeros + 1 : 0;
        if (zeros == n) {
            i = j - n + 1;
            break;
        }
    }
    if (n == 0 && self->hint <= len)
        i = self->hint; /* bytearray.find of an empty pattern */
    if (i < 0) {
        Py_ssize_t tail = len;
        while (tail > 0 && sp[tail - 1] == 0)
            tail--;
        i = tail;
        if (i + n > len && PyByteArray_Resize(self->space, i + n) < 0)
            return -1;
        if (i + n > len) /* the new bytes of the map start free */
            memset(PyByteArray_AS_STRING(self->space) + len, 0, (size_t)(i + n - len));
    }
    memset(PyByteArray_AS_STRING(self->space) + i, 1, (size_t)n);
    self->hint = i + n;
    return i;
}

/* encode_record(key, seq, qid, priority, True, put_time, msgid, correlid, body) at h,
 * padded to `padded` bytes. Touches no Python object: callable without the GIL. */
static void encode_at(uint8_t *h, Py_ssize_t padded, uint64_t seq, uint32_t qid,
                      uint64_t key, long prio, double put_time, const char *mid,
                      Py_ssize_t mid_len, const char *cid, Py_ssize_t cid_len,
                      const char *body, Py_ssize_t body_len)
{
    memset(h, 0, (size_t)padded);
    memcpy(h, "MIQR", 4);
    put_le(h + 8, key, 8);
    put_le(h + 16, seq, 8);
    put_le(h + 24, qid, 4);
    put_le(h + 28, (uint64_t)body_len, 4);
    h[32] = (uint8_t)prio;
    h[33] = 1; /* FLAG_PERSISTENT */
    uint64_t bits;
    memcpy(&bits, &put_time, 8);
    put_le(h + 36, bits, 8);
    memcpy(h + 44, mid, (size_t)(mid_len < 24 ? mid_len : 24));
    memcpy(h + 68, cid, (size_t)(cid_len < 24 ? cid_len : 24));
    memcpy(h + REC_HDR, body, (size_t)body_len);
    put_le(h + 4, crc32c_extend(crc32c_extend(0, h + 8, REC_SIZE - 8), h + REC_HDR,
                                (size_t)body_len), 4);
}

/* The index slot of (key, prio): PriorityIndex.find with a per-priority cursor (bodies
 * come in key order). -1 if absent or removed. */
static Py_ssize_t find_slot(PendingWriter *self, long prio, int64_t key, Py_buffer *kb,
                            Py_buffer *bb)
{
    const int64_t *ks = kb->buf, *bl = bb->buf;
    Py_ssize_t n = kb->len / 8;
    for (int pass = 0; pass < 2; pass++) {
        Py_ssize_t lo = pass == 0 ? self->cursor[prio] : self->head[prio], hi = n;
        if (lo > n)
            lo = n;
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (ks[mid] < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < n && ks[lo] == key) {
            if (bl[lo] == -2)
                return -1;
            self->cursor[prio] = lo;
            return lo;
        }
    }
    return -1;
}

/* A bytes object for a message field: the object itself if it is bytes, else a copy. */
static PyObject *as_bytes(PyObject *m, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(m, name);
    if (v == NULL || PyBytes_CheckExact(v))
        return v;
    PyObject *b = PyBytes_FromObject(v);
    Py_DECREF(v);
    return b;
}

/* Room for one more planned message: 0, or -1 with MemoryError set. */
static int grow_plan(PendingWriter *self)
{
    if (self->nplanned < self->plan_cap)
        return 0;
    Py_ssize_t cap = self->plan_cap ? self->plan_cap * 2 : 1024;
    Planned *grown = PyMem_Realloc(self->planned, sizeof(Planned) * (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->planned = grown;
    self->plan_cap = cap;
    return 0;
}

PyDoc_STRVAR(plan_doc,
"plan() -> int\n\nAllocate blocks for every persistent body in mem and record them in the "
"index, without encoding anything: encode_next() does that later and needs neither the "
"index nor mem. Returns how many messages were planned.");

static PyObject *PendingWriter_plan(PendingWriter *self, PyObject *Py_UNUSED(ignored))
{
    if (self->mem == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PendingWriter is not initialised");
        return NULL;
    }
    PyObject *k, *m;
    while (!self->done) {
        if (!PyDict_Next(self->mem, &self->pos, &k, &m)) {
            self->done = 1;
            break;
        }
        PyObject *pers = PyObject_GetAttr(m, s_persistent);
        if (pers == NULL)
            return NULL;
        int persistent = PyObject_IsTrue(pers);
        Py_DECREF(pers);
        if (persistent < 0)
            return NULL;
        PyObject *prio_o = PyObject_GetAttr(m, s_priority);
        long prio = prio_o ? PyLong_AsLong(prio_o) : -1;
        Py_XDECREF(prio_o);
        if (prio == -1 && PyErr_Occurred())
            return NULL;
        long long key = PyLong_AsLongLong(k);
        if (key == -1 && PyErr_Occurred())
            return NULL;
        Py_ssize_t slot = -1;
        Py_buffer kb, bb;
        if (persistent && prio >= 0 && prio < PRIOS) {
            if (PyObject_GetBuffer(self->keys[prio], &kb, PyBUF_SIMPLE) < 0)
                return NULL;
            if (PyObject_GetBuffer(self->blocks[prio], &bb, PyBUF_WRITABLE) < 0) {
                PyBuffer_Release(&kb);
                return NULL;
            }
            if (kb.itemsize != 8 || bb.itemsize != 8 || kb.len != bb.len) {
                PyBuffer_Release(&kb);
                PyBuffer_Release(&bb);
                PyErr_SetString(PyExc_TypeError, "index arrays must be array('q') of one length");
                return NULL;
            }
            slot = find_slot(self, prio, key, &kb, &bb);
            if (slot < 0) {
                PyBuffer_Release(&kb);
                PyBuffer_Release(&bb);
            }
        }
        if (slot < 0) {
            if (PyDict_SetItem(self->kept, k, m) < 0)
                return NULL;
            continue;
        }
        Planned e = {0};
        PyObject *t = PyObject_GetAttr(m, s_put_time);
        e.put_time = t ? PyFloat_AsDouble(t) : -1.0;
        Py_XDECREF(t);
        e.mid = as_bytes(m, s_msgid);
        e.cid = e.mid ? as_bytes(m, s_correlid) : NULL;
        e.body = e.cid ? as_bytes(m, s_body) : NULL;
        Py_ssize_t b = -1;
        if (e.body != NULL && !(e.put_time == -1.0 && PyErr_Occurred()) && grow_plan(self) == 0)
            b = allocate_blocks(self, (REC_HDR + PyBytes_GET_SIZE(e.body) + BLOCK - 1) / BLOCK);
        if (b >= 0)
            ((int64_t *)bb.buf)[slot] = b;
        PyBuffer_Release(&kb);
        PyBuffer_Release(&bb);
        if (b < 0) {
            Py_XDECREF(e.mid);
            Py_XDECREF(e.cid);
            Py_XDECREF(e.body);
            return NULL;
        }
        e.block = b;
        e.key = (uint64_t)key;
        e.prio = prio;
        self->planned[self->nplanned++] = e;
    }
    return PyLong_FromSsize_t(self->nplanned);
}

PyDoc_STRVAR(encode_next_doc,
"encode_next() -> (first block, bytes) | None\n\nThe next run of what plan() planned: "
"records of contiguous blocks, at most run_max bytes, encoded with the GIL released; "
"None once all are taken.");

static PyObject *PendingWriter_encode_next(PendingWriter *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t first = self->encoded, end = first, size = 0;
    if (first >= self->nplanned)
        Py_RETURN_NONE;
    int64_t start = self->planned[first].block;
    while (end < self->nplanned) {
        const Planned *e = &self->planned[end];
        Py_ssize_t padded = (REC_HDR + PyBytes_GET_SIZE(e->body) + BLOCK - 1) / BLOCK * BLOCK;
        if (end > first && (e->block != start + size / BLOCK || size >= self->run_max))
            break;
        size += padded;
        end++;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        return NULL;
    uint8_t *h = (uint8_t *)PyBytes_AS_STRING(out);
    const Planned *es = self->planned;
    uint64_t seq = self->seq;
    uint32_t qid = self->qid;
    /* nothing here touches a Python object's state: the new bytes is not shared yet, the
     * sources are immutable bytes we hold */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = first; i < end; i++) {
        const Planned *e = &es[i];
        Py_ssize_t blen = PyBytes_GET_SIZE(e->body);
        Py_ssize_t padded = (REC_HDR + blen + BLOCK - 1) / BLOCK * BLOCK;
        encode_at(h, padded, seq, qid, e->key, e->prio, e->put_time,
                  PyBytes_AS_STRING(e->mid), PyBytes_GET_SIZE(e->mid),
                  PyBytes_AS_STRING(e->cid), PyBytes_GET_SIZE(e->cid),
                  PyBytes_AS_STRING(e->body), blen);
        h += padded;
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = first; i < end; i++) {
        Py_DECREF(self->planned[i].mid);
        Py_DECREF(self->planned[i].cid);
        Py_DECREF(self->planned[i].body);
    }
    self->encoded = end;
    PyObject *r = Py_BuildValue("LN", (long long)start, out);
    return r;
}

static PyObject *get_kept(PendingWriter *self, void *c)
{
    return Py_NewRef(self->kept ? self->kept : Py_None);
}
static PyObject *get_hint(PendingWriter *self, void *c) { return PyLong_FromSsize_t(self->hint); }

static PyGetSetDef PendingWriter_getset[] = {
    {"kept", (getter)get_kept, NULL, "the messages that stay in memory", NULL},
    {"hint", (getter)get_hint, NULL, "QueueFile._hint after the allocations", NULL},
    {NULL}
};

static PyMethodDef PendingWriter_methods[] = {
    {"plan", (PyCFunction)PendingWriter_plan, METH_NOARGS, plan_doc},
    {"encode_next", (PyCFunction)PendingWriter_encode_next, METH_NOARGS, encode_next_doc},
    {NULL}
};

static PyTypeObject PendingWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "miqm.store._queuefile.PendingWriter",
    .tp_doc = PyDoc_STR("PendingWriter(mem, keys, blocks, head, space, hint, seq, qid, "
                        "run_max): a checkpoint's writing of the bodies held in memory."),
    .tp_basicsize = sizeof(PendingWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PendingWriter_init,
    .tp_dealloc = (destructor)PendingWriter_dealloc,
    .tp_methods = PendingWriter_methods,
    .tp_getset = PendingWriter_getset,
};

static PyMethodDef module_methods[] = {
    {"scan_window", scan_window, METH_VARARGS, scan_doc},
    {NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "miqm.store._queuefile",
    "The queue file's C parts: the scan's inner loop and a checkpoint's body writes.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__queuefile(void)
{
    crc_init();
    if ((s_persistent = PyUnicode_InternFromString("persistent")) == NULL ||
        (s_priority = PyUnicode_InternFromString("priority")) == NULL ||
        (s_put_time = PyUnicode_InternFromString("put_time")) == NULL ||
        (s_msgid = PyUnicode_InternFromString("msgid")) == NULL ||
        (s_correlid = PyUnicode_InternFromString("correlid")) == NULL ||
        (s_body = PyUnicode_InternFromString("body")) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddType(m, &PendingWriterType) < 0) /* readies and adds the type */
        Py_CLEAR(m);
    return m;
}
