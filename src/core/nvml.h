/*
 * nvml.h - GPU health as the NVIDIA driver's management library (NVML, libnvidia-ml.so.1)
 * reports it, read the way DCGM reads it: ECC error counters, row remapping, retired pages,
 * the reasons the clocks are held down, temperature against the slowdown threshold, power, and
 * XID events. The library is opened at run time through core/dl (no build-time dependency; the
 * few types and functions used are declared in nvml.c after NVIDIA's public nvml.h), so a
 * machine without the driver, or with an older one, runs on: whatever NVML lacks (the library,
 * a function, a counter the GPU does not keep) is "not reported" (-1), never an error.
 *
 * A GPU is found by its PCI address, the one thing CUDA and NVML share (CUDA's ordinals follow
 * CUDA_VISIBLE_DEVICES, NVML's indices do not). NVML is initialised at the first open and shut
 * down at the last close. Not thread-safe among opens and closes; reads of one open GPU may run
 * on another thread than its open (NVML is thread-safe).
 *
 * It does not judge: validate/gpu_health.c turns the numbers into verdicts.
 */
#ifndef DDP_CORE_NVML_H
#define DDP_CORE_NVML_H

#include <stddef.h>
#include <stdint.h>

/* Why the clocks are held down (NVML's nvmlClocksEventReason* bits, the same values). */
#define DDP_NVML_CLOCKS_IDLE 0x1ull
#define DDP_NVML_CLOCKS_APP_SETTING 0x2ull
#define DDP_NVML_CLOCKS_SW_POWER_CAP 0x4ull
#define DDP_NVML_CLOCKS_HW_SLOWDOWN 0x8ull
#define DDP_NVML_CLOCKS_SYNC_BOOST 0x10ull
#define DDP_NVML_CLOCKS_SW_THERMAL 0x20ull
#define DDP_NVML_CLOCKS_HW_THERMAL 0x40ull
#define DDP_NVML_CLOCKS_HW_POWER_BRAKE 0x80ull

/* XID events kept per GPU between two reads at most; more are counted, not kept. */
#define DDP_NVML_MAX_XIDS 8

/* One reading of a GPU. Every number is -1 where NVML does not report it. Plain data, the same
 * on every rank (validate gathers it). */
struct ddp_nvml_state {
    int32_t index;       /* NVML's index (nvidia-smi's numbering) */
    char bus_id[32];     /* NVML's PCI address, "00000000:18:00.0" */
    int64_t ecc_unc_vol; /* ECC errors since the driver loaded: uncorrected, corrected */
    int64_t ecc_cor_vol;
    int64_t ecc_unc_agg; /* over the GPU's life */
    int64_t ecc_cor_agg;
    int32_t remap_cor, remap_unc;            /* rows remapped for corrected / uncorrected errors */
    int32_t remap_pending, remap_failed;     /* 0 or 1: a remap waits for a reset; one failed */
    int32_t retired_pages;                   /* pages retired (older GPUs), all causes */
    int32_t retire_pending;                  /* 0 or 1: a retirement waits for a reset */
    int64_t clock_reasons;                   /* DDP_NVML_CLOCKS_* now */
    int32_t sm_mhz, temp_c, temp_slowdown_c; /* SM clock; GPU and slowdown temperature (C) */
    int32_t power_mw, power_limit_mw;        /* draw now; the limit enforced */
};

typedef struct ddp_nvml_gpu ddp_nvml_gpu;

/* Open NVML (at the first call) and find the GPU at PCI address bus_id (CUDA's
 * "0000:18:00.0" or NVML's "00000000:18:00.0"); register for its XID events. NULL with one
 * line in err saying why nothing is reported ("libnvidia-ml.so.1: not found", "no GPU at
 * 0000:18:00.0 in NVML"). The caller owns the handle (ddp_nvml_gpu_close). */
ddp_nvml_gpu *ddp_nvml_gpu_open(const char *bus_id, char *err, size_t errlen);
/* Accepts NULL; the last close shuts NVML down. */
void ddp_nvml_gpu_close(ddp_nvml_gpu *g);

/* Everything at once (a dozen NVML calls). */
void ddp_nvml_read(ddp_nvml_gpu *g, struct ddp_nvml_state *s);
/* The cheap part, for sampling under load: clock reasons and temperature (-1: not reported). */
void ddp_nvml_sample(ddp_nvml_gpu *g, int64_t *clock_reasons, int32_t *temp_c);
/* XID events since the last call (polled, never waits): up to max numbers into xid; returns
 * how many events there were (more than max: the rest counted only), -1 when NVML does not
 * report them. */
int ddp_nvml_xids(ddp_nvml_gpu *g, uint32_t *xid, int max);

#endif
