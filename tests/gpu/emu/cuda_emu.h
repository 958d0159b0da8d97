/*
 * cuda_emu.h - just enough of the CUDA runtime and cuBLAS, on the CPU, to run the kernels of
 * src/backend/cuda.cu without a GPU (tests/gpu/emu/backend_emu.cc compiles cuda.cu against
 * this header with g++). A test of the kernels' logic - index arithmetic, the row-major GEMM
 * arguments, block and warp reductions, the host code around them - not of CUDA itself:
 * timing, memory spaces, streams and the compiler's device code are not emulated.
 *
 * Execution model: a launch runs its blocks one after another; the threads of a block run
 * as real threads (a pool), so __syncthreads is a barrier of the block and a warp shuffle a
 * barrier of its 32 lanes. Blocks are one-dimensional in threads (as every kernel of cuda.cu
 * is). __shared__ variables are statics: shared by the threads of the running block. Device
 * memory is host memory; streams are synchronous; cuBLAS calls are column-major cblas calls.
 */
#ifndef DDP_CUDA_EMU_H
#define DDP_CUDA_EMU_H

#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <functional>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

extern thread_local dim3 threadIdx;
extern dim3 blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

/* Round-to-nearest product that the compiler may not fuse with a later add. */
static inline float __fmul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}

/* Run body on every thread of every block of grid x block. */
void emu_launch(dim3 grid, dim3 block, const std::function<void()> &body);
void __syncthreads(void);
/* Lane exchange within the warp: value bits of lane `src` (or own when src >= 32). */
uint64_t emu_shfl(uint64_t bits, unsigned src);

template <typename T> T emu_shfl_t(T v, unsigned src)
{
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = emu_shfl(bits, src);
    T r;
    memcpy(&r, &bits, sizeof(T));
    return r;
}
template <typename T> T __shfl_down_sync(unsigned mask, T v, int delta)
{
    (void)mask;
    return emu_shfl_t(v, (threadIdx.x & 31) + (unsigned)delta);
}
template <typename T> T __shfl_sync(unsigned mask, T v, int src)
{
    (void)mask;
    return emu_shfl_t(v, (unsigned)src);
}

#define LAUNCH(kernel, grid, block, ...)                                                       \
    emu_launch(dim3(grid), dim3(block), [&] { kernel(__VA_ARGS__); })
/* Few blocks per grid-stride launch: each block costs a round of the thread pool. */
#define MAX_BLOCKS 8u

/* ---- runtime ----------------------------------------------------------------------------- */

typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorNotReady = 600,
};
typedef void *cudaStream_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};
enum cudaMemoryType {
    cudaMemoryTypeUnregistered,
    cudaMemoryTypeHost,
    cudaMemoryTypeDevice,
    cudaMemoryTypeManaged
};
struct cudaPointerAttributes {
    enum cudaMemoryType type;
};
struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
};
struct cudaFuncAttributes {
    int maxThreadsPerBlock;
};
#define cudaStreamNonBlocking 1u

const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaFree(void *p);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k,
                            cudaStream_t s);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
template <typename F> cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, F)
{
    a->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

/* ---- cuBLAS ------------------------------------------------------------------------------ */

typedef void *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH } cublasMath_t;
typedef enum { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;
#define CUBLAS_VER_MAJOR 0
#define CUBLAS_VER_MINOR 0
#define CUBLAS_VER_PATCH 0

const char *cublasGetStatusName(cublasStatus_t s);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasGetProperty(libraryPropertyType t, int *v);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sA, const float *B, int ldb, long long sB,
                                         const float *beta, float *C, int ldc, long long sC,
                                         int batch);

#endif
