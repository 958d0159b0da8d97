/*
 * cuda.h - the CUDA backend: the ops table of backend.h on one GPU, with cuBLAS for the GEMMs
 * and kernels for everything else (cuda/, one file per concern). Plain C declarations: the trainer includes this
 * header, never a CUDA one. Only built where ddp_build.h says HAVE_CUDA.
 *
 * Semantics are the CPU backend's (backend.h, cpu_kernels.inc), in fp32, to within rounding:
 * dropout masks are bit-identical (the same hash, ddp_cpu_uniform, on the device); batchnorm
 * and cross-entropy sums are accumulated in double like the CPU's. GEMMs run in plain fp32
 * unless [train] precision asks for tf32 (TF32 tensor cores) or bf16 (the GEMM operands of
 * linear and conv2d rounded to bf16, fp32 accumulation and results, as PyTorch autocast; all
 * other state and ops stay fp32).
 *
 * Memory: every pointer given to an op is device memory (cudaMalloc, from the table's alloc),
 * except the batchnorm `sums` arrays (host doubles, as backend.h says) and the results of xent
 * (host). upload/download copy between host and device; either also accepts two device
 * pointers (model.c copies activations with upload). Ops are queued on ONE compute stream and
 * return before the GPU is done, except download, xent, bn_stats and bn_bwd_sums, which
 * return host results and so wait for the stream; sync waits for everything queued.
 *
 * Errors: any failed CUDA or cuBLAS call is fatal: one line with the call, file:line and the
 * CUDA error string, through ddp_die (which aborts the communicator so no peer hangs).
 *
 * Threads: the CUDA device is current only in the thread that called ddp_backend_cuda; every op
 * must be called from that thread (the trainer's main thread; the data loader's threads only
 * fill host buffers).
 *
 * What it does not do: choose the device (select.c does, with dist/binding.h; pass its device here), talk
 * to other GPUs (comm_nccl.c), or free its state before exit (one backend per process).
 */
#ifndef DDP_BACKEND_CUDA_H
#define DDP_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend on CUDA device ordinal `device` (after CUDA_VISIBLE_DEVICES), its GEMMs in
 * `precision` (enum ddp_precision of backend/backend.h: fp32, tf32, bf16). Makes `device` current
 * for the calling thread, creates the compute stream and the cuBLAS handle. One backend per
 * process: a second call with the same device returns the same table (now in `precision`);
 * with another device it fails. Returns NULL with one line in err when there is no driver, no
 * such device, or the device cannot be used (caller exits DDP_EXIT_LAUNCH). */
const struct ddp_backend *ddp_backend_cuda(int device, int precision, char *err, size_t errlen);

/* The convolution path of the backend: cuDNN when use_cudnn and it loads and starts (opened
 * with dlopen here, the first time), else im2col + cuBLAS. deterministic: 1 ([train]
 * deterministic = true) the fastest deterministic algorithms, 0 the fastest of all, each
 * timed at model build; DDP_CUDA_CONV_RANKED cuDNN's first deterministic algorithms in its
 * own ranking, untimed (the same bits in every process: validate's golden run). Writes one
 * line for the log: which path runs and why ("cuDNN 9.19.0 (fastest measured deterministic
 * algorithms ([train] deterministic = true), fp32 FMA math)", "im2col + cuBLAS ([train] conv
 * = im2col)", "cuDNN not found (...): convolutions use im2col + cuBLAS"; "" before
 * ddp_backend_cuda succeeded). Never an error. Call before the model is built (its conv_plan
 * chooses the algorithms and sizes the workspace for the path); without a call, cuDNN runs
 * where it loads, as DDP_CUDA_CONV_RANKED. Returns 1 when cuDNN runs. */
#define DDP_CUDA_CONV_RANKED 2
int ddp_cuda_conv_path(int use_cudnn, int deterministic, char *line, size_t len);

/* [train] cudnn_api, for the next ddp_cuda_conv_path: graph 1 (auto, the default) times the
 * engine configs of cuDNN's graph API beside the legacy API's algorithms wherever a choice is
 * timed and keeps the fastest (conv_graph.cu); 0 (legacy) the legacy API only. Where the graph
 * API is missing or does not work, the path's line says so and the legacy API runs. */
void ddp_cuda_conv_api(int graph);

/* The cuDNN algorithms chosen at model build, one line per convolution shape and batch size:
 * "C3 32x32 -> 64 k3 s1 p1, batch 256: forward IMPLICIT_PRECOMP_GEMM fma 0.041 ms, backward
 * data ALGO_1 fma 0.052 ms, backward filter ALGO_1 fma 0.088 ms; workspace 1.5 MiB" (a
 * direction kept from cuDNN's graph API: "forward engine 1 knobs 17=1 graph API 0.203 ms
 * (legacy IMPLICIT_GEMM 0.400 ms)", the legacy algorithm it beat). Writes "" when cuDNN does
 * not run. Returns the number of lines. */
int ddp_cuda_conv_report(char *out, size_t len);

/* The algorithms of every prepared cuDNN plan as text for ddp_cuda_conv_adopt (rank 0's for
 * the other ranks, and the checkpoint's `conv_algorithms` attribute): a first line naming the
 * format, cuDNN's version and the device, then one line per plan and batch size of sixteen
 * numbers: C H W O k stride pad batch tf32 det, then algorithm and math of forward, backward
 * data and backward filter (cuDNN's enum values; -1 -1 for a direction not chosen yet or
 * chosen from the graph API), then as they apply the layout, the storage, and graph API
 * choices (conv_dnn_text.cu's header gives the format).
 * Returns the length written (cut at a line end to fit len), 0 when cuDNN does not run. */
size_t ddp_cuda_conv_choices(char *out, size_t len);

/* Take the algorithms of text (ddp_cuda_conv_choices of rank 0 or of the checkpoint resumed)
 * for this model's plans: each line of a shape this model has, at this run's math and
 * determinism, whose algorithm cuDNN lists here as allowed within the plan's workspace,
 * replaces this process's choice for that batch size (a batch size not prepared yet is
 * prepared with it). same_device: only text written with this device's name and this cuDNN
 * (a checkpoint: the same algorithm elsewhere runs other kernels, so computes other bits
 * anyway). Returns the number of directions taken, or -1 with the reason in why when text is
 * not such text or, under same_device, was written elsewhere (nothing taken: this process
 * keeps its own choices). Never an error: bad lines are skipped. */
int ddp_cuda_conv_adopt(const char *text, int same_device, char *why, size_t whylen);

/* Devices the driver reports (cudaGetDeviceCount, after CUDA_VISIBLE_DEVICES), or -1 when
 * there is no usable driver: the driver_count of ddp_binding_compute. Needs no device. */
int ddp_cuda_device_count(void);

/* The CUDA driver's version (cudaDriverGetVersion, e.g. 13000), 0 where no driver is
 * installed. Reported whatever CUDA_VISIBLE_DEVICES hides; needs no device. */
int ddp_cuda_driver_version(void);

/* "CUDA runtime 13.0, cuBLAS 13.1.0, cuDNN 9.19.0, driver 13.0" ("cuDNN not found", "driver
 * none" without them). Static
 * storage; needs no device. For `ddptrain --version`. */
const char *ddp_cuda_version_string(void);

/* Name and memory of the backend's device, e.g. "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)";
 * "" before ddp_backend_cuda succeeded. Static storage. For the trainer's banner. */
const char *ddp_cuda_device_string(void);

/* The compute stream (a cudaStream_t) every op is queued on; NULL before ddp_backend_cuda
 * succeeded. The NCCL communicator orders its collectives after the work queued here. */
void *ddp_cuda_stream(void);

/* The PCI address of CUDA device `ordinal` ("0000:18:00.0", cudaDeviceGetPCIBusId) into out:
 * how NVML (core/nvml.h) finds the same GPU. Needs no bound device. 0, or -1 (no such device,
 * no driver). */
int ddp_cuda_pci_bus_id(int ordinal, char *out, size_t len);

/* The device ddp_backend_cuda bound, or -1 before. */
int ddp_cuda_device(void);

/* End of training step `step` (log_step: a logging step) of rank `rank`. Nothing on a GPU;
 * the GPU twin writes its per-step counters there (DDP_EMU_STATS, docs/gpu.md). */
void ddp_cuda_step_end(int rank, long step, int log_step);

/* ---- Validation (vcheck.cu): what `ddptrain validate` measures on the backend's device ------
 * Each needs ddp_backend_cuda first (0 or -1 before), allocates its buffers and frees them
 * after, and runs on the compute stream: one untimed warm-up call, then `reps` calls (at most
 * 256) each between two CUDA events; the median call counts. Any CUDA or cuBLAS error is
 * fatal, as for the ops. What is slow or wrong is judged by src/validate/gpu.c. */

/* The device: PCI bus id as nvidia-smi prints it ("00000000:3B:00.0"), free and total memory
 * (cudaMemGetInfo), and twin = 1 on the GPU twin (tests/twin), where sizes must stay tiny. */
struct ddp_cuda_vinfo {
    char pci_bus_id[32];
    size_t free_bytes, total_bytes;
    int twin;
};
int ddp_cuda_vcheck_info(struct ddp_cuda_vinfo *vi);

/* Device-memory bandwidth in GB/s (1e9 bytes) over float arrays of `bytes` bytes each:
 * STREAM's copy a = b (triad 0; counted 2 x bytes) or triad a = b + s c (counted 3 x bytes),
 * read and write both counted, no write-allocate (as STREAM). */
double ddp_cuda_vcheck_stream(int triad, size_t bytes, int reps);

/* GEMM rates of square N x N x N products through cublasGemmEx, in TFLOP/s = 2N^3 / t, fp32
 * results: SGEMM (fp32 operands, CUBLAS_COMPUTE_32F), TF32 tensor cores (fp32 operands,
 * CUBLAS_COMPUTE_32F_FAST_TF32), BF16 tensor cores (bf16 operands, CUBLAS_COMPUTE_32F). */
enum ddp_cuda_vgemm {
    DDP_CUDA_VGEMM_SGEMM,
    DDP_CUDA_VGEMM_TF32,
    DDP_CUDA_VGEMM_BF16,
    DDP_CUDA_VGEMM_KINDS
};
double ddp_cuda_vcheck_gemm(int kind, int n, int reps);

/* Page-locked host <-> device copy bandwidth in GB/s: one copy of `bytes` (cudaMallocHost
 * buffer) host to device (d2h 0) or device to host, repeated. */
double ddp_cuda_vcheck_pcie(int d2h, size_t bytes, int reps);

/* Device-memory pattern test over `bytes` of device memory as 32-bit words: each word written
 * with an address-dependent pattern, read back and compared on the device, then again with the
 * complement. Returns the wrong words of both passes; *words = the words checked (2 per word).
 * corrupt: flip a bit of 3 words after the first write (fault injection). */
int64_t ddp_cuda_vcheck_pattern(size_t bytes, int corrupt, int64_t *words);

/* ---- Internal activation helpers, for tests/gpu/test_cuda_act16_elem.c ----------------------
 * The kernels that take activations (in the storage in force, backend.h set_act_type) but are
 * no entry of the table: the other parts reach them inside linear, conv2d and batchnorm. Device
 * pointers; b, db fp32; part doubles. fill_bias: out (n) = b[(i / inner) % O]; bias_relu: out =
 * relu(out + b) in place (b NULL: relu); colsum: part = the column sums of a (rows, C) (np 2:
 * and of a^2, b NULL, or a*b; mask: a where mask > 0), C * splits * np doubles (room for
 * C * 256), returns splits; colsum_add: db += the column sums of x (rows, C); relu_maxpool:
 * out, argmax = maxpool(relu(inp + b[c])) (b NULL: relu), the layout in force. */
void ddp_cuda_test_fill_bias(float *out, const float *b, size_t n, int O, int inner);
void ddp_cuda_test_bias_relu(float *out, const float *b, size_t n, int O, int inner);
size_t ddp_cuda_test_colsum(double *part, const float *a, const float *b, const float *mask,
                            size_t rows, int C, int np);
void ddp_cuda_test_colsum_add(float *db, const float *x, size_t rows, int C);
void ddp_cuda_test_relu_maxpool(float *out, uint8_t *argmax, const float *inp, const float *b,
                                int B, int C, int H, int W, int k);

#ifdef __cplusplus
}
#endif

#endif
