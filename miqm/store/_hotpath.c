/* The commit path's common case in C: the twin of the bodies of QueueManagerStore.begin,
 * .put (under syncpoint, persistent, msgid and correlid chosen by the store) and .commit
 * in miqm/store/qmstore.py, which stay the reference and the general path.
 *
 * A single producer's put+commit is one fdatasync plus some forty microseconds of
 * Python bookkeeping after a cold wake-up: checks against the queue's attributes, the
 * PUT record, the queue's index, the unit of work and its commit. Here the same updates
 * go through the C API on the same Python objects, in the same order, under the store
 * lock, which the call takes and releases itself. A call that is not the common case (a closed or failed store, a
 * damaged queue, any check that would fail, a unit with undone operations...) returns
 * None before it changes anything, and the Python path then does the whole operation
 * (and raises what it raises). The log append stays a call of the store's RecoveryLog.
 *
 * With this module the class's begin, put and commit are StoreMethods (end of this file):
 * no Python frame between the producer's call and the C path, and a commit waits in the
 * log's force queue from C; the Python bodies serve every call the C one hands over.
 *
 * PUT record layout (little-endian): type u8 | txid u64 | name length u16 | name |
 * key u64 | priority u8 | put time f64 | msgid 24 | correlid 24 | body length u32 | body;
 * COMMIT: type u8 | txid u64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <structmember.h> /* T_OBJECT_EX, READONLY */

#include "_cparts.h"

#define ID_LEN 24

typedef struct {
    PyObject_HEAD
    PyObject *message;    /* MemMessage */
    PyObject *unit;       /* UnitOfWork */
    PyObject *full_error; /* LogFullError: a full log does not stop the store */
    int put_type, commit_type;
    /* the store's and the log's locks with their bound acquire/release, kept while the
     * store keeps the same lock objects (looked up once, not on every call) */
    PyObject *store_lock, *store_acquire, *store_release;
    PyObject *log_lock, *log_acquire, *log_release;
} HotPath;


static PyObject *s_closed, *s_failed, *s_state, *s_queues, *s_damaged, *s_state_attr,
    *s_active, *s_ended, *s_attrs, *s_PUT, *s_ENABLED, *s_MAXMSGL, *s_DEFPRTY, *s_DEFPSIST,
    *s_YES, *s_ops, *s_qmgr, *s_MAXUMSGS, *s_tuning, *s_max_umsgs, *s_present, *s_locked,
    *s_MAXDEPTH, *s_next_key, *s_msgid_head, *s_wallclock, *s_txid, *s_log, *s_append,
    *s_first_lsn, *s_pin_threshold, *s_pin_limit, *s_check_due, *s_records_since_cp,
    *s_recd_max, *s_last_lsn, *s_mem, *s_index, *s_keys, *s_blocks, *s_lens, *s_add,
    *s_uncommitted, *s_P, *s_undone, *s_only, *s_remove, *s_uows, *s_units, *s_xid,
    *s_by_xid, *s_last_uow, *s_sleepers, *s_cond, *s_notify_all, *s_next_txid, *s_pop,
    *s_priority, *s_persistent, *s_put_time, *s_msgid, *s_correlid, *s_body, *s_ready,
    *s_lock, *s_acquire, *s_release, *s_buf, *s_durable, *s_buffer_limit, *s_page_limit,
    *s_try_append, *s_next_space_check, *s_space_check_every;
static PyObject *no_id; /* 24 zero bytes: the correlid of a put that gave none */

/* *lock, *acquire, *release follow lock (a new lock object replaces them); 0 or -1 */
static int bind_lock(PyObject *lock, PyObject **held, PyObject **acquire, PyObject **release)
{
    if (lock == *held)
        return 0;
    PyObject *a = PyObject_GetAttr(lock, s_acquire);
    PyObject *r = a ? PyObject_GetAttr(lock, s_release) : NULL;
    if (r == NULL) {
        Py_XDECREF(a);
        return -1;
    }
    Py_XSETREF(*held, Py_NewRef(lock));
    Py_XSETREF(*acquire, a);
    Py_XSETREF(*release, r);
    return 0;
}

static int HotPath_init(HotPath *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"message_type", "unit_type", "full_error", "put_type",
                             "commit_type", NULL};
    PyObject *message, *unit, *full_error;
    int put_type, commit_type;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOii", kwlist, &message, &unit,
                                     &full_error, &put_type, &commit_type))
        return -1;
    Py_XSETREF(self->message, Py_NewRef(message));
    Py_XSETREF(self->unit, Py_NewRef(unit));
    Py_XSETREF(self->full_error, Py_NewRef(full_error));
    self->put_type = put_type;
    self->commit_type = commit_type;
    return 0;
}

static void HotPath_dealloc(HotPath *self)
{
    Py_XDECREF(self->message);
    Py_XDECREF(self->unit);
    Py_XDECREF(self->full_error);
    Py_XDECREF(self->store_lock);
    Py_XDECREF(self->store_acquire);
    Py_XDECREF(self->store_release);
    Py_XDECREF(self->log_lock);
    Py_XDECREF(self->log_acquire);
    Py_XDECREF(self->log_release);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int configured(HotPath *self)
{
    if (self->message == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "HotPath is not initialised");
        return 0;
    }
    return 1;
}

/* Slotted classes: the byte offset of each (type, name) slot, cached. An entry holds its
 * type and is trusted only while the type's version tag is the one it was made under
 * (any change to the class's attributes assigns a new tag). */
#define SLOT_CACHE 64
typedef struct {
    PyTypeObject *type; /* a strong reference */
    PyObject *name;     /* interned, one of this module's names (immortal here) */
    unsigned int version;
    Py_ssize_t offset; /* -1: not a plain object slot (getattr/setattr serve it) */
} SlotEntry;
static SlotEntry slot_cache[SLOT_CACHE];

static Py_ssize_t slot_offset(PyTypeObject *tp, PyObject *name)
{
    SlotEntry *e = &slot_cache[(((uintptr_t)tp >> 4) ^ ((uintptr_t)name >> 3)) % SLOT_CACHE];
    if (e->type == tp && e->name == name && e->version == tp->tp_version_tag &&
        tp->tp_version_tag != 0)
        return e->offset;
    PyObject *d = _PyType_Lookup(tp, name); /* borrowed; assigns the version tag */
    Py_ssize_t offset = -1;
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
            offset = m->offset;
    }
    if (tp->tp_version_tag != 0) {
        Py_INCREF(tp);
        Py_XSETREF(e->type, tp);
        e->name = name;
        e->version = tp->tp_version_tag;
        e->offset = offset;
    }
    return offset;
}

/* obj.name, for the plain instances the hot path works on, without getattr's walk of the
 * type's MRO (a fifth of the path's time): from the instance dict when the name is there
 * (an attribute set through the instance is in its dict only when no data descriptor of
 * the type took it), from the slot when it is a slot; else getattr. */
static PyObject *fget(PyObject *obj, PyObject *name)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (tp->tp_getattro == PyObject_GenericGetAttr) {
#if PY_VERSION_HEX < 0x030D0000
        PyObject **dp = _PyObject_GetDictPtr(obj);
        if (dp != NULL && *dp != NULL) {
            PyObject *v = PyDict_GetItemWithError(*dp, name); /* borrowed */
            if (v != NULL)
                return Py_NewRef(v);
            if (PyErr_Occurred())
                return NULL;
        }
#endif
        Py_ssize_t off = slot_offset(tp, name);
        if (off >= 0) {
            PyObject *v = *(PyObject **)((char *)obj + off);
            if (v != NULL)
                return Py_NewRef(v);
        }
    }
    return PyObject_GetAttr(obj, name);
}

/* obj.name = v, into the instance dict when the name is already there or into the slot
 * (see fget); else setattr */
static int fset(PyObject *obj, PyObject *name, PyObject *v)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (tp->tp_setattro == PyObject_GenericSetAttr) {
#if PY_VERSION_HEX < 0x030D0000
        PyObject **dp = _PyObject_GetDictPtr(obj);
        if (dp != NULL && *dp != NULL) {
            int has = PyDict_Contains(*dp, name);
            if (has < 0)
                return -1;
            if (has)
                return PyDict_SetItem(*dp, name, v);
        }
#endif
        Py_ssize_t off = slot_offset(tp, name);
        if (off >= 0) {
            PyObject **at = (PyObject **)((char *)obj + off);
            PyObject *old = *at;
            *at = Py_NewRef(v);
            Py_XDECREF(old);
            return 0;
        }
    }
    return PyObject_SetAttr(obj, name, v);
}

/* An instance of a plain slotted class with the given attributes set, built without
 * running its __init__ (Python code there would let the interpreter switch threads while
 * the store lock is held, and every other producer would queue on it). MemMessage and
 * UnitOfWork keep their __init__ to these assignments (see their docstrings). */
static PyObject *new_instance(PyObject *type, PyObject *const *names, PyObject *const *values,
                              int n)
{
    PyTypeObject *tp = (PyTypeObject *)type;
    PyObject *obj = tp->tp_alloc(tp, 0);
    if (obj == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        if (fset(obj, names[i], values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

/* 1 if obj.attr is truthy, 0 if not, -1 on error */
static int attr_true(PyObject *obj, PyObject *attr)
{
    PyObject *v = fget(obj, attr);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* 1 if obj.attr is None, 0 if not, -1 on error */
static int attr_none(PyObject *obj, PyObject *attr)
{
    PyObject *v = fget(obj, attr);
    if (v == NULL)
        return -1;
    int t = v == Py_None;
    Py_DECREF(v);
    return t;
}

/* The store can take an operation: not closed and not failed (1), else 0; -1 on error */
static int store_open(PyObject *store)
{
    int closed = attr_true(store, s_closed);
    if (closed != 0)
        return closed < 0 ? -1 : 0;
    int failed_none = attr_none(store, s_failed);
    return failed_none;
}

/* obj.attr == text (an interned str), 1/0/-1 */
static int attr_equals(PyObject *obj, PyObject *attr, PyObject *text)
{
    PyObject *v = fget(obj, attr);
    if (v == NULL)
        return -1;
    int eq = PyObject_RichCompareBool(v, text, Py_EQ);
    Py_DECREF(v);
    return eq;
}

/* int(d[key]) into *out: 1, 0 when missing or not an integer (error cleared), -1 */
static int dict_int(PyObject *d, PyObject *key, long long *out)
{
    PyObject *v = PyDict_GetItemWithError(d, key); /* borrowed */
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *n = PyNumber_Long(v);
    if (n == NULL) {
        PyErr_Clear();
        return 0;
    }
    *out = PyLong_AsLongLong(n);
    Py_DECREF(n);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static long long get_ll(PyObject *obj, PyObject *attr, int *ok)
{
    PyObject *v = fget(obj, attr);
    if (v == NULL) {
        *ok = 0;
        return -1;
    }
    long long n = PyLong_AsLongLong(v);
    Py_DECREF(v);
    *ok = !(n == -1 && PyErr_Occurred());
    return n;
}

static int set_ll(PyObject *obj, PyObject *attr, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int rc = fset(obj, attr, v);
    Py_DECREF(v);
    return rc;
}

/* Take owner._lock through its bound acquire (cached in *held, *acquire, *release).
 * Returns a new reference to its bound release, for give_lock, or NULL on error (the lock
 * not taken). Our own reference: what runs under the lock could, in principle, rebind. */
static PyObject *take_lock(PyObject *owner, PyObject **held, PyObject **acquire,
                           PyObject **release)
{
    PyObject *lock = fget(owner, s_lock);
    if (lock == NULL)
        return NULL;
    int rc = bind_lock(lock, held, acquire, release);
    Py_DECREF(lock); /* *held holds it */
    if (rc < 0)
        return NULL;
    PyObject *rel = Py_NewRef(*release);
    PyObject *got = PyObject_CallNoArgs(*acquire);
    if (got == NULL) {
        Py_DECREF(rel);
        return NULL;
    }
    Py_DECREF(got);
    return rel;
}

/* Release a lock take_lock took (and drop its reference to release), keeping an error
 * the work under it set: returns result, or NULL if the release itself failed. */
static PyObject *give_lock(PyObject *release, PyObject *result)
{
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *released = PyObject_CallNoArgs(release);
    Py_DECREF(release);
    if (released == NULL) {
        Py_XDECREF(result);
        Py_XDECREF(exc_type);
        Py_XDECREF(exc_value);
        Py_XDECREF(exc_tb);
        return NULL;
    }
    Py_DECREF(released);
    PyErr_Restore(exc_type, exc_value, exc_tb);
    return result;
}

/* RecoveryLog.append's common case without its bytecode: under the log's lock, when
 * the log is ready and neither failed nor closed, its buffer's try_append with the log's
 * durable point, buffer limit and page limit. The LSN, None when RecoveryLog.append must
 * do it (a force first, a record that may reach past the room, not ready), or NULL on
 * error. */
static PyObject *log_try_append(HotPath *self, PyObject *log, PyObject *payload)
{
    PyObject *ready_obj = fget(log, s_ready);
    if (ready_obj == NULL) { /* not a RecoveryLog (a test's stand-in): its own append */
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    int ready = PyObject_IsTrue(ready_obj);
    Py_DECREF(ready_obj);
    if (ready <= 0)
        return ready < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *release = take_lock(log, &self->log_lock, &self->log_acquire,
                                  &self->log_release);
    if (release == NULL)
        return NULL;
    PyObject *result = NULL, *buf = NULL, *durable = NULL, *limit = NULL, *page_limit = NULL;
    int usable = store_open(log); /* the log's own _closed / _failed */
    if (usable <= 0) {
        if (usable == 0)
            result = Py_NewRef(Py_None);
        goto done;
    }
    buf = fget(log, s_buf);
    durable = buf ? fget(log, s_durable) : NULL;
    limit = durable ? fget(log, s_buffer_limit) : NULL;
    page_limit = limit ? fget(log, s_page_limit) : NULL;
    if (page_limit != NULL) {
        /* a spare slot before the arguments, which the offset flag lets the call use */
        PyObject *args[6] = {NULL, buf, payload, durable, limit, page_limit};
        result = PyObject_VectorcallMethod(s_try_append, args + 1,
                                           5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
done:
    Py_XDECREF(buf);
    Py_XDECREF(durable);
    Py_XDECREF(limit);
    Py_XDECREF(page_limit);
    return give_lock(release, result);
}

/* The error pending stops the store (store._failed = it, as the Python paths do), unless
 * it is an instance of spare (NULL: none); it stays pending for the caller. */
static void stop_store(PyObject *store, PyObject *spare)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && (spare == NULL || !PyErr_GivenExceptionMatches(value, spare)))
        fset(store, s_failed, value);
    PyErr_Restore(type, value, tb);
}

/* QueueManagerStore._append: the log append and what the record pins and triggers.
 * uow may be NULL (a record of no unit, or one whose first record is not this). Returns
 * the LSN, or -1 with an error set (the store then failed, unless the log was full). */
static long long store_append(HotPath *self, PyObject *store, PyObject *payload,
                              PyObject *uow)
{
    PyObject *log = fget(store, s_log);
    if (log == NULL)
        return -1;
    PyObject *r = log_try_append(self, log, payload);
    if (r == Py_None) { /* not the common case: RecoveryLog.append does it */
        Py_DECREF(r);
        r = PyObject_CallMethodOneArg(log, s_append, payload);
    }
    Py_DECREF(log);
    if (r == NULL) {
        /* a failed append may have left the log unusable: fail-stop, never guess */
        stop_store(store, self->full_error);
        return -1;
    }
    long long lsn = PyLong_AsLongLong(r);
    if (lsn == -1 && PyErr_Occurred()) {
        Py_DECREF(r);
        return -1;
    }
    int ok = 1, due = 0;
    if (uow != NULL) {
        int none = attr_none(uow, s_first_lsn);
        if (none < 0 || (none && fset(uow, s_first_lsn, r) < 0))
            goto fail;
        if (none) {
            int unset = attr_none(store, s_pin_threshold);
            if (unset < 0)
                goto fail;
            if (unset) {
                long long limit = get_ll(store, s_pin_limit, &ok);
                if (!ok || set_ll(store, s_pin_threshold, lsn + limit) < 0)
                    goto fail;
            }
        }
    }
    PyObject *pin = fget(store, s_pin_threshold);
    if (pin == NULL)
        goto fail;
    if (pin != Py_None) {
        long long threshold = PyLong_AsLongLong(pin);
        if (threshold == -1 && PyErr_Occurred()) {
            Py_DECREF(pin);
            goto fail;
        }
        if (lsn > threshold)
            due = 1;
    }
    Py_DECREF(pin);
    long long records = get_ll(store, s_records_since_cp, &ok) + 1;
    if (!ok || set_ll(store, s_records_since_cp, records) < 0)
        goto fail;
    PyObject *tuning = fget(store, s_tuning);
    if (tuning == NULL)
        goto fail;
    long long recd_max = get_ll(tuning, s_recd_max, &ok);
    Py_DECREF(tuning);
    if (!ok)
        goto fail;
    if (records >= recd_max) {
        due = 1;
    } else {
        long long next_check = get_ll(store, s_next_space_check, &ok);
        if (!ok)
            goto fail;
        if (lsn >= next_check) {
            long long every = get_ll(store, s_space_check_every, &ok);
            if (!ok || set_ll(store, s_next_space_check, lsn + every) < 0)
                goto fail;
            due = 1;
        }
    }
    if (due && fset(store, s_check_due, Py_True) < 0)
        goto fail;
    if (fset(store, s_last_lsn, r) < 0)
        goto fail;
    Py_DECREF(r);
    return lsn;
fail:
    Py_DECREF(r);
    return -1;
}

PyDoc_STRVAR(begin_doc,
"begin(store) -> UnitOfWork | None\n\nQueueManagerStore.begin's body, under the store lock "
"(taken and released here): a new active unit, or None when the store is closed or failed.");

static PyObject *begin_locked(HotPath *self, PyObject *store)
{
    int open = store_open(store);
    if (open <= 0)
        return open < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *state = fget(store, s_state);
    if (state == NULL)
        return NULL;
    PyObject *uows = fget(state, s_uows);
    Py_DECREF(state);
    if (uows == NULL)
        return NULL;
    PyObject *u = NULL, *units = NULL, *next = fget(uows, s_next_txid);
    if (next == NULL)
        goto done;
    long long txid = PyLong_AsLongLong(next);
    if (txid == -1 && PyErr_Occurred())
        goto done;
    PyObject *ops = PyList_New(0), *undone = PySet_New(NULL);
    if (ops != NULL && undone != NULL) {
        PyObject *names[6] = {s_txid, s_state_attr, s_xid, s_first_lsn, s_ops, s_undone};
        PyObject *values[6] = {next, s_active, Py_None, Py_None, ops, undone};
        u = new_instance(self->unit, names, values, 6);
    }
    Py_XDECREF(ops);
    Py_XDECREF(undone);
    if (u == NULL)
        goto done;
    units = fget(uows, s_units);
    if (units == NULL || set_ll(uows, s_next_txid, txid + 1) < 0 ||
        PyObject_SetItem(units, next, u) < 0)
        Py_CLEAR(u);
done:
    Py_XDECREF(next);
    Py_XDECREF(units);
    Py_DECREF(uows);
    return u;
}

/* LocalQueue.add_put(key, prio, length, None, None) */
static int index_add(PyObject *q, PyObject *key_obj, long long key, Py_ssize_t prio,
                     PyObject *len_obj)
{
    PyObject *ix = fget(q, s_index);
    if (ix == NULL)
        return -1;
    int rc = -1;
    PyObject *keys = fget(ix, s_keys);
    PyObject *ks = keys ? PySequence_GetItem(keys, prio) : NULL;
    Py_XDECREF(keys);
    if (ks == NULL)
        goto done;
    Py_ssize_t n = PySequence_Size(ks);
    int in_order = 1;
    if (n < 0)
        goto done_ks;
    if (n > 0) {
        PyObject *last = PySequence_GetItem(ks, n - 1);
        if (last == NULL)
            goto done_ks;
        long long last_key = PyLong_AsLongLong(last);
        Py_DECREF(last);
        if (last_key == -1 && PyErr_Occurred())
            goto done_ks;
        in_order = last_key < key;
    }
    PyObject *minus_one = PyLong_FromLong(-1);
    if (minus_one == NULL)
        goto done_ks;
    if (in_order) { /* the common case, keys rising: appended */
        PyObject *r = PyObject_CallMethodOneArg(ks, s_append, key_obj);
        if (r != NULL) {
            Py_DECREF(r);
            if (append_at(ix, s_blocks, prio, minus_one, s_append) == 0 &&
                append_at(ix, s_lens, prio, len_obj, s_append) == 0)
                rc = 0;
        }
    } else {
        PyObject *p = PyLong_FromSsize_t(prio);
        PyObject *r = p ? PyObject_CallMethodObjArgs(ix, s_add, key_obj, p, minus_one, len_obj,
                                                     NULL) : NULL;
        Py_XDECREF(p);
        if (r != NULL) {
            Py_DECREF(r);
            rc = 0;
        }
    }
    Py_DECREF(minus_one);
done_ks:
    Py_DECREF(ks);
done:
    Py_DECREF(ix);
    return rc;
}

PyDoc_STRVAR(put_doc,
"put(store, queue, body, persistent, priority, uow) -> msgid | None\n\n"
"QueueManagerStore.put's body for a persistent put under syncpoint whose msgid and "
"correlid the store chooses, under the store lock (taken and released here). None, "
"with nothing changed, when the put is anything else or a check would fail: the Python "
"path then does it.");

static PyObject *put_locked(HotPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *store = args[0], *queue = args[1], *body = args[2], *persistent = args[3],
             *priority = args[4], *uow = args[5];
    if (!PyBytes_CheckExact(body) || !PyUnicode_CheckExact(queue) || uow == Py_None)
        Py_RETURN_NONE;
    int open = store_open(store);
    if (open <= 0)
        return open < 0 ? NULL : Py_NewRef(Py_None);
    int damaged = attr_true(store, s_damaged);
    if (damaged != 0)
        return damaged < 0 ? NULL : Py_NewRef(Py_None);
    int active = attr_equals(uow, s_state_attr, s_active);
    if (active <= 0)
        return active < 0 ? NULL : Py_NewRef(Py_None);

    PyObject *state = fget(store, s_state);
    if (state == NULL)
        return NULL;
    PyObject *result = NULL, *q = NULL, *attrs = NULL, *ops = NULL, *key_obj = NULL,
             *mid = NULL, *now_obj = NULL, *txid = NULL, *payload = NULL, *msg = NULL,
             *len_obj = NULL, *mem = NULL, *uncommitted = NULL, *op = NULL;
    PyObject *queues = fget(state, s_queues);
    if (queues == NULL)
        goto done;
    q = PyDict_GetItemWithError(queues, queue);
    Py_DECREF(queues);
    if (q == NULL) {
        if (!PyErr_Occurred())
            result = Py_NewRef(Py_None);
        goto done;
    }
    Py_INCREF(q);
    attrs = fget(q, s_attrs);
    if (attrs == NULL)
        goto done;
    if (!PyDict_Check(attrs))
        goto general;
    PyObject *put_attr = PyDict_GetItemWithError(attrs, s_PUT); /* borrowed */
    if (put_attr == NULL) {
        if (!PyErr_Occurred())
            result = Py_NewRef(Py_None);
        goto done;
    }
    int enabled = PyObject_RichCompareBool(put_attr, s_ENABLED, Py_EQ);
    if (enabled <= 0) {
        if (enabled == 0)
            result = Py_NewRef(Py_None);
        goto done;
    }
    long long maxmsgl, prio, maxdepth;
    int got = dict_int(attrs, s_MAXMSGL, &maxmsgl);
    if (got <= 0 || PyBytes_GET_SIZE(body) > maxmsgl)
        goto general_or_error_int;
    if (priority == Py_None) {
        got = dict_int(attrs, s_DEFPRTY, &prio);
        if (got <= 0)
            goto general_or_error_int;
    } else {
        if (!PyLong_CheckExact(priority))
            goto general;
        prio = PyLong_AsLongLong(priority);
        if (prio == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto general;
        }
    }
    if (prio < 0 || prio > 9)
        goto general;
    int pers;
    if (persistent == Py_None) {
        PyObject *d = PyDict_GetItemWithError(attrs, s_DEFPSIST); /* borrowed */
        if (d == NULL) {
            if (!PyErr_Occurred())
                result = Py_NewRef(Py_None);
            goto done;
        }
        pers = PyObject_RichCompareBool(d, s_YES, Py_EQ);
    } else {
        pers = PyObject_IsTrue(persistent);
    }
    if (pers <= 0) { /* a non-persistent put: the Python path */
        if (pers == 0)
            result = Py_NewRef(Py_None);
        goto done;
    }
    ops = fget(uow, s_ops);
    if (ops == NULL)
        goto done;
    if (!PyList_CheckExact(ops))
        goto general;
    if (PyList_GET_SIZE(ops) > 0) { /* MAXUMSGS is at least 1: only later messages check */
        PyObject *qmgr = fget(state, s_qmgr);
        PyObject *tuning = qmgr ? fget(store, s_tuning) : NULL;
        PyObject *dflt = tuning ? fget(tuning, s_max_umsgs) : NULL;
        PyObject *v = NULL;
        if (dflt != NULL) {
            v = PyDict_Check(qmgr) ? PyDict_GetItemWithError(qmgr, s_MAXUMSGS) : NULL;
            if (v == NULL && !PyErr_Occurred())
                v = dflt;
        }
        PyObject *n = v ? PyNumber_Long(v) : NULL;
        Py_XDECREF(qmgr);
        Py_XDECREF(tuning);
        Py_XDECREF(dflt);
        if (n == NULL) {
            PyErr_Clear();
            goto general;
        }
        long long maxumsgs = PyLong_AsLongLong(n);
        Py_DECREF(n);
        if ((maxumsgs == -1 && PyErr_Occurred()) || PyList_GET_SIZE(ops) >= maxumsgs) {
            PyErr_Clear();
            goto general;
        }
    }
    got = dict_int(attrs, s_MAXDEPTH, &maxdepth);
    if (got <= 0)
        goto general_or_error_int;
    int ok = 1;
    long long present = get_ll(q, s_present, &ok);
    if (!ok)
        goto done;
    PyObject *locked = fget(q, s_locked);
    if (locked == NULL)
        goto done;
    Py_ssize_t nlocked = PyObject_Length(locked);
    Py_DECREF(locked);
    if (nlocked < 0)
        goto done;
    if (present - nlocked >= maxdepth) /* CURDEPTH: the queue is full */
        goto general;

    /* every check passed: from here the put happens */
    long long key = get_ll(state, s_next_key, &ok);
    if (!ok || set_ll(state, s_next_key, key + 1) < 0)
        goto done;
    key_obj = PyLong_FromLongLong(key);
    PyObject *head = fget(store, s_msgid_head);
    if (key_obj == NULL || head == NULL) {
        Py_XDECREF(head);
        goto done;
    }
    if (!PyBytes_Check(head) || PyBytes_GET_SIZE(head) != ID_LEN - 12) {
        Py_DECREF(head);
        PyErr_SetString(PyExc_ValueError, "the store's msgid head must be 12 bytes");
        goto done;
    }
    mid = PyBytes_FromStringAndSize(NULL, ID_LEN);
    if (mid == NULL) {
        Py_DECREF(head);
        goto done;
    }
    uint8_t *m = (uint8_t *)PyBytes_AS_STRING(mid);
    memcpy(m, PyBytes_AS_STRING(head), 12);
    Py_DECREF(head);
    for (int i = 0; i < 8; i++) /* the key, big-endian, then four zero bytes */
        m[12 + i] = (uint8_t)((uint64_t)key >> (56 - 8 * i));
    memset(m + 20, 0, 4);
    PyObject *clock = fget(store, s_wallclock);
    if (clock == NULL)
        goto done;
    now_obj = PyObject_CallNoArgs(clock);
    Py_DECREF(clock);
    if (now_obj == NULL)
        goto done;
    double now = PyFloat_AsDouble(now_obj);
    if (now == -1.0 && PyErr_Occurred())
        goto done;
    txid = fget(uow, s_txid);
    if (txid == NULL)
        goto done;
    unsigned long long txid_v = PyLong_AsUnsignedLongLong(txid);
    if (txid_v == (unsigned long long)-1 && PyErr_Occurred())
        goto done;
    Py_ssize_t name_len;
    const char *name = PyUnicode_AsUTF8AndSize(queue, &name_len);
    if (name == NULL)
        goto done;
    if (name_len > 0xFFFF || PyBytes_GET_SIZE(body) > 0xFFFFFFFFll) {
        PyErr_SetString(PyExc_ValueError, "queue name or message too long for a PUT record");
        goto done;
    }
    Py_ssize_t blen = PyBytes_GET_SIZE(body);
    Py_ssize_t total = 1 + 8 + 2 + name_len + 8 + 1 + 8 + ID_LEN + ID_LEN + 4 + blen;
    payload = PyBytes_FromStringAndSize(NULL, total);
    if (payload == NULL)
        goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(payload);
    *p++ = (uint8_t)self->put_type;
    put_le(p, txid_v, 8);
    p += 8;
    put_le(p, (uint64_t)name_len, 2);
    p += 2;
    memcpy(p, name, (size_t)name_len);
    p += name_len;
    put_le(p, (uint64_t)key, 8);
    p += 8;
    *p++ = (uint8_t)prio;
    uint64_t now_bits;
    memcpy(&now_bits, &now, 8); /* an IEEE double, little-endian on every target we build */
    put_le(p, now_bits, 8);
    p += 8;
    memcpy(p, m, ID_LEN);
    p += ID_LEN;
    memset(p, 0, ID_LEN);
    p += ID_LEN;
    put_le(p, (uint64_t)blen, 4);
    p += 4;
    memcpy(p, PyBytes_AS_STRING(body), (size_t)blen);
    if (store_append(self, store, payload, uow) < 0)
        goto done;

    /* the key is new and next_key already past it: the message, its index entry, and
     * its place in the unit */
    PyObject *prio_obj = PyLong_FromLongLong(prio);
    if (prio_obj == NULL)
        goto done;
    PyObject *fields[6] = {s_priority, s_persistent, s_put_time, s_msgid, s_correlid, s_body};
    PyObject *values[6] = {prio_obj, Py_True, now_obj, mid, no_id, body};
    msg = new_instance(self->message, fields, values, 6);
    Py_DECREF(prio_obj);
    if (msg == NULL)
        goto done;
    mem = fget(q, s_mem);
    if (mem == NULL || PyObject_SetItem(mem, key_obj, msg) < 0)
        goto done;
    len_obj = PyLong_FromSsize_t(blen);
    if (len_obj == NULL || index_add(q, key_obj, key, (Py_ssize_t)prio, len_obj) < 0)
        goto done;
    if (set_ll(q, s_present, present + 1) < 0)
        goto done;
    uncommitted = fget(q, s_uncommitted);
    if (uncommitted == NULL || PyObject_SetItem(uncommitted, key_obj, txid) < 0)
        goto done;
    op = PyTuple_Pack(4, s_P, queue, key_obj, Py_True);
    if (op == NULL || PyList_Append(ops, op) < 0)
        goto done;
    result = Py_NewRef(mid);
    goto done;
general_or_error_int:
    if (got < 0)
        goto done;
general:
    result = Py_NewRef(Py_None);
done:
    Py_DECREF(state);
    Py_XDECREF(q);
    Py_XDECREF(attrs);
    Py_XDECREF(ops);
    Py_XDECREF(key_obj);
    Py_XDECREF(mid);
    Py_XDECREF(now_obj);
    Py_XDECREF(txid);
    Py_XDECREF(payload);
    Py_XDECREF(msg);
    Py_XDECREF(len_obj);
    Py_XDECREF(mem);
    Py_XDECREF(uncommitted);
    Py_XDECREF(op);
    return result;
}

/* StoreState.apply_commit for a unit with nothing undone, then UowTable.end */
static int apply_commit(PyObject *state, PyObject *uow, PyObject *ops, PyObject *txid)
{
    PyObject *queues = fget(state, s_queues);
    if (queues == NULL)
        return -1;
    int rc = -1;
    PyObject *last_name = NULL, *q = NULL; /* borrowed from the op / queues */
    Py_ssize_t n = PyList_GET_SIZE(ops);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i);
        if (!PyTuple_Check(op) || PyTuple_GET_SIZE(op) != 4) {
            PyErr_SetString(PyExc_TypeError, "a unit's operation must be a 4-tuple");
            goto done;
        }
        PyObject *kind = PyTuple_GET_ITEM(op, 0), *qname = PyTuple_GET_ITEM(op, 1),
                 *key = PyTuple_GET_ITEM(op, 2);
        if (last_name == NULL || qname != last_name) {
            int same = last_name != NULL ? PyObject_RichCompareBool(qname, last_name, Py_EQ) : 0;
            if (same < 0)
                goto done;
            if (!same) { /* units mostly touch one queue: look it up once */
                q = PyDict_GetItemWithError(queues, qname);
                if (q == NULL && PyErr_Occurred())
                    goto done;
                last_name = qname;
            }
        }
        if (q == NULL)
            continue;
        int is_put = PyObject_RichCompareBool(kind, s_P, Py_EQ);
        if (is_put < 0)
            goto done;
        PyObject *held = fget(q, is_put ? s_uncommitted : s_locked);
        if (held == NULL)
            goto done;
        PyObject *owner = PyDict_Check(held) ? PyDict_GetItemWithError(held, key) : NULL;
        int mine = owner != NULL ? PyObject_RichCompareBool(owner, txid, Py_EQ) : 0;
        if (mine < 0 || (owner == NULL && PyErr_Occurred())) {
            Py_DECREF(held);
            goto done;
        }
        if (mine && is_put) {
            if (PyDict_DelItem(held, key) < 0) {
                Py_DECREF(held);
                goto done;
            }
        } else if (mine) { /* a get: the message goes for good */
            PyObject *r = PyObject_CallMethodOneArg(q, s_remove, key);
            if (r == NULL) {
                Py_DECREF(held);
                goto done;
            }
            Py_DECREF(r);
        }
        Py_DECREF(held);
    }
    /* UowTable.end(u) */
    if (fset(uow, s_state_attr, s_ended) < 0)
        goto done;
    PyObject *uows = fget(state, s_uows);
    if (uows == NULL)
        goto done;
    PyObject *units = fget(uows, s_units);
    PyObject *r = units ? PyObject_CallMethodObjArgs(units, s_pop, txid, Py_None, NULL) : NULL;
    Py_XDECREF(units);
    Py_XDECREF(r);
    if (r == NULL) {
        Py_DECREF(uows);
        goto done;
    }
    PyObject *xid = fget(uow, s_xid);
    if (xid == NULL) {
        Py_DECREF(uows);
        goto done;
    }
    if (xid != Py_None) {
        PyObject *by_xid = fget(uows, s_by_xid);
        r = by_xid ? PyObject_CallMethodObjArgs(by_xid, s_pop, xid, Py_None, NULL) : NULL;
        Py_XDECREF(by_xid);
        Py_XDECREF(r);
        if (r == NULL) {
            Py_DECREF(xid);
            Py_DECREF(uows);
            goto done;
        }
    }
    Py_DECREF(xid);
    Py_DECREF(uows);
    PyObject *last = fget(state, s_last_uow);
    if (last == NULL)
        goto done;
    int is_last = last == uow;
    Py_DECREF(last);
    if (is_last && fset(state, s_last_uow, Py_None) < 0)
        goto done;
    rc = 0;
done:
    Py_DECREF(queues);
    return rc;
}

PyDoc_STRVAR(commit_doc,
"commit(store, uow) -> lsn | -1 | None\n\n"
"QueueManagerStore.commit's body, under the store lock (taken and released here): the "
"COMMIT record appended if the unit logged anything, the unit applied and ended, getters woken. "
"Returns the LSN to force, -1 when nothing was logged, or None, with nothing changed, "
"when the commit is not the common case (the Python path then does it).");

static PyObject *commit_locked(HotPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *store = args[0], *uow = args[1];
    int open = store_open(store);
    if (open <= 0)
        return open < 0 ? NULL : Py_NewRef(Py_None);
    int active = attr_equals(uow, s_state_attr, s_active);
    if (active <= 0)
        return active < 0 ? NULL : Py_NewRef(Py_None);
    int undone = attr_true(uow, s_undone);
    if (undone != 0)
        return undone < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *state = fget(store, s_state);
    if (state == NULL)
        return NULL;
    PyObject *result = NULL, *ops = NULL, *txid = NULL, *payload = NULL;
    int only_none = attr_none(state, s_only);
    if (only_none <= 0) {
        if (only_none == 0)
            result = Py_NewRef(Py_None);
        goto done;
    }
    ops = fget(uow, s_ops);
    txid = ops ? fget(uow, s_txid) : NULL;
    if (txid == NULL)
        goto done;
    if (!PyList_CheckExact(ops)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    int logged = attr_none(uow, s_first_lsn);
    if (logged < 0)
        goto done;
    logged = !logged;
    long long lsn = -1;
    if (logged) {
        unsigned long long txid_v = PyLong_AsUnsignedLongLong(txid);
        if (txid_v == (unsigned long long)-1 && PyErr_Occurred())
            goto done;
        payload = PyBytes_FromStringAndSize(NULL, 9);
        if (payload == NULL)
            goto done;
        uint8_t *p = (uint8_t *)PyBytes_AS_STRING(payload);
        p[0] = (uint8_t)self->commit_type;
        put_le(p + 1, txid_v, 8);
        lsn = store_append(self, store, payload, NULL);
        if (lsn < 0)
            goto done;
    }
    if (apply_commit(state, uow, ops, txid) < 0)
        goto done;
    int sleepers = attr_true(store, s_sleepers); /* only waiting getters need a notify */
    if (sleepers < 0)
        goto done;
    if (sleepers) {
        PyObject *cond = fget(store, s_cond);
        PyObject *r = cond ? PyObject_CallMethodNoArgs(cond, s_notify_all) : NULL;
        Py_XDECREF(cond);
        if (r == NULL)
            goto done;
        Py_DECREF(r);
    }
    result = PyLong_FromLongLong(lsn);
done:
    Py_DECREF(state);
    Py_XDECREF(ops);
    Py_XDECREF(txid);
    Py_XDECREF(payload);
    return result;
}

/* Call fn (its arguments checked by the caller) with store._lock held, taken and
 * released here, once the HotPath is known initialised: no Python code runs between
 * (the interpreter may switch threads at any bytecode, and a thread switched out while it
 * holds the store lock makes every other producer queue on it). */
static PyObject *with_store_lock(HotPath *self, PyObject *store,
                                 PyObject *(*fn)(HotPath *, PyObject *const *, Py_ssize_t),
                                 PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured(self))
        return NULL;
    PyObject *release = take_lock(store, &self->store_lock, &self->store_acquire,
                                  &self->store_release);
    if (release == NULL)
        return NULL;
    return give_lock(release, fn(self, args, nargs)); /* released even when fn raised */
}

static PyObject *begin_args(HotPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    return begin_locked(self, args[0]);
}

static PyObject *HotPath_begin(HotPath *self, PyObject *store)
{
    return with_store_lock(self, store, begin_args, &store, 1);
}

static PyObject *HotPath_put(HotPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "put(store, queue, body, persistent, priority, uow)");
        return NULL;
    }
    return with_store_lock(self, args[0], put_locked, args, nargs);
}

static PyObject *HotPath_commit(HotPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "commit(store, uow)");
        return NULL;
    }
    return with_store_lock(self, args[0], commit_locked, args, nargs);
}

static PyMethodDef HotPath_methods[] = {
    {"begin", (PyCFunction)HotPath_begin, METH_O, begin_doc},
    {"put", (PyCFunction)(void (*)(void))HotPath_put, METH_FASTCALL, put_doc},
    {"commit", (PyCFunction)(void (*)(void))HotPath_commit, METH_FASTCALL, commit_doc},
    {NULL}
};

static PyTypeObject HotPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "miqm.store._hotpath.HotPath",
    .tp_doc = PyDoc_STR("HotPath(message_type, unit_type, full_error, put_type, commit_type):"
                        " the store's begin/put/commit common case in C."),
    .tp_basicsize = sizeof(HotPath),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)HotPath_init,
    .tp_dealloc = (destructor)HotPath_dealloc,
    .tp_methods = HotPath_methods,
};

/* ------------------------------------------------------------------ store methods */

/* QueueManagerStore.begin, .put and .commit themselves, with the C part: a method of the
 * class (a method descriptor, so a call passes the store without binding) that does the
 * common case through the store's HotPath and hands anything else, with the same
 * arguments, to the Python body it replaced (the general path and the reference). With
 * 64 producers on two cores, every microsecond of bytecode per commit is a microsecond
 * of the GIL: the Python frames wrapping the three C calls and the force were a fifth of
 * it. A store whose _hot is not a HotPath (None, or a test's stand-in) goes through the
 * same steps with its _hot called from here. */
enum { M_BEGIN, M_PUT, M_COMMIT };

typedef struct {
    PyObject_HEAD
    int kind;
    PyObject *general; /* the Python function: QueueManagerStore's body for this call */
    vectorcallfunc vectorcall;
} StoreMethod;

static PyObject *s_begin_name, *s_put_name, *s_commit_name, *s_hot, *s_after_op_locked,
    *s_force, *s_guard, *s_fq, *s_enter, *s_after_enter, *s_uow;

static PyTypeObject HotPathType;

/* hot.<kind>(args) for a HotPath, or the stand-in's method of that name: the result
 * (None: declined), or NULL on error */
static PyObject *hot_call(PyObject *hot, int kind, PyObject *const *args, Py_ssize_t n)
{
    if (Py_IS_TYPE(hot, &HotPathType)) {
        HotPath *h = (HotPath *)hot;
        switch (kind) {
        case M_BEGIN:
            return with_store_lock(h, args[0], begin_args, args, 1);
        case M_PUT:
            return with_store_lock(h, args[0], put_locked, args, 6);
        default:
            return with_store_lock(h, args[0], commit_locked, args, 2);
        }
    }
    PyObject *name = kind == M_BEGIN ? s_begin_name : kind == M_PUT ? s_put_name
                                                                     : s_commit_name;
    PyObject *fn = PyObject_GetAttr(hot, name);
    if (fn == NULL)
        return NULL;
    PyObject *r = PyObject_Vectorcall(fn, args, (size_t)n, NULL);
    Py_DECREF(fn);
    return r;
}

/* after an operation the hot path did: store._after_op_locked() when _check_due */
static int after_op(PyObject *store)
{
    int due = attr_true(store, s_check_due);
    if (due <= 0)
        return due;
    PyObject *r = PyObject_CallMethodNoArgs(store, s_after_op_locked);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* QueueManagerStore._force(lsn) for a commit: the common case, a store with no write
 * guard whose log is ready and usable with the C force queue, waits in the queue from
 * here (RecoveryLog.force's steps without its frame); a caller that must lead, and
 * everything else, goes through Python. As _force, any failure stops the store. */
static int commit_force(PyObject *store, PyObject *lsn_obj, long long lsn)
{
    PyObject *guard = fget(store, s_guard), *log = NULL, *fq = NULL, *how = NULL;
    int rc = -1, plain = guard == Py_None;
    if (guard == NULL)
        return -1;
    Py_DECREF(guard);
    if (plain && (log = fget(store, s_log)) == NULL)
        return -1;
    if (log != NULL) {
        fq = fget(log, s_fq);
        if (fq == NULL) { /* not a RecoveryLog (a test's stand-in): _force does it */
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                goto fail;
            PyErr_Clear();
        } else if (fq == Py_None) {
            Py_CLEAR(fq);
        }
    }
    if (fq != NULL) {
        int ok = 1;
        long long durable = get_ll(log, s_durable, &ok);
        if (!ok)
            goto fail;
        if (lsn < durable) {
            rc = 0;
            goto done;
        }
        int ready = attr_true(log, s_ready);
        int usable = ready > 0 ? store_open(log) : ready; /* the log's _closed / _failed */
        if (usable < 0)
            goto fail;
        if (!usable)
            Py_CLEAR(fq);
    }
    if (fq == NULL) { /* not the common case */
        Py_XDECREF(log);
        PyObject *f = PyObject_CallMethodOneArg(store, s_force, lsn_obj);
        Py_XDECREF(f);
        return f == NULL ? -1 : 0;
    }
    how = PyObject_CallMethodOneArg(fq, s_enter, lsn_obj); /* waits, the GIL released */
    if (how == NULL)
        goto fail;
    long h = PyLong_AsLong(how);
    if (h == -1 && PyErr_Occurred())
        goto fail;
    if (h != 0) { /* we lead a force, or the log stopped */
        PyObject *r = PyObject_CallMethodOneArg(log, s_after_enter, how);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
    }
    rc = 0;
    goto done;
fail:
    if (log != NULL) /* as _force: the store stops on a failed force */
        stop_store(store, NULL);
done:
    Py_XDECREF(how);
    Py_XDECREF(fq);
    Py_XDECREF(log);
    return rc;
}

static PyObject *general(StoreMethod *m, PyObject *const *args, size_t nargsf,
                         PyObject *kwnames)
{
    return PyObject_Vectorcall(m->general, args, nargsf, kwnames);
}

static PyObject *StoreMethod_vectorcall(StoreMethod *m, PyObject *const *args, size_t nargsf,
                                        PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    int expect = m->kind == M_BEGIN ? 1 : m->kind == M_PUT ? 3 : 2;
    if (nargs != expect || (m->kind != M_PUT && nkw != 0))
        return general(m, args, nargsf, kwnames); /* its own errors for a wrong call */
    PyObject *store = args[0];
    PyObject *hot = fget(store, s_hot);
    if (hot == NULL)
        return NULL;
    if (hot == Py_None) {
        Py_DECREF(hot);
        return general(m, args, nargsf, kwnames);
    }
    PyObject *r = NULL;
    if (m->kind == M_PUT) {
        /* put(queue, body, *, persistent=None, priority=None, msgid=None, correlid=None,
         * uow=None): the hot path takes a unit's put with msgid and correlid left to it */
        PyObject *persistent = Py_None, *priority = Py_None, *uow = Py_None;
        int plain = 1;
        for (Py_ssize_t i = 0; i < nkw && plain; i++) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
            if (k == s_uow)
                uow = v;
            else if (k == s_persistent)
                persistent = v;
            else if (k == s_priority)
                priority = v;
            else if ((k == s_msgid || k == s_correlid) && v == Py_None)
                ;
            else
                plain = 0; /* a msgid or correlid given, or a name to check */
        }
        if (!plain || uow == Py_None) {
            Py_DECREF(hot);
            return general(m, args, nargsf, kwnames);
        }
        PyObject *call[6] = {store, args[1], args[2], persistent, priority, uow};
        r = hot_call(hot, M_PUT, call, 6);
    } else {
        r = hot_call(hot, m->kind, args, nargs);
    }
    Py_DECREF(hot);
    if (r == NULL)
        return NULL;
    if (r == Py_None) { /* declined, nothing done: the general path does all of it */
        Py_DECREF(r);
        return general(m, args, nargsf, kwnames);
    }
    if (m->kind == M_BEGIN)
        return r;
    if (after_op(store) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    if (m->kind == M_PUT)
        return r;
    /* commit: the LSN of its COMMIT record, -1 when the unit logged nothing */
    long long lsn = PyLong_AsLongLong(r);
    if (lsn == -1 && PyErr_Occurred()) {
        Py_DECREF(r);
        return NULL;
    }
    int rc = lsn >= 0 ? commit_force(store, r, lsn) : 0;
    Py_DECREF(r);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *StoreMethod_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "general", NULL};
    const char *name;
    PyObject *fn;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sO", kwlist, &name, &fn))
        return NULL;
    int kind = strcmp(name, "begin") == 0 ? M_BEGIN : strcmp(name, "put") == 0 ? M_PUT
                                                   : strcmp(name, "commit") == 0 ? M_COMMIT
                                                                                 : -1;
    if (kind < 0 || !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_ValueError,
                        "StoreMethod(name, general): name is begin, put or commit and "
                        "general the Python function");
        return NULL;
    }
    StoreMethod *m = (StoreMethod *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    m->kind = kind;
    m->general = Py_NewRef(fn);
    m->vectorcall = (vectorcallfunc)StoreMethod_vectorcall;
    return (PyObject *)m;
}

static void StoreMethod_dealloc(StoreMethod *m)
{
    Py_XDECREF(m->general);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* store.put: a bound method, as for a Python function (help(), getattr and the like) */
static PyObject *StoreMethod_get(PyObject *m, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(m);
    return PyMethod_New(m, obj);
}

/* the Python body's name and docstring, for help() and the docs */
static PyObject *StoreMethod_getattro(StoreMethod *m, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr((PyObject *)m, name);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    PyErr_Clear();
    return PyObject_GetAttr(m->general, name);
}

static PyMemberDef StoreMethod_members[] = {
    {"general", T_OBJECT_EX, offsetof(StoreMethod, general), READONLY,
     "the Python body this method hands what is not the common case to"},
    {"__wrapped__", T_OBJECT_EX, offsetof(StoreMethod, general), READONLY,
     "the same (inspect.signature follows it)"},
    {NULL}
};

static PyObject *StoreMethod_doc(StoreMethod *m, void *closure)
{
    return PyObject_GetAttrString(m->general, "__doc__");
}

static PyGetSetDef StoreMethod_getset[] = {
    {"__doc__", (getter)StoreMethod_doc, NULL, "the Python body's docstring", NULL},
    {NULL}
};

static PyTypeObject StoreMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "miqm.store._hotpath.StoreMethod",
    .tp_doc = PyDoc_STR("StoreMethod(name, general): QueueManagerStore.begin, .put or .commit "
                        "doing the common case in C, anything else through general."),
    .tp_basicsize = sizeof(StoreMethod),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_new = StoreMethod_new,
    .tp_dealloc = (destructor)StoreMethod_dealloc,
    .tp_vectorcall_offset = offsetof(StoreMethod, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = StoreMethod_get,
    .tp_getattro = (getattrofunc)StoreMethod_getattro,
    .tp_members = StoreMethod_members,
    .tp_getset = StoreMethod_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "miqm.store._hotpath",
    "The store's begin/put/commit common case in C (see miqm/store/qmstore.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__hotpath(void)
{
    INTERN(s_closed, "_closed");
    INTERN(s_failed, "_failed");
    INTERN(s_state, "state");
    INTERN(s_queues, "queues");
    INTERN(s_damaged, "_damaged");
    INTERN(s_state_attr, "state");
    INTERN(s_active, "active");
    INTERN(s_ended, "ended");
    INTERN(s_attrs, "attrs");
    INTERN(s_PUT, "PUT");
    INTERN(s_ENABLED, "ENABLED");
    INTERN(s_MAXMSGL, "MAXMSGL");
    INTERN(s_DEFPRTY, "DEFPRTY");
    INTERN(s_DEFPSIST, "DEFPSIST");
    INTERN(s_YES, "YES");
    INTERN(s_ops, "ops");
    INTERN(s_qmgr, "qmgr");
    INTERN(s_MAXUMSGS, "MAXUMSGS");
    INTERN(s_tuning, "tuning");
    INTERN(s_max_umsgs, "max_umsgs");
    INTERN(s_present, "present");
    INTERN(s_locked, "locked");
    INTERN(s_MAXDEPTH, "MAXDEPTH");
    INTERN(s_next_key, "next_key");
    INTERN(s_msgid_head, "_msgid_head");
    INTERN(s_wallclock, "_wallclock");
    INTERN(s_txid, "txid");
    INTERN(s_log, "log");
    INTERN(s_append, "append");
    INTERN(s_first_lsn, "first_lsn");
    INTERN(s_pin_threshold, "_pin_threshold");
    INTERN(s_pin_limit, "_pin_limit");
    INTERN(s_check_due, "_check_due");
    INTERN(s_records_since_cp, "_records_since_cp");
    INTERN(s_recd_max, "checkpoint_log_recd_max");
    INTERN(s_last_lsn, "_last_lsn");
    INTERN(s_mem, "mem");
    INTERN(s_index, "index");
    INTERN(s_keys, "keys");
    INTERN(s_blocks, "blocks");
    INTERN(s_lens, "lens");
    INTERN(s_add, "add");
    INTERN(s_uncommitted, "uncommitted");
    INTERN(s_P, "P");
    INTERN(s_undone, "undone");
    INTERN(s_only, "only");
    INTERN(s_remove, "remove");
    INTERN(s_uows, "uows");
    INTERN(s_units, "units");
    INTERN(s_xid, "xid");
    INTERN(s_by_xid, "by_xid");
    INTERN(s_last_uow, "last_uow");
    INTERN(s_sleepers, "_sleepers");
    INTERN(s_cond, "_cond");
    INTERN(s_notify_all, "notify_all");
    INTERN(s_next_txid, "next_txid");
    INTERN(s_pop, "pop");
    INTERN(s_priority, "priority");
    INTERN(s_persistent, "persistent");
    INTERN(s_put_time, "put_time");
    INTERN(s_msgid, "msgid");
    INTERN(s_correlid, "correlid");
    INTERN(s_body, "body");
    INTERN(s_ready, "_ready");
    INTERN(s_lock, "_lock");
    INTERN(s_acquire, "acquire");
    INTERN(s_release, "release");
    INTERN(s_buf, "_buf");
    INTERN(s_durable, "_durable");
    INTERN(s_buffer_limit, "_buffer_limit");
    INTERN(s_page_limit, "_page_limit");
    INTERN(s_try_append, "try_append");
    INTERN(s_next_space_check, "_next_space_check");
    INTERN(s_space_check_every, "_space_check_every");
    INTERN(s_hot, "_hot");
    INTERN(s_after_op_locked, "_after_op_locked");
    INTERN(s_force, "_force");
    INTERN(s_guard, "_guard");
    INTERN(s_fq, "_fq");
    INTERN(s_enter, "enter");
    INTERN(s_after_enter, "_after_enter");
    INTERN(s_uow, "uow");
    INTERN(s_begin_name, "begin");
    INTERN(s_put_name, "put");
    INTERN(s_commit_name, "commit");
    if ((no_id = PyBytes_FromStringAndSize(NULL, ID_LEN)) == NULL)
        return NULL;
    memset(PyBytes_AS_STRING(no_id), 0, ID_LEN);
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddType(m, &HotPathType) < 0 || /* readies and adds it */
                      PyModule_AddType(m, &StoreMethodType) < 0))
        Py_CLEAR(m);
    return m;
}
