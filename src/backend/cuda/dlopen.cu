/*
 * dlopen.cu - cuBLAS and cuDNN, opened when first needed (see internal.cuh for the parts).
 *
 * ddptrain does not link cuBLAS: the constructors of libcublas and libcublasLt take 50-70 ms at
 * the start of every process that loads them, CPU-only runs, `ddptrain env` and `hostlist`
 * included. blas_open() dlopens it (the soname of the cuBLAS the build was compiled against,
 * found through LD_LIBRARY_PATH, the binary's run path and the system's) when the first GPU
 * backend is made, and every call goes through g_cuda.blas_fn. cuDNN (the legacy convolution
 * API of cuDNN 9, and its graph API where the library has it) is opened the same way by
 * dnn_open() when the trainer chooses the convolution path (conv.cu, ddp_cuda_conv_path), into
 * g_cuda.dnn_fn. One loader, core/dl.h (also NCCL's), fills both tables. The twin build points
 * the tables at the twin's cuBLAS and cuDNN (tests/twin); DDP_EMU_NO_CUDNN=1 makes cuDNN
 * missing there.
 *
 * It leaves the handles (table.cu, conv_dnn.cu) and every call (blas.cu, conv_dnn.cu) to
 * others.
 */
#include "backend/cuda/internal.cuh"

#define BLAS_STR2(x) #x
#define BLAS_STR(x) BLAS_STR2(x)
#define BLAS_SONAME "libcublas.so." BLAS_STR(CUBLAS_VER_MAJOR)
#define BLAS_FIX                                                                                  \
    "install the CUDA toolkit's cuBLAS " BLAS_STR(CUBLAS_VER_MAJOR) " or add the directory that " \
                                                                    "holds " BLAS_SONAME          \
                                                                    " to LD_LIBRARY_PATH"

#ifdef DDP_DNN
#define DNN_STR2(x) #x
#define DNN_STR(x) DNN_STR2(x)
#define DNN_SONAME "libcudnn.so." DNN_STR(CUDNN_MAJOR)
#define DNN_FIX                                                                          \
    "install cuDNN " DNN_STR(CUDNN_MAJOR) " or add the directory that holds " DNN_SONAME \
                                          " to LD_LIBRARY_PATH"
#endif

#ifdef DDP_CUDA_TWIN
/* The twin's cuBLAS: always there. */
int blas_open(char *err, size_t errlen)
{
    (void)err, (void)errlen;
    const struct blas_api twin = {&cublasCreate,
                                  &cublasDestroy,
                                  &cublasSetStream,
                                  &cublasSetMathMode,
                                  &cublasSgemm,
                                  &cublasSgemmStridedBatched,
                                  &cublasGetProperty,
                                  &cublasGetStatusName,
                                  &cublasGetStatusString,
                                  &cublasGemmEx,
                                  &cublasGemmStridedBatchedEx};
    g_cuda.blas_fn = twin;
    return 0;
}

/* The twin's cuDNN, or missing under DDP_EMU_NO_CUDNN=1 (the fallback path's tests). */
int dnn_open(char *err, size_t errlen)
{
    const char *no = getenv("DDP_EMU_NO_CUDNN");
    if (no && strcmp(no, "1") == 0)
        return ddp_err(err, errlen, "%s: cannot open shared object file (DDP_EMU_NO_CUDNN=1)",
                       DNN_SONAME);
    const struct dnn_api twin = {&cudnnGetVersion,
                                 &cudnnGetErrorString,
                                 &cudnnCreate,
                                 &cudnnSetStream,
                                 &cudnnCreateTensorDescriptor,
                                 &cudnnSetTensor4dDescriptor,
                                 &cudnnCreateFilterDescriptor,
                                 &cudnnSetFilter4dDescriptor,
                                 &cudnnCreateConvolutionDescriptor,
                                 &cudnnSetConvolution2dDescriptor,
                                 &cudnnSetConvolutionMathType,
                                 &cudnnGetConvolutionForwardAlgorithm_v7,
                                 &cudnnGetConvolutionBackwardDataAlgorithm_v7,
                                 &cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                                 &cudnnGetConvolutionForwardWorkspaceSize,
                                 &cudnnGetConvolutionBackwardDataWorkspaceSize,
                                 &cudnnGetConvolutionBackwardFilterWorkspaceSize,
                                 &cudnnConvolutionForward,
                                 &cudnnConvolutionBackwardData,
                                 &cudnnConvolutionBackwardFilter,
                                 &cudnnFindConvolutionForwardAlgorithmEx,
                                 &cudnnFindConvolutionBackwardDataAlgorithmEx,
                                 &cudnnFindConvolutionBackwardFilterAlgorithmEx,
                                 &cudnnBackendCreateDescriptor,
                                 &cudnnBackendDestroyDescriptor,
                                 &cudnnBackendFinalize,
                                 &cudnnBackendSetAttribute,
                                 &cudnnBackendGetAttribute,
                                 &cudnnBackendExecute};
    g_cuda.dnn_fn = twin;
    return 0;
}
#else

/* A library opened once per process: 0 not tried, 1 open, -1 failed (why says so). */
struct dl_once {
    int state;
    char why[512];
};

/* Open lib into table once per process (core/dl.h); 0, or -1 with the first try's line. */
static int dl_once_open(struct dl_once *once, const struct ddp_dl_lib *lib, void *table, char *err,
                        size_t errlen)
{
    if (once->state == 0)
        once->state = ddp_dl_open(lib, table, once->why, sizeof once->why) == 0 ? 1 : -1;
    if (once->state < 0)
        return ddp_err(err, errlen, "%s", once->why);
    return 0;
}

int blas_open(char *err, size_t errlen)
{
    static struct dl_once once;
    static const struct ddp_dl_sym syms[] = {
        {"cublasCreate_v2", offsetof(blas_api, create)},
        {"cublasDestroy_v2", offsetof(blas_api, destroy)},
        {"cublasSetStream_v2", offsetof(blas_api, set_stream)},
        {"cublasSetMathMode", offsetof(blas_api, set_math_mode)},
        {"cublasSgemm_v2", offsetof(blas_api, sgemm)},
        {"cublasSgemmStridedBatched", offsetof(blas_api, sgemm_strided_batched)},
        {"cublasGetProperty", offsetof(blas_api, get_property)},
        {"cublasGetStatusName", offsetof(blas_api, status_name)},
        {"cublasGetStatusString", offsetof(blas_api, status_string)},
        {"cublasGemmEx", offsetof(blas_api, gemm_ex)},
        {"cublasGemmStridedBatchedEx", offsetof(blas_api, gemm_strided_batched_ex)},
    };
    static const char *const sonames[] = {BLAS_SONAME, NULL};
    static const struct ddp_dl_lib lib = {"cuBLAS", sonames,
                                          BLAS_FIX, BLAS_STR(CUBLAS_VER_MAJOR) ".x",
                                          syms,     sizeof syms / sizeof syms[0]};
    return dl_once_open(&once, &lib, &g_cuda.blas_fn, err, errlen);
}

#ifdef DDP_DNN
int dnn_open(char *err, size_t errlen)
{
    static struct dl_once once;
#define DNN_SYM(f, field)            \
    {                                \
#f, offsetof(dnn_api, field) \
    }
    static const struct ddp_dl_sym syms[] = {
        DNN_SYM(cudnnGetVersion, get_version),
        DNN_SYM(cudnnGetErrorString, error_string),
        DNN_SYM(cudnnCreate, create),
        DNN_SYM(cudnnSetStream, set_stream),
        DNN_SYM(cudnnCreateTensorDescriptor, create_tensor),
        DNN_SYM(cudnnSetTensor4dDescriptor, set_tensor),
        DNN_SYM(cudnnCreateFilterDescriptor, create_filter),
        DNN_SYM(cudnnSetFilter4dDescriptor, set_filter),
        DNN_SYM(cudnnCreateConvolutionDescriptor, create_conv),
        DNN_SYM(cudnnSetConvolution2dDescriptor, set_conv),
        DNN_SYM(cudnnSetConvolutionMathType, set_math),
        DNN_SYM(cudnnGetConvolutionForwardAlgorithm_v7, fwd_algos),
        DNN_SYM(cudnnGetConvolutionBackwardDataAlgorithm_v7, bwd_data_algos),
        DNN_SYM(cudnnGetConvolutionBackwardFilterAlgorithm_v7, bwd_filter_algos),
        DNN_SYM(cudnnGetConvolutionForwardWorkspaceSize, fwd_ws),
        DNN_SYM(cudnnGetConvolutionBackwardDataWorkspaceSize, bwd_data_ws),
        DNN_SYM(cudnnGetConvolutionBackwardFilterWorkspaceSize, bwd_filter_ws),
        DNN_SYM(cudnnConvolutionForward, fwd),
        DNN_SYM(cudnnConvolutionBackwardData, bwd_data),
        DNN_SYM(cudnnConvolutionBackwardFilter, bwd_filter),
        DNN_SYM(cudnnFindConvolutionForwardAlgorithmEx, find_fwd),
        DNN_SYM(cudnnFindConvolutionBackwardDataAlgorithmEx, find_bwd_data),
        DNN_SYM(cudnnFindConvolutionBackwardFilterAlgorithmEx, find_bwd_filter),
        /* optional: the graph API (conv_graph.cu); a cuDNN without it runs the legacy API */
        DNN_SYM(cudnnBackendCreateDescriptor, be_create),
        DNN_SYM(cudnnBackendDestroyDescriptor, be_destroy),
        DNN_SYM(cudnnBackendFinalize, be_finalize),
        DNN_SYM(cudnnBackendSetAttribute, be_set),
        DNN_SYM(cudnnBackendGetAttribute, be_get),
        DNN_SYM(cudnnBackendExecute, be_execute),
    };
    static const size_t required = 23; /* the legacy API's; the graph API's six are optional */
#undef DNN_SYM
    static const char *const sonames[] = {DNN_SONAME, NULL};
    static const struct ddp_dl_lib lib = {
        "cuDNN", sonames, DNN_FIX, DNN_STR(CUDNN_MAJOR) ".x", syms, sizeof syms / sizeof syms[0]};
    if (once.state == 0) {
        once.state =
            ddp_dl_open_some(&lib, required, &g_cuda.dnn_fn, once.why, sizeof once.why) == 0 ? 1
                                                                                             : -1;
        /* the graph API is all six or none */
        if (once.state == 1 &&
            (!g_cuda.dnn_fn.be_create || !g_cuda.dnn_fn.be_destroy || !g_cuda.dnn_fn.be_finalize ||
             !g_cuda.dnn_fn.be_set || !g_cuda.dnn_fn.be_get || !g_cuda.dnn_fn.be_execute))
            g_cuda.dnn_fn.be_create = NULL;
    }
    if (once.state < 0)
        return ddp_err(err, errlen, "%s", once.why);
    return 0;
}
#endif
#endif
