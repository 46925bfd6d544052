/* The recovery log's append buffer in C: framing, sealing and the write of a force.
 *
 * The pure-Python twin is miqm/store/logbuffer.py (PyLogBuffer); both produce the same
 * bytes (tests/unit/test_logbuffer.py compares them). The layout is described in
 * miqm/store/framing.py and docs/log-format.md.
 *
 * Why C: a commit's cost outside the disk is Python bytecode. Framing a record, sealing
 * pages (header + CRC-32C) and issuing the writes and fdatasync of a force here, with
 * the GIL released around the I/O, takes that cost off the commit path.
 *
 * Threading: every method runs under the GIL, so appends are atomic. The owner (the
 * RecoveryLog) calls seal()/write()/release_written() from one thread at a time (its
 * flush lock). write() releases the GIL while it writes pages captured by seal(): pages
 * are separately allocated and only freed by release_written(), so appends running
 * meanwhile (which only add bytes after a page's sealed length, outside its checksum, or
 * add pages) never move or free what is being written.
 *
 * C API: the limited API of CPython 3.11 (Py_LIMITED_API below; requires-python is
 * >=3.11) and nothing private: the type is a heap type made from a spec, objects are
 * reached only through API functions. No business rules live here: what a record means
 * is the store's (Python) business; this file frames, checksums, seals and writes bytes.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000 /* see "C API" at the top of this file */
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096
#define PAGE_HEADER 32
#define DATA (PAGE - PAGE_HEADER)
#define FRAG_HEADER 8
#define SEALED_FLAG 1
#define SLOTS 2
enum { FULL = 1, FIRST = 2, MIDDLE = 3, LAST = 4 };

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

#include "_cparts.h"
#include "_crc32c.h"

/* ------------------------------------------------------------------ the buffer */

typedef struct {
    uint8_t data[PAGE];
    uint32_t used;
    int sealed;
} Page;

/* amqldmpa's write figures: sizes in bytes, times in microseconds, moving averages over
 * about 8 (short) and 128 (long) forces, and the maximum of each of the last 8 files. */
#define STAT_FILES 8
typedef struct {
    double size_short, size_long, time_short, time_long, time_short_max, time_long_max;
    double time_max, time_max_at;
    long long size_max, forces;
    long long dsync_forces; /* forces written through an O_DSYNC descriptor */
    long long file_extent[STAT_FILES];
    double file_max[STAT_FILES];
    int files;
} WriteStats;

static void note_write(WriteStats *st, long long size, double micros, long long extent)
{
    st->forces++;
    st->size_short += (size - st->size_short) / 8;
    st->size_long += (size - st->size_long) / 128;
    if (size > st->size_max)
        st->size_max = size;
    st->time_short += (micros - st->time_short) / 8;
    st->time_long += (micros - st->time_long) / 128;
    if (st->time_short > st->time_short_max)
        st->time_short_max = st->time_short;
    if (st->time_long > st->time_long_max)
        st->time_long_max = st->time_long;
    if (micros > st->time_max) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        st->time_max = micros;
        st->time_max_at = (double)now.tv_sec + now.tv_nsec / 1e9;
    }
    if (st->files == 0 || st->file_extent[st->files - 1] != extent) {
        if (st->files == STAT_FILES) {
            memmove(st->file_extent, st->file_extent + 1, sizeof(long long) * (STAT_FILES - 1));
            memmove(st->file_max, st->file_max + 1, sizeof(double) * (STAT_FILES - 1));
            st->files--;
        }
        st->file_extent[st->files] = extent;
        st->file_max[st->files] = micros;
        st->files++;
    } else if (micros > st->file_max[st->files - 1]) {
        st->file_max[st->files - 1] = micros;
    }
}

static double monotonic_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

typedef struct {
    PyObject_HEAD
    int64_t first_page;
    uint32_t generation;
    Page **pages;
    Py_ssize_t count, cap;
    int64_t append_lsn;
    /* what the last seal() captured, for write() and release_written() */
    Page **snap;
    int *snap_sealed;
    Py_ssize_t snap_count, snap_cap;
    int64_t snap_first;
    int64_t snap_batch_start, snap_target; /* the force the capture is for */
    int writing; /* a write of the capture is under way (GIL released) */
    int sync_fd_refused; /* a write through the O_DSYNC descriptor failed EINVAL */
    WriteStats stats;
} LogBuffer;

/* Methods that need the buffer initialised (and, for capture users, no write under way):
 * a misuse raises instead of touching freed or missing memory. */
static int usable(LogBuffer *self, int capture)
{
    if (self->count == 0) {
        PyErr_SetString(PyExc_RuntimeError, "LogBuffer is not initialised");
        return 0;
    }
    if (capture && self->writing) {
        PyErr_SetString(PyExc_RuntimeError, "a force of this LogBuffer is already under way");
        return 0;
    }
    return 1;
}

static int64_t page_lsn(int64_t g) { return g * PAGE + PAGE_HEADER; }

static Page *new_page(void)
{
    Page *pg = NULL;
    if (posix_memalign((void **)&pg, PAGE, sizeof(Page)) != 0)
        return NULL;
    memset(pg, 0, sizeof(Page));
    return pg;
}

static int add_page(LogBuffer *self)
{
    if (self->count == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 16;
        Page **grown = PyMem_Realloc(self->pages, (size_t)cap * sizeof(Page *));
        if (grown == NULL)
            return -1;
        self->pages = grown;
        self->cap = cap;
    }
    Page *pg = new_page();
    if (pg == NULL)
        return -1;
    self->pages[self->count++] = pg;
    return 0;
}

static int LogBuffer_init(LogBuffer *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"first_page", "generation", "seed", NULL};
    long long first_page;
    unsigned long generation;
    Py_buffer seed;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Lky*", kwlist, &first_page, &generation,
                                     &seed))
        return -1;
    if (self->pages != NULL) {
        PyBuffer_Release(&seed);
        PyErr_SetString(PyExc_RuntimeError, "LogBuffer is already initialised");
        return -1;
    }
    if (seed.len > DATA || first_page < 0 || generation > 0xFFFFFFFFul) {
        PyBuffer_Release(&seed);
        PyErr_SetString(PyExc_ValueError, "seed longer than a page's data, or bad page/generation");
        return -1;
    }
    self->first_page = first_page;
    self->generation = (uint32_t)generation;
    if (add_page(self) < 0) {
        PyBuffer_Release(&seed);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(self->pages[0]->data + PAGE_HEADER, seed.buf, (size_t)seed.len);
    self->pages[0]->used = (uint32_t)seed.len;
    self->append_lsn = page_lsn(first_page) + seed.len;
    PyBuffer_Release(&seed);
    return 0;
}

static void LogBuffer_dealloc(LogBuffer *self)
{
    for (Py_ssize_t i = 0; i < self->count; i++)
        free(self->pages[i]);
    PyMem_Free(self->pages);
    PyMem_Free(self->snap);
    PyMem_Free(self->snap_sealed);
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp); /* a heap type: each instance holds a reference to it */
}

static void put_fragment(Page *pg, size_t len, int kind, uint32_t gen, const uint8_t *src)
{
    uint8_t *at = pg->data + PAGE_HEADER + pg->used;
    put_le(at, len, 2);
    at[2] = (uint8_t)kind;
    at[3] = 0;
    put_le(at + 4, gen, 4);
    memcpy(at + FRAG_HEADER, src, len);
    pg->used += (uint32_t)(FRAG_HEADER + len);
}

PyDoc_STRVAR(append_doc,
"append(payload) -> lsn\n\nFrame one record into the buffer (split across pages when it "
"does not fit) and return its LSN. Pages filled on the way are sealed.");

/* Frame the record in view into the buffer; its LSN, or -1 with MemoryError set. */
static int64_t append_view(LogBuffer *self, Py_buffer *view)
{
    const uint8_t *src = view->buf;
    size_t remaining = (size_t)view->len;
    Page *pg = self->pages[self->count - 1];
    int64_t lsn;
    if (pg->used + FRAG_HEADER + remaining <= DATA) {
        lsn = page_lsn(self->first_page + self->count - 1) + pg->used;
        put_fragment(pg, remaining, FULL, self->generation, src);
    } else {
        int first = 1;
        lsn = -1;
        for (;;) {
            pg = self->pages[self->count - 1];
            size_t space = DATA - pg->used;
            if (space < FRAG_HEADER + (remaining ? 1u : 0u)) {
                pg->sealed = 1;
                if (add_page(self) < 0) {
                    PyErr_NoMemory();
                    return -1;
                }
                continue;
            }
            size_t chunk = space - FRAG_HEADER < remaining ? space - FRAG_HEADER : remaining;
            int last = chunk == remaining;
            int kind = first ? (last ? FULL : FIRST) : (last ? LAST : MIDDLE);
            if (first) {
                lsn = page_lsn(self->first_page + self->count - 1) + pg->used;
                first = 0;
            }
            put_fragment(pg, chunk, kind, self->generation, src);
            src += chunk;
            remaining -= chunk;
            if (last)
                break;
        }
    }
    pg = self->pages[self->count - 1];
    self->append_lsn = page_lsn(self->first_page + self->count - 1) + pg->used;
    return lsn;
}

static PyObject *LogBuffer_append(LogBuffer *self, PyObject *arg)
{
    Py_buffer view;
    if (!usable(self, 0) || PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int64_t lsn = append_view(self, &view);
    PyBuffer_Release(&view);
    return lsn < 0 ? NULL : PyLong_FromLongLong(lsn);
}

PyDoc_STRVAR(try_append_doc,
"try_append(payload, durable, buffer_limit, page_limit) -> lsn | None\n\n"
"append(payload) when the buffer holds at most buffer_limit bytes not yet durable (or "
"the record alone is larger) and the record fits on the current page or cannot reach "
"past log page page_limit (framing.pages_past); else None, nothing appended (the caller "
"forces first, or checks the log's room).");

static PyObject *LogBuffer_try_append(LogBuffer *self, PyObject *const *args,
                                      Py_ssize_t nargs)
{
    if (!usable(self, 0))
        return NULL;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "try_append(payload, durable, buffer_limit, page_limit)");
        return NULL;
    }
    long long durable = PyLong_AsLongLong(args[1]), limit = PyLong_AsLongLong(args[2]);
    long long page_limit = PyLong_AsLongLong(args[3]);
    if ((durable == -1 || limit == -1 || page_limit == -1) && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = Py_None;
    Page *pg = self->pages[self->count - 1];
    long long n = (long long)view.len, used = (long long)pg->used;
    int room = used + FRAG_HEADER + n <= DATA;
    if (!room) { /* framing.pages_past: how far past this page the record may reach */
        long long per_page = DATA - FRAG_HEADER;
        long long past = (used + n + FRAG_HEADER * (n / per_page + 2)) / DATA + 1;
        room = self->first_page + (long long)self->count - 1 + past <= page_limit;
    }
    if ((self->append_lsn - durable <= limit || view.len > limit) && room) {
        int64_t lsn = append_view(self, &view);
        result = lsn < 0 ? NULL : PyLong_FromLongLong(lsn);
    } else {
        Py_INCREF(result);
    }
    PyBuffer_Release(&view);
    return result;
}

static void seal_header(Page *pg, int64_t page_no, uint32_t gen, int64_t batch_start)
{
    uint8_t *h = pg->data;
    memcpy(h, "MQLP", 4);
    put_le(h + 8, (uint64_t)page_no, 8);
    put_le(h + 16, gen, 4);
    put_le(h + 20, pg->used, 2);
    put_le(h + 22, pg->sealed ? SEALED_FLAG : 0, 2);
    put_le(h + 24, (uint64_t)batch_start, 8);
    put_le(h + 4, crc32c(h + 8, PAGE_HEADER - 8 + pg->used), 4);
}

/* Fill every buffered page's header for a force from batch_start and capture the pages. */
static int seal_all(LogBuffer *self, int64_t batch_start)
{
    if (self->count > self->snap_cap) {
        Page **snap = PyMem_Realloc(self->snap, (size_t)self->count * sizeof(Page *));
        if (snap == NULL)
            return -1;
        self->snap = snap;
        int *sealed = PyMem_Realloc(self->snap_sealed, (size_t)self->count * sizeof(int));
        if (sealed == NULL)
            return -1;
        self->snap_sealed = sealed;
        self->snap_cap = self->count;
    }
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Page *pg = self->pages[i];
        seal_header(pg, self->first_page + i, self->generation, batch_start);
        self->snap[i] = pg;
        self->snap_sealed[i] = pg->sealed;
    }
    self->snap_count = self->count;
    self->snap_first = self->first_page;
    self->snap_batch_start = batch_start;
    self->snap_target = self->append_lsn;
    return 0;
}

/* Drop the leading captured pages that were sealed: they are on disk for good. */
static Py_ssize_t release_sealed(LogBuffer *self)
{
    Py_ssize_t done = 0;
    while (done < self->snap_count && self->snap_sealed[done] && done < self->count - 1)
        done++;
    for (Py_ssize_t i = 0; i < done; i++)
        free(self->pages[i]);
    memmove(self->pages, self->pages + done, (size_t)(self->count - done) * sizeof(Page *));
    self->count -= done;
    self->first_page += done;
    self->snap_count = 0;
    return done;
}

typedef struct {
    int fd;
    Py_ssize_t extent; /* index into the caller's fds */
    off_t offset;
    int iov_start, iov_count;
    int sync_after; /* fdatasync before the next write (the image must be durable first) */
} WriteOp;

static int page_used(const Page *pg) { return pg->data[20] | (pg->data[21] << 8); }

/* Where a force's pages go: the write operations (runs of pages for one pwritev each),
 * their page buffers and the files touched. */
typedef struct {
    WriteOp *ops;
    struct iovec *iov;
    int *touched; /* per extent index: written, so fdatasync'ed at the end */
    int nops;
    long long written;
    int64_t exposed; /* the exposed page after this force (-1: none) */
} WritePlan;

static void free_plan(WritePlan *plan)
{
    PyMem_Free(plan->ops);
    PyMem_Free(plan->iov);
    PyMem_Free(plan->touched);
}

/* Plan the writes of what seal_all() captured. fds[i] / slots[i] belong to logical extent
 * first_extent + i; slots are advanced in place; exposed is the page whose newest forced
 * image is a partial one at its own place (-1: none). Placement is the Python
 * RecoveryLog._write_captured's (see its docstring): with TripleWrite no image overwrites
 * the only durable copy of a page's newest forced image. Returns 0, or -1 with a Python
 * error set (the plan is then freed). */
static int plan_writes(LogBuffer *self, const int *fds, Py_ssize_t nfds, int64_t first_extent,
                       int64_t per_extent, int *slots, int triple, int64_t exposed,
                       WritePlan *plan)
{
    Py_ssize_t n = self->snap_count;
    WriteOp *ops = plan->ops = PyMem_Malloc(sizeof(WriteOp) * (size_t)(n + 2));
    struct iovec *iov = plan->iov = PyMem_Malloc(sizeof(struct iovec) * (size_t)(n + 2));
    int *touched = plan->touched = PyMem_Calloc((size_t)nfds + 1, sizeof(int));
    if (ops == NULL || iov == NULL || touched == NULL) {
        free_plan(plan);
        PyErr_NoMemory();
        return -1;
    }
    int nops = 0, niov = 0;
    int64_t run_g = -1;
    Py_ssize_t run_k = -1;
    long long written = 0;
    int64_t was_exposed = exposed, now_exposed = -1;
    int64_t new_bytes = self->snap_target - self->snap_batch_start;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t g = self->snap_first + i;
        Py_ssize_t k = (Py_ssize_t)(g / per_extent - first_extent);
        int sealed = self->snap_sealed[i], in_place = 1, to_slot = 0, sync_after = 0;
        if (k < 0 || k >= nfds) {
            PyErr_SetString(PyExc_ValueError, "a captured page lies outside the given extents");
            free_plan(plan);
            return -1;
        }
        touched[k] = 1;
        if (triple && g == was_exposed) {
            to_slot = 1;
            if (sealed)
                sync_after = 1; /* durable in the slot before its own place is touched */
            else
                in_place = 0;
        } else if (triple && !sealed) {
            in_place = page_lsn(g) >= self->snap_batch_start &&
                       DATA - page_used(self->snap[i]) >= new_bytes;
            if (in_place)
                now_exposed = g;
            else
                to_slot = 1;
        }
        if (to_slot) {
            WriteOp *op = &ops[nops++];
            op->fd = fds[k];
            op->extent = k;
            op->offset = (off_t)(slots[k] * PAGE);
            op->iov_start = niov;
            op->iov_count = 1;
            op->sync_after = sync_after;
            slots[k] = 1 - slots[k];
            run_k = -1; /* the next in-place page starts a new run */
            iov[niov].iov_base = self->snap[i]->data;
            iov[niov].iov_len = PAGE;
            niov++;
            written += PAGE;
        }
        if (in_place) {
            WriteOp *op = nops ? &ops[nops - 1] : NULL;
            if (op != NULL && run_k == k && g == run_g + op->iov_count &&
                op->iov_count < IOV_MAX) {
                op->iov_count++;
            } else {
                op = &ops[nops++];
                op->fd = fds[k];
                op->extent = k;
                op->offset = (off_t)((SLOTS + g % per_extent) * PAGE);
                op->iov_start = niov;
                op->iov_count = 1;
                op->sync_after = 0;
                run_g = g;
                run_k = k;
            }
            iov[niov].iov_base = self->snap[i]->data;
            iov[niov].iov_len = PAGE;
            niov++;
            written += PAGE;
        }
    }
    plan->nops = nops;
    plan->written = written;
    plan->exposed = now_exposed;
    return 0;
}

/* Write what seal_all() captured and fdatasync every file written: planned under the GIL
 * (plan_writes), written without it. *exposed is updated for the next force. Returns 0, or
 * -1 with a Python error set (OSError carries the failing extent's index as its
 * filename). */
static int write_captured(LogBuffer *self, const int *fds, Py_ssize_t nfds,
                          int64_t first_extent, int64_t per_extent, int *slots, int triple,
                          int64_t *exposed, long long *written_out, double *micros_out,
                          int sync_fd)
{
    WritePlan plan;
    if (plan_writes(self, fds, nfds, first_extent, per_extent, slots, triple, *exposed,
                    &plan) < 0)
        return -1;
    WriteOp *ops = plan.ops;
    struct iovec *iov = plan.iov;
    int *touched = plan.touched, nops = plan.nops, rc = -1;
    int err = 0;
    /* a force that is one write with no fdatasync inside it goes through the file's
     * O_DSYNC descriptor: the write returns durable, one system call instead of two */
    if (sync_fd >= 0 && !self->sync_fd_refused && nops == 1 && !ops[0].sync_after &&
        ops[0].extent == 0) {
        ops[0].fd = sync_fd;
        touched[0] = 0;
        self->stats.dsync_forces++;
    }
    Py_ssize_t err_extent = -1;
    double t0 = monotonic_us(), t1;
    self->writing = 1;
    Py_BEGIN_ALLOW_THREADS
    for (int o = 0; o < nops && !err; o++) {
        WriteOp *op = &ops[o];
        struct iovec *v = &iov[op->iov_start];
        int cnt = op->iov_count;
        off_t off = op->offset;
        while (cnt > 0) {
            ssize_t w = pwritev(op->fd, v, cnt, off);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EINVAL && o == 0 && sync_fd >= 0 && op->fd == sync_fd) {
                    /* the O_DSYNC descriptor is also O_DIRECT where the filesystem
                     * allows it; one that refuses this write (alignment) is not used
                     * again: this write and later ones go the buffered way */
                    self->sync_fd_refused = 1;
                    self->stats.dsync_forces--;
                    op->fd = fds[0];
                    touched[0] = 1;
                    continue;
                }
                err = errno;
                err_extent = op->extent;
                break;
            }
            off += w;
            while (cnt > 0 && (size_t)w >= v->iov_len) {
                w -= (ssize_t)v->iov_len;
                v++;
                cnt--;
            }
            if (cnt > 0) { /* a short write inside a page: the rest of it goes next */
                v->iov_base = (uint8_t *)v->iov_base + w;
                v->iov_len -= (size_t)w;
            }
        }
        if (!err && op->sync_after) {
            int src;
            do
                src = fdatasync(op->fd);
            while (src != 0 && errno == EINTR);
            if (src != 0) {
                err = errno;
                err_extent = op->extent;
            }
        }
    }
    for (Py_ssize_t k = 0; k < nfds && !err; k++) {
        if (!touched[k])
            continue;
        int rc;
        do /* retried on EINTR, as os.fdatasync does (PEP 475) */
            rc = fdatasync(fds[k]);
        while (rc != 0 && errno == EINTR);
        if (rc != 0) {
            err = errno;
            err_extent = k;
        }
    }
    t1 = monotonic_us();
    Py_END_ALLOW_THREADS
    self->writing = 0;
    if (err) {
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "isn", err, strerror(err),
                                              err_extent);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        goto done;
    }
    *written_out = plan.written;
    *micros_out = t1 - t0;
    *exposed = plan.exposed;
    rc = 0;
done:
    free_plan(&plan);
    return rc;
}

PyDoc_STRVAR(seal_doc,
"seal(batch_start) -> (target_lsn, first_page, count)\n\nFill the header and checksum of "
"every buffered page for a force starting at batch_start, and capture them for a write: "
"everything appended so far (up to target_lsn) is in the capture.");

static PyObject *LogBuffer_seal(LogBuffer *self, PyObject *arg)
{
    if (!usable(self, 1))
        return NULL;
    long long batch_start = PyLong_AsLongLong(arg);
    if (batch_start == -1 && PyErr_Occurred())
        return NULL;
    if (seal_all(self, batch_start) < 0)
        return PyErr_NoMemory();
    return Py_BuildValue("LLn", (long long)self->append_lsn, (long long)self->first_page,
                         self->count);
}

PyDoc_STRVAR(write_doc,
"write(fds, first_extent, pages_per_extent, slots, triple, exposed)\n"
"    -> (bytes written, exposed)\n\n"
"Write what the last seal() captured and fdatasync every file written, without the GIL. "
"fds[i] is the descriptor of logical extent first_extent + i, slots[i] the TripleWrite "
"slot its next slot image goes to (updated in place), exposed the page whose newest "
"forced image is a partial one at its own place (-1: none; the new value is returned). "
"Contiguous pages at their own place go in one pwritev; placement as "
"RecoveryLog._write_captured. Counts in the write figures. Raises "
"OSError(errno, text, index into fds) on failure.");

static PyObject *LogBuffer_write(LogBuffer *self, PyObject *args)
{
    PyObject *fds_obj, *slots_list;
    long long first_extent, per_extent;
    long long exposed_arg;
    int triple;
    if (!usable(self, 1) ||
        !PyArg_ParseTuple(args, "OLLO!pL", &fds_obj, &first_extent, &per_extent, &PyList_Type,
                          &slots_list, &triple, &exposed_arg))
        return NULL;
    int64_t exposed = exposed_arg;
    PyObject *fds_seq = PySequence_List(fds_obj);
    if (fds_seq == NULL)
        return NULL;
    Py_ssize_t nfds = PyList_Size(fds_seq);
    PyObject *result = NULL;
    int *fds = PyMem_Malloc(sizeof(int) * ((size_t)nfds + 1));
    int *slots = PyMem_Malloc(sizeof(int) * ((size_t)nfds + 1));
    if (fds == NULL || slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (nfds != PyList_Size(slots_list) || per_extent <= 0) {
        PyErr_SetString(PyExc_ValueError, "fds and slots differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nfds; i++) {
        long fd = PyLong_AsLong(PyList_GetItem(fds_seq, i));
        long slot = PyLong_AsLong(PyList_GetItem(slots_list, i));
        if ((fd == -1 || slot == -1) && PyErr_Occurred())
            goto done;
        fds[i] = (int)fd;
        slots[i] = slot ? 1 : 0;
    }
    long long written;
    double micros;
    int rc = write_captured(self, fds, nfds, first_extent, per_extent, slots, triple, &exposed,
                            &written, &micros, -1);
    for (Py_ssize_t i = 0; i < nfds; i++) {
        PyObject *v = PyLong_FromLong(slots[i]);
        if (v == NULL || PyList_SetItem(slots_list, i, v) < 0)
            goto done;
    }
    if (rc == 0) {
        int64_t last = self->snap_first + self->snap_count - 1;
        note_write(&self->stats, written, micros, last / per_extent);
        result = Py_BuildValue("LL", written, (long long)exposed);
    }
done:
    PyMem_Free(fds);
    PyMem_Free(slots);
    Py_DECREF(fds_seq);
    return result;
}

PyDoc_STRVAR(force_doc,
"force_extent(fd, extent, pages_per_extent, slot, triple, batch_start, exposed[, sync_fd])\n"
"    -> None | (target_lsn, next_slot, exposed)\n\n"
"The common force in one call: when every buffered page lies in logical extent `extent` "
"(whose file is descriptor fd), seal them, write and fdatasync without the GIL, count "
"the write, drop the pages now on disk for good, and return what is durable, the slot "
"for the next slot image and the exposed page (as write()). A force that is a single "
"write with no fdatasync inside it goes through sync_fd (the same file opened O_DSYNC; "
"-1: none) and needs no fdatasync. None (nothing done) when the pages span extents. "
"Raises OSError on failure.");

static PyObject *LogBuffer_force_extent(LogBuffer *self, PyObject *args)
{
    int fd, slot, triple, sync_fd = -1;
    long long extent, per_extent, batch_start, exposed_arg;
    if (!usable(self, 1) ||
        !PyArg_ParseTuple(args, "iLLipLL|i", &fd, &extent, &per_extent, &slot, &triple,
                          &batch_start, &exposed_arg, &sync_fd))
        return NULL;
    int64_t exposed = exposed_arg;
    if (per_extent <= 0) {
        PyErr_SetString(PyExc_ValueError, "pages_per_extent must be positive");
        return NULL;
    }
    if (self->first_page / per_extent != extent ||
        (self->first_page + self->count - 1) / per_extent != extent)
        Py_RETURN_NONE;
    if (seal_all(self, batch_start) < 0)
        return PyErr_NoMemory();
    long long target = self->append_lsn, written;
    double micros;
    slot = slot ? 1 : 0;
    if (write_captured(self, &fd, 1, extent, per_extent, &slot, triple, &exposed, &written,
                       &micros, sync_fd) < 0)
        return NULL;
    note_write(&self->stats, written, micros, extent);
    release_sealed(self);
    return Py_BuildValue("LiL", target, slot, (long long)exposed);
}

PyDoc_STRVAR(plan_doc,
"plan(pages_per_extent, slots, triple, exposed) -> ([(extent_index, offset, pages, "
"sync_after), ...], exposed)\n\n"
"The writes write() would make of the last seal()'s capture, without making them: each "
"pwritev's extent (index from the first captured page's extent), file offset and page "
"count, and whether an fdatasync of that file follows it before the next write (the "
"final fdatasync of every file written is not listed). slots is not changed.");

static PyObject *LogBuffer_plan(LogBuffer *self, PyObject *args)
{
    PyObject *slots_list;
    long long per_extent, exposed;
    int triple;
    if (!usable(self, 1) ||
        !PyArg_ParseTuple(args, "LO!pL", &per_extent, &PyList_Type, &slots_list, &triple,
                          &exposed))
        return NULL;
    if (per_extent <= 0 || self->snap_count == 0) {
        PyErr_SetString(PyExc_ValueError, "nothing captured, or pages_per_extent not positive");
        return NULL;
    }
    int64_t first_extent = self->snap_first / per_extent;
    Py_ssize_t nfds = (Py_ssize_t)((self->snap_first + self->snap_count - 1) / per_extent -
                                   first_extent + 1);
    if (PyList_Size(slots_list) != nfds) {
        PyErr_SetString(PyExc_ValueError, "one slot per extent the capture spans");
        return NULL;
    }
    int *fds = PyMem_Calloc((size_t)nfds, sizeof(int));
    int *slots = PyMem_Calloc((size_t)nfds, sizeof(int));
    PyObject *ops = NULL, *result = NULL;
    WritePlan plan;
    if (fds == NULL || slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nfds; i++) {
        long slot = PyLong_AsLong(PyList_GetItem(slots_list, i));
        if (slot == -1 && PyErr_Occurred())
            goto done;
        slots[i] = slot ? 1 : 0;
    }
    if (plan_writes(self, fds, nfds, first_extent, per_extent, slots, triple, exposed,
                    &plan) < 0)
        goto done;
    ops = PyList_New(plan.nops);
    for (int o = 0; ops != NULL && o < plan.nops; o++) {
        WriteOp *op = &plan.ops[o];
        PyObject *item = Py_BuildValue("nLii", op->extent, (long long)op->offset,
                                       op->iov_count, op->sync_after);
        if (item == NULL)
            Py_CLEAR(ops);
        else
            PyList_SetItem(ops, o, item);
    }
    if (ops != NULL)
        result = Py_BuildValue("OL", ops, (long long)plan.exposed);
    Py_XDECREF(ops);
    free_plan(&plan);
done:
    PyMem_Free(fds);
    PyMem_Free(slots);
    return result;
}

PyDoc_STRVAR(release_doc,
"release_written() -> pages released\n\nAfter a successful write: drop the leading pages "
"the capture held sealed (they are on disk and never written again).");

static PyObject *LogBuffer_release_written(LogBuffer *self, PyObject *Py_UNUSED(ignored))
{
    if (!usable(self, 1))
        return NULL;
    return PyLong_FromSsize_t(release_sealed(self));
}

PyDoc_STRVAR(note_doc,
"note(size, micros, extent)\n\nCount a force written elsewhere in the write figures.");

static PyObject *LogBuffer_note(LogBuffer *self, PyObject *args)
{
    long long size, extent;
    double micros;
    if (!PyArg_ParseTuple(args, "LdL", &size, &micros, &extent))
        return NULL;
    note_write(&self->stats, size, micros, extent);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stats_doc,
"write_stats() -> dict\n\nThe write figures: size_short/long/max (bytes), time_short/long "
"and their maxima, time_max (us) and time_max_at (epoch seconds), forces, and per_file: "
"[(extent, max us)] for the last 8 files.");

static PyObject *LogBuffer_write_stats(LogBuffer *self, PyObject *Py_UNUSED(ignored))
{
    WriteStats *st = &self->stats;
    PyObject *files = PyList_New(st->files);
    if (files == NULL)
        return NULL;
    for (int i = 0; i < st->files; i++) {
        PyObject *t = Py_BuildValue("Ld", st->file_extent[i], st->file_max[i]);
        if (t == NULL) {
            Py_DECREF(files);
            return NULL;
        }
        PyList_SetItem(files, i, t);
    }
    return Py_BuildValue(
        "{sdsdsLsdsdsdsdsdsdsLsLsN}", "size_short", st->size_short, "size_long",
        st->size_long, "size_max", st->size_max, "time_short", st->time_short, "time_long",
        st->time_long, "time_short_max", st->time_short_max, "time_long_max",
        st->time_long_max, "time_max", st->time_max, "time_max_at", st->time_max_at,
        "forces", st->forces, "dsync_forces", st->dsync_forces, "per_file", files);
}

static PyObject *page_bytes(Page *pg) { return PyBytes_FromStringAndSize((char *)pg->data, PAGE); }

PyDoc_STRVAR(captured_doc,
"captured() -> [(page_no, image, sealed), ...]\n\nCopies of what the last seal() captured, "
"for volumes whose writes must go through Python.");

static PyObject *LogBuffer_captured(LogBuffer *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(self->snap_count);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->snap_count; i++) {
        PyObject *item = Py_BuildValue("LNO", (long long)(self->snap_first + i),
                                       page_bytes(self->snap[i]),
                                       self->snap_sealed[i] ? Py_True : Py_False);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SetItem(out, i, item);
    }
    return out;
}

PyDoc_STRVAR(page_doc, "page(i) -> (image, used, sealed) of buffered page i (tests, dumps).");

static PyObject *LogBuffer_page(LogBuffer *self, PyObject *arg)
{
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0)
        i += self->count;
    if (i < 0 || i >= self->count) {
        PyErr_SetString(PyExc_IndexError, "page index out of range");
        return NULL;
    }
    Page *pg = self->pages[i];
    return Py_BuildValue("NIO", page_bytes(pg), pg->used, pg->sealed ? Py_True : Py_False);
}

static PyObject *get_first_page(LogBuffer *self, void *c) { return PyLong_FromLongLong(self->first_page); }
static PyObject *get_append_lsn(LogBuffer *self, void *c) { return PyLong_FromLongLong(self->append_lsn); }
static PyObject *get_count(LogBuffer *self, void *c) { return PyLong_FromSsize_t(self->count); }
static PyObject *get_last_used(LogBuffer *self, void *c)
{
    if (!usable(self, 0))
        return NULL;
    return PyLong_FromUnsignedLong(self->pages[self->count - 1]->used);
}
static PyObject *get_generation(LogBuffer *self, void *c) { return PyLong_FromUnsignedLong(self->generation); }
static PyObject *get_forces(LogBuffer *self, void *c) { return PyLong_FromLongLong(self->stats.forces); }

static PyGetSetDef LogBuffer_getset[] = {
    {"first_page", (getter)get_first_page, NULL, "global number of the first buffered page", NULL},
    {"append_lsn", (getter)get_append_lsn, NULL, "where the next record goes", NULL},
    {"count", (getter)get_count, NULL, "pages buffered", NULL},
    {"last_used", (getter)get_last_used, NULL, "data bytes used on the last page", NULL},
    {"generation", (getter)get_generation, NULL, "activation generation of every fragment", NULL},
    {"forces", (getter)get_forces, NULL, "forces counted in the write figures", NULL},
    {NULL}
};

static PyMethodDef LogBuffer_methods[] = {
    {"append", (PyCFunction)LogBuffer_append, METH_O, append_doc},
    {"seal", (PyCFunction)LogBuffer_seal, METH_O, seal_doc},
    {"write", (PyCFunction)LogBuffer_write, METH_VARARGS, write_doc},
    {"plan", (PyCFunction)LogBuffer_plan, METH_VARARGS, plan_doc},
    {"try_append", (PyCFunction)(void (*)(void))LogBuffer_try_append, METH_FASTCALL,
     try_append_doc},
    {"force_extent", (PyCFunction)LogBuffer_force_extent, METH_VARARGS, force_doc},
    {"release_written", (PyCFunction)LogBuffer_release_written, METH_NOARGS, release_doc},
    {"note", (PyCFunction)LogBuffer_note, METH_VARARGS, note_doc},
    {"write_stats", (PyCFunction)LogBuffer_write_stats, METH_NOARGS, stats_doc},
    {"captured", (PyCFunction)LogBuffer_captured, METH_NOARGS, captured_doc},
    {"page", (PyCFunction)LogBuffer_page, METH_O, page_doc},
    {NULL}
};

static PyType_Slot LogBuffer_slots[] = {
    {Py_tp_doc, (void *)PyDoc_STR("LogBuffer(first_page, generation, seed): the recovery "
                                  "log's append buffer (C twin of "
                                  "miqm.store.logbuffer.PyLogBuffer).")},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_init, (void *)LogBuffer_init},
    {Py_tp_dealloc, (void *)LogBuffer_dealloc},
    {Py_tp_methods, LogBuffer_methods},
    {Py_tp_getset, LogBuffer_getset},
    {0, NULL},
};

static PyType_Spec LogBuffer_spec = {
    .name = "miqm.store._logbuffer.LogBuffer",
    .basicsize = sizeof(LogBuffer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = LogBuffer_slots,
};

static PyObject *py_crc32c(PyObject *mod, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t c = crc32c(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

PyDoc_STRVAR(scan_doc,
"scan_full(record_type, raw, data_at, foff, used, base, stop_at, generation, ctl_generation,\n"
"          generation_lsn) -> (records, foff)\n\n"
"Restart's inner loop over one page: from data offset foff, every FULL fragment that "
"fits the page's used bytes, lies before stop_at, carries `generation` and is not an "
"older generation after generation_lsn becomes a record_type(lsn, generation, body, "
"next_lsn). Stops, without consuming it, at the first fragment that is anything else "
"(the Python reader handles that one) and returns the records and where it stopped.");

static PyObject *scan_full(PyObject *mod, PyObject *args)
{
    PyTypeObject *rtype;
    Py_buffer raw;
    Py_ssize_t data_at, foff, used;
    long long base, stop_at, gen_lsn;
    unsigned long generation, ctl_generation;
    if (!PyArg_ParseTuple(args, "O!y*nnnLLkkL", &PyType_Type, &rtype, &raw, &data_at, &foff,
                          &used, &base, &stop_at, &generation, &ctl_generation, &gen_lsn))
        return NULL;
    if (!PyType_IsSubtype(rtype, &PyTuple_Type) || data_at < 0 || used > DATA ||
        data_at + used > raw.len) {
        PyBuffer_Release(&raw);
        PyErr_SetString(PyExc_ValueError, "scan_full: bad record type or page bounds");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&raw);
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(rtype, Py_tp_alloc);
    const uint8_t *data = (const uint8_t *)raw.buf + data_at;
    int older_gen = generation < ctl_generation;
    while (foff + FRAG_HEADER <= used) {
        const uint8_t *h = data + foff;
        size_t length = (size_t)h[0] | (size_t)h[1] << 8;
        uint32_t gen = (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 |
                       (uint32_t)h[7] << 24;
        long long lsn = base + foff;
        if (h[2] != FULL || foff + FRAG_HEADER + (Py_ssize_t)length > used ||
            lsn >= stop_at || gen != generation || (older_gen && lsn >= gen_lsn))
            break;
        PyObject *rec = alloc(rtype, 4);
        PyObject *body = PyBytes_FromStringAndSize((const char *)h + FRAG_HEADER,
                                                   (Py_ssize_t)length);
        PyObject *l = PyLong_FromLongLong(lsn);
        PyObject *g = PyLong_FromUnsignedLong(gen);
        foff += FRAG_HEADER + (Py_ssize_t)length;
        PyObject *end = PyLong_FromLongLong(base + foff);
        if (rec == NULL || body == NULL || l == NULL || g == NULL || end == NULL) {
            Py_XDECREF(rec); Py_XDECREF(body); Py_XDECREF(l); Py_XDECREF(g); Py_XDECREF(end);
            Py_DECREF(out);
            PyBuffer_Release(&raw);
            return NULL;
        }
        PyTuple_SetItem(rec, 0, l);
        PyTuple_SetItem(rec, 1, g);
        PyTuple_SetItem(rec, 2, body);
        PyTuple_SetItem(rec, 3, end);
        int rc = PyList_Append(out, rec);
        Py_DECREF(rec);
        if (rc < 0) {
            Py_DECREF(out);
            PyBuffer_Release(&raw);
            return NULL;
        }
    }
    PyBuffer_Release(&raw);
    return Py_BuildValue("Nn", out, foff);
}

static PyMethodDef module_methods[] = {
    {"scan_full", scan_full, METH_VARARGS, scan_doc},
    {"crc32c", py_crc32c, METH_O, "CRC-32C (Castagnoli) of a buffer, as the log pages use."},
    {NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "miqm.store._logbuffer",
    "The recovery log's append buffer in C (see miqm/store/logbuffer.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__logbuffer(void)
{
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *type = PyType_FromSpec(&LogBuffer_spec);
    if (type == NULL || PyModule_AddType(m, (PyTypeObject *)type) < 0)
        Py_CLEAR(m);
    Py_XDECREF(type);
    return m;
}
