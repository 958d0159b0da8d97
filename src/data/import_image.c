/*
 * import_image.c - `ddptrain data imagefolder` (import.h): a tree of class folders of PNG
 * and JPEG files (torchvision's ImageFolder) into (N, C, H, W) uint8. The tree is listed
 * first (paths and labels in memory), then each image is decoded (image.h), checked or
 * resized to the common size and written, one piece of the split at a time.
 *
 * Legend: N images, C channels, H rows, W columns.
 */
#include "data/import.h"

#include "core/util.h"
#include "data/image.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char **path;
    int32_t *labels;
    int64_t n, cap;
} file_list;

typedef struct {
    const file_list *list;
    int64_t next;
    int channels, h, w, resize;
} image_reader;

/* Sorted, bytewise (the same order in every locale). */
static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names in dir (no hidden ones), sorted; want_dirs 1: folders only (other entries are an
 * error), 0: files only. Returns the count, or -1 with err. */
static int64_t list_dir(const char *dir, int want_dirs, char ***names, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return ddp_err(err, errlen, "%s: cannot open the folder: %s", dir, strerror(errno));
    int64_t n = 0, cap = 0;
    char **v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[8192];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) != 0 || (want_dirs && !S_ISDIR(st.st_mode)) ||
            (!want_dirs && !S_ISREG(st.st_mode))) {
            ddp_err(err, errlen, "%s: %s; expected %s", p,
                    want_dirs ? "not a folder" : "not a regular file",
                    want_dirs ? "one folder per class" : "image files only in a class folder");
            goto fail;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            v = ddp_realloc(v, (size_t)cap * sizeof *v);
        }
        v[n++] = ddp_strdup(p);
        if (n > DDP_H5_MAX_SAMPLES) {
            ddp_err(err, errlen, "%s: more than %lld entries", dir, (long long)DDP_H5_MAX_SAMPLES);
            goto fail;
        }
    }
    closedir(d);
    if (n)
        qsort(v, (size_t)n, sizeof *v, cmp_names);
    *names = v;
    return n;
fail:
    closedir(d);
    for (int64_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
    return -1;
}

static void free_names(char **v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Append path (taken) with label to l. */
static void push(file_list *l, char *path, int32_t label)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->path = ddp_realloc(l->path, (size_t)l->cap * sizeof *l->path);
        l->labels = ddp_realloc(l->labels, (size_t)l->cap * sizeof *l->labels);
    }
    l->path[l->n] = path;
    l->labels[l->n++] = label;
}

/* The base name of a path (after the last '/'). */
static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* List one tree root/<class>/<file> into train (and test by fraction). class_names, when
 * not NULL, fixes the numbering (a test tree): a class outside it is an error. Returns the
 * number of classes, or -1. */
static int list_tree(const char *root, char **class_names, int nclass_names, double fraction,
                     file_list *train, file_list *test, char ***classes_out, char *err,
                     size_t errlen)
{
    char **cls = NULL;
    int64_t nc = list_dir(root, 1, &cls, err, errlen);
    if (nc < 0)
        return -1;
    if (nc == 0 || nc > DDP_H5_MAX_CLASSES) {
        ddp_err(err, errlen, "%s: %lld class folders; expected 1 to %d (DIR/<class>/<image>)", root,
                (long long)nc, DDP_H5_MAX_CLASSES);
        goto fail;
    }
    for (int64_t c = 0; c < nc; c++) {
        int32_t label = (int32_t)c;
        if (class_names) {
            const char *name = base(cls[c]);
            label = -1;
            for (int k = 0; k < nclass_names && label < 0; k++)
                if (!strcmp(base(class_names[k]), name))
                    label = k;
            if (label < 0) {
                ddp_err(err, errlen,
                        "%s: class `%s` is not among the training classes; the "
                        "test tree must use the training tree's class folders",
                        cls[c], name);
                goto fail;
            }
        }
        char **f = NULL;
        int64_t nf = list_dir(cls[c], 0, &f, err, errlen);
        if (nf < 0)
            goto fail;
        if (nf == 0 && !class_names) {
            free(f);
            ddp_err(err, errlen, "%s: an empty class folder; put images in it or remove it",
                    cls[c]);
            goto fail;
        }
        int64_t nt = (int64_t)llround((double)nf * fraction);
        for (int64_t i = 0; i < nf; i++)
            push(i < nf - nt ? train : test, f[i], label);
        free(f);
    }
    *classes_out = cls;
    return (int)nc;
fail:
    free_names(cls, nc);
    return -1;
}

/* ddp_import_rows_fn: decode the next n images into (n, C, H, W). */
static int read_images(void *ctx, void *buf, int64_t n, char *err, size_t errlen)
{
    image_reader *r = ctx;
    uint8_t *out = buf;
    const int64_t plane = (int64_t)r->h * r->w;
    uint8_t *rs = r->resize ? ddp_malloc((size_t)(plane * r->channels)) : NULL;
    int rc = 0;
    for (int64_t k = 0; k < n && rc == 0; k++) {
        const char *path = r->list->path[r->next++];
        uint8_t *px = NULL;
        int h, w;
        rc = ddp_image_load(path, r->channels, &px, &h, &w, NULL, err, errlen);
        if (rc == 0 && !r->resize && (h != r->h || w != r->w))
            rc = ddp_err(err, errlen,
                         "%s: %d x %d pixels, but the first image has %d x %d; "
                         "give --resize HxW to bring all to one size",
                         path, h, w, r->h, r->w);
        const uint8_t *src = px;
        if (rc == 0 && r->resize) {
            ddp_image_resize(rs, r->h, r->w, px, h, w, r->channels);
            src = rs;
        }
        for (int64_t i = 0; rc == 0 && i < plane; i++) /* (H, W, C) -> (C, H, W) */
            for (int c = 0; c < r->channels; c++)
                out[(k * r->channels + c) * plane + i] = src[i * r->channels + c];
        free(px);
    }
    free(rs);
    return rc;
}

/* The class folders' names (their paths cls, taken) into *names: nc, or -1 with err when
 * one is no class name (not UTF-8, a control character). */
static int class_names(char **cls, int nc, char ***names, char *err, size_t errlen)
{
    for (int c = 0; c < nc; c++) {
        const char *bad = ddp_class_name_problem(base(cls[c]));
        if (bad) {
            ddp_err(err, errlen,
                    "%s: the class folder's name %s; class names are stored as UTF-8 text, "
                    "rename the folder",
                    cls[c], bad);
            free_names(cls, nc);
            return -1;
        }
        char *b = ddp_strdup(base(cls[c]));
        free(cls[c]);
        cls[c] = b;
    }
    *names = cls;
    return nc;
}

/* List the splits: DIR/train (+ DIR/test) or one tree with a test fraction. Returns the
 * number of classes or -1. */
static int list_splits(const ddp_imagefolder_spec *spec, file_list l[2], char ***names, char *err,
                       size_t errlen)
{
    char tr[4096], te[4096];
    struct stat st;
    char **cls = NULL, **tcls = NULL;
    file_list none = {0};
    snprintf(tr, sizeof tr, "%s/train", spec->dir);
    snprintf(te, sizeof te, "%s/test", spec->dir);
    if (stat(spec->dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ddp_err(err, errlen,
                       "%s: not a folder; expected DIR/train/<class>/<image> or "
                       "DIR/<class>/<image>",
                       spec->dir);
    int nc;
    if (stat(tr, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (spec->test_fraction > 0)
            return ddp_err(err, errlen,
                           "%s: has train/ (and test/) folders, so "
                           "--test-fraction does not apply; leave it out",
                           spec->dir);
        nc = list_tree(tr, NULL, 0, 0, &l[0], &none, &cls, err, errlen);
        if (nc > 0 && stat(te, &st) == 0 && S_ISDIR(st.st_mode)) {
            int r = list_tree(te, cls, nc, 0, &l[1], &none, &tcls, err, errlen);
            free_names(tcls, r > 0 ? r : 0);
            if (r < 0) {
                free_names(cls, nc);
                return -1;
            }
        }
    } else {
        nc = list_tree(spec->dir, NULL, 0, spec->test_fraction, &l[0], &l[1], &cls, err, errlen);
    }
    if (nc > 0 && l[0].n == 0) {
        free_names(cls, nc);
        return ddp_err(err, errlen,
                       "%s: no training images left (test fraction %g); lower "
                       "--test-fraction",
                       spec->dir, spec->test_fraction);
    }
    return nc > 0 ? class_names(cls, nc, names, err, errlen) : nc;
}

int ddp_import_imagefolder(const ddp_imagefolder_spec *spec, const ddp_import_opts *o,
                           ddp_import_summary *sum, char *err, size_t errlen)
{
    char **names = NULL;
    file_list l[2];
    image_reader r[2];
    ddp_import_split s[2];
    static const char *const group[2] = {"/train", "/test"};
    memset(l, 0, sizeof l);
    memset(s, 0, sizeof s);
    int rc = -1, gray = 0, h = 0, w = 0;
    int nc = list_splits(spec, l, &names, err, errlen);
    if (nc < 0)
        goto out;
    /* The first image fixes the channels (unless given) and the size (unless resized). */
    uint8_t *px = NULL;
    if (ddp_image_load(l[0].path[0], spec->channels ? spec->channels : 3, &px, &h, &w, &gray, err,
                       errlen) != 0)
        goto out;
    free(px);
    const int channels = spec->channels ? spec->channels : gray ? 1 : 3;
    if (spec->resize_h)
        h = spec->resize_h, w = spec->resize_w;
    if ((int64_t)channels * h * w > DDP_H5_MAX_SAMPLE_ELEMS) {
        ddp_err(err, errlen,
                "%s: %d x %d x %d elements a sample, above %lld; give a smaller "
                "--resize",
                l[0].path[0], channels, h, w, (long long)DDP_H5_MAX_SAMPLE_ELEMS);
        goto out;
    }
    const int nsplits = l[1].n > 0 ? 2 : 1;
    for (int k = 0; k < nsplits; k++) {
        r[k] = (image_reader){
            .list = &l[k], .channels = channels, .h = h, .w = w, .resize = spec->resize_h > 0};
        s[k] = (ddp_import_split){.group = group[k],
                                  .images_name = spec->dir,
                                  .labels_name = spec->dir,
                                  .n = l[k].n,
                                  .rank = 3,
                                  .dims = {channels, h, w},
                                  .dtype = DDP_H5DTYPE_UINT8,
                                  .labels = l[k].labels,
                                  .read = read_images,
                                  .ctx = &r[k]};
    }
    ddp_import_opts named = *o;
    named.classes = nc;
    named.names = names;
    named.nnames = nc;
    /* a class folder may be empty in test/ only: every class has a training image */
    rc = ddp_import_write(&named, s, nsplits, sum, err, errlen);
out:
    free_names(names, nc > 0 ? nc : 0);
    for (int k = 0; k < 2; k++) {
        free_names(l[k].path, l[k].n);
        free(l[k].labels);
    }
    return rc;
}
