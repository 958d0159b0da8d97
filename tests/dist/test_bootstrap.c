/*
 * test_bootstrap.c - the bootstrap interface (bootstrap.h) on this machine: the helpers
 * (hex, rank lists, job token, kind names and choice), what `auto` decides under every
 * launcher (mpirun, srun --mpi=pmi2 or pmix, plain srun, torchrun style, none; every build),
 * argument checks, and the TCP
 * rendezvous between forked processes on 127.0.0.1 (rank 0 in this process, the others in
 * children): a 128-byte id to 8 ranks, 64 KiB to 4, 48 ranks at once, two calls in a row,
 * late peers, a missing rank named on timeout, a port in use. PMI2 and MPI need their
 * launchers: tests/slurm/cases/22-bootstrap-pmi2.sh and the mpi suite cover them.
 */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dist/bootstrap_impl.h"
#include "core/util.h"
#include "check.h"

static void helpers(void)
{
    unsigned char in[256], out[256];
    char hex[513];
    for (int i = 0; i < 256; i++)
        in[i] = (unsigned char)i;
    ddp_bootstrap_hex_encode(in, 256, hex);
    CHECK(strlen(hex) == 512 && strncmp(hex, "000102", 6) == 0 && strcmp(hex + 506, "fdfeff") == 0,
          "hex encode: %.12s...", hex);
    CHECK(strchr(hex, ';') == NULL, "hex has ';'");
    CHECK(ddp_bootstrap_hex_decode(hex, out, 256) == 0 && memcmp(in, out, 256) == 0,
          "hex round trip");
    CHECK(ddp_bootstrap_hex_decode("0A0b", out, 2) == 0 && out[0] == 10 && out[1] == 11,
          "hex upper case");
    CHECK(ddp_bootstrap_hex_decode("0a0", out, 2) < 0, "short hex accepted");
    CHECK(ddp_bootstrap_hex_decode("0a0b0c", out, 2) < 0, "long hex accepted");
    CHECK(ddp_bootstrap_hex_decode("0g", out, 1) < 0, "non-hex accepted");
    CHECK(ddp_bootstrap_hex_decode("", out, 0) == 0, "empty hex");

    unsigned char miss[12] = {0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1, 1};
    char list[64];
    int n = ddp_bootstrap_format_ranks(miss, 12, list, sizeof list);
    CHECK(n == 7 && strcmp(list, "1, 3-5, 8, 10-11") == 0, "ranks: %d '%s'", n, list);
    unsigned char none[3] = {0, 0, 0};
    n = ddp_bootstrap_format_ranks(none, 3, list, sizeof list);
    CHECK(n == 0 && list[0] == '\0', "no ranks: %d '%s'", n, list);
    unsigned char many[1000];
    for (int i = 0; i < 1000; i++)
        many[i] = i % 2;
    n = ddp_bootstrap_format_ranks(many, 1000, list, sizeof list);
    CHECK(n == 500 && strlen(list) < sizeof list && strstr(list, ", ...") &&
              strncmp(list, "1, 3, 5", 7) == 0,
          "long rank list: %d '%s'", n, list);

    enum ddp_bootstrap_kind k;
    char err[DDP_ERR_LEN];
    CHECK(ddp_bootstrap_parse("pmi2", &k, err, sizeof err) == 0 && k == DDP_BOOTSTRAP_PMI2,
          "parse pmi2");
    CHECK(ddp_bootstrap_parse("tcp", &k, err, sizeof err) == 0 && k == DDP_BOOTSTRAP_TCP,
          "parse tcp");
    CHECK(ddp_bootstrap_parse("nccl", &k, err, sizeof err) < 0 && strstr(err, "auto, pmi2"),
          "parse nccl: %s", err);
    CHECK(strcmp(ddp_bootstrap_name(DDP_BOOTSTRAP_MPI), "mpi") == 0, "name");

    unsetenv("PMI_FD");
    CHECK(!ddp_bootstrap_pmi2_live(), "pmi2 live without PMI_FD");
    CHECK(ddp_bootstrap_choose(DDP_BOOTSTRAP_AUTO, NULL) == DDP_BOOTSTRAP_TCP, "auto -> tcp");
    CHECK(ddp_bootstrap_choose(DDP_BOOTSTRAP_MPI, NULL) == DDP_BOOTSTRAP_MPI, "mpi stays");
    setenv("PMI_FD", "7", 1);
    CHECK(ddp_bootstrap_pmi2_live() == HAVE_PMI2, "pmi2 live with PMI_FD");
    CHECK(ddp_bootstrap_choose(DDP_BOOTSTRAP_AUTO, NULL) ==
              (HAVE_PMI2 ? DDP_BOOTSTRAP_PMI2 : DDP_BOOTSTRAP_TCP),
          "auto with PMI_FD");
    setenv("PMI_FD", "x", 1);
    CHECK(!ddp_bootstrap_pmi2_live(), "PMI_FD=x is live");
    unsetenv("PMI_FD");

    struct ddp_world w;
    memset(&w, 0, sizeof w);
    char tok[DDP_BOOTSTRAP_TOKEN_MAX + 1];
    w.world_size = 4;
    w.job_id = 1234;
    w.step_id = 2;
    w.launcher = DDP_LAUNCHER_SLURM;
    unsetenv("DDP_BOOTSTRAP_TOKEN");
    ddp_bootstrap_token(&w, tok, sizeof tok);
    CHECK(strcmp(tok, "slurm:1234.2") == 0, "slurm token '%s'", tok);
    w.launcher = DDP_LAUNCHER_OMPI;
    ddp_bootstrap_token(&w, tok, sizeof tok);
    CHECK(strcmp(tok, "slurm:1234") == 0, "mpirun-in-slurm token '%s'", tok);
    w.job_id = w.step_id = -1;
    w.launcher = DDP_LAUNCHER_TORCHRUN;
    snprintf(w.master_addr, sizeof w.master_addr, "10.0.0.1");
    w.master_port = 29500;
    ddp_bootstrap_token(&w, tok, sizeof tok);
    CHECK(strcmp(tok, "world:4@10.0.0.1:29500") == 0, "torchrun token '%s'", tok);
    char big[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[3] = '\n';
    setenv("DDP_BOOTSTRAP_TOKEN", big, 1);
    ddp_bootstrap_token(&w, tok, sizeof tok);
    CHECK(strlen(tok) == DDP_BOOTSTRAP_TOKEN_MAX && tok[3] == '?', "long token cut: %zu",
          strlen(tok));
    unsetenv("DDP_BOOTSTRAP_TOKEN");
}

#define MAXVARS 24
/* A launcher's environment, as ddp_world_detect and ddp_bootstrap_decide read it. */
struct env {
    const char *kv[MAXVARS][2]; /* terminated by a NULL name */
};

static const char *lookup(void *ctx, const char *name)
{
    const struct env *e = ctx;
    for (int i = 0; i < MAXVARS && e->kv[i][0]; i++)
        if (strcmp(e->kv[i][0], name) == 0)
            return e->kv[i][1];
    return NULL;
}

/* Rank 1 of 2 on one node of a Slurm step (MASTER_ADDR keeps the resolver out of it). */
#define SRUN_STEP                                                                          \
    {"SLURM_JOB_ID", "1234"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"},               \
        {"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_STEP_NODELIST", "localhost"},               \
        {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "1"}, \
        {"SLURM_NODEID", "0"},                                                             \
    {                                                                                      \
        "MASTER_ADDR", "127.0.0.1"                                                         \
    }

/* One launcher and what `auto` must make of it in each build (PMI2 and MPI built in or not). */
struct decide_case {
    const char *what;
    struct env env;
    enum ddp_bootstrap_kind want[2][2]; /* [pmi2_built][mpi_built] */
    const char *why;                    /* in the reason, with both built */
};

#define T DDP_BOOTSTRAP_TCP
#define P DDP_BOOTSTRAP_PMI2
#define M DDP_BOOTSTRAP_MPI
static const struct decide_case g_decide[] = {
    {"mpirun -n 2",
     {{{"OMPI_COMM_WORLD_RANK", "1"},
       {"OMPI_COMM_WORLD_SIZE", "2"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {NULL, NULL}}},
     {{T, M}, {T, M}},
     "mpirun (OMPI_COMM_WORLD_SIZE is set) started this process and this ddptrain has MPI"},
    {"mpirun -n 2 inside an allocation",
     {{{"OMPI_COMM_WORLD_RANK", "1"},
       {"OMPI_COMM_WORLD_SIZE", "2"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"SLURM_JOB_ID", "1234"},
       {NULL, NULL}}},
     {{T, M}, {T, M}},
     "mpirun"},
    {"srun --mpi=pmi2",
     {{SRUN_STEP, {"SLURM_MPI_TYPE", "pmi2"}, {"PMI_FD", "5"}, {"PMI_RANK", "1"}, {NULL, NULL}}},
     {{T, T}, {P, P}},
     "srun --mpi=pmi2 started this process (PMI_FD is set)"},
    {"srun --mpi=pmix",
     {{SRUN_STEP, {"SLURM_MPI_TYPE", "pmix"}, {"PMIX_RANK", "1"}, {NULL, NULL}}},
     {{T, M}, {T, M}},
     "srun --mpi=pmix started this process and this ddptrain has MPI"},
    {"srun --mpi=pmix_v4",
     {{SRUN_STEP, {"SLURM_MPI_TYPE", "pmix_v4"}, {"PMIX_RANK", "1"}, {NULL, NULL}}},
     {{T, M}, {T, M}},
     "srun --mpi=pmix_v4 started"},
    {"plain srun",
     {{SRUN_STEP, {"SLURM_MPI_TYPE", "none"}, {NULL, NULL}}},
     {{T, T}, {T, T}},
     "neither PMI2 nor MPI started this process (launcher slurm); TCP rendezvous at "
     "127.0.0.1:22340"},
    {"plain srun, no SLURM_MPI_TYPE", {{SRUN_STEP, {NULL, NULL}}}, {{T, T}, {T, T}}, "slurm"},
    {"torchrun style",
     {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {NULL, NULL}}},
     {{T, T}, {T, T}},
     "(launcher torchrun); TCP rendezvous at 127.0.0.1:29500"},
    {"no launcher", {{{NULL, NULL}}}, {{T, T}, {T, T}}, "one rank, nothing to share"},
    {"mpirun -n 1",
     {{{"OMPI_COMM_WORLD_RANK", "0"},
       {"OMPI_COMM_WORLD_SIZE", "1"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
       {NULL, NULL}}},
     {{T, T}, {T, T}},
     "one rank"},
};

/* ddp_bootstrap_decide for every launcher above, every build, auto and the explicit kinds. */
static void decide(void)
{
    for (size_t i = 0; i < sizeof g_decide / sizeof *g_decide; i++) {
        const struct decide_case *c = &g_decide[i];
        struct ddp_world w;
        char err[DDP_ERR_LEN] = "", why[256];
        void *ctx = (void *)&c->env;
        if (ddp_world_detect(&w, lookup, ctx, 0, err, sizeof err) != 0) {
            CHECK(0, "%s: world: %s", c->what, err);
            continue;
        }
        for (int pmi2 = 0; pmi2 < 2; pmi2++)
            for (int mpi = 0; mpi < 2; mpi++) {
                enum ddp_bootstrap_kind k = ddp_bootstrap_decide(DDP_BOOTSTRAP_AUTO, &w, lookup,
                                                                 ctx, pmi2, mpi, why, sizeof why);
                CHECK(k == c->want[pmi2][mpi], "%s, pmi2 %d mpi %d: auto -> %s, expected %s (%s)",
                      c->what, pmi2, mpi, ddp_bootstrap_name(k),
                      ddp_bootstrap_name(c->want[pmi2][mpi]), why);
                CHECK(strncmp(why, "auto: ", 6) == 0, "%s: why '%s'", c->what, why);
                if (pmi2 && mpi)
                    CHECK(strstr(why, c->why) != NULL, "%s: why '%s', expected '%s' in it", c->what,
                          why, c->why);
                if (!mpi && w.mpi_launched && w.world_size > 1)
                    CHECK(strstr(why, "built without MPI") != NULL, "%s: why '%s'", c->what, why);
            }
        for (int k = DDP_BOOTSTRAP_PMI2; k < DDP_BOOTSTRAP_COUNT; k++) {
            enum ddp_bootstrap_kind got = ddp_bootstrap_decide((enum ddp_bootstrap_kind)k, &w,
                                                               lookup, ctx, 1, 1, why, sizeof why);
            CHECK((int)got == k && strstr(why, "[dist] bootstrap = ") == why,
                  "%s: explicit %s -> %s (%s)", c->what,
                  ddp_bootstrap_name((enum ddp_bootstrap_kind)k), ddp_bootstrap_name(got), why);
        }
        /* this build, this process: ddp_bootstrap_wants_mpi agrees with the table, given
         * the process environment has no PMI_FD (unset above) */
        CHECK(ddp_bootstrap_wants_mpi(DDP_BOOTSTRAP_AUTO, &w, NULL, 0) ==
                  (c->want[HAVE_PMI2][HAVE_MPI] == M && !getenv("PMI_FD")),
              "%s: wants_mpi", c->what);
    }
    /* PMI_FD that is no number is not PMI2 */
    struct env bad = {{SRUN_STEP, {"SLURM_MPI_TYPE", "pmi2"}, {"PMI_FD", "x"}, {NULL, NULL}}};
    struct ddp_world w;
    char err[DDP_ERR_LEN], why[256];
    if (ddp_world_detect(&w, lookup, &bad, 0, err, sizeof err) == 0)
        CHECK(ddp_bootstrap_decide(DDP_BOOTSTRAP_AUTO, &w, lookup, &bad, 1, 1, why, sizeof why) ==
                  T,
              "PMI_FD=x: %s", why);
}
#undef T
#undef P
#undef M

static void arguments(void)
{
    struct ddp_world w;
    memset(&w, 0, sizeof w);
    w.world_size = 1;
    unsigned char blob[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char err[DDP_ERR_LEN];
    CHECK(ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, blob, 8, 1, err, sizeof err) == 0 &&
              blob[7] == 8,
          "world of one: %s", err);
    CHECK(ddp_bootstrap_share(&w, DDP_BOOTSTRAP_PMI2, NULL, blob, 8, 1, err, sizeof err) == 0,
          "world of one, pmi2 without PMI_FD: %s", err);
    CHECK(ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, blob, 0, 1, err, sizeof err) < 0,
          "length 0 accepted");
    CHECK(ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, blob, DDP_BOOTSTRAP_MAX_LEN + 1, 1, err,
                              sizeof err) < 0,
          "length above the maximum accepted");
    CHECK(ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, blob, 8, 0, err, sizeof err) < 0 &&
              strstr(err, "timeout_s"),
          "timeout 0: %s", err);
    w.world_size = 2;
    w.rank = 1;
    CHECK(ddp_bootstrap_share(&w, DDP_BOOTSTRAP_MPI, NULL, blob, 8, 1, err, sizeof err) < 0 &&
              strstr(err, "bootstrap = mpi needs the MPI communicator"),
          "mpi without comm: %s", err);
    unsetenv("PMI_FD");
    CHECK(ddp_bootstrap_share(&w, DDP_BOOTSTRAP_PMI2, NULL, blob, 8, 1, err, sizeof err) < 0 &&
              strstr(err, HAVE_PMI2 ? "srun --mpi=pmi2" : "without libpmi2"),
          "pmi2 without PMI_FD: %s", err);
    CHECK(ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, blob, 8, 1, err, sizeof err) < 0 &&
              strstr(err, "MASTER_ADDR and MASTER_PORT"),
          "tcp without master: %s", err);
    CHECK(blob[0] == 1, "blob changed by failed calls");
}

/* A free port, held until this test exits: bound with SO_REUSEADDR and not listening, so
 * no other program's connection or listener takes it, while rank 0's rendezvous (which sets
 * SO_REUSEADDR too) can listen on it. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    socklen_t sl = sizeof a;
    int port = 0;
    if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &sl) == 0)
        port = ntohs(a.sin_port);
    else if (fd >= 0)
        close(fd);
    return port;
}

static void world_of(struct ddp_world *w, int rank, int size, int port)
{
    memset(w, 0, sizeof *w);
    w->launcher = DDP_LAUNCHER_TORCHRUN;
    w->rank = rank;
    w->world_size = size;
    w->local_size = size;
    w->local_rank = rank;
    w->job_id = w->step_id = -1;
    snprintf(w->host, sizeof w->host, "localhost");
    snprintf(w->master_host, sizeof w->master_host, "localhost");
    snprintf(w->master_addr, sizeof w->master_addr, "127.0.0.1");
    w->master_port = port;
}

/* Byte i of call c's blob. */
static unsigned char pattern(size_t i, int c)
{
    return (unsigned char)(i * 131 + 7 + c * 29);
}

struct scenario {
    const char *what;
    int size;        /* world size */
    size_t len;      /* blob bytes */
    int calls;       /* calls in a row */
    double delay_s;  /* peers start this late */
    const int *skip; /* ranks never started (terminated by -1), or NULL */
    double timeout_s;
    const char *want_err; /* rank 0's expected error, NULL for success */
};

/* Run a scenario: rank 0 here, ranks 1.. in forked children. */
static void run(const struct scenario *s)
{
    int port = free_port();
    CHECK(port > 0, "%s: no free port", s->what);
    setenv("DDP_BOOTSTRAP_TOKEN", s->what, 1);
    pid_t *pids = ddp_calloc((size_t)s->size, sizeof *pids);
    for (int r = 1; r < s->size; r++) {
        int skipped = 0;
        for (const int *k = s->skip; k && *k >= 0; k++)
            skipped |= *k == r;
        if (skipped)
            continue;
        pids[r] = fork();
        if (pids[r] == 0) {
            if (s->delay_s > 0)
                usleep((useconds_t)(s->delay_s * 1e6));
            struct ddp_world w;
            world_of(&w, r, s->size, port);
            unsigned char *b = ddp_calloc(s->len, 1);
            char err[DDP_ERR_LEN];
            for (int c = 0; c < s->calls; c++) {
                memset(b, 0, s->len);
                if (ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, b, s->len, s->timeout_s, err,
                                        sizeof err) < 0) {
                    if (!s->want_err)
                        fprintf(stderr, "%s: rank %d: %s\n", s->what, r, err);
                    _exit(3);
                }
                for (size_t i = 0; i < s->len; i++)
                    if (b[i] != pattern(i, c)) {
                        fprintf(stderr, "%s: rank %d call %d: byte %zu differs\n", s->what, r, c,
                                i);
                        _exit(4);
                    }
            }
            _exit(0);
        }
    }
    struct ddp_world w;
    world_of(&w, 0, s->size, port);
    unsigned char *b = ddp_malloc(s->len);
    char err[DDP_ERR_LEN] = "";
    int rc = 0;
    double t0 = ddp_now();
    for (int c = 0; c < s->calls && rc == 0; c++) {
        for (size_t i = 0; i < s->len; i++)
            b[i] = pattern(i, c);
        rc = ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, b, s->len, s->timeout_s, err,
                                 sizeof err);
    }
    double dt = ddp_now() - t0;
    if (s->want_err) {
        CHECK(rc < 0 && strstr(err, s->want_err), "%s: rank 0 rc %d '%s', want '%s'", s->what, rc,
              err, s->want_err);
        CHECK(dt >= s->timeout_s - 0.05 && dt < s->timeout_s + 1.5,
              "%s: gave up after %.2f s, timeout %g", s->what, dt, s->timeout_s);
        if (getenv("DDP_TEST_VERBOSE"))
            printf("%s -> %s\n", s->what, err);
    } else {
        CHECK(rc == 0, "%s: rank 0: %s", s->what, err);
    }
    for (int r = 1; r < s->size; r++) {
        if (!pids[r])
            continue;
        int st = 0;
        waitpid(pids[r], &st, 0);
        if (!s->want_err)
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: rank %d exit status %d", s->what, r,
                  st);
    }
    free(b);
    free(pids);
    unsetenv("DDP_BOOTSTRAP_TOKEN");
}

static void tcp(void)
{
    static const int skip3[] = {3, -1};
    static const int skip_many[] = {2, 5, 6, 7, -1};
    const struct scenario S[] = {
        {"nccl id to 8 ranks", 8, 128, 1, 0, NULL, 10, NULL},
        {"64 KiB to 4 ranks", 4, DDP_BOOTSTRAP_MAX_LEN, 1, 0, NULL, 10, NULL},
        {"48 ranks at once", 48, 128, 1, 0, NULL, 20, NULL},
        {"three calls in a row", 5, 300, 3, 0, NULL, 10, NULL},
        {"peers start 0.5 s late", 3, 128, 1, 0.5, NULL, 10, NULL},
        {"rank 0 starts late: peers retry", 3, 128, 1, -1, NULL, 10, NULL},
        {"one rank missing", 4, 128, 1, 0, skip3, 1.0, "rank 3 (1 of 3) did not arrive"},
        {"several missing", 8, 128, 1, 0, skip_many, 1.0, "ranks 2, 5-7 (4 of 7) did not"},
    };
    for (size_t i = 0; i < sizeof S / sizeof *S; i++) {
        if (S[i].delay_s < 0) {
            /* rank 0 late: swap roles by delaying this process instead */
            struct scenario s = S[i];
            s.delay_s = 0;
            int port = free_port();
            setenv("DDP_BOOTSTRAP_TOKEN", s.what, 1);
            pid_t p = fork();
            if (p == 0) {
                struct ddp_world w;
                world_of(&w, 1, 2, port);
                unsigned char b[16] = {0};
                char err[DDP_ERR_LEN];
                int rc =
                    ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, b, 16, 10, err, sizeof err);
                _exit(rc == 0 && b[15] == 15 ? 0 : 1);
            }
            usleep(700000);
            struct ddp_world w;
            world_of(&w, 0, 2, port);
            unsigned char b[16];
            for (int k = 0; k < 16; k++)
                b[k] = (unsigned char)k;
            char err[DDP_ERR_LEN] = "";
            CHECK(ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, b, 16, 10, err, sizeof err) == 0,
                  "%s: %s", s.what, err);
            int st;
            waitpid(p, &st, 0);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: peer status %d", s.what, st);
            unsetenv("DDP_BOOTSTRAP_TOKEN");
            continue;
        }
        run(&S[i]);
    }
}

/* Rank 0 on a port someone else listens on: the one-line "in use" error, at once. */
static void port_in_use(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    socklen_t sl = sizeof a;
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &sl) == 0,
          "cannot listen");
    struct ddp_world w;
    world_of(&w, 0, 2, ntohs(a.sin_port));
    unsigned char b[4] = {0};
    char err[DDP_ERR_LEN] = "", want[128];
    double t0 = ddp_now();
    int rc = ddp_bootstrap_share(&w, DDP_BOOTSTRAP_TCP, NULL, b, 4, 5, err, sizeof err);
    snprintf(want, sizeof want,
             "port %d on localhost is in use: another job? set [dist] port "
             "or MASTER_PORT",
             w.master_port);
    CHECK(rc < 0 && strcmp(err, want) == 0, "port in use: '%s'", err);
    CHECK(ddp_now() - t0 < 1, "port in use took %.2f s", ddp_now() - t0);
    close(fd);
}

int main(void)
{
    helpers();
    decide();
    arguments();
    tcp();
    port_in_use();
    printf("bootstrap: %d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}
