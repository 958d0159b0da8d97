/*
 * bench_h5read.c - measurement, not a test: ddp_h5split_read throughput for batches of
 * random indices, streamed from the file and from the cache, plus open and cache time.
 * usage: bench_h5read [FILE.h5 [GROUP [BATCH]]]; without FILE it imports Fashion-MNIST
 * from /usr/share/datasets/fashion-mnist (or $DDP_FMNIST_DIR) into a temporary file.
 * Prints a table (with units) and one JSON line. The file is usually in the page cache
 * (just written or read), so "streamed" measures HDF5 selection + copy, not the disk.
 */
#include "data/h5data.h"
#include "data/idx.h"
#include "core/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Samples per second over `batches` random batches (a fresh permutation slice each). */
static double run(ddp_h5split *s, int batch, int batches, int64_t *perm, int64_t *idx, float *x)
{
    char err[DDP_ERR_LEN];
    int64_t n = ddp_h5split_count(s);
    double t0 = ddp_now();
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < batch; i++) {
            int64_t j = i + (int64_t)(next() % (uint64_t)(n - i)); /* partial Fisher-Yates */
            int64_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
            idx[i] = perm[i];
        }
        if (ddp_h5split_read(s, idx, batch, x, err, sizeof err) != 0) {
            fprintf(stderr, "read: %s\n", err);
            exit(1);
        }
    }
    return (double)batch * batches / (ddp_now() - t0);
}

int main(int argc, char **argv)
{
    char err[DDP_ERR_LEN], tmpdir[] = "/tmp/ddp_bench_XXXXXX", path[128];
    const char *file = argc > 1 ? argv[1] : NULL, *group = argc > 2 ? argv[2] : "/train";
    int batch = argc > 3 ? atoi(argv[3]) : 256;
    if (batch < 1) {
        fprintf(stderr, "bad batch\n");
        return 2;
    }
    if (!file) {
        const char *dir = getenv("DDP_FMNIST_DIR");
        ddp_idx_files files;
        if (ddp_idx_find(dir && dir[0] ? dir : "/usr/share/datasets/fashion-mnist", &files, err,
                         sizeof err) != 0 ||
            !mkdtemp(tmpdir)) {
            fprintf(stderr, "no input: %s\n", err);
            return 77;
        }
        snprintf(path, sizeof path, "%s/fmnist.h5", tmpdir);
        if (ddp_idx_import(&files, path, 0, "bench", NULL, err, sizeof err) != 0) {
            fprintf(stderr, "import: %s\n", err);
            return 1;
        }
        file = path;
    }
    double t0 = ddp_now();
    ddp_h5split *s = ddp_h5split_open(file, group, err, sizeof err);
    double t_open = ddp_now() - t0;
    if (!s) {
        fprintf(stderr, "%s\n", err);
        return 3;
    }
    int64_t n = ddp_h5split_count(s), d = ddp_h5split_sample_elems(s);
    int64_t *perm = malloc((size_t)n * sizeof *perm), *idx = malloc((size_t)batch * sizeof *idx);
    float *x = malloc((size_t)batch * (size_t)d * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    run(s, batch, 5, perm, idx, x); /* warm up: scratch allocation, page cache */
    double streamed = run(s, batch, 200, perm, idx, x);
    t0 = ddp_now();
    int cached_ok = ddp_h5split_cache(s, (size_t)16 << 30, err, sizeof err);
    double t_cache = ddp_now() - t0;
    double cached = cached_ok == 1 ? run(s, batch, 2000, perm, idx, x) : 0;
    printf("%-28s %12s %12s %12s %12s %12s\n", "file", "N", "open", "cache", "streamed", "cached");
    printf("%-28s %12s %12s %12s %12s %12s\n", "", "samples", "ms", "ms", "samples/s", "samples/s");
    printf("%-28.28s %12lld %12.2f %12.2f %12.0f %12.0f\n", group, (long long)n, 1e3 * t_open,
           1e3 * t_cache, streamed, cached);
    printf("{\"bench\":\"h5read\",\"group\":\"%s\",\"n\":%lld,\"sample_elems\":%lld,\"batch\":%d,"
           "\"open_ms\":%.3f,\"cache_ms\":%.3f,\"streamed_samples_per_s\":%.0f,"
           "\"cached_samples_per_s\":%.0f}\n",
           group, (long long)n, (long long)d, batch, 1e3 * t_open, 1e3 * t_cache, streamed, cached);
    ddp_h5split_close(s);
    free(perm);
    free(idx);
    free(x);
    if (file == path) {
        unlink(path);
        rmdir(tmpdir);
    }
    return 0;
}
