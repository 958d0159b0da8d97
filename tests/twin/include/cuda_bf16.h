/*
 * cuda_bf16.h (GPU twin) - the bf16 type and the conversions src/backend/cuda/ uses, with
 * CUDA's semantics: __float2bfloat16_rn rounds to nearest, ties to even (NaN stays a quiet
 * NaN, overflow goes to infinity); __bfloat162float is exact.
 */
#ifndef DDP_TWIN_CUDA_BF16_H
#define DDP_TWIN_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

typedef struct __nv_bfloat16 {
    uint16_t x; /* the top 16 bits of an IEEE binary32 */
} __nv_bfloat16;

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) { /* NaN: keep the sign, make it quiet */
        h.x = (uint16_t)((u >> 16) | 0x0040u);
        return h;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    h.x = (uint16_t)(u >> 16);
    return h;
}

static inline float __bfloat162float(__nv_bfloat16 h)
{
    const uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
