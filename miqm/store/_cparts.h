/* Helpers shared by the store's C parts (_logbuffer.c, _redo.c, _queuefile.c,
 * _hotpath.c: separate extension modules, so these are static inline in each).
 * Include after Python.h. */
#ifndef MIQM_CPARTS_H
#define MIQM_CPARTS_H

#include <stdint.h>

/* v as `bytes` little-endian bytes at p (the on-disk formats are little-endian) */
static inline void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* owner.attr[i].append(value), append_name the interned "append": the index arrays of a
 * queue (PriorityIndex.keys/blocks/lens) are lists of array.array per priority */
static inline int append_at(PyObject *owner, PyObject *attr, Py_ssize_t i, PyObject *value,
                            PyObject *append_name)
{
    PyObject *seq = PyObject_GetAttr(owner, attr);
    if (seq == NULL)
        return -1;
    PyObject *arr = PySequence_GetItem(seq, i);
    Py_DECREF(seq);
    if (arr == NULL)
        return -1;
    PyObject *r = PyObject_CallMethodOneArg(arr, append_name, value);
    Py_DECREF(arr);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* var = the interned str text, or return NULL from the module's init */
#define INTERN(var, text)                                     \
    do {                                                      \
        if ((var = PyUnicode_InternFromString(text)) == NULL) \
            return NULL;                                      \
    } while (0)

#endif
