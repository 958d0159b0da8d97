/*
 * twin_kernels.h - what the files of src/backend/cuda/ need to compile as host C++ against the GPU twin
 * (DDP_CUDA_TWIN): the kernel language (dim3, threadIdx..., __syncthreads, warp shuffles,
 * __shared__) and the LAUNCH macro, plus the twin's runtime and cuBLAS headers.
 *
 * Execution model (kernels.cc): LAUNCH translates every pointer argument from its device
 * address to the twin's device memory (a host or freed pointer is a GPU fault: sticky
 * cudaErrorIllegalAddress, reported when the kernel runs) and queues the kernel on the
 * stream. The stream's worker runs the grid one block at a time; the threads of a block are
 * fibers switched at __syncthreads and warp shuffles, so barriers behave as on a GPU. Kernels
 * of all streams take turns (one "SM"): __shared__ variables are statics.
 */
#ifndef DDP_TWIN_KERNELS_H
#define DDP_TWIN_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "twin.h"

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

extern dim3 threadIdx, blockIdx, blockDim, gridDim;

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

/* The device clock of cuda/graph.cu's stall clock: the host's monotonic clock, in nanoseconds
 * (the stall clock times waiting; events count busy time instead, runtime.cc). */
static inline unsigned long long globaltimer_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

void __syncthreads(void);
/* Lane exchange within the warp: value bits of lane `src` (or own when src >= 32). */
uint64_t twin_shfl(uint64_t bits, unsigned src);

template <typename T> T twin_shfl_t(T v, unsigned src)
{
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = twin_shfl(bits, src);
    T r;
    memcpy(&r, &bits, sizeof(T));
    return r;
}
template <typename T> T __shfl_down_sync(unsigned, T v, int delta)
{
    return twin_shfl_t(v, (threadIdx.x & 31) + (unsigned)delta);
}
template <typename T> T __shfl_sync(unsigned, T v, int src)
{
    return twin_shfl_t(v, (unsigned)src);
}

namespace twin
{

/* Queue a kernel (body with translated arguments) on s; bad_arg >= 0: that argument was not
 * device memory (value in bad_ptr) and the kernel faults instead of running. */
void launch(const char *name, const void *key, dim3 grid, dim3 block, cudaStream_t s,
            std::function<void()> body, int bad_arg, const void *bad_ptr);

template <typename T> T kernel_arg(T v, int i, int &bad, const void *&bad_ptr)
{
    if constexpr (std::is_pointer_v<T>) {
        if (!v)
            return v;
        void *h = dev_to_host((const void *)v, 1);
        if (!h && bad < 0) {
            bad = i;
            bad_ptr = (const void *)v;
        }
        return h ? (T)h : v;
    } else {
        return v;
    }
}

template <typename... P, size_t... I, typename... A>
void launch_args(const char *name, dim3 grid, dim3 block, cudaStream_t s, void (*k)(P...),
                 std::index_sequence<I...>, A &&...a)
{
    int bad = -1;
    const void *bad_ptr = nullptr;
    std::tuple<P...> t{kernel_arg<P>((P)a, (int)I, bad, bad_ptr)...};
    launch(
        name, (const void *)k, grid, block, s, [k, t] { std::apply(k, t); }, bad, bad_ptr);
}

template <typename... P, typename... A>
void launch_kernel(const char *name, dim3 grid, dim3 block, cudaStream_t s, void (*k)(P...),
                   A &&...a)
{
    launch_args(name, grid, block, s, k, std::index_sequence_for<P...>{}, a...);
}

} // namespace twin

#define LAUNCH(kernel, grid, block, ...)                                                           \
    do {                                                                                           \
        twin::launch_kernel(#kernel, dim3(grid), dim3(block), g_cuda.stream, kernel, __VA_ARGS__); \
        CUDA_CHECK(cudaGetLastError());                                                            \
    } while (0)

/* Few blocks per grid-stride launch: each block is a round of fibers. */
#define MAX_BLOCKS 8u

/* Thread t of a grid-stride loop over n items takes the t-th of (all threads) contiguous runs,
 * not every (all threads)-th item: the twin runs threads one after another, and the GPU's
 * interleaved order would make each of them walk the whole array, a cache miss per item. The
 * same items, each once; a kernel whose threads share items is a race on either order. */
static inline size_t twin_run_start(size_t n, int end)
{
    const size_t all = (size_t)gridDim.x * blockDim.x;
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x + (end ? 1 : 0);
    const size_t per = (n + all - 1) / all;
    return t * per < n ? t * per : n;
}
#define GRID_STRIDE(i, n) \
    for (size_t i = twin_run_start((n), 0), i##_end = twin_run_start((n), 1); i < i##_end; i++)

#endif
