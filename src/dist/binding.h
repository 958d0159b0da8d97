/*
 * binding.h - which GPU a rank uses: local rank -> CUDA device, and the doctor that says why
 * a layout cannot work and which srun flag fixes it. Pure logic on inputs (local rank and
 * size, the environment through a ddp_env_fn, the device count the driver reports), so that
 * it is tested as a table on machines without GPUs.
 *
 * Inputs read (the environment through env, getenv when NULL):
 *   CUDA_VISIBLE_DEVICES  the devices this process may use, as CUDA sees them; set but empty
 *                         means none. Entries are ordinals or UUIDs ("GPU-...", "MIG-...").
 *   SLURM_STEP_GPUS       the step's GPUs on this node (physical ids); used when
 *                         CUDA_VISIBLE_DEVICES is unset (a site that does not export it):
 *                         local rank L then takes the L-th of them.
 *   SLURM_GPUS_ON_NODE    GPUs of the step on this node. More than this task sees means
 *                         Slurm gave each task its own devices (--gpus-per-task): every task
 *                         then binds the first of its own, device 0.
 *   SLURM_GPUS_PER_TASK   likewise, where Slurm exports it.
 *   SLURM_STEP_ID         only to phrase the fix (srun flags, or ddptrain launch / env vars).
 *   driver_count          devices the driver reports after CUDA_VISIBLE_DEVICES
 *                         (cudaGetDeviceCount), or -1 when there is no GPU backend: then the
 *                         listed devices are counted instead.
 *
 * Rules (docs/launch.md has the table):
 *   nothing visible                      -> CPU (device -1); an error when require_gpu
 *   own devices per task (see above)     -> device 0
 *   every task sees the same n devices   -> local rank L uses device L, if local_size <= n;
 *                                           else an error: with n = 1 "local ranks would
 *                                           share device 0", else "more local ranks than
 *                                           visible devices", each with the flag that fixes it
 * Errors are one line (caller exits DDP_EXIT_LAUNCH).
 *
 * What it does not do: call CUDA, check that other nodes agree, or read anything but the
 * variables above. Allocates nothing.
 */
#ifndef DDP_LAUNCH_BINDING_H
#define DDP_LAUNCH_BINDING_H

#include <stddef.h>

#include "dist/world.h"

/* Most GPUs of one node this module reasons about; far above any node built today, and it
 * bounds the parsing of hostile lists. */
#define DDP_BINDING_MAX_DEVICES 256

struct ddp_binding {
    int device;             /* CUDA ordinal this rank uses (cudaSetDevice), -1 = CPU */
    int visible;            /* devices this rank can use */
    int per_task;           /* 1: Slurm gave this task devices of its own */
    char visible_list[128]; /* the devices as listed ("0,1,2,3"; "none"), cut with "..." */
    char note[256];         /* a non-fatal remark for the user, "" if none */
};

/* Compute the binding of local rank local_rank of local_size. b->visible_list is filled
 * even when the call fails. Returns 0, or -1 with one line in err. */
int ddp_binding_compute(int local_rank, int local_size, int driver_count, int require_gpu,
                        ddp_env_fn env, void *ctx, struct ddp_binding *b, char *err, size_t errlen);

/* The count a CUDA driver would report on a node with node_gpus devices (ordinals
 * 0..node_gpus-1) given cuda_visible_devices (NULL = unset): the entries are taken in order
 * and enumeration stops at the first that is not an unused ordinal below node_gpus, as CUDA
 * does. For tests and DDP_TEST_FAKE_GPUS. */
int ddp_binding_fake_driver_count(int node_gpus, const char *cuda_visible_devices);

#endif
