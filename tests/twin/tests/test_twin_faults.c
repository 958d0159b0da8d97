/*
 * test_twin_faults.c - bugs planted in GPU code, which the GPU twin must expose (suite twin,
 * driven by faults.sh). `test_twin_faults CASE plant|clean`: with plant the twin must report the
 * bug (a fault line and a signal or exit 1, or wrong data this program detects, exit 3); with
 * clean the same code without the bug passes (exit 0). docs/testing.md lists the cases.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "core/util.h"

#include "../../gpu/backend_args.h" /* CONV_GEOM, SGD_ARGS, ADAM_ARGS */

static const struct ddp_backend *G;

#define N 1024

static int check(const float *got, float want, const char *what)
{
    for (int i = 0; i < N; i++)
        if (got[i] != want) {
            printf("FAIL (bug exposed): %s: element %d is %g, expected %g\n", what, i,
                   (double)got[i], (double)want);
            return 3;
        }
    printf("ok   %s: all %d elements %g\n", what, N, (double)want);
    return 0;
}

static int missing_wait(int plant)
{
    cudaStream_t compute = (cudaStream_t)ddp_cuda_stream(), comm;
    cudaEvent_t reduced;
    if (cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&reduced, cudaEventDisableTiming) != cudaSuccess)
        return 1;
    float host[N], *p = G->alloc(sizeof host), *grad = G->alloc(sizeof host);
    float *sum = G->alloc(sizeof host);
    for (int i = 0; i < N; i++)
        host[i] = 1;
    G->upload(p, host, sizeof host);
    G->upload(grad, host, sizeof host); /* local gradient 1 */
    for (int i = 0; i < N; i++)
        host[i] = 4;
    G->upload(sum, host, sizeof host); /* what the all-reduce brings: 4 */
    G->sync();
    /* the "all-reduce" on the communication stream writes the reduced gradient */
    cudaMemcpyAsync(grad, sum, sizeof host, cudaMemcpyDeviceToDevice, comm);
    cudaEventRecord(reduced, comm);
    if (!plant)
        cudaStreamWaitEvent(compute, reduced, 0);
    G->sgd_step(p, grad, 1.0f, NULL, NULL, N,
                SGD_ARGS(0.25f, 0, 0, 0, 1)); /* p = 1 - 0.25 * 4 = 0 */
    G->download(host, p, sizeof host);
    cudaStreamSynchronize(comm);
    return check(host, 0.0f, "parameters after the optimiser step");
}

static int slot_reuse(int plant)
{
    cudaStream_t compute = (cudaStream_t)ddp_cuda_stream();
    cudaEvent_t uploaded;
    float *slot, host[N], *x = G->alloc(sizeof host);
    if (cudaMallocHost((void **)&slot, sizeof host) != cudaSuccess ||
        cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming) != cudaSuccess)
        return 1;
    for (int i = 0; i < N; i++)
        slot[i] = 1; /* batch 1 */
    cudaMemcpyAsync(x, slot, sizeof host, cudaMemcpyHostToDevice, compute);
    cudaEventRecord(uploaded, compute);
    G->scale(x, N, 3.0f); /* the step's kernels on batch 1 */
    if (!plant)
        cudaEventSynchronize(uploaded); /* the loader may refill the slot only now */
    for (int i = 0; i < N; i++)
        slot[i] = 2; /* the loader's next batch into the same slot */
    G->download(host, x, sizeof host);
    return check(host, 3.0f, "batch 1 as the kernel saw it");
}

/* A captured step (scale by 3 with a host sync planted between two ops), replayed twice. */
static int capture_sync(int plant)
{
    float host[N], *x = G->alloc(sizeof host);
    for (int i = 0; i < N; i++)
        host[i] = 1;
    G->upload(x, host, sizeof host);
    const struct ddp_graph_scalars sc = {0.1f, 0, 0.9f, 2, 7};
    char err[DDP_ERR_LEN];
    if (G->graph_capture_begin(0, &sc, err, sizeof err) != 0)
        return printf("%s\n", err), 1;
    G->scale(x, N, 3.0f);
    if (plant)
        G->sync(); /* the bug: waits for the device inside the captured step */
    G->scale(x, N, 1.0f);
    if (G->graph_capture_end(0, err, sizeof err) != 0) {
        printf("FAIL (bug exposed): %s\n", err);
        return 1;
    }
    G->graph_launch(0, &sc);
    G->graph_launch(0, &sc);
    G->download(host, x, sizeof host);
    return check(host, 9.0f, "x after two launches of the captured x *= 3");
}

static int capture_freed(int plant)
{
    float host[N], *x = G->alloc(sizeof host), *y = G->alloc(sizeof host);
    G->zero(x, N);
    const struct ddp_graph_scalars sc = {0.1f, 0, 0.9f, 2, 7};
    char err[DDP_ERR_LEN];
    if (G->graph_capture_begin(1, &sc, err, sizeof err) != 0)
        return 1;
    G->scale(y, N, 2.0f);
    G->scale(x, N, 2.0f);
    if (G->graph_capture_end(1, err, sizeof err) != 0)
        return printf("%s\n", err), 1;
    if (plant)
        G->free(y); /* the bug: the graph still uses y */
    G->graph_launch(1, &sc);
    G->download(host, x, sizeof host);
    return check(host, 0.0f, "x after the launch");
}

static int capture_fork(int plant)
{
    cudaStream_t compute = (cudaStream_t)ddp_cuda_stream(), side;
    cudaEvent_t fork, join;
    float host[N], *x = G->alloc(sizeof host), *y = G->alloc(sizeof host);
    if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&join, cudaEventDisableTiming) != cudaSuccess)
        return 1;
    G->zero(x, N);
    G->zero(y, N);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(compute, cudaStreamCaptureModeGlobal);
    G->scale(x, N, 2.0f);
    cudaEventRecord(fork, compute);
    cudaStreamWaitEvent(side, fork, 0); /* side joins the capture */
    cudaMemcpyAsync(y, x, sizeof host, cudaMemcpyDeviceToDevice, side);
    if (!plant) {
        cudaEventRecord(join, side);
        cudaStreamWaitEvent(compute, join, 0); /* joined back */
    }
    const cudaError_t e = cudaStreamEndCapture(compute, &graph);
    if (e != cudaSuccess) {
        printf("FAIL (bug exposed): cudaStreamEndCapture: %s\n", cudaGetErrorName(e));
        return 1;
    }
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess ||
        cudaGraphLaunch(exec, compute) != cudaSuccess)
        return 1;
    G->download(host, y, sizeof host);
    return check(host, 0.0f, "y copied from x in the graph");
}

/* Forbidden call number `which` (0-7) while compute captures; returns its error. */
static cudaError_t forbidden(int which, float *d, cudaEvent_t captured, cudaStream_t compute)
{
    static float pageable[N];
    void *p = NULL;
    switch (which) {
    case 0:
        return cudaStreamSynchronize(compute);
    case 1:
        return cudaDeviceSynchronize();
    case 2:
        return cudaEventSynchronize(captured);
    case 3:
        return cudaEventQuery(captured);
    case 4:
        return cudaMemcpy(d, pageable, sizeof pageable, cudaMemcpyHostToDevice);
    case 5:
        return cudaMalloc(&p, 64);
    case 6:
        return cudaMemcpyAsync(d, pageable, sizeof pageable, cudaMemcpyHostToDevice, compute);
    default:
        return cudaStreamQuery(compute);
    }
}

static int capture_rules(int plant)
{
    static const char *const names[] = {"cudaStreamSynchronize",
                                        "cudaDeviceSynchronize",
                                        "cudaEventSynchronize",
                                        "cudaEventQuery",
                                        "cudaMemcpy",
                                        "cudaMalloc",
                                        "cudaMemcpyAsync (pageable)",
                                        "cudaStreamQuery"};
    cudaStream_t compute;
    cudaEvent_t ev;
    float *d = G->alloc(sizeof(float) * N);
    if (cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess)
        return 2;
    int exposed = 0;
    for (int which = 0; which < 8; which++) {
        cudaGraph_t graph = NULL;
        enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        cudaStreamBeginCapture(compute, cudaStreamCaptureModeGlobal);
        cudaMemsetAsync(d, 0, sizeof(float) * N, compute);
        cudaEventRecord(ev, compute);
        const cudaError_t e = plant ? forbidden(which, d, ev, compute) : cudaSuccess;
        cudaStreamIsCapturing(compute, &st);
        const cudaError_t end = cudaStreamEndCapture(compute, &graph);
        cudaGetLastError();
        if (plant && e != cudaSuccess && st == cudaStreamCaptureStatusInvalidated &&
            end == cudaErrorStreamCaptureInvalidated && !graph) {
            printf("exposed: %s during a capture: %s; cudaStreamEndCapture: %s\n", names[which],
                   cudaGetErrorName(e), cudaGetErrorName(end));
            exposed++;
        } else if (plant || end != cudaSuccess || !graph) {
            printf("not exposed: %s: %s, capture status %d, cudaStreamEndCapture: %s\n",
                   names[which], cudaGetErrorName(e), (int)st, cudaGetErrorName(end));
        }
        if (graph)
            cudaGraphDestroy(graph);
    }
    if (!plant && !exposed)
        printf("ok   8 captures without a forbidden call ended with a graph\n");
    return exposed == 8 ? 1 : plant ? 3 : 0;
}

/* conv2d through cuDNN: C2 9x9 -> O4, k3, pad 1, batch 3; the bug: a workspace smaller than
 * planned (cudnn-workspace) or a host input (cudnn-host). */
static int cudnn_case(int workspace, int plant)
{
    char line[480];
    if (!ddp_cuda_conv_path(1, 1, line, sizeof line) || !G->conv_plan) {
        printf("no cuDNN: %s\n", line);
        return 2;
    }
    enum { B = 3, C = 2, H = 9, O = 4, K = 3 };
    static float hx[B * C * H * H];
    const size_t col = G->conv_plan(B, CONV_GEOM(C, H, H, O, K, 1, 1));
    float *x = G->alloc(sizeof hx), *w = G->alloc(sizeof(float) * O * C * K * K);
    float *y = G->alloc(sizeof(float) * B * O * H * H);
    float *dx = G->alloc(sizeof hx), *dw = G->alloc(sizeof(float) * O * C * K * K);
    float *ws = G->alloc(sizeof(float) * (workspace && plant ? col / 2 : col));
    G->zero(x, sizeof hx / sizeof *hx);
    G->zero(w, (size_t)O * C * K * K);
    G->zero(dw, (size_t)O * C * K * K);
    G->conv2d_fwd(y, ws, !workspace && plant ? hx : x, w, NULL, B, CONV_GEOM(C, H, H, O, K, 1, 1));
    G->conv2d_bwd(dx, dw, NULL, ws, y, x, w, B, CONV_GEOM(C, H, H, O, K, 1, 1));
    G->sync();
    printf("ok   convolution through cuDNN, forward and backward, with a %zu-float workspace\n",
           col);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3 || (strcmp(argv[2], "plant") != 0 && strcmp(argv[2], "clean") != 0)) {
        fprintf(stderr, "usage: test_twin_faults host-read|kernel-host|missing-wait|slot-reuse|"
                        "cudnn-workspace|cudnn-host|capture-sync|capture-freed|capture-fork|"
                        "capture-rules plant|clean\n");
        return 2;
    }
    const int plant = strcmp(argv[2], "plant") == 0;
    char err[DDP_ERR_LEN];
    G = ddp_backend_cuda(0, 0, err, sizeof err);
    if (!G) {
        fprintf(stderr, "no twin GPU: %s\n", err);
        return 1;
    }
    if (strcmp(argv[1], "host-read") == 0) {
        float *d = G->alloc(sizeof(float) * N), v = 0;
        if (plant)
            v = *(volatile float *)d; /* the bug */
        else
            G->download(&v, d, sizeof v);
        printf("ok   read %g through a copy\n", (double)v);
        return 0;
    }
    if (strcmp(argv[1], "kernel-host") == 0) {
        static float host[N];
        float *d = G->alloc(sizeof host);
        G->scale(plant ? host : d, N, 2.0f); /* the bug: a host array to a kernel */
        G->sync();
        G->scale(d, N, 2.0f);
        G->sync();
        printf("ok   kernels ran on device memory\n");
        return 0;
    }
    if (strcmp(argv[1], "missing-wait") == 0)
        return missing_wait(plant);
    if (strcmp(argv[1], "slot-reuse") == 0)
        return slot_reuse(plant);
    if (strcmp(argv[1], "cudnn-workspace") == 0 || strcmp(argv[1], "cudnn-host") == 0)
        return cudnn_case(strcmp(argv[1], "cudnn-workspace") == 0, plant);
    if (strcmp(argv[1], "capture-sync") == 0)
        return capture_sync(plant);
    if (strcmp(argv[1], "capture-freed") == 0)
        return capture_freed(plant);
    if (strcmp(argv[1], "capture-fork") == 0)
        return capture_fork(plant);
    if (strcmp(argv[1], "capture-rules") == 0)
        return capture_rules(plant);
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
