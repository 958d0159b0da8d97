/* weights.c - /model tensors in HDF5. See weights.h. */
#include "nn/weights.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/util.h"

static void dims_str(int ndim, const hsize_t *d, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%llu", i ? ", " : "",
                                 (unsigned long long)d[i]);
    if (used < len)
        snprintf(buf + used, len - used, "%s)", ndim == 1 ? "," : "");
}

/* errno found in an HDF5 error description ("..., errno = 28, error message = ..."). */
struct h5_reason {
    int sys_errno;
    char inner[200];
};

static herr_t walk_reason(unsigned n, const H5E_error2_t *e, void *data)
{
    struct h5_reason *r = data;
    const char *p = e->desc ? strstr(e->desc, "errno = ") : NULL;
    if (p && !r->sys_errno)
        r->sys_errno = atoi(p + 8);
    if (n == 0 && e->desc)
        snprintf(r->inner, sizeof r->inner, "%s", e->desc);
    return 0;
}

const char *ddp_h5_error_reason(char *buf, size_t len)
{
    struct h5_reason r = {0, ""};
    int saved = errno;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_reason, &r);
    if (r.sys_errno > 0)
        snprintf(buf, len, "%s", strerror(r.sys_errno));
    else if (saved == ENOSPC || saved == EDQUOT || saved == EIO || saved == EROFS)
        snprintf(buf, len, "%s", strerror(saved));
    else
        snprintf(buf, len, "%s", r.inner[0] ? r.inner : "HDF5 write failed");
    return buf;
}

/* One line: "FILE: cannot write WHAT: REASON; free space ..." (call right after the failure). */
static int write_failed(hid_t file, const char *what, char *err, size_t errlen)
{
    char why[256], name[1024] = "?";
    ddp_h5_error_reason(why, sizeof why);
    if (H5Fget_name(file, name, sizeof name) < 0)
        snprintf(name, sizeof name, "?");
    return ddp_err(err, errlen,
                   "%s: cannot write %s: %s; free space on that file system or "
                   "set [job] output elsewhere",
                   name, what, why);
}

int ddp_weights_write_group(hid_t file, const struct ddp_model *m, char *err, size_t errlen)
{
    int rc = -1;
    float *host = NULL, *hbuf = NULL;
    hid_t g = H5Gcreate2(file, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return write_failed(file, "group /model", err, errlen);
    host = ddp_malloc(sizeof(float) * (m->nparams ? m->nparams : 1));
    hbuf = ddp_malloc(sizeof(float) * (m->nbuffers ? m->nbuffers : 1));
    m->be->download(host, m->params, sizeof(float) * m->nparams);
    m->be->download(hbuf, m->buffers, sizeof(float) * m->nbuffers);
    for (int i = 0; i < m->ntensors; i++) {
        const struct ddp_tensor_info *t = &m->tensors[i];
        hsize_t dims[4];
        for (int d = 0; d < t->ndim; d++)
            dims[d] = (hsize_t)t->dims[d];
        hid_t sp = H5Screate_simple(t->ndim, dims, NULL);
        hid_t ds =
            H5Dcreate2(g, t->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        const float *src = (t->is_buffer ? hbuf : host) + t->off;
        herr_t st =
            ds < 0 ? -1 : H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, src);
        if (st < 0) {
            char what[DDP_MODEL_NAME_MAX + 8];
            snprintf(what, sizeof what, "/model/%s", t->name);
            write_failed(file, what, err, errlen);
        }
        if (ds >= 0)
            H5Dclose(ds);
        H5Sclose(sp);
        if (st < 0)
            goto fail;
    }
    for (int i = 0; i < m->nlayers; i++) { /* batchnorm step counters, scalar int64 */
        const struct ddp_layer *l = &m->layers[i];
        if (l->spec.kind != DDP_LAYER_BATCHNORM)
            continue;
        char name[DDP_MODEL_NAME_MAX];
        snprintf(name, sizeof name, "%s.num_batches_tracked", l->name);
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t ds = H5Dcreate2(g, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        herr_t st = ds < 0 ? -1
                           : H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                      &l->num_batches_tracked);
        if (st < 0) {
            char what[DDP_MODEL_NAME_MAX + 8];
            snprintf(what, sizeof what, "/model/%s", name);
            write_failed(file, what, err, errlen);
        }
        if (ds >= 0)
            H5Dclose(ds);
        H5Sclose(sp);
        if (st < 0)
            goto fail;
    }
    rc = 0;
fail:
    free(host);
    free(hbuf);
    H5Gclose(g);
    return rc;
}

/* Whether name is one of m's tensors or a batchnorm layer's num_batches_tracked. */
static int model_has(const struct ddp_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return 1;
    for (int i = 0; i < m->nlayers; i++) {
        const struct ddp_layer *l = &m->layers[i];
        size_t n = strlen(l->name);
        if (l->spec.kind == DDP_LAYER_BATCHNORM && strncmp(name, l->name, n) == 0 &&
            strcmp(name + n, ".num_batches_tracked") == 0)
            return 1;
    }
    return 0;
}

/* -1 naming the first entry of /model that is not one of m's tensors: a file of another
 * model (a larger one holds this model's tensors and more) is refused as such, as PyTorch's
 * load_state_dict refuses unexpected keys, instead of loading part of it or, for a
 * checkpoint, failing its checksum as if the file were damaged. */
static int refuse_extra(hid_t file, const char *path, const struct ddp_model *m, char *err,
                        size_t errlen)
{
    H5G_info_t info;
    if (H5Gget_info_by_name(file, "model", &info, H5P_DEFAULT) < 0)
        return ddp_err(err, errlen, "%s: /model is not a group", path);
    for (hsize_t i = 0; i < info.nlinks; i++) {
        char name[DDP_MODEL_NAME_MAX + 1], shape[96] = "(not a dataset)";
        ssize_t n = H5Lget_name_by_idx(file, "model", H5_INDEX_NAME, H5_ITER_INC, i, name,
                                       sizeof name, H5P_DEFAULT);
        if (n < 0)
            return ddp_err(err, errlen, "%s: cannot list /model", path);
        if (n < (ssize_t)sizeof name && model_has(m, name))
            continue;
        char dpath[DDP_MODEL_NAME_MAX + 8];
        snprintf(dpath, sizeof dpath, "model/%s", name);
        hid_t ds = n < (ssize_t)sizeof name ? H5Dopen2(file, dpath, H5P_DEFAULT) : -1;
        if (ds >= 0) {
            hid_t sp = H5Dget_space(ds);
            hsize_t d[8] = {0};
            int nd = H5Sget_simple_extent_ndims(sp);
            if (nd >= 0 && nd <= 8 && H5Sget_simple_extent_dims(sp, d, NULL) >= 0)
                dims_str(nd, d, shape, sizeof shape);
            H5Sclose(sp);
            H5Dclose(ds);
        }
        return ddp_err(err, errlen,
                       "%s: /model/%s%s %s is not a tensor of this job's model: the file holds "
                       "weights of a different model; give the job whose [model] layers wrote "
                       "it, or weights of this model",
                       path, name, n < (ssize_t)sizeof name ? "" : "...", shape);
    }
    return 0;
}

int ddp_weights_read_group(hid_t file, const char *path, struct ddp_model *m, char *err,
                           size_t errlen)
{
    int rc = -1;
    float *host = ddp_calloc(m->nparams ? m->nparams : 1, sizeof(float));
    float *hbuf = ddp_calloc(m->nbuffers ? m->nbuffers : 1, sizeof(float));
    m->be->download(hbuf, m->buffers, sizeof(float) * m->nbuffers);
    if (H5Lexists(file, "model", H5P_DEFAULT) <= 0) {
        ddp_err(err, errlen,
                "%s: no /model group; expected weights written by ddptrain "
                "(or h5py, one dataset per state_dict entry)",
                path);
        goto fail;
    }
    for (int i = 0; i < m->ntensors; i++) {
        const struct ddp_tensor_info *t = &m->tensors[i];
        char dpath[DDP_MODEL_NAME_MAX + 8], want[96], got[96];
        snprintf(dpath, sizeof dpath, "model/%s", t->name);
        hsize_t wd[4];
        for (int d = 0; d < t->ndim; d++)
            wd[d] = (hsize_t)t->dims[d];
        dims_str(t->ndim, wd, want, sizeof want);
        if (H5Lexists(file, dpath, H5P_DEFAULT) <= 0) {
            ddp_err(err, errlen, "%s: /%s missing; the model needs it with shape %s", path, dpath,
                    want);
            goto fail;
        }
        hid_t ds = H5Dopen2(file, dpath, H5P_DEFAULT);
        if (ds < 0) {
            ddp_err(err, errlen, "%s: /%s is not a dataset", path, dpath);
            goto fail;
        }
        hid_t sp = H5Dget_space(ds), ty = H5Dget_type(ds);
        int nd = H5Sget_simple_extent_ndims(sp);
        hsize_t gd[8] = {0};
        if (nd >= 0 && nd <= 8)
            H5Sget_simple_extent_dims(sp, gd, NULL);
        int ok = nd == t->ndim;
        for (int d = 0; ok && d < nd; d++)
            ok = gd[d] == wd[d];
        int is_float = H5Tget_class(ty) == H5T_FLOAT;
        herr_t st = -1;
        if (ok && is_float)
            st = H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                         (t->is_buffer ? hbuf : host) + t->off);
        H5Tclose(ty);
        H5Sclose(sp);
        H5Dclose(ds);
        if (!ok) {
            dims_str(nd > 0 && nd <= 8 ? nd : 0, gd, got, sizeof got);
            ddp_err(err, errlen, "%s: /%s has shape %s; the model's [model] layers need %s", path,
                    dpath, got, want);
            goto fail;
        }
        if (!is_float) {
            ddp_err(err, errlen, "%s: /%s is not floating point; expected float32", path, dpath);
            goto fail;
        }
        if (st < 0) {
            ddp_err(err, errlen, "%s: cannot read /%s", path, dpath);
            goto fail;
        }
        const float *v = (t->is_buffer ? hbuf : host) + t->off;
        for (size_t j = 0; j < t->n; j++)
            if (!isfinite(v[j])) {
                ddp_err(err, errlen, "%s: /%s holds a non-finite value at element %zu", path, dpath,
                        j);
                goto fail;
            }
    }
    if (refuse_extra(file, path, m, err, errlen) != 0)
        goto fail;
    for (int i = 0; i < m->nlayers; i++) { /* optional batchnorm counters */
        struct ddp_layer *l = &m->layers[i];
        char dpath[DDP_MODEL_NAME_MAX + 8];
        snprintf(dpath, sizeof dpath, "model/%s.num_batches_tracked", l->name);
        if (l->spec.kind != DDP_LAYER_BATCHNORM || H5Lexists(file, dpath, H5P_DEFAULT) <= 0)
            continue;
        hid_t ds = H5Dopen2(file, dpath, H5P_DEFAULT);
        int64_t v = 0;
        if (ds >= 0 && H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0)
            l->num_batches_tracked = v;
        if (ds >= 0)
            H5Dclose(ds);
    }
    m->be->upload(m->params, host, sizeof(float) * m->nparams);
    m->be->upload(m->buffers, hbuf, sizeof(float) * m->nbuffers);
    rc = 0;
fail:
    free(host);
    free(hbuf);
    return rc;
}

int ddp_weights_save(const char *path, const struct ddp_model *m, char *err, size_t errlen)
{
    char *tmp = ddp_file_tmp_path(path);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        char why[256];
        ddp_err(err, errlen,
                "%s: cannot create: %s; check the directory exists, is writable "
                "and has space",
                tmp, ddp_h5_error_reason(why, sizeof why));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    int rc = ddp_weights_write_group(f, m, err, errlen);
    if (rc == 0 && H5Fflush(f, H5F_SCOPE_LOCAL) < 0)
        rc = write_failed(f, "weights", err, errlen);
    if (H5Fclose(f) < 0 && rc == 0) {
        char why[256];
        rc = ddp_err(err, errlen,
                     "%s: cannot write weights: %s; free space on that file "
                     "system or set [job] output elsewhere",
                     tmp, ddp_h5_error_reason(why, sizeof why));
    }
    if (rc == 0)
        rc = ddp_file_commit(tmp, path, err, errlen);
    if (rc != 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

hid_t ddp_h5_open_read(const char *path, const char *what, char *err, size_t errlen)
{
    const char *kind = NULL;
    int fd = ddp_open_regular(path, &kind); /* never H5Fopen a FIFO: that blocks for good */
    if (fd < 0 && kind && strcmp(kind, "file") != 0)
        return ddp_err(err, errlen, "%s: is a %s; expected an HDF5 %s file", path, kind, what);
    if (fd < 0)
        return ddp_err(err, errlen, "%s: cannot read %s: %s", path, what, strerror(errno));
    close(fd);
    if (H5Fis_hdf5(path) <= 0)
        return ddp_err(err, errlen, "%s: not an HDF5 file (truncated or overwritten %s?)", path,
                       what);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_file_locking(fapl, 0, 1); /* shared file systems: no locks for readers */
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0)
        return ddp_err(err, errlen, "%s: cannot open: damaged %s", path, what);
    return f;
}

int ddp_weights_load(const char *path, struct ddp_model *m, char *err, size_t errlen)
{
    hid_t f = ddp_h5_open_read(path, "weights", err, errlen);
    if (f < 0)
        return -1;
    int rc = ddp_weights_read_group(f, path, m, err, errlen);
    H5Fclose(f);
    return rc;
}
