/*
 * test_idx.c - IDX reader and import against small IDX sets written here, raw and gzip:
 * exact round trip through the HDF5 reader, and every bad-input case failing with one
 * line naming the file, with neither OUT nor OUT.tmp left behind.
 * `test_idx --make-bad DIR` only writes the sets (DIR/<case>/ with the four standard
 * names) for test_cli.sh.
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
#include <zlib.h>

enum { NTRAIN = 50, NTEST = 20, ROWS = 6, COLS = 5 };

/* Bytes of an IDX file: magic (type 0x08 unless given), sizes, data. */
typedef struct {
    uint8_t *b;
    size_t n;
} blob;

static blob idx_bytes(int type, int ndims, const uint32_t *dims, const uint8_t *data)
{
    size_t payload = 1;
    for (int i = 0; i < ndims; i++)
        payload *= dims[i];
    blob o;
    o.n = 4 + 4 * (size_t)ndims + payload;
    o.b = malloc(o.n);
    o.b[0] = 0;
    o.b[1] = 0;
    o.b[2] = (uint8_t)type;
    o.b[3] = (uint8_t)ndims;
    for (int i = 0; i < ndims; i++) {
        o.b[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        o.b[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        o.b[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        o.b[7 + 4 * i] = (uint8_t)dims[i];
    }
    memcpy(o.b + 4 + 4 * ndims, data, payload);
    return o;
}

static void write_raw(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static void write_gz(const char *path, const uint8_t *b, size_t n)
{
    gzFile g = gzopen(path, "wb6");
    if (!g || gzwrite(g, b, (unsigned)n) != (int)n) {
        perror(path);
        exit(1);
    }
    gzclose(g);
}

static size_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* The reference set: images a pattern that deflate compresses, labels i % 7. */
static uint8_t train_img[NTRAIN * ROWS * COLS], test_img[NTEST * ROWS * COLS];
static uint8_t train_lab[NTRAIN], test_lab[NTEST];

static void make_reference(void)
{
    for (int i = 0; i < NTRAIN * ROWS * COLS; i++)
        train_img[i] = (uint8_t)((i * 37) % 251);
    for (int i = 0; i < NTEST * ROWS * COLS; i++)
        test_img[i] = (uint8_t)(255 - (i * 11) % 256);
    for (int i = 0; i < NTRAIN; i++)
        train_lab[i] = (uint8_t)(i % 7);
    for (int i = 0; i < NTEST; i++)
        test_lab[i] = (uint8_t)((i * 3) % 7);
}

/* Write a complete set into dir with the standard names; gz adds ".gz". The four files
 * are taken from the reference unless a case overrides one (override_idx 0..3). */
static void write_set(const char *dir, int gz, int override_idx, blob override)
{
    static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    uint32_t ti[3] = {NTRAIN, ROWS, COLS}, tl[1] = {NTRAIN}, vi[3] = {NTEST, ROWS, COLS},
             vl[1] = {NTEST};
    blob b[4] = {idx_bytes(8, 3, ti, train_img), idx_bytes(8, 1, tl, train_lab),
                 idx_bytes(8, 3, vi, test_img), idx_bytes(8, 1, vl, test_lab)};
    mkdir(dir, 0755);
    for (int k = 0; k < 4; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s%s", dir, names[k], gz ? ".gz" : "");
        const blob *w = k == override_idx ? &override : &b[k];
        if (gz)
            write_gz(path, w->b, w->n);
        else
            write_raw(path, w->b, w->n);
        free(b[k].b);
    }
}

/* Flip bytes in the middle of a file (a corrupt download). */
static void corrupt(const char *path)
{
    size_t n = file_size(path);
    FILE *f = fopen(path, "r+b");
    for (size_t at = n / 3; at < n / 3 + 8 && at < n; at++) {
        fseek(f, (long)at, SEEK_SET);
        int c = fgetc(f);
        fseek(f, (long)at, SEEK_SET);
        fputc(c ^ 0x5a, f);
    }
    fclose(f);
}

/* Flip one byte at offset `at` from the end (the gzip trailer: CRC32, then size). */
static void flip_from_end(const char *path, size_t at)
{
    size_t n = file_size(path);
    FILE *f = fopen(path, "r+b");
    fseek(f, (long)(n - at), SEEK_SET);
    int c = fgetc(f);
    fseek(f, (long)(n - at), SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
}

/* Cut a file to n bytes. */
static void truncate_to(const char *path, size_t n)
{
    if (truncate(path, (off_t)n) != 0)
        perror(path);
}

/* The bad sets: directory name, how to make it, substring of the message. */
typedef struct {
    const char *name;
    const char *expect;
} bad_set;

static const bad_set bad_sets[] = {
    {"bad_magic", "bad magic 0x12345678"},
    {"float_type", "(float32)"},
    {"truncated_raw", "truncated"},
    {"truncated_gz", "truncated"},
    {"cut_gz", "truncated"},
    {"corrupt_gz", "corrupt gzip"},
    {"crc_gz", "corrupt gzip"},
    {"count_mismatch", "49 labels but"},
    {"trailing_raw", "trailing data"},
    {"swapped", "labels file?"},
    {"zero_dim", "dimension 1 is 0"},
    {"missing_file", "no t10k-labels-idx1-ubyte[.gz]"},
    {"shape_mismatch", "sample shape 5x6 differs from 6x5"},
    {"too_many_dims", "declares 5 dimensions"},
};
#define N_BAD ((int)(sizeof bad_sets / sizeof bad_sets[0]))

static void make_bad_sets(const char *root)
{
    char dir[1024], path[1100];
    blob none = {NULL, 0};
    uint32_t tl49[1] = {NTRAIN - 1}, zero[3] = {NTRAIN, 0, COLS}, vi_other[3] = {NTEST, COLS, ROWS};
    uint8_t junk[4] = {0x12, 0x34, 0x56, 0x78};

    snprintf(dir, sizeof dir, "%s/bad_magic", root);
    write_set(dir, 0, 0, (blob){junk, 4});
    snprintf(dir, sizeof dir, "%s/float_type", root);
    uint32_t tl[1] = {NTRAIN};
    blob ft = idx_bytes(0x0D, 1, tl, train_lab);
    write_set(dir, 1, 1, ft);
    free(ft.b);

    snprintf(dir, sizeof dir, "%s/truncated_raw", root);
    write_set(dir, 0, -1, none);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    truncate_to(path, file_size(path) - 100);

    /* gzip of a short payload: the stream ends early, zlib reports it at the end */
    snprintf(dir, sizeof dir, "%s/truncated_gz", root);
    uint32_t ti[3] = {NTRAIN, ROWS, COLS};
    blob full = idx_bytes(8, 3, ti, train_img);
    blob cut = {full.b, full.n - 3 * ROWS * COLS};
    write_set(dir, 1, 0, cut);
    free(full.b);

    /* a gzip file cut short (an interrupted download) */
    snprintf(dir, sizeof dir, "%s/cut_gz", root);
    write_set(dir, 1, -1, none);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", dir);
    truncate_to(path, file_size(path) / 2);

    snprintf(dir, sizeof dir, "%s/corrupt_gz", root);
    write_set(dir, 1, -1, none);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    corrupt(path);

    /* intact deflate data, wrong CRC: only the check after the last record sees it */
    snprintf(dir, sizeof dir, "%s/crc_gz", root);
    write_set(dir, 1, -1, none);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    flip_from_end(path, 8);

    snprintf(dir, sizeof dir, "%s/count_mismatch", root);
    blob l49 = idx_bytes(8, 1, tl49, train_lab);
    write_set(dir, 1, 1, l49);
    free(l49.b);

    snprintf(dir, sizeof dir, "%s/trailing_raw", root);
    write_set(dir, 0, -1, none);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte", dir);
    FILE *f = fopen(path, "ab");
    fputs("extra", f);
    fclose(f);

    snprintf(dir, sizeof dir, "%s/swapped", root);
    blob lab = idx_bytes(8, 1, tl, train_lab);
    write_set(dir, 1, 0, lab); /* a labels file where the images should be */
    free(lab.b);

    snprintf(dir, sizeof dir, "%s/zero_dim", root);
    blob z = idx_bytes(8, 3, zero, train_img);
    write_set(dir, 0, 0, z);
    free(z.b);

    snprintf(dir, sizeof dir, "%s/missing_file", root);
    write_set(dir, 1, -1, none);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir);
    unlink(path);

    snprintf(dir, sizeof dir, "%s/shape_mismatch", root);
    blob o = idx_bytes(8, 3, vi_other, test_img);
    write_set(dir, 1, 2, o);
    free(o.b);

    snprintf(dir, sizeof dir, "%s/too_many_dims", root);
    uint8_t five[4 + 20] = {0, 0, 8, 5};
    write_set(dir, 1, 0, (blob){five, sizeof five});
}

/* Import dir into dir/out.h5; returns 0/-1 and leaves the message in err. */
static int import_dir(const char *dir, int classes, char *err, size_t errlen, char *out,
                      size_t outlen)
{
    ddp_idx_files files;
    snprintf(out, outlen, "%s/out.h5", dir);
    if (ddp_idx_find(dir, &files, err, errlen) != 0)
        return -1;
    return ddp_idx_import(&files, out, classes, "test", NULL, err, errlen);
}

/* The imported split must equal the reference exactly. */
static void check_split(const char *out, const char *group, const uint8_t *img, const uint8_t *lab,
                        int n)
{
    char err[DDP_ERR_LEN] = "";
    ddp_h5split *s = ddp_h5split_open(out, group, err, sizeof err);
    CHECK(s, "open %s: %s", group, err);
    if (!s)
        return;
    int64_t dims[3];
    CHECK(ddp_h5split_count(s) == n && ddp_h5split_shape(s, dims) == 3 && dims[0] == 1 &&
              dims[1] == ROWS && dims[2] == COLS,
          "%s shape", group);
    CHECK(ddp_h5split_dtype(s) == DDP_H5DTYPE_UINT8 && ddp_h5split_classes(s) == 7 &&
              !strcmp(ddp_h5split_labels_type(s), "uint8"),
          "%s dtype/classes/labels type", group);
    for (int i = 0; i < n; i++)
        CHECK(ddp_h5split_labels(s)[i] == lab[i], "%s label %d", group, i);
    int64_t idx[NTRAIN];
    float out_px[NTRAIN * ROWS * COLS];
    for (int i = 0; i < n; i++)
        idx[i] = n - 1 - i;
    CHECK(ddp_h5split_read(s, idx, n, out_px, err, sizeof err) == 0, "read: %s", err);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < ROWS * COLS; j++) {
            float want = (float)img[(n - 1 - i) * ROWS * COLS + j] / 255.0f;
            if (out_px[i * ROWS * COLS + j] != want) {
                CHECK(0, "%s pixel %d,%d", group, i, j);
                i = n;
                break;
            }
        }
    ddp_h5split_close(s);
}

static void check_good(const char *root)
{
    char dir[1024], out[1100], err[DDP_ERR_LEN] = "";
    blob none = {NULL, 0};
    for (int gz = 0; gz < 2; gz++) {
        snprintf(dir, sizeof dir, "%s/good_%s", root, gz ? "gz" : "raw");
        write_set(dir, gz, -1, none);
        CHECK(import_dir(dir, 0, err, sizeof err, out, sizeof out) == 0, "import %s: %s", dir, err);
        check_split(out, "/train", train_img, train_lab, NTRAIN);
        check_split(out, "/test", test_img, test_lab, NTEST);
        /* --classes below the largest label + 1 is refused, naming the labels file */
        CHECK(import_dir(dir, 6, err, sizeof err, out, sizeof out) == -1 &&
                  strstr(err, "train-labels-idx1-ubyte") && strstr(err, "label 6"),
              "classes 6: %s", err);
    }
    /* the sequential reader: shape, piecewise reads, reading past the end */
    snprintf(out, sizeof out, "%s/good_gz/train-images-idx3-ubyte.gz", root);
    ddp_idx *f = ddp_idx_open(out, err, sizeof err);
    CHECK(f, "open: %s", err);
    if (f) {
        int64_t d[DDP_IDX_MAX_DIMS];
        CHECK(ddp_idx_shape(f, d) == 3 && d[0] == NTRAIN && d[1] == ROWS && d[2] == COLS &&
                  ddp_idx_record_bytes(f) == ROWS * COLS,
              "idx shape");
        uint8_t buf[NTRAIN * ROWS * COLS];
        CHECK(ddp_idx_read(f, buf, 7, err, sizeof err) == 0 &&
                  ddp_idx_read(f, buf + 7 * ROWS * COLS, NTRAIN - 7, err, sizeof err) == 0 &&
                  memcmp(buf, train_img, sizeof buf) == 0,
              "piecewise read: %s", err);
        CHECK(ddp_idx_read(f, buf, 1, err, sizeof err) == -1, "read past the end must fail");
        ddp_idx_close(f);
    }
}

static void check_bad(const char *root)
{
    for (int i = 0; i < N_BAD; i++) {
        char dir[1024], out[1100], tmp[1200], err[DDP_ERR_LEN] = "";
        snprintf(dir, sizeof dir, "%s/%s", root, bad_sets[i].name);
        int rc = import_dir(dir, 0, err, sizeof err, out, sizeof out);
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        CHECK(rc == -1, "%s: import must fail", bad_sets[i].name);
        CHECK(strstr(err, bad_sets[i].expect) != NULL, "%s: message must say `%s`: %s",
              bad_sets[i].name, bad_sets[i].expect, err);
        CHECK(strstr(err, dir) != NULL, "%s: message must name the file: %s", bad_sets[i].name,
              err);
        CHECK(err[0] && !strchr(err, '\n'), "%s: one line", bad_sets[i].name);
        CHECK(access(out, F_OK) != 0 && access(tmp, F_OK) != 0, "%s: output left behind",
              bad_sets[i].name);
        printf("ok   %-15s %s\n", bad_sets[i].name, err);
    }
    char err[DDP_ERR_LEN] = "";
    CHECK(!ddp_idx_open("/nonexistent/train-images-idx3-ubyte", err, sizeof err) &&
              strstr(err, "No such file"),
          "missing file: %s", err);
}

int main(int argc, char **argv)
{
    make_reference();
    if (argc == 3 && !strcmp(argv[1], "--make-bad")) {
        make_bad_sets(argv[2]);
        return 0;
    }
    char root[] = "/tmp/ddp_idx_XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    check_good(root);
    make_bad_sets(root);
    check_bad(root);
    return check_report_dir("test_idx", root);
}
