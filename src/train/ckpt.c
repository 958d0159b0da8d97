/* ckpt.c - checkpoint files. See ckpt.h. */
#include "train/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "nn/weights.h"
#include "core/fileio.h"
#include "core/h5attr.h"
#include "core/util.h"

#define CKPT_FORMAT "ddptrain-checkpoint"
#define CKPT_JOB_MAX (1 << 20)

/* Model selection's state (valsel.h): best (NaN before any evaluation), best_epoch,
 * since_best. */
static int attr_best(hid_t f, const struct ddp_ckpt_pos *pos)
{
    return ddp_h5attr_write(f, "best", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &pos->best) != 0 ||
                   ddp_h5attr_write_i64(f, "best_epoch", pos->best_epoch) != 0 ||
                   ddp_h5attr_write_i64(f, "since_best", pos->since_best) != 0
               ? -1
               : 0;
}

/* The model-selection attributes, or "no evaluation yet" (an older ddptrain wrote none). */
static void read_best(hid_t f, struct ddp_ckpt_pos *pos)
{
    if (ddp_h5attr_read_f64(f, "best", &pos->best) != 0)
        pos->best = NAN;
    if (ddp_h5attr_read_int(f, "best_epoch", &pos->best_epoch) != 0 || pos->best_epoch < 0)
        pos->best_epoch = 0;
    if (ddp_h5attr_read_int(f, "since_best", &pos->since_best) != 0 || pos->since_best < 0)
        pos->since_best = 0;
}

static int write_f32(hid_t loc, const char *name, const float *v, size_t n)
{
    hsize_t d = n;
    hid_t sp = H5Screate_simple(1, &d, NULL);
    hid_t ds = H5Dcreate2(loc, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t st = ds < 0 ? -1 : H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    if (ds >= 0)
        H5Dclose(ds);
    H5Sclose(sp);
    return st < 0 ? -1 : 0;
}

/* CRC-32 over the host copies of params, buffers, optimiser state and the position. */
static uint32_t checksum(const float *p, size_t np, const float *b, size_t nb, const float *s1,
                         const float *s2, size_t ns, const struct ddp_ckpt_pos *pos, int64_t t)
{
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32_z(c, (const Bytef *)p, np * sizeof(float));
    c = crc32_z(c, (const Bytef *)b, nb * sizeof(float));
    if (s1)
        c = crc32_z(c, (const Bytef *)s1, ns * sizeof(float));
    if (s2)
        c = crc32_z(c, (const Bytef *)s2, ns * sizeof(float));
    int64_t f[4] = {pos->epoch, pos->step, pos->cursor, t};
    c = crc32_z(c, (const Bytef *)f, sizeof f);
    return (uint32_t)c;
}

static int cmp_desc(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    const char *px = strrchr(x, '-'), *py = strrchr(y, '-');
    long long sx = px ? atoll(px + 1) : 0, sy = py ? atoll(py + 1) : 0;
    return sx < sy ? 1 : sx > sy ? -1 : strcmp(y, x);
}

int ddp_ckpt_list(const char *dir, char ***paths)
{
    *paths = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0, cap = 0;
    char **list = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "ckpt-", 5) != 0 || len < 9 ||
            strcmp(e->d_name + len - 3, ".h5") != 0)
            continue;
        if (n == cap)
            list = ddp_realloc(list, sizeof(char *) * (size_t)(cap = cap ? cap * 2 : 16));
        size_t need = strlen(dir) + len + 2;
        list[n] = ddp_malloc(need);
        snprintf(list[n], need, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n)
        qsort(list, (size_t)n, sizeof(char *), cmp_desc);
    *paths = list;
    return n;
}

void ddp_ckpt_free_list(char **paths, int n)
{
    for (int i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

int ddp_ckpt_save(const char *dir, const struct ddp_model *m, const struct ddp_optim *o,
                  const struct ddp_ckpt_pos *pos, const char *job_text, int keep, char *path_out,
                  size_t path_len, char *err, size_t errlen)
{
    if (ddp_mkdir_p(dir) != 0)
        return ddp_err(err, errlen, "%s: cannot create checkpoint directory: %s", dir,
                       strerror(errno));
    size_t plen = strlen(dir) + 32;
    char *path = ddp_malloc(plen);
    snprintf(path, plen, "%s/ckpt-%08lld.h5", dir, (long long)pos->step);
    char *tmp = ddp_file_tmp_path(path);
    const struct ddp_backend *be = m->be;
    float *hp = ddp_malloc(sizeof(float) * (m->nparams + 1));
    float *hb = ddp_malloc(sizeof(float) * (m->nbuffers + 1));
    float *s1 = o->state1 ? ddp_malloc(sizeof(float) * (o->n + 1)) : NULL;
    float *s2 = o->state2 ? ddp_malloc(sizeof(float) * (o->n + 1)) : NULL;
    be->download(hp, m->params, sizeof(float) * m->nparams);
    be->download(hb, m->buffers, sizeof(float) * m->nbuffers);
    if (s1)
        be->download(s1, o->state1, sizeof(float) * o->n);
    if (s2)
        be->download(s2, o->state2, sizeof(float) * o->n);
    int rc = -1;
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        char why[256];
        ddp_err(err, errlen,
                "%s: cannot create checkpoint: %s; check the directory is "
                "writable and has space",
                tmp, ddp_h5_error_reason(why, sizeof why));
        unlink(tmp);
        goto out;
    }
    static const char *optim_names[] = {"sgd", "adam", "adamw"};
    if (err && errlen)
        err[0] = '\0';
    int ok = ddp_weights_write_group(f, m, err, errlen) == 0;
    hid_t g = ok ? H5Gcreate2(f, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    ok = ok && g >= 0;
    if (ok && s1)
        ok = write_f32(g, "state1", s1, o->n) == 0;
    if (ok && s2)
        ok = write_f32(g, "state2", s2, o->n) == 0;
    if (g >= 0)
        H5Gclose(g);
    uint32_t crc = checksum(hp, m->nparams, hb, m->nbuffers, s1, s2, o->n, pos, o->t);
    ok = ok && ddp_h5attr_write_str(f, "format", CKPT_FORMAT) == 0 &&
         ddp_h5attr_write_i64(f, "version", DDP_CKPT_VERSION) == 0 &&
         ddp_h5attr_write_i64(f, "epoch", pos->epoch) == 0 &&
         ddp_h5attr_write_i64(f, "step", pos->step) == 0 &&
         ddp_h5attr_write_i64(f, "cursor", pos->cursor) == 0 &&
         ddp_h5attr_write_i64(f, "optim_t", o->t) == 0 &&
         ddp_h5attr_write_str(f, "optimizer", optim_names[o->kind]) == 0 &&
         ddp_h5attr_write_i64(f, "world_size", pos->world_size) == 0 &&
         ddp_h5attr_write_i64(f, "global_batch", pos->global_batch) == 0 &&
         ddp_h5attr_write_i64(f, "seed", pos->seed) == 0 &&
         ddp_h5attr_write_i64(f, "train_ms", pos->train_ms) == 0 &&
         ddp_h5attr_write_str(f, "job", job_text ? job_text : "") == 0 &&
         ddp_h5attr_write_i64(f, "checksum", crc) == 0 && attr_best(f, pos) == 0;
    if (ok && pos->conv_algorithms && pos->conv_algorithms[0])
        ok = ddp_h5attr_write_str(f, "conv_algorithms", pos->conv_algorithms) == 0;
    char why[256] = "";
    if (ok && H5Fflush(f, H5F_SCOPE_LOCAL) < 0) /* surfaces a full disk with its reason */
        ok = 0;
    if (!ok)
        ddp_h5_error_reason(why, sizeof why);
    if (H5Fclose(f) < 0 && ok) {
        ok = 0;
        ddp_h5_error_reason(why, sizeof why);
    }
    if (!ok) {
        if (!err || !err[0] || strstr(err, "cannot write") == NULL)
            ddp_err(err, errlen,
                    "%s: cannot write checkpoint: %s; free space on that file "
                    "system or set [job] output elsewhere",
                    tmp, why);
        unlink(tmp);
        goto out;
    }
    if (ddp_file_commit(tmp, path, err, errlen) != 0) {
        unlink(tmp);
        goto out;
    }
    if (path_out)
        snprintf(path_out, path_len, "%s", path);
    /* prune: keep the newest `keep` */
    char **list;
    int n = ddp_ckpt_list(dir, &list);
    for (int i = keep; i < n; i++)
        unlink(list[i]);
    ddp_ckpt_free_list(list, n);
    rc = 0;
out:
    free(hp);
    free(hb);
    free(s1);
    free(s2);
    free(tmp);
    free(path);
    return rc;
}

static int read_f32(hid_t f, const char *name, float *v, size_t n)
{
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
        return -1;
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0)
        return -1;
    hid_t sp = H5Dget_space(ds);
    hssize_t cnt = H5Sget_simple_extent_npoints(sp);
    herr_t st =
        cnt == (hssize_t)n ? H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) : -1;
    H5Sclose(sp);
    H5Dclose(ds);
    return st < 0 ? -1 : 0;
}

/* Format, version and training position of the open checkpoint f (pos->epoch, step, cursor;
 * the optimiser's step count t and the stored checksum). */
static int read_header(hid_t f, const char *path, struct ddp_ckpt_pos *pos, int64_t *t,
                       int64_t *crc_file, char *err, size_t errlen)
{
    char fmt[64];
    int64_t version = 0;
    if (ddp_h5attr_read_str(f, "format", fmt, sizeof fmt) != 0 || strcmp(fmt, CKPT_FORMAT) != 0)
        return ddp_err(err, errlen, "%s: format attribute is not %s: not a ddptrain checkpoint",
                       path, CKPT_FORMAT);
    if (ddp_h5attr_read_int(f, "version", &version) != 0 || version != DDP_CKPT_VERSION)
        return ddp_err(err, errlen,
                       "%s: checkpoint format version %lld; this ddptrain reads version %d", path,
                       (long long)version, DDP_CKPT_VERSION);
    if (ddp_h5attr_read_int(f, "epoch", &pos->epoch) ||
        ddp_h5attr_read_int(f, "step", &pos->step) ||
        ddp_h5attr_read_int(f, "cursor", &pos->cursor) || ddp_h5attr_read_int(f, "optim_t", t) ||
        ddp_h5attr_read_int(f, "checksum", crc_file))
        return ddp_err(err, errlen, "%s: training position attributes missing: damaged checkpoint",
                       path);
    if (pos->epoch < 0 || pos->step < 0 || pos->cursor < 0 || *t < 0)
        return ddp_err(err, errlen, "%s: negative training position: damaged checkpoint", path);
    return 0;
}

/* 0 when the checksum over the weights now in m, the optimiser state s1/s2 (ns values each,
 * NULL when absent) and the position matches the stored one; else -1 naming the file. */
static int verify_checksum(const char *path, const struct ddp_model *m, const float *s1,
                           const float *s2, size_t ns, const struct ddp_ckpt_pos *pos, int64_t t,
                           int64_t crc_file, char *err, size_t errlen)
{
    float *hp = ddp_malloc(sizeof(float) * (m->nparams + 1));
    float *hb = ddp_malloc(sizeof(float) * (m->nbuffers + 1));
    m->be->download(hp, m->params, sizeof(float) * m->nparams);
    m->be->download(hb, m->buffers, sizeof(float) * m->nbuffers);
    uint32_t crc = checksum(hp, m->nparams, hb, m->nbuffers, s1, s2, ns, pos, t);
    free(hp);
    free(hb);
    if ((int64_t)crc == crc_file)
        return 0;
    return ddp_err(err, errlen,
                   "%s: checksum mismatch (stored %08llx, computed %08x): the file is damaged; "
                   "use an older checkpoint",
                   path, (unsigned long long)crc_file, crc);
}

int ddp_ckpt_load(const char *path, struct ddp_model *m, struct ddp_optim *o,
                  struct ddp_ckpt_pos *pos, char *err, size_t errlen)
{
    hid_t f = ddp_h5_open_read(path, "checkpoint", err, errlen);
    if (f < 0)
        return -1;
    int rc = -1;
    float *s1 = NULL, *s2 = NULL;
    /* a failed load leaves the model as it was (resume = auto then tries an older file) */
    float *keep_p = ddp_malloc(sizeof(float) * (m->nparams + 1));
    float *keep_b = ddp_malloc(sizeof(float) * (m->nbuffers + 1));
    m->be->download(keep_p, m->params, sizeof(float) * m->nparams);
    m->be->download(keep_b, m->buffers, sizeof(float) * m->nbuffers);
    char oname[16];
    int64_t crc_file = -1, t = 0;
    memset(pos, 0, sizeof *pos);
    if (read_header(f, path, pos, &t, &crc_file, err, errlen) != 0)
        goto out;
    if (ddp_h5attr_read_str(f, "optimizer", oname, sizeof oname)) {
        ddp_err(err, errlen, "%s: optimizer attribute missing: damaged checkpoint", path);
        goto out;
    }
    ddp_h5attr_read_int(f, "world_size", &pos->world_size);
    ddp_h5attr_read_int(f, "global_batch", &pos->global_batch);
    ddp_h5attr_read_int(f, "seed", &pos->seed);
    if (ddp_h5attr_read_int(f, "train_ms", &pos->train_ms) != 0 || pos->train_ms < 0)
        pos->train_ms = 0; /* written by an older ddptrain */
    read_best(f, pos);
    static const char *optim_names[] = {"sgd", "adam", "adamw"};
    if (strcmp(oname, optim_names[o->kind]) != 0) {
        ddp_err(err, errlen,
                "%s: saved with optimizer %s, but the job uses %s; resume with the "
                "same [optim] name or set [checkpoint] resume = never",
                path, oname, optim_names[o->kind]);
        goto out;
    }
    if (ddp_weights_read_group(f, path, m, err, errlen) != 0)
        goto out;
    if (o->state1) {
        s1 = ddp_malloc(sizeof(float) * (o->n + 1));
        if (read_f32(f, "optim/state1", s1, o->n) != 0) {
            ddp_err(err, errlen, "%s: /optim/state1 missing or of the wrong size (%zu expected)",
                    path, o->n);
            goto out;
        }
    }
    if (o->state2) {
        s2 = ddp_malloc(sizeof(float) * (o->n + 1));
        if (read_f32(f, "optim/state2", s2, o->n) != 0) {
            ddp_err(err, errlen, "%s: /optim/state2 missing or of the wrong size (%zu expected)",
                    path, o->n);
            goto out;
        }
    }
    if (verify_checksum(path, m, s1, s2, o->n, pos, t, crc_file, err, errlen) != 0)
        goto out;
    if (s1)
        m->be->upload(o->state1, s1, sizeof(float) * o->n);
    if (s2)
        m->be->upload(o->state2, s2, sizeof(float) * o->n);
    o->t = t;
    rc = 0;
out:
    if (rc != 0) {
        m->be->upload(m->params, keep_p, sizeof(float) * m->nparams);
        m->be->upload(m->buffers, keep_b, sizeof(float) * m->nbuffers);
    }
    free(keep_p);
    free(keep_b);
    free(s1);
    free(s2);
    H5Fclose(f);
    return rc;
}

int ddp_ckpt_read_job(const char *path, char **job_text, int64_t *global_batch, char *err,
                      size_t errlen)
{
    *job_text = NULL;
    *global_batch = 0;
    hid_t f = ddp_h5_open_read(path, "checkpoint", err, errlen);
    if (f < 0)
        return -1;
    int rc = -1;
    size_t n = ddp_h5attr_str_size(f, "job");
    if (n == 0 || n > CKPT_JOB_MAX) {
        ddp_err(err, errlen, "%s: no readable job attribute", path);
        goto out;
    }
    char *buf = ddp_malloc(n + 1);
    if (ddp_h5attr_read_str(f, "job", buf, n + 1) != 0) {
        free(buf);
        ddp_err(err, errlen, "%s: job attribute unreadable", path);
        goto out;
    }
    ddp_h5attr_read_int(f, "global_batch", global_batch);
    *job_text = buf;
    rc = 0;
out:
    H5Fclose(f);
    return rc;
}

char *ddp_ckpt_read_conv(const char *path)
{
    hid_t f = ddp_h5_open_read(path, "checkpoint", NULL, 0);
    if (f < 0)
        return NULL;
    char *buf = ddp_malloc(DDP_CKPT_CONV_MAX + 1); /* fixed or variable length, cut there */
    if (ddp_h5attr_read_str(f, "conv_algorithms", buf, DDP_CKPT_CONV_MAX + 1) != 0) {
        free(buf);
        buf = NULL;
    }
    H5Fclose(f);
    return buf;
}

/* Optional flat float32 dataset `name` of n values into *v (malloc'd; NULL when absent).
 * Returns 0, or -1 when present with another size or unreadable. */
static int read_optional_f32(hid_t f, const char *name, size_t n, float **v)
{
    *v = NULL;
    if (H5Lexists(f, "optim", H5P_DEFAULT) <= 0 || H5Lexists(f, name, H5P_DEFAULT) <= 0)
        return 0;
    *v = ddp_malloc(sizeof(float) * (n + 1));
    return read_f32(f, name, *v, n);
}

int ddp_ckpt_load_weights(const char *path, struct ddp_model *m, char *err, size_t errlen)
{
    hid_t f = ddp_h5_open_read(path, "checkpoint or weights", err, errlen);
    if (f < 0)
        return -1;
    if (H5Aexists(f, "format") <= 0) { /* model.h5 or h5py weights: nothing to verify */
        int rc = ddp_weights_read_group(f, path, m, err, errlen);
        H5Fclose(f);
        return rc;
    }
    int rc = -1;
    float *s1 = NULL, *s2 = NULL;
    int64_t crc_file = -1, t = 0;
    struct ddp_ckpt_pos pos = {0};
    if (read_header(f, path, &pos, &t, &crc_file, err, errlen) != 0)
        goto out;
    if (ddp_weights_read_group(f, path, m, err, errlen) != 0)
        goto out;
    if (read_optional_f32(f, "optim/state1", m->nparams, &s1) != 0 ||
        read_optional_f32(f, "optim/state2", m->nparams, &s2) != 0) {
        ddp_err(err, errlen,
                "%s: /optim state of the wrong size (%zu expected): damaged "
                "checkpoint",
                path, m->nparams);
        goto out;
    }
    if (verify_checksum(path, m, s1, s2, m->nparams, &pos, t, crc_file, err, errlen) != 0)
        goto out;
    rc = 0;
out:
    free(s1);
    free(s2);
    H5Fclose(f);
    return rc;
}
