/*
 * test_twin_blas.cc - the GPU twin's bf16 support against what CUDA documents (suite twin):
 * __float2bfloat16_rn rounds to nearest, ties to even (NaN stays NaN, overflow goes to
 * infinity) and __bfloat162float is exact; cublasGemmEx and cublasGemmStridedBatchedEx with bf16
 * A and B, fp32 C and CUBLAS_COMPUTE_32F give the exact products of the bf16 values summed in
 * fp32, check their arguments like cublasSgemm (CUBLAS_STATUS_INVALID_VALUE) and answer
 * CUBLAS_STATUS_NOT_SUPPORTED for type or compute combinations the twin lacks; with a bf16 C
 * as well, that sum plus beta C rounded once to bf16. Exit 0 or 1.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"

static int g_fail;

static void expect(int ok, const char *what)
{
    printf("%-4s %s\n", ok ? "ok" : "FAIL", what);
    g_fail += !ok;
}

static uint16_t bits(float f)
{
    return __float2bfloat16_rn(f).x;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void t_convert(void)
{
    expect(bits(1.0f) == 0x3f80, "1.0 -> 0x3f80");
    expect(bits(from_bits(0x3f808000u)) == 0x3f80, "tie rounds to even (down)");
    expect(bits(from_bits(0x3f818000u)) == 0x3f82, "tie rounds to even (up)");
    expect(bits(from_bits(0x3f808001u)) == 0x3f81, "above the tie rounds up");
    expect(bits(from_bits(0x3f807fffu)) == 0x3f80, "below the tie rounds down");
    expect(bits(-2.5f) == 0xc020, "-2.5 exact");
    expect(bits(from_bits(0x7f7fffffu)) == 0x7f80, "FLT_MAX overflows to +inf");
    const uint16_t n = bits(NAN);
    expect((n & 0x7f80) == 0x7f80 && (n & 0x007f) != 0, "NaN stays NaN");
    expect(bits(INFINITY) == 0x7f80, "inf stays inf");
    __nv_bfloat16 h;
    h.x = 0x3fc1;
    expect(__bfloat162float(h) == from_bits(0x3fc10000u), "bf16 -> float exact");
}

/* GemmEx's bf16 output of da (3 x 4) db (4 x 2) (bf16, on the device), whose fp32 sums are
 * want: beta 0 writes want rounded once; beta 1 reads the bf16 C and rounds want + C once. */
static void t_gemm_bf16_out(cublasHandle_t h, const void *da, const void *db, const float *want)
{
    const int m = 3, n = 2, k = 4;
    __nv_bfloat16 c0[m * n], got[m * n];
    for (int i = 0; i < m * n; i++)
        c0[i] = __float2bfloat16_rn(0.3f * (float)i - 0.7f);
    void *dc;
    cudaMalloc(&dc, sizeof c0);
    const float one = 1, zero = 0;
    int bad = 0;
    cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16BF, m,
                                    db, CUDA_R_16BF, k, &zero, dc, CUDA_R_16BF, m,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(got, dc, sizeof got, cudaMemcpyDeviceToHost);
    for (int i = 0; i < m * n; i++)
        bad += got[i].x != __float2bfloat16_rn(want[i]).x;
    expect(s == CUBLAS_STATUS_SUCCESS && !bad, "GemmEx bf16 output, beta 0: the sum rounded once");
    cudaMemcpy(dc, c0, sizeof c0, cudaMemcpyHostToDevice);
    s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16BF, m, db,
                     CUDA_R_16BF, k, &one, dc, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(got, dc, sizeof got, cudaMemcpyDeviceToHost);
    bad = 0;
    for (int i = 0; i < m * n; i++)
        bad += got[i].x != __float2bfloat16_rn(want[i] + __bfloat162float(c0[i])).x;
    expect(s == CUBLAS_STATUS_SUCCESS && !bad,
           "GemmEx bf16 output, beta 1: the sum plus the bf16 C rounded once");
    cudaFree(dc);
}

/* C (m x n, column-major, fp32) = A (m x k) B (k x n) on bf16 operands through cublasGemmEx, and
 * the same batched twice through cublasGemmStridedBatchedEx. */
static void t_gemm(cublasHandle_t h)
{
    const int m = 3, n = 2, k = 4;
    float a[m * k], b[k * n];
    __nv_bfloat16 a16[m * k], b16[k * n];
    for (int i = 0; i < m * k; i++) {
        a[i] = 1.0f + (float)i / 3.0f; /* not representable in bf16: rounding shows */
        a16[i] = __float2bfloat16_rn(a[i]);
    }
    for (int i = 0; i < k * n; i++) {
        b[i] = 0.5f - (float)i / 7.0f;
        b16[i] = __float2bfloat16_rn(b[i]);
    }
    float want[m * n], got[2 * m * n];
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0;
            for (int p = 0; p < k; p++)
                s += __bfloat162float(a16[p * m + i]) * __bfloat162float(b16[j * k + p]);
            want[j * m + i] = s;
        }
    void *da, *db, *dc;
    cudaMalloc(&da, 2 * sizeof a16);
    cudaMalloc(&db, 2 * sizeof b16);
    cudaMalloc(&dc, sizeof got);
    cudaMemcpy(da, a16, sizeof a16, cudaMemcpyHostToDevice);
    cudaMemcpy((char *)da + sizeof a16, a16, sizeof a16, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b16, sizeof b16, cudaMemcpyHostToDevice);
    cudaMemcpy((char *)db + sizeof b16, b16, sizeof b16, cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16BF, m,
                                    db, CUDA_R_16BF, k, &zero, dc, CUDA_R_32F, m,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(got, dc, sizeof(float) * m * n, cudaMemcpyDeviceToHost);
    double err = 0, err_fp32 = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float f = 0;
            for (int p = 0; p < k; p++)
                f += a[p * m + i] * b[j * k + p];
            err = fmax(err, fabs(got[j * m + i] - want[j * m + i]));
            err_fp32 = fmax(err_fp32, fabs(got[j * m + i] - f));
        }
    expect(s == CUBLAS_STATUS_SUCCESS && err <= 1e-6 && err_fp32 > 1e-4,
           "GemmEx bf16: the products of the rounded operands, not of the fp32 ones");
    s = cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16BF, m,
                                   m * k, db, CUDA_R_16BF, k, k * n, &zero, dc, CUDA_R_32F, m,
                                   m * n, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(got, dc, sizeof got, cudaMemcpyDeviceToHost);
    err = 0;
    for (int i = 0; i < 2 * m * n; i++)
        err = fmax(err, fabs(got[i] - want[i % (m * n)]));
    expect(s == CUBLAS_STATUS_SUCCESS && err <= 1e-6, "GemmStridedBatchedEx bf16, 2 matrices");
    s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16BF, m - 1, db,
                     CUDA_R_16BF, k, &zero, dc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
    expect(s == CUBLAS_STATUS_INVALID_VALUE, "GemmEx lda < m: CUBLAS_STATUS_INVALID_VALUE");
    s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16F, m, db,
                     CUDA_R_16F, k, &zero, dc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
    expect(s == CUBLAS_STATUS_NOT_SUPPORTED, "GemmEx fp16 operands: CUBLAS_STATUS_NOT_SUPPORTED");
    s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16BF, m, db,
                     CUDA_R_16BF, k, &zero, dc, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
    t_gemm_bf16_out(h, da, db, want);
    s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16BF, m, db,
                     CUDA_R_16BF, k, &zero, dc, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F_FAST_TF32,
                     CUBLAS_GEMM_DEFAULT);
    expect(s == CUBLAS_STATUS_NOT_SUPPORTED,
           "GemmEx bf16 output, compute 32F_FAST_TF32: CUBLAS_STATUS_NOT_SUPPORTED");
    s = cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16BF, m,
                                   0, db, CUDA_R_16BF, k, 0, &zero, dc, CUDA_R_32F, m, 0, 1,
                                   CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
    expect(s == CUBLAS_STATUS_NOT_SUPPORTED,
           "GemmStridedBatchedEx compute 32F_FAST_TF32: CUBLAS_STATUS_NOT_SUPPORTED");
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    t_convert();
    cublasHandle_t h;
    if (cudaSetDevice(0) != cudaSuccess || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        printf("FAIL: no twin GPU or cuBLAS handle\n");
        return 1;
    }
    t_gemm(h);
    cublasDestroy(h);
    printf("test_twin_blas: %d failed\n", g_fail);
    return g_fail ? 1 : 0;
}
