/* The recovery log's force queue in C: the twin of the Python queue in
 * RecoveryLog.force / _hand_off (miqm/store/log.py), which stays the reference.
 *
 * One caller at a time leads a force; the others wait in LSN order. When a force ends the
 * leader wakes exactly the callers it made durable and hands the lead to the first one
 * left. Here the queue is a C list and each caller waits on its own thread's semaphore
 * with the GIL released, so with many producers a commit's wait and wake-up run no
 * Python bytecode (the Python queue took a wait lock, a heap push, a thread-local lookup
 * and a second lock per waiter, all under the GIL every producer needs).
 *
 * The mutex guards the list and is held only for a few instructions. A caller holding the
 * GIL only tries it; when it is taken (its holder may have been preempted) the caller
 * waits for it with the GIL released, so the interpreter never waits on a descheduled
 * thread, and no thread ever waits for the mutex while holding the GIL (no deadlock).
 *
 * Gathering (only when the owner asks for it: gather_cpu; the store's default is none, and
 * the queue manager opts in through qm.ini's GroupCommitCPU, whose default is auto): a
 * thread's first wait moves it, for good, to the queue's gather CPU (the CPU the first
 * waiter ran on, or one set by the caller). The threads that share forces need
 * the GIL one at a time, so spreading them over CPUs buys no parallelism, and every
 * wake-up and GIL hand-over between CPUs costs a cross-CPU interrupt: on the 2-vCPU
 * machine this was measured on, 64 producers gathered on one CPU took 32-36 us of CPU per
 * commit against 53-61 us spread (docs/benchmarks.md). The main thread is never moved
 * (the threads it starts and the processes it forks would inherit the mask), nor is a
 * thread that called keep_cpus(), nor one that may not run on the gather CPU or may run
 * on one CPU only (a queue manager started under taskset keeps its choice).
 *
 * C API: the limited API of CPython 3.11 (Py_LIMITED_API below; requires-python is
 * >=3.11) and nothing private: the type is a heap type made from a spec.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000 /* see "C API" at the top of this file */
#include <Python.h>

#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdlib.h>

/* gather_cpu values besides a CPU number */
enum { GATHER_NONE = -1, GATHER_AUTO = -2 };

/* How a wait ended (enter's result) */
enum { DURABLE = 0, LEAD = 1, STOPPED = 2 };

/* A thread's place in a queue: one per thread (a thread waits for one force at a time),
 * made on its first wait and freed when the thread ends, not after every wait. */
typedef struct Waiter {
    int64_t lsn;
    struct Waiter *next;
    sem_t sem;
    int outcome;
    int placed; /* its CPUs are settled: gathered, or left as they were */
} Waiter;

static pthread_key_t waiter_key; /* the thread's Waiter; freed by free_waiter at its end */

static void free_waiter(void *p)
{
    Waiter *w = p;
    sem_destroy(&w->sem);
    free(w);
}

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    int mu_ready;
    Waiter *head, *tail; /* waiting callers, LSN order (FIFO among equal LSNs) */
    Py_ssize_t waiting;
    int flushing; /* a leader is forcing */
    int stopped;  /* a force failed or the log closed: every later caller is told so */
    int64_t durable;
    int gather_cpu;             /* a CPU, GATHER_AUTO until the first wait, or GATHER_NONE */
    unsigned long main_thread;  /* its ident: never moved */
} ForceQueue;

static int ForceQueue_init(ForceQueue *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"durable", "gather_cpu", "main_thread", NULL};
    long long durable = 0;
    int gather_cpu = GATHER_NONE;
    unsigned long main_thread = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Lik", kwlist, &durable, &gather_cpu,
                                     &main_thread))
        return -1;
    if (gather_cpu < GATHER_AUTO || gather_cpu >= CPU_SETSIZE) {
        PyErr_Format(PyExc_ValueError, "gather_cpu %d is not a CPU number, -1 (none) or -2 "
                     "(auto)", gather_cpu);
        return -1;
    }
    if (!self->mu_ready) {
        if (pthread_mutex_init(&self->mu, NULL) != 0) {
            PyErr_SetString(PyExc_OSError, "cannot create the force queue's mutex");
            return -1;
        }
        self->mu_ready = 1;
    }
    self->durable = durable;
    self->gather_cpu = gather_cpu;
    self->main_thread = main_thread;
    return 0;
}

static void ForceQueue_dealloc(ForceQueue *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    if (self->mu_ready)
        pthread_mutex_destroy(&self->mu);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp); /* a heap type: each instance holds a reference to it */
}

/* Take the mutex, the GIL held (see the top of this file). */
static void lock_queue(ForceQueue *self)
{
    if (pthread_mutex_trylock(&self->mu) == 0)
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    Py_END_ALLOW_THREADS
}

static int ready(ForceQueue *self)
{
    if (!self->mu_ready) {
        PyErr_SetString(PyExc_RuntimeError, "ForceQueue is not initialised");
        return 0;
    }
    return 1;
}

static Waiter *my_waiter(void)
{
    Waiter *w = pthread_getspecific(waiter_key);
    if (w == NULL) {
        /* plain calloc/free: the destructor runs at thread exit, without the GIL */
        w = calloc(1, sizeof(Waiter));
        if (w == NULL)
            return NULL;
        if (sem_init(&w->sem, 0, 0) != 0) {
            free(w);
            return NULL;
        }
        if (pthread_setspecific(waiter_key, w) != 0) {
            free_waiter(w);
            return NULL;
        }
    }
    return w;
}

/* The CPU a thread about to wait for the first time should move to, or -1 (the mutex
 * held: the first waiter fixes an automatic choice). */
static int gather_target(ForceQueue *self, Waiter *w)
{
    if (self->gather_cpu == GATHER_NONE)
        return -1; /* left unsettled: another queue may gather it */
    w->placed = 1;
    if (PyThread_get_thread_ident() == self->main_thread)
        return -1;
    if (self->gather_cpu == GATHER_AUTO) {
        int cpu = sched_getcpu();
        self->gather_cpu = cpu >= 0 ? cpu : GATHER_NONE;
    }
    return self->gather_cpu;
}

/* Move the calling thread to cpu if it may run there and on others too (a thread already
 * confined to its own choice of CPUs is left alone). Without the GIL: it may migrate. */
static void gather_thread(int cpu)
{
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0 || !CPU_ISSET(cpu, &mask)
            || CPU_COUNT(&mask) < 2)
        return;
    CPU_ZERO(&mask);
    CPU_SET(cpu, &mask);
    (void)sched_setaffinity(0, sizeof mask, &mask); /* best effort: it only saves CPU */
}

PyDoc_STRVAR(enter_doc,
"enter(lsn) -> 0 | 1 | 2\n\n"
"0: the record at lsn is durable (return to the caller); 1: the caller leads a force now "
"(it must call done() after it); 2: the log stopped (a force failed or it closed). Waits, "
"with the GIL released, while another caller leads and lsn is not yet durable. A thread's "
"first wait moves it to the gather CPU (see the module's comment).");

static PyObject *ForceQueue_enter(ForceQueue *self, PyObject *arg)
{
    if (!ready(self))
        return NULL;
    long long lsn = PyLong_AsLongLong(arg);
    if (lsn == -1 && PyErr_Occurred())
        return NULL;
    Waiter *w = my_waiter();
    if (w == NULL)
        return PyErr_NoMemory();
    int outcome, gather = -1;
    lock_queue(self);
    if (lsn < self->durable) {
        outcome = DURABLE;
    } else if (self->stopped) {
        outcome = STOPPED;
    } else if (!self->flushing) {
        self->flushing = 1;
        outcome = LEAD;
    } else {
        w->lsn = lsn;
        w->next = NULL;
        w->outcome = -1;
        if (self->tail == NULL) {
            self->head = self->tail = w;
        } else if (self->tail->lsn <= lsn) { /* the usual case: LSNs arrive rising */
            self->tail->next = w;
            self->tail = w;
        } else {
            Waiter **at = &self->head;
            while ((*at)->lsn <= lsn)
                at = &(*at)->next;
            w->next = *at;
            *at = w;
        }
        self->waiting++;
        outcome = -1;
        if (!w->placed)
            gather = gather_target(self, w);
    }
    pthread_mutex_unlock(&self->mu);
    if (outcome < 0) {
        Py_BEGIN_ALLOW_THREADS
        if (gather >= 0)
            gather_thread(gather);
        while (sem_wait(&w->sem) != 0 && errno == EINTR)
            ;
        Py_END_ALLOW_THREADS
        outcome = w->outcome; /* written before the post that woke us */
    }
    return PyLong_FromLong(outcome);
}

PyDoc_STRVAR(done_doc,
"done(durable, stopped)\n\n"
"The leader's force ended: everything below durable is on stable storage (stopped: the "
"force failed or the log closed). Wakes the callers it made durable (all of them when "
"stopped) and hands the lead to the first one left, or ends the leading.");

#define WAKE_BATCH 64

/* Wake waiters with the GIL released: each post is a system call and a wake-up (a few
 * microseconds on a virtual machine, dozens per force), and the threads woken need the
 * GIL to return to their callers, so they run on the other core meanwhile. The lead, if
 * handed over, is posted first: the next force starts while the rest are woken. */
static void post_all(Waiter **woken, int n, Waiter *lead)
{
    if (lead != NULL)
        sem_post(&lead->sem);
    if (n == 0)
        return;
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < n; i++)
        sem_post(&woken[i]->sem);
    Py_END_ALLOW_THREADS
}

static PyObject *ForceQueue_done(ForceQueue *self, PyObject *args)
{
    long long durable;
    int stopped;
    if (!ready(self) || !PyArg_ParseTuple(args, "Lp", &durable, &stopped))
        return NULL;
    Waiter *woken[WAKE_BATCH], *lead = NULL;
    int n = 0;
    lock_queue(self);
    if (durable > self->durable)
        self->durable = durable;
    if (stopped)
        self->stopped = 1;
    for (;;) {
        if (n == WAKE_BATCH) { /* posted with the mutex released, then the list re-read */
            pthread_mutex_unlock(&self->mu);
            post_all(woken, n, NULL);
            n = 0;
            lock_queue(self);
        }
        Waiter *w = self->head;
        if (w == NULL) {
            self->flushing = 0;
            break;
        }
        self->head = w->next;
        if (self->head == NULL)
            self->tail = NULL;
        self->waiting--;
        if (w->lsn < self->durable) {
            w->outcome = DURABLE;
        } else if (self->stopped) {
            w->outcome = STOPPED;
        } else {
            w->outcome = LEAD; /* flushing stays set: the lead passes without a gap */
            lead = w;
            break;
        }
        woken[n++] = w;
    }
    pthread_mutex_unlock(&self->mu);
    post_all(woken, n, lead);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(waiting_doc,
"waiting() -> int\n\nCallers waiting for a force now, the leader included.");

static PyObject *ForceQueue_waiting(ForceQueue *self, PyObject *Py_UNUSED(ignored))
{
    if (!ready(self))
        return NULL;
    lock_queue(self);
    Py_ssize_t n = self->waiting + (self->flushing ? 1 : 0);
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromSsize_t(n);
}

PyDoc_STRVAR(gather_cpu_doc,
"gather_cpu() -> int\n\nThe CPU waiting threads are moved to; -1: none (not set, or not "
"known), -2: chosen at the first wait, which has not happened yet.");

static PyObject *ForceQueue_gather_cpu(ForceQueue *self, PyObject *Py_UNUSED(ignored))
{
    if (!ready(self))
        return NULL;
    lock_queue(self);
    int cpu = self->gather_cpu;
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromLong(cpu);
}

static PyMethodDef ForceQueue_methods[] = {
    {"enter", (PyCFunction)ForceQueue_enter, METH_O, enter_doc},
    {"done", (PyCFunction)ForceQueue_done, METH_VARARGS, done_doc},
    {"waiting", (PyCFunction)ForceQueue_waiting, METH_NOARGS, waiting_doc},
    {"gather_cpu", (PyCFunction)ForceQueue_gather_cpu, METH_NOARGS, gather_cpu_doc},
    {NULL}
};

static PyType_Slot ForceQueue_slots[] = {
    {Py_tp_doc, (void *)PyDoc_STR("ForceQueue(durable=0): the recovery log's force queue (C "
                                  "twin of the Python queue in RecoveryLog.force).")},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_init, (void *)ForceQueue_init},
    {Py_tp_dealloc, (void *)ForceQueue_dealloc},
    {Py_tp_methods, ForceQueue_methods},
    {0, NULL},
};

static PyType_Spec ForceQueue_spec = {
    .name = "miqm.store._forcequeue.ForceQueue",
    .basicsize = sizeof(ForceQueue),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = ForceQueue_slots,
};

PyDoc_STRVAR(keep_cpus_doc,
"keep_cpus()\n\nNo force queue ever moves the calling thread (the checkpoint thread: its "
"work without the GIL belongs beside the producers' CPU, not on it).");

static PyObject *keep_cpus(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    Waiter *w = my_waiter();
    if (w == NULL)
        return PyErr_NoMemory();
    w->placed = 1;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"keep_cpus", keep_cpus, METH_NOARGS, keep_cpus_doc},
    {NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "miqm.store._forcequeue",
    "The recovery log's force queue in C (see miqm/store/log.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__forcequeue(void)
{
    if (pthread_key_create(&waiter_key, free_waiter) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot create the force queue's thread key");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *type = PyType_FromSpec(&ForceQueue_spec);
    if (type == NULL || PyModule_AddType(m, (PyTypeObject *)type) < 0)
        Py_CLEAR(m);
    Py_XDECREF(type);
    return m;
}
