/*
 * test_synth.c - synthetic datasets: deterministic for a seed and independent of the
 * chunk size, different for another seed, uint8 = round(255 * float32), labels in range,
 * memory bounded whatever N is, learnable (a nearest-class-mean classifier - linear - is
 * far above chance), and bad specs refused with one line naming the option.
 */
#include "data/h5data.h"
#include "data/synth.h"
#include "core/util.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static ddp_synth_spec small_spec(int rank, int64_t d0, int64_t d1, int64_t d2, int64_t ntrain,
                                 int64_t ntest)
{
    ddp_synth_spec s;
    ddp_synth_defaults(&s);
    s.rank = rank;
    s.dims[0] = d0;
    s.dims[1] = d1;
    s.dims[2] = d2;
    s.n_train = ntrain;
    s.n_test = ntest;
    s.seed = 7;
    return s;
}

/* Whole split as float (from the cache), labels copied; caller frees. */
static float *load(const char *path, const char *group, int32_t **labels, int64_t *n, int64_t *d)
{
    char err[DDP_ERR_LEN] = "";
    ddp_h5split *s = ddp_h5split_open(path, group, err, sizeof err);
    CHECK(s, "open %s %s: %s", path, group, err);
    if (!s)
        return NULL;
    *n = ddp_h5split_count(s);
    *d = ddp_h5split_sample_elems(s);
    CHECK(ddp_h5split_cache(s, SIZE_MAX, err, sizeof err) == 1, "cache: %s", err);
    float *x = malloc((size_t)(*n * *d) * sizeof *x);
    int64_t *idx = malloc((size_t)*n * sizeof *idx);
    for (int64_t i = 0; i < *n; i++)
        idx[i] = i;
    CHECK(ddp_h5split_read(s, idx, (int)*n, x, err, sizeof err) == 0, "read: %s", err);
    *labels = malloc((size_t)*n * sizeof **labels);
    memcpy(*labels, ddp_h5split_labels(s), (size_t)*n * sizeof **labels);
    free(idx);
    ddp_h5split_close(s);
    return x;
}

static void check_determinism(const char *dir)
{
    char a[1024], b[1024], c[1024], err[DDP_ERR_LEN] = "";
    snprintf(a, sizeof a, "%s/a.h5", dir);
    snprintf(b, sizeof b, "%s/b.h5", dir);
    snprintf(c, sizeof c, "%s/c.h5", dir);
    ddp_synth_spec s = small_spec(3, 2, 9, 7, 1000, 300);
    CHECK(ddp_synth_write(&s, a, err, sizeof err) == 0, "write a: %s", err);
    s.chunk_bytes = 777; /* 6 rows a chunk, a ragged last chunk */
    CHECK(ddp_synth_write(&s, b, err, sizeof err) == 0, "write b: %s", err);
    s.seed = 8;
    CHECK(ddp_synth_write(&s, c, err, sizeof err) == 0, "write c: %s", err);
    for (int split = 0; split < 2; split++) {
        const char *g = split ? "/test" : "/train";
        int32_t *la, *lb, *lc;
        int64_t n, d;
        float *xa = load(a, g, &la, &n, &d), *xb = load(b, g, &lb, &n, &d),
              *xc = load(c, g, &lc, &n, &d);
        if (xa && xb && xc) {
            CHECK(n == (split ? 300 : 1000) && d == 2 * 9 * 7, "shape");
            CHECK(!memcmp(xa, xb, (size_t)(n * d) * sizeof *xa) &&
                      !memcmp(la, lb, (size_t)n * sizeof *la),
                  "%s: chunk size changed the data", g);
            CHECK(memcmp(xa, xc, (size_t)(n * d) * sizeof *xa) != 0, "%s: seed ignored", g);
            int64_t hist[10] = {0};
            for (int64_t i = 0; i < n; i++) {
                CHECK(la[i] >= 0 && la[i] < 10, "label %d", la[i]);
                hist[la[i] % 10]++;
            }
            for (int k = 0; k < 10; k++)
                CHECK(hist[k] > n / 20, "%s: class %d has only %lld samples", g, k,
                      (long long)hist[k]);
        }
        free(xa), free(xb), free(xc), free(la), free(lb), free(lc);
    }

    /* generate(): any slice equals the same samples of a larger range; uint8 = float */
    s = small_spec(1, 50, 0, 0, 100, 100);
    ddp_synth *g = ddp_synth_create(&s, err, sizeof err);
    s.dtype = DDP_H5DTYPE_FLOAT32;
    ddp_synth *gf = ddp_synth_create(&s, err, sizeof err);
    CHECK(g && gf, "create: %s", err);
    if (g && gf) {
        uint8_t all[100 * 50], part[30 * 50];
        float allf[100 * 50];
        int32_t l[100], lp[30], lf[100];
        ddp_synth_generate(g, 1, 0, 100, all, l);
        ddp_synth_generate(g, 1, 55, 30, part, lp);
        ddp_synth_generate(gf, 1, 0, 100, allf, lf);
        CHECK(!memcmp(all + 55 * 50, part, sizeof part) && !memcmp(l + 55, lp, sizeof lp),
              "slice differs");
        CHECK(!memcmp(l, lf, sizeof l), "labels differ between dtypes");
        int bad = 0;
        for (int i = 0; i < 100 * 50; i++)
            bad += all[i] != (uint8_t)(allf[i] * 255.0f + 0.5f) || allf[i] < 0 || allf[i] > 1;
        CHECK(bad == 0, "%d uint8 values differ from round(255 * float32)", bad);
        ddp_synth_generate(g, 0, 0, 30, part, lp); /* train differs from test */
        CHECK(memcmp(all, part, 30 * 50) != 0, "train and test share samples");
    }
    ddp_synth_destroy(g);
    ddp_synth_destroy(gf);
}

/* Nearest class mean (a linear classifier) fit on train, accuracy on test. */
static double nearest_mean_accuracy(const char *path, int classes)
{
    int32_t *ly, *lt;
    int64_t n, nt, d;
    float *x = load(path, "/train", &ly, &n, &d), *xt = load(path, "/test", &lt, &nt, &d);
    if (!x || !xt)
        return 0;
    double *mean = calloc((size_t)(classes * d), sizeof *mean);
    int64_t *cnt = calloc((size_t)classes, sizeof *cnt);
    for (int64_t i = 0; i < n; i++) {
        cnt[ly[i]]++;
        for (int64_t j = 0; j < d; j++)
            mean[ly[i] * d + j] += x[i * d + j];
    }
    for (int k = 0; k < classes; k++)
        for (int64_t j = 0; j < d; j++)
            mean[k * d + j] /= cnt[k] ? (double)cnt[k] : 1.0;
    int64_t right = 0;
    for (int64_t i = 0; i < nt; i++) {
        int best = 0;
        double bd = INFINITY;
        for (int k = 0; k < classes; k++) {
            double s = 0;
            for (int64_t j = 0; j < d; j++) {
                double e = xt[i * d + j] - mean[k * d + j];
                s += e * e;
            }
            if (s < bd)
                bd = s, best = k;
        }
        right += best == lt[i];
    }
    free(x), free(xt), free(ly), free(lt), free(mean), free(cnt);
    return (double)right / (double)nt;
}

static void check_learnable(const char *dir)
{
    static const int shapes[][4] = {{1, 784, 0, 0}, {3, 1, 28, 28}, {3, 3, 16, 16}, {1, 32, 0, 0}};
    for (int i = 0; i < 4; i++) {
        char path[1024], err[DDP_ERR_LEN] = "";
        snprintf(path, sizeof path, "%s/learn%d.h5", dir, i);
        ddp_synth_spec s =
            small_spec(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], 3000, 1000);
        CHECK(ddp_synth_write(&s, path, err, sizeof err) == 0, "write: %s", err);
        double acc = nearest_mean_accuracy(path, 10);
        printf("nearest class mean, shape %d,%d,%d: test accuracy %.3f (chance 0.100)\n",
               shapes[i][1], shapes[i][2], shapes[i][3], acc);
        CHECK(acc > 0.25, "shape %d: linear accuracy %.3f is not well above chance", i, acc);
        unlink(path);
    }
}

/* Peak RSS growth while writing a set 5x larger than the allowed growth. */
static void check_memory_bound(const char *dir)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("memory bound: skipped under AddressSanitizer (its allocator keeps freed memory)\n");
    (void)dir;
#else
    char path[1024], err[DDP_ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/big.h5", dir);
    ddp_synth_spec s = small_spec(1, 1000, 0, 0, 80000, 1000); /* 81 MB of uint8 */
    s.chunk_bytes = (size_t)1 << 20;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    CHECK(ddp_synth_write(&s, path, err, sizeof err) == 0, "write: %s", err);
    getrusage(RUSAGE_SELF, &r1);
    long grew_kb = r1.ru_maxrss - r0.ru_maxrss;
    printf("memory bound: writing 81 MB grew peak RSS by %ld KiB\n", grew_kb);
    CHECK(grew_kb < 16 * 1024, "peak RSS grew by %ld KiB writing 81 MB in 1 MiB chunks", grew_kb);
    unlink(path);
#endif
}

static void check_bad_specs(void)
{
    struct {
        const char *what;
        ddp_synth_spec s;
        const char *expect;
    } cases[8];
    int n = 0;
    ddp_synth_spec base;
    ddp_synth_defaults(&base);
#define BAD(field_expr, text)             \
    do {                                  \
        cases[n].s = base;                \
        ddp_synth_spec *sp = &cases[n].s; \
        field_expr;                       \
        cases[n].what = #field_expr;      \
        cases[n].expect = text;           \
        n++;                              \
    } while (0)
    BAD(sp->classes = 1, "--classes 1");
    BAD(sp->rank = 2, "--shape");
    BAD(sp->dims[1] = 0, "--shape");
    BAD(sp->n_train = 0, "--train 0");
    BAD(sp->n_test = -5, "--test -5");
    BAD(sp->noise = -1, "--noise");
    BAD(sp->noise = NAN, "--noise");
    BAD((sp->classes = 1 << 20, sp->dims[1] = 1000, sp->dims[2] = 1000), "prototypes");
#undef BAD
    for (int i = 0; i < n; i++) {
        char err[DDP_ERR_LEN] = "";
        CHECK(ddp_synth_check(&cases[i].s, err, sizeof err) == -1, "%s must fail", cases[i].what);
        CHECK(strstr(err, cases[i].expect) && !strchr(err, '\n'), "%s: message `%s`", cases[i].what,
              err);
        CHECK(ddp_synth_create(&cases[i].s, err, sizeof err) == NULL, "%s: create", cases[i].what);
    }
    char err[DDP_ERR_LEN] = "";
    CHECK(ddp_synth_check(&base, err, sizeof err) == 0, "defaults: %s", err);
}

int main(void)
{
    char dir[] = "/tmp/ddp_synth_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    check_memory_bound(dir);
    check_determinism(dir);
    check_learnable(dir);
    check_bad_specs();
    return check_report_dir("test_synth", dir);
}
