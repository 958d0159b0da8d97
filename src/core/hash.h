/*
 * hash.h - the one splitmix64 and the one FNV-1a of the tree.
 *
 * splitmix64 (Steele, Lea and Flood; Vigna's constants): ddp_mix64 is its finaliser, a
 * bijective 64-bit mix; ddp_splitmix64 steps a sequence; ddp_uniform01 is a counter-based
 * uniform double in [0, 1) (the dropout masks of the CPU and CUDA backends, bit for bit). They
 * are static inline so that CUDA kernels call the very same code (__host__ __device__ under
 * nvcc; the GPU twin compiles the kernels as C++ with those words defined empty).
 *
 * FNV-1a, 64 bits (Fowler, Noll, Vo): ddp_fnv1a64 over bytes, continuing from h (start with
 * DDP_FNV1A64_INIT). A fingerprint for comparing, never a defence against a chosen input.
 */
#ifndef DDP_CORE_HASH_H
#define DDP_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DDP_HASH_FN static inline __host__ __device__
#else
#define DDP_HASH_FN static inline
#endif

#define DDP_SPLITMIX64_GAMMA 0x9e3779b97f4a7c15ULL /* 2^64 / golden ratio, odd */
#define DDP_FNV1A64_INIT 0xcbf29ce484222325ULL     /* the offset basis */
#define DDP_FNV1A64_PRIME 0x100000001b3ULL

/* splitmix64's finaliser. */
DDP_HASH_FN uint64_t ddp_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The next value of the splitmix64 sequence whose state is *state. */
DDP_HASH_FN uint64_t ddp_splitmix64(uint64_t *state)
{
    *state += DDP_SPLITMIX64_GAMMA;
    return ddp_mix64(*state);
}

/* Uniform in [0, 1) with 53 random bits: value i of the stream keyed by seed. */
DDP_HASH_FN double ddp_uniform01(uint64_t seed, uint64_t i)
{
    return (double)(ddp_mix64(seed + DDP_SPLITMIX64_GAMMA * (i + 1)) >> 11) *
           (1.0 / 9007199254740992.0);
}

#ifndef __CUDACC__
/* FNV-1a of n bytes at p, continuing from h (DDP_FNV1A64_INIT for a fresh hash). */
uint64_t ddp_fnv1a64(uint64_t h, const void *p, size_t n);
#endif

#endif
