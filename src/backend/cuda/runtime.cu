/*
 * runtime.cu - the CUDA backend's runtime (see internal.cuh for the parts): the one
 * struct cuda_state, device memory and its accounting (mem_info), the workspace, host <-> device
 * copies, page-locked host buffers, the batch pipeline (upload_batch, copies_done), the uint8
 * input conversion (u8_to_float), sync and zero. It leaves the kernels of the layers to the
 * other parts and the creation of the device, streams and handles to table.cu.
 */
#include "backend/cuda/internal.cuh"

struct cuda_state g_cuda;

/* cuBLAS math mode for [train] precision: TF32 tensor cores for FP32 GEMMs with tf32, else
 * plain FP32 (bf16 GEMMs go through GemmEx, which needs no math mode). */
cublasMath_t math_mode(int precision)
{
    return precision == DDP_PRECISION_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

/* 1 when [train] precision = tf32 allows TF32 tensor cores (cuBLAS and cuDNN). */
int tf32_math(void)
{
    return g_cuda.precision == DDP_PRECISION_TF32;
}

/* 1 when cuDNN's convolutions may use the tensor cores on fp32 data (TF32 operands): under
 * tf32, and under bf16, whose convolutions run through cuDNN in that math (bf16 through cuDNN
 * needs bf16 activations, which the trunk does not keep yet). */
int dnn_tensor_math(void)
{
    return g_cuda.precision == DDP_PRECISION_TF32 || g_cuda.precision == DDP_PRECISION_BF16;
}

/* ---- device memory accounting (backend.h mem_info) --------------------------------------- */

void mem_note(void *p, size_t bytes)
{
    g_cuda.mem.allocated += bytes;
    if (g_cuda.mem.allocated > g_cuda.mem.peak)
        g_cuda.mem.peak = g_cuda.mem.allocated;
    if (g_cuda.mem.nblocks < MEM_BLOCKS) {
        g_cuda.mem.blocks[g_cuda.mem.nblocks].p = p;
        g_cuda.mem.blocks[g_cuda.mem.nblocks++].bytes = bytes;
    }
}

void mem_forget(void *p)
{
    for (int i = g_cuda.mem.nblocks - 1; i >= 0; i--)
        if (g_cuda.mem.blocks[i].p == p) {
            g_cuda.mem.allocated -= g_cuda.mem.blocks[i].bytes;
            g_cuda.mem.blocks[i] = g_cuda.mem.blocks[--g_cuda.mem.nblocks];
            return;
        }
}

static void cuda_mem_info(struct ddp_mem_info *mi)
{
    mi->allocated = g_cuda.mem.allocated;
    mi->peak = g_cuda.mem.peak;
    mi->dev_free = mi->dev_total = 0;
    if (cudaMemGetInfo(&mi->dev_free, &mi->dev_total) != cudaSuccess) {
        cudaGetLastError();
        mi->dev_free = mi->dev_total = 0;
    }
}

/* The workspace, at least `bytes` large. It grows during the first step (every op has run
 * once by its end), never after. Growing neither frees nor waits: the outgrown buffer may
 * still be read by queued kernels and is left allocated (a few, as each growth at least
 * doubles) until exit. A cudaFree here would synchronise the device, collectives in flight
 * included, and hang on a dead peer outside any deadline. */
void *ws_get(size_t bytes)
{
    if (bytes <= g_cuda.ws_bytes)
        return g_cuda.ws;
    size_t want = g_cuda.ws_bytes * 2 > bytes ? g_cuda.ws_bytes * 2 : bytes;
    want = (want + 255) / 256 * 256;
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, want));
    mem_note(p, want);
    g_cuda.ws = p;
    g_cuda.ws_bytes = want;
    return g_cuda.ws;
}

/* bytes rounded up to a multiple of 256 */
size_t align256(size_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

/* Blocks for a grid-stride loop over n items. */
unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)(b ? b : 1);
}

/* ---- memory ------------------------------------------------------------------------------ */

static void *cuda_alloc(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = 1;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        ddp_die("cudaMalloc of %zu bytes on GPU %d failed: %s (%zu MiB free of %zu MiB); "
                "lower [data] batch_size or use a smaller model",
                bytes, g_cuda.device, cudaGetErrorString(e), free_b >> 20, total_b >> 20);
    }
    mem_note(p, bytes);
    /* zeroed, and complete before any other stream (NCCL's) can touch it */
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    return p;
}

static void cuda_free(void *p)
{
    if (p) {
        mem_forget(p);
        CUDA_CHECK(cudaFree(p));
    }
}

/* Host -> device, or device -> device (model.c copies activations with upload). Queued on the
 * compute stream. A pageable source is staged by CUDA before cudaMemcpyAsync returns; a
 * page-locked one is read later by the DMA engine, so then this waits: either way the caller
 * may reuse src as soon as this returns. */
static void cuda_upload(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    cudaPointerAttributes a;
    CUDA_CHECK(cudaPointerGetAttributes(&a, src));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g_cuda.stream));
    if (a.type == cudaMemoryTypeHost)
        CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
}

static void *cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    const cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess)
        ddp_die("cudaHostAlloc of %zu bytes of page-locked host memory failed: %s; lower [data] "
                "batch_size or raise the memory lock limit (ulimit -l)",
                bytes, cudaGetErrorString(e));
    return p;
}

static void cuda_host_free(void *p)
{
    if (p)
        CUDA_CHECK(cudaFreeHost(p));
}

/* The input pipeline (backend.h upload_batch): upload q goes into the device set q % 2, last
 * used by batch q - 2, whose work was all queued before upload q - 1 recorded mark[(q-1) % 2];
 * the copy stream waits for that mark, copies, and the compute stream waits for the copy.
 * Nothing here waits on the host. */
static int64_t cuda_upload_batch(void *dx, const void *x, size_t xbytes, void *dy, const void *y,
                                 size_t ybytes)
{
    const int64_t q = ++g_cuda.uploads;
    if (q > 1)
        CUDA_CHECK(cudaStreamWaitEvent(g_cuda.copy, g_cuda.mark[(q - 1) % 2], 0));
    CUDA_CHECK(cudaEventRecord(g_cuda.mark[q % 2], g_cuda.stream));
    if (xbytes)
        CUDA_CHECK(cudaMemcpyAsync(dx, x, xbytes, cudaMemcpyHostToDevice, g_cuda.copy));
    if (ybytes)
        CUDA_CHECK(cudaMemcpyAsync(dy, y, ybytes, cudaMemcpyHostToDevice, g_cuda.copy));
    cudaEvent_t done = g_cuda.copied[q % UPLOAD_RING];
    CUDA_CHECK(cudaEventRecord(done, g_cuda.copy));
    CUDA_CHECK(cudaStreamWaitEvent(g_cuda.stream, done, 0));
    return q;
}

/* Highest upload whose copies ran, from event queries (never waits). Older than the ring
 * counts as done: the ring is far longer than any loader keeps batches. */
static int64_t cuda_copies_done(void)
{
    if (g_cuda.done < g_cuda.uploads - UPLOAD_RING + 1)
        g_cuda.done = g_cuda.uploads - UPLOAD_RING + 1;
    while (g_cuda.done < g_cuda.uploads) {
        const cudaError_t e = cudaEventQuery(g_cuda.copied[(g_cuda.done + 1) % UPLOAD_RING]);
        if (e == cudaErrorNotReady) {
            cudaGetLastError(); /* not an error */
            break;
        }
        CUDA_CHECK(e);
        g_cuda.done++;
    }
    return g_cuda.done;
}

/* ---- uint8 input (backend.h u8_to_float) ------------------------------------------------- */

/* Most channels [data] normalize takes (job/config.h DDP_NORM_CHANNELS_MAX). */
#define U8_NORM_MAX 16

/* The normalisation, passed by value with the launch: no copy, nothing to keep alive. */
struct u8_norm {
    int nchan; /* 0: none; else the channel count C */
    float mean[U8_NORM_MAX], std[U8_NORM_MAX];
};

/* out = in / 255.0f, then (v - mean[c]) / std[c] for channel c = (i / S) % C: the CPU loader's
 * operations in its order (h5data.c's conversion, then augment.c's normalisation), each one
 * IEEE-rounded (no contraction applies: a division, a subtraction, a division), so bit for bit
 * the CPU's floats. */
__global__ void k_u8_to_float(float *out, const uint8_t *in, size_t n, int C, int S, u8_norm nm)
{
    GRID_STRIDE(i, n)
    {
        float v = (float)in[i] / 255.0f;
        if (nm.nchan) {
            const int c = (int)((i / (size_t)S) % (size_t)C);
            v = (v - nm.mean[c]) / nm.std[c];
        }
        out[i] = v;
    }
}

static void cuda_u8_to_float(float *out, const uint8_t *in, size_t n, int C, int S, int nchan,
                             const float *mean, const float *std)
{
    if (!n)
        return;
    u8_norm nm;
    memset(&nm, 0, sizeof nm);
    if (nchan < 0 || nchan > U8_NORM_MAX || (nchan && nchan != C))
        ddp_die("internal: u8_to_float with %d normalised channels of %d (at most %d)", nchan, C,
                U8_NORM_MAX);
    nm.nchan = nchan;
    for (int c = 0; c < nchan; c++) {
        nm.mean[c] = mean[c];
        nm.std[c] = std[c];
    }
    LAUNCH(k_u8_to_float, blocks_for(n), THREADS, out, in, n, C, S, nm);
}

static void cuda_download(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
}

static void cuda_sync(void)
{
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
}

static void cuda_zero(float *x, size_t n)
{
    if (n)
        CUDA_CHECK(cudaMemsetAsync(x, 0, sizeof(float) * n, g_cuda.stream));
}

/* This part's entries of the ops table. */
void cuda_table_runtime(struct ddp_backend *t)
{
    t->alloc = cuda_alloc;
    t->free = cuda_free;
    t->upload = cuda_upload;
    t->download = cuda_download;
    t->sync = cuda_sync;
    t->host_alloc = cuda_host_alloc;
    t->host_free = cuda_host_free;
    t->upload_batch = cuda_upload_batch;
    t->copies_done = cuda_copies_done;
    t->u8_to_float = cuda_u8_to_float;
    t->mem_info = cuda_mem_info;
    t->zero = cuda_zero;
}
