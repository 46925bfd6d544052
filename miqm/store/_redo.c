/* Restart's redo of PUT records in C: the twin of the Python redo in
 * miqm/store/recovery.py (_put_redo), which stays the reference and the fallback.
 *
 * A PUT record is most of a log. Its redo is a few dictionary and array updates and
 * one message object; done in Python that is some sixty bytecodes per record, which
 * restart pays a million times. Here the same updates go through the C API on the same
 * Python objects, in the same order, with the same results (tests compare the state
 * both leave). Anything unexpected (a short record, a name that is not UTF-8, a
 * priority outside the index) raises the same kind of error the Python redo would, and
 * the caller hands the record to the general decoder.
 *
 * Record layout (little-endian): type u8 | txid u64 | name length u16 | name |
 * key u64 | priority u8 | put time f64 | msgid 24 | correlid 24 | body length u32 | body.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_cparts.h"

#define PUT_FIXED 69 /* key .. body length */

typedef struct {
    PyObject_HEAD
    PyObject *state;    /* StoreState */
    PyObject *queues;   /* state.queues (dict) */
    PyObject *found;    /* raw name (bytes) -> (name, queue) */
    PyObject *message;  /* MemMessage */
    PyObject *only;     /* state.only */
    char prefix[4];
    /* the last queue seen, to skip the lookup for runs of one queue */
    char *last_raw;
    Py_ssize_t last_len;
    PyObject *last_name, *last_queue;
} PutRedo;

static PyObject *s_last_uow, *s_txid, *s_uows, *s_get_or_make, *s_first_lsn, *s_ops,
    *s_index, *s_keys, *s_blocks, *s_lens, *s_find, *s_add, *s_append, *s_mem, *s_present,
    *s_msgids, *s_correlids, *s_uncommitted, *s_next_key, *s_P, *s_queues, *s_only;

static void forget_last(PutRedo *self)
{
    PyMem_Free(self->last_raw);
    self->last_raw = NULL;
    self->last_len = -1;
    Py_CLEAR(self->last_name);
    Py_CLEAR(self->last_queue);
}

static int PutRedo_init(PutRedo *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"state", "message_type", "prefix", NULL};
    PyObject *state, *message;
    Py_buffer prefix;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOy*", kwlist, &state, &message, &prefix))
        return -1;
    if (prefix.len != 4) {
        PyBuffer_Release(&prefix);
        PyErr_SetString(PyExc_ValueError, "the msgid prefix must be 4 bytes");
        return -1;
    }
    memcpy(self->prefix, prefix.buf, 4);
    PyBuffer_Release(&prefix);
    PyObject *queues = PyObject_GetAttr(state, s_queues);
    if (queues == NULL)
        return -1;
    if (!PyDict_Check(queues)) {
        Py_DECREF(queues);
        PyErr_SetString(PyExc_TypeError, "state.queues must be a dict");
        return -1;
    }
    PyObject *only = PyObject_GetAttr(state, s_only);
    if (only == NULL) {
        Py_DECREF(queues);
        return -1;
    }
    PyObject *found = PyDict_New();
    if (found == NULL) {
        Py_DECREF(queues);
        Py_DECREF(only);
        return -1;
    }
    Py_INCREF(state);
    Py_INCREF(message);
    Py_XSETREF(self->state, state);
    Py_XSETREF(self->message, message);
    Py_XSETREF(self->queues, queues);
    Py_XSETREF(self->only, only);
    Py_XSETREF(self->found, found);
    forget_last(self);
    return 0;
}

static void PutRedo_dealloc(PutRedo *self)
{
    forget_last(self);
    Py_XDECREF(self->state);
    Py_XDECREF(self->queues);
    Py_XDECREF(self->found);
    Py_XDECREF(self->message);
    Py_XDECREF(self->only);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* The (name, queue) of a raw name, or 0 with *queue = NULL when the general path must
 * take the record (no such queue, or media recovery of one queue). -1 on error. */
static int lookup_queue(PutRedo *self, const char *raw, Py_ssize_t n, PyObject **name,
                        PyObject **queue)
{
    if (self->last_raw != NULL && self->last_len == n && memcmp(self->last_raw, raw, n) == 0) {
        *name = self->last_name;
        *queue = self->last_queue;
        return 0;
    }
    PyObject *key = PyBytes_FromStringAndSize(raw, n);
    if (key == NULL)
        return -1;
    PyObject *hit = PyDict_GetItemWithError(self->found, key); /* borrowed */
    if (hit == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return -1;
        }
        PyObject *qname = PyUnicode_DecodeUTF8(raw, n, NULL);
        if (qname == NULL) {
            Py_DECREF(key);
            return -1;
        }
        PyObject *q = PyDict_GetItemWithError(self->queues, qname); /* borrowed */
        if (q == NULL || self->only != Py_None) {
            Py_DECREF(qname);
            Py_DECREF(key);
            *queue = NULL;
            return PyErr_Occurred() ? -1 : 0;
        }
        hit = PyTuple_Pack(2, qname, q);
        Py_DECREF(qname);
        if (hit == NULL || PyDict_SetItem(self->found, key, hit) < 0) {
            Py_XDECREF(hit);
            Py_DECREF(key);
            return -1;
        }
        Py_DECREF(hit); /* the dict holds it */
    }
    Py_DECREF(key);
    char *copy = PyMem_Malloc(n ? (size_t)n : 1);
    if (copy == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(copy, raw, (size_t)n);
    forget_last(self);
    self->last_raw = copy;
    self->last_len = n;
    self->last_name = Py_NewRef(PyTuple_GET_ITEM(hit, 0));
    self->last_queue = Py_NewRef(PyTuple_GET_ITEM(hit, 1));
    *name = self->last_name;
    *queue = self->last_queue;
    return 0;
}

/* obj.attr += 1 */
static int increment_attr(PyObject *obj, PyObject *attr)
{
    PyObject *v = PyObject_GetAttr(obj, attr);
    if (v == NULL)
        return -1;
    PyObject *one = PyLong_FromLong(1);
    PyObject *w = one ? PyNumber_Add(v, one) : NULL;
    Py_DECREF(v);
    Py_XDECREF(one);
    if (w == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, attr, w);
    Py_DECREF(w);
    return rc;
}

/* container[key] = value, with container = obj.attr */
static int set_in_attr(PyObject *obj, PyObject *attr, PyObject *key, PyObject *value)
{
    PyObject *c = PyObject_GetAttr(obj, attr);
    if (c == NULL)
        return -1;
    int rc = PyObject_SetItem(c, key, value);
    Py_DECREF(c);
    return rc;
}

/* seq[i].append(value), seq = obj.attr */
static int redo_uow(PutRedo *self, uint64_t txid, long long lsn, PyObject *name,
                    PyObject *key)
{
    PyObject *txid_obj = PyLong_FromUnsignedLongLong(txid);
    if (txid_obj == NULL)
        return -1;
    PyObject *u = PyObject_GetAttr(self->state, s_last_uow);
    int rc = -1;
    if (u == NULL)
        goto out;
    int same = 0;
    if (u != Py_None) {
        PyObject *ut = PyObject_GetAttr(u, s_txid);
        if (ut == NULL)
            goto out;
        same = PyObject_RichCompareBool(ut, txid_obj, Py_EQ);
        Py_DECREF(ut);
        if (same < 0)
            goto out;
    }
    if (!same) {
        PyObject *uows = PyObject_GetAttr(self->state, s_uows);
        if (uows == NULL)
            goto out;
        PyObject *made = PyObject_CallMethodOneArg(uows, s_get_or_make, txid_obj);
        Py_DECREF(uows);
        if (made == NULL)
            goto out;
        Py_SETREF(u, made);
        if (PyObject_SetAttr(self->state, s_last_uow, u) < 0)
            goto out;
    }
    PyObject *first = PyObject_GetAttr(u, s_first_lsn);
    if (first == NULL)
        goto out;
    int unset = first == Py_None;
    Py_DECREF(first);
    if (unset) {
        PyObject *l = PyLong_FromLongLong(lsn);
        if (l == NULL)
            goto out;
        int r = PyObject_SetAttr(u, s_first_lsn, l);
        Py_DECREF(l);
        if (r < 0)
            goto out;
    }
    PyObject *op = PyTuple_Pack(4, s_P, name, key, Py_True);
    if (op == NULL)
        goto out;
    PyObject *ops = PyObject_GetAttr(u, s_ops);
    if (ops == NULL) {
        Py_DECREF(op);
        goto out;
    }
    rc = PyList_Check(ops) ? PyList_Append(ops, op) : -1;
    if (!PyList_Check(ops))
        PyErr_SetString(PyExc_TypeError, "UnitOfWork.ops must be a list");
    Py_DECREF(ops);
    Py_DECREF(op);
out:
    Py_XDECREF(u);
    Py_DECREF(txid_obj);
    return rc;
}

PyDoc_STRVAR(redo_doc,
"redo(payload, lsn) -> bool\n\nRedo one PUT record as miqm.store.recovery's Python redo "
"does; False when the general path must take it (its queue is unknown here).");

static PyObject *PutRedo_redo(PutRedo *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "redo(payload, lsn)");
        return NULL;
    }
    if (self->state == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PutRedo is not initialised");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    long long lsn = PyLong_AsLongLong(args[1]);
    PyObject *result = NULL, *key = NULL, *msgid = NULL, *correlid = NULL, *body = NULL,
             *msg = NULL, *index = NULL;
    if (lsn == -1 && PyErr_Occurred())
        goto out;
    const uint8_t *p = view.buf;
    Py_ssize_t len = view.len;
    if (len < 11) {
        PyErr_SetString(PyExc_IndexError, "PUT record too short");
        goto out;
    }
    Py_ssize_t n = p[9] | (p[10] << 8);
    Py_ssize_t start = 11 + n + PUT_FIXED;
    if (len < start) {
        PyErr_SetString(PyExc_ValueError, "PUT record too short for its header");
        goto out;
    }
    uint64_t txid = le64(p + 1);
    const uint8_t *f = p + 11 + n;
    uint64_t key_v = le64(f);
    long prio = f[8];
    double put_time;
    uint64_t time_bits = le64(f + 9); /* IEEE 754 binary64, little-endian on disk */
    memcpy(&put_time, &time_bits, 8);
    const uint8_t *mid = f + 17, *cid = f + 41;
    uint32_t blen = (uint32_t)f[65] | (uint32_t)f[66] << 8 | (uint32_t)f[67] << 16 |
                    (uint32_t)f[68] << 24;

    PyObject *name, *q;
    if (lookup_queue(self, (const char *)p + 11, n, &name, &q) < 0)
        goto out;
    if (q == NULL) {
        result = Py_NewRef(Py_False);
        goto out;
    }
    Py_INCREF(name);
    Py_INCREF(q);
    key = PyLong_FromUnsignedLongLong(key_v);
    if (key == NULL)
        goto out_q;
    if (txid && redo_uow(self, txid, lsn, name, key) < 0)
        goto out_q;

    index = PyObject_GetAttr(q, s_index);
    if (index == NULL)
        goto out_q;
    PyObject *keys = PyObject_GetAttr(index, s_keys);
    if (keys == NULL)
        goto out_q;
    PyObject *ks = PySequence_GetItem(keys, prio);
    Py_DECREF(keys);
    if (ks == NULL)
        goto out_q;
    Py_ssize_t count = PyObject_Size(ks);
    int later = 0;
    if (count > 0) {
        PyObject *last = PySequence_GetItem(ks, count - 1);
        later = last ? PyObject_RichCompareBool(last, key, Py_GE) : -1;
        Py_XDECREF(last);
    } else if (count < 0) {
        later = -1;
    }
    if (later < 0) {
        Py_DECREF(ks);
        goto out_q;
    }
    PyObject *blen_obj = PyLong_FromUnsignedLong(blen);
    PyObject *prio_obj = PyLong_FromLong(prio);
    PyObject *minus1 = PyLong_FromLong(-1);
    int rc = (blen_obj && prio_obj && minus1) ? 0 : -1;
    if (rc == 0 && later) {
        PyObject *hit = PyObject_CallMethodObjArgs(index, s_find, key, prio_obj, NULL);
        if (hit == NULL) {
            rc = -1;
        } else if (hit != Py_None) {
            Py_DECREF(hit);
            Py_DECREF(ks);
            Py_DECREF(blen_obj);
            Py_DECREF(prio_obj);
            Py_DECREF(minus1);
            result = Py_NewRef(Py_True); /* already there (a repeated record) */
            goto out_q;
        } else {
            Py_DECREF(hit);
            PyObject *r = PyObject_CallMethodObjArgs(index, s_add, key, prio_obj, minus1,
                                                     blen_obj, NULL);
            rc = r ? 0 : -1;
            Py_XDECREF(r);
        }
    } else if (rc == 0) {
        PyObject *r = PyObject_CallMethodOneArg(ks, s_append, key);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
        if (rc == 0)
            rc = append_at(index, s_blocks, prio, minus1, s_append);
        if (rc == 0)
            rc = append_at(index, s_lens, prio, blen_obj, s_append);
    }
    Py_DECREF(ks);
    Py_XDECREF(minus1);
    Py_XDECREF(blen_obj);
    if (rc < 0) {
        Py_XDECREF(prio_obj);
        goto out_q;
    }

    Py_ssize_t avail = len - start;
    body = PyBytes_FromStringAndSize((const char *)p + start,
                                     (Py_ssize_t)blen < avail ? (Py_ssize_t)blen : avail);
    msgid = PyBytes_FromStringAndSize((const char *)mid, 24);
    correlid = PyBytes_FromStringAndSize((const char *)cid, 24);
    PyObject *t = PyFloat_FromDouble(put_time);
    if (body == NULL || msgid == NULL || correlid == NULL || t == NULL) {
        Py_XDECREF(t);
        Py_XDECREF(prio_obj);
        goto out_q;
    }
    PyObject *margs[] = {prio_obj, Py_True, t, msgid, correlid, body};
    msg = PyObject_Vectorcall(self->message, margs, 6, NULL);
    Py_DECREF(t);
    Py_DECREF(prio_obj);
    if (msg == NULL || set_in_attr(q, s_mem, key, msg) < 0 || increment_attr(q, s_present) < 0)
        goto out_q;
    if (memcmp(mid, self->prefix, 4) != 0 || be64(mid + 12) != key_v) {
        if (set_in_attr(q, s_msgids, msgid, key) < 0)
            goto out_q;
    }
    static const uint8_t zero24[24];
    if (memcmp(cid, zero24, 24) != 0) {
        PyObject *corr = PyObject_GetAttr(q, s_correlids);
        if (corr == NULL)
            goto out_q;
        PyObject *fresh = PyList_New(0);
        PyObject *lst = fresh ? PyDict_SetDefault(corr, correlid, fresh) : NULL; /* borrowed */
        int r = lst ? (PyList_Check(lst) ? PyList_Append(lst, key) : -1) : -1;
        if (lst && !PyList_Check(lst))
            PyErr_SetString(PyExc_TypeError, "correlids values must be lists");
        Py_XDECREF(fresh);
        Py_DECREF(corr);
        if (r < 0)
            goto out_q;
    }
    if (txid) {
        PyObject *tx = PyLong_FromUnsignedLongLong(txid);
        int r = tx ? set_in_attr(q, s_uncommitted, key, tx) : -1;
        Py_XDECREF(tx);
        if (r < 0)
            goto out_q;
    }
    PyObject *next_key = PyObject_GetAttr(self->state, s_next_key);
    if (next_key == NULL)
        goto out_q;
    int ahead = PyObject_RichCompareBool(key, next_key, Py_GE);
    Py_DECREF(next_key);
    if (ahead < 0)
        goto out_q;
    if (ahead) {
        PyObject *one = PyLong_FromLong(1);
        PyObject *nk = one ? PyNumber_Add(key, one) : NULL;
        Py_XDECREF(one);
        int r = nk ? PyObject_SetAttr(self->state, s_next_key, nk) : -1;
        Py_XDECREF(nk);
        if (r < 0)
            goto out_q;
    }
    result = Py_NewRef(Py_True);
out_q:
    Py_DECREF(name);
    Py_DECREF(q);
out:
    Py_XDECREF(index);
    Py_XDECREF(key);
    Py_XDECREF(msgid);
    Py_XDECREF(correlid);
    Py_XDECREF(body);
    Py_XDECREF(msg);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *PutRedo_forget(PutRedo *self, PyObject *Py_UNUSED(ignored))
{
    if (self->found != NULL)
        PyDict_Clear(self->found);
    forget_last(self);
    Py_RETURN_NONE;
}

static PyMethodDef PutRedo_methods[] = {
    {"redo", (PyCFunction)(void (*)(void))PutRedo_redo, METH_FASTCALL, redo_doc},
    {"forget", (PyCFunction)PutRedo_forget, METH_NOARGS,
     "Forget cached queue lookups (another record may have replaced a queue)."},
    {NULL}
};

static PyTypeObject PutRedoType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "miqm.store._redo.PutRedo",
    .tp_doc = PyDoc_STR("PutRedo(state, message_type, prefix): restart's PUT redo in C."),
    .tp_basicsize = sizeof(PutRedo),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PutRedo_init,
    .tp_dealloc = (destructor)PutRedo_dealloc,
    .tp_methods = PutRedo_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "miqm.store._redo",
    "Restart's redo of PUT records in C (see miqm/store/recovery.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__redo(void)
{
    INTERN(s_last_uow, "last_uow");
    INTERN(s_txid, "txid");
    INTERN(s_uows, "uows");
    INTERN(s_get_or_make, "get_or_make");
    INTERN(s_first_lsn, "first_lsn");
    INTERN(s_ops, "ops");
    INTERN(s_index, "index");
    INTERN(s_keys, "keys");
    INTERN(s_blocks, "blocks");
    INTERN(s_lens, "lens");
    INTERN(s_find, "find");
    INTERN(s_add, "add");
    INTERN(s_append, "append");
    INTERN(s_mem, "mem");
    INTERN(s_present, "present");
    INTERN(s_msgids, "msgids");
    INTERN(s_correlids, "correlids");
    INTERN(s_uncommitted, "uncommitted");
    INTERN(s_next_key, "next_key");
    INTERN(s_P, "P");
    INTERN(s_queues, "queues");
    INTERN(s_only, "only");
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddType(m, &PutRedoType) < 0) /* readies and adds the type */
        Py_CLEAR(m);
    return m;
}
