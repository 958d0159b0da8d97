/*
 * test_comm.c - collectives of src/comm on seeded, exactly predictable data.
 *
 *   test_comm collectives      under mpirun -n N: every collective, every dtype, sizes 1, 7,
 *                              4096, 1<<20; many outstanding all-reduces waited in any order
 *   test_comm deadline WHAT    under mpirun -n >= 2, timeout 2 s: rank 1 never joins WHAT
 *                              (allreduce | async | barrier | broadcast); the others must exit 5
 *   test_comm die              under mpirun -n >= 2: rank 0 calls ddp_die while the others
 *                              wait in a barrier (timeout 60 s): the abort hook must end the job
 *   test_comm mismatch         under mpirun -n 2: a world whose rank disagrees with MPI's
 *   test_comm refuse           without mpirun: backends that must refuse this world, without
 *                              calling MPI_Init, and the self backend
 *
 * Element i on rank r is r * 1000 + i (plus 2^53 + 1 for I64, which a detour through double
 * would round): sums over 4 ranks stay below 2^24, exact in float. Exit 0 pass, 1 fail.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/comm_impl.h"
#include "ddp_build.h"
#include "dist/world.h"
#include "core/util.h"

#if HAVE_MPI
#include <mpi.h>
#endif

#define I64_BASE (((int64_t)1 << 53) + 1)

static ddp_comm *g_c;
static int g_rank, g_size;

/* REQUIRE: a failed condition stops the whole world at once (ddp_comm_abort), so no rank waits
 * in a collective for a peer that has given up; the other unit tests count with check.h. */
#define REQUIRE(cond, ...)                                                                  \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "FAIL rank %d %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fputc('\n', stderr);                                                            \
            if (g_c)                                                                        \
                ddp_comm_abort(g_c, 1);                                                     \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* The world mpirun describes (launch/world.c is not under test here). */
static struct ddp_world mpirun_world(void)
{
    struct ddp_world w;
    memset(&w, 0, sizeof w);
    w.launcher = DDP_LAUNCHER_OMPI;
    w.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    w.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    w.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    w.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    w.num_nodes = 1;
    w.mpi_launched = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
    gethostname(w.host, sizeof w.host - 1);
    return w;
}

static size_t esize(enum ddp_dtype t)
{
    return t == DDP_F32 ? 4 : 8;
}
static const char *tname(enum ddp_dtype t)
{
    return t == DDP_F32 ? "f32" : t == DDP_F64 ? "f64" : "i64";
}

static void put(void *buf, enum ddp_dtype t, size_t i, int64_t v)
{
    if (t == DDP_F32)
        ((float *)buf)[i] = (float)v;
    else if (t == DDP_F64)
        ((double *)buf)[i] = (double)v;
    else
        ((int64_t *)buf)[i] = v + I64_BASE;
}

/* Value i as stored, with the I64 base removed once per contributing rank. */
static int64_t get(const void *buf, enum ddp_dtype t, size_t i, int nbase)
{
    if (t == DDP_F32)
        return (int64_t)((const float *)buf)[i];
    if (t == DDP_F64)
        return (int64_t)((const double *)buf)[i];
    return ((const int64_t *)buf)[i] - (int64_t)nbase * I64_BASE;
}

static void fill_sum(void *buf, enum ddp_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put(buf, t, i, (int64_t)g_rank * 1000 + (int64_t)i);
}

static void check_sum(const void *buf, enum ddp_dtype t, size_t n, const char *what)
{
    const int64_t ranks = (int64_t)g_size * (g_size - 1) / 2;
    for (size_t i = 0; i < n; i++) {
        const int64_t want = ranks * 1000 + (int64_t)g_size * (int64_t)i;
        const int64_t got = get(buf, t, i, g_size);
        REQUIRE(got == want, "%s %s n=%zu element %zu: got %lld, want %lld", what, tname(t), n, i,
                (long long)got, (long long)want);
    }
}

/* Max pattern: ((i + r) mod size) * 1000 - i, so every rank wins somewhere. */
static void fill_max(void *buf, enum ddp_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put(buf, t, i, (int64_t)((i + (size_t)g_rank) % (size_t)g_size) * 1000 - (int64_t)i);
}

static void check_max(const void *buf, enum ddp_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const int64_t want = (int64_t)(g_size - 1) * 1000 - (int64_t)i;
        const int64_t got = get(buf, t, i, 1);
        REQUIRE(got == want, "allreduce_max %s n=%zu element %zu: got %lld, want %lld", tname(t), n,
                i, (long long)got, (long long)want);
    }
}

static const size_t k_sizes[] = {1, 7, 4096, (size_t)1 << 20};
#define NSIZES (sizeof k_sizes / sizeof k_sizes[0])
static const enum ddp_dtype k_types[] = {DDP_F32, DDP_F64, DDP_I64};

static void test_allreduce(ddp_comm *c)
{
    void *buf = ddp_malloc(((size_t)1 << 20) * 8);
    for (size_t s = 0; s < NSIZES; s++) {
        for (int ti = 0; ti < 3; ti++) {
            const enum ddp_dtype t = k_types[ti];
            const size_t n = k_sizes[s];
            fill_sum(buf, t, n);
            ddp_comm_allreduce(c, buf, n, t);
            check_sum(buf, t, n, "allreduce");

            fill_sum(buf, t, n);
            ddp_comm_wait(c, ddp_comm_allreduce_start(c, buf, n, t));
            check_sum(buf, t, n, "allreduce_start");

            fill_max(buf, t, n);
            ddp_comm_allreduce_max(c, buf, n, t);
            check_max(buf, t, n);
        }
    }
    /* Zero elements: a legal no-op on every rank. */
    ddp_comm_allreduce(c, buf, 0, DDP_F32);
    free(buf);
}

#define NOUT_MAX 40

/* nout all-reduces in flight at once, waited in the given order. */
static void outstanding_round(ddp_comm *c, int nout, const int *order, int progress)
{
    void *bufs[NOUT_MAX];
    size_t ns[NOUT_MAX];
    enum ddp_dtype ts[NOUT_MAX];
    ddp_comm_req *reqs[NOUT_MAX];
    for (int k = 0; k < nout; k++) {
        ts[k] = k_types[k % 3];
        ns[k] = k_sizes[k % NSIZES] == ((size_t)1 << 20) ? 65536 + (size_t)k : k_sizes[k % NSIZES];
        bufs[k] = ddp_malloc(ns[k] * esize(ts[k]));
        fill_sum(bufs[k], ts[k], ns[k]);
    }
    for (int k = 0; k < nout; k++) {
        reqs[k] = ddp_comm_allreduce_start(c, bufs[k], ns[k], ts[k]);
        if (progress)
            ddp_comm_progress(c);
    }
    for (int j = 0; j < nout; j++) {
        const int k = order[j];
        ddp_comm_wait(c, reqs[k]);
        check_sum(bufs[k], ts[k], ns[k], "outstanding allreduce");
        if (progress)
            ddp_comm_progress(c);
    }
    REQUIRE(c->active_head == NULL, "requests left outstanding");
    for (int k = 0; k < nout; k++)
        free(bufs[k]);
}

static void test_outstanding(ddp_comm *c)
{
    int order[NOUT_MAX];
    for (int nout = 1; nout <= NOUT_MAX; nout = nout < 8 ? nout + 3 : nout * 2 + 1) {
        if (nout > NOUT_MAX)
            break;
        for (int k = 0; k < nout; k++)
            order[k] = k; /* in order */
        outstanding_round(c, nout, order, 0);
        for (int k = 0; k < nout; k++)
            order[k] = nout - 1 - k; /* reversed */
        outstanding_round(c, nout, order, 1);
        for (int k = 0; k < nout; k++)
            order[k] = (k * 7 + 3) % nout; /* a permutation when gcd(7, nout) == 1 */
        if (nout % 7 != 0)
            outstanding_round(c, nout, order, 1);
    }
    /* Steady state: the pool holds enough requests now, so it must not grow again. */
    for (int k = 0; k < NOUT_MAX; k++)
        order[k] = NOUT_MAX - 1 - k;
    outstanding_round(c, NOUT_MAX, order, 1);
    const size_t slabs = c->nslabs;
    for (int round = 0; round < 20; round++) {
        outstanding_round(c, NOUT_MAX, order, round & 1);
        ddp_comm_barrier(c);
    }
    REQUIRE(c->nslabs == slabs, "request pool grew from %zu to %zu slabs in steady state", slabs,
            c->nslabs);
}

static void test_broadcast(ddp_comm *c)
{
    unsigned char *buf = ddp_malloc((size_t)1 << 20);
    const int roots[2] = {0, g_size - 1};
    for (int ri = 0; ri < 2; ri++) {
        const int root = roots[ri];
        for (size_t s = 0; s < NSIZES; s++) {
            const size_t n = k_sizes[s];
            for (size_t i = 0; i < n; i++)
                buf[i] = g_rank == root ? (unsigned char)(i * 7 + (size_t)root + 1) : 0xEE;
            ddp_comm_broadcast(c, buf, n, root);
            for (size_t i = 0; i < n; i++)
                REQUIRE(buf[i] == (unsigned char)(i * 7 + (size_t)root + 1),
                        "broadcast root %d n=%zu byte %zu: got %d", root, n, i, buf[i]);
        }
    }
    free(buf);
}

static void test_allgather(ddp_comm *c)
{
    unsigned char *send = ddp_malloc((size_t)1 << 20);
    unsigned char *recv = ddp_malloc(((size_t)1 << 20) * (size_t)g_size);
    for (int inplace = 0; inplace < 2; inplace++) {
        for (size_t s = 0; s < NSIZES; s++) {
            const size_t n = k_sizes[s];
            memset(recv, 0xEE, n * (size_t)g_size);
            unsigned char *mine = inplace ? recv + (size_t)g_rank * n : send;
            for (size_t i = 0; i < n; i++)
                mine[i] = (unsigned char)((size_t)g_rank * 31 + i);
            ddp_comm_allgather(c, mine, recv, n);
            for (int r = 0; r < g_size; r++)
                for (size_t i = 0; i < n; i++)
                    REQUIRE(recv[(size_t)r * n + i] == (unsigned char)((size_t)r * 31 + i),
                            "allgather%s n=%zu from rank %d byte %zu: got %d",
                            inplace ? " in place" : "", n, r, i, recv[(size_t)r * n + i]);
        }
    }
    free(send);
    free(recv);
}

/* Rank 0 arrives 0.3 s late: nobody may leave the barrier before it arrives. */
static void test_barrier(ddp_comm *c)
{
    ddp_comm_barrier(c);
    const double t0 = ddp_now();
    if (g_rank == 0)
        sleep_s(0.3);
    ddp_comm_barrier(c);
    const double waited = ddp_now() - t0;
    REQUIRE(waited >= 0.25, "left the barrier after %.3f s, before rank 0 arrived", waited);
}

static int run_collectives(void)
{
    struct ddp_world w = mpirun_world();
    g_rank = w.rank;
    g_size = w.world_size;
    ddp_log_set_identity(w.host, w.rank, w.world_size);
    char err[DDP_ERR_LEN] = "";
    ddp_comm *c =
        ddp_comm_create(&(struct ddp_comm_opts){DDP_COMM_AUTO, 60, -1, DDP_BOOTSTRAP_AUTO, NULL},
                        &w, err, sizeof err);
    REQUIRE(c, "create: %s", err);
    g_c = c;
    REQUIRE(ddp_comm_rank(c) == w.rank && ddp_comm_size(c) == w.world_size, "rank/size");
    REQUIRE(strcmp(ddp_comm_name(c), w.mpi_launched ? "mpi" : "self") == 0, "backend %s",
            ddp_comm_name(c));
    test_allreduce(c);
    test_outstanding(c);
    test_broadcast(c);
    test_allgather(c);
    test_barrier(c);
    ddp_comm_destroy(c);
    g_c = NULL;
    if (g_rank == 0)
        printf("collectives ok on %d ranks\n", g_size);
    return 0;
}

/* Rank 1 never joins `what`; every other rank must die in it with exit code 5. */
static int run_deadline(const char *what)
{
    struct ddp_world w = mpirun_world();
    g_rank = w.rank;
    g_size = w.world_size;
    ddp_log_set_identity(w.host, w.rank, w.world_size);
    REQUIRE(g_size >= 2, "needs 2 ranks or more");
    char err[DDP_ERR_LEN] = "";
    ddp_comm *c =
        ddp_comm_create(&(struct ddp_comm_opts){DDP_COMM_MPI, 2.0, -1, DDP_BOOTSTRAP_AUTO, NULL},
                        &w, err, sizeof err);
    REQUIRE(c, "create: %s", err);
    g_c = c;
    ddp_comm_barrier(c); /* everybody is up */
    if (g_rank == 1) {
        sleep_s(60); /* MPI_Abort from a peer ends this */
        return 1;
    }
    float buf[64] = {0};
    if (g_rank == 0)
        printf("deadline: rank 0 enters %s\n", what); /* the test's clock starts here */
    const double t0 = ddp_now();
    if (strcmp(what, "allreduce") == 0) {
        ddp_comm_allreduce(c, buf, 64, DDP_F32);
    } else if (strcmp(what, "async") == 0) {
        ddp_comm_req *r = ddp_comm_allreduce_start(c, buf, 64, DDP_F32);
        while (ddp_now() - t0 < 0.5) { /* "backward" running meanwhile */
            ddp_comm_progress(c);
            sleep_s(0.01);
        }
        ddp_comm_wait(c, r);
    } else if (strcmp(what, "barrier") == 0) {
        ddp_comm_barrier(c);
    } else if (strcmp(what, "broadcast") == 0) {
        ddp_comm_broadcast(c, buf, sizeof buf, 1);
    } else {
        fprintf(stderr, "unknown collective %s\n", what);
        return 1;
    }
    fprintf(stderr, "FAIL rank %d: %s returned after %.2f s without rank 1\n", g_rank, what,
            ddp_now() - t0);
    return 1;
}

/* ddp_die on rank 0 must tear down peers that wait under a long deadline. */
static int run_die(void)
{
    struct ddp_world w = mpirun_world();
    g_rank = w.rank;
    g_size = w.world_size;
    ddp_log_set_identity(w.host, w.rank, w.world_size);
    char err[DDP_ERR_LEN] = "";
    ddp_comm *c =
        ddp_comm_create(&(struct ddp_comm_opts){DDP_COMM_MPI, 60.0, -1, DDP_BOOTSTRAP_AUTO, NULL},
                        &w, err, sizeof err);
    REQUIRE(c, "create: %s", err);
    ddp_comm_barrier(c);
    if (g_rank == 0) {
        sleep_s(0.2);
        ddp_die("test failure on purpose");
    }
    ddp_comm_barrier(c);
    fprintf(stderr, "FAIL rank %d: barrier returned without rank 0\n", g_rank);
    return 1;
}

static int run_mismatch(void)
{
#if HAVE_MPI
    struct ddp_world w = mpirun_world();
    g_rank = w.rank;
    g_size = w.world_size;
    REQUIRE(g_size == 2, "needs 2 ranks");
    w.rank = 1 - w.rank; /* the launcher's environment disagrees with MPI */
    char err[DDP_ERR_LEN] = "";
    ddp_comm *c =
        ddp_comm_create(&(struct ddp_comm_opts){DDP_COMM_MPI, 10.0, -1, DDP_BOOTSTRAP_AUTO, NULL},
                        &w, err, sizeof err);
    REQUIRE(!c, "a world that disagrees with MPI was accepted");
    char want[128];
    snprintf(want, sizeof want,
             "MPI says this is rank %d of 2, but the launcher's environment "
             "says rank %d of 2",
             g_rank, 1 - g_rank);
    REQUIRE(strstr(err, want), "message '%s' lacks '%s'", err, want);
    MPI_Finalize();
    if (g_rank == 0)
        printf("mismatch refused: %s\n", err);
    return 0;
#else
    return 77;
#endif
}

/* The job file's word for a backend (NULL or "" as auto, as an unset key; an unknown word
 * as a value outside the enum). */
static enum ddp_comm_backend backend_of(const char *name)
{
    if (!name || !name[0])
        return DDP_COMM_AUTO;
    for (int b = 0; b < DDP_COMM_BACKEND_COUNT; b++)
        if (strcmp(name, ddp_comm_backend_names[b]) == 0)
            return (enum ddp_comm_backend)b;
    return DDP_COMM_BACKEND_COUNT;
}

static void expect_refused(const char *backend, struct ddp_world *w, double timeout,
                           const char *want)
{
    char err[DDP_ERR_LEN] = "";
    ddp_comm *c = ddp_comm_create(
        &(struct ddp_comm_opts){backend_of(backend), timeout, -1, DDP_BOOTSTRAP_AUTO, NULL}, w, err,
        sizeof err);
    REQUIRE(!c, "backend %s accepted world of %d (launched by MPI: %d)", backend, w->world_size,
            w->mpi_launched);
    REQUIRE(strstr(err, want), "backend %s: message '%s' lacks '%s'", backend, err, want);
    printf("refused %-5s size %d: %s\n", backend, w->world_size, err);
}

static int run_refuse(void)
{
    struct ddp_world w;
    memset(&w, 0, sizeof w);
    snprintf(w.host, sizeof w.host, "n1");

    /* Plain `srun -n 4` of a CPU job: MPI must not be initialised. */
    w.launcher = DDP_LAUNCHER_SLURM;
    w.world_size = 4;
    w.rank = 2;
    w.mpi_launched = 0;
    const char *srun_msg = "4 tasks were started by srun without an MPI plugin: run CPU jobs "
                           "with `srun --mpi=pmix ...`";
    unsetenv("SLURM_MPI_TYPE");
    expect_refused("auto", &w, 300, srun_msg);
    expect_refused("mpi", &w, 300, srun_msg);
    expect_refused(NULL, &w, 300, srun_msg);
    /* `srun --mpi=pmi2` is a plugin, just not one OpenMPI can use */
    setenv("SLURM_MPI_TYPE", "pmi2", 1);
    expect_refused("auto", &w, 300,
                   "4 tasks were started by srun --mpi=pmi2, which this "
                   "OpenMPI cannot use for CPU ranks: run CPU jobs with "
                   "`srun --mpi=pmix ...`");
    setenv("SLURM_MPI_TYPE", "none", 1);
    expect_refused("auto", &w, 300, srun_msg);
    unsetenv("SLURM_MPI_TYPE");
    expect_refused("none", &w, 300, "backend = none runs a single rank, but this world has 4");
    w.launcher = DDP_LAUNCHER_TORCHRUN;
    expect_refused("auto", &w, 300, "torchrun-style launcher");
    expect_refused("gloo", &w, 300, "unknown backend");
#if HAVE_NCCL
    /* a GPU build on a machine without a usable GPU: refused by the NCCL backend itself */
    expect_refused("nccl", &w, 300, "GPU");
#else
    expect_refused("nccl", &w, 300, "backend = nccl needs a GPU build");
#endif
#if HAVE_MPI
    int inited = 1;
    MPI_Initialized(&inited);
    REQUIRE(!inited, "MPI_Init was called for a world MPI did not launch");
#endif

    /* One process: self, whatever the backend says. */
    w.launcher = DDP_LAUNCHER_SINGLE;
    w.world_size = 1;
    w.rank = 0;
    g_rank = 0;
    g_size = 1;
    expect_refused("none", &w, 0, "timeout_s must be in");
    expect_refused("none", &w, NAN, "timeout_s must be in");
    const char *backends[] = {"none", "auto", "mpi", ""};
    for (int b = 0; b < 4; b++) {
        char err[DDP_ERR_LEN] = "";
        ddp_comm *c = ddp_comm_create(
            &(struct ddp_comm_opts){backend_of(backends[b]), 5, -1, DDP_BOOTSTRAP_AUTO, NULL}, &w,
            err, sizeof err);
        REQUIRE(c, "backend '%s' refused one process: %s", backends[b], err);
        REQUIRE(strcmp(ddp_comm_name(c), "self") == 0, "backend '%s' gave %s", backends[b],
                ddp_comm_name(c));
        REQUIRE(ddp_comm_rank(c) == 0 && ddp_comm_size(c) == 1, "rank/size");
        g_c = c;
        test_allreduce(c);
        test_outstanding(c);
        test_broadcast(c);
        test_allgather(c);
        ddp_comm_barrier(c);
        ddp_comm_progress(c);
        ddp_comm_wait(c, NULL);
        g_c = NULL;
        ddp_comm_destroy(c);
    }
#if HAVE_MPI
    MPI_Initialized(&inited);
    REQUIRE(!inited, "MPI_Init was called by the self backend");
#endif
    ddp_comm_destroy(NULL);
    printf("refusals and self backend ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "collectives";
    if (strcmp(mode, "collectives") == 0)
        return run_collectives();
    if (strcmp(mode, "deadline") == 0)
        return run_deadline(argc > 2 ? argv[2] : "allreduce");
    if (strcmp(mode, "die") == 0)
        return run_die();
    if (strcmp(mode, "mismatch") == 0)
        return run_mismatch();
    if (strcmp(mode, "refuse") == 0)
        return run_refuse();
    fprintf(stderr, "usage: test_comm collectives | deadline WHAT | die | mismatch | refuse\n");
    return 2;
}
