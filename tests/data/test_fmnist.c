/*
 * test_fmnist.c - import the real Fashion-MNIST (60000 train, 10000 test; IDX .gz under
 * /usr/share/datasets/fashion-mnist, or $DDP_FMNIST_DIR) and compare every pixel and
 * label the HDF5 reader returns, streamed and cached, with the IDX files. Exit 77 when
 * the dataset is not installed.
 */
#include "data/h5data.h"
#include "data/idx.h"
#include "core/util.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { PIX = 28 * 28, BATCH = 1000 };

/* Compare split `group` of out with the IDX pair, reading in shuffled batches. */
static void compare(const char *out, const char *group, const char *img_path, const char *lab_path,
                    int64_t want_n)
{
    char err[DDP_ERR_LEN] = "";
    ddp_idx *fi = ddp_idx_open(img_path, err, sizeof err);
    ddp_idx *fl = fi ? ddp_idx_open(lab_path, err, sizeof err) : NULL;
    ddp_h5split *s = fl ? ddp_h5split_open(out, group, err, sizeof err) : NULL;
    CHECK(s, "%s: %s", group, err);
    if (!s) {
        ddp_idx_close(fi);
        ddp_idx_close(fl);
        return;
    }
    int64_t n = ddp_h5split_count(s), dims[3];
    CHECK(n == want_n, "%s: %lld samples, expected %lld", group, (long long)n, (long long)want_n);
    CHECK(ddp_h5split_shape(s, dims) == 3 && dims[0] == 1 && dims[1] == 28 && dims[2] == 28,
          "%s: shape", group);
    CHECK(ddp_h5split_dtype(s) == DDP_H5DTYPE_UINT8 && ddp_h5split_classes(s) == 10,
          "%s: dtype/classes", group);
    uint8_t *px = malloc((size_t)(n * PIX)), *lab = malloc((size_t)n);
    CHECK(ddp_idx_read(fi, px, n, err, sizeof err) == 0 &&
              ddp_idx_read(fl, lab, n, err, sizeof err) == 0,
          "idx read: %s", err);
    for (int64_t i = 0; i < n; i++)
        if (ddp_h5split_labels(s)[i] != lab[i]) {
            CHECK(0, "%s: label %lld is %d, IDX says %d", group, (long long)i,
                  ddp_h5split_labels(s)[i], lab[i]);
            break;
        }
    CHECK(ddp_h5split_check_labels(s, 10, err, sizeof err) == 0, "%s", err);
    int64_t *idx = malloc(BATCH * sizeof *idx);
    float *x = malloc((size_t)BATCH * PIX * sizeof *x);
    for (int mode = 0; mode < 2; mode++) {
        if (mode)
            CHECK(ddp_h5split_cache(s, (size_t)1 << 30, err, sizeof err) == 1, "cache: %s", err);
        int64_t bad = 0;
        /* every sample once (a strided permutation), in batches */
        for (int64_t at = 0; at < n; at += BATCH) {
            int k = n - at < BATCH ? (int)(n - at) : BATCH;
            for (int i = 0; i < k; i++)
                idx[i] = ((at + i) * 7919) % n; /* 7919 is prime, coprime to 60000 and 10000 */
            CHECK(ddp_h5split_read(s, idx, k, x, err, sizeof err) == 0, "read: %s", err);
            for (int i = 0; i < k; i++)
                for (int j = 0; j < PIX; j++)
                    bad += x[(size_t)i * PIX + j] != (float)px[idx[i] * PIX + j] / 255.0f;
        }
        CHECK(bad == 0, "%s %s: %lld pixels differ", group, mode ? "cached" : "streamed",
              (long long)bad);
        printf("%s %s: %lld samples compared, %lld pixels differ\n", group,
               mode ? "cached" : "streamed", (long long)n, (long long)bad);
    }
    free(idx);
    free(x);
    free(px);
    free(lab);
    ddp_h5split_close(s);
    ddp_idx_close(fi);
    ddp_idx_close(fl);
}

int main(void)
{
    const char *dir = getenv("DDP_FMNIST_DIR");
    if (!dir || !dir[0])
        dir = "/usr/share/datasets/fashion-mnist";
    char err[DDP_ERR_LEN] = "";
    ddp_idx_files files;
    if (ddp_idx_find(dir, &files, err, sizeof err) != 0) {
        printf("SKIP: Fashion-MNIST not installed (%s)\n", err);
        return 77;
    }
    char tmp[] = "/tmp/ddp_fmnist_XXXXXX", out[64];
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(out, sizeof out, "%s/fmnist.h5", tmp);
    ddp_idx_summary sum;
    double t0 = ddp_now();
    CHECK(ddp_idx_import(&files, out, 0, "Fashion-MNIST", &sum, err, sizeof err) == 0, "import: %s",
          err);
    printf("import: %.2f s\n", ddp_now() - t0);
    CHECK(sum.n_train == 60000 && sum.n_test == 10000 && sum.classes == 10 &&
              sum.label_min[0] == 0 && sum.label_max[0] == 9,
          "summary");
    compare(out, "/train", files.train_images, files.train_labels, 60000);
    compare(out, "/test", files.test_images, files.test_labels, 10000);
    unlink(out);
    rmdir(tmp);
    printf("%s: %d failure(s)\n", check_failures ? "FAIL" : "PASS", check_failures);
    return check_failures ? 1 : 0;
}
