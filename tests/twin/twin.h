/*
 * twin.h - internals shared by the GPU twin's runtime (runtime.cc), kernel executor
 * (kernels.cc), cuBLAS (cublas.cc) and NCCL (nccl.cc). Not part of any CUDA API.
 */
#ifndef DDP_TWIN_H
#define DDP_TWIN_H

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <functional>

#include "cuda_runtime.h"

namespace twin
{

/* Counters of DDP_EMU_STATS, reset at every twin_step_end. Per-stream counts (host
 * synchronisations with each stream, host-to-device copies run on each) are kept by
 * runtime.cc under its lock. */
struct Stats {
    std::atomic<long long> syncs{0}, allocs{0}, frees{0}, launches{0}, h2d_bytes{0}, d2h_bytes{0},
        pageable_copies{0}, pinned_copies{0}, collectives{0}, graph_launches{0}, graph_ops{0};
};
extern Stats g_stats;

/* The host address where the bytes of device address p live (for kernels, copies, cuBLAS,
 * NCCL: code running "on the device"), or NULL when p is not inside a live device allocation
 * of `bytes` bytes from p; a NULL p gives NULL. */
void *dev_to_host(const void *p, size_t bytes);
/* 1 if p is inside the twin's device address range (live or freed). */
int in_device_range(const void *p);

/* Queue fn on stream s (NULL: the legacy default stream of the current device). what names
 * the operation for reports. Returns the sticky error if one is set, else cudaSuccess. */
cudaError_t enqueue(cudaStream_t s, const char *what, std::function<void()> fn);
/* The same for an operation with per-execution state: make() gives the closure to run. While
 * s captures, the operation is recorded with make (and the device ranges the call looked up
 * with dev_to_host) and make is called at each graph launch instead, e.g. for an NCCL
 * collective's sequence number; otherwise make() is queued at once. */
cudaError_t enqueue_op(cudaStream_t s, const char *what,
                       std::function<std::function<void()>()> make);
/* Run fn inside the operation that a stream's worker executes, its CPU time left out of the
 * device clock and ms milliseconds added to the clock instead: an operation with a fixed
 * "measured" cost (the cuDNN graph engines of cudnn_graph.cc), so that cudaEventElapsedTime
 * around it is that cost. Off a worker fn just runs. */
void run_at_cost(double ms, const std::function<void()> &fn);
/* Report a fault found while executing on the device: one line on stderr, and the process's
 * sticky error becomes e (every later runtime call returns it). */
void device_fault(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The sticky error (cudaSuccess when none). */
cudaError_t sticky(void);
/* Set the non-sticky last error (cudaGetLastError). */
void set_last(cudaError_t e);
/* 1 when DDP_EMU_FAIL=kernel:N says this (the Nth) launch fails; counts launches. */
int inject_kernel_fault(void);
/* Current device ordinal of the calling thread and its physical twin GPU id. */
int current_device(void);
/* 1 when only (an environment variable's value: a rank) is unset or empty, or names this
 * process's rank (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK). */
int on_rank(const char *only);
int physical_id(int ordinal);
/* Host identity for NCCL's duplicate-GPU check. */
const char *host_id(void);

} // namespace twin

#endif
