/*
 * test_validate_unit.c - the parts of `ddptrain validate` that need no second rank: settings
 * files, the fault hook parser, the rate kernels, the all-reduce sweep's checks on one rank,
 * the golden run (deterministic; the fault hooks show up where they should) and reference
 * files (round trip, comparison that names the step and rank, malformed files rejected with
 * file:line).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "comm/comm.h"
#include "dist/world.h"
#include "core/util.h"
#include "validate/validate.h"

static char g_dir[] = "/tmp/ddp-validate-unit.XXXXXX";

static const char *write_tmp(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_config(void)
{
    struct ddp_validate_config c;
    char err[DDP_ERR_LEN];
    ddp_validate_config_defaults(&c);
    CHECK(c.min_fraction == 0.8 && c.outlier_mads == 5 && c.foreign_load_max == 0.1 &&
              c.rounds == 3 && c.burn_s == 120 && c.ar_min_bytes == 8 &&
              c.ar_max_bytes == 256 << 20 && c.golden_steps == 100 && c.golden_steps_quick == 30,
          "defaults");
    const char *good = write_tmp("good.ini", "; comment\n[validate]\nmin_fraction = 0.5\n"
                                             "[allreduce]\nmax_bytes_quick = 1024\n"
                                             "[golden]\nreference = /x/y\nrtol = 1e-5\n");
    CHECK(ddp_validate_config_load(&c, good, err, sizeof err) == 0, "good file: %s", err);
    CHECK(c.min_fraction == 0.5 && c.ar_max_bytes_quick == 1024 && c.golden_rtol == 1e-5 &&
              !strcmp(c.reference, "/x/y") && c.gemm_n == 2048,
          "values read over the defaults");

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"[gemm]\nn = 8\n", ":2: [gemm] n: 8 is out of range; expected 16 to 16384"},
        {"[gemm]\n\nreps = x\n", ":3: [gemm] reps: 'x' is not an integer"},
        {"[validate]\nmin_fraction = 1.5\n", ":2: [validate] min_fraction: 1.5 is out of range"},
        {"[golden]\nsteps = 0\n", ":2: [golden] steps"},
        {"[gemm]\nrep = 3\n", ":2: [gemm] rep: unknown key; did you mean 'reps'? [gemm] takes n,"},
        {"[gemm]\nn_quik = 300\n", ":2: [gemm] n_quik: unknown key; did you mean 'n_quick'?"},
        {"[nope]\nn = 3\n", ":1: [nope]: unknown section; expected one of [validate] [gemm]"},
        {"[golde]\nsteps = 3\n", ":1: [golde]: unknown section; did you mean [golden]?"},
        {"n = 3\n", ":1: [] n: key outside any section"},
        {"[allreduce]\nmin_bytes = 64\nmax_bytes = 32\n", "must be at least min_bytes"},
        /* what the job file's reader checked and validate's own reader did not */
        {"[gemm]\nn = 512\nreps = 3\nn = 1024\n", ":4: [gemm] n: given twice (first on line 2)"},
        {"[golden]\nreference = /x/"
         "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"
         "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"
         "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n",
         ":2: line longer than 198 characters"},
        {"[gemm]\nn = 512\n  1024\n", ":3: [gemm] n: continuation line for a non-text key"},
        {"[gemm]\nn = 5\x01\n", ":2: control byte 0x01 at column 6"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ddp_validate_config_defaults(&c);
        const char *p = write_tmp("bad.ini", bad[i].text);
        err[0] = '\0';
        CHECK(ddp_validate_config_load(&c, p, err, sizeof err) != 0 &&
                  strstr(err, bad[i].want) != NULL,
              "bad file %zu: got '%s', want '%s'", i, err, bad[i].want);
    }
    CHECK(ddp_validate_config_load(&c, "/nonexistent/v.ini", err, sizeof err) != 0 &&
              strstr(err, "cannot open"),
          "missing file: %s", err);
    /* the shipped settings file holds the defaults */
    const char *src = getenv("DDP_SRC");
    if (src) {
        char path[1024];
        struct ddp_validate_config d;
        snprintf(path, sizeof path, "%s/configs/validate.ini", src);
        ddp_validate_config_defaults(&c);
        ddp_validate_config_defaults(&d);
        CHECK(ddp_validate_config_load(&c, path, err, sizeof err) == 0, "%s: %s", path, err);
        CHECK(memcmp(&c, &d, sizeof c) == 0, "configs/validate.ini differs from the defaults");
    }
}

static void test_expect(void)
{
    struct ddp_validate_expect e;
    char err[DDP_ERR_LEN];
    const char *good = write_tmp("e.ini", "[node]\ntype = test node\n[gpu]\ncount = 0\n"
                                          "hbm_min_gbs = 2500\nsgemm_min_tflops = 45\n"
                                          "tf32_min_tflops = 300\nbf16_min_tflops = 550.5\n"
                                          "h2d_min_gbs = 40\nd2h_min_gbs = 41\n"
                                          "[gemm]\nn = 512\nmin_gflops = 12.5\n[triad]\nmib = 32\n"
                                          "min_gbs = 4\n[allreduce]\nranks = 2\n"
                                          "min_busbw_gbs = 1M:0.5, 16777216:1.5, 4K:0.01\n");
    CHECK(ddp_validate_expect_load(&e, good, err, sizeof err) == 0, "good expect file: %s", err);
    CHECK(!strcmp(e.type, "test node") && e.gpu_count == 0 && !e.gpu_model[0] && e.gemm_n == 512 &&
              e.gemm_min_gflops == 12.5 && e.triad_mib == 32 && e.triad_min_gbs == 4 &&
              e.ar_ranks == 2 && e.nbusbw == 3 && e.busbw_bytes[0] == 1 << 20 &&
              e.busbw_min[1] == 1.5 && e.busbw_bytes[1] == 16 << 20 && e.busbw_bytes[2] == 4096,
          "expect values");
    CHECK(e.hbm_min_gbs == 2500 && e.sgemm_min_tflops == 45 && e.tf32_min_tflops == 300 &&
              e.bf16_min_tflops == 550.5 && e.h2d_min_gbs == 40 && e.d2h_min_gbs == 41,
          "expect [gpu] floors");
    const char *empty = write_tmp("e0.ini", "");
    CHECK(ddp_validate_expect_load(&e, empty, err, sizeof err) == 0 && e.gpu_count == -1 &&
              e.gemm_min_gflops == 0 && e.nbusbw == 0,
          "an empty expect file checks nothing: %s", err);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"[gemm]\nmin_gflops = 3\n", ":2: [gemm] min_gflops needs [gemm] n"},
        {"[triad]\nmin_gbs = 3\n", ":2: [triad] min_gbs needs [triad] mib"},
        {"[gemm]\nmin_glops = 3\n",
         ":2: [gemm] min_glops: unknown key; did you mean 'min_gflops'?"},
        {"[gpu]\ncount = 4\ncount = 8\n", ":3: [gpu] count: given twice (first on line 2)"},
        {"[gpu]\ncount = many\n", ":2: [gpu] count: 'many' is not an integer"},
        {"[gpu]\nbf16_min_tflop = 5\n",
         ":2: [gpu] bf16_min_tflop: unknown key; did you mean 'bf16_min_tflops'?"},
        {"[allreduce]\nmin_busbw_gbs = 1M\n", ":2: [allreduce] min_busbw_gbs: '1M'; expected"},
        {"[allreduce]\nmin_busbw_gbs = 2G:3\n", ":2: [allreduce] min_busbw_gbs: '2G:3'"},
        {"[nodes]\ntype = x\n", ":1: [nodes]: unknown section; did you mean [node]?"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = write_tmp("bad-e.ini", bad[i].text);
        err[0] = '\0';
        CHECK(ddp_validate_expect_load(&e, p, err, sizeof err) != 0 && strstr(err, bad[i].want),
              "bad expect file %zu: got '%s', want '%s'", i, err, bad[i].want);
    }
    /* the shipped expectation files parse */
    const char *src = getenv("DDP_SRC");
    static const char *const shipped[] = {"expect-cpu-2core-test.ini", "expect-h100-sxm.ini",
                                          "expect-h200-sxm.ini"};
    for (size_t i = 0; src && i < sizeof shipped / sizeof shipped[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/configs/%s", src, shipped[i]);
        CHECK(ddp_validate_expect_load(&e, path, err, sizeof err) == 0 && e.gemm_min_gflops > 0 &&
                  e.gemm_n > 0 && e.type[0] && e.source[0],
              "%s: %s", path, err);
    }
    CHECK(ddp_validate_expect_load(&e, g_dir, err, sizeof err) != 0 &&
              strstr(err, "is a directory, not a node expectation file"),
          "a directory: %s", err);
}

static void test_burn(void)
{
    const struct ddp_backend *be = ddp_backend_cpu();
    struct ddp_validate_burn_result b;
    ddp_validate_burn(be, 64, 0.2, 0, &b);
    CHECK(b.calls > 1 && b.mismatches == 0 && b.gflops > 0 && b.min_gflops > 0,
          "burn: %ld calls, %ld mismatches, %g GFLOP/s", b.calls, b.mismatches, b.gflops);
    ddp_validate_burn(be, 64, 0.05, 1, &b);
    CHECK(b.calls >= 1 && b.mismatches == 1, "burn with a wrong first result: %ld of %ld differ",
          b.mismatches, b.calls);
    double run, wait;
    CHECK(ddp_validate_sched_s(&run, &wait) != 0 || (run > 0 && wait >= 0),
          "schedstat: run %g wait %g", run, wait);
    double busy = ddp_validate_machine_busy_s(), own = ddp_validate_own_cpu_s();
    CHECK(busy > 0 && own > 0, "busy %g own %g CPU-s", busy, own);
}

static void test_faults(void)
{
    struct ddp_validate_faults f;
    char err[DDP_ERR_LEN];
    CHECK(ddp_validate_faults_parse(&f, NULL, err, sizeof err) == 0, "NULL");
    for (int k = 0; k < DDP_VALIDATE_FAULT_KINDS; k++)
        CHECK(f.rank[k] == -1, "no fault %d", k);
    CHECK(ddp_validate_faults_parse(&f, "slow_gemm:1,flip_param:0, bad_allreduce:7", err,
                                    sizeof err) == 0,
          "three faults: %s", err);
    CHECK(ddp_validate_fault_here(&f, DDP_VALIDATE_FAULT_SLOW_GEMM, 1) &&
              !ddp_validate_fault_here(&f, DDP_VALIDATE_FAULT_SLOW_GEMM, 0) &&
              ddp_validate_fault_here(&f, DDP_VALIDATE_FAULT_FLIP_PARAM, 0) &&
              ddp_validate_fault_here(&f, DDP_VALIDATE_FAULT_BAD_ALLREDUCE, 7) &&
              !ddp_validate_fault_here(&f, DDP_VALIDATE_FAULT_SLOW_TRIAD, 1),
          "which rank injects what");
    /* @HOST: rank 0 of one node only (--slurm-health runs one rank 0 per node) */
    CHECK(ddp_validate_faults_parse(&f, "slow_hbm:0@n2,bad_devmem:3", err, sizeof err) == 0,
          "@HOST: %s", err);
    ddp_validate_faults_locate(&f, "n1");
    CHECK(!ddp_validate_fault_here(&f, DDP_VALIDATE_FAULT_SLOW_HBM, 0) &&
              ddp_validate_fault_here(&f, DDP_VALIDATE_FAULT_BAD_DEVMEM, 3),
          "n1 injects another host's fault");
    CHECK(ddp_validate_faults_parse(&f, "slow_hbm:0@n2", err, sizeof err) == 0, "@n2: %s", err);
    ddp_validate_faults_locate(&f, "n2");
    CHECK(ddp_validate_fault_here(&f, DDP_VALIDATE_FAULT_SLOW_HBM, 0) &&
              !ddp_validate_fault_here(&f, DDP_VALIDATE_FAULT_SLOW_HBM, 1),
          "n2 does not inject its own fault on rank 0 only");
    const char *bad[] = {"slow_gemm",
                         "slow_gemm:",
                         "slow_gemm:x",
                         "slow_gemm:-1",
                         "fast:1",
                         "slow_gemm:1;flip_param:0",
                         "slow_gemm:1@",
                         "slow_gemm:x@n1",
                         "slow_gemm:1@n1@n2",
                         "slow_gemm:1@"
                         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(ddp_validate_faults_parse(&f, bad[i], err, sizeof err) != 0 &&
                  strstr(err, "DDP_TEST_VALIDATE_FAULT"),
              "'%s' accepted", bad[i]);
}

static void test_rates(void)
{
    const struct ddp_backend *be = ddp_backend_cpu();
    double g = ddp_validate_gemm(be, 256, 10, 0, 0, NULL, NULL);
    CHECK(g > 0.1 && g < 1e5, "gemm %g GFLOP/s", g);
    double t = ddp_validate_triad(4, 2, 0, 1, 0, NULL, NULL);
    CHECK(t > 0.1 && t < 1e4, "triad %g GB/s", t);
    double t2 = ddp_validate_triad(4, 2, 0, 3, 0, NULL, NULL); /* three threads on uneven slices */
    CHECK(t2 > 0.1, "triad on 3 threads %g GB/s", t2);
    /* the fault: a hundredth of the rate (well below half, whatever the noise) */
    double gs = ddp_validate_gemm(be, 256, 3, 0, 1, NULL, NULL);
    CHECK(gs < 0.5 * g, "slow gemm %g vs %g", gs, g);
}

static ddp_comm *self_comm(void)
{
    struct ddp_world w;
    memset(&w, 0, sizeof w);
    w.world_size = 1;
    w.local_size = 1;
    snprintf(w.host, sizeof w.host, "unit");
    char err[DDP_ERR_LEN];
    ddp_comm *c =
        ddp_comm_create(&(struct ddp_comm_opts){DDP_COMM_NONE, 30, -1, DDP_BOOTSTRAP_AUTO, NULL},
                        &w, err, sizeof err);
    if (!c) {
        fprintf(stderr, "comm: %s\n", err);
        exit(1);
    }
    return c;
}

static void test_sweep(ddp_comm *c)
{
    struct ddp_validate_ar_row rows[DDP_VALIDATE_MAX_SIZES];
    struct ddp_validate_ar_opts o = {8, 4096, 3, 1e-4, 0};
    int n = ddp_validate_allreduce_sweep(c, &o, rows);
    CHECK(n == 10, "8 B .. 4 KiB is 10 sizes, got %d", n);
    for (int i = 0; i < n; i++)
        CHECK(rows[i].bytes == (8 << i) && rows[i].count == rows[i].bytes / 4 &&
                  rows[i].bad_elems == 0 && rows[i].first_bad == -1 && !rows[i].input_bad &&
                  rows[i].time_s > 0 && rows[i].busbw == 0 && rows[i].blocks == 3,
              "row %d: %lld bytes, %lld bad", i, (long long)rows[i].bytes,
              (long long)rows[i].bad_elems);
    /* one rank: the sum is the input itself, so the flipped element comes back wrong */
    o.corrupt = 1;
    n = ddp_validate_allreduce_sweep(c, &o, rows);
    for (int i = 0; i < n; i++)
        CHECK(rows[i].input_bad && rows[i].bad_elems == 1 &&
                  rows[i].first_bad == rows[i].count / 2 && rows[i].got != rows[i].want,
              "corrupt row %d: input_bad %d, %lld bad at %lld", i, rows[i].input_bad,
              (long long)rows[i].bad_elems, (long long)rows[i].first_bad);
}

static void test_golden(ddp_comm *c)
{
    const struct ddp_backend *be = ddp_backend_cpu();
    const unsigned none = 0, flip = DDP_VALIDATE_GOLDEN_FLIP_PARAM,
                   grad = DDP_VALIDATE_GOLDEN_BAD_GRAD;
    char err[DDP_ERR_LEN];
    const int S = 12;
    struct ddp_validate_golden a, b, f, gr;
    CHECK(ddp_validate_golden_run(c, be, S, none, &a, err, sizeof err) == 0, "run: %s", err);
    CHECK(ddp_validate_golden_run(c, be, S, none, &b, err, sizeof err) == 0, "run: %s", err);
    CHECK(a.steps == S && a.world_size == 1 && a.at_rest[0] == -1, "clean run");
    CHECK(a.final_hash[0] == b.final_hash[0] && !memcmp(a.loss, b.loss, sizeof(double) * S),
          "the golden run is deterministic");
    CHECK(isfinite(a.loss[0]) && a.loss[0] > 1.0 && a.loss[0] < 2.0, "initial loss %g near ln 4",
          a.loss[0]);
    CHECK(fabs(a.loss[0] - a.local[0]) < 1e-12, "one rank: global loss = local loss");

    CHECK(ddp_validate_golden_run(c, be, S, flip, &f, err, sizeof err) == 0, "run: %s", err);
    CHECK(f.at_rest[0] == S / 2 + 1, "flip found at rest before step %d, got %d", S / 2 + 1,
          f.at_rest[0]);
    CHECK(f.final_hash[0] != a.final_hash[0], "flip changes the parameters");

    CHECK(ddp_validate_golden_run(c, be, S, grad, &gr, err, sizeof err) == 0, "run: %s", err);
    const int s3 = S / 3;
    CHECK(gr.at_rest[0] == -1, "bad_grad is no corruption at rest");
    CHECK(gr.local[2 * (s3 - 1) + 1] == a.local[2 * (s3 - 1) + 1] &&
              fabs(gr.local[2 * s3 + 1] / a.local[2 * s3 + 1] - 1.01) < 1e-4,
          "bad_grad scales the step-%d gradient norm by 1.01: %g vs %g", s3, gr.local[2 * s3 + 1],
          a.local[2 * s3 + 1]);

    /* references: round trip, then comparisons that must and must not pass */
    char path[600];
    snprintf(path, sizeof path, "%s/cpu-w1.ref", g_dir);
    CHECK(ddp_validate_ref_write(&a, "cpu", path, err, sizeof err) == 0, "write: %s", err);
    struct ddp_validate_ref r;
    CHECK(ddp_validate_ref_read(&r, path, err, sizeof err) == 0, "read: %s", err);
    CHECK(r.world_size == 1 && r.steps == S && !strcmp(r.backend, "cpu") &&
              !strcmp(r.spec, DDP_VALIDATE_GOLDEN_SPEC),
          "header read back");
    int first, ranks[1];
    double worst = ddp_validate_ref_compare(&a, &r, 1e-6, &first, ranks);
    CHECK(first == -1 && worst < 1e-8, "own reference: first %d worst %g", first, worst);
    worst = ddp_validate_ref_compare(&gr, &r, 1e-3, &first, ranks);
    CHECK(first == s3 && ranks[0] == 1, "bad_grad found at step %d (got %d)", s3, first);
    worst = ddp_validate_ref_compare(&f, &r, 1e-3, &first, ranks);
    CHECK(first == -1 || first > S / 2,
          "a flipped low bit is not a trajectory change before "
          "it happens (first %d)",
          first);
    /* a shorter run compares its prefix */
    struct ddp_validate_golden q;
    CHECK(ddp_validate_golden_run(c, be, 5, none, &q, err, sizeof err) == 0, "run: %s", err);
    ddp_validate_ref_compare(&q, &r, 1e-6, &first, ranks);
    CHECK(first == -1, "prefix of the reference matches");
    ddp_validate_ref_free(&r);

    /* malformed references: each rejected with the file and line */
    static const struct {
        const char *text, *want;
    } bad[] = {
#define HEAD "format 1\nbackend cpu\nworld_size 1\nsteps 1\nspec x\n"
        {"format 2\n", ":1: format 2"},
        {"format 1\nbackend cpu\nworld_size 1\nsteps 2\nspec x\nstep 0 1 1 1\n", "incomplete"},
        {HEAD "step 0 1 1\n", ":6: expected 1 + 2"},
        {HEAD "step 0 1 1 nan\n", ":6:"},
        {HEAD "step 0 1 1 1 1\n", ":6:"},
        {HEAD "step 1 1 1 1\n", ":6: expected 'step 0"},
        {HEAD "steps 1\n", ":6: steps"},
#undef HEAD
        {"format 1\nstep 0 1 1 1\n", ":2: step before"},
        {"format 1\nworld_size 0\n", ":2: world_size"},
        {"format 1\nwhat 3\n", ":2: unknown line"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = write_tmp("bad.ref", bad[i].text);
        err[0] = '\0';
        CHECK(ddp_validate_ref_read(&r, p, err, sizeof err) != 0 && strstr(err, bad[i].want),
              "bad reference %zu: got '%s', want '%s'", i, err, bad[i].want);
    }
    ddp_validate_golden_free(&a);
    ddp_validate_golden_free(&b);
    ddp_validate_golden_free(&f);
    ddp_validate_golden_free(&gr);
    ddp_validate_golden_free(&q);
}

int main(void)
{
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    ddp_log_set_identity("unit", 0, 1);
    test_config();
    test_expect();
    test_burn();
    test_faults();
    test_rates();
    ddp_comm *c = self_comm();
    test_sweep(c);
    test_golden(c);
    ddp_comm_destroy(c);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return check_report("test_validate_unit");
}
