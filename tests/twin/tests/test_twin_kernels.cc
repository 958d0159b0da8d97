/*
 * test_twin_kernels.cc - the GPU twin's kernel executor (tests/twin/kernels.cc), suite twin:
 *   - block reductions through __syncthreads and warp shuffles give exact sums over many
 *     blocks, several block sizes and repeated launches (fibers are made once and reused);
 *   - no thread passes a __syncthreads before every thread of its block reached it (shared
 *     memory written before the barrier is seen after it);
 *   - a grid-stride loop (the twin's contiguous runs) visits every item exactly once, for
 *     grids larger and smaller than the items and counts that do not divide evenly;
 *   - a kernel whose threads wait at different barriers (half a warp at a shuffle, the rest
 *     at __syncthreads) is a GPU fault: cudaErrorLaunchFailure from the next synchronisation
 *     and a line naming the kernel, not a hang;
 *   - the device clock (cudaEventElapsedTime) counts the CPU time the stream's worker ran: a
 *     kernel that sleeps 300 ms (a worker the scheduler holds off) or a wait for another
 *     stream's sleeping kernel times about 0, a kernel that computes 60 ms of CPU time 60 ms.
 * Exit 0 or 1.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "twin_kernels.h"

static int g_fail;

static void expect(bool ok, const char *what)
{
    printf("%-4s %s\n", ok ? "ok" : "FAIL", what);
    g_fail += !ok;
}

/* out[block] = sum of in[i] over the block's grid-stride share: warp shuffles, then the
 * warps' sums through shared memory, two barriers. */
static void k_block_sum(float *out, const float *in, size_t n)
{
    __shared__ float warp_sums[32];
    float v = 0;
    GRID_STRIDE(i, n)
    v += in[i];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    const unsigned lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0)
        warp_sums[w] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0;
        for (unsigned k = 0; k < nw; k++)
            s += warp_sums[k];
        out[blockIdx.x] = s;
    }
    __syncthreads();
}

/* out[t] = in[t + 1] within each block, through shared memory: a thread let past the barrier
 * before its neighbour wrote reads the previous block's value. */
static void k_rotate(float *out, const float *in)
{
    __shared__ float sh[1024];
    const size_t base = (size_t)blockIdx.x * blockDim.x;
    sh[threadIdx.x] = in[base + threadIdx.x];
    __syncthreads();
    out[base + threadIdx.x] = sh[(threadIdx.x + 1) % blockDim.x];
    __syncthreads();
}

static void k_cover(int *hits, size_t n)
{
    GRID_STRIDE(i, n)
    hits[i] += 1;
}

/* Threads 0-15 exchange lanes; the rest of the block waits at __syncthreads: no barrier is
 * ever complete. */
static void k_diverge(float *out)
{
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16)
        v = __shfl_down_sync(0xffffffffu, v, 1);
    else
        __syncthreads();
    out[threadIdx.x] = v;
}

static void t_block_sum(void)
{
    const size_t n = 100003; /* integers up to 2^24 stay exact in float sums of this size */
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(i % 7);
    double want = 0;
    for (size_t i = 0; i < n; i++)
        want += h[i];
    float *din = nullptr, *dout = nullptr;
    cudaMalloc((void **)&din, n * sizeof(float));
    cudaMalloc((void **)&dout, 64 * sizeof(float));
    cudaMemcpy(din, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    const unsigned shapes[][2] = {{37, 256}, {1, 1024}, {64, 64}, {37, 256}, {5, 32}};
    for (const auto &sh : shapes)
        for (int rep = 0; rep < 2; rep++) {
            twin::launch_kernel("k_block_sum", dim3(sh[0]), dim3(sh[1]), 0, k_block_sum, dout,
                                (const float *)din, n);
            float got[64];
            const cudaError_t e =
                cudaMemcpy(got, dout, sh[0] * sizeof(float), cudaMemcpyDeviceToHost);
            double s = 0;
            for (unsigned b = 0; b < sh[0]; b++)
                s += got[b];
            char what[128];
            snprintf(what, sizeof what, "block sums, %u blocks of %u threads (launch %d): %.0f",
                     sh[0], sh[1], rep + 1, s);
            expect(e == cudaSuccess && s == want, what);
        }
    cudaFree(din);
    cudaFree(dout);
}

static void t_rotate(void)
{
    const unsigned blocks = 9, threads = 128, n = blocks * threads;
    std::vector<float> h(n), got(n);
    for (unsigned i = 0; i < n; i++)
        h[i] = (float)i;
    float *din = nullptr, *dout = nullptr;
    cudaMalloc((void **)&din, n * sizeof(float));
    cudaMalloc((void **)&dout, n * sizeof(float));
    cudaMemcpy(din, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    twin::launch_kernel("k_rotate", dim3(blocks), dim3(threads), 0, k_rotate, dout,
                        (const float *)din);
    cudaMemcpy(got.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost);
    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++)
        bad += got[i] != h[i / threads * threads + (i % threads + 1) % threads];
    expect(bad == 0,
           "shared memory through __syncthreads: every thread sees its neighbour's write");
    cudaFree(din);
    cudaFree(dout);
}

static void t_cover(void)
{
    const size_t counts[] = {0, 1, 255, 256, 257, 2047, 2049, 10007};
    const unsigned grids[][2] = {{1, 32}, {3, 64}, {8, 256}, {40, 256}};
    int *d = nullptr;
    cudaMalloc((void **)&d, 10007 * sizeof(int));
    std::vector<int> h(10007);
    for (size_t n : counts)
        for (const auto &g : grids) {
            cudaMemset(d, 0, 10007 * sizeof(int));
            twin::launch_kernel("k_cover", dim3(g[0]), dim3(g[1]), 0, k_cover, d, n);
            cudaMemcpy(h.data(), d, 10007 * sizeof(int), cudaMemcpyDeviceToHost);
            size_t bad = 0;
            for (size_t i = 0; i < 10007; i++)
                bad += h[i] != (i < n ? 1 : 0);
            char what[128];
            snprintf(what, sizeof what, "grid-stride over %zu items, %u x %u threads: each once", n,
                     g[0], g[1]);
            expect(bad == 0, what);
        }
    cudaFree(d);
}

static void k_sleep(int ms)
{
    if (threadIdx.x == 0)
        usleep((useconds_t)ms * 1000);
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Spin until this thread (the stream's worker) has run ms milliseconds of CPU time. */
static void k_spin(int ms)
{
    const double t0 = cpu_ms();
    volatile double x = 0;
    while (cpu_ms() - t0 < ms)
        x = x + 1;
}

/* Milliseconds between two events around fn's work on stream s. */
static float timed_ms(cudaStream_t s, const std::function<void()> &fn)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, s);
    fn();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = -1;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess)
        ms = -1;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms;
}

static void t_clock(void)
{
    cudaStream_t s, o;
    cudaStreamCreate(&s);
    cudaStreamCreate(&o);
    char what[160];
    float ms =
        timed_ms(s, [&] { twin::launch_kernel("k_sleep", dim3(1), dim3(1), s, k_sleep, 300); });
    snprintf(what, sizeof what, "a kernel sleeping 300 ms times %.1f ms (< 100: busy time only)",
             ms);
    expect(ms >= 0 && ms < 100, what);
    ms = timed_ms(s, [&] { twin::launch_kernel("k_spin", dim3(1), dim3(1), s, k_spin, 60); });
    snprintf(what, sizeof what, "a kernel computing 60 ms of CPU time times %.1f ms (>= 60)", ms);
    expect(ms >= 60 && ms < 6000, what);
    cudaEvent_t done;
    cudaEventCreate(&done);
    ms = timed_ms(s, [&] {
        twin::launch_kernel("k_sleep", dim3(1), dim3(1), o, k_sleep, 300);
        cudaEventRecord(done, o);
        cudaStreamWaitEvent(s, done, 0);
    });
    snprintf(what, sizeof what, "a wait for another stream's sleeping kernel times %.1f ms (< 100)",
             ms);
    expect(ms >= 0 && ms < 100, what);
    cudaEventDestroy(done);
    cudaStreamDestroy(s);
    cudaStreamDestroy(o);
}

static void t_diverge(void)
{
    float *d = nullptr;
    cudaMalloc((void **)&d, 64 * sizeof(float));
    FILE *log = tmpfile(); /* the twin's report goes to stderr: catch it there */
    const int saved = dup(2);
    if (!log || saved < 0 || dup2(fileno(log), 2) < 0) {
        expect(false, "redirect stderr");
        return;
    }
    twin::launch_kernel("k_diverge", dim3(1), dim3(64), 0, k_diverge, d);
    const cudaError_t e = cudaDeviceSynchronize();
    dup2(saved, 2);
    close(saved);
    char line[512] = "";
    rewind(log);
    if (!fgets(line, sizeof line, log))
        line[0] = 0;
    fclose(log);
    fprintf(stderr, "%s", line);
    expect(e == cudaErrorLaunchFailure,
           "threads at different barriers: cudaErrorLaunchFailure, not a hang");
    expect(strstr(line, "kernel k_diverge") && strstr(line, "different barriers"),
           "the fault line names the kernel and the divergent barriers");
}

int main(void)
{
    setvbuf(stdout, nullptr, _IONBF, 0);
    t_block_sum();
    t_rotate();
    t_cover();
    t_clock();
    t_diverge(); /* last: the fault is sticky, as on a GPU */
    printf("%s\n", g_fail ? "FAIL" : "all passed");
    return g_fail ? 1 : 0;
}
