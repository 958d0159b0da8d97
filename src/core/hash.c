/* hash.c - FNV-1a over bytes (hash.h; splitmix64 is inline there, for the kernels too). */
#include "core/hash.h"

uint64_t ddp_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= DDP_FNV1A64_PRIME;
    }
    return h;
}
