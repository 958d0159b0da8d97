/*
 * graph.cu - CUDA graphs and the stall clock of the CUDA backend (see internal.cuh for the
 * parts). Graphs (backend.h graph_*): a step captured on the compute stream per slot, its
 * per-step values (lr, momentum, adam's factors, the dropout seed) in a device block per slot
 * that graph_launch fills from a page-locked staging ring on the copy stream, then replays the
 * graph. The captured kernels that read those values live with their ops (elementwise.cu
 * dropout, loss_optim.cu sgd and adam). The stall clock (grad_sync.h): the device's
 * nanosecond clock read on the compute stream around the all-reduce wait.
 */
#include "backend/cuda/internal.cuh"

/* ---- CUDA Graphs: the per-step values in device memory ----------------------------------- */

/* The block's values for sc, the scalar factors exactly as cuda_adam_step computes them. */
static void graph_fill(struct graph_vals *v, const struct ddp_graph_scalars *sc)
{
    memset(v, 0, sizeof *v);
    v->lr = sc->lr;
    v->momentum = sc->momentum;
    v->first = sc->t == 1;
    const float lr = sc->lr, b1 = sc->beta1, b2 = g_cuda.graph.adam_b2,
                weight_decay = g_cuda.graph.adam_wd;
    const int64_t t = sc->t;
    const double bc1 = 1 - pow((double)b1, (double)t), bc2 = 1 - pow((double)b2, (double)t);
    v->b1 = b1;
    v->step_size = (float)((double)lr / bc1);
    v->bc2_sqrt = (float)sqrt(bc2);
    v->decay = g_cuda.graph.adam_decoupled ? 1 - lr * weight_decay : 1.0f;
    v->noise = sc->noise;
}

/* Device blocks, staging slots and their events: made with the backend, so that no step
 * allocates. */
cudaError_t graph_setup(void)
{
    cudaError_t e =
        cudaMalloc((void **)&g_cuda.graph.dev, DDP_GRAPH_SLOTS * sizeof(struct graph_vals));
    if (e == cudaSuccess)
        mem_note(g_cuda.graph.dev, DDP_GRAPH_SLOTS * sizeof(struct graph_vals));
    if (e == cudaSuccess)
        e = cudaHostAlloc((void **)&g_cuda.graph.host, (size_t)GRAPH_RING * GRAPH_SLOT_BYTES,
                          cudaHostAllocDefault);
    for (int i = 0; i < GRAPH_RING && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&g_cuda.graph.copied[i], cudaEventDisableTiming);
    for (int i = 0; i < DDP_GRAPH_SLOTS && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&g_cuda.graph.used[i], cudaEventDisableTiming);
    return e;
}

static int cuda_graph_capture_begin(int slot, const struct ddp_graph_scalars *sc, char *err,
                                    size_t errlen)
{
    const cudaError_t e = cudaStreamBeginCapture(g_cuda.stream, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return ddp_err(err, errlen, "GPU %d: cudaStreamBeginCapture failed: %s", g_cuda.device,
                       cudaGetErrorString(e));
    }
    g_cuda.graph.capturing = 1;
    g_cuda.graph.slot = slot;
    g_cuda.graph.noise = sc->noise;
    return 0;
}

static int cuda_graph_capture_end(int slot, char *err, size_t errlen)
{
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(g_cuda.stream, &graph);
    g_cuda.graph.capturing = 0;
    if (e == cudaSuccess) {
        if (g_cuda.graph.exec[slot])
            CUDA_CHECK(cudaGraphExecDestroy(g_cuda.graph.exec[slot]));
        g_cuda.graph.exec[slot] = NULL;
        e = cudaGraphInstantiate(&g_cuda.graph.exec[slot], graph, 0);
        cudaGraphDestroy(graph);
    }
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError();
    return ddp_err(err, errlen,
                   "GPU %d: capturing the training step as a CUDA graph failed: %s (%s): an op "
                   "of the step waited for the device, allocated or copied pageable memory",
                   g_cuda.device, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* The values go up on the copy stream, after the slot's previous launch has run (in training
 * upload_batch has ordered the copy stream so already: the slot's input set was last read
 * by that launch), and the compute stream waits for the copy, as for the batch. */
static void cuda_graph_launch(int slot, const struct ddp_graph_scalars *sc)
{
    const int i = (int)(g_cuda.graph.writes % GRAPH_RING);
    if (g_cuda.graph.writes++ >= GRAPH_RING) {
        const cudaError_t e = cudaEventQuery(g_cuda.graph.copied[i]);
        if (e == cudaErrorNotReady)
            ddp_die("internal: CUDA graph staging slot %d still being copied", i);
        CUDA_CHECK(e);
    }
    struct graph_vals *h = (struct graph_vals *)(g_cuda.graph.host + (size_t)i * GRAPH_SLOT_BYTES);
    graph_fill(h, sc);
    CUDA_CHECK(cudaStreamWaitEvent(g_cuda.copy, g_cuda.graph.used[slot], 0));
    CUDA_CHECK(cudaMemcpyAsync(g_cuda.graph.dev + slot, h, sizeof *h, cudaMemcpyHostToDevice,
                               g_cuda.copy));
    CUDA_CHECK(cudaEventRecord(g_cuda.graph.copied[i], g_cuda.copy));
    CUDA_CHECK(cudaStreamWaitEvent(g_cuda.stream, g_cuda.graph.copied[i], 0));
    CUDA_CHECK(cudaGraphLaunch(g_cuda.graph.exec[slot], g_cuda.stream));
    CUDA_CHECK(cudaEventRecord(g_cuda.graph.used[slot], g_cuda.stream));
}

/* ---- the compute stream's stall clock (grad_sync.h) --------------------------------------- */

#ifndef DDP_CUDA_TWIN /* the twin's is the host's monotonic clock (twin_kernels.h) */
/* The device's nanosecond clock. */
static __device__ __forceinline__ unsigned long long globaltimer_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#endif

/* t[0] = now (begin), or t[1] += now - t[0] (end). */
__global__ void k_stall_mark(unsigned long long *t, int end)
{
    const unsigned long long now = globaltimer_ns();
    if (end)
        t[1] += now - t[0];
    else
        t[0] = now;
}

static void cuda_stall_mark(void *t, int end)
{
    LAUNCH(k_stall_mark, 1, 1, (unsigned long long *)t, end);
}

/* This part's entries of the ops table. */
void cuda_table_graph(struct ddp_backend *t)
{
    t->stall_mark = cuda_stall_mark;
    t->graph_capture_begin = cuda_graph_capture_begin;
    t->graph_capture_end = cuda_graph_capture_end;
    t->graph_launch = cuda_graph_launch;
}
