/* Helpers for the store's C parts (static inline: each part is its own extension
 * module): little-endian fields of the on-disk formats. No Python API. */
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

#endif
