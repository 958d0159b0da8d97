/*
 * cuda_emu.cc - the CPU emulation of cuda_emu.h: a pool of threads that runs each block,
 * barriers for __syncthreads and warp shuffles, host memory as device memory, cblas for
 * cuBLAS. See cuda_emu.h for what it is (and is not) good for.
 */
#include "cuda_emu.h"

#include <barrier>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

thread_local dim3 threadIdx;
dim3 blockIdx, blockDim, gridDim;

namespace {

constexpr unsigned MAX_THREADS = 1024;

/* Workers 0..n-1 of a round run body with threadIdx.x = their id. */
struct Pool {
    std::vector<std::thread> threads;
    std::mutex m;
    std::condition_variable go, done;
    unsigned generation = 0, active = 0, remaining = 0;
    const std::function<void()> *body = nullptr;

    void ensure(unsigned n)
    {
        while (threads.size() < n) {
            unsigned id = (unsigned)threads.size();
            threads.emplace_back([this, id] { loop(id); });
            threads.back().detach();
        }
    }
    void loop(unsigned id)
    {
        unsigned seen = 0;
        std::unique_lock<std::mutex> lk(m);
        for (;;) {
            go.wait(lk, [&] { return generation != seen; });
            seen = generation;
            if (id >= active)
                continue;
            const std::function<void()> *f = body;
            lk.unlock();
            threadIdx = dim3(id, 0, 0);
            (*f)();
            lk.lock();
            if (--remaining == 0)
                done.notify_all();
        }
    }
    void run(unsigned n, const std::function<void()> &f)
    {
        ensure(n);
        std::unique_lock<std::mutex> lk(m);
        body = &f;
        active = remaining = n;
        generation++;
        go.notify_all();
        done.wait(lk, [&] { return remaining == 0; });
    }
};

/* Never destroyed: its workers wait on its condition variable until the process ends (glibc's
 * pthread_cond_destroy would wait for them at exit). */
Pool &g_pool = *new Pool;
std::unique_ptr<std::barrier<>> g_block_bar;
std::vector<std::unique_ptr<std::barrier<>>> g_warp_bar;
unsigned g_bar_threads;
uint64_t g_shfl[MAX_THREADS / 32][32];
cudaError_t g_last = cudaSuccess;

} // namespace

void emu_launch(dim3 grid, dim3 block, const std::function<void()> &body)
{
    const unsigned nt = block.x * block.y * block.z;
    if (nt == 0 || nt > MAX_THREADS || block.y != 1 || block.z != 1 || grid.x == 0 ||
        grid.y == 0 || grid.z == 0) {
        g_last = 9; /* cudaErrorInvalidConfiguration */
        return;
    }
    if (g_bar_threads != nt) {
        g_block_bar = std::make_unique<std::barrier<>>((ptrdiff_t)nt);
        g_warp_bar.clear();
        for (unsigned w = 0; w < (nt + 31) / 32; w++)
            g_warp_bar.push_back(std::make_unique<std::barrier<>>(
                (ptrdiff_t)(nt - 32 * w < 32 ? nt - 32 * w : 32)));
        g_bar_threads = nt;
    }
    blockDim = block;
    gridDim = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                g_pool.run(nt, body);
            }
}

void __syncthreads(void) { g_block_bar->arrive_and_wait(); }

uint64_t emu_shfl(uint64_t bits, unsigned src)
{
    const unsigned lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    g_shfl[w][lane] = bits;
    g_warp_bar[w]->arrive_and_wait();
    const uint64_t r = src < 32 ? g_shfl[w][src] : bits;
    g_warp_bar[w]->arrive_and_wait();
    return r;
}

/* ---- runtime ----------------------------------------------------------------------------- */

const char *cudaGetErrorName(cudaError_t e) { return e ? "cudaErrorEmulated" : "cudaSuccess"; }
const char *cudaGetErrorString(cudaError_t e) { return e ? "emulated error" : "no error"; }
cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v)
{
    *v = 0;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = 0;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
    memset(p, 0, sizeof *p);
    strcpy(p->name, "CPU emulation of cuda.cu");
    p->major = 9;
    p->totalGlobalMem = (size_t)1 << 32;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorNoDevice; }
cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes)
{
    /* garbage, as cudaMalloc's memory is: the backend must zero what it promises zeroed */
    *p = malloc(bytes);
    if (*p)
        memset(*p, 0xa5, bytes);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = 0;
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t)
{
    memset(p, v, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind,
                            cudaStream_t)
{
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *)
{
    a->type = cudaMemoryTypeUnregistered;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    static int token;
    *s = &token;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

/* ---- cuBLAS ------------------------------------------------------------------------------ */

const char *cublasGetStatusName(cublasStatus_t s)
{
    return s ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_SUCCESS";
}
const char *cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }
cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    static int token;
    *h = &token;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasGetProperty(libraryPropertyType, int *v)
{
    *v = 0;
    return CUBLAS_STATUS_SUCCESS;
}

/* cuBLAS's argument checks (the ones a wrong leading dimension trips), then cblas. */
static bool gemm_args_ok(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         int lda, int ldb, int ldc)
{
    const int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
    return m >= 0 && n >= 0 && k >= 0 && lda >= (rows_a > 1 ? rows_a : 1) &&
           ldb >= (rows_b > 1 ? rows_b : 1) && ldc >= (m > 1 ? m : 1);
}

cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc)
{
    if (!gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, *alpha, A, lda, B, ldb,
                *beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sA, const float *B, int ldb, long long sB,
                                         const float *beta, float *C, int ldc, long long sC,
                                         int batch)
{
    if (batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < batch; i++) {
        cublasStatus_t s = cublasSgemm(h, ta, tb, m, n, k, alpha, A + i * sA, lda, B + i * sB,
                                       ldb, beta, C + i * sC, ldc);
        if (s != CUBLAS_STATUS_SUCCESS)
            return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}
