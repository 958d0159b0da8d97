/*
 * cublas.cc - the GPU twin's cuBLAS: the argument checks cuBLAS makes, then a column-major
 * cblas call queued on the handle's stream (it runs when the stream gets there, like a
 * kernel; counted as a launch). Operands are device addresses, translated and checked to lie
 * inside one live allocation each; a host or out-of-range operand is a GPU fault.
 *
 * GemmEx (bf16 A and B, fp32 C, CUBLAS_COMPUTE_32F) widens the bf16 operands to float, which is
 * exact, and multiplies them with cblas_sgemm: the exact products of bf16 values summed in fp32,
 * what the tensor cores compute (up to the order of the sums). With a bf16 C as well (the
 * output of a layer on bf16 activations), C is widened where beta reads it, the product
 * computed in fp32 as above and alpha AB + beta C rounded once into C (to nearest even).
 */
#include <cblas.h>
#include <stdio.h>

#include <mutex>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "twin.h"

struct twin_blas {
    cudaStream_t stream = nullptr;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

extern "C" {

const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_EXECUTION_FAILED";
    }
}
const char *cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }
cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    /* A GEMM runs on the stream's worker alone, as the device clock (runtime.cc) assumes: with
     * OpenBLAS's own threads the worker's CPU time would miss their share and count its spin
     * while it waits for them, which other processes on their cores stretch (the CPU backend
     * runs OpenBLAS single-threaded too). */
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(1); });
    *h = new twin_blas;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetProperty(libraryPropertyType t, int *v)
{
    *v = t == MAJOR_VERSION ? CUBLAS_VER_MAJOR : t == MINOR_VERSION ? CUBLAS_VER_MINOR
                                                                     : CUBLAS_VER_PATCH;
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */

namespace {

bool gemm_args_ok(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda,
                  int ldb, int ldc)
{
    const int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
    return m >= 0 && n >= 0 && k >= 0 && lda >= (rows_a > 1 ? rows_a : 1) &&
           ldb >= (rows_b > 1 ? rows_b : 1) && ldc >= (m > 1 ? m : 1);
}

/* Floats a column-major (rows, cols) operand with leading dimension ld spans, batch times. */
size_t span(int rows, int cols, int ld, long long stride, int batch)
{
    if (rows == 0 || cols == 0 || batch == 0)
        return 0;
    return (size_t)stride * (size_t)(batch - 1) + (size_t)ld * (size_t)(cols - 1) +
           (size_t)rows;
}

/* n bf16 values at x widened to float (exact). */
std::vector<float> widen(const void *x, size_t n)
{
    std::vector<float> f(n);
    const __nv_bfloat16 *h = (const __nv_bfloat16 *)x;
    for (size_t i = 0; i < n; i++)
        f[i] = __bfloat162float(h[i]);
    return f;
}

/* The n values of a bf16 C rounded from c (to nearest even) into out. */
void narrow(void *out, const float *c, size_t n)
{
    __nv_bfloat16 *h = (__nv_bfloat16 *)out;
    for (size_t i = 0; i < n; i++)
        h[i] = __float2bfloat16_rn(c[i]);
}

/* A (and B) hold bf16 values when bf16 != 0 (then 2 bytes an element), else floats; C holds
 * bf16 values when bf16 == 2, else floats. */
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, float alpha, const void *A, int lda, long long sA, const void *B,
                    int ldb, long long sB, float beta, void *C, int ldc, long long sC, int batch,
                    int bf16 = 0)
{
    if (!gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc) || batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    const bool inject = twin::inject_kernel_fault();
    const int ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
    const int rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
    const size_t na = k ? span(ra, ca, lda, sA, batch) : 0, nb = k ? span(rb, cb, ldb, sB, batch)
                                                                    : 0;
    const size_t esz = bf16 ? 2 : 4;
    const void *a = na ? twin::dev_to_host(A, esz * na) : nullptr;
    const void *b = nb ? twin::dev_to_host(B, esz * nb) : nullptr;
    const size_t nc = span(m, n, ldc, sC, batch);
    void *c = twin::dev_to_host(C, (bf16 == 2 ? 2 : 4) * nc);
    cudaError_t e;
    if (inject || !c || (na && !a) || (nb && !b)) {
        const void *pa = A, *pb = B, *pc = C;
        e = twin::enqueue(h->stream, "cublasSgemm", [inject, pa, pb, pc, a, b, c] {
            if (inject)
                twin::device_fault(cudaErrorIllegalAddress,
                                   "cublasSgemm: fault injected by DDP_EMU_FAIL");
            else
                twin::device_fault(cudaErrorIllegalAddress, "cublasSgemm: operand %s (%p) is "
                                   "not inside one device allocation",
                                   !a ? "A" : !b ? "B" : "C", !a ? pa : !b ? pb : pc);
        });
    } else {
        e = twin::enqueue(h->stream, bf16 ? "cublasGemmEx" : "cublasSgemm", [=] {
            std::vector<float> wa, wb, wc; /* bf16 operands widened when they run */
            const float *fa = (const float *)a, *fb = (const float *)b;
            float *fc = (float *)c;
            if (bf16 == 2) { /* C read only where beta reads it, as cuBLAS */
                wc = beta != 0 ? widen(c, nc) : std::vector<float>(nc, 0.0f);
                fc = wc.data();
            }
            if (bf16) {
                wa = widen(a, na);
                wb = widen(b, nb);
                fa = na ? wa.data() : nullptr;
                fb = nb ? wb.data() : nullptr;
            }
            for (int i = 0; i < batch; i++)
                cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                            tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha,
                            fa ? fa + i * sA : nullptr, lda, fb ? fb + i * sB : nullptr, ldb, beta,
                            fc + i * sC, ldc);
            if (bf16 == 2)
                narrow(c, fc, nc);
        });
    }
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} // namespace

extern "C" cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta,
                                      cublasOperation_t tb, int m, int n, int k,
                                      const float *alpha, const float *A, int lda,
                                      const float *B, int ldb, const float *beta, float *C,
                                      int ldc)
{
    /* alpha and beta are host values (CUBLAS_POINTER_MODE_HOST): read at the call */
    return gemm(h, ta, tb, m, n, k, *alpha, A, lda, 0, B, ldb, 0, *beta, C, ldc, 0, 1);
}

extern "C" cublasStatus_t cublasSgemmStridedBatched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const float *alpha, const float *A, int lda, long long sA, const float *B, int ldb,
    long long sB, const float *beta, float *C, int ldc, long long sC, int batch)
{
    return gemm(h, ta, tb, m, n, k, *alpha, A, lda, sA, B, ldb, sB, *beta, C, ldc, sC, batch);
}

/* GemmEx's type combinations the twin has: 1 bf16 A and B, 2 bf16 A, B and C (compute 32F),
 * 0 all fp32, -1 others (cuBLAS has more: those answer CUBLAS_STATUS_NOT_SUPPORTED here). C
 * is fp32 and the compute 32F, or 32F_FAST_TF32 with fp32 operands (TF32 tensor cores: the
 * twin multiplies in full fp32, which is within TF32's error). */
static int ex_kind(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute)
{
    if (ct == CUDA_R_16BF && at == CUDA_R_16BF && bt == CUDA_R_16BF)
        return compute == CUBLAS_COMPUTE_32F ? 2 : -1;
    if (ct != CUDA_R_32F || at != bt)
        return -1;
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32)
        return at == CUDA_R_32F ? 0 : -1;
    if (compute != CUBLAS_COMPUTE_32F)
        return -1;
    return at == CUDA_R_16BF ? 1 : at == CUDA_R_32F ? 0 : -1;
}

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                                       cublasOperation_t tb, int m, int n, int k,
                                       const void *alpha, const void *A, cudaDataType Atype,
                                       int lda, const void *B, cudaDataType Btype, int ldb,
                                       const void *beta, void *C, cudaDataType Ctype, int ldc,
                                       cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    const int kind = ex_kind(Atype, Btype, Ctype, compute);
    if (kind < 0 || algo != CUBLAS_GEMM_DEFAULT)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* alpha and beta are host floats (compute 32F, CUBLAS_POINTER_MODE_HOST) */
    return gemm(h, ta, tb, m, n, k, *(const float *)alpha, A, lda, 0, B, ldb, 0,
                *(const float *)beta, C, ldc, 0, 1, kind);
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long sA, const void *B,
    cudaDataType Btype, int ldb, long long sB, const void *beta, void *C, cudaDataType Ctype,
    int ldc, long long sC, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    const int kind = ex_kind(Atype, Btype, Ctype, compute);
    if (kind < 0 || algo != CUBLAS_GEMM_DEFAULT)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm(h, ta, tb, m, n, k, *(const float *)alpha, A, lda, sA, B, ldb, sB,
                *(const float *)beta, C, ldc, sC, batch, kind);
}
