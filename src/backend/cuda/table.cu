/*
 * table.cu - the CUDA backend's entry points (see internal.cuh for the parts): the ops table
 * (each part fills its entries), ddp_backend_cuda (device checks, context, compute and copy
 * streams, events, cuBLAS handle), and cuda.h's queries (devices, versions, the stream). It
 * leaves every op to the other parts and the convolution path's choice to conv.cu.
 */
#include "backend/cuda/internal.cuh"

/* ---- entry points ------------------------------------------------------------------------ */

/* The ops table: each part fills its own entries. */
static void fill_table(void)
{
    struct ddp_backend *t = &g_cuda.table;
    memset(t, 0, sizeof *t);
    t->name = "cuda";
    t->step_end = ddp_cuda_step_end;
    t->set_threads = NULL;
    cuda_table_runtime(t);
    cuda_table_elementwise(t);
    cuda_table_blas(t);
    cuda_table_conv(t);
    cuda_table_normpool(t);
    cuda_table_layout(t);
    cuda_table_loss_optim(t);
    cuda_table_graph(t);
}

/* The copy stream and the events of upload_batch. */
static cudaError_t input_setup(void)
{
    cudaError_t e = cudaStreamCreateWithFlags(&g_cuda.copy, cudaStreamNonBlocking);
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&g_cuda.mark[i], cudaEventDisableTiming);
    for (int i = 0; i < UPLOAD_RING && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&g_cuda.copied[i], cudaEventDisableTiming);
    return e == cudaSuccess ? graph_setup() : e; /* and the CUDA graphs' step values */
}

/* [train] precision for the ops (the cuBLAS math mode is the caller's). */
static void use_precision(int precision)
{
    g_cuda.precision = precision;
    g_cuda.bf16.on = precision == DDP_PRECISION_BF16;
}

/* One line for a failed setup call; clears CUDA's last error. Returns NULL. */
static const struct ddp_backend *setup_fail(char *err, size_t errlen, int device, const char *what,
                                            cudaError_t e)
{
    cudaGetLastError();
    ddp_err(err, errlen, "GPU %d: %s failed: %s (%s)", device, what, cudaGetErrorString(e),
            cudaGetErrorName(e));
    return NULL;
}

/* One line for cudaGetDeviceCount's failure e: no driver, a driver older than the runtime,
 * or no usable GPU; clears CUDA's last error. Returns NULL. */
static const struct ddp_backend *no_gpu(char *err, size_t errlen, cudaError_t e)
{
    int drv = 0, rt = 0;
    cudaGetLastError();
    if (cudaDriverGetVersion(&drv) != cudaSuccess)
        drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess)
        rt = 0;
    cudaGetLastError();
    if (drv == 0)
        ddp_err(err, errlen,
                "no CUDA driver on this machine (is this a GPU node? "
                "nvidia-smi should list the GPUs)");
    else if (e == cudaErrorInsufficientDriver)
        ddp_err(err, errlen,
                "the NVIDIA driver supports CUDA %d.%d, older than this "
                "build's runtime %d.%d: update the driver",
                drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    else
        ddp_err(err, errlen, "no usable GPU: %s (nvidia-smi should list the GPUs)",
                cudaGetErrorString(e));
    return NULL;
}

extern "C" const struct ddp_backend *ddp_backend_cuda(int device, int precision, char *err,
                                                      size_t errlen)
{
    if (g_cuda.device >= 0) {
        if (device != g_cuda.device) {
            ddp_err(err, errlen,
                    "the CUDA backend is already bound to GPU %d; one process drives one GPU",
                    g_cuda.device);
            return NULL;
        }
        if (precision != g_cuda.precision) {
            CUBLAS_CHECK(g_cuda.blas_fn.set_math_mode(g_cuda.blas, math_mode(precision)));
            use_precision(precision);
        }
        return &g_cuda.table;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return no_gpu(err, errlen, e);
    if (count == 0) {
        ddp_err(err, errlen, "no CUDA device visible (CUDA_VISIBLE_DEVICES may hide them)");
        return NULL;
    }
    if (device < 0 || device >= count) {
        ddp_err(err, errlen, "GPU %d does not exist: %d visible (CUDA ordinals 0..%d)", device,
                count, count - 1);
        return NULL;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return setup_fail(err, errlen, device, "cudaGetDeviceProperties", e);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return setup_fail(err, errlen, device, "cudaSetDevice", e);
    if ((e = cudaFree(0)) != cudaSuccess) /* creates the context: busy/prohibited shows here */
        return setup_fail(err, errlen, device, "creating a CUDA context", e);
    /* Is there code for this GPU in the binary (sm_80, sm_90, PTX for newer)? */
    cudaFuncAttributes fa;
    if ((e = kernel_attributes(&fa)) != cudaSuccess) {
        cudaGetLastError();
        ddp_err(err, errlen,
                "GPU %d (%s, sm_%d%d) cannot run this build's kernels (%s): built for sm_80 and "
                "sm_90; rebuild with a matching -gencode in src/backend/meson.build",
                device, prop.name, prop.major, prop.minor, cudaGetErrorString(e));
        return NULL;
    }
    cudaStream_t stream;
    if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess)
        return setup_fail(err, errlen, device, "cudaStreamCreate", e);
    if ((e = input_setup()) != cudaSuccess)
        return setup_fail(err, errlen, device, "creating the copy stream and its events", e);
    if (blas_open(err, errlen) != 0) {
        cudaStreamDestroy(stream);
        return NULL;
    }
    cublasHandle_t blas;
    cublasStatus_t s = g_cuda.blas_fn.create(&blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(stream);
        ddp_err(err, errlen, "GPU %d: cublasCreate failed: %s", device,
                g_cuda.blas_fn.status_string(s));
        return NULL;
    }
    if ((s = g_cuda.blas_fn.set_stream(blas, stream)) != CUBLAS_STATUS_SUCCESS ||
        (s = g_cuda.blas_fn.set_math_mode(blas, math_mode(precision))) != CUBLAS_STATUS_SUCCESS) {
        g_cuda.blas_fn.destroy(blas);
        cudaStreamDestroy(stream);
        ddp_err(err, errlen, "GPU %d: cuBLAS setup failed: %s", device,
                g_cuda.blas_fn.status_string(s));
        return NULL;
    }
    g_cuda.stream = stream;
#ifdef DDP_CUDA_TWIN
    twin_name_stream(g_cuda.stream, "compute");
    twin_name_stream(g_cuda.copy, "copy");
#endif
    g_cuda.blas = blas;
    use_precision(precision);
    g_cuda.device = device;
    snprintf(g_cuda.devname, sizeof g_cuda.devname, "%s (sm_%d%d, %zu GiB)", prop.name, prop.major,
             prop.minor, (size_t)(prop.totalGlobalMem >> 30));
    fill_table();
    return &g_cuda.table;
}

extern "C" int ddp_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return count;
}

extern "C" int ddp_cuda_driver_version(void)
{
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return v;
}

extern "C" const char *ddp_cuda_version_string(void)
{
    static char buf[200];
    int rt = 0, drv = 0, maj = 0, min = 0, pat = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess)
        rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess)
        drv = 0;
    cudaGetLastError();
    char why[8];
    const int have_blas = blas_open(why, sizeof why) == 0;
    if (!have_blas || g_cuda.blas_fn.get_property(MAJOR_VERSION, &maj) != CUBLAS_STATUS_SUCCESS ||
        g_cuda.blas_fn.get_property(MINOR_VERSION, &min) != CUBLAS_STATUS_SUCCESS ||
        g_cuda.blas_fn.get_property(PATCH_LEVEL, &pat) != CUBLAS_STATUS_SUCCESS) {
        maj = CUBLAS_VER_MAJOR;
        min = CUBLAS_VER_MINOR;
        pat = CUBLAS_VER_PATCH;
    }
    char driver[32];
    if (drv > 0)
        snprintf(driver, sizeof driver, "%d.%d", drv / 1000, (drv % 1000) / 10);
    else
        snprintf(driver, sizeof driver, "none");
#ifdef DDP_CUDA_TWIN
    const char *what = "GPU twin: "; /* tests/twin, not a GPU */
#else
    const char *what = "";
#endif
    char dnn[32];
    dnn_version(dnn, sizeof dnn);
    snprintf(buf, sizeof buf, "%sCUDA runtime %d.%d, cuBLAS %d.%d.%d%s, cuDNN %s, driver %s", what,
             rt / 1000, (rt % 1000) / 10, maj, min, pat, have_blas ? "" : " (library not found)",
             dnn, driver);
    return buf;
}

extern "C" const char *ddp_cuda_device_string(void)
{
    return g_cuda.devname;
}

extern "C" void *ddp_cuda_stream(void)
{
    return g_cuda.device >= 0 ? (void *)g_cuda.stream : NULL;
}

extern "C" int ddp_cuda_pci_bus_id(int ordinal, char *out, size_t len)
{
    if (len == 0 || cudaDeviceGetPCIBusId(out, (int)len, ordinal) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the next call */
        return -1;
    }
    return 0;
}

extern "C" int ddp_cuda_device(void)
{
    return g_cuda.device;
}

extern "C" void ddp_cuda_step_end(int rank, long step, int log_step)
{
#ifdef DDP_CUDA_TWIN
    twin_step_end(rank, step, log_step);
#else
    (void)rank, (void)step, (void)log_step;
#endif
}
