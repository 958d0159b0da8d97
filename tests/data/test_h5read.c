/*
 * test_h5read.c - ddp_h5split_* against files built here with the HDF5 API:
 *  - exact values of ddp_h5split_read for random index lists (duplicates, any order),
 *    streamed and cached, uint8 and float32, (N,D) and (N,C,H,W), contiguous and chunked;
 *  - every validation failure gives NULL/-1 and one line naming the file and culprit.
 * `test_h5read --make-bad DIR` only writes the bad files (test_cli.sh feeds them to
 * `ddptrain data info`).
 */
#include "data/h5data.h"
#include "core/hash.h"
#include "core/util.h"
#include "check.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_state = 42;
static uint64_t rnd(void)
{
    return ddp_splitmix64(&rng_state);
}

/* Write dataset `name` in loc: file type ft, memory type mt, shape d[0..rank), optional
 * chunking (chunk rows > 0, with gzip). */
static void put(hid_t loc, const char *name, hid_t ft, hid_t mt, int rank, const hsize_t *d,
                const void *data, hsize_t chunk_rows)
{
    hid_t sp = H5Screate_simple(rank, d, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunk_rows && d[0] > 0) {
        hsize_t c[8];
        for (int i = 0; i < rank; i++)
            c[i] = d[i];
        c[0] = chunk_rows;
        H5Pset_chunk(dcpl, rank, c);
        H5Pset_deflate(dcpl, 4);
    }
    hid_t ds = H5Dcreate2(loc, name, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0) {
        fprintf(stderr, "cannot create %s\n", name);
        exit(1);
    }
    if (data && H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
        fprintf(stderr, "cannot write %s\n", name);
        exit(1);
    }
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
}

static hid_t new_file(const char *path)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "cannot create %s\n", path);
        exit(1);
    }
    return f;
}

static hid_t new_group(hid_t f, const char *name)
{
    return H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

/* Random uint8 (N, C, H, W) or float32 (N, D) split with labels in [0, 10). */
typedef struct {
    int64_t n, elems;
    int rank; /* 2 or 4 (file rank) */
    hsize_t dims[4];
    int is_float;
    uint8_t *u8;
    float *f32;
    int32_t *labels;
} ref_split;

static void make_ref(ref_split *r, int is_float, int rank, const hsize_t *dims)
{
    memset(r, 0, sizeof *r);
    r->is_float = is_float;
    r->rank = rank;
    r->n = (int64_t)dims[0];
    r->elems = 1;
    for (int i = 0; i < rank; i++) {
        r->dims[i] = dims[i];
        if (i)
            r->elems *= (int64_t)dims[i];
    }
    size_t total = (size_t)(r->n * r->elems);
    if (is_float) {
        r->f32 = malloc(total * sizeof(float));
        for (size_t i = 0; i < total; i++)
            r->f32[i] = (float)((double)(rnd() >> 11) * 0x1p-53 * 4.0 - 2.0);
    } else {
        r->u8 = malloc(total);
        for (size_t i = 0; i < total; i++)
            r->u8[i] = (uint8_t)rnd();
    }
    r->labels = malloc((size_t)r->n * sizeof(int32_t));
    for (int64_t i = 0; i < r->n; i++)
        r->labels[i] = (int32_t)(rnd() % 10);
}

static void free_ref(ref_split *r)
{
    free(r->u8);
    free(r->f32);
    free(r->labels);
}

/* Write r as group g; labels stored as int64 to exercise type conversion; float32
 * big-endian when big_endian (HDF5 converts: not the pread fast path). */
static void write_ref(hid_t f, const char *g, const ref_split *r, hsize_t chunk_rows,
                      int big_endian)
{
    hid_t grp = new_group(f, g);
    put(grp, "images", r->is_float ? (big_endian ? H5T_IEEE_F32BE : H5T_IEEE_F32LE) : H5T_STD_U8LE,
        r->is_float ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT8, r->rank, r->dims,
        r->is_float ? (const void *)r->f32 : (const void *)r->u8, chunk_rows);
    hsize_t n = (hsize_t)r->n;
    put(grp, "labels", H5T_STD_I64LE, H5T_NATIVE_INT32, 1, &n, r->labels, 0);
    H5Gclose(grp);
}

/* Check one read of idx[0..n) against the reference. */
static void check_read(ddp_h5split *s, const ref_split *r, const int64_t *idx, int n, float *out,
                       const char *what)
{
    char err[DDP_ERR_LEN] = "";
    int rc = ddp_h5split_read(s, idx, n, out, err, sizeof err);
    CHECK(rc == 0, "%s: read failed: %s", what, err);
    if (rc)
        return;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++)
        for (int64_t j = 0; j < r->elems; j++) {
            size_t src = (size_t)(idx[i] * r->elems + j);
            float want = r->is_float ? r->f32[src] : (float)r->u8[src] / 255.0f;
            float got = out[(size_t)i * (size_t)r->elems + (size_t)j];
            if (memcmp(&want, &got, sizeof want) != 0) {
                CHECK(0, "%s: sample %d (row %lld) elem %lld: got %.9g want %.9g", what, i,
                      (long long)idx[i], (long long)j, got, want);
                bad = 1;
                break;
            }
        }
}

/* Random batches (sizes 1..300, duplicates, runs) from the split in both modes. */
static void check_split(const char *path, const char *group, const ref_split *r)
{
    char err[DDP_ERR_LEN] = "";
    ddp_h5split *s = ddp_h5split_open(path, group, err, sizeof err);
    CHECK(s != NULL, "open %s %s: %s", path, group, err);
    if (!s)
        return;
    CHECK(ddp_h5split_count(s) == r->n, "count %lld", (long long)ddp_h5split_count(s));
    CHECK(ddp_h5split_sample_elems(s) == r->elems, "elems");
    int64_t dims[3];
    int sr = ddp_h5split_shape(s, dims);
    CHECK(sr == (r->rank == 2 ? 1 : 3), "shape rank %d", sr);
    for (int i = 0; i < sr; i++)
        CHECK(dims[i] == (int64_t)r->dims[i + 1], "dim %d", i);
    CHECK(ddp_h5split_dtype(s) == (r->is_float ? DDP_H5DTYPE_FLOAT32 : DDP_H5DTYPE_UINT8), "dtype");
    CHECK(!strcmp(ddp_h5split_labels_type(s), "int64"), "labels type %s",
          ddp_h5split_labels_type(s));
    CHECK(memcmp(ddp_h5split_labels(s), r->labels, (size_t)r->n * sizeof(int32_t)) == 0,
          "labels differ");
    CHECK(ddp_h5split_check_labels(s, 10, err, sizeof err) == 0, "labels in range: %s", err);

    enum { MAXB = 700 };
    int64_t idx[MAXB];
    float *out = malloc((size_t)MAXB * (size_t)r->elems * sizeof(float));
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 1) {
            CHECK(ddp_h5split_cache(s, 1, err, sizeof err) == 0, "tiny cache must refuse");
            CHECK(ddp_h5split_cache(s, SIZE_MAX, err, sizeof err) == 1, "cache: %s", err);
        }
        for (int t = 0; t < 40; t++) {
            int n = 1 + (int)(rnd() % 300);
            for (int i = 0; i < n; i++) {
                uint64_t kind = rnd() % 8;
                if (i > 0 && kind == 0)
                    idx[i] = idx[i - 1]; /* duplicate */
                else if (i > 0 && kind == 1 && idx[i - 1] + 1 < r->n)
                    idx[i] = idx[i - 1] + 1; /* run */
                else
                    idx[i] = (int64_t)(rnd() % (uint64_t)r->n);
            }
            check_read(s, r, idx, n, out, mode ? "cached" : "streamed");
        }
        /* whole split in order, and in reverse (one run; many runs) */
        int n = r->n < MAXB ? (int)r->n : MAXB;
        for (int i = 0; i < n; i++)
            idx[i] = i;
        check_read(s, r, idx, n, out, mode ? "cached in order" : "streamed in order");
        for (int i = 0; i < n; i++)
            idx[i] = r->n - 1 - i;
        check_read(s, r, idx, n, out, mode ? "cached reverse" : "streamed reverse");
        /* every other row, backwards: N/2 runs, more than one HDF5 union of 256 runs */
        n = 0;
        for (int64_t i = r->n - 1; i >= 0 && n < MAXB; i -= 2)
            idx[n++] = i;
        check_read(s, r, idx, n, out, mode ? "cached every other" : "streamed every other");
        CHECK(ddp_h5split_read(s, idx, 0, out, err, sizeof err) == 0, "empty read");
        idx[0] = r->n;
        CHECK(ddp_h5split_read(s, idx, 1, out, err, sizeof err) == -1 && strstr(err, "outside"),
              "index N must fail: %s", err);
        idx[0] = -1;
        CHECK(ddp_h5split_read(s, idx, 1, out, err, sizeof err) == -1, "index -1 must fail");
    }
    free(out);
    ddp_h5split_close(s);
}

static void good_files(const char *dir)
{
    char path[1024];
    ref_split a, b, c, d, e;
    hsize_t da[4] = {1000, 2, 3, 5}, db[2] = {777, 13}, dc[4] = {600, 1, 7, 9}, dd[2] = {300, 40};
    hsize_t de[2] = {700, 6};
    make_ref(&a, 0, 4, da);
    make_ref(&b, 1, 2, db);
    make_ref(&c, 1, 4, dc);
    make_ref(&d, 0, 2, dd);
    make_ref(&e, 1, 2, de);
    snprintf(path, sizeof path, "%s/good.h5", dir);
    hid_t f = new_file(path);
    write_ref(f, "/u8_nchw", &a, 0, 0);           /* pread fast path */
    write_ref(f, "/f32_nd", &b, 0, 0);            /* pread fast path */
    write_ref(f, "/f32_nchw_chunked", &c, 64, 0); /* HDF5 path, gzip chunks */
    write_ref(f, "/u8_nd_chunked", &d, 7, 0);     /* HDF5 path */
    write_ref(f, "/f32be_nd", &e, 0, 1);          /* HDF5 path, byte-order conversion */
    H5Fclose(f);
    check_split(path, "/u8_nchw", &a);
    check_split(path, "f32_nd", &b); /* no leading slash */
    check_split(path, "/f32_nchw_chunked", &c);
    check_split(path, "/u8_nd_chunked", &d);
    check_split(path, "/f32be_nd", &e);

    /* check_labels: a label out of range names the index and value */
    char err[DDP_ERR_LEN] = "";
    ddp_h5split *s = ddp_h5split_open(path, "/u8_nchw", err, sizeof err);
    if (s) {
        int64_t first = -1;
        for (int64_t i = 0; i < a.n && first < 0; i++)
            if (a.labels[i] >= 5)
                first = i;
        CHECK(ddp_h5split_check_labels(s, 5, err, sizeof err) == -1, "check_labels 5");
        char want[64];
        snprintf(want, sizeof want, "index %lld", (long long)first);
        CHECK(strstr(err, want) && strstr(err, path) && strstr(err, "/u8_nchw") &&
                  !strchr(err, '\n'),
              "check_labels message: %s", err);
        ddp_h5split_close(s);
    }
    free_ref(&a);
    free_ref(&b);
    free_ref(&c);
    free_ref(&d);
    free_ref(&e);
}

/* The bad files: name, group to open, substring the message must hold. */
typedef struct {
    const char *file;
    const char *group;
    const char *expect;
} bad_case;

static const bad_case bad_cases[] = {
    {"missing.h5", "/train", "No such file"},
    {"text.h5", "/train", "not an HDF5 file"},
    {"nogroup.h5", "/train", "no group /train"},
    {"noimages.h5", "/train", "no dataset `images`"},
    {"nolabels.h5", "/train", "no dataset `labels`"},
    {"rank3.h5", "/train", "rank 3"},
    {"int16.h5", "/train", "dtype int16"},
    {"float64.h5", "/train", "dtype float64"},
    {"floatlabels.h5", "/train", "labels has dtype float32"},
    {"labelsrank2.h5", "/train", "labels has rank 2"},
    {"mismatch.h5", "/train", "labels has 9"},
    {"empty.h5", "/train", "empty"},
    {"imagesgroup.h5", "/train", "images is not a dataset"},
    {"biglabel.h5", "/train", "does not fit int32"},
    {"zerodim.h5", "/train", "must be > 0"},
};
#define N_BAD ((int)(sizeof bad_cases / sizeof bad_cases[0]))

/* Group /train with images of (file type ft, rank r, dims d) and labels (lt, lr, ld). */
static void bad_file(const char *dir, const char *name, hid_t ft, int r, const hsize_t *d, hid_t lt,
                     int lr, const hsize_t *ld)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    hid_t f = new_file(path);
    hid_t g = new_group(f, "/train");
    hsize_t ni = 1, nl = 1;
    for (int i = 0; i < r; i++)
        ni *= d[i];
    for (int i = 0; i < lr; i++)
        nl *= ld[i];
    if (ft >= 0) {
        double *z = calloc(ni ? ni : 1, sizeof *z);
        put(g, "images", ft, H5T_NATIVE_DOUBLE, r, d, ni ? z : NULL, 0);
        free(z);
    }
    if (lt >= 0) {
        long long *z = calloc(nl ? nl : 1, sizeof *z);
        if (!strcmp(name, "biglabel.h5"))
            z[3] = 5000000000LL;
        put(g, "labels", lt, H5T_NATIVE_LLONG, lr, ld, nl ? z : NULL, 0);
        free(z);
    }
    H5Gclose(g);
    H5Fclose(f);
}

static void make_bad(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/text.h5", dir);
    FILE *t = fopen(path, "w");
    fputs("this is not an HDF5 file\n", t);
    fclose(t);
    snprintf(path, sizeof path, "%s/nogroup.h5", dir);
    hid_t f = new_file(path);
    H5Gclose(new_group(f, "/test"));
    H5Fclose(f);
    hid_t g;

    hsize_t i4[4] = {10, 1, 4, 4}, l1[1] = {10}, i3[3] = {10, 4, 4}, l2[2] = {10, 1};
    hsize_t l9[1] = {9}, e4[4] = {0, 1, 4, 4}, e1[1] = {0}, z4[4] = {10, 1, 0, 4};
    bad_file(dir, "noimages.h5", -1, 0, NULL, H5T_STD_U8LE, 1, l1);
    bad_file(dir, "nolabels.h5", H5T_STD_U8LE, 4, i4, -1, 0, NULL);
    bad_file(dir, "rank3.h5", H5T_STD_U8LE, 3, i3, H5T_STD_U8LE, 1, l1);
    bad_file(dir, "int16.h5", H5T_STD_I16LE, 4, i4, H5T_STD_U8LE, 1, l1);
    bad_file(dir, "float64.h5", H5T_IEEE_F64LE, 4, i4, H5T_STD_U8LE, 1, l1);
    bad_file(dir, "floatlabels.h5", H5T_STD_U8LE, 4, i4, H5T_IEEE_F32LE, 1, l1);
    bad_file(dir, "labelsrank2.h5", H5T_STD_U8LE, 4, i4, H5T_STD_I32LE, 2, l2);
    bad_file(dir, "mismatch.h5", H5T_STD_U8LE, 4, i4, H5T_STD_U8LE, 1, l9);
    bad_file(dir, "empty.h5", H5T_STD_U8LE, 4, e4, H5T_STD_U8LE, 1, e1);
    bad_file(dir, "biglabel.h5", H5T_IEEE_F32LE, 4, i4, H5T_STD_I64LE, 1, l1);
    bad_file(dir, "zerodim.h5", H5T_STD_U8LE, 4, z4, H5T_STD_U8LE, 1, l1);

    /* valid layout, but a label (7) outside the group's `classes` (5) */
    snprintf(path, sizeof path, "%s/labelrange.h5", dir);
    f = new_file(path);
    g = new_group(f, "/train");
    put(g, "images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, i4, (uint8_t[160]){0}, 0);
    put(g, "labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, l1,
        (uint8_t[10]){0, 1, 2, 3, 4, 0, 7, 1, 2, 3}, 0);
    int five = 5;
    hid_t asp = H5Screate(H5S_SCALAR);
    hid_t at = H5Acreate2(g, "classes", H5T_STD_I32LE, asp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, H5T_NATIVE_INT, &five);
    H5Aclose(at);
    H5Sclose(asp);
    H5Gclose(g);
    H5Fclose(f);

    snprintf(path, sizeof path, "%s/imagesgroup.h5", dir);
    f = new_file(path);
    g = new_group(f, "/train");
    H5Gclose(new_group(g, "images"));
    put(g, "labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, l1, (uint8_t[10]){0}, 0);
    H5Gclose(g);
    H5Fclose(f);
}

static void check_bad(const char *dir)
{
    for (int i = 0; i < N_BAD; i++) {
        char path[1024], err[DDP_ERR_LEN] = "";
        snprintf(path, sizeof path, "%s/%s", dir, bad_cases[i].file);
        ddp_h5split *s = ddp_h5split_open(path, bad_cases[i].group, err, sizeof err);
        CHECK(s == NULL, "%s: open must fail", bad_cases[i].file);
        ddp_h5split_close(s);
        CHECK(strstr(err, path) != NULL, "%s: message must name the file: %s", bad_cases[i].file,
              err);
        CHECK(strstr(err, bad_cases[i].expect) != NULL, "%s: message must say `%s`: %s",
              bad_cases[i].file, bad_cases[i].expect, err);
        CHECK(strchr(err, '\n') == NULL && err[0], "%s: one non-empty line: %s", bad_cases[i].file,
              err);
        printf("ok   %-16s %s\n", bad_cases[i].file, err);
    }
    /* labelrange.h5 opens (the layout is fine) but check_labels against `classes` fails */
    char path[1024], err[DDP_ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/labelrange.h5", dir);
    ddp_h5split *s = ddp_h5split_open(path, "/train", err, sizeof err);
    CHECK(s && ddp_h5split_classes(s) == 5, "labelrange.h5 opens: %s", err);
    if (s) {
        CHECK(ddp_h5split_check_labels(s, ddp_h5split_classes(s), err, sizeof err) == -1 &&
                  strstr(err, "label 7 at index 6") && strstr(err, "[0, 5)"),
              "labelrange: %s", err);
        ddp_h5split_close(s);
    }
}

/* Writer round trip: chunked appends, uint8 labels below 257 classes, int32 above, tmp gone. */
static void check_writer(const char *dir)
{
    char path[1024], tmp[1100], err[DDP_ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/written.h5", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int64_t dims[3] = {3, 2, 2};
    uint8_t img[12 * 5];
    int32_t lab[5];
    for (int i = 0; i < 60; i++)
        img[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 5; i++)
        lab[i] = i * 100;
    ddp_h5writer *w = ddp_h5writer_create(path, "unit test", err, sizeof err);
    CHECK(w != NULL, "create: %s", err);
    if (!w)
        return;
    CHECK(access(tmp, F_OK) == 0 && access(path, F_OK) != 0, "writes to OUT.tmp first");
    CHECK(ddp_h5writer_begin(w, "/train", 5, 3, dims, DDP_H5DTYPE_UINT8, 1000, err, sizeof err) ==
              0,
          "begin: %s", err);
    CHECK(ddp_h5writer_append(w, img, lab, 2, err, sizeof err) == 0, "append: %s", err);
    CHECK(ddp_h5writer_end(w, err, sizeof err) == -1, "end with 2 of 5 must fail");
    CHECK(ddp_h5writer_append(w, img + 24, lab + 2, 3, err, sizeof err) == 0, "append: %s", err);
    CHECK(ddp_h5writer_append(w, img, lab, 1, err, sizeof err) == -1, "overflow must fail");
    CHECK(ddp_h5writer_end(w, err, sizeof err) == 0, "end: %s", err);
    CHECK(ddp_h5writer_begin(w, "/test", 2, 1, (int64_t[3]){12, 0, 0}, DDP_H5DTYPE_UINT8, 10, err,
                             sizeof err) == 0,
          "begin: %s", err);
    CHECK(ddp_h5writer_append(w, img, (int32_t[2]){3, 10}, 2, err, sizeof err) == -1 &&
              strstr(err, "label 10"),
          "label 10 of 10 classes must fail: %s", err);
    CHECK(ddp_h5writer_append(w, img, (int32_t[2]){3, 9}, 2, err, sizeof err) == 0, "%s", err);
    CHECK(ddp_h5writer_end(w, err, sizeof err) == 0, "end: %s", err);
    CHECK(ddp_h5writer_commit(w, err, sizeof err) == 0, "commit: %s", err);
    ddp_h5writer_destroy(w);
    CHECK(access(tmp, F_OK) != 0 && access(path, F_OK) == 0, "renamed to OUT");

    ddp_h5split *s = ddp_h5split_open(path, "/train", err, sizeof err);
    CHECK(s != NULL, "reopen: %s", err);
    if (s) {
        CHECK(ddp_h5split_classes(s) == 1000, "classes attr %d", ddp_h5split_classes(s));
        CHECK(!strcmp(ddp_h5split_labels_type(s), "int32"), "labels int32 above 256 classes");
        CHECK(ddp_h5split_labels(s)[4] == 400, "label 4");
        float out[12];
        CHECK(ddp_h5split_read(s, (int64_t[1]){4}, 1, out, err, sizeof err) == 0, "%s", err);
        CHECK(out[11] == (float)(uint8_t)(59 * 7) / 255.0f, "pixel");
        ddp_h5split_close(s);
    }
    s = ddp_h5split_open(path, "/test", err, sizeof err);
    CHECK(s && !strcmp(ddp_h5split_labels_type(s), "uint8") && ddp_h5split_classes(s) == 10,
          "test split uint8 labels: %s", err);
    ddp_h5split_close(s);
    char src[64];
    CHECK(ddp_h5data_source(path, src, sizeof src, err, sizeof err) == 0 &&
              !strcmp(src, "unit test"),
          "source `%s` %s", src, err);
    char **names = NULL;
    int ng = ddp_h5data_groups(path, &names, err, sizeof err);
    CHECK(ng == 2 && !strcmp(names[0], "/test") && !strcmp(names[1], "/train"), "groups %d", ng);
    ddp_h5data_free_names(names, ng);

    /* an abandoned writer leaves neither OUT nor OUT.tmp */
    snprintf(path, sizeof path, "%s/abandoned.h5", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    w = ddp_h5writer_create(path, "x", err, sizeof err);
    CHECK(w && ddp_h5writer_begin(w, "/train", 5, 1, dims, DDP_H5DTYPE_FLOAT32, 2, err,
                                  sizeof err) == 0,
          "begin: %s", err);
    ddp_h5writer_destroy(w);
    CHECK(access(tmp, F_OK) != 0 && access(path, F_OK) != 0, "abandoned leaves nothing");
    snprintf(path, sizeof path, "%s/no/such/dir/x.h5", dir);
    w = ddp_h5writer_create(path, "x", err, sizeof err);
    CHECK(!w && strstr(err, "no/such/dir/x.h5.tmp") && !strchr(err, '\n'),
          "create in a missing dir: %s", err);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--make-bad")) {
        make_bad(argv[2]);
        return 0;
    }
    char dir[] = "/tmp/ddp_h5read_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    good_files(dir);
    make_bad(dir);
    check_bad(dir);
    check_writer(dir);
    return check_report_dir("test_h5read", dir);
}
