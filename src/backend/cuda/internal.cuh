/*
 * internal.cuh - what the parts of the CUDA backend (src/backend/cuda/, see ../cuda.h) share:
 * the one `struct cuda_state` they all read and write, the check and launch macros, the device
 * helpers every reduction uses, and the functions one part offers another. Nothing outside
 * src/backend/cuda/ includes it: the trainer sees backend.h's table and cuda.h.
 *
 * The parts, one translation unit each (nvcc, and the host C++ compiler against the GPU twin,
 * tests/twin, where DDP_CUDA_TWIN is defined), each defining and launching its own kernels:
 *   runtime.cu      the state, memory (accounting, workspace, alloc/upload/download, page-locked
 *                   host buffers, the batch pipeline), uint8 input conversion, sync and zero
 *   dlopen.cu       the cuBLAS and cuDNN symbol tables and the loader that fills both
 *   blas.cu         bf16 operand casts and GEMMs, linear (+ relu) forward and backward
 *   conv.cu         conv2d: im2col + cuBLAS; the path choice and the table's conv entries
 *   conv_dnn.cu     conv2d through cuDNN: plans, algorithms chosen by measurement, the calls
 *   conv_graph.cu   cuDNN's graph API: engine configs listed, timed, kept, run and rebuilt
 *   conv_dnn_text.cu    the choices as text (rank 0's, a checkpoint's)
 *   conv_dnn_report.cu  the plans in words: the run log's and check's lines
 *   normpool.cu     batchnorm, max/avg pools, global average pool, add
 *   layout.cu       channels-last activations: to_nhwc / to_nchw, the (B, H, W, C) kernels of
 *                   the pools and gap, per-channel column sums (batchnorm, bias gradients)
 *   elementwise.cu  bias broadcast, bias + relu epilogue, relu, residual join + relu, dropout,
 *                   scale
 *   loss_optim.cu   softmax cross-entropy, sum of squares and clip_grad_norm, sgd and adam
 *   graph.cu        CUDA graphs (capture, per-step values, launch) and the stall clock
 *   table.cu        the ddp_backend table, backend creation and cuda.h's queries
 *   vcheck.cu       `ddptrain validate`'s device measurements (bandwidth, GEMM rates, host
 *                   copies, memory pattern test; cuda.h, Validation)
 *
 * Correctness first: the kernels follow cpu_kernels.inc line by line (same first-maximum rule
 * in maxpool and xent, same dropout hash, double accumulation where the CPU accumulates in
 * double); they are grid-stride loops whose grid follows from the work size (blocks_for),
 * element-wise ones on float4 where the pointers allow (vec4_ok).
 *
 * Dimension letters as in backend.h: B batch, C in channels, O out channels or features,
 * H W input height and width, OH OW output, P = OH*OW, S positions per channel, K classes,
 * CKK = C*k*k, nb samples in one conv chunk, Q = nb*P columns of a chunk's im2col matrix.
 *
 * Row-major on column-major cuBLAS: a row-major (r, c) matrix is a column-major (c, r) one, so
 * each row-major product Y = A B is issued as Y^T = B^T A^T with the operands swapped.
 *
 * Scratch: conv keeps its im2col matrix (CKK, Q) and its gradient in the caller's col buffer
 * (conv_col_elems); everything else an op needs on the device (conv's transposed output
 * gradient, reduction partials, batchnorm and xent sums) lives in one workspace owned here,
 * grown on demand during the first step (never freed: see ws_get) and kept until exit.
 *
 * Every launch goes through LAUNCH, and the runtime and cuBLAS headers can be swapped for the
 * GPU twin's (tests/twin, DDP_CUDA_TWIN): ddptrain-twin runs these very files on the CPU.
 */
#ifndef DDP_BACKEND_CUDA_INTERNAL_CUH
#define DDP_BACKEND_CUDA_INTERNAL_CUH

#ifdef DDP_CUDA_TWIN
#include "twin_kernels.h" /* tests/twin: the GPU twin's runtime, cuBLAS and kernel language */
#include "cudnn.h"        /* the twin's cuDNN (tests/twin/cudnn.cc) */
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#if DDP_HAVE_CUDNN_H /* src/backend/meson.build: cudnn.h found next to the toolkit's headers */
#include <cudnn.h>
#endif
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda.h"

extern "C" {
#include "core/dl.h"
#include "core/hash.h" /* ddp_uniform01: the dropout masks, as cpu.c draws them */
#include "core/util.h"
}

/* cuDNN's path is built in with cudnn.h, and always on the twin. */
#if defined(DDP_CUDA_TWIN) || DDP_HAVE_CUDNN_H
#define DDP_DNN 1
#endif

/* ---- library tables (filled by dlopen.cu) ----------------------------------------------------
 * cuBLAS and cuDNN are not linked: every call goes through these tables of function pointers,
 * filled from the libraries opened with dlopen (or, on the twin, from the twin's functions). */

#ifdef DDP_CUDA_TWIN
#define V2(f) f
#else
#define V2(f) f##_v2
#endif

/* GemmEx and its strided-batched form, spelled out: C++ sees cuBLAS's overloads of both. */
typedef cublasStatus_t (*gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                     int, const void *, const void *, cudaDataType, int,
                                     const void *, cudaDataType, int, const void *, void *,
                                     cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*gemm_strided_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                             int, int, int, const void *, const void *,
                                             cudaDataType, int, long long, const void *,
                                             cudaDataType, int, long long, const void *, void *,
                                             cudaDataType, int, long long, int, cublasComputeType_t,
                                             cublasGemmAlgo_t);

struct blas_api {
    decltype(&V2(cublasCreate)) create;
    decltype(&V2(cublasDestroy)) destroy;
    decltype(&V2(cublasSetStream)) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&V2(cublasSgemm)) sgemm;
    decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
    decltype(&cublasGetProperty) get_property;
    decltype(&cublasGetStatusName) status_name;
    decltype(&cublasGetStatusString) status_string;
    gemm_ex_fn gemm_ex;                         /* [train] precision = bf16 */
    gemm_strided_ex_fn gemm_strided_batched_ex; /* [train] precision = bf16 */
};

#ifdef DDP_DNN
struct dnn_api {
    decltype(&cudnnGetVersion) get_version;
    decltype(&cudnnGetErrorString) error_string;
    decltype(&cudnnCreate) create;
    decltype(&cudnnSetStream) set_stream;
    decltype(&cudnnCreateTensorDescriptor) create_tensor;
    decltype(&cudnnSetTensor4dDescriptor) set_tensor;
    decltype(&cudnnCreateFilterDescriptor) create_filter;
    decltype(&cudnnSetFilter4dDescriptor) set_filter;
    decltype(&cudnnCreateConvolutionDescriptor) create_conv;
    decltype(&cudnnSetConvolution2dDescriptor) set_conv;
    decltype(&cudnnSetConvolutionMathType) set_math;
    decltype(&cudnnGetConvolutionForwardAlgorithm_v7) fwd_algos;
    decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) bwd_data_algos;
    decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) bwd_filter_algos;
    decltype(&cudnnGetConvolutionForwardWorkspaceSize) fwd_ws;
    decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) bwd_data_ws;
    decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) bwd_filter_ws;
    decltype(&cudnnConvolutionForward) fwd;
    decltype(&cudnnConvolutionBackwardData) bwd_data;
    decltype(&cudnnConvolutionBackwardFilter) bwd_filter;
    decltype(&cudnnFindConvolutionForwardAlgorithmEx) find_fwd;
    decltype(&cudnnFindConvolutionBackwardDataAlgorithmEx) find_bwd_data;
    decltype(&cudnnFindConvolutionBackwardFilterAlgorithmEx) find_bwd_filter;
    /* the graph (backend) API (conv_graph.cu); be_create NULL where this cuDNN lacks it */
    decltype(&cudnnBackendCreateDescriptor) be_create;
    decltype(&cudnnBackendDestroyDescriptor) be_destroy;
    decltype(&cudnnBackendFinalize) be_finalize;
    decltype(&cudnnBackendSetAttribute) be_set;
    decltype(&cudnnBackendGetAttribute) be_get;
    decltype(&cudnnBackendExecute) be_execute;
};
#endif

/* ---- sizes ---------------------------------------------------------------------------------- */

/* Threads per block of every kernel (a multiple of 32, as block_sum needs). */
#define THREADS 256
/* Most blocks of a grid-stride launch: gridDim.x's limit (2^31 - 1); 65535 is the limit of
 * gridDim.y and z only. Below it every grid-stride launch has one thread per item (or per
 * vector of items): the grid derives from the work size. */
#ifndef MAX_BLOCKS
#define MAX_BLOCKS 0x7fffffffu
#endif
/* gridDim.y and gridDim.z's limit. */
#define MAX_GRID_YZ 65535u
/* Most partial sums per channel in the batchnorm and conv bias reductions. */
#define BN_MAX_SPLITS 64
/* Elements one reduction block should cover before another split is worth it. */
#define BN_ELEMS_PER_SPLIT 8192
/* Most partial sums per channel of the channels-last column sums (layout.cu): a block covers
 * up to 32 channels, so more splits than BN_MAX_SPLITS keep as many blocks busy. */
#define COLSUM_MAX_SPLITS 128

/* Device allocations whose sizes are kept for the accounting of mem_info (frees come only at
 * the end; beyond this many live blocks a free is not subtracted from `allocated`). */
#define MEM_BLOCKS 4096

/* Batch uploads whose completion events are kept (copies_done looks no further back: the
 * loader holds at most DDP_LOADER_MAX_SLOTS batches). */
#define UPLOAD_RING 64

/* bf16 operand scratch buffers (blas.cu). */
#define BF16_SLOTS 3

/* Convolution shapes planned at most (one per conv layer shape of the model). */
#define DNN_PLANS 256
/* Batch sizes planned per shape: the planned one, the last partial batch, evaluation's and
 * its last; a fifth size replaces the oldest of the others. */
#define DNN_SLOTS 4

/* Page-locked staging slots of graph_launch, one page each (a slot is rewritten only after
 * its event says its copy ran; the loader keeps the host far fewer steps ahead than this). */
#define GRAPH_RING 64
#define GRAPH_SLOT_BYTES 4096

/* ---- shared types ----------------------------------------------------------------------------- */

/* A convolution's shape and what follows from it (conv_geom_of in conv.cu). */
struct conv_geom {
    int C, H, W, O, k, stride, pad, OH, OW, P, CKK;
};

#ifdef DDP_DNN
/* The three directions of a convolution, each with its own algorithm. */
enum { DNN_FWD, DNN_BWD_DATA, DNN_BWD_FILTER, DNN_DIRS };
/* How a slot's algorithm of one direction was chosen (DNN_ADOPTED: named by rank 0 or by the
 * checkpoint resumed, ddp_cuda_conv_adopt). */
enum { DNN_UNCHOSEN, DNN_HEURISTIC, DNN_MEASURED, DNN_ADOPTED };
/* g_cuda.dnn.det: [train] deterministic = false (0), true (1: deterministic algorithms,
 * timed); DNN_RANKED: deterministic, the first in cuDNN's ranking (no timing). */
#define DNN_RANKED 2

/* Knob choices one graph engine config may carry (cuDNN's engines have a handful; a config
 * with more is not used, so that every kept one fits the choices' text). */
#define DNN_KNOBS 16

/* A direction's execution plan of cuDNN's graph API (conv_graph.cu) and the descriptors it
 * was made from, kept alive with it; plan NULL: the direction runs a legacy algorithm. */
struct dnn_graph {
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t x, w, y, conv, op, graph;  /* the operation graph */
    cudnnBackendDescriptor_t eng, cfg, knob[DNN_KNOBS]; /* the engine config */
    int64_t engine;                                     /* ENGINE_GLOBAL_INDEX */
    int nknobs;
    int64_t knob_type[DNN_KNOBS], knob_value[DNN_KNOBS];
    size_t ws; /* EXECUTION_PLAN_WORKSPACE_SIZE */
};

/* Descriptors and algorithms of one cuDNN plan for one batch size. */
struct dnn_slot {
    int B, tf32, det; /* B 0: not prepared */
    int graph;        /* g_cuda.dnn.graph when described: the graph API's engines timed too */
    cudnnTensorDescriptor_t x, y;
    cudnnConvolutionDescriptor_t cv[DNN_DIRS];
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t ws[DNN_DIRS]; /* bytes each needs */
    int how[DNN_DIRS];   /* DNN_UNCHOSEN, DNN_HEURISTIC or DNN_MEASURED */
    float ms[DNN_DIRS];  /* the measured time of the kept algorithm */
    cudnnMathType_t math[DNN_DIRS];
    /* timed under [train] deterministic = true: the fastest algorithm that only its
     * non-determinism kept out, where it beat the kept one (any_algo -1: none did) */
    int any_algo[DNN_DIRS];
    float any_ms[DNN_DIRS];
    int any_graph[DNN_DIRS]; /* 1: any_algo is a graph engine's global index */
    /* a direction whose graph plan was timed faster than the legacy algorithm still named
     * above (fwd, bwd_data, bwd_filter): that algorithm's time (0: none; the run log names it) */
    float leg_ms[DNN_DIRS];
    /* a direction chosen from cuDNN's graph API runs this plan instead of its algorithm */
    struct dnn_graph g[DNN_DIRS];
};

/* The cuDNN plan of one convolution shape in one activation layout and storage. col holds the
 * workspace (cap bytes), then one weight gradient's room (wbytes: backward filter's timing
 * writes there; under NHWC or bf16 storage the filter gradient as cuDNN writes it, added
 * (transposed, widened) into dw), then where wroom the weights as the filter descriptor says
 * (wbytes more). */
struct dnn_plan {
    struct conv_geom q;
    int layout;    /* enum ddp_layout of the activations (g_cuda.layout when planned) */
    int act16;     /* 1: bf16 activations and filter (g_cuda.act16 when planned) */
    size_t cap;    /* workspace bytes every caller's col holds for this shape */
    size_t wbytes; /* bytes of one (O,C,k,k) filter of the plan's type, 256-aligned */
    int wroom;     /* 1: col has the filter room (NHWC or bf16; or the graph API on when planned,
                * whose tensors need 16-byte aligned weights) */
    cudnnFilterDescriptor_t w;       /* NCHW: (O,C,k,k); NHWC: cuDNN's (O,k,k,C); float or bf16 */
    struct dnn_slot slot[DNN_SLOTS]; /* slot 0: the planned batch */
    int next;                        /* the slot (1..) a new batch size takes */
};
#endif

/* What a captured step's kernels read instead of their scalar arguments (backend.h, graph_*):
 * one block per graph slot (device input set), written by graph_launch on the copy stream. */
struct graph_vals {
    float lr, momentum;                   /* sgd */
    int first;                            /* sgd: first step */
    float b1, step_size, bc2_sqrt, decay; /* adam, from lr, beta1 and t as cuda_adam_step */
    uint64_t noise;                       /* dropout: the step's seed */
};

/* ---- the state ---------------------------------------------------------------------------------
 * Everything the backend keeps between calls, in one place: one backend per process (cuda.h),
 * made by ddp_backend_cuda (table.cu) and never freed. Each group says which part writes it;
 * any part may read any of it. Only the main thread touches it (cuda.h, Threads). */
struct cuda_state {
    /* device and compute stream (table.cu sets them once) */
    int device = -1;   /* -1 until ddp_backend_cuda succeeds */
    int precision = 0; /* [train] precision: enum ddp_precision (backend.h) */
    int layout = 0;    /* activations: enum ddp_layout (backend.h set_layout; conv.cu) */
    int act16 = 0;     /* 1: activations stored as bf16 (backend.h set_act_type; conv.cu) */
    cudaStream_t stream;
    cublasHandle_t blas;
    char devname[320]; /* "NAME (sm_XY, N GiB)", ddp_cuda_device_string */

    /* the workspace (runtime.cu ws_get): ws_bytes bytes of device memory */
    void *ws;
    size_t ws_bytes;

    /* the input pipeline (runtime.cu upload_batch; table.cu creates the stream and events) */
    cudaStream_t copy;               /* host-to-device batch copies */
    cudaEvent_t mark[2];             /* compute work queued before upload q, at q % 2 */
    cudaEvent_t copied[UPLOAD_RING]; /* copy q done, at q % UPLOAD_RING */
    int64_t uploads, done;           /* copies queued; highest known complete */

    /* device memory accounting (runtime.cu, backend.h mem_info) */
    struct {
        size_t allocated, peak; /* bytes of cuda_alloc and the workspace, now and at most */
        int nblocks;
        struct {
            void *p;
            size_t bytes;
        } blocks[MEM_BLOCKS];
    } mem;

    /* bf16 operand scratch ([train] precision = bf16; blas.cu as_bf16) */
    struct {
        int on; /* [train] precision = bf16 */
        void *buf[BF16_SLOTS];
        size_t bytes[BF16_SLOTS];
    } bf16;

    /* cuBLAS, through dlopen (dlopen.cu blas_open fills it) */
    struct blas_api blas_fn;

#ifdef DDP_DNN
    /* cuDNN, through dlopen (dlopen.cu dnn_open fills it) */
    struct dnn_api dnn_fn;

    /* the convolution path (conv.cu) and the cuDNN plans (conv_dnn.cu) */
    struct {
        int mode = -1;        /* -1 not chosen yet, 0 im2col + cuBLAS, 1 cuDNN */
        int det = DNN_RANKED; /* 0, 1 ([train] deterministic) or DNN_RANKED */
        int api = 1;          /* [train] cudnn_api: 1 auto (graph and legacy), 0 legacy */
        int graph;            /* 1: the graph API's engines are timed (api 1, and it works) */
        cudnnHandle_t h;
        struct dnn_plan plans[DNN_PLANS];
        int nplans;
    } dnn;
#endif

    /* CUDA graphs (graph.cu; the captured ops of elementwise.cu and loss_optim.cu read it) */
    struct {
        int capturing;
        int slot;               /* the slot being captured */
        struct graph_vals *dev; /* DDP_GRAPH_SLOTS device blocks */
        char *host;             /* GRAPH_RING page-locked slots */
        cudaEvent_t copied[GRAPH_RING];
        cudaEvent_t used[DDP_GRAPH_SLOTS]; /* the last launch of slot s's graph, after it */
        int64_t writes;
        cudaGraphExec_t exec[DDP_GRAPH_SLOTS];
        uint64_t noise;         /* the capture step's seed */
        float adam_b2, adam_wd; /* the captured adam_step's constants */
        int adam_decoupled;
    } graph;

    /* the ops table handed out (table.cu fills it, each part its own entries) */
    struct ddp_backend table;
};

extern struct cuda_state g_cuda; /* runtime.cu */

/* ---- checks and launches ---------------------------------------------------------------------- */

#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            ddp_die_at(__FILE__, __LINE__, DDP_EXIT_RUNTIME, "%s: CUDA error %s: %s", #call, \
                       cudaGetErrorName(e_), cudaGetErrorString(e_));                        \
    } while (0)

#define CUBLAS_CHECK(call)                                                                     \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            ddp_die_at(__FILE__, __LINE__, DDP_EXIT_RUNTIME, "%s: cuBLAS error %s: %s", #call, \
                       g_cuda.blas_fn.status_name(s_), g_cuda.blas_fn.status_string(s_));      \
    } while (0)

/* Every kernel launch: queued on the compute stream, a bad configuration reported at its
 * launch site. A macro so that the GPU twin (twin_kernels.h) can run the very same kernels on
 * the CPU. */
#ifndef LAUNCH
#define LAUNCH(kernel, grid, block, ...)                            \
    do {                                                            \
        kernel<<<(grid), (block), 0, g_cuda.stream>>>(__VA_ARGS__); \
        CUDA_CHECK(cudaGetLastError());                             \
    } while (0)
#endif

/* Each thread takes items i, i + (all threads), ...: neighbouring threads read neighbouring
 * items (coalesced). The GPU twin, which runs the threads one after another, gives each thread
 * a contiguous run instead (twin_kernels.h): the same items, each once. */
#ifndef GRID_STRIDE
#define GRID_STRIDE(i, n)                                                   \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)
#endif

/* ---- vectors --------------------------------------------------------------------------------
 * Element-wise kernels read and write 16 bytes (float4) at a time where every pointer they
 * touch is 16-byte aligned (vec4_ok), the last n % 4 elements one at a time. The twin has no
 * float4 of its own: a struct of the same layout. */
#ifdef DDP_CUDA_TWIN
struct alignas(16) float4 {
    float x, y, z, w;
};
#endif

/* 1 when every non-NULL pointer of p (count k) is 16-byte aligned. */
static inline int vec4_ok(const void *const *p, int k)
{
    for (int i = 0; i < k; i++)
        if (p[i] && ((uintptr_t)p[i] & 15u))
            return 0;
    return 1;
}

/* ---- activation storage ------------------------------------------------------------------------
 * After set_act_type(DDP_ACT_BF16) (g_cuda.act16) every activation tensor is bf16 (backend.h).
 * A kernel that reads or writes activations is a template over their storage type A (float or
 * bf16) and computes in float: act_ld(v) is a stored value as float (exact), act_st<A>(f) the
 * float f as stored (bf16: round to nearest even). Its entry launches the instance g_cuda.act16
 * asks for, casting the activation pointers (ACT_LAUNCH). Every other tensor stays float. */
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float act_ld(float v)
{
    return v;
}
__device__ __forceinline__ float act_ld(bf16 v)
{
    return __bfloat162float(v);
}
template <typename A> __device__ __forceinline__ A act_st(float f);
template <> __device__ __forceinline__ float act_st<float>(float f)
{
    return f;
}
template <> __device__ __forceinline__ bf16 act_st<bf16>(float f)
{
    return __float2bfloat16_rn(f);
}

/* Bytes of one stored activation. */
static inline size_t act_bytes(void)
{
    return g_cuda.act16 ? sizeof(bf16) : sizeof(float);
}

/* LAUNCH of a kernel template's instance for the storage in force: ACT_LAUNCH(k, grid, block,
 * (args for float), (args for bf16)); each argument list casts its activation pointers, e.g.
 * ACT_LAUNCH(k_relu, g, b, ((float *)o, (const float *)x, n), ((bf16 *)o, (const bf16 *)x, n)). */
#define ACT_ARGS_(...) __VA_ARGS__
#define ACT_LAUNCH(kernel, grid, block, f32args, bf16args)         \
    do {                                                           \
        if (g_cuda.act16)                                          \
            LAUNCH(kernel<bf16>, grid, block, ACT_ARGS_ bf16args); \
        else                                                       \
            LAUNCH(kernel<float>, grid, block, ACT_ARGS_ f32args); \
    } while (0)

/* ---- bf16 vectors ------------------------------------------------------------------------------
 * The bf16 instances of the element-wise kernels read and write 8 activations (16 bytes) at a
 * time where every pointer they touch is 16-byte aligned (vec4_ok again), fp32 tensors beside
 * them (dropout's mask, linear's fp32 product, act_to_f32's output) as two float4; the last
 * n % 8 elements, and misaligned pointers, take the one-element code. Each element is computed
 * exactly as there (act_ld, the same float arithmetic, act_st): the same bits. A struct, not
 * uint4, so that the twin's bf16 (a plain struct) fits too; nvcc moves it as one 16-byte access.
 * Vector i covers elements 8i .. 8i + 7. */
struct alignas(16) bf16x8 {
    bf16 v[8];
};

/* The 8 values of vector i of p as floats (exact). */
__device__ __forceinline__ void act_ld8(float f[8], const bf16 *p, size_t i)
{
    const bf16x8 v = ((const bf16x8 *)p)[i];
    for (int j = 0; j < 8; j++)
        f[j] = act_ld(v.v[j]);
}

/* Elements 8i .. 8i + 7 of fp32 p (two float4). */
__device__ __forceinline__ void act_ld8(float f[8], const float *p, size_t i)
{
    const float4 a = ((const float4 *)p)[2 * i], b = ((const float4 *)p)[2 * i + 1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
    f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

/* Vector i of p = f, each value rounded to bf16 (act_st). */
__device__ __forceinline__ void act_st8(bf16 *p, size_t i, const float f[8])
{
    bf16x8 v;
    for (int j = 0; j < 8; j++)
        v.v[j] = act_st<bf16>(f[j]);
    ((bf16x8 *)p)[i] = v;
}

/* Elements 8i .. 8i + 7 of fp32 p = f (two float4). */
__device__ __forceinline__ void act_st8(float *p, size_t i, const float f[8])
{
    float4 a, b;
    a.x = f[0], a.y = f[1], a.z = f[2], a.w = f[3];
    b.x = f[4], b.y = f[5], b.z = f[6], b.w = f[7];
    ((float4 *)p)[2 * i] = a;
    ((float4 *)p)[2 * i + 1] = b;
}

/* The body of an element-wise kernel's vector instance: out[i] = f(a[i]) (map1_8) or
 * f(a[i], b[i]) (map2_8) for i < n, 8 at a time (act_ld8, act_st8), then the n % 8 tail one at
 * a time; f a functor of floats, each storage (bf16, float) on each side. */
template <typename O, typename X, typename F>
__device__ __forceinline__ void map1_8(O *out, const X *a, size_t n, F f)
{
    const size_t n8 = n / 8;
    GRID_STRIDE(i, n8)
    {
        float x[8];
        act_ld8(x, a, i);
        for (int j = 0; j < 8; j++)
            x[j] = f(x[j]);
        act_st8(out, i, x);
    }
    GRID_STRIDE(t, n - 8 * n8) out[8 * n8 + t] = act_st<O>(f(act_ld(a[8 * n8 + t])));
}

template <typename O, typename X, typename Y, typename F>
__device__ __forceinline__ void map2_8(O *out, const X *a, const Y *b, size_t n, F f)
{
    const size_t n8 = n / 8;
    GRID_STRIDE(i, n8)
    {
        float x[8], y[8];
        act_ld8(x, a, i);
        act_ld8(y, b, i);
        for (int j = 0; j < 8; j++)
            x[j] = f(x[j], y[j]);
        act_st8(out, i, x);
    }
    GRID_STRIDE(t, n - 8 * n8)
    {
        const size_t i = 8 * n8 + t;
        out[i] = act_st<O>(f(act_ld(a[i]), act_ld(b[i])));
    }
}

/* The feature (channel) c of an element and its place r in the run of `inner` elements of c,
 * features cycling through 0 .. O - 1: what (e / inner) % O gives, one division for the first
 * element of a vector (chan_at), then stepped on (chan_next). */
struct chan_walk {
    int r, c;
};

__device__ __forceinline__ chan_walk chan_at(size_t e, int O, int inner)
{
    const size_t q = e / (size_t)inner;
    chan_walk w;
    w.r = (int)(e - q * (size_t)inner);
    w.c = (int)(q % (size_t)O);
    return w;
}

__device__ __forceinline__ void chan_next(chan_walk *w, int O, int inner)
{
    if (++w->r == inner) {
        w->r = 0;
        w->c = w->c + 1 == O ? 0 : w->c + 1;
    }
}

/* ---- device helpers (inline: every part that reduces compiles its own) ------------------------ */

/* Sum of v over the warp; the result is valid in lane 0. */
template <typename T> __device__ T warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32); the result is valid in thread 0.
 * May be called several times in one kernel. */
template <typename T> __device__ T block_sum(T v)
{
    __shared__ T sh[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* a previous call may still read sh */
    if (lane == 0)
        sh[wid] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = threadIdx.x < (unsigned)nw ? sh[threadIdx.x] : T(0);
    if (wid == 0)
        v = warp_sum(v);
    return v;
}

/* ---- what one part offers the others ---------------------------------------------------------- */

/* runtime.cu */
cublasMath_t math_mode(int precision); /* cuBLAS math mode for [train] precision */
int tf32_math(void);                   /* 1 when [train] precision = tf32 */
int dnn_tensor_math(void);             /* 1 when cuDNN may use tensor cores: tf32 and bf16 */
void mem_note(void *p, size_t bytes);  /* count a device allocation in mem_info */
void mem_forget(void *p);              /* a counted allocation freed */
void *ws_get(size_t bytes);            /* the workspace, at least `bytes` large */
size_t align256(size_t bytes);
unsigned blocks_for(size_t n); /* blocks of a grid-stride launch over n items */
void cuda_table_runtime(struct ddp_backend *t);

/* dlopen.cu: 0 when the table is filled (once per process); -1 with one line in err */
int blas_open(char *err, size_t errlen);
#ifdef DDP_DNN
int dnn_open(char *err, size_t errlen);
#endif

/* elementwise.cu */
void fill_bias(float *out, const float *b, size_t n, int O, int inner); /* out = b broadcast */
void bias_relu(float *out, const float *b, size_t n, int O, int inner); /* relu(out + b) */
void bias_add(float *out, const float *b, size_t n, int O, int inner);  /* out + b */
cudaError_t kernel_attributes(cudaFuncAttributes *fa); /* of a kernel of this build */
void cuda_table_elementwise(struct ddp_backend *t);

/* blas.cu */
const void *as_bf16(const float *x, size_t n, int slot);
void gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A,
               int lda, const void *B, int ldb, float beta, float *C, int ldc);
void gemm_bf16_strided(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
                       float beta, float *C, int ldc, long long sC, int batch);
void cuda_table_blas(struct ddp_backend *t);

/* conv.cu */
void cuda_table_conv(struct ddp_backend *t);
/* Bias gradients in two passes: blocks per feature for sums over Q values (at least 1, at
 * most BN_MAX_SPLITS), and the second pass, db[o] += feature o's splits partial sums (part,
 * doubles, o-major) in order: the same bits every run. */
size_t rowsum_splits(size_t Q);
void rowsum_finish(float *db, const double *part, int O, size_t splits);

/* conv_dnn.cu */
void dnn_version(char *out, size_t len); /* "9.x.y", "not found" or "not built in" */
int dnn_start(char *err, size_t errlen); /* 0; -1 not found, -2 does not start (why in err) */
#ifdef DDP_DNN
/* Values one cuDNN tensor may hold: its descriptors take int sizes and strides, and
 * cudnnSetTensor4dDescriptor answers CUDNN_STATUS_NOT_SUPPORTED beyond 2^31 - 1. */
#define DNN_TENSOR_MAX ((size_t)INT32_MAX)
size_t dnn_plan_shape(const struct conv_geom *q, int B); /* conv_plan: floats of col */
void dnn_conv2d_fwd(float *out, float *col, const float *inp, const float *w, const float *b, int B,
                    const struct conv_geom *q, int relu);
void dnn_conv2d_bwd(float *dinp, float *dw, float *db, float *col, const float *dout,
                    const float *inp, const float *w, int B, const struct conv_geom *q);
/* The names the report (conv_dnn_report.cu) and the messages give: a direction ("forward",
 * "backward data", "backward filter"), a plan's layout and storage ("", " NHWC", " bf16 data",
 * " NHWC bf16 data"). */
extern const char *const dnn_dir_names[DNN_DIRS];
const char *dnn_layout_tag(int layout, int act16);
/* For the choices' text (conv_dnn_text.cu): the plan of shape q in layout and storage (NULL:
 * none), the slot of batch B (prepared, or described now), and direction d of slot s set to
 * the legacy algorithm algo in math (0, or -1 where it does not qualify: the slot unchanged). */
struct dnn_plan *dnn_find(const struct conv_geom *q, int layout, int act16);
struct dnn_slot *dnn_slot_for(struct dnn_plan *pl, int B);
int dnn_adopt_legacy(const struct dnn_plan *pl, struct dnn_slot *s, int d, int algo, int math);

/* conv_graph.cu: convolutions through cuDNN's graph (backend) API */
/* What one timed choice runs on (conv_dnn.cu's operands): device pointers of x, w, y (as dx,
 * dy) and the filter gradient room, the workspace and its bytes. */
struct dnn_operands {
    void *x, *w, *y, *dw;
    void *ws;
    size_t ws_bytes;
};
/* 1 when cuDNN's graph API works here (a tiny graph's heuristics finalize); else 0 with why. */
int dnn_graph_probe(char *why, size_t len);
/* Time the graph API's qualifying engine configs for direction d of slot s on o within cap
 * and keep the fastest in s->g[d] where it beats the slot's kept legacy choice (have: 1 when
 * there is one; ties as DNN_TIE to the least workspace, then legacy). 0 when a graph plan was
 * kept, -1 when the legacy choice stays (or none qualified). */
int dnn_graph_choose(const struct dnn_plan *pl, struct dnn_slot *s, int d,
                     const struct dnn_operands *o, size_t cap, int have);
/* Rebuild direction d's plan from its engine index and knobs (the choices' text) within cap:
 * 0 kept (the slot's choice replaced), -1 not (the slot unchanged). */
int dnn_graph_adopt(const struct dnn_plan *pl, struct dnn_slot *s, int d, int64_t engine,
                    int nknobs, const int64_t *type, const int64_t *value, size_t cap);
/* Run direction d's kept plan: x, w, y as for dnn_operands (beta 0), ws its workspace. */
void dnn_graph_run(const struct dnn_slot *s, int d, const void *x, const void *w, const void *y,
                   void *ws);
void dnn_graph_drop(struct dnn_slot *s, int d); /* the plan and descriptors destroyed */
/* Shared with conv_dnn.cu: timing ties, repeats (conv_dnn.cu's header says why). */
#define DNN_TIE 0.10f
#define DNN_TIE_MS 0.005f
#define DNN_REPEAT 3
#endif

/* normpool.cu, loss_optim.cu */
/* out, argmax (B, C, H/k, W/k) = maxpool of relu(inp + b[c]); b NULL: relu(inp) */
void relu_maxpool(float *out, uint8_t *argmax, const float *inp, const float *b, int B, int C,
                  int H, int W, int k);
void cuda_table_normpool(struct ddp_backend *t);
void cuda_table_loss_optim(struct ddp_backend *t);

/* layout.cu: channels-last (backend.h set_layout). normpool.cu's entries take these where
 * nhwc_on(S); each equals its NCHW op on the permuted tensors bit for bit. Shapes are given
 * as (B, C, H, W) as in backend.h; the tensors are (B, H, W, C). */
/* 1 when the spatial ops' (B, C, S) activations are stored (B, S, C): the layout in force is
 * NHWC and S > 1 (where S = 1 both layouts are the same bytes, and the NCHW kernels run). */
static inline int nhwc_on(size_t S)
{
    return g_cuda.layout == DDP_LAYOUT_NHWC && S > 1;
}
void nhwc_maxpool_fwd(float *out, int32_t *argmax, const float *inp, int B, int C, int H, int W,
                      int k);
void nhwc_maxpool_bwd(float *dinp, const float *dout, const int32_t *argmax, int B, int C, int H,
                      int W, int k);
/* out, argmax (B, H/k, W/k, C) = maxpool of relu(inp + b[c]) (b NULL: relu(inp)) */
void nhwc_relu_maxpool(float *out, uint8_t *argmax, const float *inp, const float *b, int B, int C,
                       int H, int W, int k);
void nhwc_maxpool_relu_bwd(float *dinp, const float *dout, const float *out, const uint8_t *argmax,
                           int B, int C, int H, int W, int k);
/* nhwc_maxpool_relu_bwd, and db (C) += the column sums of the dinp (B*H*W, C) it writes, in
 * colsum_add's grouping (backend.h maxpool_relu_bwd_db) */
void nhwc_maxpool_relu_bwd_db(float *dinp, float *db, const float *dout, const float *out,
                              const uint8_t *argmax, int B, int C, int H, int W, int k);
void nhwc_avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W, int k);
void nhwc_avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W, int k);
void nhwc_gap_fwd(float *out, const float *inp, int B, int C, int S); /* inp (B, S, C) */
void nhwc_gap_bwd(float *dinp, const float *dout, int B, int C, int S);
/* Per-channel sums over the rows of x (rows, C), deterministic, in double: colsum_splits
 * partial sums a channel (part, doubles: np of them per channel and split, (c * splits + y)
 * * np + j, as k_bn_finish (np 2) and rowsum_finish (np 1) read them) of a, and with np 2 of
 * a^2 (b NULL) or a*b; mask (NULL or a relu's output): a where mask > 0, else 0. */
size_t colsum_splits(size_t rows, int C);
void colsum_partial(double *part, const float *a, const float *b, const float *mask, size_t rows,
                    int C, size_t splits, int np);
/* db (C) += the column sums of x (rows, C): a channels-last bias gradient (x the output
 * gradient (B, OH, OW, O), rows B*OH*OW), in the workspace; never waits. */
void colsum_add(float *db, const float *x, size_t rows, int C);
/* backend.h act_from_f32 and act_to_f32 are this part's (cuda_table_layout fills them). */
void cuda_table_layout(struct ddp_backend *t);

/* graph.cu */
cudaError_t graph_setup(void); /* device blocks, staging slots and events of the graphs */
void cuda_table_graph(struct ddp_backend *t);

#endif
