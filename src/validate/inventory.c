/*
 * inventory.c - what each rank tells the others about its node (CPU, memory, GPUs, the CPUs
 * it may use), the measurement turns of ranks that share CPUs, and the machine-wide lock of
 * a run whose ranks take turns. See validate_impl.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddp_build.h"
#include "core/util.h"
#include "validate/validate_impl.h"
#if HAVE_CUDA
#include "backend/cuda.h"
#endif

/* Copy the value of "key<blank>:" from a /proc file into out; 0 if found. */
static int proc_field(const char *path, const char *key, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512];
    size_t klen = strlen(key);
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0)
            continue;
        char *p = line + klen;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != ':')
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        p[strcspn(p, "\n")] = '\0';
        snprintf(out, len, "%s", p);
        rc = 0;
        break;
    }
    fclose(f);
    return rc;
}

static int64_t meminfo_bytes(const char *key)
{
    char v[64];
    if (proc_field("/proc/meminfo", key, v, sizeof v) != 0)
        return 0;
    return (int64_t)strtoll(v, NULL, 10) * 1024; /* "16325012 kB" */
}

void inventory(struct rank_info *ri, const struct ddp_world *w, int threads)
{
    memset(ri, 0, sizeof *ri);
    ri->rank = w->rank;
    ri->threads = threads;
    snprintf(ri->host, sizeof ri->host, "%s", w->host);
    snprintf(ri->where, sizeof ri->where, "%s", w->host);
    ri->device = -1;
    if (proc_field("/proc/cpuinfo", "model name", ri->cpu_model, sizeof ri->cpu_model) != 0 &&
        proc_field("/proc/cpuinfo", "Model", ri->cpu_model, sizeof ri->cpu_model) != 0)
        snprintf(ri->cpu_model, sizeof ri->cpu_model, "unknown");
    ri->cpus_online = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        ri->cpus_allowed = CPU_COUNT(&set);
        memcpy(ri->cpuset, &set, sizeof set < CPUSET_BYTES ? sizeof set : CPUSET_BYTES);
    } else {
        ri->cpus_allowed = ri->cpus_online;
        memset(ri->cpuset, 0xff, CPUSET_BYTES);
    }
    ri->mem_total = meminfo_bytes("MemTotal");
    ri->mem_avail = meminfo_bytes("MemAvailable");
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(ri->boot_id, sizeof ri->boot_id, f))
        snprintf(ri->boot_id, sizeof ri->boot_id, "host:%.*s", BOOT_ID_LEN - 6, w->host);
    ri->boot_id[strcspn(ri->boot_id, "\n")] = '\0';
    if (f)
        fclose(f);
    snprintf(ri->gpu_driver, sizeof ri->gpu_driver, "none");
#if HAVE_CUDA
    /* what the driver sees, without binding a device: the checks run on the CPU backend */
    int n = ddp_cuda_device_count();
    ri->gpu_count = n > 0 ? n : 0;
    if (n >= 0)
        snprintf(ri->gpu_driver, sizeof ri->gpu_driver, "%s", ddp_cuda_version_string());
#endif
}

/* Threads per rank: [validate] threads, else as training: SLURM_CPUS_PER_TASK, else the CPUs
 * this process may use, shared among the node's ranks unless the launcher bound it already. */
int choose_threads(const struct ddp_validate_config *cfg, const struct ddp_world *w)
{
    if (cfg->threads > 0)
        return cfg->threads;
    return ddp_world_default_threads(w);
}

/* Turns for the rate measurements: ranks of one machine (same boot id) whose threads exceed
 * the CPUs they may use between them would measure each other, so they take turns, one rank
 * of each such machine at a time. Returns the number of turns; *mine is this rank's, *shared
 * whether this rank's machine is one of those. */
int measurement_turns(const struct rank_info *all, int W, int me, int *mine, int *shared)
{
    int turns = 1;
    *mine = 0;
    *shared = 0;
    for (int r = 0; r < W; r++) {
        int first = 1, count = 0, threads = 0, pos_me = -1;
        for (int q = 0; q < r && first; q++)
            if (!strcmp(all[q].boot_id, all[r].boot_id))
                first = 0;
        if (!first)
            continue;
        unsigned char u[CPUSET_BYTES] = {0};
        for (int q = 0; q < W; q++) {
            if (strcmp(all[q].boot_id, all[r].boot_id) != 0)
                continue;
            if (q == me)
                pos_me = count;
            count++;
            threads += all[q].threads;
            for (int b = 0; b < CPUSET_BYTES; b++)
                u[b] |= all[q].cpuset[b];
        }
        int cpus = 0;
        for (int b = 0; b < CPUSET_BYTES; b++)
            cpus += __builtin_popcount(u[b]);
        if (cpus > all[r].cpus_online && all[r].cpus_online > 0)
            cpus = all[r].cpus_online;
        if (threads <= cpus)
            continue;
        if (count > turns)
            turns = count;
        if (pos_me >= 0) {
            *mine = pos_me;
            *shared = 1;
        }
    }
    return turns;
}

/* Machine-wide lock of a run whose ranks take turns (a machine with more threads than CPUs),
 * taken by the first rank there before the first turn and held to the end of the run, so that
 * another such run on the machine (a job step in parallel: the nodes of a test cluster share
 * one machine) neither measures while this one does nor loads the machine with its all-reduce
 * sweep while this one measures. Returns the descriptor (closed at exit, which releases it),
 * or -1: no lock (/tmp not writable, or held by another process for MACHINE_LOCK_WAIT_S, after
 * which this run just measures alongside, as two runs without the lock would). */
#define MACHINE_LOCK_PATH "/tmp/ddptrain-validate.lock"
#define MACHINE_LOCK_WAIT_S 60.0
int machine_lock(void)
{
    int fd = open(MACHINE_LOCK_PATH, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1;
    fchmod(fd, 0666); /* umask: let other users' runs take it too */
    const double t0 = ddp_now();
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            close(fd);
            return -1;
        }
        if (ddp_now() - t0 > MACHINE_LOCK_WAIT_S) {
            ddp_warn("validate: %s held for over %.0f s by another process; measuring anyway",
                     MACHINE_LOCK_PATH, MACHINE_LOCK_WAIT_S);
            close(fd);
            return -1;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return fd;
}

void machine_unlock(int fd)
{
    if (fd >= 0) {
        flock(fd, LOCK_UN);
        close(fd);
    }
}

/* The inventory of every rank, to everybody. */
void vrun_inventory(struct vrun *v)
{
    v->all = ddp_calloc((size_t)v->W, sizeof *v->all);
    inventory(&v->mine, &v->w, v->threads);
    snprintf(v->mine.gpu_name, sizeof v->mine.gpu_name, "none");
    if (v->device >= 0) {
        v->mine.device = v->device;
        snprintf(v->mine.where, sizeof v->mine.where, "%s GPU %d", v->w.host, v->device);
#if HAVE_CUDA
        snprintf(v->mine.gpu_name, sizeof v->mine.gpu_name, "%s", ddp_cuda_device_string());
#endif
    }
    ddp_comm_allgather(v->c, &v->mine, v->all, sizeof v->mine);
}
