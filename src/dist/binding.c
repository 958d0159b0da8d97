/*
 * binding.c - local rank -> GPU, and the doctor for layouts that cannot work (binding.h).
 * Only string parsing and arithmetic: the device count comes in from the caller.
 */
#include "dist/binding.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* Raw value of name (NULL when unset; "" stays ""): an empty CUDA_VISIBLE_DEVICES means
 * "no device", unlike the launcher variables that world.c reads. */
static const char *raw(ddp_env_fn env, void *ctx, const char *name)
{
    return env ? env(ctx, name) : getenv(name);
}

/* Entries of a comma-separated device list, each blank-trimmed; an empty list has none. */
static int count_entries(const char *s)
{
    int n = 0, nonblank = 0;
    for (const char *p = s;; p++) {
        if (*p == ',' || *p == '\0') {
            n += nonblank || *p == ',';
            nonblank = 0;
            if (*p == '\0')
                break;
        } else if (*p != ' ' && *p != '\t') {
            nonblank = 1;
        }
    }
    return n;
}

/* Strict list of non-negative ordinals ("0,1,3") into v (at most cap). Returns count, -1. */
static int parse_ordinals(const char *s, int *v, int cap)
{
    int n = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ')
            p++;
        const char *q = p;
        long x = 0;
        while (*q >= '0' && *q <= '9' && q - p < 6)
            x = x * 10 + (*q++ - '0');
        if (q == p || n == cap || x >= DDP_BINDING_MAX_DEVICES)
            return -1;
        v[n++] = (int)x;
        while (*q == ' ')
            q++;
        if (*q == '\0')
            return n;
        if (*q != ',')
            return -1;
        p = q + 1;
    }
}

/* s into dst, cut with "..." when longer; control characters shown as '?'. */
static void copy_list(char *dst, size_t dstlen, const char *s)
{
    size_t n = 0;
    for (; s[n] && n + 1 < dstlen; n++)
        dst[n] = (unsigned char)s[n] >= 0x20 && (unsigned char)s[n] < 0x7f ? s[n] : '?';
    dst[n] = '\0';
    if (s[n] && dstlen > 4)
        memcpy(dst + dstlen - 4, "...", 4);
}

int ddp_binding_fake_driver_count(int node_gpus, const char *cvd)
{
    if (node_gpus < 0)
        return 0;
    if (!cvd)
        return node_gpus;
    unsigned char seen[DDP_BINDING_MAX_DEVICES] = {0};
    int n = 0;
    const char *p = cvd;
    while (*p) {
        while (*p == ' ')
            p++;
        const char *q = p;
        long x = 0;
        while (*q >= '0' && *q <= '9' && q - p < 6)
            x = x * 10 + (*q++ - '0');
        while (*q == ' ')
            q++;
        if (q == p || (*q != ',' && *q != '\0') || x >= node_gpus || x >= DDP_BINDING_MAX_DEVICES ||
            seen[x])
            break; /* CUDA stops enumerating at the first invalid entry */
        seen[x] = 1;
        n++;
        p = *q == ',' ? q + 1 : q;
    }
    return n;
}

/* More local ranks than visible GPUs: one line naming who would share and how to fix it. */
static int oversubscribed(const struct ddp_binding *b, int local_size, int n, const char *var,
                          int slurm, char *err, size_t errlen)
{
    if (n == 1)
        return ddp_err(err, errlen,
                       "local ranks 0-%d on this node all see the same single "
                       "GPU (%s=%s) and would share device 0: %s",
                       local_size - 1, var, b->visible_list,
                       slurm ? "give each task its own with srun --gpus-per-task=1, or ask "
                               "for one per task with srun --gres=gpu:N (N = tasks per node)"
                             : "make one GPU visible per local rank, or start one rank "
                               "(ddptrain launch --nproc-per-node 1)");
    char extra[64];
    if (local_size - 1 == n)
        snprintf(extra, sizeof extra, "local rank %d would share a device", n);
    else
        snprintf(extra, sizeof extra, "local ranks %d-%d would share devices", n, local_size - 1);
    return ddp_err(err, errlen,
                   "more local ranks (%d) than visible GPUs (%d, %s=%s) on "
                   "this node: %s; %s",
                   local_size, n, var, b->visible_list, extra,
                   slurm ? "use srun --ntasks-per-node=N with N <= the GPUs per node "
                           "(--gres=gpu:N), or --gpus-per-task=1"
                         : "start at most that many ranks per node (ddptrain launch "
                           "--nproc-per-node N) or make more GPUs visible");
}

int ddp_binding_compute(int local_rank, int local_size, int driver_count, int require_gpu,
                        ddp_env_fn env, void *ctx, struct ddp_binding *b, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    b->device = -1;
    snprintf(b->visible_list, sizeof b->visible_list, "none");
    if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
        return ddp_err(err, errlen, "internal error: local rank %d of %d", local_rank, local_size);

    const char *cvd = raw(env, ctx, "CUDA_VISIBLE_DEVICES");
    const char *sg = raw(env, ctx, "SLURM_STEP_GPUS");
    const char *gon_s = raw(env, ctx, "SLURM_GPUS_ON_NODE");
    const char *gpt_s = raw(env, ctx, "SLURM_GPUS_PER_TASK");
    const char *step = raw(env, ctx, "SLURM_STEP_ID");
    const int slurm = step && *step;
    const char *var = "CUDA_VISIBLE_DEVICES";
    int step_gpus[DDP_BINDING_MAX_DEVICES], nstep = -1;
    int n; /* devices this rank can use */

    if (cvd) {
        int listed = count_entries(cvd);
        if (*cvd)
            copy_list(b->visible_list, sizeof b->visible_list, cvd);
        n = driver_count >= 0 ? driver_count : listed;
        if (driver_count >= 0 && driver_count < listed)
            snprintf(b->note, sizeof b->note,
                     "CUDA_VISIBLE_DEVICES lists %d devices but the "
                     "driver reports %d: entries after the first bad one are ignored by CUDA",
                     listed, driver_count);
    } else if (sg && *sg) {
        var = "SLURM_STEP_GPUS";
        copy_list(b->visible_list, sizeof b->visible_list, sg);
        nstep = parse_ordinals(sg, step_gpus, DDP_BINDING_MAX_DEVICES);
        if (nstep < 0)
            return ddp_err(err, errlen,
                           "SLURM_STEP_GPUS=\"%s\" is not a list of GPU indices "
                           "and CUDA_VISIBLE_DEVICES is not set; set CUDA_VISIBLE_DEVICES",
                           b->visible_list);
        n = driver_count >= 0 && driver_count < nstep ? driver_count : nstep;
    } else {
        n = driver_count > 0 ? driver_count : 0;
        if (n > 0) {
            int k = 0;
            for (int i = 0; i < n && k + 8 < (int)sizeof b->visible_list; i++)
                k += snprintf(b->visible_list + k, sizeof b->visible_list - (size_t)k, "%s%d",
                              i ? "," : "", i);
        }
    }
    b->visible = n;

    if (n == 0) {
        if (!require_gpu)
            return 0;
        if (slurm)
            return ddp_err(err, errlen,
                           "no GPU visible to local rank %d (%s=%s): ask Slurm "
                           "for GPUs, e.g. srun --gres=gpu:%d or --gpus-per-task=1",
                           local_rank, var, cvd ? cvd : "unset", local_size);
        return ddp_err(err, errlen,
                       "no GPU visible to local rank %d (CUDA_VISIBLE_DEVICES=%s):"
                       " make GPUs visible, or use backend = mpi for CPU ranks",
                       local_rank, cvd ? cvd : "unset");
    }

    /* Own devices per task: the step holds more GPUs on this node than this task sees. */
    int64_t gon = 0, gpt = 0;
    if (gon_s && ddp_parse_i64(gon_s, &gon) < 0)
        gon = 0;
    if (gpt_s && ddp_parse_i64(gpt_s, &gpt) < 0)
        gpt = 0;
    b->per_task = (gon > n && local_size > 1) || (gpt >= 1 && n <= gpt);

    int idx;
    if (b->per_task) {
        idx = 0;
    } else if (local_size > n) {
        return oversubscribed(b, local_size, n, var, slurm, err, errlen);
    } else {
        idx = local_rank;
    }
    /* Without CUDA_VISIBLE_DEVICES the driver numbers physical devices: when it sees more
     * than the step's, the step's own ids are the ordinals. */
    b->device =
        nstep > 0 && driver_count > nstep && step_gpus[idx] < driver_count ? step_gpus[idx] : idx;
    return 0;
}
